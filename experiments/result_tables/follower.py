"""The follower's ablation (experiments/follower_ablation.py): where the instruction conditions the follower x
whether it reads a_{t-1}, three seeds a variant at M = 1000, with the benchmark's seconds per update beside."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from msvae_hf.models.configuration_msvae import FOLLOWER_VARIANTS as VARIANTS
from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER

from .records import RESULTS, reading_points

#: (key in a record's test, header, scale, digits)
COLUMNS = (
    ("success_rate", "SR %", 100, 1),
    ("success_rate_other_mission", "SR told another mission %", 100, 1),
    ("spl", "SPL", 1, 3),
    ("mean_steps", "mean steps", 1, 1),
    ("bot_mean_steps", "bot's steps", 1, 1),
)


def ablation_records(level: str, root: Path = RESULTS) -> dict[str, list[dict]]:
    """Each variant's records, by seed."""
    folder = root / level / "follower_ablation"
    return {variant: [json.loads(p.read_text()) for p in sorted(folder.glob(f"{variant}_seed*.json"))]
            for variant in VARIANTS}


def table_follower_ablation(level: str, root: Path = RESULTS) -> list[str]:
    """Mean +- sd over seeds of each variant's test metrics; SR minus SR told another mission (what reading the
    instruction adds); seconds per update of the baseline follower from results/benchmarks/follower_variants.json
    (ratios measured in one run)."""
    bench_file = root / "benchmarks" / "follower_variants.json"
    bench = json.loads(bench_file.read_text())["models"]["follower"] if bench_file.exists() else {}
    lines = ["| variant | conditioning | reads a_{t-1} | " + " | ".join(c[1] for c in COLUMNS)
             + " | SR - SR told another (points) | s / update (x head_prev) | seeds |",
             "| --- " * (len(COLUMNS) + 6) + "|"]
    for variant, records in ablation_records(level, root).items():
        if not records:
            continue
        fields = VARIANTS[variant]
        conditioning, previous = conditioning_label(fields), fields["previous_action_input"]
        cells = []
        for key, _, scale, digits in COLUMNS:
            cells.append(_mean_sd([r["test"][key] * scale for r in records], digits))
        gap = _mean_sd([reading_points(r["test"]) for r in records], 1)
        speed = bench.get(variant)
        speed_cell = f"{speed['seconds_per_update']:.3f} ({speed['ratio_to_head_prev']:.2f})" if speed else "-"
        lines.append(f"| {variant} | {conditioning} | {'yes' if previous else 'no'} | " + " | ".join(cells)
                     + f" | {gap} | {speed_cell} | {len(records)} |")
    return lines


def conditioning_label(model: dict) -> str:
    """Where a follower's instruction enters, from its model fields: the conditioning, and the maps a FiLM modulates
    where it is both."""
    both = model["follower_conditioning"] != "head" and model.get("film_layers", 1) == 2
    return model["follower_conditioning"] + (", both maps" if both else "")


def _mean_sd(values: list[float], digits: int) -> str:
    text = f"{statistics.fmean(values):.{digits}f}"
    return text + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else "")


#: Validation points (updates) at which Table 1's followers are compared at equal budgets.
MATCHED_UPDATES = (1000, 2000, 4000, 10000)
#: Table 1's "w/ attention" followers on 100,000 pairs, in the table's order (results/<level>/runs/<run>.json).
SCALE_RUNS = ("follower_m100k_attention", "follower_m100k_attention_film", "follower_m100k_attention_film_seed1",
              "follower_m100k_attention_film_10k", "follower_m100k_attention_film_lr1e4",
              "follower_m100k_attention_film_recurrent", "follower_m100k_attention_film_both",
              "follower_m100k_attention_film_both_lr1e4", "follower_m100k_attention_film_h512",
              "follower_m100k_attention_film_h512_4k", "follower_m100k_attention_film2",
              "follower_m100k_attention_film2_10k", "follower_m100k_attention_film2_lr1e4")


