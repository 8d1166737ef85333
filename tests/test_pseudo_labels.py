"""pseudo_labels: a speaker labels every unpaired trajectory (scripts/label_unpaired.py), and a follower
trains on the union of paired and pseudo-paired data (the speaker-follower baseline)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from conftest import TINY_COUNTS, TINY_LEVEL, load_script, train_tiny, tree_digest
from datasets import load_from_disk
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel

from msvae_hf.data import sampler
from msvae_hf.data.demos import load_demos
from msvae_hf.data.pseudo_labels import pseudo_labels_record, relabel_command, scored_labels
from msvae_hf.envs.missions import carries_out, demonstrates, goals, parse_mission, regenerate_missions, score_labels
from msvae_hf.evaluation.evaluate import describe_dataset
from msvae_hf.models.modeling_baselines import SpeakerModel
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training import loop as training
from msvae_hf.training import train_config
from msvae_hf.utils.runtime import cpu_model, provenance


@pytest.fixture(scope="module")
def pseudo(baseline_runs, tiny_demos, tmp_path_factory) -> Path:
    """The tiny speaker's labels of the 80 unpaired trajectories, written by the script."""
    out = tmp_path_factory.mktemp("pseudo") / "labels"
    load_script("label_unpaired").main(["--speaker", str(baseline_runs["speaker"] / "best"), "--demos", str(tiny_demos),
                         "--out", str(out), "--batch-size", "32"])
    return out


def test_one_instruction_per_unpaired_trajectory(pseudo, baseline_runs, tiny_demos):
    labelled = load_from_disk(str(pseudo))
    unpaired = load_demos(tiny_demos)["unpaired"]
    assert len(labelled) == len(unpaired) == TINY_COUNTS["unpaired"]
    assert list(labelled["seed"]) == list(unpaired["seed"]) and list(labelled["level"]) == list(unpaired["level"])
    assert list(labelled["actions"]) == list(unpaired["actions"])
    speaker = SpeakerModel.from_pretrained(baseline_runs["speaker"] / "best")
    assert list(labelled["instruction"]) == describe_dataset(speaker, unpaired, batch_size=7)  # greedy, in order
    tokenizer, speaker.tokenizer = speaker.tokenizer, None  # a tokenizer passed serves a model without one
    assert describe_dataset(speaker, unpaired, tokenizer, batch_size=7) == list(labelled["instruction"])
    MSVAETokenizer.from_grammar()(list(labelled["instruction"]))  # only grammar words
    info = json.loads((pseudo / "pseudo_labels.json").read_text())
    assert info["speaker"] == str(baseline_runs["speaker"] / "best")
    assert info["speaker_type"] == "msvae_speaker" and info["decoding"] == "greedy"
    assert info["num_labelled"] == TINY_COUNTS["unpaired"] and info["demos"] == str(tiny_demos)
    assert isinstance(info["wall_time_s"], float) and info["wall_time_s"] > 0
    assert info["commit"] == provenance()["commit"] and info["machine"]["device"] == "cpu"
    # the CPU that decides the labelling's rounding, by name and by the instruction set torch dispatched to
    machine = info["machine"]
    assert machine["cpu"] == cpu_model() and machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["sha256"] == json.loads((pseudo / "checksums.json").read_text())["sha256"]  # these labels


def test_refuses_non_empty_out(pseudo, baseline_runs, tiny_demos):
    before = tree_digest(pseudo)
    argv = ["--speaker", str(baseline_runs["speaker"] / "best"), "--demos", str(tiny_demos), "--out", str(pseudo)]
    with pytest.raises(SystemExit, match="not empty.*--overwrite"):
        load_script("label_unpaired").main(argv)
    assert tree_digest(pseudo) == before
    load_script("label_unpaired").main([*argv, "--overwrite", "--num-unpaired", "5"])
    assert len(load_from_disk(str(pseudo))) == 5 and not pseudo.with_name(pseudo.name + ".tmp").exists()
    record = json.loads((pseudo / "pseudo_labels.json").read_text())
    load_script("label_unpaired").main([*argv, "--overwrite"])  # back to the full labels for the other tests
    after = json.loads((pseudo / "pseudo_labels.json").read_text())
    assert after["command"] == shlex.join(["python", "scripts/label_unpaired.py", *argv, "--overwrite"])
    assert after["sha256"] != record["sha256"]  # other labels, another record
    assert after["label_accuracy"]["labels"] == TINY_COUNTS["unpaired"] and record["label_accuracy"]["labels"] == 5
    assert {**after, "num_labelled": 5, "wall_time_s": 0, "sha256": None, "label_accuracy": None} == \
        {**record, "command": record["command"].replace(" --num-unpaired 5", ""), "wall_time_s": 0, "sha256": None,
         "label_accuracy": None}


