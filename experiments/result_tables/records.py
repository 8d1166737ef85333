"""Reading the run records under ``results/`` and the statistics over seeds the tables print: each run's
metrics, mean +- sd, App. D's t-tests."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from cells import run_row

RESULTS = Path("results")


def load_records(level: str, root: Path = RESULTS) -> dict[str, dict]:
    """run name -> its record (``results/<level>/runs/*.json``), in name order."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / level / "runs").glob("*.json"))}


def load_reruns(level: str, root: Path = RESULTS) -> list[dict]:
    """The records of runs trained again after their record in ``runs/`` (``results/<level>/reruns/*.json``)."""
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
    """:func:`load_records`, each run trained again given by its record in ``reruns/`` instead (where there are
    several, the last in name order, ``<run>_<commit>``: an order of commit hashes, not of time), e.g. every
    speaker-follower on the teachers trained again."""
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
    """Test success rate of ``best/`` (best by validation SR, or SR by reading where the run's ``follower_metric``
    says so), a fraction."""
    return (record.get("test") or {}).get("success_rate")


def bleu(record: dict) -> float | None:
    """Test BLEU-4 of the speaker checkpoint: a speaker's ``best/``, MS-VAE's ``best_speaker/`` (None for an
    MS-VAE run without ``best_speaker/``: its BLEU is of ``best/``, see :func:`bleu_of_best`)."""
    if record.get("model_type") == "msvae" and not record.get("best_speaker"):
        return None
    return record.get("test_bleu")


def bleu_of_best(record: dict) -> float | None:
    """MS-VAE's test BLEU-4 of ``best/`` (the checkpoint best by its ``follower_metric``, validation SR unless
    told)."""
    if record.get("model_type") != "msvae":
        return None
    return record.get("test_bleu_of_best") if record.get("best_speaker") else record.get("test_bleu")


def reading_fraction(values: dict, prefix: str = "") -> float | None:
    """SR minus SR told another episode's mission, a difference of rates, of a test summary (``prefix`` "") or of a
    validation in a record's history (``prefix`` "valid/"); None where either is missing."""
    own, other = values.get(f"{prefix}success_rate"), values.get(f"{prefix}success_rate_other_mission")
    return None if own is None or other is None else own - other


def reading_points(values: dict, prefix: str = "") -> float | None:
    """:func:`reading_fraction` in points."""
    return None if (value := reading_fraction(values, prefix)) is None else 100 * value


METRICS: dict[str, tuple[str, Callable[[dict], float | None]]] = {
    "sr": ("test SR (%)", lambda r: None if sr(r) is None else 100 * sr(r)),
    "sr_other": ("test SR told another mission (%)", lambda r: None if (v := (r.get("test") or {}).get(
        "success_rate_other_mission")) is None else 100 * v),
    # what reading the instruction adds: the points of SR lost when told another episode's mission
    "sr_reading": ("test SR minus SR told another mission (points)", lambda r: reading_points(r.get("test") or {})),
    "spl": ("test SPL", lambda r: (r.get("test") or {}).get("spl")),
    "steps": ("test mean steps", lambda r: (r.get("test") or {}).get("mean_steps")),
    "bot_steps": ("bot's mean steps", lambda r: (r.get("test") or {}).get("bot_mean_steps")),
    "bleu": ("test BLEU-4", bleu),
    "bleu_of_best": ("test BLEU-4 of best/ (MS-VAE)", bleu_of_best),
    # the paper's SR protocol (App. D: validation SR per evaluation, window-5 moving average, maximum), the
    # number its tables report, of the runs whose record computed it
    "app_d_sr": ("valid SR, App. D protocol (%)",
                 lambda r: None if r.get("paper_protocol_valid_sr") is None else 100 * r["paper_protocol_valid_sr"]),
}


def values(runs: list[dict], metric: str) -> list[float]:
    get = METRICS[metric][1]
    return [v for r in runs if (v := get(r)) is not None]


def t_tails(t: float, df: int) -> tuple[float, float]:
    """One-sided p of Student's t above ``t`` and the two-sided p of ``|t|``, ``df`` degrees of freedom."""
    from scipy.stats import t as student

    return float(student.sf(t, df)), float(2 * student.sf(abs(t), df))


def p_greater(xs: list[float], ys: list[float], allow_single: bool = False) -> tuple[float | None, float | None]:
    """Student's t-test (pooled variance) of mean(xs) > mean(ys): one-sided and two-sided p. None with fewer than
    two values on a side, or no spread at all; with ``allow_single`` a side may hold one value, tested against the other
    side's spread (n_x + n_y - 2 degrees of freedom)."""
    nx, ny = len(xs), len(ys)
    if min(nx, ny) < (1 if allow_single else 2) or nx + ny < 3:
        return None, None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    squares = sum((x - mx) ** 2 for x in xs) + sum((y - my) ** 2 for y in ys)
    if squares == 0:
        return None, None
    df = nx + ny - 2
    return t_tails((mx - my) / math.sqrt(squares / df * (1 / nx + 1 / ny)), df)


def values_by_seed(runs: list[dict], metric: str) -> dict[int, float]:
    """seed -> the metric's value, for the runs that have one (the seed read from the run's name)."""
    get = METRICS[metric][1]
    return {run_row(r["run"])[1]: v for r in runs if (v := get(r)) is not None}


def p_greater_paired(xs: dict[int, float], ys: dict[int, float]) -> tuple[float | None, float | None]:
    """Student's t-test of the seed-by-seed differences ``xs[k] - ys[k]`` (the seeds both hold) having a mean
    above 0: one-sided and two-sided p, n - 1 degrees of freedom. None with fewer than two seeds in common, or
    differences that do not spread."""
    differences = [xs[k] - ys[k] for k in sorted(xs.keys() & ys.keys())]
    if len(differences) < 2 or (sd := statistics.stdev(differences)) == 0:
        return None, None
    return t_tails(statistics.fmean(differences) / (sd / math.sqrt(len(differences))), len(differences) - 1)


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
    """p to two significant digits; ``> 0.99`` where that would round to 1."""
    return "-" if p is None else "> 0.99" if p >= 0.995 else f"{p:.2g}"


def p_cell(one: float | None, two: float | None) -> str:
    """``one-sided [two-sided]`` p, ``-`` for no test."""
    return "-" if one is None else f"{p_text(one)} [{p_text(two)}]"


def read_json(level: str, name: str, root: Path = RESULTS) -> dict:
    path = root / level / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"no {path}")
    return json.loads(path.read_text())
