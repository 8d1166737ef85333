"""experiments/paired_parts.py: M pairs and their parts, each part the steps up to a goal's completion with that goal's
words, judged against the level's verifier; a folder the training reads; bad input one line before anything is
written."""

from __future__ import annotations

import json

import gymnasium as gym
import paired_parts
import pytest
from label_by_parts import joined

from msvae_hf.data.demos import load_demos, with_goal_steps
from msvae_hf.data.pseudo_labels import label_replays
from msvae_hf.envs.levels import resolve_level
from msvae_hf.envs.missions import completed_goals, goal_count, goal_steps


def test_each_goal_is_completed_once_at_the_verifiers_step_and_the_parts_words_say_the_mission(tiny_demos):
    """The steps are goal_steps'; every goal of the mission is completed once; where each step completes one goal,
    the goals' words joined in the order they were completed are an instruction the pair's trajectory carries out."""
    pairs = load_demos(tiny_demos)["paired"]
    env = gym.make(resolve_level(pairs[0]["level"]))
    rows, labels = [], []
    try:
        for i, row in enumerate(pairs):
            found = completed_goals(env, row["seed"], row["actions"])
            assert [step for step, _ in found] == goal_steps(env, row["seed"], row["actions"])
            assert sum(len(words) for _, words in found) == goal_count(row["instruction"])
            if all(len(words) == 1 for _, words in found):
                rows.append(i)
                labels.append(joined([words[0] for _, words in found]))
    finally:
        env.close()
    assert len(rows) > len(pairs) // 2 and any(" then " in label for label in labels)
    assert all(replay["carried_out"] for replay in label_replays(pairs.select(rows), labels))


def test_writes_the_pairs_then_their_parts_and_the_other_splits_as_they_were(tiny_demos, tmp_path, capsys):
    out = tmp_path / "parts"
    splits = paired_parts.main(["--demos", str(tiny_demos), "--num-paired", "6", "--out", str(out)])
    source, written = load_demos(tiny_demos), load_demos(out)
    assert {name: len(split) for name, split in written.items()} == {
        name: len(splits[name]) for name in splits} and set(written) == set(source)
    for name in set(source) - {"paired"}:
        assert written[name]["seed"] == source[name]["seed"]
    pairs, parts = written["paired"].select(range(6)), written["paired"].select(range(6, len(written["paired"])))
    assert pairs.to_dict() == source["paired"].select(range(6)).to_dict()
    assert len(parts) > 0 and all(goal_count(text) == 1 for text in parts["instruction"] if " and " not in text)
    env = gym.make(resolve_level(pairs[0]["level"]))
    try:
        for pair in pairs:  # a multi-goal pair's parts, in order, are its trajectory, each with the goals it completes
            found = completed_goals(env, pair["seed"], pair["actions"])
            mine = [p for p in parts if p["seed"] == pair["seed"]]
            assert [p["instruction"] for p in mine] == ([" and ".join(w) for _, w in found] if len(found) > 1 else [])
            if mine:
                assert b"".join(p["observations"] for p in mine) == pair["observations"]
                assert sum((p["actions"] for p in mine), []) == pair["actions"]
    finally:
        env.close()
    stats = json.loads((out / "stats.json").read_text())
    assert stats["command"] == f"python experiments/paired_parts.py --demos {tiny_demos} --num-paired 6 --out {out}"
    assert (stats["num_paired"], stats["parts"], stats["splits"]["paired"]["episodes"]) == (6, len(parts),
                                                                                           len(written["paired"]))
    assert json.loads(capsys.readouterr().out)["parts"] == len(parts)
    with pytest.raises(ValueError, match="not a whole demonstration"):  # a part starts mid-episode: no replay
        with_goal_steps(written["paired"])
    with_goal_steps(pairs)


@pytest.mark.parametrize("num_paired, problem", [("0", "at least 1, got 0"), ("100000", "fewer than --num-paired")])
def test_bad_input_is_one_line_before_anything_is_written(tiny_demos, tmp_path, num_paired, problem):
    out = tmp_path / "parts"
    with pytest.raises(SystemExit, match=problem):
        paired_parts.main(["--demos", str(tiny_demos), "--num-paired", num_paired, "--out", str(out)])
    assert not out.exists()
    out.mkdir()
    (out / "kept.txt").write_text("mine")
    with pytest.raises(SystemExit, match="is not an empty folder"):
        paired_parts.main(["--demos", str(tiny_demos), "--num-paired", "2", "--out", str(out)])
    assert [p.name for p in out.iterdir()] == ["kept.txt"]
    with pytest.raises(SystemExit, match="is not an empty folder"):
        paired_parts.main(["--demos", str(tiny_demos), "--num-paired", "2", "--out", str(out / "kept.txt")])
    assert (out / "kept.txt").read_text() == "mine"
