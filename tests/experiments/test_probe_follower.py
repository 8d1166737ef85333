"""experiments/probe_follower.py: the follower's loss with its own and another pair's instruction, rollouts told
another episode's mission, and the table of both."""

from __future__ import annotations

import json
from pathlib import Path

import probe_follower
import pytest
import torch
from conftest import tiny_model

from msvae_hf.evaluation import evaluate as evaluation
from msvae_hf.evaluation.rollout import EpisodeResult


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
    rolled = evaluation.rolled_instructions(batch)
    assert rolled["input_ids"][:, 1].tolist() == [7, 5, 6]
    assert rolled["attention_mask"].tolist() == [[1, 1], [1, 1], [1, 0]]
    assert rolled["actions"] is batch["actions"]  # trajectories unchanged


def test_instruction_use_is_the_models_own_loss_per_step(follower, tiny_demos):
    from msvae_hf.data.collator import DemoCollator
    from msvae_hf.data.demos import load_demos
    from msvae_hf.evaluation.evaluate import iterate_batches

    valid = load_demos(tiny_demos)["valid"]  # 16 pairs: batches of 5 leave one over, folded into the last
    result = evaluation.instruction_use(follower, valid, batch_size=5)
    batch = next(iterate_batches(valid, DemoCollator(follower.tokenizer), len(valid)))
    with torch.no_grad():
        out = follower(**batch, reduction="none")  # summed over steps (loss_reduction "sum")
    steps = int(batch["trajectory_mask"].sum())
    assert result["pairs"] == 16 and result["steps"] == steps
    assert result["nll_own"] == pytest.approx(float(-out.log_likelihood.sum()) / steps, rel=1e-5)
    assert result["nll_other"] != pytest.approx(result["nll_own"], rel=1e-6)  # a random net reads its instruction
    assert 0 <= result["accuracy_own"] <= 1 and 0 <= result["accuracy_other"] <= 1


def _scores_pair_by_pair(model, rows, others) -> tuple[float, float, float]:
    """-log p(a | y, o) per real step, argmax accuracy and the share of same words, one pair at a time: pair j's
    trajectory under pair ``others[j]``'s instruction (each a batch of one, so no padding)."""
    from msvae_hf.data.collator import DemoCollator

    collate = DemoCollator(model.tokenizer)
    nll = correct = steps = same = 0.0
    for j, k in enumerate(others):
        pair, told = collate([rows[j]]), collate([rows[k]])
        with torch.no_grad():
            _, logits = model.action_log_likelihood(told["input_ids"], told["attention_mask"], pair["observations"],
                                                    pair["directions"], pair["actions"], pair["trajectory_mask"])
        for t in range(int(pair["trajectory_mask"].sum())):  # a batch of one: its real steps come first
            action = int(pair["actions"][0, t])
            nll -= float(logits[0, t].log_softmax(-1)[action])
            correct += int(logits[0, t].argmax()) == action
            steps += 1
        same += rows[j]["instruction"] == rows[k]["instruction"]
    return nll / steps, correct / steps, same / len(others)


def test_other_instruction_scores_against_a_pair_by_pair_computation(follower, tiny_demos):
    """16 pairs in batches of 5: bounds 0, 5, 10, 16 (the pair left over folded into the last batch, which rolls
    over six); each pair is told the instruction of the pair before it in its batch."""
    from msvae_hf.data.demos import load_demos

    valid = load_demos(tiny_demos)["valid"]
    rows = [valid[i] for i in range(len(valid))]
    others = [start + (j - 1) % (end - start) for start, end in ((0, 5), (5, 10), (10, 16)) for j in range(end - start)]
    assert others[:6] == [4, 0, 1, 2, 3, 9] and others[10:] == [15, 10, 11, 12, 13, 14]
    result = evaluation.instruction_use(follower, valid, batch_size=5)
    nll, accuracy, same = _scores_pair_by_pair(follower, rows, others)
    assert result["nll_other"] == pytest.approx(nll, rel=1e-5)
    assert result["accuracy_other"] == pytest.approx(accuracy, abs=1e-9)
    assert result["same_text"] == pytest.approx(same, abs=1e-9)
    nll, accuracy, same = _scores_pair_by_pair(follower, rows, range(len(rows)))
    assert result["nll_own"] == pytest.approx(nll, rel=1e-5)
    assert result["accuracy_own"] == pytest.approx(accuracy, abs=1e-9) and same == 1.0


