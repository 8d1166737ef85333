"""The paper's Tables 2 and 3 beside ours: ``paper``, ``headline`` and ``tests`` (App. D's t-tests)."""

from __future__ import annotations

import statistics
from pathlib import Path

from cells import LEVELS, row_label

from .records import METRICS, RESULTS, fmt, load_records, mean_sd, p_greater, p_text, records_by_row, values

#: The paper's Table 2 (SR %, BLEU) and Table 3 (SR %, BabyAI-BossLocal only), by our row names.
PAPER = {
    "gotoseqlocal": {"follower": {"sr": 55.0}, "speaker": {"bleu": 10.43}, "msvae_paired": {"sr": 51.0, "bleu": 11.20},
                     "msvae_v": {"sr": 68.3, "bleu": 10.86}, "msvae": {"sr": 71.7, "bleu": 11.73}},
    "bosslocal": {"follower": {"sr": 45.8, "table3_sr": 45.3}, "speaker": {"bleu": 4.77},
                  "msvae_paired": {"sr": 42.0, "bleu": 6.47}, "msvae_v": {"sr": 69.2, "bleu": 5.97},
                  "msvae": {"sr": 76.7, "bleu": 7.42, "table3_sr": 76.7}, "speaker_follower": {"table3_sr": 75.6},
                  "msvae_speaker_follower": {"table3_sr": 82.6}},
}


#: The claims the paper tests (App. D: one-sided t-tests over three seeds), and Table 3's comparisons:
#: (claim, metric, row, row it must beat).
CLAIMS = (
    ("MS-VAE full > supervised", "sr", "msvae", "follower"),
    ("MS-VAE full > MS-VAE paired only", "sr", "msvae", "msvae_paired"),
    ("+ V > MS-VAE paired only", "sr", "msvae_v", "msvae_paired"),
    ("MS-VAE full > supervised", "bleu", "msvae", "speaker"),
    ("MS-VAE full > MS-VAE paired only", "bleu", "msvae", "msvae_paired"),
    ("+ V > MS-VAE paired only", "bleu", "msvae_v", "msvae_paired"),
    ("speaker-follower > follower", "sr", "speaker_follower", "follower"),
    ("MS-VAE-speaker-follower > speaker-follower", "sr", "msvae_speaker_follower", "speaker_follower"),
    ("MS-VAE-follower (MS-VAE full) > follower", "sr", "msvae", "follower"),
)


def app_d_sr(runs: list[dict]) -> list[float]:
    """The paper's SR protocol (App. D: validation SR per evaluation, window-5 moving average, maximum), in %,
    of the runs whose record computed it."""
    return [100 * r["paper_protocol_valid_sr"] for r in runs if r.get("paper_protocol_valid_sr") is not None]


def table_paper(level: str, root: Path = RESULTS) -> list[str]:
    """Tables 2 and 3: ours (mean +- sd over seeds) beside the paper's number, our SR both as test SR of the
    checkpoint best on validation and by the paper's own protocol (App. D), which the paper reports."""
    rows = records_by_row(load_records(level, root))
    paper = PAPER[level]
    lines = ["| Table 2 | test SR (%) | valid SR, App. D protocol (%) | paper SR | test BLEU-4 | paper BLEU |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines.append(f"| supervised (follower; speaker) | {mean_sd(values(rows.get('follower', []), 'sr'))} | "
                 f"{mean_sd(app_d_sr(rows.get('follower', [])))} | "
                 f"{fmt(paper['follower'].get('sr'), '.1f')} | {mean_sd(values(rows.get('speaker', []), 'bleu'), 2)} | "
                 f"{fmt(paper['speaker'].get('bleu'), '.2f')} |")
    for row in ("msvae_paired", "msvae_v", "msvae"):
        runs = rows.get(row, [])
        lines.append(f"| {row_label(level, row)} | {mean_sd(values(runs, 'sr'))} | {mean_sd(app_d_sr(runs))} | "
                     f"{fmt(paper[row].get('sr'), '.1f')} | {mean_sd(values(runs, 'bleu'), 2)} | "
                     f"{fmt(paper[row].get('bleu'), '.2f')} |")
    has_table3 = any("table3_sr" in numbers for numbers in paper.values())
    paper_sr = "paper SR" if has_table3 else "paper SR (none: the paper's Table 3 is of BossLocal)"
    lines += ["", f"| Table 3 | test SR (%) | valid SR, App. D protocol (%) | {paper_sr} |",
              "| --- | --- | --- | --- |"]
    for row, label in (("follower", "follower"), ("speaker_follower", "speaker-follower"),
                       ("msvae", "MS-VAE-follower (MS-VAE full)"),
                       ("msvae_speaker_follower", "MS-VAE-speaker-follower")):
        runs = rows.get(row, [])
        lines.append(f"| {label} | {mean_sd(values(runs, 'sr'))} | {mean_sd(app_d_sr(runs))} | "
                     f"{fmt(paper.get(row, {}).get('table3_sr'), '.1f')} |")
    return lines