def table_follower_scale(level: str, root: Path = RESULTS) -> list[str]:
    """Table 1's "w/ attention" follower on 100,000 pairs in each variant that was run (:data:`SCALE_RUNS`), read
    from its record: where the instruction enters, whether it reads a_{t-1}, its width, how it was trained (updates
    at a learning rate, and the run it started from), the test metrics where the record has them, the validation SR
    at equal updates (runs that start from another's weights: -), and the teacher-forced action accuracy on the
    valid pairs with their own and another pair's instruction at the last validation."""
    lines = ["| run | conditioning | reads a_{t-1} | hidden size | trained | " + " | ".join(c[1] for c in COLUMNS)
             + " | " + " | ".join(f"valid SR % at {u}" for u in MATCHED_UPDATES)
             + " | valid action accuracy, own / another's instruction |",
             "| --- " * (len(COLUMNS) + len(MATCHED_UPDATES) + 6) + "|"]
    for run in SCALE_RUNS:
        path = root / level / "runs" / f"{run}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        config = record.get("config", {})
        model = config.get("model", {})
        start = config.get("init_from")
        recipe = f"{record['updates']} at {config.get('learning_rate', 1e-3):g}"
        if start:
            recipe += f", from {Path(start).parent.name}"
        test = record.get("test") or {}
        cells = [f"{test[key] * scale:.{digits}f}" if key in test else "-" for key, _, scale, digits in COLUMNS]
        valid = {} if start else {h["step"]: h for h in record.get("history", [])}
        at = [f"{100 * valid[u]['valid/success_rate']:.1f}" if u in valid else "-" for u in MATCHED_UPDATES]
        last = record["history"][-1] if record.get("history") else {}
        accuracy = (f"{last['valid/action_accuracy']:.3f} / {last['valid/action_accuracy_other_instruction']:.3f}"
                    if "valid/action_accuracy" in last else "-")
        model = {**HEAD_FOLLOWER, **model}  # a study record that names no follower was trained with this one
        previous = "yes" if model["previous_action_input"] else "no"
        lines.append(f"| {run.removeprefix('follower_m100k_attention').lstrip('_') or 'head'} "
                     f"| {conditioning_label(model)} | {previous} | {model.get('hidden_size', 128)} "
                     f"| {recipe} | " + " | ".join(cells) + " | " + " | ".join(at) + f" | {accuracy} |")
    return lines


#: The mission structures of experiments/follower_failures.py, in its order.
STRUCTURES = ("one goal", "goals joined by and", "a sequence", "a sequence with and")


def table_follower_failures(level: str, root: Path = RESULTS) -> list[str]:
    """Where each follower of ``results/<level>/follower_failures.json`` fails (experiments/follower_failures.py):
    SR by the mission's structure (episodes in brackets), the share of its steps spent in failed episodes, and on
    its successes its steps against the bot's."""
    path = root / level / "follower_failures.json"
    return failures_table(json.loads(path.read_text())) if path.exists() else []


def failures_table(report: dict) -> list[str]:
    """The lines of :func:`table_follower_failures` for one report of experiments/follower_failures.py."""
    lines = ["| model | SR % | " + " | ".join(f"SR % {s}" for s in STRUCTURES)
             + " | steps in failed episodes % | successes: steps / bot's, median (mean; within 1.2x %) |",
             "| --- " * (len(STRUCTURES) + 4) + "|"]
    for name, row in report["models"].items():
        parts = [f"{100 * row['by_structure'][s]['success_rate']:.1f} ({row['by_structure'][s]['episodes']})"
                 if s in row["by_structure"] else "-" for s in STRUCTURES]
        ratio = row["success_steps_over_bot"] or {}
        lines.append(f"| {name} | {100 * row['success_rate']:.1f} | " + " | ".join(parts)
                     + f" | {100 * row['share_of_steps_in_failures']:.0f} | {ratio.get('median', 0):.2f} "
                       f"({ratio.get('mean', 0):.2f}; {100 * ratio.get('within_1.2x', 0):.0f}) |")
    return lines
