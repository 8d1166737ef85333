"""Tables of a level's runs one by one or by row: ``runs``, ``seeds``, ``seeds_again``, ``flatness`` (the
validation curves), ``budget`` (runs continued to a larger budget), ``selection`` (one training, best/ chosen on
two validation metrics), ``reruns`` and ``speed`` (training rates)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from cells import level_rows, row_label, run_dir, run_row

from .records import (
    METRICS,
    RESULTS,
    bleu,
    bleu_of_best,
    fmt,
    load_records,
    load_reruns,
    mean_sd,
    p_greater,
    p_greater_paired,
    p_text,
    reading_points,
    records_by_row,
    records_trained_again,
    records_with_curves,
    sr,
    values,
)


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
    lines = ["| run | seed | test SR | SR told another mission | SPL | mean steps | bot's steps | mean reward | "
             "valid SR, App. D protocol | test BLEU-4 | BLEU checkpoint | updates | wall (min) | machine |",
             "| --- |" + " --- |" * 13]
    for row in rows.split(","):
        for record in by_row.get(row, []):
            test = record.get("test") or {}
            lines.append(
                f"| {row_label(level, row)} | {run_row(record['run'])[1]} | {fmt(test.get('success_rate'), '.3f')} | "
                f"{fmt(test.get('success_rate_other_mission'), '.3f')} | {fmt(test.get('spl'), '.3f')} | "
                f"{fmt(test.get('mean_steps'), '.1f')} | {fmt(test.get('bot_mean_steps'), '.1f')} | "
                f"{fmt(test.get('mean_reward'), '.3f')} | "
                f"{fmt(record.get('paper_protocol_valid_sr'), '.3f')} | {fmt(record.get('test_bleu'), '.2f')} | "
                f"{bleu_checkpoint(record)} | {record.get('updates')} | "
                f"{fmt(record.get('wall_time_s') and record['wall_time_s'] / 60, '.0f')} | {machine(record)} |")
    floor = root / level / "floor.json"
    if floor.exists():
        for name, s in json.loads(floor.read_text()).items():
            lines.append(f"| floor: {name.replace('_', ' ')} | - | {s['success_rate']:.3f} | - | - | "
                         f"{s['mean_steps']:.1f} | - | {s['mean_reward']:.3f} | - | - | - | - | - | - |")
    return lines


def table_speed(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """Each run of ``rows`` (comma-separated): where it trained, its wall time, the part of it spent in validation
    (rollouts and BLEU every ``eval_every`` updates) and its updates per second of the rest (training, the batches'
    assembly included); "-" where the record did not time validation. The test evaluation after training is in
    neither. A run stopped and resumed counts its first part up to its last checkpoint, and sets up (loader
    workers, CUDA graph captures) twice."""
    by_row = records_by_row(load_records(level, root))
    lines = ["| run | seed | machine | CUDA graphs | updates | wall (s) | validation (s) | "
             "training updates/s |", "| --- |" + " --- |" * 7]
    for row in rows.split(","):
        for record in by_row.get(row, []):
            wall, validation, updates = (record.get(k) for k in ("wall_time_s", "validation_time_s", "updates"))
            rate = updates / (wall - validation) if updates and wall and validation is not None and wall > validation \
                else None  # older records did not time validation
            graphs = "yes" if record.get("config", {}).get("cuda_graphs") else "no"
            lines.append(f"| {row_label(level, row)} | {run_row(record['run'])[1]} | {machine(record)} | {graphs} | "
                         f"{updates} | {fmt(wall, '.0f')} | {fmt(validation, '.0f')} | "
                         f"{fmt(rate, '.1f')} |")
    return lines


#: The metrics of a seeds table (each where one of its rows has it), in this order.
SEED_METRICS = ("sr", "sr_other", "spl", "steps", "bot_steps", "bleu", "bleu_of_best")
#: Digits after the point of each metric's mean and sd (2 where not named).
DIGITS = {"sr": 1, "sr_other": 1, "steps": 1, "bot_steps": 1, "spl": 3}


def table_seeds(level: str, rows: str, root: Path = RESULTS, again: bool = False) -> list[str]:
    """Mean +- sd over seeds of each row; p: one-sided t-test of 'greater than' the first row [two-sided], for
    every metric but the test episodes' mean steps.
    ``again``: each run trained again counts with its record in ``reruns/``."""
    by_row = records_by_row((records_trained_again if again else load_records)(level, root))
    names = rows.split(",")
    metrics = [m for m in SEED_METRICS if any(values(by_row.get(r, []), m) for r in names)]
    lines = ["| method | " + " | ".join(METRICS[m][0] for m in metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    reference = by_row.get(names[0], [])
    for row in names:
        cells = []
        for metric in metrics:
            xs = values(by_row.get(row, []), metric)
            cell = mean_sd(xs, DIGITS.get(metric, 2))
            compared = row != names[0] and metric not in ("steps", "bot_steps")  # beside SR, not claims of their own
            one, two = p_greater(xs, values(reference, metric)) if compared else (None, None)
            cells.append(cell + ("" if one is None else f", p = {p_text(one)} [{p_text(two)}]"))
        lines.append(f"| {row_label(level, row)} | " + " | ".join(cells) + " |")
    return lines


def table_seeds_again(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_seeds` with each run trained again counted by its record in ``reruns/``
    (:func:`records_trained_again`)."""
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


