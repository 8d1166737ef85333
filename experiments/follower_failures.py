"""Where a follower's failures and extra steps come from: its test episodes (the study's 1000 seeds from
TEST_SEED_START) split by the mission's structure, and its steps against the bot's on the same seeds.

    python experiments/follower_failures.py gotoseqlocal \
        --model film_4000=runs/gotoseqlocal/follower_m100k_attention_film/best \
        --model film_10000=runs/gotoseqlocal/follower_m100k_attention_film_10k/best

For each model: SR by the mission's structure (one goal; goals joined by "and"; a sequence, "then" or "after you";
a sequence with "and" too), the share of all steps spent in failed episodes (BabyAI ends a failed episode only at
its step limit), and on the successes the ratio of the follower's steps to the bot's (median, mean, the share
within 1.2x). Writes ``results/<level>/follower_failures.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from cells import LEVELS
from named_models import check_follows, check_out, load_named, write_report
from result_tables.follower import STRUCTURES, failures_table

import msvae_hf  # noqa: F401  (registers the Auto classes and the Local levels)
from msvae_hf.envs.levels import resolve_level
from msvae_hf.envs.seeds import TEST_SEED_START
from msvae_hf.evaluation.evaluate import bot_episodes, evaluate_follower

ROOT = Path(__file__).resolve().parents[1]


def structure(mission: str) -> str:
    """The mission's structure: whether it orders its goals ("then", "after you") and whether it joins two ("and")."""
    sequence = " then " in f" {mission} " or "after you" in mission
    joined = " and " in f" {mission} "
    return STRUCTURES[2 * sequence + joined]


def breakdown(episodes: list, bot: list) -> dict:
    """The failures and extra steps of ``episodes`` against the bot's ``bot`` on the same seeds."""
    by_structure: dict[str, list[bool]] = defaultdict(list)
    for episode in episodes:
        by_structure[structure(episode.instruction)].append(episode.success)
    ratios = np.array([e.steps / b.steps for e, b in zip(episodes, bot, strict=True) if e.success])
    steps = np.array([e.steps for e in episodes])
    failed = np.array([not e.success for e in episodes])
    return {
        "episodes": len(episodes),
        "success_rate": float(np.mean([e.success for e in episodes])),
        "by_structure": {name: {"episodes": len(by_structure[name]), "success_rate": float(np.mean(by_structure[name]))}
                         for name in STRUCTURES if by_structure[name]},
        "share_of_steps_in_failures": float(steps[failed].sum() / steps.sum()),
        "mean_steps_of_successes": float(steps[~failed].mean()) if (~failed).any() else None,
        "success_steps_over_bot": {"median": float(np.median(ratios)), "mean": float(ratios.mean()),
                                   "within_1.2x": float((ratios <= 1.2).mean())} if len(ratios) else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", choices=list(LEVELS))
    parser.add_argument("--model", action="append", required=True, metavar="NAME=PATH",
                        help="a saved follower or MS-VAE under a name (repeat for several)")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=250)
    parser.add_argument("--out", type=Path, default=None, help="default: results/<level>/follower_failures.json")
    args = parser.parse_args()
    started = time.perf_counter()
    out = args.out or ROOT / "results" / args.level / "follower_failures.json"
    check_out(out)
    models = load_named(args.model, check_follows)  # every model checked before any rollout
    level = resolve_level(LEVELS[args.level])
    bot = list(bot_episodes(level, args.episodes, TEST_SEED_START)[:-1])
    report = {"level": level, "seed_start": TEST_SEED_START, "episodes": args.episodes,
              "bot_mean_steps": float(np.mean([b.steps for b in bot])), "models": {}}
    for name, (path, model) in models.items():
        with torch.no_grad():
            summary, episodes = evaluate_follower(model, level, args.episodes, TEST_SEED_START, args.batch_size)
        report["models"][name] = {"path": path, "summary": summary, **breakdown(episodes, bot)}
    write_report(report, str(out), started)
    print("\n".join(failures_table(report)))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
