"""A short MS-VAE run against its committed record, so that a change that moves the package's training numerics is
seen when it lands (and the records it would move are named in the change), not when a user reruns a cell.

The record (``results/reproducibility/tiny_msvae.json``) holds the run's final weights: a sha256 of all their
bytes, checked where the machine computes as the recording one did (the same torch, CPU instruction set and
linear backend), and per tensor the sum of absolute values, checked everywhere to 1e-4 relative (another CPU
rounds differently). Write it again, after a change that moves numerics on purpose, with
``MSVAE_UPDATE_RECORD=1 python -m pytest tests/test_reproducibility.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import pytest
import torch
from conftest import train_tiny
from model_helpers import key_bias_rows
from safetensors.torch import load_file

from msvae_hf.ops.linear import AVAILABLE as ONEDNN

RECORD = Path(__file__).resolve().parents[1] / "results" / "reproducibility" / "tiny_msvae.json"


def arithmetic() -> dict[str, str | bool]:
    """What decides the bits of a CPU run: torch's version, the instruction set it dispatches to, the backend."""
    return {"torch": torch.__version__.split("+")[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "onednn_linear": ONEDNN}


def weights_record(path: Path) -> dict:
    weights = load_file(str(path))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode() + weights[name].numpy().tobytes())
    sums = {name: float(w[~key_bias_rows(name, w)].double().abs().sum()) for name, w in sorted(weights.items())}
    return {"sha256": digest.hexdigest(), "abs_sums": sums}


def test_a_tiny_msvae_run_matches_its_record(tiny_demos, tmp_path):
    train_tiny("msvae", tmp_path / "run", tiny_demos, max_updates=6, eval_every=6, checkpoint_every=6)
    now = {"arithmetic": arithmetic(), **weights_record(tmp_path / "run" / "best" / "model.safetensors"),
           "run": "tests/conftest.py train_tiny('msvae', ...) on tiny_demos, 6 updates"}
    if os.environ.get("MSVAE_UPDATE_RECORD"):
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(json.dumps(now, indent=1) + "\n")
        pytest.skip(f"record written: {RECORD}")
    record = json.loads(RECORD.read_text())
    assert now["abs_sums"].keys() == record["abs_sums"].keys()
    moved = {name: (value, record["abs_sums"][name]) for name, value in now["abs_sums"].items()
             if abs(value - record["abs_sums"][name]) > 1e-4 * max(abs(record["abs_sums"][name]), 1e-8)}
    assert not moved, f"training numerics moved against {RECORD.name} (now, recorded): {moved}"
    if now["arithmetic"] == record["arithmetic"]:
        assert now["sha256"] == record["sha256"], "same arithmetic as the record, different bits"
