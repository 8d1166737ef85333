#!/usr/bin/env python
"""The first M pairs of a demonstrations folder, and beside them each multi-goal pair's parts as pairs of their own:
the trajectory cut after each step that completes a goal, each part with the words of the goal it completes as the
level's instruction objects say them (``surface``), e.g. "go to the red ball, then open a door" gives the part up to
the step facing the ball with "go to the red ball" and the rest with "open a door".

    python experiments/paired_parts.py --demos data/bosslocal_curve --num-paired 1000 --out data/bosslocal_parts_m1k

Writes a demonstrations folder whose ``paired`` split is the M pairs, then their parts (``--num-paired`` of its
length trains on both), and whose other splits are the source's; its stats.json names this command. Only the M pairs'
missions are read: a speaker trained on it learns one-goal descriptions from the pairs it is given, nothing more.
Each part's goal is found by replaying its pair's episode from its seed, reading which of the mission's actions the
level's verifier holds done after each step (:func:`msvae_hf.envs.missions.completed_goals`; its steps are
:func:`~msvae_hf.envs.missions.goal_steps`). A part keeps its episode's seed but starts where a goal ended: nothing
may replay it from that seed, and :func:`~msvae_hf.data.demos.with_goal_steps` refuses it (so a speaker is not trained
on the folder with ``goal_steps_weight``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from datasets import Dataset, DatasetDict, concatenate_datasets
from label_by_parts import TRAJECTORY_COLUMNS, cut

from msvae_hf.data.demos import completed_goals_of, load_demos, write_checksums
from msvae_hf.utils.runtime import unwritable_folder


def parts_of_pairs(pairs: Dataset, level: str) -> Dataset:
    """Each pair of more than one goal step cut after each (:func:`completed_goals`), every part a pair of its own
    with the goals it completes ("A and B" where one step completes two), in order; one-goal pairs give none."""
    found = completed_goals_of(pairs, level)  # ValueError unless demonstrations
    keep = [i for i, steps in enumerate(found) if len(steps) > 1]
    parts, _ = cut(pairs.select(keep), [[step for step, _ in found[i]] for i in keep])
    words = [" and ".join(new) for i in keep for _, new in found[i]]
    return parts.add_column("instruction", words).cast(pairs.select_columns([*TRAJECTORY_COLUMNS,
                                                                             "instruction"]).features)


def main(argv: list[str] | None = None) -> DatasetDict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--num-paired", type=int, required=True, help="M: the pairs given, whose parts are added")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.num_paired < 1:
        sys.exit(f"error: --num-paired must be at least 1, got {args.num_paired}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        sys.exit(f"error: {out} is not an empty folder")
    if why := unwritable_folder(out.parent):
        sys.exit(f"error: {why}")
    try:
        demos = load_demos(args.demos)
        stats = json.loads((Path(args.demos) / "stats.json").read_text())
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    if args.num_paired > len(demos["paired"]):
        sys.exit(f"error: {args.demos} has {len(demos['paired']):,} pairs, fewer than --num-paired {args.num_paired}")
    pairs = demos["paired"].select(range(args.num_paired))
    try:
        parts = parts_of_pairs(pairs, stats["level"])
    except ValueError as err:
        sys.exit(f"error: {args.demos}: {err}")
    splits = DatasetDict({**demos, "paired": concatenate_datasets([pairs, parts])})
    command = "python experiments/paired_parts.py " + " ".join(argv if argv is not None else sys.argv[1:])
    stats |= {"command": command, "source": args.demos, "num_paired": args.num_paired, "parts": len(parts),
              "splits": {**stats["splits"], "paired": {"episodes": len(splits["paired"])}}}
    work = out.with_name(f".{out.name}.writing")  # the folder appears whole or not at all
    shutil.rmtree(work, ignore_errors=True)
    splits.save_to_disk(str(work))
    write_checksums(work)
    (work / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    if out.exists():
        out.rmdir()
    work.rename(out)
    print(json.dumps({"out": str(out), "pairs": args.num_paired, "parts": len(parts),
                      "paired": len(splits["paired"])}))
    return splits


if __name__ == "__main__":
    main()
