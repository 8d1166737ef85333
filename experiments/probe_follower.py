#!/usr/bin/env python
"""How much a follower reads its instruction: the teacher-forced imitation loss of a split's pairs with each
pair's own instruction against the same trajectories with another pair's instruction.

    python experiments/probe_follower.py --demos data/gotoseqlocal_100k --split valid \
        --model "1k pairs=runs/gotoseqlocal/follower/best" --model "MS-VAE full=runs/gotoseqlocal/msvae/best"
    python experiments/probe_follower.py --demos data/gotoseqlocal_pairs_100k --split paired --limit 2000 \
        --model film=runs/gotoseqlocal/follower_m100k_attention_film_lr1e4/best \
        --out results/gotoseqlocal/follower_fit_paired.json

Each batch's instructions are rolled by one (pair i gets pair i-1's instruction, trajectories unchanged), so every
trajectory is scored under a real instruction of the same level that describes another episode. A follower that
ignores its instruction scores both the same; the gap is what the instruction tells it about the bot's actions.
Reported per model: -log p(a | y, o) per real step (Eq. 5, the follower's loss, for the baseline follower and for
MS-VAE's follower path z = mean of q(z|y)) and the share of steps whose most likely action is the bot's, under
each instruction.

With ``--rollouts N --level LEVEL`` the same question in closed loop: greedy rollouts on the first N test seeds
(the seeds of the test SR) with each env's own mission, then with the mission of the seed before it (rolled by
one over the N seeds; success is judged by the env against its own mission), so that a policy whose success does
not depend on what it is told scores the same twice; and both again for the episodes of each number of goals in
their own mission (``by_goal_count``). Writes ``--out`` (JSON) and prints a table.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from named_models import check_follows, check_out, load_named, write_report

from msvae_hf.data.demos import load_demos
from msvae_hf.envs.missions import rows_by_goal_count
from msvae_hf.evaluation.evaluate import instruction_use, rolled_texts, same_words_as_the_one_before
from msvae_hf.evaluation.metrics import summarize_episodes
from msvae_hf.evaluation.rollout import evaluation_seeds
from msvae_hf.utils.runtime import add_threads_flag, set_threads


def rollouts_told_another_mission(model: Any, level: str, episodes: int, batch_size: int = 256) -> dict[str, Any]:
    """Success rate and mean steps of greedy rollouts on the first ``episodes`` test seeds, told each env's own
    mission (``*_own``) and told the mission of the seed before it (``*_other``); ``same_text``: the share of
    episodes whose two missions are the same words."""
    if episodes < 2:
        raise ValueError(f"need at least two episodes to tell each another's mission, got {episodes}")
    seeds = evaluation_seeds(episodes)
    own = model.follow(level, seeds, batch_size=batch_size)
    missions = [r.instruction for r in own]
    told = rolled_texts(missions)
    other = model.follow(level, seeds, instructions=told, batch_size=batch_size)
    return {"episodes": episodes, "same_text": same_words_as_the_one_before(missions) / episodes,
            **told_both_ways(own, other), "by_goal_count": told_both_ways_by_goal_count(own, other)}


def told_both_ways(own: list[Any], other: list[Any]) -> dict[str, float]:
    """Success rate and mean steps of the same episodes told their own mission (``*_own``) and another's
    (``*_other``)."""
    stats = {name: summarize_episodes(results) for name, results in (("own", own), ("other", other))}
    return {f"{key}_{name}": s[key] for name, s in stats.items() for key in ("success_rate", "mean_steps")}


def told_both_ways_by_goal_count(own: list[Any], other: list[Any]) -> dict[str, dict[str, float]]:
    """:func:`told_both_ways` of the episodes whose own mission has n goals, for each n present (a string key, in
    order), with their number (``episodes``): where reading is, by mission length."""
    groups = rows_by_goal_count([result.instruction for result in own])
    return {str(n): {"episodes": len(at), **told_both_ways([own[i] for i in at], [other[i] for i in at])}
            for n, at in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--split", default="valid", help="a split with instructions (paired, valid, test)")
    parser.add_argument("--limit", type=int, help="score the split's first LIMIT pairs only (e.g. of the training "
                        "pairs, to compare how well a follower fits them with its valid pairs)")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--batch-size", type=int, default=250)
    parser.add_argument("--rollouts", type=int, default=0, help="test seeds to roll out on (0: none)")
    parser.add_argument("--level", help="the level to roll out on (with --rollouts), e.g. GoToSeqLocal")
    add_threads_flag(parser, default=1)
    parser.add_argument("--out", default="results/follower_probe.json")
    args = parser.parse_args()
    started = time.perf_counter()
    check_out(args.out)
    set_threads(args.threads)
    if args.rollouts and not args.level:
        raise SystemExit("--rollouts needs --level (the level the demonstrations are of)")
    demos = load_demos(args.demos)
    if args.split not in demos:
        raise SystemExit(f"{args.demos} has no split {args.split!r}; it has {sorted(demos)}")
    dataset = demos[args.split]
    if args.limit is not None:
        if args.limit < 2:
            raise SystemExit(f"--limit must be at least 2 (each pair is given another's instruction), got {args.limit}")
        dataset = dataset.select(range(min(args.limit, len(dataset))))
    followers = load_named(args.model, check_follows)  # every model checked before any is probed
    report: dict = {"demos": args.demos, "split": args.split, "pairs": len(dataset), "models": {}}
    print("| follower | NLL / step, own instruction | another pair's | difference | action accuracy, own | "
          "another pair's |\n| --- | --- | --- | --- | --- | --- |")
    for name, (path, model) in followers.items():
        result = instruction_use(model, dataset, args.batch_size)
        if args.rollouts:
            result["rollouts"] = rollouts_told_another_mission(model, args.level, args.rollouts)
        report["models"][name] = {"path": path, **result}
        print(f"| {name} | {result['nll_own']:.4f} | {result['nll_other']:.4f} | "
              f"{result['nll_other'] - result['nll_own']:+.4f} | {result['accuracy_own']:.3f} | "
              f"{result['accuracy_other']:.3f} |")
        if args.rollouts:
            r = result["rollouts"]
            print(f"|   rollouts on {r['episodes']} test seeds: SR own {r['success_rate_own']:.3f} "
                  f"({r['mean_steps_own']:.1f} steps), told another's mission {r['success_rate_other']:.3f} "
                  f"({r['mean_steps_other']:.1f} steps) |")
            for n, g in r["by_goal_count"].items():
                print(f"|     {n} goal(s), {g['episodes']} episodes: SR own {g['success_rate_own']:.3f}, "
                      f"told another's {g['success_rate_other']:.3f} |")
    write_report(report, args.out, started)


if __name__ == "__main__":
    main()
