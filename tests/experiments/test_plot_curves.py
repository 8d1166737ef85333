"""experiments/plot_curves.py: curves of finished runs from their TensorBoard events or results.json."""

from __future__ import annotations

import shutil

import plot_curves
import pytest


def test_plot_curves(baseline_runs, tmp_path):
    """One PNG of several runs; a run without event files falls back to results.json; no metric: an error."""
    out = tmp_path / "curves.png"
    plot_curves.main([str(baseline_runs["follower"]), str(baseline_runs["speaker"]), "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # results.json fallback: no event files
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(baseline_runs["follower"] / "results.json", bare / "results.json")
    drawn = plot_curves.plot_curves([bare], tmp_path / "bare.png", ["valid/success_rate", "train/loss"])
    assert drawn == ["valid/success_rate"] and (tmp_path / "bare.png").is_file()
    with pytest.raises(SystemExit):
        plot_curves.main([str(bare), "--metric", "valid/nothing", "--out", str(tmp_path / "x.png")])
