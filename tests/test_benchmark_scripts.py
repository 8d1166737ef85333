"""The GPU benchmark script, run on the CPU with tiny models, as it must run before it goes to a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_stacked_script_runs_on_the_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "DEVICE": "cpu", "RUNS": "1 2", "PROCESSES": "2", "EPISODES": "8",
           "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", "benchmarks/gpu_stacked.sh", "--tiny", "--batch-size", "4", "--steps", "1",
                    "--warmup", "1"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    data = json.loads((tmp_path / "stacked_step.json").read_text())
    assert data["device"] == "cpu" and data["processes"]["processes"] == 2
    assert [s["runs"] for s in data["stacked"]] == [1, 2]
    assert all(s["updates_per_s"] > 0 for s in data["stacked"]) and set(data["stacked_over_processes"]) == {"1", "2"}
    assert "torch" in (tmp_path / "stacked_step.log").read_text()
