"""The paper's Tables 2 and 3 beside ours: ``paper``, ``headline`` and ``tests`` (App. D's t-tests), from the
shared-start rows or (``paper_own``, ``headline_own``, ``tests_own``) from the independent seeds; ``headline_film2``
and ``claims_film2`` from the rows with the FiLM follower (independent seeds), with what its SR owes to reading."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping
from pathlib import Path

from cells import FILM2_PAPER_BATCH_ROWS, FILM2_ROWS, INDEPENDENT_ROWS, LEVELS, row_label, run_row

from .records import (
    METRICS,
    RESULTS,
    fmt,
    load_records,
    load_reruns,
    mean_sd,
    p_cell,
    p_greater,
    p_greater_paired,
    records_by_row,
    values,
    values_by_seed,
)

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


#: Tables 2 and 3's rows whose seed k starts from the seed-k baselines or reads the seed-k teacher's labels
#: (experiments/cells.py, ``INDEPENDENT_ROWS``, each named ``<row>_own``): row -> its independent row.
OWN = {own.removesuffix("_own"): own for own in INDEPENDENT_ROWS}

#: The flags by which an MS-VAE run names the baselines it starts from, and their rows.
START_FLAGS = {"--init-follower": "follower", "--init-speaker": "speaker"}


def shared_start_rows(level: str, root: Path = RESULTS) -> dict[str, list[dict]]:
    """row -> its runs' records (``results/<level>/runs/``), every MS-VAE seed from the seed-0 baselines."""
    return records_by_row(load_records(level, root))


def independent_rows(level: str, root: Path = RESULTS) -> dict[str, list[dict]]:
    """Tables 2 and 3's rows from the independent seeds: each row by its runs of :data:`OWN`, the supervised
    follower and speaker by the baselines those MS-VAE runs started from, each by its record trained at the
    same commit as the run that started from it (in ``runs/`` or ``reruns/``; none where there is no such
    record)."""
    first = load_records(level, root)
    by_row = records_by_row(first)
    candidates = [*first.values(), *load_reruns(level, root)]
    rows = {row: by_row.get(own, []) for row, own in OWN.items()}
    starts: dict[str, dict[str, dict]] = {row: {} for row in START_FLAGS.values()}
    for row in ("msvae_paired", "msvae_v", "msvae"):
        for record in rows[row]:
            words = " ".join(record.get("command", [])).split()
            for flag, baseline in START_FLAGS.items():
                if flag not in words:
                    continue
                run = Path(words[words.index(flag) + 1]).parent.name
                same = [c for c in candidates if c["run"] == run and c.get("commit") == record.get("commit")]
                if same:
                    starts[baseline][run] = same[-1]
    for baseline, runs in starts.items():
        rows[baseline] = [runs[run] for run in sorted(runs, key=lambda run: run_row(run)[1])]
    return rows


def table_paper(level: str, root: Path = RESULTS, rows: dict[str, list[dict]] | None = None) -> list[str]:
    """Tables 2 and 3: ours (mean +- sd over seeds) beside the paper's number, our SR both as test SR of the
    checkpoint best on validation (with its mean steps) and by the paper's own protocol (App. D), which the paper
    reports.
    ``rows``: the records by row (default: :func:`shared_start_rows`)."""
    rows = shared_start_rows(level, root) if rows is None else rows
    paper = PAPER[level]

    def follower_cells(runs: list[dict]) -> str:
        """test SR, its mean steps and the App. D protocol's SR."""
        return " | ".join(mean_sd(values(runs, metric)) for metric in ("sr", "steps", "app_d_sr"))

    lines = ["| Table 2 | test SR (%) | test mean steps | valid SR, App. D protocol (%) | paper SR | test BLEU-4 | "
             "paper BLEU |", "| --- | --- | --- | --- | --- | --- | --- |"]
    lines.append(f"| supervised (follower; speaker) | {follower_cells(rows.get('follower', []))} | "
                 f"{fmt(paper['follower'].get('sr'), '.1f')} | {mean_sd(values(rows.get('speaker', []), 'bleu'), 2)} | "
                 f"{fmt(paper['speaker'].get('bleu'), '.2f')} |")
    for row in ("msvae_paired", "msvae_v", "msvae"):
        runs = rows.get(row, [])
        lines.append(f"| {row_label(level, row)} | {follower_cells(runs)} | "
                     f"{fmt(paper[row].get('sr'), '.1f')} | {mean_sd(values(runs, 'bleu'), 2)} | "
                     f"{fmt(paper[row].get('bleu'), '.2f')} |")
    has_table3 = any("table3_sr" in numbers for numbers in paper.values())
    paper_sr = "paper SR" if has_table3 else "paper SR (none: the paper's Table 3 is of BossLocal)"
    lines += ["", f"| Table 3 | test SR (%) | test mean steps | valid SR, App. D protocol (%) | {paper_sr} |",
              "| --- | --- | --- | --- | --- |"]
    for row, label in (("follower", "follower"), ("speaker_follower", "speaker-follower"),
                       ("msvae", "MS-VAE-follower (MS-VAE full)"),
                       ("msvae_speaker_follower", "MS-VAE-speaker-follower")):
        lines.append(f"| {label} | {follower_cells(rows.get(row, []))} | "
                     f"{fmt(paper.get(row, {}).get('table3_sr'), '.1f')} |")
    return lines


