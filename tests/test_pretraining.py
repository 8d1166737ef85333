"""Self-supervised speaker pre-training on trajectories (msvae_hf.extensions.pretraining,
scripts/pretrain_speaker.py)."""

from __future__ import annotations

import pytest
import torch

from msvae_hf.data.demos import load_demos
from msvae_hf.extensions.pretraining import FRONT_CELL, front_cell_targets, pretrain_speaker_encoder
from msvae_hf.models.modeling_baselines import SpeakerModel


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