def validated_alike(ours: list[dict], theirs: list[dict]) -> bool:
    """Whether two validation histories, of equal length and not empty, agree at every update on every metric both
    logged (one may log metrics the other does not), and both logged one besides the update at each."""
    return len(ours) == len(theirs) > 0 and all(
        (a.keys() & b.keys()) - {"step"} and all(a[key] == b[key] for key in a.keys() & b.keys())
        for a, b in zip(ours, theirs, strict=True))


def continued_record(level: str, record: dict, candidates: list[dict]) -> dict | None:
    """The record of the run that ``record`` continued (``--continue-from``): of its row's ``continues`` row and
    seed, among ``candidates`` (the records of ``runs/`` and of runs trained again), the one whose curve the
    continued run's begins with."""
    row, seed = run_row(record["run"])
    source = level_rows(level)[row].continues
    if source is None:
        return None
    name, history = run_dir(level, source, seed).name, record.get("history") or []
    return next((r for r in candidates if r["run"] == name
                 and validated_alike(history[:len(r.get("history") or [])], r.get("history") or [])), None)


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
                which = "-" if r is record else "its `runs/` record" if r is first else "its run trained again"
                lines.append(f"| {label} | {seed} | {r.get('updates')} | {fmt(sr(r), '.3f')} | {best_valid(r)} | "
                             f"{gain} | {means_text(quarter_means(r))} | {which} |")
    return lines


def same_training(record: dict, other: dict) -> bool:
    """Whether two records validated alike at every update: the same training whatever chose their best/."""
    return validated_alike(record.get("history") or [], other.get("history") or [])


def valid_reading_at(record: dict, step: int) -> float | None:
    """Validation SR minus SR told another mission at ``step`` of a record's history, in points."""
    return reading_points(next((h for h in record.get("history") or [] if h["step"] == step), {}), "valid/")


def both_choices(record: dict) -> tuple[dict, dict] | None:
    """The two checkpoints of a run trained with ``--also-select`` as records of their own, the one chosen on
    validation SR first and the one chosen on validation reading second (``also_selected`` gives its checkpoint's
    ``best`` and ``test``); None where the run kept one choice."""
    also = record.get("also_selected") or {}
    if also.get("metric") not in ("sr", "reading"):
        return None
    other = {**record, "best": also["best"], "test": also["test"]}
    return (record, other) if also["metric"] == "reading" else (other, record)


