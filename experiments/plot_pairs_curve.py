#!/usr/bin/env python
"""Plot where reading begins: SR by reading (SR minus SR told another episode's mission) and SR on another mission
of the same room against M, the pairs (log scale), one line a method, from the run records.

    python experiments/plot_pairs_curve.py gotoseqlocal --out results/gotoseqlocal/pairs_curve.png

Each point is a curve row (experiments/cells.py ``PAIRS_CURVE_ROWS``): the mean over its seeds, the sd as a bar,
its n in the key. Methods at the same M stand side by side (a small shift along the log axis), so that their bars
overlap less. The same numbers as ``python experiments/collect_results.py LEVEL --table pairs_curve``.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import matplotlib.pyplot as plt
from cells import LEVELS
from figures import level_plot_main, save_figure
from result_tables.pairs_curve import curve_rows, test_value
from result_tables.records import RESULTS

#: The panels: (test value, axis label).
PANELS = (("reading", "SR by reading (points)"), ("success_rate_same_room", "SR on another mission of the room (%)"))
#: How far apart methods stand at the same M, in decades of the log axis (the methods with a row at that M, a step
#: each, centred on M).
DODGE = 0.02
#: Markers, a cycle of 7: beside the colours' 20 no two methods of the same hue share one.
MARKERS = "os^Dv<>"


def method_points(rows: list, method: str, key: str) -> list[tuple[int, list[float]]]:
    """(M, the seeds' values in %) of ``method``'s rows that have ``key`` in their test."""
    points = [(m, [100 * v for r in records if (v := test_value(r, key)) is not None])
              for name, m, _, records in rows if name == method]
    return [(m, xs) for m, xs in points if xs]


def key_label(method: str, points: list[tuple[int, list[float]]]) -> str:
    """``method`` with its seeds: the commonest n (the first of equals), then each M that has another."""
    counts = [len(xs) for _, xs in points]
    common = max(counts, key=counts.count)
    others = "".join(f", {len(xs)} at {m:,}" for m, xs in points if len(xs) != common)
    return f"{method} (n = {common}{others})"


def shifts(rows: list) -> dict[tuple[str, int], float]:
    """The factor on M of each (method, M): the methods with a row at M side by side, ``DODGE`` decades apart."""
    at: dict[int, list[str]] = {}
    for method, m, *_ in rows:
        if method not in at.setdefault(m, []):
            at[m].append(method)
    return {(method, m): 10 ** (DODGE * (rank - (len(methods) - 1) / 2))
            for m, methods in at.items() for rank, method in enumerate(methods)}


def plot(level: str, out: Path, root: Path = RESULTS) -> None:
    """Write the two panels of ``level``'s pairs curve to ``out``; SystemExit where no curve row has a record."""
    rows = curve_rows(level, root)
    if not rows:
        raise SystemExit(f"no run of the pairs curve's rows in {root / level / 'runs'}")
    methods = list(dict.fromkeys(method for method, *_ in rows))
    tab20 = plt.get_cmap("tab20").colors  # one colour a method (matplotlib's default cycle repeats after 10):
    colours = tab20[0::2] + tab20[1::2]  # its ten strong hues first, their light pairs after
    shift = shifts(rows)
    key_height = 0.22 * len(methods)  # inches of the key below the panels: a line a method
    fig = plt.figure(figsize=(12, 5 + key_height))
    grid = fig.add_gridspec(2, 2, height_ratios=(5, key_height))
    axes = [fig.add_subplot(grid[0, column]) for column in range(2)]
    entries: dict[str, tuple[object, str]] = {}  # method -> (legend handle, key label), from its first panel
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        for index, method in enumerate(methods):
            points = method_points(rows, method, key)
            if not points:
                continue
            ms = [m * shift[method, m] for m, _ in points]
            means = [statistics.fmean(xs) for _, xs in points]
            sds = [statistics.stdev(xs) if len(xs) > 1 else 0.0 for _, xs in points]
            handle = ax.errorbar(ms, means, yerr=sds, marker=MARKERS[index % len(MARKERS)], capsize=3,
                                 color=colours[index % len(colours)])
            entries.setdefault(method, (handle, key_label(method, points)))  # the first panel's n, SR by reading's
        ax.set_xscale("log")
        ax.set_xlabel("M, pairs")
        ax.set_ylabel(label)
    key = fig.add_subplot(grid[1, :])  # one legend for both panels, below them, where it hides no point
    key.axis("off")
    key.legend([handle for handle, _ in entries.values()], [text for _, text in entries.values()], loc="center",
               ncol=1, fontsize=8)
    save_figure(fig, f"{LEVELS[level]}: where reading begins", out)


def main(argv: list[str] | None = None) -> None:
    level_plot_main(plot, __doc__, argv)


if __name__ == "__main__":
    main()
