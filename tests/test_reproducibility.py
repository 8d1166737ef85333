"""Short MS-VAE runs against their committed records, so that a change that moves the package's training numerics
is seen when it lands (and the records it would move are named in the change), not when a user reruns a cell.

Two runs, each with its record in ``results/reproducibility/``:

- ``tiny_msvae``: the tests' tiny model (``tests/conftest.py``), 6 updates of batch 8;
- ``bosslocal_msvae_short``: BossLocal's MS-VAE cell (``configs/msvae.yaml`` for BossLocal: the paper's model sizes
  and weights) for 4 updates of 32 paired + 32 unpaired, from scratch, on the tiny demonstrations. Its products
  are large enough for the CPU's oneDNN linear layers (``msvae_hf.backends.linear``), which the tiny run never reaches.

A record holds the run's final weights: a sha256 of all their bytes, checked where the machine computes as the
recording one did (the same torch, CPU model, instruction set and linear backend), and per tensor the sum of
absolute values, checked everywhere to 1e-4 relative (another CPU rounds differently): a change to the math
fails on any machine, a change to rounding alone (e.g. another backend for the products) only on one that
computes as the recording one. Write them again, after a change
that moves numerics on purpose, with ``MSVAE_UPDATE_RECORD=1 python -m pytest tests/test_reproducibility.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import REPO, train_tiny
from model_helpers import key_bias_rows
from safetensors.torch import load_file

import msvae_hf.backends.linear as linear_ops
from msvae_hf.backends.linear import AVAILABLE as ONEDNN
from msvae_hf.training.loop import train
from msvae_hf.training.train_config import load_config
from msvae_hf.utils.runtime import cpu_model, provenance

RECORDS = REPO / "results" / "reproducibility"


def arithmetic() -> dict[str, str | bool]:
    """What decides the bits of a CPU run: torch's version, the CPU and the instruction set torch dispatches to,
    the linear layers' backend."""
    return {"torch": torch.__version__.split("+")[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(), "cpu": cpu_model(), "onednn_linear": ONEDNN}


def weights_record(path: Path) -> dict:
    weights = load_file(str(path))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode() + weights[name].numpy().tobytes())
    sums = {name: float(w[~key_bias_rows(name, w)].double().abs().sum()) for name, w in sorted(weights.items())}
    return {"sha256": digest.hexdigest(), "abs_sums": sums}


def moved_sums(now: dict, record: dict) -> dict[str, tuple[float, float]]:
    """The tensors whose sum of absolute values moved beyond 1e-4 relative (the tolerance across machines):
    name -> (now, recorded)."""
    return {key: (value, record["abs_sums"][key]) for key, value in now["abs_sums"].items()
            if abs(value - record["abs_sums"][key]) > 1e-4 * max(abs(record["abs_sums"][key]), 1e-8)}


def train_tiny_msvae(demos: Path, out: Path) -> None:
    train_tiny("msvae", out, demos, max_updates=6, eval_every=6, checkpoint_every=6)


SHORT_CELL = {"init_follower": None, "init_speaker": None, "num_paired": None, "batch_size": 32,
              "unpaired_batch_size": 32, "max_updates": 4, "eval_every": 4, "checkpoint_every": 4,
              "eval_episodes": 4, "eval_batch_size": 4, "bleu_examples": 8, "test_episodes": 4, "threads": 1}


def train_bosslocal_short(demos: Path, out: Path) -> None:
    config = load_config(str(REPO / "configs" / "msvae.yaml"),
                         {**SHORT_CELL, "level": "BossLocal", "demos": str(demos), "output_dir": str(out)})
    train(config)


RUNS = {
    "tiny_msvae": (train_tiny_msvae, "tests/conftest.py train_tiny('msvae', ...) on tiny_demos, 6 updates"),
    "bosslocal_msvae_short": (train_bosslocal_short, "configs/msvae.yaml --level BossLocal on tiny_demos, from "
                              "scratch, 4 updates of 32 + 32 (tests/test_reproducibility.py SHORT_CELL)"),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_short_msvae_run_matches_its_record(name, tiny_demos, tmp_path, monkeypatch):
    onednn_calls: list[int] = []
    apply = linear_ops._OneDNNLinear.apply

    def counted(x: torch.Tensor, *args: Any) -> torch.Tensor:
        onednn_calls.append(x.numel() // x.shape[-1])
        return apply(x, *args)

    monkeypatch.setattr(linear_ops._OneDNNLinear, "apply", counted)
    run, description = RUNS[name]
    run(tiny_demos, tmp_path / "run")
    now = {"arithmetic": arithmetic(), "commit": provenance()["commit"], "run": description,
           "onednn_forward_calls": len(onednn_calls),
           **weights_record(tmp_path / "run" / "best" / "model.safetensors")}
    record_path = RECORDS / f"{name}.json"
    if os.environ.get("MSVAE_UPDATE_RECORD"):
        RECORDS.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(now, indent=1) + "\n")
        pytest.skip(f"record written: {record_path}")
    record = json.loads(record_path.read_text())
    if ONEDNN:  # the tiny run's products are all under linear.MIN_ROWS rows; the short cell is here to reach them
        reached = bool(onednn_calls)
        assert reached == (name == "bosslocal_msvae_short"), f"{name}: oneDNN linear layers reached: {reached}"
    assert now["abs_sums"].keys() == record["abs_sums"].keys()
    moved = moved_sums(now, record)
    assert not moved, f"training numerics moved against {record_path.name} (now, recorded): {moved}"
    if now["arithmetic"] == record["arithmetic"]:
        assert now["onednn_forward_calls"] == record["onednn_forward_calls"]
        assert now["sha256"] == record["sha256"], "same arithmetic as the record, different bits"


@pytest.mark.skipif(not ONEDNN, reason="the linear layers have one backend here")
def test_the_short_cell_sees_its_linear_layers_change_backend(tiny_demos, tmp_path, monkeypatch):
    """The same cell with every product on ``F.linear`` (oneDNN's kernels round differently) misses the record's
    bits: the check sees a change that moves the products' backend."""
    record = json.loads((RECORDS / "bosslocal_msvae_short.json").read_text())
    if record["arithmetic"] != arithmetic():
        pytest.skip("this machine computes otherwise than the recording one; its bits are not comparable")
    monkeypatch.setattr(linear_ops, "MIN_ROWS", 1 << 40)
    train_bosslocal_short(tiny_demos, tmp_path / "run")
    now = weights_record(tmp_path / "run" / "best" / "model.safetensors")
    assert now["sha256"] != record["sha256"]
    # rounding alone: every tensor's sum of absolute values within the tolerance the other machines are held to
    assert not moved_sums(now, record)
