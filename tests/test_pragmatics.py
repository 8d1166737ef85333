"""Follower-rescored speaking (msvae_hf.extensions.pragmatics, scripts/pragmatic_speakers.py) and labelling
(scripts/label_unpaired.py --rescore-with)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import load_script
from datasets import load_from_disk

from msvae_hf.data.collator import DemoCollator
from msvae_hf.data.demos import load_demos, write_checksums
from msvae_hf.data.pseudo_labels import candidates_key
from msvae_hf.extensions.pragmatics import (
    LAMS,
    SPOKEN_FILE,
    Candidates,
    Spoken,
    lam_on_pairs,
    rescore_candidates,
    score_candidates,
    speak_candidates,
)
from msvae_hf.models.modeling_baselines import FollowerModel, SpeakerModel
from msvae_hf.models.tokenization_msvae import MSVAETokenizer


@pytest.fixture(scope="module")
def valid(tiny_demos):
    return load_demos(tiny_demos)["valid"]


def test_choose_follows_the_weight():
    cands = Candidates(
        texts=[["a", "b", "c"], ["d", "e", "f"]],
        speaker_scores=torch.tensor([[-1.0, -2.0, -9.0], [-5.0, -1.0, -3.0]]),
        follower_scores=torch.tensor([[-9.0, -1.0, -2.0], [-1.0, -8.0, -2.0]]),
    )
    assert cands.choose(1.0) == ["a", "e"]
    assert cands.choose(0.0) == ["b", "d"]
    # 0.5 * (s + f): row 0: -5, -1.5, -5.5 -> b; row 1: -3, -4.5, -2.5 -> f
    assert cands.choose(0.5) == ["b", "f"]
    with pytest.raises(ValueError, match="lam must be in"):
        cands.choose(1.5)


def test_scores_are_each_models_own_log_likelihood(models, valid):
    """Each candidate's scores equal the models' teacher-forced losses on (trajectory, candidate)."""
    speaker, follower = models
    cands = score_candidates(speaker, follower, valid, num_candidates=3, batch_size=5)
    assert len(cands.texts) == len(valid) and all(len(t) == 3 for t in cands.texts)
    assert cands.speaker_scores.shape == cands.follower_scores.shape == (len(valid), 3)
    # beam search returns its best beam first, ordered by the speaker's length-normalised score
    rows = [dict(valid[i], instruction=cands.texts[i][j]) for i in range(4) for j in range(3)]
    batch = DemoCollator(speaker.tokenizer)(rows)
    with torch.no_grad():
        s = -speaker(**batch, reduction="none").loss
        f = -follower(**batch, reduction="none").loss
    torch.testing.assert_close(cands.speaker_scores[:4].flatten(), s, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(cands.follower_scores[:4].flatten(), f, rtol=1e-4, atol=1e-4)


def test_batch_composition_does_not_change_scores(models, valid):
    speaker, follower = models
    a = score_candidates(speaker, follower, valid, num_candidates=2, batch_size=3)
    b = score_candidates(speaker, follower, valid, num_candidates=2, batch_size=len(valid))
    assert a.texts == b.texts
    torch.testing.assert_close(a.speaker_scores, b.speaker_scores, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a.follower_scores, b.follower_scores, rtol=1e-4, atol=1e-4)


def test_bad_inputs(models, valid):
    speaker, follower = models
    with pytest.raises(ValueError, match="empty dataset"):
        score_candidates(speaker, follower, valid.select([]))
    with pytest.raises(ValueError, match="num_candidates"):
        score_candidates(speaker, follower, valid, num_candidates=0)
    other = FollowerModel(follower.config)
    vocab = dict(MSVAETokenizer.grammar_vocab())
    vocab["zebra"] = len(vocab)
    other.tokenizer = MSVAETokenizer(vocab=vocab)
    with pytest.raises(ValueError, match="different vocabularies"):
        score_candidates(speaker, other, valid)


def test_lam_on_pairs_counts_exact_matches_and_breaks_ties_towards_the_speaker():
    cands = Candidates(
        texts=[["go to a key", "go to the red key"], ["open a door", "go to a ball"], ["x", "go to a box"]],
        speaker_scores=torch.tensor([[-1.0, -3.0], [-1.0, -2.0], [-1.0, -5.0]]),
        follower_scores=torch.tensor([[-4.5, -1.0], [-1.0, -3.0], [-2.5, -1.0]]),
    )
    truth = ["go to  the red key", "open a door", "go to a box"]  # spacing aside, word for word
    # row 0 picks its 2nd candidate (right) while lam * 2 < (1 - lam) * 3.5, i.e. lam < 0.64; row 1 always its 1st
    # (right); row 2 its 2nd (right) while lam * 4 < (1 - lam) * 1.5, i.e. lam < 0.27
    lam, shares = lam_on_pairs(cands, truth)
    assert shares == {x: (3 if x < 0.27 else 2 if x < 0.64 else 1) / 3 for x in LAMS}
    assert lam == 0.2  # 0, 0.1 and 0.2 get all three: the largest
    with pytest.raises(ValueError, match="2 instructions for 3 candidate lists"):
        lam_on_pairs(cands, truth[:2])


def label(demos, speaker, out, *extra: str) -> None:
    load_script("label_unpaired").main(["--speaker", str(speaker), "--demos", str(demos), "--out", str(out),
                                        "--batch-size", "24", *extra])


def test_rescored_labels_are_the_candidates_the_weighted_score_chooses(models, baseline_runs, tiny_demos, tmp_path):
    speaker, follower = models
    speaker_dir, follower_dir = baseline_runs["speaker"] / "best", baseline_runs["follower"] / "best"
    unpaired = load_demos(tiny_demos)["unpaired"]
    cands = score_candidates(speaker, follower, unpaired, num_candidates=3, batch_size=11)
    assert cands.choose(0.3) != cands.choose(1.0)  # the follower's weight changes labels here
    label(tiny_demos, speaker_dir, tmp_path / "given", "--rescore-with", str(follower_dir), "--num-candidates", "3",
          "--lam", "0.3")
    assert list(load_from_disk(str(tmp_path / "given"))["instruction"]) == cands.choose(0.3)
    record = json.loads((tmp_path / "given" / "pseudo_labels.json").read_text())
    assert record["decoding"] == "3 beam candidates, chosen at lam 0.3 (1: by the speaker alone)"
    assert record["rescoring"] == {"num_candidates": 3, "lam": 0.3, "lam_chosen_on": "given",
                                   "candidates": "spoken", "rescorer": str(follower_dir)}


def test_without_a_lam_the_valid_pairs_choose_it(models, baseline_runs, tiny_demos, tmp_path):
    """Valid pairs whose instructions are the candidates lam = 0.3 chooses force a lam that chooses all of them."""
    speaker, follower = models
    demos = load_demos(tiny_demos)
    forced = score_candidates(speaker, follower, demos["valid"], num_candidates=3).choose(0.3)
    assert forced != score_candidates(speaker, follower, demos["valid"], num_candidates=3).choose(1.0)
    demos["valid"] = demos["valid"].remove_columns("instruction").add_column("instruction", forced)
    folder = tmp_path / "demos"
    demos.save_to_disk(str(folder))
    write_checksums(folder)
    label(folder, baseline_runs["speaker"] / "best", tmp_path / "chosen", "--rescore-with",
          str(baseline_runs["follower"] / "best"), "--num-candidates", "3")
    record = json.loads((tmp_path / "chosen" / "pseudo_labels.json").read_text())["rescoring"]
    shares = {float(k): v for k, v in record["valid_exact_by_lam"].items()}
    assert shares[0.3] == 1.0 and shares[1.0] < 1.0
    assert record["lam"] == max(lam for lam, share in shares.items() if share == 1.0)
    assert record["lam_chosen_on"] == f"valid ({len(forced)} pairs)"
    cands = score_candidates(speaker, follower, demos["unpaired"], num_candidates=3)
    assert list(load_from_disk(str(tmp_path / "chosen"))["instruction"]) == cands.choose(record["lam"])


def test_a_bad_rescorer_or_weight_is_one_line_before_anything_is_written(baseline_runs, tiny_demos, tmp_path,
                                                                         capsys):
    out = tmp_path / "labels"
    speaker, follower = baseline_runs["speaker"] / "best", baseline_runs["follower"] / "best"
    for extra, message in ((["--rescore-with", str(speaker)], "msvae_speaker model, which cannot follow"),
                           (["--rescore-with", str(tmp_path / "nowhere")], "no model at .*nowhere"),
                           (["--rescore-with", str(follower), "--lam", "1.5"], r"lam must be in \[0, 1\], got 1.5"),
                           (["--rescore-with", str(follower), "--num-candidates", "0"],
                            r"--num-candidates\) must be at least 1, got 0")):
        with pytest.raises(SystemExit, match=message) as err:
            label(tiny_demos, speaker, out, *extra)
        assert "\n" not in str(err.value)
    for extra in (["--lam", "0.5"], ["--num-candidates", "4"], ["--candidates-cache", str(tmp_path)]):
        with pytest.raises(SystemExit):
            label(tiny_demos, speaker, out, *extra)
        assert "--lam, --num-candidates and --candidates-cache go with --rescore-with" in capsys.readouterr().err
    assert not out.exists()


def test_saved_candidates_are_the_spoken_ones_exactly(models, valid, tmp_path):
    """Saved and read back, a speaker's candidates give a follower bit for bit the scores it gives them spoken."""
    speaker, follower = models
    spoken = speak_candidates(speaker, valid, num_candidates=3, batch_size=4)
    assert [ids.shape[0] for ids in spoken.ids] == [3 * min(4, len(valid) - i) for i in range(0, len(valid), 4)]
    spoken.save(tmp_path / "spoken", note="kept")
    read = Spoken.load(tmp_path / "spoken")
    assert read.texts == spoken.texts and read.batch_size == 4 and read.num_candidates == 3
    assert all(torch.equal(a, b) for a, b in zip(read.ids, spoken.ids, strict=True))
    assert torch.equal(read.speaker_scores, spoken.speaker_scores)
    assert json.loads((tmp_path / "spoken" / SPOKEN_FILE).read_text())["note"] == "kept"
    direct = score_candidates(speaker, follower, valid, num_candidates=3, batch_size=4)
    again = rescore_candidates(read, follower, valid)
    assert again.texts == direct.texts
    assert torch.equal(again.speaker_scores, direct.speaker_scores)
    assert torch.equal(again.follower_scores, direct.follower_scores)
    with pytest.raises(ValueError, match=f"{len(valid)} trajectories' candidates for a dataset of 3"):
        rescore_candidates(read, follower, valid.select(range(3)))


