#!/usr/bin/env python
"""Plot learning curves (validation SR / BLEU, training loss vs update) of several runs, one line per run.

    python experiments/plot_curves.py runs/bosslocal/follower runs/bosslocal/msvae --out results/curves.png
    python experiments/plot_curves.py runs/a runs/b --metric valid/success_rate --metric train/loss
    python experiments/plot_curves.py --level gotoseqlocal --out results/gotoseqlocal/validation_curves.png
    python experiments/plot_curves.py --level bosslocal --budget --out results/bosslocal/validation_curves_4000.png

Each run is an ``output_dir`` of ``scripts/train.py``. Scalars are read from its TensorBoard event files
(``tb/``, via tensorboard's EventAccumulator); a run without event files falls back to the validation
history in ``results.json`` (which has no training loss). A metric no run logged is skipped with a note;
if no run logged any requested metric, that is an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DEFAULT_METRICS = ("valid/success_rate", "valid/bleu", "train/loss")

#: metric -> {step: value}
Curves = dict[str, dict[int, float]]


def read_event_scalars(run_dir: str | Path) -> Curves:
    """Every scalar in the run's TensorBoard event files (``tb/`` and below); later files win on a step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves: Curves = {}
    files = sorted(Path(run_dir).glob("tb/**/events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    for path in files:
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            curves.setdefault(tag, {}).update({int(e.step): float(e.value) for e in acc.Scalars(tag)})
    return curves


def read_results_history(run_dir: str | Path) -> Curves:
    """The validation history of ``results.json`` (or the latest checkpoint's ``train_state.json``)."""
    run_dir = Path(run_dir)
    sources = [run_dir / "results.json", *sorted((run_dir / "checkpoints").glob("step-*/train_state.json"))[-1:]]
    for path in sources:
        if path.is_file():
            history = json.loads(path.read_text(encoding="utf-8")).get("history", [])
            curves: Curves = {}
            for entry in history:
                for key, value in entry.items():
                    if key != "step" and isinstance(value, (int, float)):
                        curves.setdefault(key, {})[int(entry["step"])] = float(value)
            return curves
    return {}


def read_run(run_dir: str | Path) -> Curves:
    """A run's curves: TensorBoard scalars, else the results.json history."""
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"no run directory at {run_dir}")
    return read_event_scalars(run_dir) or read_results_history(run_dir)


def plot_curves(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    metrics: Sequence[str] = DEFAULT_METRICS,
    labels: Sequence[str] | None = None,
) -> list[str]:
    """Write one panel per metric (x: update) with one line per run to ``out``; returns the metrics drawn."""
    labels = list(labels) if labels else [Path(r).name or str(r) for r in run_dirs]
    if len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs")
    runs = [read_run(r) for r in run_dirs]
    drawn = [m for m in metrics if any(m in curves for curves in runs)]
    if not drawn:
        raise ValueError(f"none of the runs logged any of {list(metrics)}")
    fig, axes = plt.subplots(1, len(drawn), figsize=(4.5 * len(drawn), 3.5), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes[0], drawn):
        for i, (label, curves) in enumerate(zip(labels, runs)):
            if metric in curves:  # a run keeps its colour in every panel
                steps = sorted(curves[metric])
                ax.plot(steps, [curves[metric][s] for s in steps], marker="." if len(steps) < 50 else None,
                        label=label, color=colors[i % len(colors)])
        ax.set_xlabel("update")
        ax.set_title(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return drawn


#: Table 2's rows, each drawn in the panels of the metrics it is selected on.
TABLE2_ROWS = {"valid/success_rate": ("follower", "msvae_paired", "msvae_v", "msvae"),
               "valid/bleu": ("speaker", "msvae_paired", "msvae_v", "msvae")}
#: The rows at twice the budget (experiments/cells.py's BUDGET_ROWS and GOTOSEQLOCAL_ROWS; a level draws
#: those it has records of).
BUDGET_ROWS = {"valid/success_rate": ("msvae_paired_4000", "msvae_v_4000", "msvae_4000", "speaker_follower_4000",
                                      "msvae_speaker_follower_4000"),
               "valid/bleu": ("msvae_paired_4000", "msvae_v_4000", "msvae_4000")}
#: A row's colour: the Table 2 or 3 row it is (at any budget).
COLORS = dict(zip(("follower", "speaker", "msvae_paired", "msvae_v", "msvae", "speaker_follower",
                   "msvae_speaker_follower"), ("C0", "C0", "C1", "C2", "C3", "C4", "C5")))


def plot_level(level: str, out: str | Path, results: str | Path = "results",
               panels: dict[str, tuple[str, ...]] = TABLE2_ROWS) -> list[str]:
    """Validation SR and BLEU against updates for the rows of ``panels`` (default: every Table 2 row) of
    ``level``, from its committed run records (``results/<level>/runs/*.json``): the mean over seeds, a band from
    the lowest to the highest seed, the paper's test SR of each row as a dashed line, and for rows that continue
    others' runs (cells.Row.continues) the budget those stopped at as a dotted line. A run whose record has
    no curve (a record without one) is drawn from its run trained again (``results/<level>/reruns/``), if
    there is one. Returns the rows drawn."""
    from cells import level_rows, row_label
    from result_tables.paper import PAPER
    from result_tables.records import records_by_row, records_with_curves

    rows = records_by_row(records_with_curves(level, Path(results)))
    study = level_rows(level)
    panels = {metric: tuple(row for row in names if row in study) for metric, names in panels.items()}
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    drawn = set()
    for ax, (metric, names) in zip(axes[0], panels.items()):
        paper_label = "dashed: the paper's test SR of the row in its colour"
        for row in names:
            table2_row = study[row].continues or row
            color = COLORS[table2_row]
            paper_sr = PAPER[level].get(table2_row, {}).get("sr")
            if metric == "valid/success_rate" and paper_sr is not None and rows.get(row):
                ax.axhline(paper_sr / 100, color=color, linestyle="--", linewidth=1, label=paper_label)
                paper_label = "_nolegend_"
            curves = [{h["step"]: h[metric] for h in r.get("history", []) if metric in h} for r in rows.get(row, [])]
            curves = [c for c in curves if c]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            ys = [[c[s] for c in curves] for s in steps]
            ax.plot(steps, [sum(y) / len(y) for y in ys], color=color, marker=".",
                    label=f"{row_label(level, row)} (n = {len(curves)})")
            if len(curves) > 1:
                ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], color=color, alpha=0.2)
            drawn.add(row)
        continued = {r.get("updates") for row in names if (source := study[row].continues)
                     for r in rows.get(source, []) if rows.get(row)}
        for i, updates in enumerate(sorted(u for u in continued if u)):
            ax.axvline(updates, color="grey", linestyle=":",
                       label="_nolegend_" if i else "dotted: the budget continued")
        ax.set_xlabel("update")
        ax.set_title(f"{level}: {metric} (mean over seeds, band: min-max)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small")
    if not drawn:
        raise ValueError(f"no run of {level} has a validation history under {results}/{level}/runs")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return sorted(drawn)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="run directories (output_dir of scripts/train.py)")
    parser.add_argument("--level", help="instead of runs: Table 2's rows of a level from results/<level>/runs")
    parser.add_argument("--budget", action="store_true",
                        help="with --level: the rows at twice the budget instead")
    parser.add_argument("--out", default="results/curves.png", help="image to write (png, pdf, svg)")
    parser.add_argument("--metric", action="append", dest="metrics",
                        help=f"a scalar tag to plot; repeat for several (default: {' '.join(DEFAULT_METRICS)})")
    parser.add_argument("--label", action="append", dest="labels", help="a legend label per run, in order")
    args = parser.parse_args(argv)
    if args.level:
        try:
            rows = plot_level(args.level, args.out, panels=BUDGET_ROWS if args.budget else TABLE2_ROWS)
        except ValueError as err:
            sys.exit(f"error: {err}")
        print(f"wrote {args.out} ({', '.join(rows)})")
        return
    if not args.runs:
        parser.error("give run directories or --level")
    metrics = args.metrics or list(DEFAULT_METRICS)
    try:
        drawn = plot_curves(args.runs, args.out, metrics, args.labels)
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    for missing in sorted(set(metrics) - set(drawn)):
        print(f"note: no run logged {missing}", file=sys.stderr)
    print(f"wrote {args.out} ({', '.join(drawn)})")


if __name__ == "__main__":
    main()
