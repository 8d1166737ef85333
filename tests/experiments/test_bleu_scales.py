"""experiments/bleu_scales.py: its scorers against values worked out by hand."""

from __future__ import annotations

import math

import pytest
from bleu_scales import score, scores


def test_identical_descriptions_score_100_under_every_scorer():
    refs = ["pick up the red ball", "go to the green door and open it"]
    assert all(value == pytest.approx(100.0) for value in scores(refs, refs).values())


def test_the_unsmoothed_sentence_mean_gives_zero_to_a_pair_without_a_4_gram():
    refs = ["pick up the red ball", "go to the door"]
    preds = ["pick up the red ball", "go to a door"]  # the second shares no 4-gram with its reference
    assert score(preds, refs, level="sentence", smooth_method="none") == pytest.approx(50.0)
    assert score(["open it"], ["open it"], level="sentence", smooth_method="none") == 0.0  # under four words


def test_the_corpus_score_is_the_geometric_mean_of_the_pooled_precisions():
    # one pair, 5 words each, the middle word differs: 1-grams 4/5, 2-grams 2/4, 3-grams 0/3, 4-grams 0/2 (zero
    # counts floored at 0.1), no brevity penalty
    pred, ref = ["pick up the blue ball"], ["pick up a blue ball"]
    floor = score(pred, ref, level="corpus", smooth_method="floor", smooth_value=0.1)
    expected = 100 * math.exp((math.log(4 / 5) + math.log(2 / 4) + math.log(0.1 / 3) + math.log(0.1 / 2)) / 4)
    assert floor == pytest.approx(expected, rel=1e-6)