def test_many_saved_candidates_of_many_widths_read_back_exactly(tmp_path):
    """More rows than one arrow chunk holds, batches of other widths and a last batch cut short: read back bit for
    bit, each batch as it was."""
    generator = torch.Generator().manual_seed(0)
    n, size, rows = 3, 64, 2500
    counts = [min(size, rows - start) for start in range(0, rows, size)]
    ids = [torch.randint(0, 37, (count * n, 4 + i % 7), generator=generator, dtype=torch.int32)
           for i, count in enumerate(counts)]
    texts = [[f"candidate {i} {j}" for j in range(n)] for i in range(rows)]
    spoken = Spoken(texts, ids, torch.randn(rows, n, generator=generator), size, pad_token_id=0)
    spoken.save(tmp_path / "spoken")
    assert load_from_disk(str(tmp_path / "spoken")).data.column("candidate_ids").num_chunks > 1
    read = Spoken.load(tmp_path / "spoken")
    assert read.texts == texts and (read.batch_size, read.pad_token_id) == (size, 0)
    assert all(torch.equal(a, b) for a, b in zip(read.ids, ids, strict=True))
    assert torch.equal(read.speaker_scores, spoken.speaker_scores)


def test_the_candidates_key_follows_what_decides_the_candidates(models, baseline_runs, tiny_demos, tmp_path,
                                                                monkeypatch):
    """The key changes with the speaker's weights and generation config, the demonstrations, the split, the rows,
    the candidates, the batching and the decoding, and not with how the speaker's path was spelled."""
    speaker, _ = models
    key = candidates_key(speaker, tiny_demos, "unpaired", 10, 3, 8, False)
    best = baseline_runs["speaker"] / "best"
    for spelled in (f"{best}/", str(best.resolve()), os.path.relpath(best)):
        assert candidates_key(SpeakerModel.from_pretrained(spelled), tiny_demos, "unpaired", 10, 3, 8, False) == key
    other = SpeakerModel.from_pretrained(best)  # the same config, other weights
    with torch.no_grad():
        next(other.parameters()).add_(1e-6)
    longer = SpeakerModel.from_pretrained(best)
    longer.generation_config.max_new_tokens = (longer.generation_config.max_new_tokens or 20) + 1
    demos = tmp_path / "demos"  # the same files but one, by their checksums
    shutil.copytree(tiny_demos, demos)
    (demos / "checksums.json").write_text((demos / "checksums.json").read_text().replace('"', "'", 1))
    changed = {candidates_key(speaker, tiny_demos, "valid", 10, 3, 8, False),
               candidates_key(speaker, tiny_demos, "unpaired", 9, 3, 8, False),
               candidates_key(speaker, tiny_demos, "unpaired", 10, 4, 8, False),
               candidates_key(speaker, tiny_demos, "unpaired", 10, 3, 7, False),
               candidates_key(speaker, tiny_demos, "unpaired", 10, 3, 8, True),
               candidates_key(other, tiny_demos, "unpaired", 10, 3, 8, False),
               candidates_key(longer, tiny_demos, "unpaired", 10, 3, 8, False),
               candidates_key(speaker, demos, "unpaired", 10, 3, 8, False)}
    assert key not in changed and len(changed) == 8
    with pytest.raises(ValueError, match="has no checksums.json, by which kept candidates are matched"):
        candidates_key(speaker, tmp_path, "unpaired", 10, 3, 8, False)
    monkeypatch.setenv("MSVAE_SKIP_DEMO_CHECKSUMS", "1")
    with pytest.raises(ValueError, match="matched to their trajectories by the demonstrations' checksums, which "
                                         "MSVAE_SKIP_DEMO_CHECKSUMS=1 skips"):
        candidates_key(speaker, tiny_demos, "unpaired", 10, 3, 8, False)


