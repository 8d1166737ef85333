"""How the data's scale moves the results: ``architectures`` (Table 1: the followers by attention, on many pairs)
and ``unpaired`` (MS-VAE's test SR and BLEU against N, the unpaired trajectories), with :func:`unpaired_curve`
the numbers ``experiments/plot_unpaired.py`` plots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cells import CURVE, TABLE1_ROWS, UNPAIRED_POOL, row_config, row_label

from msvae_hf.models.configuration_msvae import MSVAEConfig

from .records import RESULTS, load_records, mean_sd, records_by_row, values

#: The paper's Table 1 (test SR %, followers trained on 1M pairs), by our row names.
TABLE1_PAPER = {
    "gotoseqlocal": {"follower_m100k_seq2seq": 99.3, "follower_m100k_attention": 99.8,
                     "follower_m100k_bottleneck": 99.6, "follower_m100k_bottleneck_k16": 99.3},
    "bosslocal": {"follower_m100k_seq2seq": 89.8, "follower_m100k_attention": 99.8,
                  "follower_m100k_bottleneck": 97.2, "follower_m100k_bottleneck_k16": 99.2},
}
assert all(set(rows) == set(TABLE1_ROWS) for rows in TABLE1_PAPER.values())


def table_architectures(level: str, root: Path = RESULTS) -> list[str]:
    """Table 1: each follower's test SR (mean +- sd over seeds) and App. D's validation protocol beside the
    paper's, which trained on ten times the pairs."""
    rows = records_by_row(load_records(level, root))
    lines = ["| follower, imitation loss only | test SR (%) | test mean steps | valid SR, App. D protocol (%) | "
             "paper SR, M = 1M (%) |", "| --- | --- | --- | --- | --- |"]
    for row, paper in TABLE1_PAPER[level].items():
        runs = rows.get(row, [])
        lines.append(f"| {row_label(level, row)} | {mean_sd(values(runs, 'sr'))} | {mean_sd(values(runs, 'steps'))} | "
                     f"{mean_sd(values(runs, 'app_d_sr'))} | {paper:.1f} |")
    return lines


@dataclass(frozen=True)
class CurvePoint:
    """One point of the curve: a row of :data:`cells.CURVE`, its N, the epochs of D_u its budget saw (None at
    N = 0), and its runs' test SR (%), test mean steps and BLEU-4."""

    row: str
    n: int
    epochs: float | None
    sr: list[float]
    steps: list[float]
    bleu: list[float]


def unpaired_curve(level: str, root: Path = RESULTS) -> list[CurvePoint]:
    """The curve's points in N's order: N from each row's config (``num_unpaired``; none: all of D_u; no V and no
    D': 0), the epochs its updates saw (updates over the sampler's batches per epoch, N // unpaired batch, on one
    process: :class:`~msvae_hf.data.sampler.StepSampler`), the metrics from its records."""
    rows = records_by_row(load_records(level, root))
    points = []
    for row in CURVE:
        cfg = row_config(level, row)
        n = (cfg.num_unpaired or UNPAIRED_POOL) if MSVAEConfig(**cfg.model).uses_unpaired else 0
        epochs = cfg.max_updates / (n // (cfg.unpaired_batch_size or cfg.batch_size)) if n else None
        runs = rows.get(row, [])
        points.append(CurvePoint(row, n, epochs, values(runs, "sr"), values(runs, "steps"), values(runs, "bleu")))
    return points


def table_unpaired(level: str, root: Path = RESULTS) -> list[str]:
    """MS-VAE full's test SR and BLEU-4 against N (mean +- sd over seeds), with the supervised follower and
    speaker below."""
    lines = ["| N unpaired trajectories | epochs of D_u seen | test SR (%) | test mean steps | test BLEU-4 |",
             "| --- | --- | --- | --- | --- |"]
    for p in unpaired_curve(level, root):
        epochs = "-" if p.epochs is None else f"{p.epochs:.3g}"
        lines.append(f"| {p.n:,} ({row_label(level, p.row)}) | {epochs} | {mean_sd(p.sr)} | {mean_sd(p.steps)} | "
                     f"{mean_sd(p.bleu, 2)} |")
    rows = records_by_row(load_records(level, root))
    follower, speaker = rows.get("follower", []), rows.get("speaker", [])
    lines.append(f"| supervised follower / speaker (paired only) | - | {mean_sd(values(follower, 'sr'))} | "
                 f"{mean_sd(values(follower, 'steps'))} | {mean_sd(values(speaker, 'bleu'), 2)} |")
    return lines
