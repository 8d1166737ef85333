"""experiments/probe_follower.py: the follower's loss with its own and another pair's instruction, rollouts told
another episode's mission, and the table of both."""

from __future__ import annotations

import json
from pathlib import Path

import probe_follower
import pytest
import torch
from conftest import tiny_model

from msvae_hf.rollout import EpisodeResult


@pytest.fixture(scope="module")
def follower(tok):
    from msvae_hf import FollowerConfig, FollowerModel

    torch.manual_seed(0)
    model = FollowerModel(FollowerConfig(**{**tiny_model("follower"), "vocab_size": len(tok)})).eval()
    model.tokenizer = tok
    return model


def test_rolled_instructions_give_each_pair_the_one_before():
    batch = {"input_ids": torch.tensor([[1, 5], [1, 6], [1, 7]]), "attention_mask": torch.tensor([[1, 1], [1, 0],
                                                                                                  [1, 1]]),
             "actions": torch.tensor([[0], [1], [2]])}
    rolled = probe_follower.rolled_instructions(batch)
    assert rolled["input_ids"][:, 1].tolist() == [7, 5, 6]
    assert rolled["attention_mask"].tolist() == [[1, 1], [1, 1], [1, 0]]
    assert rolled["actions"] is batch["actions"]  # trajectories unchanged


def test_instruction_use_is_the_models_own_loss_per_step(follower, tiny_demos):
    from msvae_hf.data.collator import DemoCollator
    from msvae_hf.data.demos import load_demos
    from msvae_hf.evaluation import iterate_batches

    valid = load_demos(tiny_demos)["valid"]  # 16 pairs: batches of 5 leave one over, folded into the last
    result = probe_follower.instruction_use(follower, valid, batch_size=5)
    batch = next(iterate_batches(valid, DemoCollator(follower.tokenizer), len(valid)))
    with torch.no_grad():
        out = follower(**batch, reduction="none")  # summed over steps (loss_reduction "sum")
    steps = int(batch["trajectory_mask"].sum())
    assert result["pairs"] == 16 and result["steps"] == steps
    assert result["nll_own"] == pytest.approx(float(-out.log_likelihood.sum()) / steps, rel=1e-5)
    assert result["nll_other"] != pytest.approx(result["nll_own"], rel=1e-6)  # a random net reads its instruction
    assert 0 <= result["accuracy_own"] <= 1 and 0 <= result["accuracy_other"] <= 1


def test_a_follower_blind_to_its_instruction_scores_both_the_same(follower, tiny_demos, monkeypatch):
    from msvae_hf.data.demos import load_demos

    memory = follower.instruction_memory

    def blind(input_ids, attention_mask):
        m, mask = memory(input_ids, attention_mask)
        return torch.zeros_like(m), torch.ones_like(mask)

    monkeypatch.setattr(follower, "instruction_memory", blind)
    result = probe_follower.instruction_use(follower, load_demos(tiny_demos)["valid"], batch_size=8)
    assert result["nll_other"] == pytest.approx(result["nll_own"], rel=1e-6)
    assert result["accuracy_other"] == result["accuracy_own"]


def test_too_few_pairs_or_episodes_are_refused(follower, tiny_demos):
    from msvae_hf.data.demos import load_demos

    valid = load_demos(tiny_demos)["valid"]
    with pytest.raises(ValueError, match="at least two pairs"):
        probe_follower.instruction_use(follower, valid.select([0]))
    with pytest.raises(ValueError, match="batch_size must be at least 2"):
        probe_follower.instruction_use(follower, valid, batch_size=1)
    with pytest.raises(ValueError, match="at least two episodes"):
        probe_follower.rollouts_told_another_mission(follower, "BossLocal", 1)


class _ObeysOnlyItsMission:
    """A stand-in follower: an episode succeeds (in 10 steps) when it is told its env's own mission, else fails
    (in 20), unless told the same words; missions repeat every third seed."""

    def follow(self, level, seeds, instructions=None, batch_size=None):
        missions = [f"go to the {seed % 3} ball" for seed in seeds]
        told = missions if instructions is None else instructions
        return [EpisodeResult(seed, mission, [], 10 if ok else 20, float(ok), ok)
                for seed, mission, ok in ((s, m, t == m) for s, m, t in zip(seeds, missions, told, strict=True))]


def test_rollouts_told_another_mission_roll_the_missions_by_one():
    result = probe_follower.rollouts_told_another_mission(_ObeysOnlyItsMission(), "GoToSeqLocal", 6)
    # seeds 0..5 from the test seeds' start: missions cycle with period 3, so no two neighbours share words
    assert result == {"episodes": 6, "same_text": 0.0, "success_rate_own": 1.0, "mean_steps_own": 10.0,
                      "success_rate_other": 0.0, "mean_steps_other": 20.0}


def test_table_gives_each_row_its_seeds_mean(tmp_path: Path):
    from result_tables.studies import table_follower_probe

    def model(own: float, other: float) -> dict:
        return {"path": "x", "nll_own": 0.5, "nll_other": 0.6, "accuracy_own": 0.8, "accuracy_other": 0.7,
                "pairs": 10, "steps": 90, "rollouts": {"episodes": 500, "same_text": 0.0, "success_rate_own": own,
                                                       "mean_steps_own": 50.0, "success_rate_other": other,
                                                       "mean_steps_other": 60.0}}

    (tmp_path / "bosslocal").mkdir()
    (tmp_path / "bosslocal" / "probe.json").write_text(json.dumps({"demos": "d", "split": "valid", "models": {
        "follower, seed 0": model(0.44, 0.36), "msvae_v, seed 0": model(0.60, 0.58),
        "msvae_v, seed 1": model(0.64, 0.60)}}))
    lines = table_follower_probe("bosslocal", "probe", tmp_path)
    assert lines[2].startswith("| supervised follower (Table 2) / follower (Table 3) | 44.0 (n = 1) | 36.0 (n = 1) | "
                               "8.0 (n = 1) | 0.500 (n = 1) |")
    assert lines[3].startswith("| MS-VAE + V | 62.0 +- 2.8 (n = 2) | 59.0 +- 1.4 (n = 2) | 3.0 +- 1.4 (n = 2) |")
    assert lines[-1] == "\nRollouts on the first 500 test seeds each."
