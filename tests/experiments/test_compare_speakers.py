"""experiments/compare_speakers.py: speakers compared on the same pairs with paired bootstrap intervals."""

from __future__ import annotations

import json

import compare_speakers
import pytest
from transformers import AutoModel

from msvae_hf.data.demos import load_demos
from msvae_hf.evaluation.evaluate import evaluate_speaker
from msvae_hf.evaluation.metrics import instruction_parts_match


def test_compare_speakers_scores_match_evaluate_speaker(baseline_runs, tiny_demos, tmp_path):
    """The baseline's BLEU is what evaluate_speaker (training's final evaluation) reports; the same model
    under a second name scores the same; the JSON holds every speaker."""
    speaker = baseline_runs["speaker"] / "best"
    out = tmp_path / "cmp.json"
    compare_speakers.main(["--demos", str(tiny_demos), "--speaker", f"a={speaker}",
                                          "--speaker", f"b={speaker}", "--samples", "50", "--out", str(out)])
    result = json.loads(out.read_text())
    test = load_demos(tiny_demos)["test"]
    expected, predictions = evaluate_speaker(AutoModel.from_pretrained(speaker), test)
    assert result["examples"] == len(test) and list(result["speakers"]) == ["a", "b"]
    assert result["speakers"]["a"]["bleu"] == pytest.approx(expected)
    assert result["speakers"]["b"]["bleu"] == pytest.approx(expected)
    assert result["speakers"]["a"]["p_value"] is None and result["speakers"]["a"]["examples"] == predictions[:5]
    assert result["speakers"]["a"]["parts_match"] == instruction_parts_match(predictions, list(test["instruction"]))


@pytest.mark.parametrize("bad, message", [
    (["--speaker", "nodir"], "no model at nodir"), (["--split", "nosuch"], "no 'nosuch'"),
    (["--speaker", "b=1=/no/such/dir"], "no model at /no/such/dir"), (["--speaker", "a=/tmp"], "named 'a'"),
])
def test_compare_speakers_bad_arguments(baseline_runs, tiny_demos, bad, message, capsys):
    argv = ["--demos", str(tiny_demos), "--speaker", f"a={baseline_runs['speaker'] / 'best'}", *bad]
    with pytest.raises(SystemExit) as exit_:
        compare_speakers.main(argv)
    assert message in f"{exit_.value.code} {capsys.readouterr().err}"


def test_a_follower_cannot_be_compared_as_a_speaker(baseline_runs, tiny_demos):
    argv = ["--demos", str(tiny_demos), "--speaker", f"f={baseline_runs['follower'] / 'best'}",
            "--speaker", f"s={baseline_runs['speaker'] / 'best'}"]
    with pytest.raises(SystemExit, match="cannot speak"):
        compare_speakers.main(argv)