def test_refuses_an_output_folder_that_is_or_holds_an_input(baseline_runs, tiny_demos, tmp_path):
    """--out equal to --demos, or a folder holding it or the speaker, is refused even with --overwrite: nothing of
    the inputs is deleted."""
    before = tree_digest(tiny_demos)
    speaker = baseline_runs["speaker"] / "best"
    for out, relation in ((tiny_demos, "is"), (tiny_demos.parent, "holds"), (speaker.parent, "holds")):
        argv = ["--speaker", str(speaker), "--demos", str(tiny_demos), "--out", str(out), "--overwrite"]
        with pytest.raises(SystemExit, match=f"output folder .* {relation} the (demos|speaker) input"):
            load_script("label_unpaired").main(argv)
    assert tree_digest(tiny_demos) == before and (speaker / "config.json").is_file()
    with pytest.raises(SystemExit, match="lies inside the converted input"):
        load_script("make_demos").main(["--convert", str(tiny_demos), "--out", str(tiny_demos / "new"),
                                        "--overwrite"])
    assert tree_digest(tiny_demos) == before


def test_a_bad_speaker_or_count_is_one_line_before_anything_is_written(baseline_runs, tiny_demos, tmp_path):
    """A --speaker that is no model (a missing path, a run folder, the demos) is named as evaluate.py names it, and
    --num-unpaired below 1 is refused, each before the output folder is made."""
    out = tmp_path / "labels"
    run = baseline_runs["speaker"]
    for speaker, message in ((tmp_path / "nowhere", "no model at .*nowhere"),
                             (run, f"no model in {run}: did you mean {run / 'best'}"),
                             (tiny_demos, "it has no config.json")):
        with pytest.raises(SystemExit, match=message):
            load_script("label_unpaired").main(["--speaker", str(speaker), "--demos", str(tiny_demos),
                                                "--out", str(out)])
    for count in ("0", "-5"):
        with pytest.raises(SystemExit, match=rf"--num-unpaired\) must be at least 1, got {count}"):
            load_script("label_unpaired").main(["--speaker", str(run / "best"), "--demos", str(tiny_demos),
                                                "--out", str(out), "--num-unpaired", count])
    assert not out.exists()


def test_follower_checkpoint_is_not_a_speaker(baseline_runs, tiny_demos, tmp_path):
    out = tmp_path / "labels"
    with pytest.raises(SystemExit, match="msvae_follower model, which cannot speak"):
        load_script("label_unpaired").main(
            ["--speaker", str(baseline_runs["follower"] / "best"), "--demos", str(tiny_demos), "--out", str(out)]
        )
    assert not out.exists()


