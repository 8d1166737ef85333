"""experiments/faced_objects.py: the objects the agent faces in go-to demonstrations against the steps that complete
a goal, and a labelling's goal counts against the mission's and against the objects faced; bad input is one line
before anything is written."""

from __future__ import annotations

import json

import faced_objects
import gymnasium as gym
import pytest
from datasets import Dataset
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

from msvae_hf.data.collator import decode_frames
from msvae_hf.data.demos import load_demos, make_demos
from msvae_hf.envs.missions import completed_goals, goal_count

LEVEL = "BabyAI-GoToSeqLocal-v0"
_ONE = "go to the red ball"
SAID = {1: _ONE, 2: f"{_ONE} and {_ONE}", 3: f"{_ONE} and {_ONE}, then {_ONE}",
        4: f"{_ONE} and {_ONE}, then {_ONE} and {_ONE}"}  # a mission of each number of goals


@pytest.fixture(scope="module")
def goto_demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos") / "gotoseqlocal"
    make_demos(LEVEL, {"paired": 24, "unpaired": 4, "valid": 4, "test": 4}, out, command="test_faced_objects")
    return out


def _labelling(folder, rows, labels):
    Dataset.from_dict({"level": [LEVEL] * len(labels), "seed": rows["seed"], "actions": rows["actions"],
                       "instruction": labels}).save_to_disk(folder)
    return folder


def test_facings_are_the_objects_the_frames_show_ahead(goto_demos):
    """The objects named are those each demonstration's own frames show in the cell ahead (minigrid's view: the
    agent at (3, 6), facing up), the start's frame for step -1 and step t's for step t - 1; the last action faces
    the last goal; every goal step is among the facings."""
    env = gym.make(LEVEL)
    seen_some = False
    for row in load_demos(goto_demos)["paired"]:
        found = faced_objects.facings(env, row["seed"], row["actions"])
        frames = decode_frames(row["observations"])
        ahead = {t - 1: (IDX_TO_OBJECT[int(f[3, 5, 0])], IDX_TO_COLOR[int(f[3, 5, 1])])
                 for t, f in enumerate(frames) if IDX_TO_OBJECT[int(f[3, 5, 0])] in ("door", "key", "ball", "box")}
        last = len(row["actions"]) - 1
        assert {step: obj[:2] for step, _, obj in found if step < last} == ahead
        steps = [step for step, _ in completed_goals(env, row["seed"], row["actions"], demonstration=True)]
        assert set(steps) <= {step for step, _, _ in found} and steps[-1] == last
        assert all((action is None) == (step == -1) for step, action, _ in found)
        seen_some |= len(ahead) > len(steps)
    assert seen_some  # some demonstration faces an object that is no goal's


