#!/usr/bin/env python
"""Validation curves side by side, up to a common number of updates (for runs stopped early).

    python experiments/validation_table.py --upto 1000 results/gpu_grid/valid_logs/*.txt runs/bosslocal/msvae_paired

Each source is a run folder (read as experiments/plot_curves.py reads it) or a text file of the training log's
validation lines (``step N: valid/success_rate=..., valid/bleu=...``, as experiments/gpu_grid.sh keeps
them). Prints, per run, validation BLEU and SR at each evaluation up to ``--upto`` and their maxima.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from plot_curves import read_run  # a run folder's TensorBoard scalars, else its results.json

LINE = re.compile(r"step (\d+): (.*)")
METRICS = ("valid/bleu", "valid/success_rate")


def read_text(path: Path) -> dict[str, dict[int, float]]:
    """Validation lines of a training log -> {metric: {step: value}}."""
    curves: dict[str, dict[int, float]] = {m: {} for m in METRICS}
    for line in path.read_text().splitlines():
        match = LINE.search(line)
        if not match:
            continue
        for item in match.group(2).split(", "):
            key, _, value = item.partition("=")
            if key in curves:
                curves[key][int(match.group(1))] = float(value)
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--upto", type=int, default=None, help="last update to include (default: all)")
    args = parser.parse_args()
    print("| run | valid BLEU per evaluation | max BLEU | valid SR per evaluation | max SR |")
    print("| --- | --- | --- | --- | --- |")
    for source in args.sources:
        path = Path(source)
        curves = read_text(path) if path.is_file() else read_run(path)
        name = path.stem if path.is_file() else path.name
        cells = []
        for metric, spec in zip(METRICS, (".1f", ".3f"), strict=True):
            points = {s: v for s, v in sorted(curves.get(metric, {}).items()) if args.upto is None or s <= args.upto}
            if not points:
                raise SystemExit(f"{source}: no {metric} values" + (f" up to update {args.upto}" if args.upto else ""))
            cells += [" ".join(format(v, spec) for v in points.values()), format(max(points.values()), spec)]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