#: The headline tables' lines: (label, follower row, speaker row or None, the paper's SR key).
HEADLINE_METHODS = (("supervised follower / speaker", "follower", "speaker", "sr"),
                    ("MS-VAE, paired only", "msvae_paired", "msvae_paired", "sr"),
                    ("MS-VAE + V", "msvae_v", "msvae_v", "sr"), ("MS-VAE full", "msvae", "msvae", "sr"),
                    ("speaker-follower", "speaker_follower", None, "table3_sr"),
                    ("MS-VAE-speaker-follower", "msvae_speaker_follower", None, "table3_sr"))


def table_headline(level: str, root: Path = RESULTS, rows: dict[str, list[dict]] | None = None) -> list[str]:
    """One line per method of Tables 2 and 3: our test SR (with its mean steps, and SR by the paper's App. D
    protocol) and BLEU (mean over seeds, n) beside the paper's. ``rows`` as in :func:`table_paper`."""
    rows = shared_start_rows(level, root) if rows is None else rows
    paper = PAPER[level]
    lines = [f"| {LEVELS[level]} | SR % (n) | mean steps | App. D SR % | paper SR | BLEU-4 (n) | paper BLEU |",
             "| --- | --- | --- | --- | --- | --- | --- |"]

    def short(xs: list[float], digits: int) -> str:
        return "-" if not xs else f"{statistics.fmean(xs):.{digits}f} ({len(xs)})"

    for label, follower, speaker, key in HEADLINE_METHODS:
        srs = values(rows.get(follower, []), "sr")
        bleus = values(rows.get(speaker, []), "bleu") if speaker else []
        steps = values(rows.get(follower, []), "steps")
        app_d = values(rows.get(follower, []), "app_d_sr")
        lines.append(f"| {label} | {short(srs, 1)} | {fmt(statistics.fmean(steps) if steps else None, '.1f')} | "
                     f"{short(app_d, 1)} | "
                     f"{fmt(paper.get(follower, {}).get(key), '.1f')} | "
                     f"{short(bleus, 2) if speaker else '-'} | "
                     f"{fmt(paper.get(speaker, {}).get('bleu') if speaker else None, '.2f')} |")
    return lines


#: Claims whose rows' seeds k are independent draws, not a pair: the speaker-follower trains from scratch on the
#: seed-k speaker's labels and shares with the seed-k follower only the seed. In every other claim of the
#: independent-seed tables, seed k of both rows descends from the seed-k baselines (MS-VAE starts from them; the
#: MS-VAE-speaker-follower and the speaker-follower read teachers that start from, or are, the seed-k speaker).
UNPAIRED_CLAIMS = frozenset({("speaker_follower", "follower")})


def claim_cells(rows: dict[str, list[dict]], metric: str, row: str, other: str) -> tuple[str, str]:
    """(ours: the two rows' means and n, p: one-sided [two-sided]) of the claim "row > other" on ``metric``."""
    xs, ys = values(rows.get(row, []), metric), values(rows.get(other, []), metric)
    ours = "-" if not xs or not ys else (f"{statistics.fmean(xs):.2f} vs {statistics.fmean(ys):.2f} "
                                         f"(n = {len(xs)}, {len(ys)})")
    return ours, p_cell(*p_greater(xs, ys))


def paired_cell(rows: dict[str, list[dict]], metric: str, row: str, other: str) -> str:
    """The claim "row > other" tested on the seed-by-seed differences (seed k of one row against seed k of the
    other), with the number of seeds both hold where a row has another; ``-`` for the claims of
    :data:`UNPAIRED_CLAIMS`."""
    if (row, other) in UNPAIRED_CLAIMS:
        return "-"
    xs, ys = values_by_seed(rows.get(row, []), metric), values_by_seed(rows.get(other, []), metric)
    cell = p_cell(*p_greater_paired(xs, ys))
    common = len(xs.keys() & ys.keys())
    return cell if cell == "-" or common == len(xs) == len(ys) else f"{cell} (n = {common})"