def test_a_second_round_reads_the_kept_candidates_and_labels_as_one_that_speaks(models, baseline_runs, tiny_demos,
                                                                                tmp_path, monkeypatch):
    """The first labelling keeps the speaker's candidates (the valid pairs' too, on which lam is chosen); the next,
    rescored by another follower, reads them (the speaker never decodes) and writes the labels a labelling without
    the cache writes."""
    speaker = baseline_runs["speaker"] / "best"
    other = FollowerModel.from_pretrained(baseline_runs["follower"] / "best")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    other.save_pretrained(tmp_path / "other")
    cache, three = tmp_path / "cache", ["--num-candidates", "3"]
    label(tiny_demos, speaker, tmp_path / "first", "--rescore-with", str(baseline_runs["follower"] / "best"), *three,
          "--candidates-cache", str(cache))
    first = json.loads((tmp_path / "first" / "pseudo_labels.json").read_text())["rescoring"]
    kept = {f.name.split("-")[0]: f for f in cache.iterdir()}
    assert sorted(kept) == ["unpaired", "valid"]
    assert first["candidates"] == f"spoken, kept in {kept['unpaired']}"
    rescore = ["--rescore-with", str(tmp_path / "other"), *three]
    for name, lam in (("plain", ["--lam", "0.3"]), ("plain_chosen", [])):
        label(tiny_demos, speaker, tmp_path / name, *rescore, *lam)
    unpaired = load_demos(tiny_demos)["unpaired"]  # the other follower's choice at lam 0.3, computed here
    expected = score_candidates(models[0], other, unpaired, 3, batch_size=8).choose(0.3)
    assert expected != score_candidates(*models, unpaired, 3, batch_size=8).choose(0.3)  # the follower matters
    monkeypatch.setattr(SpeakerModel, "generate", lambda *a, **k: pytest.fail("the speaker decoded again"))
    for name, lam in (("second", ["--lam", "0.3"]), ("second_chosen", [])):
        label(tiny_demos, speaker, tmp_path / name, *rescore, *lam, "--candidates-cache", str(cache))
    with pytest.raises(pytest.fail.Exception, match="decoded again"):  # an empty cache: the speaker must decode
        label(tiny_demos, speaker, tmp_path / "third", *rescore, "--candidates-cache", str(tmp_path / "empty"))
    record = {name: json.loads((tmp_path / name / "pseudo_labels.json").read_text())["rescoring"]
              for name in ("plain", "plain_chosen", "second", "second_chosen")}
    assert record["second"]["candidates"] == f"read from {kept['unpaired']}" == record["second_chosen"]["candidates"]
    assert record["plain"]["candidates"] == "spoken"
    assert record["second_chosen"]["valid_exact_by_lam"] == record["plain_chosen"]["valid_exact_by_lam"]
    labels = {name: list(load_from_disk(str(tmp_path / name))["instruction"])
              for name in ("plain", "plain_chosen", "second", "second_chosen")}
    assert labels["second"] == labels["plain"] and labels["second_chosen"] == labels["plain_chosen"]
    assert labels["second"] == expected