def test_a_mean_reduction_follower_is_scored_per_step_as_the_sum_one(follower, tiny_demos):
    """The probe reads the logits, so the config's loss_reduction (the training objective's scale) moves nothing."""
    from msvae_hf import FollowerModel
    from msvae_hf.data.demos import load_demos

    config = follower.config.to_dict()
    config["loss_reduction"] = "mean"
    mean = FollowerModel(type(follower.config)(**{k: v for k, v in config.items() if k != "model_type"})).eval()
    mean.load_state_dict(follower.state_dict())
    mean.tokenizer = follower.tokenizer
    valid = load_demos(tiny_demos)["valid"]
    assert evaluation.instruction_use(mean, valid, batch_size=8) == pytest.approx(
        evaluation.instruction_use(follower, valid, batch_size=8), rel=1e-6)


def test_a_follower_blind_to_its_instruction_scores_both_the_same(follower, tiny_demos, monkeypatch):
    from msvae_hf.data.demos import load_demos

    memory = follower.instruction_memory

    def blind(input_ids, attention_mask):
        m, mask = memory(input_ids, attention_mask)
        return torch.zeros_like(m), torch.ones_like(mask)

    monkeypatch.setattr(follower, "instruction_memory", blind)
    result = evaluation.instruction_use(follower, load_demos(tiny_demos)["valid"], batch_size=8)
    assert result["nll_other"] == pytest.approx(result["nll_own"], rel=1e-6)
    assert result["accuracy_other"] == result["accuracy_own"]


def test_too_few_pairs_or_episodes_are_refused(follower, tiny_demos):
    from msvae_hf.data.demos import load_demos

    valid = load_demos(tiny_demos)["valid"]
    with pytest.raises(ValueError, match="at least two pairs"):
        evaluation.instruction_use(follower, valid.select([0]))
    with pytest.raises(ValueError, match="batch_size must be at least 2"):
        evaluation.instruction_use(follower, valid, batch_size=1)
    with pytest.raises(ValueError, match="at least two episodes"):
        probe_follower.rollouts_told_another_mission(follower, "BossLocal", 1)


class _ObeysOnlyItsMission:
    """A stand-in follower: an episode succeeds (in 10 steps) when it is told its env's own mission, else fails
    (in 20), unless told the same words; a seed's mission names ``ball(seed)`` (by default missions repeat every
    third seed). Keeps what each call was told."""

    def __init__(self, ball=lambda seed: seed % 3, mission=lambda colour: f"go to the {colour} ball") -> None:
        self.ball, self.mission = ball, mission
        self.told: list[list[str]] = []

    def follow(self, level, seeds, instructions=None, batch_size=None):
        missions = [self.mission(("red", "green", "blue", "purple", "yellow", "grey")[self.ball(seed) % 6])
                    for seed in seeds]
        told = missions if instructions is None else instructions
        self.told.append(list(told))
        return [EpisodeResult(seed, mission, [], 10 if ok else 20, float(ok), ok)
                for seed, mission, ok in ((s, m, t == m) for s, m, t in zip(seeds, missions, told, strict=True))]


def test_rollouts_told_another_mission_roll_the_missions_by_one():
    result = probe_follower.rollouts_told_another_mission(_ObeysOnlyItsMission(), "GoToSeqLocal", 6)
    # seeds 0..5 from the test seeds' start: missions cycle with period 3, so no two neighbours share words
    told = {"success_rate_own": 1.0, "mean_steps_own": 10.0, "success_rate_other": 0.0, "mean_steps_other": 20.0}
    assert result == {"episodes": 6, "same_text": 0.0, **told, "by_goal_count": {"1": {"episodes": 6, **told}}}