def tested_claims(claims: tuple[tuple[str, str, str, str], ...] = CLAIMS) -> Iterator[tuple[str, str, str, str]]:
    """``claims`` (default :data:`CLAIMS`), each success-rate claim followed by the same claim on the paper's SR
    protocol (App. D), the protocol of the paper's own numbers."""
    for claim, metric, row, other in claims:
        yield claim, metric, row, other
        if metric == "sr":
            yield claim, "app_d_sr", row, other


def paper_claim(level: str, claim: str, metric: str, row: str, other: str) -> str:
    """The paper's two numbers of a claim, "a vs b" ("-" where it has not both)."""
    paper = PAPER[level]
    metric = "sr" if metric == "app_d_sr" else metric
    key = "table3_sr" if "follower" in claim and "full >" not in claim else metric
    a, b = paper.get(row, {}).get(key), paper.get(other, {}).get(key)
    return "-" if a is None or b is None else f"{a:g} vs {b:g}"


def table_tests(level: str, root: Path = RESULTS) -> list[str]:
    """The paper's comparisons as one-sided t-tests over seeds, with the paper's two numbers beside ours."""
    rows = shared_start_rows(level, root)
    lines = ["| claim | metric | ours (mean, n) | p, one-sided [two-sided] | paper |",
             "| --- | --- | --- | --- | --- |"]
    for claim, metric, row, other in tested_claims():
        ours, p = claim_cells(rows, metric, row, other)
        theirs = paper_claim(level, claim, metric, row, other)
        lines.append(f"| {claim} | {METRICS[metric][0]} | {ours} | {p} | {theirs} |")
    return lines


