"""``readings``: the paper's statements about its weights and Table 2 under each reading of the objective's
scale."""

from __future__ import annotations

import statistics
from pathlib import Path

from .records import METRICS, RESULTS, load_records, load_reruns, records_by_row, values

#: The loss reductions of the objective (model config ``loss_reduction``, docs/design.md "Loss scale") and the
#: prefix of their rows (cells.READING_ROWS): ``msvae*`` is "sum", ``mean_msvae*`` "mean".
READINGS = {"sum": "", "mean": "mean_"}


#: The paper's statements about its weights and Table 2: (statement, metric, row A, row B, seeds, test), rows
#: without the reading's prefix. seeds "0": seed 0 of each row (App. D's one-seed preliminary runs), "all": the mean
#: over every seed of each row (Table 2). test "greater": the statement holds where A > B; "minor": A and B are
#: gains over paired only (seed 0), and it holds where B's gain is under a third of A's ("gamma <= 1 showed a minor
#: change ... large values showed performance improvements").
STATEMENTS = (
    ("App. D: gamma = 1 changes little, gamma = 100 helps (gain over paired only)", "sr", "msvae", "msvae_gamma1",
     "0", "minor"),
    ("App. D: the same for the speaker", "bleu", "msvae", "msvae_gamma1", "0", "minor"),
    ("App. D: beta = 1 collapses the posterior, the follower degrades (beta = 0.1 > beta = 1)", "sr",
     "msvae", "msvae_beta1", "0", "greater"),
    ("App. D: alpha = 1/20 gives a slightly better BLEU than 1/2", "bleu", "msvae", "msvae_alpha05", "0", "greater"),
    ("Table 2: V raises SR (+ V > paired only)", "sr", "msvae_v", "msvae_paired", "all", "greater"),
    ("Table 2: V raises BLEU (+ V > paired only)", "bleu", "msvae_v", "msvae_paired", "all", "greater"),
    ("Table 2: D' adds to SR (full > + V)", "sr", "msvae", "msvae_v", "all", "greater"),
    ("Table 2: D' adds to BLEU (full > + V)", "bleu", "msvae", "msvae_v", "all", "greater"),
)


def table_readings(level: str, root: Path = RESULTS) -> list[str]:
    """The paper's statements (:data:`STATEMENTS`) under each reading of the objective's scale (:data:`READINGS`):
    ours A vs B (runs per side) and whether the statement holds; "-" where a row has no run with the metric. A
    seed-0 run whose ``runs/`` record lacks the metric (MS-VAE without ``best_speaker/``) gives its run trained again's
    (``reruns/``, as :func:`~result_tables.records.records_trained_again` picks it), named below the table."""
    records = load_records(level, root)
    rows = records_by_row(records)
    again = {r["run"]: r for r in load_reruns(level, root)}
    from_again: set[str] = set()

    def pick(row: str, seeds: str, metric: str) -> list[float]:
        """The metric of seed 0 of ``row`` (its run folder's name is the row's) or of every seed."""
        if seeds != "0":
            return values(rows.get(row, []), metric)
        xs = values([records[row]] if row in records else [], metric)
        if not xs and row in again and (xs := values([again[row]], metric)):
            from_again.add(row)
        return xs

    lines = ["| statement | metric | " + " | ".join(f'"{r}": A vs B (n): holds?' for r in READINGS) + " |",
             "| --- | --- | " + " | ".join("---" for _ in READINGS) + " |"]
    for statement, metric, a, b, seeds, test in STATEMENTS:
        cells = []
        for prefix in READINGS.values():
            xs, ys = pick(prefix + a, seeds, metric), pick(prefix + b, seeds, metric)
            base = pick(prefix + "msvae_paired", "0", metric)
            if not xs or not ys or (test == "minor" and not base):
                cells.append("-")
                continue
            x, y = statistics.fmean(xs), statistics.fmean(ys)
            digits = 1 if metric == "sr" else 2
            if test == "minor":
                x, y = x - base[0], y - base[0]
                holds = x > 0 and abs(y) < x / 3
                cells.append(f"{x:+.{digits}f} vs {y:+.{digits}f} ({len(xs)}, {len(ys)}): {'yes' if holds else 'no'}")
            else:
                cells.append(f"{x:.{digits}f} vs {y:.{digits}f} ({len(xs)}, {len(ys)}): {'yes' if x > y else 'no'}")
        lines.append(f"| {statement} | {METRICS[metric][0]} | " + " | ".join(cells) + " |")
    if from_again:
        lines += ["", "Seed 0 of " + ", ".join(f"`{row}`" for row in sorted(from_again)) + " in the BLEU comparisons: "
                  "its `runs/` record has no speaker checkpoint, so its run trained again (`reruns/`, the same config "
                  "and seed) gives the BLEU."]
    return lines
