"""Self-supervised speaker pre-training on trajectories (msvae_hf.extensions.pretraining,
scripts/pretrain_speaker.py)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY_COUNTS, TINY_MODEL, load_script, train_tiny

from msvae_hf.data.demos import load_demos
from msvae_hf.extensions.pretraining import FRONT_CELL, front_cell_targets, pretrain_speaker_encoder
from msvae_hf.modeling_baselines import SpeakerModel


def test_targets_are_the_front_cell_at_events_and_the_last_step():
    obs = torch.zeros(2, 4, 7, 7, 3, dtype=torch.uint8)
    for b in range(2):
        for t in range(4):
            obs[b, t, FRONT_CELL[0], FRONT_CELL[1]] = torch.tensor([5 + t, b + t, 0])
    obs[0, :, 3, 6] = 10  # the agent's own cell is not the target
    actions = torch.tensor([[2, 3, 0, 4], [5, 2, 1, 0]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    types, colours, events = front_cell_targets(obs, actions, mask)
    assert events.tolist() == [[False, True, False, True], [True, False, True, False]]
    assert types[0].tolist() == [5, 6, 7, 8] and colours[1].tolist() == [1, 2, 3, 4]


def test_pretraining_learns_and_touches_only_the_encoders(baseline_runs, tiny_demos):
    model = SpeakerModel.from_pretrained(baseline_runs["speaker"] / "best")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    losses = pretrain_speaker_encoder(model, load_demos(tiny_demos)["unpaired"], updates=30, batch_size=16)
    assert len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5])
    changed = {k.split(".")[0] for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"obs_encoder", "trajectory_encoder"}
    with pytest.raises(ValueError, match="fewer than one batch"):
        pretrain_speaker_encoder(model, load_demos(tiny_demos)["valid"], updates=1, batch_size=64)


def test_script_saves_a_speaker_that_training_starts_from(tiny_demos, tmp_path):
    out, config = tmp_path / "init", tmp_path / "tiny.json"
    config.write_text(json.dumps({"model": TINY_MODEL}))
    load_script("pretrain_speaker").main(["--demos", str(tiny_demos), "--split", "unpaired", "--updates", "3",
                                          "--batch-size", "8", "--config", str(config), "--out", str(out)])
    info = json.loads((out / "pretraining.json").read_text())
    assert info["trajectories"] == TINY_COUNTS["unpaired"] and info["updates"] == 3
    saved = SpeakerModel.from_pretrained(out)
    results = train_tiny("speaker", tmp_path / "run", tiny_demos, init_from=str(out), max_updates=1, eval_every=1,
                         checkpoint_every=1)
    assert results["test_bleu"] is not None
    assert saved.config.hidden_size == TINY_MODEL["hidden_size"]
    trained = SpeakerModel.from_pretrained(tmp_path / "run" / "best").config.to_dict()
    assert {k: v for k, v in saved.config.to_dict().items() if k != "_name_or_path"} == {
        k: v for k, v in trained.items() if k != "_name_or_path"}
    with pytest.raises(SystemExit, match="not empty"):
        load_script("pretrain_speaker").main(["--demos", str(tiny_demos), "--out", str(out)])