def table_tests_own(level: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_tests` from the independent seeds (:func:`independent_rows`) beside the shared-start rows:
    which comparisons and p-values move when the seeds vary the baselines and teachers too."""
    shared, own = shared_start_rows(level, root), independent_rows(level, root)
    lines = ["| claim | metric | shared start: ours (mean, n) | p, one-sided [two-sided] | "
             "independent seeds: ours (mean, n) | p, one-sided [two-sided] | paired by seed | paper |",
             "|" + " --- |" * 8]
    for claim, metric, row, other in tested_claims():
        cells = " | ".join((*claim_cells(shared, metric, row, other), *claim_cells(own, metric, row, other),
                            paired_cell(own, metric, row, other)))
        lines.append(f"| {claim} | {METRICS[metric][0]} | {cells} | {paper_claim(level, claim, metric, row, other)} |")
    return lines


def table_paper_own(level: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_paper` from the independent seeds (:func:`independent_rows`)."""
    return table_paper(level, root, independent_rows(level, root))


def table_headline_own(level: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_headline` from the independent seeds (:func:`independent_rows`)."""
    return table_headline(level, root, independent_rows(level, root))


#: Tables 2 and 3 with the FiLM follower (experiments/cells.py, ``FILM2_ROWS``, each named ``<row>_film2``; seed k
#: of each MS-VAE row from the seed-k supervised rows, of each speaker-follower on the seed-k teacher's labels):
#: row -> its row with the FiLM follower.
FILM2 = {row.removesuffix("_film2"): row for row in FILM2_ROWS}
#: The supervised follower and MS-VAE full of :data:`FILM2` at the paper's batch of pairs (experiments/cells.py,
#: ``FILM2_PAPER_BATCH_ROWS`` named ``<row>_film2_b256_u2000``; MS-VAE's unpaired batch at its config's 128).
FILM2_PAPER_BATCH = {row.removesuffix("_film2_b256_u2000"): row for row in FILM2_PAPER_BATCH_ROWS
                     if row.endswith("_film2_b256_u2000")}

#: The paper's claims on the FiLM rows, and whether each gain comes from reading the instruction: (claim, metric,
#: row, row it must beat). Each direction is that of the paper's claim (for SR by reading and SPL, which the paper
#: does not report, the direction of its SR claim): the one-sided p tests it. Every row was stated before these runs
#: but the speaker-follower's SR by reading, added after them, so the docs quote its two-sided p.
FILM2_CLAIMS = (
    ("V raises SR (+ V > paired only)", "sr", "msvae_v", "msvae_paired"),
    ("V raises SR by reading (+ V > paired only)", "sr_reading", "msvae_v", "msvae_paired"),
    ("V raises SPL (+ V > paired only)", "spl", "msvae_v", "msvae_paired"),
    ("D' adds (full > + V)", "sr", "msvae", "msvae_v"),
    ("MS-VAE full > supervised", "sr", "msvae", "follower"),
    ("MS-VAE full > supervised", "sr_reading", "msvae", "follower"),
    ("MS-VAE full > paired only", "sr", "msvae", "msvae_paired"),
    ("MS-VAE full > supervised", "bleu", "msvae", "speaker"),
    ("MS-VAE full > paired only", "bleu", "msvae", "msvae_paired"),
    ("+ V > paired only", "bleu", "msvae_v", "msvae_paired"),
    ("speaker-follower > follower", "sr", "speaker_follower", "follower"),
    ("speaker-follower > follower", "sr_reading", "speaker_follower", "follower"),
    ("MS-VAE-speaker-follower > speaker-follower", "sr", "msvae_speaker_follower", "speaker_follower"),
    ("MS-VAE-speaker-follower > speaker-follower", "sr_reading", "msvae_speaker_follower", "speaker_follower"),
)


def film2_rows(level: str, root: Path = RESULTS, names: Mapping[str, str] = FILM2) -> dict[str, list[dict]]:
    """Tables 2 and 3's rows with the FiLM follower: row -> the records of its ``names`` row (default
    :data:`FILM2`), in seed order."""
    by_row = records_by_row(load_records(level, root))
    return {row: by_row.get(film2, []) for row, film2 in names.items()}


def table_headline_film2(level: str, root: Path = RESULTS, names: Mapping[str, str] = FILM2) -> list[str]:
    """One line per method of Tables 2 and 3 with the FiLM follower (those ``names`` has): test SR, SR told another
    episode's mission, their difference (what reading adds), SPL against the bot, mean steps beside the bot's, App.
    D's SR and BLEU (mean +- sd, n), beside the paper's."""
    rows, paper = film2_rows(level, root, names), PAPER[level]
    lines = [f"| {LEVELS[level]} | SR % | told another % | SR by reading (points) | SPL | mean steps (bot) | "
             "App. D SR % | paper SR | BLEU-4 | paper BLEU |", "|" + " --- |" * 10]
    for label, follower, speaker, key in HEADLINE_METHODS:
        if follower not in rows:
            continue
        speaker = speaker if speaker in rows else None
        runs = rows[follower]
        steps, bot = values(runs, "steps"), values(runs, "bot_steps")
        steps_text = "-" if not steps else (f"{statistics.fmean(steps):.1f}"
                                            + (f" ({statistics.fmean(bot):.1f})" if bot else ""))
        cells = [mean_sd(values(runs, "sr")), mean_sd(values(runs, "sr_other")),
                 mean_sd(values(runs, "sr_reading")), mean_sd(values(runs, "spl"), 3), steps_text,
                 mean_sd(values(runs, "app_d_sr")), fmt(paper.get(follower, {}).get(key), ".1f"),
                 mean_sd(values(rows[speaker], "bleu"), 2) if speaker else "-",
                 fmt(paper.get(speaker, {}).get("bleu") if speaker else None, ".2f")]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return lines


def table_claims_film2(level: str, root: Path = RESULTS, names: Mapping[str, str] = FILM2,
                       paired: bool = True) -> list[str]:
    """:data:`FILM2_CLAIMS` on the FiLM rows (those between rows ``names`` has), each SR claim also by the paper's
    protocol (App. D): Student's t-test over seeds (pooled variance; one-sided in the direction of the paper's
    claim, two-sided in brackets), n per side, with ``paired`` the same test paired by seed (:func:`paired_cell`),
    beside the paper's two numbers (by its protocol; none for SR told another mission or SPL, which it does not
    report)."""
    rows = film2_rows(level, root, names)
    header = ["claim", "metric", "ours (mean, n)", "p, one-sided [two-sided]", *(["paired by seed"] if paired else []),
              "paper"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    claims = tuple(c for c in FILM2_CLAIMS if c[2] in rows and c[3] in rows)
    for claim, metric, row, other in tested_claims(claims):
        cells = " | ".join((*claim_cells(rows, metric, row, other),
                            *([paired_cell(rows, metric, row, other)] if paired else [])))
        theirs = paper_claim(level, claim, metric, row, other) if metric in ("sr", "app_d_sr", "bleu") else "-"
        lines.append(f"| {claim} | {METRICS[metric][0]} | {cells} | {theirs} |")
    return lines


def table_headline_film2_b256(level: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_headline_film2` of the rows at the paper's batch of pairs (:data:`FILM2_PAPER_BATCH`)."""
    return table_headline_film2(level, root, FILM2_PAPER_BATCH)


def table_claims_film2_b256(level: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_claims_film2` between the rows at the paper's batch of pairs (:data:`FILM2_PAPER_BATCH`), not
    paired by seed: MS-VAE's seed k there starts from the seed-k follower at 128 a batch, not from this table's."""
    return table_claims_film2(level, root, FILM2_PAPER_BATCH, paired=False)
