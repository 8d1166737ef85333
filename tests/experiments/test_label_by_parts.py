"""experiments/label_by_parts.py: trajectories cut after goal steps into parts that are trajectories of their own, the
parts' descriptions joined into one instruction of the grammar, every labelling scored as label records are."""

from __future__ import annotations

import json

import label_by_parts
import pytest
import torch
from conftest import tiny_model
from result_tables.studies import table_labels_by_parts

from msvae_hf import FollowerConfig, FollowerModel, SpeakerConfig, SpeakerModel
from msvae_hf.data.collator import CELLS_PER_FRAME
from msvae_hf.data.demos import load_demos, with_goal_steps
from msvae_hf.data.pseudo_labels import scored_labels, true_missions
from msvae_hf.envs.missions import connectives, goal_count, goals, parse_mission
from msvae_hf.evaluation.evaluate import describe_dataset


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny speaker with a goal-step read-out, one without, and a follower (which cannot speak)."""
    from msvae_hf.models.tokenization_msvae import MSVAETokenizer

    tok = MSVAETokenizer.from_grammar()
    out = {}
    for name, model_class, config in (
            ("read_out", SpeakerModel, SpeakerConfig(**tiny_model("speaker"), goal_steps_weight=1.0)),
            ("plain", SpeakerModel, SpeakerConfig(**tiny_model("speaker"))),
            ("follower", FollowerModel, FollowerConfig(**tiny_model("follower")))):
        torch.manual_seed(0)
        model = model_class(config)
        model.tokenizer = tok
        out[name] = tmp_path_factory.mktemp(name) / "best"
        model.save_pretrained(out[name])
        tok.save_pretrained(out[name])
    return out


def test_parts_put_back_together_are_the_trajectory(tiny_demos):
    rows = load_demos(tiny_demos)["unpaired"]
    steps = list(with_goal_steps(rows)["goal_steps"])
    parts, owner = label_by_parts.cut(rows, steps)
    assert owner == sorted(owner) and len(parts) == sum(
        len(label_by_parts.part_ends(s, len(a))) for s, a in zip(steps, rows["actions"], strict=True))
    for i, row in enumerate(rows):
        mine = [parts[j] for j in range(len(parts)) if owner[j] == i]
        assert b"".join(p["observations"] for p in mine) == row["observations"]
        assert sum((p["actions"] for p in mine), []) == row["actions"]
        assert sum((p["directions"] for p in mine), []) == row["directions"]
        assert all(len(p["observations"]) == CELLS_PER_FRAME * len(p["actions"]) > 0 for p in mine)
        assert {(p["level"], p["seed"]) for p in mine} == {(row["level"], row["seed"])}
    assert label_by_parts.part_ends([4, 2, 2, 9, -1], 10) == [2, 4, 9]  # in order, once, the last step last


def test_joined_goals_are_one_instruction_carried_out_in_their_order():
    said = ["go to the red ball", "pick up a key", "open the blue door", "put the grey box next to a ball"]
    shapes = {1: "_", 2: "then(_,_)", 3: "then(and(_,_),_)", 4: "then(and(_,_),and(_,_))"}
    for n, shape in shapes.items():
        instr = parse_mission(label_by_parts.joined(said[:n]))
        assert connectives(instr) == shape
        assert goals(instr) == tuple(g for text in said[:n] for g in goals(parse_mission(text)))
    for n in (0, 5):
        with pytest.raises(ValueError, match=f"1 to 4 goals, not {n}"):
            label_by_parts.joined((said * 2)[:n])
    assert [label_by_parts.goals_in_order(t) for t in ("go to a key, then pick up the ball",
                                                       "go to a key after you pick up the ball",
                                                       "go to a key and pick up the ball", "open a door")] == [
        ["go to a key", "pick up the ball"], ["pick up the ball", "go to a key"],
        ["go to a key", "pick up the ball"], ["open a door"]]


def test_an_uncut_trajectory_is_labelled_with_its_whole_labels_last_goal(folders, tiny_demos):
    speaker = SpeakerModel.from_pretrained(folders["plain"])
    rows = load_demos(tiny_demos)["unpaired"]
    whole = describe_dataset(speaker, rows, batch_size=3)
    labels, counts = label_by_parts.labels_by_parts(speaker, rows, [{} for _ in range(len(rows))], whole, 5)
    assert labels == [label_by_parts.goals_in_order(text)[-1] for text in whole]
    assert counts == {"parts": len(rows), "whole_kept": 0}


def test_a_part_keeps_as_many_of_its_last_goals_as_its_end_completes(tiny_demos, monkeypatch):
    """A step completing two goals keeps the part's last two; the last part, unmarked, one; more than four goals in
    all give the whole label."""
    rows = load_demos(tiny_demos)["unpaired"].select(range(3))
    said = iter(["go to a key, then open a door", "pick up the ball and go to the red box",  # trajectory 0
                 "go to a key",  # trajectory 1, uncut
                 "a and b, then c", "d and e"])  # trajectory 2: five goals
    monkeypatch.setattr(label_by_parts, "describe_dataset",
                        lambda speaker, parts, batch_size: [next(said) for _ in range(len(parts))])
    length = [len(actions) for actions in rows["actions"]]
    marked = [{0: 2}, {}, {0: 3, length[2] - 1: 2}]
    labels, counts = label_by_parts.labels_by_parts(None, rows, marked, ["w0", "w1", "w2"])
    assert labels == ["go to a key and open a door, then go to the red box", "go to a key", "w2"]
    assert counts == {"parts": 5, "whole_kept": 1}


def test_the_verifiers_marks_count_every_goal_of_the_true_mission(tiny_demos):
    rows = load_demos(tiny_demos)["unpaired"]
    marks = label_by_parts.verifier_marks(rows)
    assert [sorted(m) for m in marks] == list(with_goal_steps(rows)["goal_steps"])
    assert [sum(m.values()) for m in marks] == [goal_count(mission) for mission in true_missions(rows)]


def test_writes_each_speakers_labellings_and_cuts(folders, tiny_demos, tmp_path, capsys):
    out = tmp_path / "parts" / "labels_by_parts.json"
    report = label_by_parts.main(["--demos", str(tiny_demos), "--num-unpaired", "6", "--model",
                                  f"a={folders['read_out']}", "--model", str(folders["plain"]), "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["num_unpaired"] == 6
    with_read_out, plain = report["models"]["a"], report["models"][str(folders["plain"])]
    assert set(with_read_out["labels"]) == {"whole", "verifier_steps", "read_out_steps"}
    assert set(plain["labels"]) == {"whole", "verifier_steps"}  # no read-out: no cut of its own
    rows = load_demos(tiny_demos)["unpaired"].select(range(6))
    whole = describe_dataset(SpeakerModel.from_pretrained(folders["plain"]), rows)
    assert plain["labels"]["whole"] == json.loads(json.dumps(scored_labels(rows, whole, true_missions(rows))))
    parts = sum(len(label_by_parts.part_ends(s, len(a)))
                for s, a in zip(with_goal_steps(rows)["goal_steps"], rows["actions"], strict=True))
    assert plain["cuts"]["verifier_steps"]["parts"] == parts
    assert len(capsys.readouterr().out.splitlines()) == 5  # a line a model and labelling
    (tmp_path / "bosslocal").mkdir()
    (tmp_path / "bosslocal" / "labels_by_parts.json").write_text(out.read_text())
    table = table_labels_by_parts("bosslocal", "labels_by_parts", tmp_path)
    assert len(table) == 2 + 5 and "| labels of 6 unpaired trajectories |" in table[0]
    verifier = with_read_out["labels"]["verifier_steps"]
    assert table[3].startswith(f"| a | by parts, cut at the verifier's goal steps | {parts} (0) | "
                               f"{100 * verifier['demonstrated']:.1f} | {100 * verifier['carried_out']:.1f} | ")
    assert table[5].startswith(f"| {folders['plain']} | whole trajectories | - | ")


@pytest.mark.parametrize("flags, problem", [(["--num-unpaired", "0"], "at least 1, got 0"),
                                            (["--model", "follower"], "cannot speak")])
def test_bad_input_is_one_line_before_anything_is_written(folders, tiny_demos, tmp_path, flags, problem):
    out = tmp_path / "labels_by_parts.json"
    model = folders["follower"] if "follower" in flags else folders["plain"]
    flags = [f for f in flags if f not in ("--model", "follower")]
    with pytest.raises(SystemExit, match=problem):
        label_by_parts.main(["--demos", str(tiny_demos), "--model", str(model), "--out", str(out), *flags])
    assert not out.exists()
