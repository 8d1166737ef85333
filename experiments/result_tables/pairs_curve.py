"""Where reading begins: the pairs curve (experiments/cells.py ``PAIRS_CURVE_ROWS``) and the speakers' labels scored
against the true missions (``label_accuracy`` in each labelling's record, results/<level>/labels/)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from cells import CURVE_PAIRS, CURVE_ROUTES, curve_tag, level_rows, run_dir, run_row

from .records import (
    RESULTS,
    fmt,
    load_records,
    mean_sd,
    p_cell,
    p_greater,
    p_greater_paired,
    p_text,
    read_json,
    reading_fraction,
    reading_points,
    records_by_row,
)

#: The supervised follower's row prefix: the yardstick of every other row's reading on the curve.
SUPERVISED = "follower_film2"
#: The curve's methods: (row prefix, label) in the table's order; a row is ``<prefix>_<curve_tag(M)>``.
CURVE_METHODS = ((SUPERVISED, "supervised follower"), ("msvae_paired_film2", "MS-VAE, paired only"),
                 ("msvae_film2", "MS-VAE full"),
                 ("msvae_cells_film2", "MS-VAE full, gamma = 1, from the speaker reading the front cells"),
                 ("speaker_follower_film2", "speaker-follower on MS-VAE full's labels"),
                 ("speaker_follower_sup_film2", "speaker-follower on the supervised speaker's labels"),
                 ("speaker_follower_cells_film2", "speaker-follower on the labels of the speaker reading the front "
                  "cells"),
                 ("speaker_follower_cells_rescored_film2", "speaker-follower on the front-cell speaker's labels "
                  "rescored by the follower of its first labels"),
                 ("speaker_follower_cells_rescored2_film2", "speaker-follower on the front-cell speaker's labels "
                  "rescored by the second round's student"),
                 ("speaker_follower_cells_own_film2", "speaker-follower on the labels of the speaker reading the front "
                  "cells, each seed its own teacher's"),
                 ("speaker_follower_cells_rescored_own_film2", "speaker-follower on the front-cell speaker's labels "
                  "rescored by the follower of its first labels, each seed its own teacher's"),
                 ("speaker_follower_cells_rescored2_own_film2", "speaker-follower on the front-cell speaker's labels "
                  "rescored by the second round's student, each seed its own teacher's chain"),
                 ("speaker_follower_goals_film2", "speaker-follower on the labels of the front-cell speaker taught the "
                  "goal steps, each seed its own teacher's"),
                 ("speaker_follower_goals_rescored_film2", "speaker-follower on the goal-steps speaker's labels "
                  "rescored by the follower of its first labels, each seed its own teacher's chain"),
                 ("speaker_follower_cells_demo_film2", "speaker-follower on the labels of the front-cell speaker "
                  "chosen on its valid labels demonstrated, each seed its own teacher's"),
                 ("speaker_follower_cells_parts_film2", "speaker-follower on the labels of the front-cell speaker "
                  "taught also on its pairs' parts, each seed its own teacher's"),
                 ("speaker_follower_cells_parts_rescored_film2", "speaker-follower on the parts speaker's labels "
                  "rescored by the follower of its first labels, each seed its own teacher's chain"),
                 ("speaker_follower_cells_parts_rescored2_film2", "speaker-follower on the parts speaker's labels "
                  "rescored by the second round's student, each seed its own teacher's chain"))
#: The second round's students on a share of their labels (experiments/cells.py ``KEEP_SHARE``): those the rescoring
#: was surest of, and as many drawn blind. They ask whether the surest labels teach more than all of them, so their
#: tables set them beside the second round (:func:`table_kept_labels`, :func:`table_kept_verdict`), not on the curve
#: or in its verdict, whose tests ask what unpaired data adds to pairs.
SECOND_ROUND = ("speaker_follower_cells_rescored_own_film2",
                dict(CURVE_METHODS)["speaker_follower_cells_rescored_own_film2"])
KEPT_METHODS = (("speaker_follower_cells_rescored_top30_film2", "speaker-follower on the 30 % of the second round's "
                 "labels the rescoring was surest of, each seed its own teacher's chain"),
                ("speaker_follower_cells_rescored_first30k_film2", "speaker-follower on the first 30,000 of the second "
                 "round's labels (drawn blind), each seed its own teacher's chain"))
#: The front-cell route's first round, each seed on its own teacher's labels, and the students of other teachers from
#: the same 1,000 pairs: the speaker taught the goal steps, the front-cell speaker chosen on its valid labels
#: demonstrated, and that speaker taught also on its pairs' parts. Their verdict (:func:`table_teacher_verdict`) sets
#: each beside the first round, seed by seed.
FIRST_ROUND = ("speaker_follower_cells_own_film2", dict(CURVE_METHODS)["speaker_follower_cells_own_film2"])
TEACHER_METHODS = tuple((row, dict(CURVE_METHODS)[row]) for row in ("speaker_follower_goals_film2",
                                                                     "speaker_follower_cells_demo_film2",
                                                                     "speaker_follower_cells_parts_film2"))
#: The budget confound: a curve row's runs continued to 10,000 updates, (row suffix, what the method's label gains).
BUDGET_SUFFIX = ("_u10k", ", 10,000 updates")

#: (test key or a function of the test, header, scale, digits)
COLUMNS = (
    ("success_rate", "SR %", 100, 1),
    ("success_rate_other_mission", "told another %", 100, 1),
    ("reading", "SR by reading (points)", 100, 1),
    ("success_rate_same_room", "SR on another mission of the room %", 100, 1),
    ("spl", "SPL", 1, 3),
)
#: The labels' accuracy fields (envs/missions.py: score_labels, replay_labels) the labels table shows, with headers.
LABEL_COLUMNS = (("demonstrated", "demonstrated %"), ("carried_out", "carried out %"), ("exact", "exact %"),
                 ("same_mission", "same mission %"), ("same_goal_count", "goal count %"),
                 ("action", "action %"), ("object_type", "object type %"), ("colour", "colour %"),
                 ("connective", "connective %"))


def test_value(record: dict, key: str) -> float | None:
    """A test metric of a record, ``reading`` being SR minus SR told another episode's mission."""
    test = record.get("test") or {}
    return reading_fraction(test) if key == "reading" else test.get(key)


