#!/usr/bin/env python
"""How well speakers trained with ``goal_steps_weight`` find where a trajectory's goals are completed: their
goal-step read-out against the steps the level's verifier marks, on a split's trajectories replayed from their seeds
(msvae_hf.evaluation.evaluate.goal_step_accuracy).

    python experiments/probe_goal_steps.py --demos data/bosslocal_curve --split test \
        --model "seed 0=runs/bosslocal/speaker_goals_film2_m1k/best" --out results/bosslocal/goal_steps_probe.json

Prints one line a model and writes ``--out`` (JSON: the split, and per model its path and scores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from named_models import check_out, load_named, write_report

import msvae_hf  # noqa: F401  (registers the model types)
from msvae_hf.data.demos import load_demos, with_goal_steps
from msvae_hf.evaluation.evaluate import check_goal_step_read_out, goal_step_accuracy
from msvae_hf.utils.runtime import add_threads_flag, set_threads


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--split", default="test", help="a split of the demonstrations (its trajectories' seeds)")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--out", help="write the scores here (JSON)")
    add_threads_flag(parser, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    check_out(args.out)
    demos = load_demos(args.demos)
    if args.split not in demos:
        sys.exit(f"error: {args.demos} has no split {args.split!r}; it has {sorted(demos)}")
    speakers = load_named(args.model, check_goal_step_read_out)  # every model checked before any replay
    started = time.perf_counter()
    split = demos[args.split]
    try:
        truth = list(with_goal_steps(split)["goal_steps"])  # the verifier's steps, replayed once for every model
    except ValueError as err:
        sys.exit(f"error: {args.demos}, split {args.split}: {err}")
    report: dict = {"demos": args.demos, "split": args.split, "models": {}}
    for name, (path, speaker) in speakers.items():
        scores = goal_step_accuracy(speaker, split, truth=truth)
        report["models"][name] = {"path": path, **scores}
        print(json.dumps({"model": name, **scores}))
    return write_report(report, args.out, started)


if __name__ == "__main__":
    main()
