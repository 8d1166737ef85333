"""Keeping the share of a labelling's pseudo-labels it was surest of (scripts/keep_confident.py,
msvae_hf.extensions.pragmatics.label_scores, msvae_hf.data.pseudo_labels.keep_confident)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from conftest import load_script, tree_digest
from datasets import load_from_disk

from msvae_hf.data.collator import with_pseudo_labels, without_instructions
from msvae_hf.data.demos import load_demos
from msvae_hf.data.pseudo_labels import label_accuracy
from msvae_hf.extensions.pragmatics import label_scores, score_candidates


@pytest.fixture(scope="module")
def rescored(baseline_runs, tiny_demos, tmp_path_factory) -> Path:
    """The tiny speaker's labels of the unpaired trajectories, 3 candidates rescored by the tiny follower at
    lam 0.3."""
    out = tmp_path_factory.mktemp("rescored") / "labels"
    load_script("label_unpaired").main(["--speaker", str(baseline_runs["speaker"] / "best"), "--demos",
                                        str(tiny_demos), "--out", str(out), "--batch-size", "24", "--rescore-with",
                                        str(baseline_runs["follower"] / "best"), "--num-candidates", "3",
                                        "--lam", "0.3"])
    return out


def keep(*argv: str) -> None:
    load_script("keep_confident").main([*argv, "--batch-size", "7"])


def test_a_chosen_label_scores_as_the_labelling_chose_it(models, tiny_demos):
    """Each chosen label's score is the weighted score that chose it among its candidates (the highest), whatever
    the batching; at lam 1 without a rescorer, the speaker's own."""
    speaker, follower = models
    unpaired = load_demos(tiny_demos)["unpaired"]
    cands = score_candidates(speaker, follower, unpaired, num_candidates=3, batch_size=11)
    labelled = with_pseudo_labels(unpaired, cands.choose(0.3))
    best = (0.3 * cands.speaker_scores + 0.7 * cands.follower_scores).max(dim=1).values
    scores = label_scores(speaker, labelled, follower, 0.3, batch_size=7)
    assert scores.dtype == torch.float32 and scores.shape == (len(unpaired),)
    torch.testing.assert_close(scores, best, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(label_scores(speaker, labelled, follower, 0.3, batch_size=len(unpaired)), scores,
                               rtol=1e-5, atol=1e-5)
    alone = with_pseudo_labels(unpaired, cands.choose(1.0))
    torch.testing.assert_close(label_scores(speaker, alone, batch_size=5), cands.speaker_scores.max(dim=1).values,
                               rtol=1e-4, atol=1e-4)


def test_label_scores_leave_each_model_in_the_mode_it_was_in(models, tiny_demos):
    speaker, follower = models
    labelled = with_pseudo_labels(load_demos(tiny_demos)["unpaired"].select(range(6)), ["go to the red ball"] * 6)
    try:
        speaker.train()
        before = label_scores(speaker, labelled, follower, 0.3, batch_size=4)
        assert speaker.training and not follower.training
        torch.testing.assert_close(before, label_scores(speaker.eval(), labelled, follower, 0.3), rtol=1e-5,
                                   atol=1e-5)  # scored in eval mode either way (no dropout)
    finally:
        speaker.eval()


def test_label_scores_refuse_what_they_cannot_score(models, tiny_demos):
    speaker, follower = models
    unpaired = load_demos(tiny_demos)["unpaired"]
    with pytest.raises(ValueError, match="lam 0.5 weighs a rescorer's log p_F"):
        label_scores(speaker, with_pseudo_labels(unpaired, ["go to the red ball"] * len(unpaired)), lam=0.5)
    with pytest.raises(ValueError, match="has no 'instruction' column"):
        label_scores(speaker, without_instructions(unpaired), follower, 0.3)
    with pytest.raises(ValueError, match=r"lam must be in \[0, 1\], got 2"):
        label_scores(speaker, unpaired, follower, 2.0)


def test_keeps_the_labels_scored_highest_in_their_order_with_a_record(models, rescored, tmp_path):
    speaker, follower = models
    out = tmp_path / "kept"
    keep("--labels", str(rescored), "--fraction", "0.25", "--out", str(out))
    source = load_from_disk(str(rescored))
    scores = label_scores(speaker, source, follower, 0.3, batch_size=13).tolist()
    top = sorted(range(len(source)), key=lambda i: (-scores[i], i))[:round(0.25 * len(source))]
    kept = load_from_disk(str(out))
    assert list(kept["seed"]) == [source[i]["seed"] for i in sorted(top)]
    assert list(kept["instruction"]) == [source[i]["instruction"] for i in sorted(top)]
    assert list(kept["actions"]) == [source[i]["actions"] for i in sorted(top)]
    record = json.loads((out / "pseudo_labels.json").read_text())
    first = json.loads((rescored / "pseudo_labels.json").read_text())
    assert record["kept"]["from"] == str(rescored) and record["kept"]["from_sha256"] == first["sha256"]
    assert record["kept"]["from_command"] == first["command"]
    assert record["kept"]["fraction"] == 0.25 and record["kept"]["lam"] == 0.3
    assert record["kept"]["num_kept"] == record["num_labelled"] == len(top) == len(kept)
    assert record["kept"]["of"] == len(source)
    assert record["kept"]["threshold"] == pytest.approx(min(scores[i] for i in top), abs=1e-4)
    for field in ("speaker", "speaker_type", "demos", "decoding", "rescoring"):
        assert record[field] == first[field]  # which labelling the kept labels come from
    assert record["sha256"] == json.loads((out / "checksums.json").read_text())["sha256"]
    assert record["label_accuracy"] == {**label_accuracy(kept), "seconds": record["label_accuracy"]["seconds"]}
    assert record["command"] == shlex.join(["python", "scripts/keep_confident.py", "--labels", str(rescored),
                                            "--fraction", "0.25", "--out", str(out), "--batch-size", "7"])
    assert isinstance(record["wall_time_s"], float) and record["wall_time_s"] > 0


def test_greedy_labels_are_kept_by_the_speakers_score(models, baseline_runs, tiny_demos, tmp_path):
    speaker, _ = models
    labels = tmp_path / "greedy"
    load_script("label_unpaired").main(["--speaker", str(baseline_runs["speaker"] / "best"), "--demos",
                                        str(tiny_demos), "--out", str(labels)])
    keep("--labels", str(labels), "--fraction", "0.5", "--out", str(tmp_path / "kept"))
    source = load_from_disk(str(labels))
    scores = label_scores(speaker, source, batch_size=9).tolist()
    top = sorted(range(len(source)), key=lambda i: (-scores[i], i))[:round(0.5 * len(source))]
    assert list(load_from_disk(str(tmp_path / "kept"))["seed"]) == [source[i]["seed"] for i in sorted(top)]
    assert json.loads((tmp_path / "kept" / "pseudo_labels.json").read_text())["kept"]["lam"] == 1.0


def test_the_library_scores_labels_only_as_their_labelling_chose_them(models, rescored, tmp_path):
    """keep_confident given a lam or a rescorer other than the labelling's refuses, naming how they were chosen."""
    from msvae_hf.data.pseudo_labels import keep_confident

    speaker, follower = models
    for lam, rescorer in ((0.5, follower), (0.3, None), (1.0, None)):
        with pytest.raises(ValueError, match=f"were chosen at lam 0.3 with a rescorer: score them so \\(given lam "
                                             f"{lam:g} and {'a' if rescorer is not None else 'no'} rescorer"):
            keep_confident(rescored, tmp_path / "kept", 0.5, speaker, rescorer, lam, progress=False)
    assert not (tmp_path / "kept").exists()


def test_bad_input_is_one_line_before_anything_is_written(rescored, tmp_path):
    """A fraction outside (0, 1], labels whose record names no speaker (or a speaker that is gone), labels already
    kept, an output folder holding the labels or holding other files: one line each, nothing written."""
    before = tree_digest(rescored)
    out = tmp_path / "kept"
    for fraction in ("0", "1.5", "-0.2"):
        with pytest.raises(SystemExit, match=rf"--fraction must be in \(0, 1\], got {fraction}"):
            keep("--labels", str(rescored), "--fraction", fraction, "--out", str(out))
    with pytest.raises(SystemExit, match="the output folder .* is the labels input"):
        keep("--labels", str(rescored), "--fraction", "0.5", "--out", str(rescored), "--overwrite")
    bare = tmp_path / "bare"
    shutil.copytree(rescored, bare)
    (bare / "pseudo_labels.json").unlink()
    with pytest.raises(SystemExit, match="has no record naming the speaker that labelled it"):
        keep("--labels", str(bare), "--fraction", "0.5", "--out", str(out))
    moved = tmp_path / "moved"
    shutil.copytree(rescored, moved)
    record = json.loads((moved / "pseudo_labels.json").read_text())
    (moved / "pseudo_labels.json").write_text(json.dumps({**record, "speaker": str(tmp_path / "gone")}))
    with pytest.raises(SystemExit, match=r"no model at .*gone.*\(named by .*moved's record\)"):
        keep("--labels", str(moved), "--fraction", "0.5", "--out", str(out))
    assert not out.exists()
    keep("--labels", str(rescored), "--fraction", "0.5", "--out", str(out))
    kept = tree_digest(out)
    with pytest.raises(SystemExit, match="holds labels kept from"):
        keep("--labels", str(out), "--fraction", "0.5", "--out", str(tmp_path / "again"))
    with pytest.raises(SystemExit, match="not empty.*--overwrite"):
        keep("--labels", str(rescored), "--fraction", "0.25", "--out", str(out))
    assert tree_digest(out) == kept and tree_digest(rescored) == before and not (tmp_path / "again").exists()