def test_damaged_or_foreign_kept_candidates_are_one_line_before_anything_is_written(baseline_runs, tiny_demos,
                                                                                  tmp_path):
    speaker, follower = baseline_runs["speaker"] / "best", baseline_runs["follower"] / "best"
    cache, out = tmp_path / "cache", tmp_path / "labels"
    args = ["--rescore-with", str(follower), "--num-candidates", "2", "--lam", "0.5", "--candidates-cache", str(cache)]
    label(tiny_demos, speaker, tmp_path / "first", *args)
    (kept,) = cache.iterdir()
    info = json.loads((kept / SPOKEN_FILE).read_text())
    arrows = {arrow: arrow.read_bytes() for arrow in kept.glob("*.arrow")}
    damages = {"holds candidates of another speaker or other trajectories": {**info, "key": "0" * 64},
               r"cannot be read \((ValueError|RuntimeError): ": {**info, "num_candidates": 3},
               r"cannot be read \(KeyError: 'pad_token_id'\)": {k: v for k, v in info.items() if k != "pad_token_id"},
               r"cannot be read \(TypeError: spoken.json holds a list, not an object\)": [],
               r"cannot be read \(FileNotFoundError": None, r"cannot be read \(.*\): delete it and rerun": "cut"}
    for message, damage in damages.items():
        if damage == "cut":
            (kept / SPOKEN_FILE).write_text(json.dumps(info))
            for arrow in arrows:
                arrow.write_bytes(arrow.read_bytes()[:100])
        elif damage is None:
            (kept / SPOKEN_FILE).unlink()
        else:
            (kept / SPOKEN_FILE).write_text(json.dumps(damage))
        with pytest.raises(SystemExit, match=message) as err:
            label(tiny_demos, speaker, out, *args)
        assert "\n" not in str(err.value) and str(err.value).endswith("delete it and rerun")
        assert not out.exists()