def table_headline(level: str, root: Path = RESULTS) -> list[str]:
    """One line per method of Tables 2 and 3: our test SR (and by the paper's App. D protocol) and BLEU (mean over
    seeds, n) beside the paper's."""
    rows = records_by_row(load_records(level, root))
    paper = PAPER[level]
    lines = [f"| {LEVELS[level]} | SR % (n) | App. D SR % | paper SR | BLEU-4 (n) | paper BLEU |",
             "| --- | --- | --- | --- | --- | --- |"]
    methods = (("supervised follower / speaker", "follower", "speaker", "sr"),
               ("MS-VAE, paired only", "msvae_paired", "msvae_paired", "sr"),
               ("MS-VAE + V", "msvae_v", "msvae_v", "sr"), ("MS-VAE full", "msvae", "msvae", "sr"),
               ("speaker-follower", "speaker_follower", None, "table3_sr"),
               ("MS-VAE-speaker-follower", "msvae_speaker_follower", None, "table3_sr"))

    def short(xs: list[float], digits: int) -> str:
        return "-" if not xs else f"{statistics.fmean(xs):.{digits}f} ({len(xs)})"

    for label, follower, speaker, key in methods:
        srs = values(rows.get(follower, []), "sr")
        bleus = values(rows.get(speaker, []), "bleu") if speaker else []
        app_d = app_d_sr(rows.get(follower, []))
        lines.append(f"| {label} | {short(srs, 1)} | {short(app_d, 1)} | "
                     f"{fmt(paper.get(follower, {}).get(key), '.1f')} | "
                     f"{short(bleus, 2) if speaker else '-'} | "
                     f"{fmt(paper.get(speaker, {}).get('bleu') if speaker else None, '.2f')} |")
    return lines


def table_tests(level: str, root: Path = RESULTS) -> list[str]:
    """The paper's comparisons as one-sided t-tests over seeds, with the paper's two numbers beside ours."""
    rows = records_by_row(load_records(level, root))
    paper = PAPER[level]
    lines = ["| claim | metric | ours (mean, n) | p, one-sided [two-sided] | paper |",
             "| --- | --- | --- | --- | --- |"]
    for claim, metric, row, other in CLAIMS:
        xs, ys = values(rows.get(row, []), metric), values(rows.get(other, []), metric)
        key = "table3_sr" if "follower" in claim and "full >" not in claim else metric
        a, b = paper.get(row, {}).get(key), paper.get(other, {}).get(key)
        theirs = "-" if a is None or b is None else f"{a:g} vs {b:g}"
        ours = "-" if not xs or not ys else (f"{statistics.fmean(xs):.2f} vs {statistics.fmean(ys):.2f} "
                                             f"(n = {len(xs)}, {len(ys)})")
        one, two = p_greater(xs, ys)
        p = "-" if one is None else f"{p_text(one)} [{p_text(two)}]"
        lines.append(f"| {claim} | {METRICS[metric][0]} | {ours} | {p} | {theirs} |")
    return lines
