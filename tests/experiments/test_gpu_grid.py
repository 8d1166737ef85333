"""experiments/gpu_grid.sh's archive: what a device call brings back of the cells it ran."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Stands in for reproduce.py: writes what cells write, under the folder gpu_grid.sh runs in.
FAKE_REPRODUCE = """
from pathlib import Path
for path in ["runs/lv/follower/best/model.safetensors", "runs/lv/follower/results.json",
             "runs/lv/msvae/best/model.safetensors", "runs/lv/msvae/best_speaker/model.safetensors",
             "runs/lv/msvae/checkpoints/step_200/optimizer.bin", "runs/lv/msvae/results.json",
             "runs/lv/logs/msvae_seed0.log", "runs/lv/msvae/best_note.txt",
             "results/lv/runs/msvae.json", "results/lv/reruns/follower_abc.json",
             "data/lv_100k/checksums.json", "data/lv_100k/unpaired/data-00000-of-00001.arrow"]:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("x")
"""


def archived(tmp_path: Path, **env: str) -> set[str]:
    root = tmp_path / "repo"
    (root / "experiments").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "gpu_grid.sh", root / "experiments" / "gpu_grid.sh")
    (root / "experiments" / "reproduce.py").write_text(FAKE_REPRODUCE)
    out = tmp_path / "out"
    subprocess.run(["bash", str(root / "experiments" / "gpu_grid.sh"), "lv"], check=True, capture_output=True,
                   env={**os.environ, "OUT": str(out), **env})
    with tarfile.open(out / "grid_lv.tar.gz") as tar:
        return set(tar.getnames())


def test_the_archive_keeps_records_logs_and_checksums_not_optimiser_states(tmp_path: Path) -> None:
    names = archived(tmp_path)
    assert "runs/lv/msvae/best/model.safetensors" in names and "runs/lv/msvae/best_speaker/model.safetensors" in names
    assert {"results/lv/runs/msvae.json", "results/lv/reruns/follower_abc.json", "runs/lv/logs/msvae_seed0.log",
            "data/lv_100k/checksums.json"} <= names
    assert not any("checkpoints" in name or name.endswith(".arrow") for name in names)


def test_weights_of_keeps_only_the_named_runs_weights(tmp_path: Path) -> None:
    names = archived(tmp_path, WEIGHTS_OF="follower speaker")
    assert "runs/lv/follower/best/model.safetensors" in names
    assert not any(name.startswith(("runs/lv/msvae/best/", "runs/lv/msvae/best_speaker/")) for name in names)
    assert {"runs/lv/msvae/results.json", "runs/lv/follower/results.json", "results/lv/runs/msvae.json",
            "runs/lv/msvae/best_note.txt"} <= names  # a file named best*, not a best*/ folder, stays


def test_empty_weights_of_keeps_no_weights(tmp_path: Path) -> None:
    names = archived(tmp_path, WEIGHTS_OF="")
    assert not any("/best/" in name or "/best_speaker/" in name for name in names)
    assert "runs/lv/follower/results.json" in names