def supervised_row(m: int, suffix: str = "") -> str:
    """The supervised follower's row on ``m`` pairs (``suffix``: :data:`BUDGET_SUFFIX`'s for its budget row)."""
    return f"{SUPERVISED}_{curve_tag(m)}{suffix}"


def curve_rows(level: str, root: Path = RESULTS, methods: tuple[tuple[str, str], ...] = CURVE_METHODS
               ) -> list[tuple[str, int, str, list[dict]]]:
    """(method label, M, row, records by seed) of every curve row of ``methods`` with a record, in the table's
    order (the curve's routes too, where ``methods`` are the curve's)."""
    records = load_records(level, root)
    rows, specs = records_by_row(records), level_rows(level)
    for row, spec in specs.items():  # a row that shares its seed 0 with another row (Row.seed0)
        if spec.seed0 and rows.get(row) and row not in records and spec.seed0 in records:
            rows[row] = [records[spec.seed0], *rows[row]]
            if (shared := specs.get(spec.seed0)) is not None and shared.seeds == (0,):
                rows.pop(spec.seed0, None)  # defined for seed 0 alone, it is shown in this row only
    found = []
    for prefix, label in methods:
        for m in CURVE_PAIRS:
            row = f"{prefix}_{curve_tag(m)}"
            if rows.get(row):
                found.append((label, m, row, rows[row]))
    for route, (what, _) in CURVE_ROUTES.items() if methods == CURVE_METHODS else ():
        for m in CURVE_PAIRS:
            row = f"msvae_film2_{curve_tag(m)}_{route}"
            if rows.get(row):
                found.append((f"MS-VAE full, {what}", m, row, rows[row]))
    for prefix, label in methods:  # the budget rows last, in the methods' order
        for m in CURVE_PAIRS:
            row = f"{prefix}_{curve_tag(m)}{BUDGET_SUFFIX[0]}"
            if rows.get(row):
                found.append((label + BUDGET_SUFFIX[1], m, row, rows[row]))
    return found


def table_pairs_curve(level: str, root: Path = RESULTS, methods: tuple[tuple[str, str], ...] = CURVE_METHODS
                      ) -> list[str]:
    """Each curve row's test numbers, mean +- sd over seeds (n), with the bot's mean steps beside the follower's
    and, for a speaker-follower, the accuracy of the labels it learned from (the labels' record: same mission, and
    the share of trajectories that demonstrate their label)."""
    lines = ["| method | M pairs | " + " | ".join(c[1] for c in COLUMNS)
             + " | mean steps (bot) | labels' same mission % | labels demonstrated % |",
             "| --- " * (len(COLUMNS) + 5) + "|"]
    for label, m, _, records in curve_rows(level, root, methods):
        cells = [mean_sd([v * scale for r in records if (v := test_value(r, key)) is not None], digits)
                 for key, _, scale, digits in COLUMNS]
        steps = [r["test"]["mean_steps"] for r in records if r.get("test")]
        bot = [r["test"]["bot_mean_steps"] for r in records if r.get("test")]
        step_cell = f"{statistics.fmean(steps):.1f} ({statistics.fmean(bot):.1f})" if steps else "-"
        # one labelling counted once, where the seeds learned from the same labels
        accuracies = list({json.dumps(a, sort_keys=True): a for r in records
                           if (a := labels_accuracy(level, r, root))}.values())
        labels = [mean_sd([100 * a[key] for a in accuracies if key in a], 1)
                  for key in ("same_mission", "demonstrated")]
        lines.append(f"| {label} | {m:,} | " + " | ".join([*cells, step_cell, *labels]) + " |")
    return lines