def test_a_cache_that_cannot_keep_the_candidates_costs_a_warning_not_the_labels(baseline_runs, tiny_demos, tmp_path,
                                                                               monkeypatch, caplog):
    """A full disk while keeping the candidates, or another labelling's candidates put in place first: the labels
    are written all the same, and the record says what became of the candidates."""
    speaker, follower = baseline_runs["speaker"] / "best", baseline_runs["follower"] / "best"
    cache = tmp_path / "cache"
    args = ["--rescore-with", str(follower), "--num-candidates", "2", "--lam", "0.5", "--candidates-cache", str(cache)]
    label(tiny_demos, speaker, tmp_path / "plain", *args[:-2])
    save = Spoken.save

    failures = {OSError(28, "No space left on device"): "the labelling goes on without keeping its candidates",
                TypeError("a writer's own failure"): "a writer's own failure"}
    for failure, said in failures.items():
        def failing(self, folder, failure=failure, **info):
            raise failure

        monkeypatch.setattr(Spoken, "save", failing)
        label(tiny_demos, speaker, tmp_path / "full", *args, *(["--overwrite"] if (tmp_path / "full").exists() else []))
        assert f"the candidates were not kept in {cache}" in caplog.text and said in caplog.text
        assert not cache.exists() or not any(cache.iterdir())  # no folder half written

    def another_first(self, folder, **info):  # another labeller of the same speaker keeps its candidates first
        save(self, folder, **info)
        save(self, cache / Path(folder).name.split(".")[1], **info)

    monkeypatch.setattr(Spoken, "save", another_first)
    label(tiny_demos, speaker, tmp_path / "second", *args)
    record = {name: json.loads((tmp_path / name / "pseudo_labels.json").read_text())["rescoring"]["candidates"]
              for name in ("full", "second")}
    (kept,) = cache.iterdir()
    assert record == {"full": "spoken, not kept", "second": f"spoken, as kept in {kept}"}
    labels = {name: list(load_from_disk(str(tmp_path / name))["instruction"]) for name in ("plain", "full", "second")}
    assert labels["full"] == labels["plain"] == labels["second"]
    monkeypatch.setattr(Spoken, "save", save)
    label(tiny_demos, speaker, tmp_path / "read", *args)  # what the other labeller kept serves the next round
    assert list(load_from_disk(str(tmp_path / "read"))["instruction"]) == labels["plain"]
