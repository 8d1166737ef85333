"""Follower-rescored speaking (msvae_hf.extensions.pragmatics, scripts/pragmatic_speakers.py)."""

from __future__ import annotations

import pytest
import torch

from msvae_hf.data.collator import DemoCollator
from msvae_hf.data.demos import load_demos
from msvae_hf.extensions.pragmatics import Candidates, score_candidates
from msvae_hf.models.modeling_baselines import FollowerModel, SpeakerModel
from msvae_hf.models.tokenization_msvae import MSVAETokenizer


@pytest.fixture(scope="module")
def models(baseline_runs):
    speaker = SpeakerModel.from_pretrained(baseline_runs["speaker"] / "best").eval()
    follower = FollowerModel.from_pretrained(baseline_runs["follower"] / "best").eval()
    return speaker, follower


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
