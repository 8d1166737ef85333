#!/usr/bin/env python
"""Plot MS-VAE's test SR and BLEU-4 against N, the unpaired trajectories (log scale), from the run records.

    python experiments/plot_unpaired.py bosslocal --out results/bosslocal/unpaired_curve.png

Each point is a row of the curve (``experiments/cells.py:CURVE``) with N > 0: the mean over its seeds, the sd as
a bar, n beside it. N = 0 (MS-VAE paired only) and the supervised follower / speaker are horizontal lines. The
same numbers as ``python experiments/collect_results.py LEVEL --table unpaired``.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib.pyplot as plt
from cells import LEVELS
from figures import level_plot_main, save_figure
from result_tables.records import RESULTS, load_records, records_by_row, values
from result_tables.scale import unpaired_curve


def plot(level: str, out: Path, root: Path = RESULTS) -> None:
    """Write the two panels (SR, BLEU) of ``level``'s curve to ``out``; SystemExit where no point has a run."""
    points = unpaired_curve(level, root)
    if not any(p.n and (p.sr or p.bleu) for p in points):
        raise SystemExit(f"no run of the curve's rows with N > 0 in {root / level / 'runs'}")
    rows = records_by_row(load_records(level, root))
    baselines = {"sr": ("supervised follower", values(rows.get("follower", []), "sr")),
                 "bleu": ("supervised speaker", values(rows.get("speaker", []), "bleu"))}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in zip(axes, ("sr", "bleu"), ("test SR (%)", "test BLEU-4")):
        shown = [(p.n, getattr(p, metric)) for p in points if p.n and getattr(p, metric)]
        if shown:
            ns = [n for n, _ in shown]
            means = [statistics.fmean(xs) for _, xs in shown]
            sds = [statistics.stdev(xs) if len(xs) > 1 else 0.0 for _, xs in shown]
            ax.errorbar(ns, means, yerr=sds, marker="o", capsize=3, label="MS-VAE full")
            for n, mean, (_, xs) in zip(ns, means, shown):
                ax.annotate(f"n={len(xs)}", (n, mean), textcoords="offset points", xytext=(4, 4), fontsize=8)
        paired = next((getattr(p, metric) for p in points if not p.n), [])
        for name, xs, style in (("MS-VAE paired only (N = 0)", paired, "--"), (*baselines[metric], ":")):
            if xs:
                ax.axhline(statistics.fmean(xs), linestyle=style, color="gray" if style == ":" else "black",
                           label=f"{name} (n={len(xs)})")
        ax.set_xscale("log")
        ax.set_xlim(min(p.n for p in points if p.n) / 2, max(p.n for p in points) * 2)  # every N, run or not
        ax.set_xlabel("N, unpaired trajectories")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    save_figure(fig, f"{LEVELS[level]}: MS-VAE against the number of unpaired trajectories", out)


def main(argv: list[str] | None = None) -> None:
    level_plot_main(plot, __doc__, argv)


if __name__ == "__main__":
    main()
