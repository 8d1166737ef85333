#!/usr/bin/env python
"""Collect the BossLocal experiment (Tables 2 and 3 of the paper) into one JSON and a markdown table.

    python scripts/collect_results.py --runs runs/bosslocal --out results/bosslocal
    python scripts/collect_results.py --grid --runs results/gpu_grid/runs --out results/gpu_grid/summary

With ``--grid`` the runs are those of scripts/gpu_seed_grid.sh, ``<config>_seed<k>/``, grouped by config
(``msvae_paired`` is the reference of the t-tests) instead of the named runs below.

Reads ``<runs>/<name>/results.json`` of each run named in ``RUNS`` that exists, adds the random-policy
floor on the same test seeds (design.md: SR alone can hide wandering), and writes ``<out>.json`` and
``<out>.md``. Every number comes from the runs' own final evaluation (test seeds from 10**9; BLEU on the
``test`` split), so rerunning the commands in README.md regenerates it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import msvae_hf  # noqa: F401  (registers the levels)
from msvae_hf.envs.seeds import TEST_SEED_START
from msvae_hf.metrics import summarize_episodes
from msvae_hf.rollout import RandomPolicy, evaluation_seeds, rollout

#: run folder -> (label, follower trained with D_u, speaker trained with D_u)
RUNS = {
    "follower": ("follower (paired only)", False, False),
    "speaker": ("speaker (paired only)", False, False),
    "msvae_paired": ("MS-VAE, paired only (gamma = alpha = 0)", False, False),
    "msvae_paired_seed1": ("MS-VAE, paired only, seed 1", False, False),
    "msvae_paired_seed2": ("MS-VAE, paired only, seed 2", False, False),
    "msvae": ("MS-VAE full (+ V + D', App. D weights)", True, True),
    "msvae_seed1": ("MS-VAE full, seed 1", True, True),
    "msvae_seed2": ("MS-VAE full, seed 2", True, True),
    "msvae_gamma1": ("MS-VAE full, gamma = 1", True, True),
    "msvae_gamma1_seed1": ("MS-VAE full, gamma = 1, seed 1", True, True),
    "msvae_gamma1_seed2": ("MS-VAE full, gamma = 1, seed 2", True, True),
    "msvae_gamma1_alpha10": ("MS-VAE full, gamma = 1, alpha = 10", True, True),
    "msvae_gamma1_alpha10_seed1": ("MS-VAE full, gamma = 1, alpha = 10, seed 1", True, True),
    "msvae_gamma1_alpha10_seed2": ("MS-VAE full, gamma = 1, alpha = 10, seed 2", True, True),
    "msvae_gamma1_alpha100": ("MS-VAE full, gamma = 1, alpha = 100", True, True),
    "msvae_fixeddec": ("MS-VAE full, V trains q(z|a,o) only (stopped at 1000)", True, True),
    "msvae_gamma1_fixeddec": ("MS-VAE full, gamma = 1, V trains q(z|a,o) only", True, True),
    "msvae_alpha1000": ("MS-VAE full, D' weight alpha = 1000", True, True),
    "msvae_k16": ("MS-VAE full, K = 16 tokens", True, True),
    "msvae_paired_finit": ("MS-VAE paired only, follower-only init (App. D)", False, False),
    "msvae_finit": ("MS-VAE full, follower-only init (App. D)", True, True),
    "msvae_paired_then_paired": ("MS-VAE paired only, then 400 paired-only updates", False, False),
    "msvae_then_paired": ("MS-VAE full, then 400 paired-only updates", True, True),
    "msvae_trajbeta1": ("MS-VAE full, trajectory beta = 1 (stopped at 1000)", True, True),
    "msvae_trajbeta": ("MS-VAE full, trajectory beta = 0.01 (stopped at 400)", True, True),
    "msvae_gamma10": ("MS-VAE full, gamma = 10 (stopped at 400)", True, True),
    "speaker_follower": ("speaker-follower (baseline speaker labels D_u)", True, False),
    "msvae_paired_speaker_follower": ("speaker-follower, labels by MS-VAE paired only", True, False),
    "msvae_speaker_follower": ("MS-VAE-speaker-follower (MS-VAE labels D_u)", True, True),
    "speaker_paired": ("speaker (paired only), 1200 updates", False, False),
    "speaker_paired_seed1": ("speaker (paired only), 1200 updates, seed 1", False, False),
    "speaker_paired_seed2": ("speaker (paired only), 1200 updates, seed 2", False, False),
    "speaker_selftrain": ("speaker self-trained (its own labels of D_u)", False, True),
    "speaker_selftrain_seed1": ("speaker self-trained, seed 1", False, True),
    "speaker_selftrain_seed2": ("speaker self-trained, seed 2", False, True),
    "speaker_msvae_labels": ("speaker on MS-VAE labels of D_u (gamma = 1, alpha = 10)", False, True),
    **{f"speaker_paired_selftrain{'' if k == 0 else f'_seed{k}'}": (
        "speaker self-trained on the 1200-update speaker's labels of 40k of D_u" + ("" if k == 0 else f", seed {k}"),
        False, True) for k in range(3)},
    **{f"speaker_front_{split}{'' if k == 0 else f'_seed{k}'}": (
        f"speaker, front-cell pre-training on {what}" + ("" if k == 0 else f", seed {k}"), False, split != "paired")
       for split, what in (("paired", "the paired trajectories"), ("unpaired", "D_u"),
                           ("selftrain", "D_u, self-trained on the seed-0 speaker's labels"))
       for k in range(5)},
    "speaker_front_selftrain2": ("speaker, front-cell pre-training on D_u, second round of self-training", False, True),
    "speaker_front_selftrain2_seed1": ("speaker, front-cell pre-training on D_u, second round, seed 1", False, True),
}


def seed_runs(name: str, n: int) -> list[str]:
    """``name`` on seeds 0..n-1: the run folders ``name``, ``name_seed1``, ..."""
    return [name] + [f"{name}_seed{k}" for k in range(1, n)]


#: method -> its runs on seeds 0, 1, 2; App. D's statistics: mean over three seeds and one-sided t-tests
#: ("there is no difference in the means") against MS-VAE trained on paired data only
SEED_GROUPS = {
    "MS-VAE paired only": ["msvae_paired", "msvae_paired_seed1", "msvae_paired_seed2"],
    "MS-VAE full (App. D, gamma = 100)": ["msvae", "msvae_seed1", "msvae_seed2"],
    "MS-VAE full, gamma = 1": ["msvae_gamma1", "msvae_gamma1_seed1", "msvae_gamma1_seed2"],
    "MS-VAE full, gamma = 1, alpha = 10": ["msvae_gamma1_alpha10", "msvae_gamma1_alpha10_seed1",
                                           "msvae_gamma1_alpha10_seed2"],
}
#: speaker methods -> their runs over seeds (the label of each is used in several tables below)
PAIRED = ("speaker, paired only", seed_runs("speaker_paired", 3))
FRONT_PAIRED = ("speaker, front-cell pre-training on the paired trajectories", seed_runs("speaker_front_paired", 5))
FRONT_DU = ("speaker, front-cell pre-training on D_u", seed_runs("speaker_front_unpaired", 5))
FRONT_SELFTRAIN = ("front-cell on D_u, self-trained on the seed-0 speaker's labels of D_u",
                   seed_runs("speaker_front_selftrain", 5))
#: the baseline speaker's seeds: paired only (the reference), with D_u labelled for it (pseudo_labels), and
#: with its encoders pre-trained on the front-cell task
SPEAKER_SEED_GROUPS = dict([
    PAIRED,
    ("speaker self-trained (labels: the baseline speaker)", seed_runs("speaker_selftrain", 3)),
    ("speaker on MS-VAE labels (gamma = 1, alpha = 10)", ["speaker_msvae_labels"]),
    FRONT_PAIRED,
    FRONT_DU,
])
#: what the unpaired trajectories add to the best paired-only speaker (front-cell pre-training on the paired
#: trajectories): the same task on D_u instead, then self-training on D_u labelled by the seed-0 D_u speaker
FRONT_SEED_GROUPS = dict([FRONT_PAIRED, FRONT_DU, FRONT_SELFTRAIN])
#: self-training with a grounded teacher against the same pre-trained speakers trained on the pairs alone
SELFTRAIN_SEED_GROUPS = dict([
    FRONT_DU, FRONT_SELFTRAIN,
    ("a second round (the seed-0 student labels D_u)", seed_runs("speaker_front_selftrain2", 2)),
])
#: self-training without pre-training: the seed-0 paired-only speaker labels 40k of D_u for fresh students
PAIRED_SELFTRAIN_SEED_GROUPS = dict([
    PAIRED, ("speaker self-trained on the seed-0 speaker's labels of D_u", seed_runs("speaker_paired_selftrain", 3)),
])
SEED_METRICS = {
    "test SR": lambda row: (row["test"] or {}).get("success_rate"),
    # BLEU of best/ (best by validation SR): every MS-VAE run has it, also those made before best_speaker/
    "test BLEU of best/": lambda row: row["test_bleu_of_best"] if row["best_speaker"] else row["test_bleu"],
    "test BLEU of best_speaker/": lambda row: row["test_bleu"] if row["best_speaker"] else None,
}


def seed_statistics(rows: dict[str, dict], groups: dict[str, list[str]] = SEED_GROUPS) -> dict[str, dict]:
    """Mean, sample sd and n over seeds of each method in ``groups``, and Student's one-sided t-test of
    "greater than" the first method (MS-VAE paired only; p_greater) with its two-sided p, as App. D reports."""
    from scipy.stats import ttest_ind

    values = {
        method: {metric: [v for name in names if name in rows and (v := get(rows[name])) is not None]
                 for metric, get in SEED_METRICS.items()}
        for method, names in groups.items()
    }
    reference = next(iter(groups))
    stats: dict[str, dict] = {}
    for method, by_metric in values.items():
        stats[method] = {}
        for metric, xs in by_metric.items():
            entry: dict = {"values": xs, "n": len(xs)}
            if xs:
                entry["mean"] = statistics.fmean(xs)
                entry["sd"] = statistics.stdev(xs) if len(xs) > 1 else None  # sample sd
            ref = values[reference][metric]
            if method != reference and len(xs) > 1 and len(ref) > 1:
                for key, test in (("p_greater_than_paired_only", ttest_ind(xs, ref, alternative="greater")),
                                  ("p_two_sided", ttest_ind(xs, ref))):
                    entry[key] = None if math.isnan(test.pvalue) else float(test.pvalue)  # NaN: no spread at all
            stats[method][metric] = entry
    return stats


def random_floor(level: str, episodes: int) -> dict[str, dict[str, float]]:
    """Random policies over left/right/forward and over all 7 actions on the test seeds."""
    seeds = evaluation_seeds(episodes, TEST_SEED_START)
    return {
        f"random_{n}_actions": summarize_episodes(rollout(RandomPolicy(n, seed=0), level, seeds, batch_size=256))
        for n in (3, 7)
    }


def grid_runs(runs: Path, reference: str = "msvae_paired") -> tuple[dict[str, tuple], dict[str, list[str]]]:
    """Runs named ``<config>_seed<k>`` (scripts/gpu_seed_grid.sh) -> (RUNS-like labels, seed groups by config),
    ``reference`` first. A folder without results.json (a run stopped early) is left out."""
    found = sorted(p.parent.name for p in runs.glob("*_seed*/results.json"))
    groups: dict[str, list[str]] = {}
    for name in found:
        config, _, seed = name.rpartition("_seed")
        if seed.isdigit():
            groups.setdefault(config, []).append(name)
    if reference not in groups:
        raise SystemExit(f"no {reference}_seed<k>/results.json under {runs}: the t-tests need it as reference")
    groups = {reference: groups.pop(reference), **groups}
    labels = {name: (name.replace("_seed", ", seed "), config != reference, config != reference)
              for config, names in groups.items() for name in names}
    return labels, groups


def bleu_checkpoint(row: dict) -> str:
    """Which checkpoint the BLEU column scored: best by validation BLEU (speakers, MS-VAE's best_speaker/)
    or, for MS-VAE runs made before best_speaker/ existed, the best by validation SR."""
    if row["test_bleu"] is None:
        return "-"
    if row["best_speaker"]:
        return f"best valid BLEU (update {row['best_speaker']['step']})"
    if row["model_type"] == "msvae":
        return f"best valid SR (update {row['best']['step']})"
    return f"best valid BLEU (update {row['best']['step']})"


def seed_lines(seeds: dict[str, dict], reference: str) -> list[str]:
    """A markdown table of :func:`seed_statistics`, with only the metrics some method has values for."""
    metrics = [m for m in SEED_METRICS if any(by_metric[m]["n"] for by_metric in seeds.values())]
    if not metrics:
        return []
    lines = ["", f"Over seeds (mean +- sd, n; p: one-sided t-test of 'greater than {reference}', two-sided "
             "in brackets):", "", "| method | " + " | ".join(metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    for method, by_metric in seeds.items():
        if not any(by_metric[m]["n"] for m in metrics):
            continue  # none of its runs is on disk
        cells = []
        for metric in metrics:
            entry = by_metric[metric]
            if not entry["n"]:
                cells.append("-")
                continue
            cell = f"{entry['mean']:.3g}" + (f" +- {entry['sd']:.2g}" if entry["sd"] is not None else "")
            cell += f" (n = {entry['n']})"
            if entry.get("p_greater_than_paired_only") is not None:
                cell += f", p = {entry['p_greater_than_paired_only']:.2g} [{entry['p_two_sided']:.2g}]"
            cells.append(cell)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="runs/bosslocal")
    parser.add_argument("--out", default="results/bosslocal")
    parser.add_argument("--floor-episodes", type=int, default=1000)
    parser.add_argument("--grid", action="store_true", help="runs named <config>_seed<k>, grouped by config")
    args = parser.parse_args()
    runs, groups = (grid_runs(Path(args.runs)) if args.grid else (RUNS, SEED_GROUPS))
    rows, level = {}, None
    for name, (label, follower_du, speaker_du) in runs.items():
        path = Path(args.runs) / name / "results.json"
        if not path.exists():
            continue
        res = json.loads(path.read_text())
        level = res["level"]
        command = (Path(args.runs) / name / "command.txt")
        rows[name] = {
            "label": label, "model_type": res.get("model_type"),
            "follower_uses_unpaired": follower_du, "speaker_uses_unpaired": speaker_du,
            "test": res.get("test"), "test_bleu": res.get("test_bleu"),
            "paper_protocol_valid_sr": res.get("paper_protocol_valid_sr"), "best": res.get("best"),
            "best_speaker": res.get("best_speaker"), "test_bleu_of_best": res.get("test_bleu_of_best"),
            "updates": res.get("updates"), "wall_time_s": res.get("wall_time_s"),
            "command": command.read_text().strip().splitlines() if command.exists() else None,
        }
    if not rows:
        raise SystemExit(f"no results.json under {args.runs}")
    floor = random_floor(level, args.floor_episodes)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    seeds = seed_statistics(rows, groups)
    extra = {} if args.grid else {"speaker_seeds": SPEAKER_SEED_GROUPS, "front_seeds": FRONT_SEED_GROUPS,
                                  "selftrain_seeds": SELFTRAIN_SEED_GROUPS,
                                  "paired_selftrain_seeds": PAIRED_SELFTRAIN_SEED_GROUPS}
    extra = {key: seed_statistics(rows, table) for key, table in extra.items()}
    Path(f"{args.out}.json").write_text(json.dumps(
        {"level": level, "runs": rows, "floor": floor, "seeds": seeds, **extra}, indent=2))
    lines = [
        "| method | test SR | mean steps | mean reward | valid SR, App. D protocol | test BLEU-4 | BLEU checkpoint "
        "| updates |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    for row in rows.values():
        test = row["test"] or {}
        lines.append(
            f"| {row['label']} | {fmt(test.get('success_rate'), '.3f')} | {fmt(test.get('mean_steps'), '.1f')} | "
            f"{fmt(test.get('mean_reward'), '.3f')} | {fmt(row['paper_protocol_valid_sr'], '.3f')} | "
            f"{fmt(row['test_bleu'], '.2f')} | {bleu_checkpoint(row)} | {row['updates']} |"
        )
    for name, summary in floor.items():
        lines.append(
            f"| floor: {name.replace('_', ' ')} | {summary['success_rate']:.3f} | {summary['mean_steps']:.1f} | "
            f"{summary['mean_reward']:.3f} | - | - | - | - |"
        )
    lines += seed_lines(seeds, next(iter(groups)))
    for stats in extra.values():
        lines += seed_lines(stats, next(iter(stats)))
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