def test_follower_trains_on_the_union(pseudo, tiny_demos, tmp_path, monkeypatch):
    sizes: list[int] = []
    init = sampler.StepSampler.__init__

    def recording_init(self, dataset, *args, **kwargs):
        sizes.append(len(dataset))
        init(self, dataset, *args, **kwargs)

    monkeypatch.setattr(sampler.StepSampler, "__init__", recording_init)
    run = tmp_path / "speaker_follower"
    results = train_tiny("follower", run, tiny_demos, pseudo_labels=str(pseudo), max_updates=2, eval_every=2,
                         checkpoint_every=2)
    assert sizes == [TINY_COUNTS["paired"] + TINY_COUNTS["unpaired"]]  # one sampler: paired + pseudo-paired
    assert results["test"]["episodes"] > 0
    assert json.loads((run / "train_config.json").read_text())["pseudo_labels"] == str(pseudo)
    assert results["pseudo_labels"] == json.loads((pseudo / "pseudo_labels.json").read_text())  # the labels' cost

    cfg = train_config.load_config(None, {"model_type": "follower", "demos": str(tiny_demos),
                                      "pseudo_labels": str(pseudo), "num_paired": 10})
    paired = training.load_training_data(cfg)[0]
    unpaired = load_demos(tiny_demos)["unpaired"]
    labelled = load_from_disk(str(pseudo))
    assert len(paired) == 10 + len(labelled)
    assert list(paired["seed"])[10:] == list(unpaired["seed"])
    assert list(paired["instruction"])[10:] == list(labelled["instruction"])
    cut = train_config.load_config(None, {"model_type": "follower", "demos": str(tiny_demos),
                                          "pseudo_labels": str(pseudo), "num_paired": 10, "num_unpaired": 7})
    paired = training.load_training_data(cut)[0]  # the first 7 labelled trajectories, with their labels
    assert list(paired["seed"]) == list(load_demos(tiny_demos)["paired"]["seed"])[:10] + list(unpaired["seed"])[:7]
    assert list(paired["instruction"])[10:] == list(labelled["instruction"])[:7]
    with pytest.raises(ValueError, match="model_type: follower or speaker"):
        train_config.load_config(None, {"model_type": "msvae", "pseudo_labels": str(pseudo)})


def test_speaker_self_trains_on_the_union(pseudo, tiny_demos, tmp_path, monkeypatch):
    """A speaker with pseudo_labels reads paired + pseudo-paired rows, and learns the pseudo-labels too."""
    batches: list[list[str]] = []
    init = sampler.StepSampler.__init__
    sizes: list[int] = []

    def recording_init(self, dataset, *args, **kwargs):
        sizes.append(len(dataset))
        batches.append(list(dataset["instruction"]))
        init(self, dataset, *args, **kwargs)

    monkeypatch.setattr(sampler.StepSampler, "__init__", recording_init)
    run = tmp_path / "self_trained_speaker"
    results = train_tiny("speaker", run, tiny_demos, pseudo_labels=str(pseudo), max_updates=2, eval_every=2,
                         checkpoint_every=2)
    assert sizes == [TINY_COUNTS["paired"] + TINY_COUNTS["unpaired"]]
    assert batches[0][TINY_COUNTS["paired"]:] == list(load_from_disk(str(pseudo))["instruction"])
    assert "test_bleu" in results and (run / "best" / "config.json").is_file()


def test_a_damaged_labels_record_is_named_not_fatal(pseudo, tiny_demos, tmp_path):
    """The record beside the labels is metadata: a run on labels whose record is damaged trains, and its results
    name the problem."""
    copy = tmp_path / "labels"
    shutil.copytree(pseudo, copy)
    (copy / "pseudo_labels.json").write_text('{"speaker": ')
    problem = pseudo_labels_record(copy)["unreadable"]
    assert str(copy / "pseudo_labels.json") in problem and "not valid JSON" in problem
    assert "--speaker SPEAKER" in relabel_command(copy)  # the template, the record's command being lost
    results = train_tiny("follower", tmp_path / "run", tiny_demos, pseudo_labels=str(copy), max_updates=1,
                         eval_every=1, checkpoint_every=1)
    assert results["pseudo_labels"] == {"unreadable": problem}
    (copy / "pseudo_labels.json").unlink()
    assert pseudo_labels_record(copy) == {}


