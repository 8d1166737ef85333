#!/usr/bin/env python
"""The tables of the results documents, rendered from the committed files under ``results/``.

    python experiments/collect_results.py gotoseqlocal --table paper          # print one table
    python experiments/collect_results.py bosslocal --write docs/results/bosslocal.md   # refresh every table
    python experiments/collect_results.py bosslocal --check docs/results/bosslocal.md   # exit 1 where one differs
    python experiments/collect_results.py gotoseqlocal --floor                # random policies -> floor.json

``results/<level>/runs/<run>.json`` holds one finished run (written by experiments/reproduce.py: config,
seed, commit, machine, wall time, test metrics, validation curve); ``results/<level>/floor.json`` the random
policies on the test seeds; other JSON files there the outputs of the study's tools (compare_speakers,
pragmatic_speakers, probe_speaker, benchmarks/objective_gradients.py). ``results/benchmarks/`` holds the
benchmarks' JSON. A results document marks each table with the command that prints it:

    <!-- table: python experiments/collect_results.py bosslocal --table seeds:msvae_paired,msvae -->
    | ... |
    <!-- end table -->

Tables: ``paper`` (Tables 2 and 3 beside the paper's numbers), ``headline`` (the same in one short table),
``tests`` (the paper's one-sided t-tests over seeds), ``readings`` (the paper's statements about its
weights and Table 2 under each reading of the objective's scale), ``runs:ROW,...`` (every run of those rows, one line
each, with the random floor), ``seeds:ROW,...`` (mean +- sd over seeds, t-tests against the first row),
``seeds_again:ROW,...`` (the same, each run trained again counted as it was trained again),
``flatness:ROW,...`` (has each run's validation SR stopped rising), ``budget:ROW,...`` (runs continued to a
larger budget, each seed beside the run it continued), ``speakers:FILE``, ``pragmatics:FILE``,
``rescoring:FILE`` (pragmatic_speakers per system and seed: lam chosen on valid and the best on test),
``probes:FILE``, ``probe_data:FILE`` (how many trajectories each probe read), ``gradients:FILE``,
``gradient_sweep:FILE,...`` (objective_gradients.py's JSONs side by side, with their alpha sweeps),
``bleu_scales:FILE`` (speakers' test descriptions under the BLEU-4 variants of experiments/bleu_scales.py),
``reruns`` (runs trained again after their record, beside it), ``validation:FILE`` (a table of
experiments/validation_table.py kept as FILE.md: each row's maxima over its seeds); for ``benchmarks``:
``train_step:FILE``, ``train_step_profile:FILE`` (an update's profile),
``train_step_compare:FILE,...`` (one line per benchmark, times against the first), ``train_step_peak:FILE,...``
(the GEMM peak each measured and MS-VAE's fraction of it), ``attention_layout:FILE,...`` (two settings of a
switch timed in one process: padded against length-grouped attention, or F.linear against oneDNN),
``gemm_peaks:FILE,...`` (torch.matmul's and oneDNN's peaks and each model's fraction of either),
``kernel_bound:FILE`` (each update beside its kernels replayed alone: the fraction of the peak they allow),
``train_step_log:LOG,...`` (the seconds per update that benchmarks/gpu_check.sh prints into its log, each
matched to the benchmark's own JSON), ``speaker_decode:FILE``, ``rollout:FILE``,
``rollout_ratios:FILE``, ``demo_generation:FILE``, ``demo_storage:FILE``, ``demo_dataset:FILE``,
``smoke:FOLDER`` (the short training runs ``smoke_*.json`` of gpu_check.sh), ``resume:FILE`` (gpu_check.sh's
weight comparisons), ``gpu_update:FOLDER`` and ``gpu_kernels:FOLDER`` (benchmarks/gpu_update.sh's layouts,
and the captured update's costliest kernels), ``update_ops:FILE`` (operators and activations of one update per
layout). FILE: a JSON name under the folder, without ``.json`` (LOG: a
``.txt`` name without ``.txt``; both may include a subfolder).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from cells import LEVELS, level_rows, row_label, run_dir, run_row

RESULTS = Path("results")
MARK = re.compile(
    r"<!-- table: python experiments/collect_results\.py (\S+) --table (\S+) -->\n(.*?)<!-- end table -->\n", re.DOTALL)

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


# ---------------------------------------------------------------------------------------------- reading
def load_records(level: str, root: Path = RESULTS) -> dict[str, dict]:
    """run name -> its record (``results/<level>/runs/*.json``), in name order."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / level / "runs").glob("*.json"))}


def load_reruns(level: str, root: Path = RESULTS) -> list[dict]:
    """The records of runs trained again after their first record (``results/<level>/reruns/*.json``)."""
    return [json.loads(p.read_text()) for p in sorted((root / level / "reruns").glob("*.json"))]


def records_with_curves(level: str, root: Path = RESULTS) -> dict[str, dict]:
    """:func:`load_records`, where a record without a validation curve gives
    way to its run trained again (``results/<level>/reruns/``) if that one has a curve (the last in name order
    where there are several, as in :func:`records_trained_again`)."""
    first = load_records(level, root)
    records = dict(first)
    for again in load_reruns(level, root):
        if again.get("history") and not first.get(again["run"], {}).get("history"):
            records[again["run"]] = {**again, "trained_again": True}
    return records


def records_trained_again(level: str, root: Path = RESULTS) -> dict[str, dict]:
    """:func:`load_records`, each run trained again given by its record in ``reruns/`` instead (the last in name
    order where there are several): the runs as they now stand, e.g. all on the teachers trained again."""
    records = load_records(level, root)
    for again in load_reruns(level, root):
        records[again["run"]] = again
    return records


def records_by_row(records: dict[str, dict]) -> dict[str, list[dict]]:
    """row -> its runs' records in seed order."""
    rows: dict[str, list[tuple[int, dict]]] = {}
    for run, record in records.items():
        row, seed = run_row(run)
        rows.setdefault(row, []).append((seed, record))
    return {row: [r for _, r in sorted(runs, key=lambda x: x[0])] for row, runs in rows.items()}


def sr(record: dict) -> float | None:
    """Test success rate of ``best/`` (best by validation SR), a fraction."""
    return (record.get("test") or {}).get("success_rate")


def bleu(record: dict) -> float | None:
    """Test BLEU-4 of the speaker checkpoint: a speaker's ``best/``, MS-VAE's ``best_speaker/`` (None for an
    MS-VAE run without ``best_speaker/``: its BLEU is of ``best/``, see :func:`bleu_of_best`)."""
    if record.get("model_type") == "msvae" and not record.get("best_speaker"):
        return None
    return record.get("test_bleu")


def bleu_of_best(record: dict) -> float | None:
    """MS-VAE's test BLEU-4 of ``best/`` (the checkpoint best by validation SR)."""
    if record.get("model_type") != "msvae":
        return None
    return record.get("test_bleu_of_best") if record.get("best_speaker") else record.get("test_bleu")


METRICS: dict[str, tuple[str, Callable[[dict], float | None]]] = {
    "sr": ("test SR (%)", lambda r: None if sr(r) is None else 100 * sr(r)),
    "bleu": ("test BLEU-4", bleu),
    "bleu_of_best": ("test BLEU-4 of best/ (MS-VAE)", bleu_of_best),
}


def values(runs: list[dict], metric: str) -> list[float]:
    get = METRICS[metric][1]
    return [v for r in runs if (v := get(r)) is not None]


def p_greater(xs: list[float], ys: list[float]) -> tuple[float | None, float | None]:
    """Student's t-test (pooled variance) of mean(xs) > mean(ys): one-sided and two-sided p (None with fewer
    than two values on a side, or no spread at all)."""
    if len(xs) < 2 or len(ys) < 2 or statistics.pvariance(xs) + statistics.pvariance(ys) == 0:
        return None, None
    from scipy.stats import ttest_ind

    return float(ttest_ind(xs, ys, alternative="greater").pvalue), float(ttest_ind(xs, ys).pvalue)


def mean_sd(xs: list[float], digits: int = 1) -> str:
    """``mean +- sd (n = k)``, ``-`` for no values."""
    if not xs:
        return "-"
    text = f"{statistics.fmean(xs):.{digits}f}"
    if len(xs) > 1:
        text += f" +- {statistics.stdev(xs):.{digits}f}"
    return text + f" (n = {len(xs)})"


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def p_text(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


# ---------------------------------------------------------------------------------------------- level tables
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
    lines += ["", "| Table 3 | test SR (%) | valid SR, App. D protocol (%) | paper SR (BossLocal) |",
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
    ours A vs B (runs per side) and whether the statement holds; "-" where a row has no run with the metric."""
    records = load_records(level, root)
    rows = records_by_row(records)

    def pick(row: str, seeds: str, metric: str) -> list[float]:
        """The metric of seed 0 of ``row`` (its run folder's name is the row's) or of every seed."""
        return values([records[row]] if row in records else [], metric) if seeds == "0" else \
            values(rows.get(row, []), metric)

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
    return lines


def bleu_checkpoint(record: dict) -> str:
    """Which checkpoint the BLEU column scored."""
    if record.get("test_bleu") is None:
        return "-"
    if record.get("best_speaker"):
        return f"best valid BLEU (update {record['best_speaker']['step']})"
    kind = "SR" if record.get("model_type") == "msvae" else "BLEU"
    return f"best valid {kind} (update {record['best']['step']})"


def machine(record: dict) -> str:
    m = record.get("machine")
    if isinstance(m, dict):
        return f"{m['device'] if m['device'] != 'cpu' else str(m['cpus']) + '-core CPU'}, {m['torch_threads']} thr."
    return m or "-"


def table_runs(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """Every run of ``rows`` (comma-separated), then the random floor."""
    by_row = records_by_row(load_records(level, root))
    lines = ["| run | seed | test SR | mean steps | mean reward | valid SR, App. D protocol | test BLEU-4 | "
             "BLEU checkpoint | updates | wall (min) | machine |", "| --- |" + " --- |" * 10]
    for row in rows.split(","):
        for record in by_row.get(row, []):
            test = record.get("test") or {}
            lines.append(
                f"| {row_label(level, row)} | {run_row(record['run'])[1]} | {fmt(test.get('success_rate'), '.3f')} | "
                f"{fmt(test.get('mean_steps'), '.1f')} | {fmt(test.get('mean_reward'), '.3f')} | "
                f"{fmt(record.get('paper_protocol_valid_sr'), '.3f')} | {fmt(record.get('test_bleu'), '.2f')} | "
                f"{bleu_checkpoint(record)} | {record.get('updates')} | "
                f"{fmt(record.get('wall_time_s') and record['wall_time_s'] / 60, '.0f')} | {machine(record)} |")
    floor = root / level / "floor.json"
    if floor.exists():
        for name, s in json.loads(floor.read_text()).items():
            lines.append(f"| floor: {name.replace('_', ' ')} | - | {s['success_rate']:.3f} | {s['mean_steps']:.1f} | "
                         f"{s['mean_reward']:.3f} | - | - | - | - | - | - |")
    return lines


def table_seeds(level: str, rows: str, root: Path = RESULTS, again: bool = False) -> list[str]:
    """Mean +- sd over seeds of each row; p: one-sided t-test of 'greater than' the first row [two-sided].
    ``again``: each run trained again counts with its record in ``reruns/``."""
    by_row = records_by_row((records_trained_again if again else load_records)(level, root))
    names = rows.split(",")
    metrics = [m for m in METRICS if any(values(by_row.get(r, []), m) for r in names)]
    lines = ["| method | " + " | ".join(METRICS[m][0] for m in metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    reference = by_row.get(names[0], [])
    for row in names:
        cells = []
        for metric in metrics:
            xs = values(by_row.get(row, []), metric)
            cell = mean_sd(xs, 1 if metric == "sr" else 2)
            one, two = p_greater(xs, values(reference, metric)) if row != names[0] else (None, None)
            cells.append(cell + ("" if one is None else f", p = {p_text(one)} [{p_text(two)}]"))
        lines.append(f"| {row_label(level, row)} | " + " | ".join(cells) + " |")
    return lines


def table_seeds_again(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_seeds` over the runs as they now stand (:func:`records_trained_again`)."""
    return table_seeds(level, rows, root, again=True)


def valid_curve(record: dict) -> tuple[dict[int, float], int] | None:
    """(update -> validation SR, episodes per validation) of a record; None without either."""
    curve = {h["step"]: h["valid/success_rate"] for h in record.get("history", []) if "valid/success_rate" in h}
    episodes = (record.get("config") or {}).get("eval_episodes")
    return (curve, episodes) if curve and episodes else None


def last_quarter(record: dict) -> tuple[tuple[int, float], tuple[int, float], float] | None:
    """((update, valid SR) at three quarters of the updates, (update, valid SR) at the end, standard error of one
    validation SR at the end: sqrt(p (1 - p) / episodes)); None without a curve of two evaluations."""
    if (found := valid_curve(record)) is None or len(found[0]) < 2:
        return None
    curve, episodes = found
    end = max(curve)
    quarter = min((s for s in curve if s >= 0.75 * end), default=end)
    return (quarter, curve[quarter]), (end, curve[end]), (curve[end] * (1 - curve[end]) / episodes) ** 0.5


def quarter_means(record: dict) -> tuple[float, float, float] | None:
    """(mean validation SR of the last quarter of the updates, of the quarter before, the standard error of their
    difference: sqrt(p (1 - p) / episodes x (1 / n1 + 1 / n2)) at the pooled mean p); None without two
    evaluations in each quarter. Less noisy than two single evaluations (:func:`last_quarter`)."""
    if (found := valid_curve(record)) is None:
        return None
    curve, episodes = found
    end = max(curve)
    last = [v for s, v in curve.items() if s > 0.75 * end]
    before = [v for s, v in curve.items() if 0.5 * end < s <= 0.75 * end]
    if len(last) < 2 or len(before) < 2:
        return None
    p = statistics.fmean(last + before)
    se = (p * (1 - p) / episodes * (1 / len(last) + 1 / len(before))) ** 0.5
    return statistics.fmean(last), statistics.fmean(before), se


def means_text(means: tuple[float, float, float] | None) -> str:
    """``+0.017 (0.021)``: the gain of :func:`quarter_means` and its standard error; ``-`` where there are none."""
    return "-" if means is None else f"{means[0] - means[1]:+.3f} ({means[2]:.3f})"


def table_flatness(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """Has each run's validation SR flattened? The gain over the last quarter of its updates (the evaluation at
    the end minus the one at three quarters) against the binomial standard error of one validation SR
    (:func:`last_quarter`), and the less noisy mean of the last quarter's evaluations against the quarter
    before's (:func:`quarter_means`); flattened where the gain is smaller than its standard error. A run recorded
    without a curve is read from its run trained again, marked "(again)"; runs without any curve are left out."""
    by_row = records_by_row(records_with_curves(level, root))
    lines = ["| run | seed | valid SR at 3/4 of the updates | at the end | gain | standard error | flattened | "
             "last quarter's mean minus the quarter before's (SE) | flattened by the means |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows.split(","):
        for record in by_row.get(row, []):
            if (found := last_quarter(record)) is None:
                continue
            (quarter, at_quarter), (end, at_end), se = found
            gain = at_end - at_quarter
            means = quarter_means(record)
            flat_by_means = "-" if means is None else "yes" if means[0] - means[1] < means[2] else "no"
            again = " (again)" if record.get("trained_again") else ""
            lines.append(f"| {row_label(level, row)} | {run_row(record['run'])[1]}{again} | {at_quarter:.3f} "
                         f"(update {quarter}) | {at_end:.3f} (update {end}) | {gain:+.3f} | {se:.3f} | "
                         f"{'yes' if gain < se else 'no'} | {means_text(means)} | {flat_by_means} |")
    return lines


def continued_record(level: str, record: dict, candidates: list[dict]) -> dict | None:
    """The record of the run that ``record`` continued (``--continue-from``): of its row's ``continues`` row and
    seed, among ``candidates`` (first records and runs trained again), the one whose curve the continued run's
    begins with."""
    row, seed = run_row(record["run"])
    source = level_rows(level)[row].continues
    if source is None:
        return None
    name, history = run_dir(level, source, seed).name, record.get("history", [])
    return next((r for r in candidates if r["run"] == name and r.get("history")
                 and history[:len(r["history"])] == r["history"]), None)


def best_valid(record: dict) -> str:
    """The best validation SR of a record and its update (``best/``'s selection)."""
    best = record.get("best") or {}
    return "-" if best.get("score") is None else f"{best['score']:.3f} (update {best['step']})"


def table_budget(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """Each seed of ``rows`` (runs continued to a larger budget, cells.Row.continues) beside the run it
    continued: test SR of ``best/``, the best validation SR and its update, the validation SR's gain over the last
    quarter of each budget (:func:`last_quarter`) and the last quarter's mean against the quarter before's
    (:func:`quarter_means`)."""
    first_records = load_records(level, root)
    candidates = [*first_records.values(), *load_reruns(level, root)]
    lines = ["| run | seed | updates | test SR | best valid SR (update) | valid SR gain over the last quarter (SE) | "
             "mean valid SR of the last quarter minus the quarter before (SE) | record continued |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows.split(","):
        source = level_rows(level)[row].continues
        for record in records_by_row(first_records).get(row, []):
            seed = run_row(record["run"])[1]
            before = continued_record(level, record, candidates)
            first = first_records.get(run_dir(level, source, seed).name)
            for label, r in ((row_label(level, source), before), (row_label(level, row), record)):
                if r is None:
                    continue
                found = last_quarter(r)
                gain = "-" if found is None else f"{found[1][1] - found[0][1]:+.3f} ({found[2]:.3f})"
                which = "-" if r is record else "its first record" if r is first else "its run trained again"
                lines.append(f"| {label} | {seed} | {r.get('updates')} | {fmt(sr(r), '.3f')} | {best_valid(r)} | "
                             f"{gain} | {means_text(quarter_means(r))} | {which} |")
    return lines


def table_reruns(level: str, root: Path = RESULTS) -> list[str]:
    """Runs trained again after their record was written (``results/<level>/reruns/<run>_<commit>.json``, e.g. a
    baseline retrained on a new machine to start other runs from), each beside its first record."""
    lines = ["| run | seed | test SR: first | again | test BLEU-4 (MS-VAE: of best/): first | again | commit again | "
             "wall again (min) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    first = load_records(level, root)

    def bleu_alike(record: dict) -> float | None:  # every MS-VAE record has best/; older ones lack best_speaker/
        return bleu_of_best(record) if record.get("model_type") == "msvae" else bleu(record)

    for again in load_reruns(level, root):
        before = first.get(again["run"], {})
        row, seed = run_row(again["run"])
        lines.append(f"| {row_label(level, row)} | {seed} | {fmt(sr(before), '.3f')} | {fmt(sr(again), '.3f')} | "
                     f"{fmt(bleu_alike(before), '.2f')} | {fmt(bleu_alike(again), '.2f')} | "
                     f"{short_commit(again.get('commit'))} | "
                     f"{fmt(again.get('wall_time_s') and again['wall_time_s'] / 60, '.0f')} |")
    return lines


def short_commit(commit: str | None) -> str:
    """A commit's first 7 characters, "(dirty)" after it where the run's working tree had uncommitted changes."""
    if not commit:
        return "-"
    return commit[:7] + (" (dirty)" if commit.endswith("-dirty") else "")


def read_json(level: str, name: str, root: Path = RESULTS) -> dict:
    path = root / level / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"no {path}")
    return json.loads(path.read_text())


def table_speakers(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/compare_speakers.py's JSON: BLEU with its bootstrap interval, p against the first speaker,
    and how often the action words and the object words are the reference's, in order."""
    data = read_json(level, name, root)
    first = next(iter(data["speakers"]))
    lines = [f"| speaker | BLEU-4 ({data['examples']} {data['split']} pairs) | 95% CI | p vs {first} | "
             "action sequence right | object sequence right |", "| --- | --- | --- | --- | --- | --- |"]
    for label, s in data["speakers"].items():
        p = "-" if s["p_value"] is None else f"{s['p_value']:.3f}"
        lines.append(f"| {label} | {s['bleu']:.2f} | +-{s['ci']:.2f} | {p} | {s['parts_match']['actions']:.3f} | "
                     f"{s['parts_match']['objects']:.3f} |")
    return lines


def table_pragmatics(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/pragmatic_speakers.py's JSON: test BLEU greedy, beam and rescored (lam chosen on valid)."""
    data = read_json(level, name, root)
    over = data["over_seeds"]
    lines = ["| speaker + follower | " + " | ".join(over) + " |", "| --- |" + " --- |" * len(over)]
    for system in next(iter(over.values())):
        cells = [mean_sd(over[m][system]["values"], 2) if system in over[m] else "-" for m in over]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return lines


def table_probes(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/probe_speaker.py's JSON: linear-probe accuracy of the object faced at the end."""
    data = read_json(level, name, root)
    probes = [k for k, v in next(iter(data["models"].values())).items() if isinstance(v, dict)]
    lines = ["| model | " + " | ".join(probes) + " |", "| --- |" + " --- |" * len(probes)]
    for label, m in data["models"].items():
        lines.append(f"| {label} | " + " | ".join(f"{m[p]['accuracy']:.3f} (majority {m[p]['majority']:.3f})"
                                                  for p in probes) + " |")
    return lines


def table_gradients(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/objective_gradients.py's JSON: gradient norms of each objective term on the trajectory
    encoder and the sliced-Wasserstein distances between batches."""
    data = read_json(level, name, root)
    lines = ["| quantity | value |", "| --- | --- |"]
    for key, value in data.items():
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"| {key.replace('_', ' ')} | {text} |")
    return lines


def table_gradient_sweep(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/objective_gradients.py's JSONs side by side: each term's gradient norm on q(z|a,o), the alpha at
    which D' pulls as hard as J-bar, and alpha D' against J-bar at each alpha of the sweep."""
    data = {name: read_json(level, name, root) for name in names.split(",")}
    alphas = sorted({a["alpha"] for d in data.values() for a in d.get("alpha_sweep", [])})
    lines = ["| model | reduction | gamma V | J-bar | D' per unit alpha | alpha where D' = J-bar | "
             + " | ".join(f"alpha D' / J-bar at {a:g}" for a in alphas) + " |",
             "| --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in alphas) + " |"]
    for d in data.values():  # the norm of alpha D''s gradient is linear in alpha: a file without a sweep has one too
        model = d["model"] if isinstance(d["model"], str) else "MS-VAE from the baselines (App. D)"
        g_j, g_d = d["grad_norm_j_bar"], d["grad_norm_d_per_unit_alpha"]
        lines.append(f"| {model} | {d.get('loss_reduction', 'sum')} | {d['grad_norm_gamma_v']:.4g} | {g_j:.4g} | "
                     f"{g_d:.4g} | {g_j / g_d:.4g} | " + " | ".join(f"{a * g_d / g_j:.3g}" for a in alphas) + " |")
    return lines


def system_name(name: str) -> str:
    """``NAME#k`` (experiments/pragmatic_speakers.py's seed mark) -> ``NAME, seed k``."""
    base, mark, seed = name.rpartition("#")
    return f"{base}, seed {seed}" if mark else name


def table_rescoring(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/pragmatic_speakers.py's JSON, one line per system and seed: the lam (speaker weight) chosen on
    the valid pairs, test BLEU greedy / beam / rescored with it, the bootstrap p of rescored against greedy, and
    the lam that would have been best on the test pairs."""
    data = read_json(level, name, root)
    lines = [f"| speaker + follower | lam chosen on {data['valid_split']} | test BLEU greedy | test BLEU beam "
             f"(lam = 1) | test BLEU rescored | p rescored vs greedy | lam best on {data['test_split']} | "
             "test BLEU at that lam |", "| --- |" + " --- |" * 7]
    for system, s in data["systems"].items():
        by_lam = {float(k): v for k, v in s["test_bleu_by_lam"].items()}
        best = max(by_lam, key=by_lam.get)
        lines.append(f"| {system_name(system)} | {s['lam']:g} | {s['test_bleu_greedy']:.2f} | "
                     f"{s['test_bleu_beam']:.2f} | {s['test_bleu_rescored']:.2f} | {s['p_rescored_vs_greedy']:.3f} | "
                     f"{best:g} | {by_lam[best]:.2f} |")
    return lines


def table_probe_data(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/probe_speaker.py's JSON: the trajectories read, those facing an object at their last step,
    and the held-out share each probe was scored on."""
    data = read_json(level, name, root)
    lines = ["| model | trajectories read | facing an object at the last step | held-out examples per probe |",
             "| --- | --- | --- | --- |"]
    for label, m in data["models"].items():
        held_out = sorted({v["test_examples"] for v in m.values() if isinstance(v, dict)})
        lines.append(f"| {label} | {data['examples']} | {m['examples_facing_an_object']} | "
                     f"{', '.join(map(str, held_out))} |")
    return lines


def table_validation(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """A table printed by experiments/validation_table.py (kept as ``FILE.md``, its command in an HTML comment
    on the first line): each row's maximum validation BLEU and SR, its seeds side by side, and their mean."""
    path = root / level / f"{name}.md"
    if not path.exists():
        raise SystemExit(f"no {path}")
    text = path.read_text()
    upto = re.search(r"--upto (\d+)", text)
    within = f", updates <= {upto.group(1)}" if upto else ""
    rows: dict[str, dict[int, tuple[float, float]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("run", "---"):
            continue
        row, seed = run_row(cells[0])
        rows.setdefault(row, {})[seed] = (float(cells[2]), float(cells[4]))
    lines = [f"| runs | seeds | max valid BLEU{within} | mean | max valid SR{within} | mean |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row, seeds in rows.items():
        order = sorted(seeds)
        bleus, srs = [seeds[k][0] for k in order], [seeds[k][1] for k in order]
        lines.append(f"| {row_label(level, row)} | {', '.join(map(str, order))} | "
                     f"{' / '.join(f'{b:.1f}' for b in bleus)} | {statistics.fmean(bleus):.1f} | "
                     f"{' / '.join(f'{v:.3f}' for v in srs)} | {statistics.fmean(srs):.3f} |")
    return lines


# ---------------------------------------------------------------------------------------------- benchmarks
def table_train_step(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py: seconds per update and the fraction of the GEMM peak, per model."""
    data = read_json(level, name, root)
    where = data.get("device_name", data["device"])
    lines = [f"| model ({where}, {data['torch_threads']} thread(s), {PRECISION[data.get('mixed_precision', 'no')]}) | "
             "s / update | GFLOP / update | fraction of GEMM peak |", "| --- | --- | --- | --- |"]
    rows = list(data["models"].items())
    if "msvae_default_allocator" in data:  # timed before retain_freed_memory()
        rows.append(("msvae, the C library's default allocator", data["msvae_default_allocator"]))
    for model, m in rows:
        lines.append(f"| {model} | {m['seconds_per_update']:.4f} | {m['flops_fwd_bwd'] / 1e9:.1f} | "
                     f"{fmt(m.get('fraction_of_gemm_peak'), '.2f')} |")
    return lines


def table_train_step_profile(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py --profile-steps: an MS-VAE update's profiled time and FLOPs by kind of operator,
    each kind's rate against the GEMM peak."""
    data = read_json(level, name, root)
    profile, peak = data["msvae_profile"], data["gemm_peak_flops_per_s"]
    total, flops = profile["total_ms_per_update"], profile["flops_per_update"]
    lines = [f"| operators (MS-VAE, {profile['steps']} profiled updates) | ms / update | share of the time | "
             "GFLOP / update | share of the FLOPs | GFLOP/s (fraction of the GEMM peak) |",
             "| --- | --- | --- | --- | --- | --- |"]
    all_flops = sum(flops.values())
    for kind, ms in [*profile["ms_per_update"].items(), ("all", total)]:
        f = all_flops if kind == "all" else flops[kind]
        rate = f / (ms / 1e3) if ms else 0.0
        lines.append(f"| {kind} | {ms:.1f} | {ms / total:.2f} | {f / 1e9:.1f} | {f / all_flops:.2f} | "
                     f"{rate / 1e9:.1f} ({rate / peak:.2f}) |")
    return lines


def table_kernel_bound(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/kernel_bound.py: per model the update's time and fraction of the best GEMM peak beside its
    kernels replayed alone (the ceiling), and each kind of kernel's rate."""
    data = read_json(level, name, root)
    best = data["best_gemm_peak_flops_per_s"]
    lines = [f"| model ({data['torch_threads']} thread(s), best GEMM peak {best / 1e9:.0f} GFLOP/s) | s / update "
             "(fraction of the peak) | its kernels alone: s (fraction: the ceiling) | convolutions | matrix products "
             "| attention | s outside the kernels |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, r in data["models"].items():
        update, kernels = r["update"], r["kernels"]
        kinds = [fmt(kernels["by_kind"][kind]["fraction_of_best_gemm_peak"], ".2f")
                 for kind in ("convolution", "matmul", "attention")]
        lines.append(f"| {model} | {update['seconds_per_update']:.4f} ({update['fraction_of_best_gemm_peak']:.2f}) | "
                     f"{kernels['seconds']:.4f} ({kernels['ceiling_fraction_of_best_gemm_peak']:.2f}) | "
                     f"{' | '.join(kinds)} | {r['seconds_outside_kernels']:.4f} |")
    return lines


def table_speaker_decode(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/speaker_decode.py: sequences per second with and without the decoder cache."""
    data = read_json(level, name, root)
    lines = [f"| model ({data['batch_size']} trajectories x {data['new_tokens']} tokens) | cached seq/s | "
             "uncached seq/s | cached / uncached | identical sequences |", "| --- | --- | --- | --- | --- |"]
    for model, m in data["models"].items():
        lines.append(f"| {model} | {m['sequences_per_s_cached']:.0f} | {m['sequences_per_s_uncached']:.0f} | "
                     f"{m['speedup_cached_over_uncached']:.2f} | {m['identical_sequences']} |")
    return lines


def table_rollout(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/rollout.py: steps and episodes per second of each way of rolling out."""
    data = read_json(level, name, root)
    lines = [f"| {data['episodes']} {data['level']} episodes, {data['policy']} | episodes/s | steps/s |",
             "| --- | --- | --- |"]
    for way, r in data["results"].items():
        lines.append(f"| {way.replace('_', ' ')} | {r['episodes_per_s']:.1f} | {r['steps_per_s']:.0f} |")
    return lines


def table_demo_generation(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/demo_generation.py: demos per second, bytes per demo, memory while iterating."""
    data = read_json(level, name, root)
    it = data["iteration"]
    return [
        "| quantity | value |", "| --- | --- |",
        f"| demos/s, 1 process ({data['level']}) | {data['demos_per_s_1proc']:.0f} |",
        f"| demos/s, 2 processes | {data['demos_per_s_2proc']:.0f} ({data['speedup_2_vs_1']:.2f}x) |",
        *([f"| 2 processes against 1, round by round (order alternating; median above) | "
           f"{', '.join(f'{r:.2f}x' for r in data['speedup_per_round'])} |"] if data.get("repeats", 1) > 1 else []),
        *([f"| CPU seconds, 1 / 2 processes (cores kept busy by 2) | {data['cpu_seconds_1proc']:.1f} / "
           f"{data['cpu_seconds_2proc']:.1f} ({data['cpu_busy_2proc']:.2f}) |"] if "cpu_seconds_1proc" in data else []),
        f"| bytes per demo on disk | {data['bytes_per_demo']:.0f} |",
        *iteration_rows(it),
    ]


def iteration_rows(it: dict) -> list[str]:
    """Two table rows from an epoch of DataLoader over a demo set (benchmarks/demo_generation.py's `iterate`)."""
    return [f"| rows iterated (batches of {it['batch_size']}) | {it['rows_iterated']} at {it['rows_per_s']:.0f} "
            "rows/s |",
            f"| peak resident memory: anonymous / file-backed (MB) | {it['peak_anon_mb']:.0f} / "
            f"{it['peak_file_mb']:.0f} |"]


PRECISION = {"no": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}


def train_step_where(data: dict) -> str:
    return (f"{data.get('device_name', data['device'])}, {data['torch_threads']} thread(s), "
            f"{PRECISION[data.get('mixed_precision', 'no')]}")


def table_train_step_compare(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py's JSONs side by side: milliseconds per update of each model, and how many times
    faster than the first JSON each is."""
    runs = [(name, read_json(level, name, root)) for name in names.split(",")]
    models = list(runs[0][1]["models"])
    lines = ["| benchmark | where | " + " | ".join(f"{m} ms / update" for m in models) + " | msvae / follower |",
             "| --- | --- |" + " --- |" * (len(models) + 1)]
    first = runs[0][1]["models"]
    for name, data in runs:
        cells = []
        for m in models:
            s = data["models"][m]["seconds_per_update"]
            cells.append(f"{1000 * s:.1f}" + ("" if name == runs[0][0] else
                                               f" ({first[m]['seconds_per_update'] / s:.2f}x)"))
        lines.append(f"| {name}.json | {train_step_where(data)} | " + " | ".join(cells) +
                     f" | {data['ratio_msvae_over_follower']:.2f} |")
    return lines


def table_train_step_peak(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py's JSONs in the order run: the commit timed, the GEMM peaks it measured in order
    (before the models and after them, or after each), and MS-VAE's seconds per update and fraction of the
    highest peak."""
    lines = ["| benchmark | commit | GEMM peaks measured, in order (GFLOP/s) | msvae s / update | "
             "msvae GFLOP / update | msvae fraction of GEMM peak |", "| --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        data = read_json(level, name, root)
        peaks = (data.get("gemm_peak_flops_per_s_samples") or data.get("gemm_peak_flops_per_s_before_after")
                 or [data["gemm_peak_flops_per_s"]])
        m = data["models"]["msvae"]
        lines.append(f"| {name}.json | {str(data.get('commit', '-'))[:7]} | "
                     f"{' / '.join(f'{p / 1e9:.1f}' for p in peaks)} | {m['seconds_per_update']:.4f} | "
                     f"{m['flops_fwd_bwd'] / 1e9:.1f} | {fmt(m.get('fraction_of_gemm_peak'), '.2f')} |")
    return lines


def table_attention_layout(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/attention_layout.py's JSONs: each model's seconds per update in the switch's two settings
    (padded batch and length groups, or F.linear and oneDNN; updates alternating in one process), the speed-up,
    and each setting's GFLOP and fraction of the GEMM peak: the highest torch.matmul peak the run measured, or,
    where the first JSON has it, the best of torch.matmul's and oneDNN's (``best``)."""
    first_data = read_json(level, names.split(",")[0], root)
    a, b = first_data.get("settings", ["padded", "grouped"])
    best = "best_gemm_peak_flops_per_s" in first_data
    peak, key = ("best GEMM peak", "fraction_of_best_gemm_peak") if best else ("GEMM peak", "fraction_of_gemm_peak")
    lines = [f"| benchmark | model | {a} s / update | {b} s / update | {a} / {b} | GFLOP / update ({a}, {b}) | "
             f"fraction of {peak} ({a}, {b}) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        data = read_json(level, name, root)
        for model, r in data["models"].items():
            first, second = r[a], r[b]
            lines.append(f"| {name}.json | {model} | {first['seconds_per_update']:.4f} | "
                         f"{second['seconds_per_update']:.4f} | {r[f'{a}_over_{b}']:.2f}x | "
                         f"{first['flops_fwd_bwd'] / 1e9:.1f}, {second['flops_fwd_bwd'] / 1e9:.1f} | "
                         f"{first[key]:.2f}, {second[key]:.2f} |")
    return lines


def table_gemm_peaks(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """JSONs that time both GEMM backends (benchmarks/train_step.py, attention_layout.py): the peaks of
    torch.matmul and of oneDNN's matmul in the order measured, and each model's (default setting's) seconds per
    update and fraction of either peak."""
    lines = ["| benchmark | commit | torch.matmul peaks (GFLOP/s) | oneDNN matmul peaks (GFLOP/s) | model | "
             "s / update | fraction of torch.matmul peak | fraction of best peak |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        data = read_json(level, name, root)
        peaks = [" / ".join(f"{p / 1e9:.1f}" for p in data[k]) or "-"
                 for k in ("gemm_peak_flops_per_s_samples", "onednn_gemm_peak_flops_per_s_samples")]
        for model, r in data["models"].items():
            r = r[data["settings"][1]] if "settings" in data else r
            lines.append(f"| {name}.json | {str(data.get('commit', '-'))[:7]} | {peaks[0]} | {peaks[1]} | {model} | "
                         f"{r['seconds_per_update']:.4f} | {r['fraction_of_gemm_peak']:.2f} | "
                         f"{r['fraction_of_best_gemm_peak']:.2f} |")
    return lines


TRAIN_STEP_LINE = re.compile(r'"(seconds_per_update|ratio_msvae_over_follower)": ([-+0-9.e]+)')


def train_step_groups(text: str) -> list[tuple[list[float], float]]:
    """The benchmarks in a gpu_check.sh log: (seconds per update of each model, msvae / follower), in order."""
    groups, seconds = [], []
    for key, value in TRAIN_STEP_LINE.findall(text):
        if key == "seconds_per_update":
            seconds.append(float(value))
        else:
            groups.append((seconds, float(value)))
            seconds = []
    return groups


def table_train_step_log(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """Seconds per update that benchmarks/gpu_check.sh printed into each LOG (a ``.txt``). The script runs
    benchmarks/train_step.py once in fp32 and once in bf16 autocast and prints its JSON's times without the
    precision; a benchmark whose times equal a train_step JSON of the same folder takes that JSON's precision,
    and the other benchmark of the same log the other precision."""
    lines = ["| log | benchmark | precision | follower ms | speaker ms | msvae ms | msvae / follower |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        path = root / level / f"{name}.txt"
        if not path.exists():
            raise SystemExit(f"no {path}")
        jsons = {p.name: json.loads(p.read_text()) for p in sorted(path.parent.glob("train_step*.json"))}
        groups = train_step_groups(path.read_text())
        matched: dict[int, tuple[str, str]] = {}
        for i, (seconds, _) in enumerate(groups):
            for file, data in jsons.items():
                if [m["seconds_per_update"] for m in data["models"].values()] == seconds:
                    matched[i] = (data.get("mixed_precision", "no"), file)
        for i, (seconds, ratio) in enumerate(groups):
            if i in matched:
                precision = f"{PRECISION[matched[i][0]]} (= {matched[i][1]})"
            else:
                others = {"no", "bf16"} - {p for p, _ in matched.values()}
                precision = f"{PRECISION[others.pop()]} (log only)" if len(groups) == 2 and len(others) == 1 else "?"
            lines.append(f"| {path.name} | {i + 1} of {len(groups)} | {precision} | "
                         + " | ".join(f"{1000 * s:.1f}" for s in seconds) + f" | {ratio:.2f} |")
    return lines


def table_rollout_ratios(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/rollout.py: its ratios between the ways of rolling out."""
    data = read_json(level, name, root)
    lines = ["| ratio | value |", "| --- | --- |"]
    for key, value in data["ratios"].items():
        lines.append(f"| {key.replace('_over_', ' / ').replace('_per_s', '/s').replace('_', ' ')} | {value:.2f} |")
    return lines


def table_smoke(level: str, folder: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_check.sh's short training runs (``smoke_<model>_<precision>.json``, each run's
    results.json): that scripts/train.py ran to the end and saved, with the metrics of a barely trained model."""
    lines = ["| model | --mixed-precision | updates | wall (s) | best/ at update | test SR (episodes) | test BLEU-4 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    paths = sorted((root / level / folder).glob("smoke_*.json"))
    if not paths:
        raise SystemExit(f"no smoke_*.json under {root / level / folder}")
    for path in paths:
        r = json.loads(path.read_text())
        flag = path.stem.split("_", 2)[2]
        precision = f"{flag.removeprefix('launch-')} ({PRECISION[flag.removeprefix('launch-')]})"
        if flag.startswith("launch-"):
            precision += ", under accelerate launch"
        test = r.get("test") or {}
        sr_text = "-" if not test else f"{test['success_rate']:.3f} ({test['episodes']})"
        lines.append(f"| {r['model_type']} | {precision} | {r['updates']} | {r['wall_time_s']:.1f} | "
                     f"{r['best']['step']} | {sr_text} | {fmt(r.get('test_bleu'), '.2f')} |")
    return lines


def table_resume(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_check.sh's resume.json: the weights after 30 updates of two runs, compared."""
    data = read_json(level, name, root)
    lines = ["| weights after 30 updates | bit-identical | max abs difference |", "| --- | --- | --- |"]
    for key, c in data.items():
        lines.append(f"| {key.replace('_vs_', ' vs ').replace('_', ' ')} | {'yes' if c['bit_identical'] else 'no'} | "
                     f"{c['max_abs_diff']:.2g} |")
    return lines


def table_demo_storage(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """Bytes per demonstration on disk, frames as nested lists against one byte per cell, per level and split."""
    data = read_json(level, name, root)
    lines = ["| level | split | episodes | nested lists (B/demo) | cell codes (B/demo) | ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    for lvl, entry in data["levels"].items():
        for split, new in entry["cell_codes"].items():
            old = entry["nested_lists"][split]
            lines.append(f"| {LEVELS.get(lvl, lvl)} | {split} | {new['episodes']} | {old['bytes_per_demo']:.0f} | "
                         f"{new['bytes_per_demo']:.0f} | {old['bytes_per_demo'] / new['bytes_per_demo']:.1f}x |")
    return lines


def table_demo_dataset(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/demo_dataset.py: a whole generated set, its generation's time, its size, an epoch over it."""
    data = read_json(level, name, root)
    gen = data["generation"]
    splits = ", ".join(f"{split} {entry['rows']}" for split, entry in data["splits"].items())
    lines = ["| quantity | value |", "| --- | --- |",
             f"| demonstrations ({data['level']}): {splits} | {data['demos']} |"]
    if gen:
        rate = f", {gen['demos_per_s']:.0f} demos/s" if "demos_per_s" in gen else " (went on from chunks)"
        lines += [f"| generation: wall time{rate} | {gen['wall_seconds'] / 3600:.2f} h |",
                  f"| generation: CPU time (cores kept busy) | {gen['cpu_seconds'] / 3600:.2f} h "
                  f"({gen['cores_busy']:.2f}) |"]
    return lines + [
        f"| on disk: all splits (bytes per demo) | {data['bytes_on_disk'] / 1e9:.2f} GB "
        f"({data['bytes_per_demo']:.0f}) |",
        *iteration_rows(data["iteration"]),
    ]


def table_bleu_scales(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/bleu_scales.py: each speaker's test descriptions under each BLEU-4 scorer."""
    data = json.loads((root / level / f"{name}.json").read_text())
    scorers = [k for k in data["scorers"]]
    lines = ["| speaker | decoding | " + " | ".join(k.replace("_", " ") for k in scorers) + " |",
             "| --- | --- |" + " --- |" * len(scorers)]
    for speaker, entry in data["speakers"].items():
        label = speaker.removesuffix(" (sampled)")
        decoding = "sampled" if entry.get("decoding", "").startswith("sampled") else "greedy"
        lines.append(f"| {label} | {decoding} | " + " | ".join(f"{entry['scores'][k]:.2f}" for k in scorers) + " |")
    return lines


def _gpu_summary():
    """benchmarks/gpu_summary.py, which also prints its table on the GPU machine."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import gpu_summary

    return gpu_summary


def table_gpu_update(level: str, folder: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_update.sh's folder: updates/s, kernels, device-busy time and memory of each layout."""
    return _gpu_summary().table(root / level / folder)


def table_gpu_kernels(level: str, folder: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_update.sh's folder: the captured lone run's costliest kernels per update."""
    return _gpu_summary().kernels(root / level / folder)


def table_update_ops(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/update_ops.py: operators per MS-VAE update and peak activations per layout and length."""
    data = json.loads((root / level / f"{name}.json").read_text())
    lines = ["| layout | padded steps | operators per update | recurrence calls | operators, recurrences step by "
             "step | peak activations (MB) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in data["layouts"]:
        lines.append(f"| {r['layout']} | {r['padded_steps']} | {r['operators']} | {r['recurrences']} | "
                     f"{r['operators_counted_step_by_step']} | {r['peak_activation_bytes'] / 1e6:.0f} |")
    return lines


TABLES: dict[str, Callable[..., list[str]]] = {
    "flatness": table_flatness, "paper": table_paper, "headline": table_headline, "tests": table_tests,
    "runs": table_runs, "seeds": table_seeds, "budget": table_budget,
    "seeds_again": table_seeds_again,
    "speakers": table_speakers, "pragmatics": table_pragmatics,
    "rescoring": table_rescoring, "probes": table_probes, "probe_data": table_probe_data,
    "gradients": table_gradients, "validation": table_validation, "train_step": table_train_step,
    "train_step_compare": table_train_step_compare, "train_step_peak": table_train_step_peak,
    "attention_layout": table_attention_layout, "gpu_update": table_gpu_update, "gpu_kernels": table_gpu_kernels,
    "update_ops": table_update_ops, "bleu_scales": table_bleu_scales,
    "gemm_peaks": table_gemm_peaks, "kernel_bound": table_kernel_bound,
    "train_step_log": table_train_step_log, "train_step_profile": table_train_step_profile,
    "speaker_decode": table_speaker_decode, "rollout": table_rollout, "rollout_ratios": table_rollout_ratios,
    "demo_generation": table_demo_generation, "demo_storage": table_demo_storage,
    "demo_dataset": table_demo_dataset, "smoke": table_smoke,
    "resume": table_resume, "reruns": table_reruns, "readings": table_readings,
    "gradient_sweep": table_gradient_sweep,
}


def render(level: str, spec: str, root: Path = RESULTS) -> str:
    """One table, ``name`` or ``name:argument``, as markdown (ending in a newline)."""
    name, _, argument = spec.partition(":")
    if name not in TABLES:
        raise SystemExit(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    table = TABLES[name]
    return "\n".join(table(level, argument, root) if argument else table(level, root)) + "\n"


def refresh(document: Path, root: Path = RESULTS) -> tuple[str, list[str]]:
    """The document with every marked table rendered anew, and the specs of the tables that changed."""
    text = document.read_text()
    changed: list[str] = []

    def redo(match: re.Match) -> str:
        level, spec, old = match.groups()
        new = render(level, spec, root)
        if new != old:
            changed.append(f"{level} {spec}")
        return match.group(0).replace(old, new) if old else match.group(0).replace("-->\n", "-->\n" + new, 1)

    return MARK.sub(redo, text), changed


def random_floor(level: str, episodes: int = 1000) -> dict[str, dict[str, float]]:
    """Random policies over left/right/forward and over all 7 actions on the test seeds."""
    import msvae_hf  # noqa: F401  (registers the levels)
    from msvae_hf.envs.seeds import TEST_SEED_START
    from msvae_hf.metrics import summarize_episodes
    from msvae_hf.rollout import RandomPolicy, evaluation_seeds, rollout

    seeds = evaluation_seeds(episodes, TEST_SEED_START)
    env = f"BabyAI-{LEVELS[level]}-v0"
    return {f"random_{n}_actions": summarize_episodes(rollout(RandomPolicy(n, seed=0), env, seeds, batch_size=256))
            for n in (3, 7)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", help="a level folder under results/ (bosslocal, gotoseqlocal) or benchmarks")
    parser.add_argument("--table", help="one table to print (see above)")
    parser.add_argument("--write", type=Path, help="a results document whose marked tables are rendered anew")
    parser.add_argument("--check", type=Path, help="a results document: exit 1 if a marked table differs")
    parser.add_argument("--floor", action="store_true", help="roll out random policies -> results/<level>/floor.json")
    args = parser.parse_args(argv)
    if args.floor:
        out = RESULTS / args.level / "floor.json"
        out.write_text(json.dumps(random_floor(args.level), indent=2) + "\n")
        print(f"wrote {out}")
    if args.table:
        sys.stdout.write(render(args.level, args.table))
    for document, write in ((args.write, True), (args.check, False)):
        if document is None:
            continue
        text, changed = refresh(document)
        if write:
            document.write_text(text)
            print(f"{document}: {len(changed)} table(s) changed")
        elif changed:
            sys.exit(f"{document}: tables differ from results/: {', '.join(changed)}")


if __name__ == "__main__":
    main()
