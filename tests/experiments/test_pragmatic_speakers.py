"""experiments/pragmatic_speakers.py: lam chosen on valid, test BLEU reported, a follower refused as speaker."""

from __future__ import annotations

import json

import pragmatic_speakers
import pytest
from conftest import TINY_COUNTS


def test_script_chooses_lam_on_valid_and_reports_test(baseline_runs, tiny_demos, tmp_path):
    out = tmp_path / "pragmatic.json"
    system = f"{baseline_runs['speaker'] / 'best'},{baseline_runs['follower'] / 'best'}"
    result = pragmatic_speakers.main([
        "--demos", str(tiny_demos), "--candidates", "2", "--lams", "0,0.5,1",
        "--system", f"tiny#0={system}", "--system", f"tiny#1={system}", "--out", str(out),
    ])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    row = result["systems"]["tiny#0"]
    valid_curve = row["valid_bleu_by_lam"]
    assert row["lam"] == max((0.0, 0.5, 1.0), key=lambda lam: (valid_curve[lam], lam))
    assert row["test_bleu_rescored"] == row["test_bleu_by_lam"][row["lam"]]
    assert len(row["examples"]) == 5 <= TINY_COUNTS["test"]
    assert result["over_seeds"]["test_bleu_rescored"]["tiny"]["n"] == 2


def test_script_rejects_a_follower_as_speaker(baseline_runs, tiny_demos):
    follower = baseline_runs["follower"] / "best"
    with pytest.raises(SystemExit, match="cannot speak"):
        pragmatic_speakers.main(["--demos", str(tiny_demos), "--system", f"x={follower}"])