def test_the_record_scores_the_labels_against_the_true_missions(pseudo):
    """label_accuracy: the labels against each trajectory's mission as its level regenerates it from its seed."""
    accuracy = pseudo_labels_record(pseudo)["label_accuracy"]
    labelled = load_from_disk(str(pseudo))
    truth = regenerate_missions(TINY_LEVEL, labelled["seed"])
    assert {k: v for k, v in accuracy.items()
            if k not in ("seconds", "carried_out", "demonstrated", "by_goal_count")} == score_labels(
        labelled["instruction"], truth)
    assert accuracy["labels"] == TINY_COUNTS["unpaired"] and accuracy["seconds"] >= 0
    env = gym.make(TINY_LEVEL)
    rows = list(zip(labelled["seed"], labelled["actions"], labelled["instruction"], strict=True))
    carried = [carries_out(env, seed, actions, label) for seed, actions, label in rows]
    demonstrated = [demonstrates(env, seed, actions, label) for seed, actions, label in rows]
    assert accuracy["carried_out"] == sum(carried) / len(rows)
    assert accuracy["demonstrated"] == sum(demonstrated) / len(rows)
    # by the number of goals in each true mission: the same scores over each number's rows alone
    counts = [len(goals(parse_mission(mission))) for mission in truth]
    by_count = accuracy["by_goal_count"]
    assert list(by_count) == [str(n) for n in sorted(set(counts))]
    for n, scores in by_count.items():
        at = [i for i, count in enumerate(counts) if count == int(n)]
        assert scores == pytest.approx({
            "share": len(at) / len(rows), "mean_steps": sum(len(rows[i][1]) for i in at) / len(at),
            **score_labels([rows[i][2] for i in at], [truth[i] for i in at]),
            "carried_out": sum(carried[i] for i in at) / len(at),
            "demonstrated": sum(demonstrated[i] for i in at) / len(at)})
    assert sum(s["share"] * s["demonstrated"] for s in by_count.values()) == pytest.approx(accuracy["demonstrated"])
    with pytest.raises(ValueError, match="one each"):
        scored_labels(labelled, list(labelled["instruction"]), truth[1:])
    with pytest.raises(ValueError, match="one each"):
        scored_labels(labelled, list(labelled["instruction"])[1:], truth)


def test_training_never_regenerates_a_demonstrations_mission(pseudo, tiny_demos, tmp_path, monkeypatch):
    """The true missions of the trajectories training reads are for scoring labels only: with every level refusing
    to reset on a seed of the paired or unpaired split, a speaker-follower and MS-VAE train to the end (validation
    replays the valid pairs, whose missions are theirs to read, and never a training split's)."""
    from datasets import load_from_disk

    splits = load_from_disk(str(tiny_demos))
    trained = {int(seed) for split in ("paired", "unpaired") for seed in splits[split]["seed"]}
    assert trained.isdisjoint(int(seed) for seed in splits["valid"]["seed"])
    reset = RoomGridLevel.reset

    def refusing_reset(self, *, seed=None, **kwargs):
        if seed is not None and int(seed) in trained:
            raise AssertionError(f"a level was reset on training seed {seed} during training")
        return reset(self, seed=seed, **kwargs)

    monkeypatch.setattr(RoomGridLevel, "reset", refusing_reset)
    unpaired = int(splits["unpaired"]["seed"][0])
    with pytest.raises(AssertionError, match=f"training seed {unpaired}"):
        regenerate_missions(TINY_LEVEL, [unpaired])  # the guard is live
    follower = train_tiny("follower", tmp_path / "sf", tiny_demos, pseudo_labels=str(pseudo), max_updates=2,
                          eval_every=2, checkpoint_every=2)
    msvae = train_tiny("msvae", tmp_path / "msvae", tiny_demos, max_updates=2, eval_every=2, checkpoint_every=2)
    assert follower["test"]["episodes"] > 0 and msvae["test"]["episodes"] > 0
    assert "valid/demonstrated" in msvae["history"][-1]  # the valid pairs were replayed


def test_a_speaker_on_goal_steps_refuses_pseudo_labels_before_anything_is_written(pseudo, tiny_demos, tmp_path):
    """Goal steps are read where each pair's own mission is done: pseudo-labelled rows would hand their true
    missions' steps to training, so such a run is refused, one line, nothing written."""
    before = tree_digest(tmp_path)
    with pytest.raises(ValueError, match="pseudo-labelled rows have no mission to read it from"):
        train_tiny("speaker", tmp_path / "run", tiny_demos, model={"goal_steps_weight": 1.0},
                   pseudo_labels=str(pseudo))
    assert tree_digest(tmp_path) == before and not (tmp_path / "run").exists()