def table_selection(level: str, rows: str, root: Path = RESULTS) -> list[str]:
    """Each seed of ``rows`` chosen on validation reading beside the same training chosen on validation SR: for a row
    of cells.Row.chosen_again (the training again, best/ chosen on reading), the record, in ``runs/`` or of a run
    trained again, that validated alike at every update (the commits of all such runs trained again; ``-`` and no
    comparison where none did); for a row whose runs kept both choices (``--also-select``), each record's best/ and
    its other choice (``-`` and no comparison where a record kept one). Each checkpoint's update and validation
    reading, and the test SR, SR by reading and SR on another mission of the same room of both; then the test
    reading's difference over every seed with both checkpoints of one training, with the paired t-test (seed by
    seed)."""
    records = load_records(level, root)
    candidates = [*records.values(), *load_reruns(level, root)]
    by_row = records_by_row(records)
    lines = ["| run | seed | same training as | chosen on valid SR: update (valid reading) | chosen on valid reading: "
             "update (valid reading) | test SR (%) | test SR by reading (points) | test SR, same room (%) |",
             "| --- |" + " --- |" * 7]
    pairs: list[tuple[float, float]] = []  # test reading: chosen on SR, chosen on reading

    def both(get: Callable[[dict], float | None], first: dict, second: dict) -> str:
        a, b = get(first), get(second)
        return "-" if a is None or b is None else f"{a:.1f} / {b:.1f} ({b - a:+.1f})"

    def room(r: dict) -> float | None:
        return None if (v := (r.get("test") or {}).get("success_rate_same_room")) is None else 100 * v

    reading = METRICS["sr_reading"][1]
    for row in rows.split(","):
        source = level_rows(level)[row].chosen_again
        for record in by_row.get(row, []):
            seed = run_row(record["run"])[1]
            if source is None:  # one training, both choices kept
                if (found := both_choices(record)) is None:  # one choice: nothing to compare
                    step, by = record["best"]["step"], (record.get("config") or {}).get("follower_metric", "sr")
                    kept = f"{step} ({fmt(valid_reading_at(record, step), '.1f')})"
                    lines.append(f"| {row_label(level, row)} | {seed} | - | "
                                 + (f"{kept} | - |" if by == "sr" else f"- | {kept} |") + " - | - | - |")
                    continue
                (base, record), trained = found, f"itself (`{record['also_selected']['folder']}/`)"
            else:
                name = run_dir(level, source, seed).name
                matches = [r for r in candidates if r["run"] == name and same_training(record, r)]
                if not matches:  # no record of this training chosen on SR: nothing to compare
                    step = record["best"]["step"]
                    lines.append(f"| {row_label(level, row)} | {seed} | - | - | {step} "
                                 f"({fmt(valid_reading_at(record, step), '.1f')}) | - | - | - |")
                    continue
                base = matches[0]
                trained = ("its `runs/` record" if any(r is records.get(name) for r in matches) else "its run "
                           "trained again at " + ", ".join(short_commit(r.get("commit")) for r in matches))
            if reading(record) is not None and reading(base) is not None:
                pairs.append((reading(base), reading(record)))
            steps = [(r["best"]["step"], valid_reading_at(r, r["best"]["step"])) for r in (base, record)]
            lines.append(f"| {row_label(level, row)} | {seed} | {trained} | "
                         + " | ".join(f"{at} ({fmt(valid, '.1f')})" for at, valid in steps) + " | "
                         f"{both(METRICS['sr'][1], base, record)} | {both(reading, base, record)} | "
                         f"{both(room, base, record)} |")
    one, two = p_greater_paired(dict(enumerate(b for _, b in pairs)), dict(enumerate(a for a, _ in pairs)))
    differences = [b - a for a, b in pairs]
    lines.append(f"| every seed of one training | | | | | | {mean_sd(differences)} more by reading; paired one-sided "
                 f"p = {p_text(one)}, two-sided {p_text(two)} | |")
    return lines


def table_reruns(level: str, root: Path = RESULTS) -> list[str]:
    """Runs trained again after their record was written (``results/<level>/reruns/<run>_<commit>.json``, e.g. a
    baseline retrained on a new machine to start other runs from), each beside its record in ``runs/``."""
    lines = ["| run | seed | test SR: `runs/` | again | test BLEU-4 (MS-VAE: of best/): `runs/` | again | "
             "commit again | wall again (min) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
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