def test_by_goal_count_groups_the_episodes_by_their_own_missions_goals():
    """Seeds whose own mission has two goals and seeds whose mission has one, each group told both ways: the
    groups' episodes, success and steps are those of their seeds alone."""
    def mission(colour: str) -> str:
        return f"go to the {colour} ball" if colour in ("red", "blue") else f"go to the {colour} ball, then open a door"

    stub = _ObeysOnlyItsMission(ball=lambda seed: seed // 2, mission=mission)
    result = probe_follower.rollouts_told_another_mission(stub, "GoToSeqLocal", 8)
    other = [t == o for t, o in zip(stub.told[1], stub.told[0], strict=True)]  # told its own words after all
    missions = stub.told[0]
    groups = {"1": [i for i in range(8) if ", then" not in missions[i]],
              "2": [i for i in range(8) if ", then" in missions[i]]}
    assert all(groups.values())
    assert list(result["by_goal_count"]) == ["1", "2"]
    for n, at in groups.items():
        rate = sum(other[i] for i in at) / len(at)
        assert result["by_goal_count"][n] == {"episodes": len(at), "success_rate_own": 1.0, "mean_steps_own": 10.0,
                                              "success_rate_other": rate, "mean_steps_other": 20 - 10 * rate}


def test_each_episode_is_told_the_mission_of_the_seed_before_it():
    """Seed i is told seed i-1's mission and the first seed the last one's; with missions that change every
    second seed, half the episodes are told their own words (``same_text``) and succeed."""
    stub = _ObeysOnlyItsMission(ball=lambda seed: seed // 2)
    result = probe_follower.rollouts_told_another_mission(stub, "GoToSeqLocal", 6)
    own, told = stub.told
    assert told == [own[5], own[0], own[1], own[2], own[3], own[4]]
    assert result["same_text"] == 0.5 and result["success_rate_other"] == 0.5 and result["success_rate_own"] == 1.0


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


def test_limit_scores_the_splits_first_pairs(follower, tiny_demos, tmp_path: Path, monkeypatch):
    """--limit N: the split's first N pairs, scored as instruction_use scores them; under 2 is refused."""
    from msvae_hf.data.demos import load_demos

    follower.save_pretrained(tmp_path / "model")
    out = tmp_path / "probe.json"
    argv = ["probe_follower.py", "--demos", str(tiny_demos), "--split", "paired", "--limit", "6",
            "--model", f"tiny={tmp_path / 'model'}", "--out", str(out)]
    monkeypatch.setattr("sys.argv", argv)
    probe_follower.main()
    report = json.loads(out.read_text())
    expected = evaluation.instruction_use(follower, load_demos(tiny_demos)["paired"].select(range(6)))
    assert report["pairs"] == 6 and report["models"]["tiny"]["pairs"] == 6
    assert report["models"]["tiny"]["nll_own"] == pytest.approx(expected["nll_own"], abs=1e-6)
    monkeypatch.setattr("sys.argv", [*argv[:6], "1", *argv[7:]])
    with pytest.raises(SystemExit, match="--limit must be at least 2"):
        probe_follower.main()


def test_table_by_goals_gives_each_row_and_goal_count_its_seeds_mean(tmp_path: Path):
    from result_tables.studies import table_follower_probe_by_goals

    def model(by_count: dict[str, tuple[float, float]]) -> dict:
        return {"path": "x", "rollouts": {"episodes": 10, "by_goal_count": {
            n: {"episodes": 5, "success_rate_own": own, "mean_steps_own": 9.0, "success_rate_other": other,
                "mean_steps_other": 9.0} for n, (own, other) in by_count.items()}}}

    (tmp_path / "bosslocal").mkdir()
    (tmp_path / "bosslocal" / "probe.json").write_text(json.dumps({"demos": "d", "split": "valid", "models": {
        "msvae_v, seed 0": model({"2": (0.6, 0.2), "10": (0.4, 0.4)}), "msvae_v, seed 1": model({"2": (0.8, 0.2)})}}))
    lines = table_follower_probe_by_goals("bosslocal", "probe", tmp_path)
    assert lines[2] == "| MS-VAE + V | 2 | 5 | 70.0 +- 14.1 (n = 2) | 20.0 +- 0.0 (n = 2) | 50.0 +- 14.1 (n = 2) |"
    assert lines[3] == "| MS-VAE + V | 10 | 5 | 40.0 (n = 1) | 40.0 (n = 1) | 0.0 (n = 1) |"  # in number order
    (tmp_path / "bosslocal" / "old.json").write_text(json.dumps({"demos": "d", "split": "valid", "models": {
        "msvae_v, seed 0": {"path": "x", "rollouts": {"episodes": 10}}}}))
    with pytest.raises(SystemExit, match="no rollouts by goal count"):
        table_follower_probe_by_goals("bosslocal", "old", tmp_path)