def table_kept_labels(level: str, root: Path = RESULTS) -> list[str]:
    """:func:`table_pairs_curve`'s columns for the second round and its students on a share of its labels."""
    return table_pairs_curve(level, root, (SECOND_ROUND, *KEPT_METHODS))


def table_kept_verdict(level: str, root: Path = RESULTS) -> list[str]:
    """Each student on a share of the second round's labels against the second round's student of the same seed
    (:func:`paired_verdict`)."""
    return paired_verdict(level, SECOND_ROUND, KEPT_METHODS, "the second round's", root)


def table_teacher_verdict(level: str, root: Path = RESULTS) -> list[str]:
    """Each student of another front-cell teacher (:data:`TEACHER_METHODS`) against the student of the same seed on
    the front-cell speaker's own labels (:func:`paired_verdict`)."""
    return paired_verdict(level, FIRST_ROUND, TEACHER_METHODS, "the front-cell teacher's", root)


def paired_verdict(level: str, baseline: tuple[str, str], methods: tuple[tuple[str, str], ...], theirs_header: str,
                   root: Path = RESULTS) -> list[str]:
    """Each of ``methods``' rows against ``baseline``'s row of the same M, seed by seed: SR by reading and SR, the
    means (n; the baseline's over the seeds both rows have), the difference and the p that the method does better,
    paired by seed (one-sided [two-sided]; none with fewer than two seeds in common). Runs continued to a larger
    budget are left out: their rows compare at their budget."""
    rows = [r for r in curve_rows(level, root, (baseline, *methods)) if not r[2].endswith(BUDGET_SUFFIX[0])]
    base = {m: records for label, m, _, records in rows if label == baseline[1]}
    lines = [f"| method | M pairs | SR by reading (points) | {theirs_header} | difference | p, paired by seed | "
             f"SR % | {theirs_header} | difference | p, paired by seed |", "| --- " * 10 + "|"]
    for label, m, _, records in rows:
        if label == baseline[1] or m not in base:
            continue
        cells = []
        for key in ("reading", "success_rate"):
            ours, theirs = ({run_row(r["run"])[1]: 100 * v for r in runs if (v := test_value(r, key)) is not None}
                            for runs in (records, base[m]))
            both = sorted(ours.keys() & theirs.keys())  # the baseline on the seeds the method's row has
            cells += [mean_sd(list(ours.values())), mean_sd([theirs[k] for k in both]),
                      f"{statistics.fmean(ours[k] - theirs[k] for k in both):+.1f}" if both else "-",
                      p_cell(*p_greater_paired(ours, theirs))]
        lines.append(f"| {label} | {m:,} | " + " | ".join(cells) + " |")
    return lines


def labels_accuracy(level: str, record: dict, root: Path = RESULTS) -> dict | None:
    """The accuracy of the labels a speaker-follower's run learned from: their record's in results/<level>/labels
    where it holds the same labels (their sha256; it is scored again there when a measure is added), else what the
    run recorded of them when it started; none for a run that read only the first N of them (``num_unpaired``)."""
    read = record.get("pseudo_labels") or {}
    config = record.get("config") or {}
    if config.get("num_unpaired") is not None:  # a run on the first N of its labels: theirs are not on record
        return None
    folder = config.get("pseudo_labels")
    labels = root / level / "labels" / f"{Path(folder).name}.json" if folder else None
    if labels is not None and labels.is_file():
        kept = json.loads(labels.read_text())
        if kept.get("label_accuracy") and kept.get("sha256") == read.get("sha256"):
            return kept["label_accuracy"]
    return read.get("label_accuracy")


def readings(records: list[dict]) -> list[tuple[float, float]]:
    """(SR by reading, its variance from the test episodes alone) in points, of each record whose test has both.

    The variance takes SR and SR told another mission as two proportions over the same episodes and leaves their
    covariance out: it is positive where the follower meets the same episodes either way, so the variance is
    overstated, not understated (as it is where two runs are compared on the same test seeds)."""
    out = []
    for record in records:
        reading, test = test_value(record, "reading"), record.get("test") or {}
        if reading is not None and test.get("episodes"):
            own, other = test["success_rate"], test["success_rate_other_mission"]
            out.append((100 * reading, 100**2 * (own * (1 - own) + other * (1 - other)) / test["episodes"]))
    return out