def test_report_and_labels_scored_against_mission_and_facings(goto_demos, tmp_path, capsys):
    out = tmp_path / "faced" / "demos.json"
    report = faced_objects.main(["--demos", str(goto_demos), "--episodes", "20", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["episodes"] == 20 and sum(g["episodes"] for g in report["by_goal_count"].values()) == 20
    assert "labels" not in report and capsys.readouterr().out.startswith("20 episodes")
    assert 0 < report["faces_other_object"] < 1 and set(report["by_goal_count"]) <= {"1", "2", "3", "4"}

    rows = load_demos(goto_demos)["paired"].select(range(20))
    env = gym.make(LEVEL)
    faced = [len({obj for _, _, obj in faced_objects.facings(env, r["seed"], r["actions"])}) for r in rows]
    truth = [goal_count(m) for m in rows["instruction"]]
    assert report["distinct_faced_is_goal_count"] == sum(f == t for f, t in zip(faced, truth)) / 20
    steps = [len({s for s, _ in completed_goals(env, r["seed"], r["actions"])}) for r in rows]
    assert report["goal_steps_is_goal_count"] == sum(n == t for n, t in zip(steps, truth)) / 20
    assert report["goal_steps_is_goal_count"] < 1  # some step completes two goals: "the red ball and a ball"
    assert report["by_goal_count"]["1"]["goal_steps_is_goal_count"] == 1  # a one-goal mission completes at one step

    # the true missions as labels: every count right, the same share as the objects faced where both agree
    told = faced_objects.main(["--labels", str(_labelling(tmp_path / "true", rows, list(rows["instruction"])))])
    assert told["labels"]["goal_count_right"] == 1.0
    assert told["labels"]["goal_count_is_distinct_faced"] == report["distinct_faced_is_goal_count"]
    assert told["faces_other_object"] == report["faces_other_object"]
    # labels naming one object per object faced: every count the facings', right where the facings' is
    named = [SAID.get(n, SAID[1]) for n in faced]
    counted = faced_objects.main(["--labels", str(_labelling(tmp_path / "faced", rows, named))])["labels"]
    assert counted["goal_count_is_distinct_faced"] == sum(n in SAID for n in faced) / 20
    assert counted["goal_count_right"] == sum(n in SAID and n == t or n not in SAID and t == 1
                                              for n, t in zip(faced, truth)) / 20
    # labels the grammar cannot read are wrong on both counts, and where the counts differ
    unread = faced_objects.main(["--labels", str(_labelling(tmp_path / "unread", rows, ["go north"] * 20))])["labels"]
    assert unread["goal_count_right"] == unread["goal_count_is_distinct_faced"] == 0
    assert unread["where_they_differ"]["goal_count_right"] == 0


def test_bad_input_is_one_line_before_anything_is_written(goto_demos, tiny_demos, tmp_path):
    out = tmp_path / "faced.json"
    for flags, problem in ((["--demos", str(goto_demos), "--split", "unpaired"], "holds no missions"),
                           (["--demos", str(goto_demos), "--split", "nowhere"], "has no split 'nowhere'"),
                           (["--demos", str(goto_demos), "--episodes", "0"], "at least 1"),
                           (["--labels", str(tmp_path / "none")], "is not a labelling"),
                           (["--demos", str(tiny_demos)], "more than going to objects")):
        with pytest.raises(SystemExit, match=problem):
            faced_objects.main([*flags, "--out", str(out)])
        assert not out.exists()


def test_the_table_has_a_row_a_record(goto_demos, tmp_path):
    from result_tables.pairs_curve import table_faced_objects

    with pytest.raises(SystemExit, match="no faced-object record"):
        table_faced_objects("gotoseqlocal", root=tmp_path)
    level = tmp_path / "gotoseqlocal"
    faced_objects.main(["--demos", str(goto_demos), "--episodes", "8", "--out", str(level / "faced_objects.json")])
    rows = load_demos(goto_demos)["paired"].select(range(8))
    faced_objects.main(["--labels", str(_labelling(tmp_path / "true", rows, list(rows["instruction"]))),
                        "--out", str(level / "faced_objects_true.json")])
    lines = table_faced_objects("gotoseqlocal", root=tmp_path)
    assert len(lines) == 4 and lines[2].startswith("| none (the paired split's demonstrations) | 8 |")
    assert lines[2].endswith("| - | - | - | - | - |") and "steps completing a goal = goals %" in lines[0]
    steps = json.loads((level / "faced_objects.json").read_text())["goal_steps_is_goal_count"]
    assert lines[2].split(" | ")[4] == f"{100 * steps:.1f}"
    assert lines[3].startswith("| true | 8 |") and "| 100.0 |" in lines[3]
    # a labelling whose trajectories all face as many objects as their missions name: nothing to score where they differ
    record = json.loads((level / "faced_objects_true.json").read_text())
    record["labels"]["where_they_differ"] = dict.fromkeys(("goal_count_right", "goal_count_is_distinct_faced"))
    record["labels"]["where_they_differ"]["episodes"] = 0
    del record["goal_steps_is_goal_count"]  # a record without the steps' count shows "-" there
    (level / "faced_objects_agree.json").write_text(json.dumps(record))
    agree = next(line for line in table_faced_objects("gotoseqlocal", root=tmp_path) if line.startswith("| agree |"))
    assert agree.endswith("| 0 | - | - |") and agree.split(" | ")[4] == "-"
