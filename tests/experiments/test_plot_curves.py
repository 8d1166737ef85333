"""experiments/plot_curves.py: curves of finished runs from their TensorBoard events or results.json."""

from __future__ import annotations

import json
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


def test_plot_level_from_run_records(tmp_path):
    """Table 2's rows of a level from its committed records: mean and band over seeds; no history: an error."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    for run, sr in (("msvae", 0.5), ("msvae_seed1", 0.6), ("follower", 0.4)):
        history = [{"step": s, "valid/success_rate": sr + s / 1000, "valid/bleu": 20.0} for s in (200, 400)]
        (runs / f"{run}.json").write_text(json.dumps({"run": run, "history": history}))
    out = tmp_path / "curves.png"
    assert plot_curves.plot_level("gotoseqlocal", out, tmp_path) == ["follower", "msvae"]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (runs / "speaker.json").write_text(json.dumps({"run": "speaker"}))
    for run in ("msvae", "msvae_seed1", "follower"):
        (runs / f"{run}.json").unlink()
    with pytest.raises(ValueError, match="no run of gotoseqlocal has a validation history"):
        plot_curves.plot_level("gotoseqlocal", tmp_path / "none.png", tmp_path)


def test_plot_level_draws_a_run_without_a_curve_from_its_run_trained_again(tmp_path):
    """A first record without a curve is drawn from its rerun's curve."""
    runs, reruns = tmp_path / "bosslocal" / "runs", tmp_path / "bosslocal" / "reruns"
    runs.mkdir(parents=True)
    reruns.mkdir()
    (runs / "msvae.json").write_text(json.dumps({"run": "msvae"}))
    with pytest.raises(ValueError, match="no run of bosslocal"):
        plot_curves.plot_level("bosslocal", tmp_path / "none.png", tmp_path)
    history = [{"step": s, "valid/success_rate": 0.5, "valid/bleu": 20.0} for s in (200, 400)]
    (reruns / "msvae_abcdef1.json").write_text(json.dumps({"run": "msvae", "history": history}))
    assert plot_curves.plot_level("bosslocal", tmp_path / "curves.png", tmp_path) == ["msvae"]


def test_budget_plot_draws_the_continued_rows_with_the_paper_line(tmp_path, monkeypatch):
    """--budget: the rows at 4000 updates only, each with its Table 2 row's colour and paper SR."""
    runs = tmp_path / "bosslocal" / "runs"
    runs.mkdir(parents=True)
    for run in ("msvae", "msvae_4000", "msvae_4000_seed1"):
        steps = (200, 400) if run == "msvae" else (200, 400, 600, 800)
        history = [{"step": s, "valid/success_rate": 0.5, "valid/bleu": 20.0} for s in steps]
        (runs / f"{run}.json").write_text(json.dumps({"run": run, "history": history, "updates": steps[-1]}))
    lines, marks = [], []
    saved_v = plot_curves.plt.Axes.axvline
    monkeypatch.setattr(plot_curves.plt.Axes, "axvline", lambda ax, x, **kw: marks.append(x) or saved_v(ax, x, **kw))
    saved = plot_curves.plt.Axes.axhline
    monkeypatch.setattr(plot_curves.plt.Axes, "axhline",
                        lambda ax, y, **kw: lines.append((y, kw["color"])) or saved(ax, y, **kw))
    out = tmp_path / "budget.png"
    assert plot_curves.plot_level("bosslocal", out, tmp_path, panels=plot_curves.BUDGET_ROWS) == ["msvae_4000"]
    assert lines == [(0.767, "C3")] and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert marks == [400, 400]  # msvae's 400 updates, in the SR and the BLEU panel