def p_episodes(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> float | None:
    """One-sided p that the runs ``xs`` read more than the runs ``ys`` on average (each run's :func:`readings`),
    from the test episodes' noise alone (normal approximation): what one seed against one seed can be tested by,
    blind to the spread between seeds. None where a side is empty or has no noise."""
    if not xs or not ys:
        return None
    variance = sum(statistics.fmean(v for _, v in runs) / len(runs) for runs in (xs, ys))
    if variance == 0:
        return None
    difference = statistics.fmean(r for r, _ in xs) - statistics.fmean(r for r, _ in ys)
    return 0.5 * math.erfc(difference / (2 * variance) ** 0.5)  # 1 - Phi(z), exact in the far tail


def table_pairs_verdict(level: str, root: Path = RESULTS) -> list[str]:
    """Each curve row beside the supervised follower on the same M pairs and on 3M (where the curve has it): SR by
    reading (mean over seeds, n), the difference, and the p that the row reads more, over seeds (Student's t, pooled
    variance, one-sided [two-sided]; a row of one seed tested against the other's spread) and over the test
    episodes (one-sided, :func:`p_episodes`), and the one-sided p over seeds times the number of tests the table
    holds (Bonferroni: each test of what unpaired data adds to pairs counted, capped at 1). The budget rows (runs
    continued to more updates) are tested alike: against the supervised follower of the curve's budget, which says
    what the updates add, and against the supervised follower at the same budget (its own budget row), where the
    curve has it."""
    rows = curve_rows(level, root)
    budget = BUDGET_SUFFIX[0]
    supervised = {(m, suffix): readings(records) for _, m, row, records in rows for suffix in ("", budget)
                  if row == supervised_row(m, suffix)}
    tests: list[tuple[str, float | None, float | None, str]] = []  # (the row's cells, p one-sided, two-sided, tail)
    for label, m, row, records in rows:
        ours = [] if row == supervised_row(m) else readings(records)  # the supervised rows are the yardstick
        if not ours:
            continue
        for against, suffix in ((m, ""), (3 * m, ""), (m, budget), (3 * m, budget)):
            theirs = supervised.get((against, suffix))
            if not theirs or (suffix and not row.endswith(suffix)) or row == supervised_row(against, suffix):
                continue
            xs, ys = [r for r, _ in ours], [r for r, _ in theirs]
            yardstick = f"{against:,} pairs" + (BUDGET_SUFFIX[1] if suffix else "")
            tests.append((f"| {label} | {m:,} | {mean_sd(xs)} | {yardstick} | {mean_sd(ys)} | "
                          f"{statistics.fmean(xs) - statistics.fmean(ys):+.1f} | ",
                          *p_greater(xs, ys, allow_single=True), f" | {p_text(p_episodes(ours, theirs))} |"))
    counted = sum(one is not None for _, one, _, _ in tests)
    lines = ["| method | M pairs | SR by reading (points) | against the supervised follower on | its reading | "
             f"difference | p, seeds | p, seeds, x {counted} tests | p, test episodes |", "| --- " * 9 + "|"]
    for cells, one, two, tail in tests:
        corrected = p_text(min(1.0, counted * one)) if one is not None else "-"
        lines.append(f"{cells}{p_cell(one, two)} | {corrected}{tail}")
    return lines


def table_label_accuracy(level: str, root: Path = RESULTS) -> list[str]:
    """Every labelling on record with its accuracy against the true missions (results/<level>/labels/*.json)."""
    lines = ["| labels | speaker | labelled | " + " | ".join(h for _, h in LABEL_COLUMNS) + " |",
             "| --- " * (len(LABEL_COLUMNS) + 3) + "|"]
    for path in sorted((root / level / "labels").glob("*.json")):
        record = json.loads(path.read_text())
        accuracy = record.get("label_accuracy")
        if not accuracy:
            continue
        cells = [f"{100 * accuracy[key]:.1f}" if key in accuracy else "-" for key, _ in LABEL_COLUMNS]
        speaker = record.get("speaker", "-")
        if rescoring := record.get("rescoring"):
            speaker += (f", rescored by {rescoring['rescorer']} (lam {rescoring['lam']:g}, "
                        f"{rescoring['num_candidates']} candidates)")
        if kept := record.get("kept"):
            speaker += f", the {100 * kept['fraction']:g} % it was surest of"
        lines.append(f"| {path.stem} | {speaker} | {accuracy['labels']:,} | " + " | ".join(cells) + " |")
    return lines


#: Speakers whose best/ another validation metric chose from the same training: (row chosen so, the row chosen on
#: BLEU, what chose it), at M = 1,000.
SPEAKER_CHOICES = (("speaker_cells_demo_film2_m1k", "speaker_cells_film2_m1k", "valid labels demonstrated"),)


def _label_record(level: str, run: str, root: Path) -> dict:
    """``label_accuracy`` of the labels ``run``'s speaker wrote (results/<level>/labels/<run>.json; {} if none)."""
    path = root / level / "labels" / f"{run}.json"
    return json.loads(path.read_text()).get("label_accuracy") or {} if path.is_file() else {}


def _percent(share: float | None) -> str:
    """A share as a percentage to one decimal, ``-`` for none."""
    return fmt(None if share is None else 100 * share, ".1f")


def table_speaker_choice(level: str, root: Path = RESULTS) -> list[str]:
    """Each seed's speaker run chosen on BLEU beside the same seed's run chosen otherwise (:data:`SPEAKER_CHOICES`):
    the update each chose, its validation BLEU and valid labels demonstrated (both from the second run's history, the
    same training where the two histories' BLEU agree entry for entry), test BLEU, and the shares of its labels of
    the unpaired trajectories that are demonstrations and the same mission; then the difference in demonstrations
    over the seeds, paired by seed (one-sided [two-sided] p)."""
    records = load_records(level, root)
    lines = ["| speaker | seed | chosen on | update | valid BLEU | valid labels demonstrated % | same training | "
             "test BLEU | labels demonstrated % | labels same mission % |", "| --- " * 10 + "|"]
    for chosen_row, bleu_row, chosen_on in SPEAKER_CHOICES:
        shares: dict[str, dict[int, float]] = {chosen_row: {}, bleu_row: {}}
        for seed in (0, 1, 2):
            runs = [run_dir(level, row, seed).name for row in (chosen_row, bleu_row)]
            if not all(run in records for run in runs):
                continue
            history = {h["step"]: h for h in records[runs[0]]["history"]}
            same = [h.get("valid/bleu") for h in records[runs[1]]["history"]] == [
                h.get("valid/bleu") for h in records[runs[0]]["history"]]
            for run, row, on in ((runs[1], bleu_row, "validation BLEU"), (runs[0], chosen_row, chosen_on)):
                step = records[run]["best"]["step"]
                at = history.get(step, {}) if same else {}
                labels = _label_record(level, run, root)
                if "demonstrated" in labels:
                    shares[row][seed] = 100 * labels["demonstrated"]
                lines.append(f"| {row} | {seed} | {on} | {step} | {fmt(at.get('valid/bleu'), '.2f')} | "
                             f"{_percent(at.get('valid/demonstrated'))} | {'yes' if same else 'no'} | "
                             f"{fmt(records[run].get('test_bleu'), '.2f')} | {_percent(labels.get('demonstrated'))} | "
                             f"{_percent(labels.get('same_mission'))} |")
        ours, theirs = shares[chosen_row], shares[bleu_row]
        if seeds := sorted(ours.keys() & theirs.keys()):
            gain = statistics.fmean(ours[k] - theirs[k] for k in seeds)
            lines.append(f"| {chosen_row} against {bleu_row} | {len(seeds)} seed{'s' * (len(seeds) > 1)} | | | | | | | "
                         f"{gain:+.1f}, p = "
                         f"{p_cell(*p_greater_paired(ours, theirs))} (paired by seed) | |")
    return lines


#: The fields of each goal count's labels the table by goal count shows, with headers (percentages).
GOAL_COUNT_COLUMNS = (("share", "of the labels %"), ("demonstrated", "demonstrated %"),
                      ("carried_out", "carried out %"), ("same_mission", "same mission %"),
                      ("same_goal_count", "goal count %"), ("object_type", "object type %"), ("colour", "colour %"))


def table_labels_by_goal_count(level: str, root: Path = RESULTS) -> list[str]:
    """Every labelling whose record scores its labels by the number of goals in each trajectory's true mission
    (``label_accuracy.by_goal_count``, results/<level>/labels/*.json): a row for each number, with its labels' share,
    their trajectories' mean steps and their accuracy."""
    lines = ["| labelling | goals in the mission | labelled | mean steps | "
             + " | ".join(h for _, h in GOAL_COUNT_COLUMNS) + " |", "| --- " * (len(GOAL_COUNT_COLUMNS) + 4) + "|"]
    for path in sorted((root / level / "labels").glob("*.json")):
        accuracy = json.loads(path.read_text()).get("label_accuracy") or {}
        for goals, scores in (accuracy.get("by_goal_count") or {}).items():
            cells = [f"{100 * scores[key]:.1f}" for key, _ in GOAL_COUNT_COLUMNS]
            lines.append(f"| {path.stem} | {goals} | {scores['labels']:,} | {scores['mean_steps']:.1f} | "
                         + " | ".join(cells) + " |")
    if len(lines) == 2:
        raise SystemExit(f"no labelling in {root / level / 'labels'} is scored by goal count: score one with "
                         "experiments/label_accuracy.py LABELS --record, or label with scripts/label_unpaired.py")
    return lines


#: The validation updates the reading history shows (those a run has).
HISTORY_UPDATES = (200, 400, 600, 1000, 2000, 3000, 4000)


def table_reading_history(level: str, argument: str, root: Path = RESULTS) -> list[str]:
    """How reading grows or fades along training, for the runs named in ``argument`` (their record names,
    results/<level>/runs/<name>.json, comma-separated): at each update of :data:`HISTORY_UPDATES` the run validated
    at, SR by reading (SR minus SR told another episode's mission) and SR in brackets, on the validation episodes
    (200 seeds: a reading gap's standard error is about 4.5 points)."""
    records = load_records(level, root)
    lines = ["| run | " + " | ".join(f"update {u}" for u in HISTORY_UPDATES) + " |",
             "| --- " * (len(HISTORY_UPDATES) + 1) + "|"]
    for name in argument.split(","):
        record = records.get(name)
        if record is None:
            raise SystemExit(f"no record {name}.json in {root / level / 'runs'}")
        by_update = {h["step"]: h for h in record.get("history", [])}
        cells = []
        for update in HISTORY_UPDATES:
            h = by_update.get(update, {})
            reading = reading_points(h, "valid/")
            cells.append("-" if reading is None else f"{reading:+.1f} ({100 * h['valid/success_rate']:.1f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def table_latent_probe(level: str, name: str = "latent_probe", root: Path = RESULTS) -> list[str]:
    """What MS-VAE's two posteriors hold (results/<level>/<name>.json, experiments/probe_latent.py): each label's
    held-out accuracy from the mean of q(z|y) and of q(z|a,o), across, and the majority class's; then how near each
    pair's two means lie."""
    path = root / level / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"no latent probe at {path}: run experiments/probe_latent.py --out {path}")
    report = json.loads(path.read_text())
    lines = ["| model | label | majority % | from z_y % | from z_tau % | fit on z_y, scored on z_tau % | "
             "fit on z_tau, scored on z_y % |", "| --- " * 7 + "|"]
    keys = ("majority", "from z_y", "from z_tau", "fit on z_y, scored on z_tau", "fit on z_tau, scored on z_y")
    for name, model in report["models"].items():
        for label, r in model["labels"].items():
            lines.append(f"| {name} | {label} | " + " | ".join(f"{100 * r[k]:.1f}" for k in keys) + " |")
    lines += ["", "| model | held-out pairs | own z_tau nearest to z_y % | median rank (share) | squared distance, "
              "same pair | squared distance, another pair |", "| --- " * 6 + "|"]
    for name, model in report["models"].items():
        a = model["alignment"]
        lines.append(f"| {name} | {a['pairs']} | {100 * a['top1']:.1f} | {a['median_rank_share']:.3f} | "
                     f"{a['mean_sq_distance_same_pair']:.2f} | {a['mean_sq_distance_rolled_pair']:.2f} |")
    return lines


def table_faced_objects(level: str, root: Path = RESULTS) -> list[str]:
    """The objects the agent faces against the goals (results/<level>/faced_objects.json and, one row a labelling,
    faced_objects_<labelling>.json; experiments/faced_objects.py): the share of trajectories that face an object at
    no goal step, and how often the number of distinct objects faced, and the number of steps that complete a goal
    ("-" in a record without it), is the mission's number of goals; for a labelling, how often its labels' number of
    goals is the mission's and is the number faced, over all and where those two differ."""
    paths = sorted((root / level).glob("faced_objects*.json"))
    if not paths:
        raise SystemExit(f"no faced-object record in {root / level}: run experiments/faced_objects.py --out "
                         f"{root / level}/faced_objects.json")
    lines = ["| labels | trajectories | face an object at no goal step % | distinct objects faced = goals % | "
             "steps completing a goal = goals % | label's goals right % | label's goals = objects faced % | "
             "where those differ: episodes | right % | = objects faced % |", "| --- " * 10 + "|"]
    for path in paths:
        report = json.loads(path.read_text())
        name = path.stem.removeprefix("faced_objects").removeprefix("_") or "none (the paired split's demonstrations)"
        cells = [name, f"{report['episodes']:,}", f"{100 * report['faces_other_object']:.1f}",
                 f"{100 * report['distinct_faced_is_goal_count']:.1f}",
                 "-" if (steps := report.get("goal_steps_is_goal_count")) is None else f"{100 * steps:.1f}"]
        if labels := report.get("labels"):
            differ = labels["where_they_differ"]
            cells += [f"{100 * labels['goal_count_right']:.1f}", f"{100 * labels['goal_count_is_distinct_faced']:.1f}",
                      f"{differ['episodes']:,}", *(["-"] * 2 if not differ["episodes"] else [
                          f"{100 * differ['goal_count_right']:.1f}",
                          f"{100 * differ['goal_count_is_distinct_faced']:.1f}"])]
        else:
            cells += ["-"] * 5
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _runs(row: str, seeds: tuple[int, ...] = (0,)) -> dict[int, str]:
    """Each seed's record of a GoToSeqLocal row, ``runs/<run>``, named as :func:`cells.run_dir` names its run."""
    return {k: f"runs/{run_dir('gotoseqlocal', row, k).name}" for k in seeds}


#: GoToSeqLocal's MS-VAE set against the follower it starts from and against its control from the same start (gamma = 1,
#: or MS-VAE on the pairs alone), seed by seed: (M, label, {seed: record}, against, {seed: record}). A record is
#: ``runs/<run>`` or ``reruns/<run>_<commit>``: the baselines trained again on another CPU are another draw, so another
#: start. On 1,000 pairs the alignment, frames and front-cell rows start from the AMD EPYC's draws (the follower of
#: ``reruns/follower_film2_m1k_e62aede``; seeds 1 and 2 ``reruns/follower_film2_m1k_seed1_3f5b2dd``,
#: ``reruns/follower_film2_m1k_seed2_93db206``), gamma = 1, gamma = 100 and the paired-only control from the Intel
#: Xeon's (``2a09ce0``, ``0d64827``: equal draws); on 10,000 pairs gamma = 1, gamma = 100 and the paired-only control
#: from ``runs/follower_film2_m10k``'s (the Intel Xeon's), the front-cell rows from the AMD EPYC's
#: (``reruns/follower_film2_m10k_a9b7dd8``; seeds 1 and 2 ``reruns/follower_film2_m10k_seed1_5889ddc``,
#: ``reruns/follower_film2_m10k_seed2_5dcb3f2``).
_AMD_START = {0: "reruns/follower_film2_m1k_e62aede", 1: "reruns/follower_film2_m1k_seed1_3f5b2dd",
              2: "reruns/follower_film2_m1k_seed2_93db206"}
_AMD_GAMMA1 = {0: "reruns/msvae_film2_m1k_gamma1_3f5b2dd", **_runs("msvae_film2_m1k_gamma1", (1, 2))}
_GAMMA1, _FULL, _PAIRED, _GAMMA1_10K, _FULL_10K, _PAIRED_10K, _ALIGN, _FRAMES = (
    _runs(row) for row in ("msvae_film2_m1k_gamma1", "msvae_film2_m1k", "msvae_paired_film2_m1k",
                           "msvae_film2_m10k_gamma1", "msvae_film2_m10k", "msvae_paired_film2_m10k",
                           "msvae_film2_m1k_gamma1_align", "msvae_film2_m1k_frames"))
_CELLS, _CELLS_PAIRED = (_runs(row, (0, 1, 2)) for row in ("msvae_cells_film2_m1k", "msvae_paired_cells_film2_m1k"))
_CELLS_10K, _CELLS_PAIRED_10K = (_runs(row, (0, 1, 2)) for row in ("msvae_cells_film2_m10k",
                                                                    "msvae_paired_cells_film2_m10k"))
#: the front-cell rows on 10,000 pairs continued to 8000 updates (seed 2)
_CELLS_10K_U8K, _CELLS_PAIRED_10K_U8K = (_runs(f"{row}_u8k", (2,)) for row in ("msvae_cells_film2_m10k",
                                                                             "msvae_paired_cells_film2_m10k"))
_START_10K = {0: "reruns/follower_film2_m10k_a9b7dd8", 1: "reruns/follower_film2_m10k_seed1_5889ddc",
              2: "reruns/follower_film2_m10k_seed2_5dcb3f2"}
#: gamma = 1 and its control on 1,000 pairs, each seed beside the other from one start: seed 0 the Intel Xeon's draw,
#: seeds 1 and 2 the AMD EPYC's
_EACH_START = {0: "reruns/follower_film2_m1k_0d64827", 1: _AMD_START[1], 2: _AMD_START[2]}
_GAMMA1_EACH, _PAIRED_EACH = (_runs(row, (0, 1, 2)) for row in ("msvae_film2_m1k_gamma1", "msvae_paired_film2_m1k"))
ONE_START = {"gotoseqlocal": (
    (1000, "gamma = 1", _GAMMA1, "its start", {0: "reruns/follower_film2_m1k_2a09ce0"}),
    (1000, "gamma = 100 (MS-VAE full)", _FULL, "its start", {0: "reruns/follower_film2_m1k_0d64827"}),
    (1000, "paired only", _PAIRED, "its start", {0: "reruns/follower_film2_m1k_0d64827"}),
    (1000, "gamma = 1", _GAMMA1, "paired only", _PAIRED),
    (1000, "gamma = 100 (MS-VAE full)", _FULL, "paired only", _PAIRED),
    (1000, "paired only, each seed's start", _PAIRED_EACH, "its start", _EACH_START),
    (1000, "gamma = 1, each seed's start", _GAMMA1_EACH, "paired only, each seed's start", _PAIRED_EACH),
    (1000, "gamma = 1, AMD EPYC's start", _AMD_GAMMA1, "its start", _AMD_START),
    (1000, "gamma = 1, AMD EPYC's start", _AMD_GAMMA1, "gamma = 1 (another start)", _GAMMA1),
    (1000, "alignment route", _ALIGN, "its start", _AMD_START),
    (1000, "alignment route", _ALIGN, "gamma = 1, AMD EPYC's start", _AMD_GAMMA1),
    (1000, "alignment route", _ALIGN, "gamma = 1 (another start)", _GAMMA1),
    (1000, "alignment route", _ALIGN, "paired only (another start)", _PAIRED),
    (1000, "frames route", _FRAMES, "its start", _AMD_START),
    (1000, "frames route", _FRAMES, "gamma = 1, AMD EPYC's start", _AMD_GAMMA1),
    (1000, "frames route", _FRAMES, "gamma = 100 (another start)", _FULL),
    (1000, "front cells (gamma = 1)", _CELLS, "its start", _AMD_START),
    (1000, "front cells (gamma = 1)", _CELLS, "gamma = 1, AMD EPYC's start", _AMD_GAMMA1),
    (1000, "front cells, paired only", _CELLS_PAIRED, "its start", _AMD_START),
    (1000, "front cells (gamma = 1)", _CELLS, "front cells, paired only", _CELLS_PAIRED),
    (10_000, "gamma = 1", _GAMMA1_10K, "paired only", _PAIRED_10K),
    (10_000, "gamma = 100 (MS-VAE full)", _FULL_10K, "paired only", _PAIRED_10K),
    (10_000, "front cells (gamma = 1)", _CELLS_10K, "its start", _START_10K),
    (10_000, "front cells, paired only", _CELLS_PAIRED_10K, "its start", _START_10K),
    (10_000, "front cells (gamma = 1)", _CELLS_10K, "front cells, paired only", _CELLS_PAIRED_10K),
    (10_000, "front cells (gamma = 1)", _CELLS_10K, "gamma = 1 (another start)", _GAMMA1_10K),
    (10_000, "front cells (gamma = 1), 8000 updates", _CELLS_10K_U8K, "front cells, paired only, 8000 updates",
     _CELLS_PAIRED_10K_U8K),
    (10_000, "front cells (gamma = 1), 8000 updates", _CELLS_10K_U8K, "its 4000 updates", _CELLS_10K),
    (10_000, "front cells, paired only, 8000 updates", _CELLS_PAIRED_10K_U8K, "its 4000 updates", _CELLS_PAIRED_10K),
    (10_000, "front cells (gamma = 1), 8000 updates", _CELLS_10K_U8K, "its start", _START_10K),
    (10_000, "front cells (gamma = 1), 8000 updates", _CELLS_10K_U8K,
     "supervised follower, 10,000 updates (another start)", _runs("follower_film2_m10k_u10k", (0, 1, 2))),
)}


def table_one_start(level: str, root: Path = RESULTS) -> list[str]:
    """Each comparison of the level's :data:`ONE_START` on the seeds both sides hold: SR by reading of each (mean,
    n), the difference, the p that the first reads more from the test episodes' noise (:func:`p_episodes`) and
    paired by seed (Student's t; two seeds or more), one-sided [two-sided], and the difference in SR. An entry
    whose sides share no seed, or a record without SR told another mission, is one line naming it."""
    lines = ["| MS-VAE | M pairs | against | seeds | SR by reading (points) | theirs | difference | p, test episodes | "
             "p, paired by seed | SR difference (points) |", "| --- " * 10 + "|"]
    for m, label, ours, against, theirs in ONE_START.get(level, ()):
        seeds = sorted(ours.keys() & theirs.keys())
        if not seeds:
            raise SystemExit(f"one_start: {label!r} and {against!r} share no seed")
        runs = [[read_json(level, side[seed], root) for seed in seeds] for side in (ours, theirs)]
        ends = [readings(side) for side in runs]  # (reading, its episodes' variance) of each record, in seed order
        for side, records, end in zip((ours, theirs), runs, ends, strict=True):
            if len(end) < len(records):
                bad = next(side[seed] for seed, record in zip(seeds, records, strict=True) if not readings([record]))
                raise SystemExit(f"one_start: {bad} holds no test SR told another mission (or no episode count)")
        reading = [{seed: r for seed, (r, _) in zip(seeds, end, strict=True)} for end in ends]
        success = [[100 * test_value(r, "success_rate") for r in side] for side in runs]
        one, other = p_episodes(*ends), p_episodes(*reversed(ends))  # each tail exact, however far
        lines.append(f"| {label} ({', '.join(f'`{ours[k]}`' for k in seeds)}) | {m:,} | {against} | "
                     f"{', '.join(map(str, seeds))} | {mean_sd(list(reading[0].values()))} | "
                     f"{mean_sd(list(reading[1].values()))} | "
                     f"{statistics.fmean(reading[0][k] - reading[1][k] for k in seeds):+.1f} | "
                     f"{p_cell(one, None if one is None else 2 * min(one, other))} | "
                     f"{p_cell(*p_greater_paired(*reading))} | "
                     f"{statistics.fmean(success[0]) - statistics.fmean(success[1]):+.1f} |")
    return lines
