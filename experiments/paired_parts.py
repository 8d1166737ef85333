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
level's verifier holds done after each step (:func:`completed_goals`); the steps agree with
:func:`msvae_hf.envs.missions.goal_steps`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from datasets import Dataset, DatasetDict, concatenate_datasets
from label_by_parts import TRAJECTORY_COLUMNS, cut
from minigrid.envs.babyai.core.verifier import ActionInstr, Instr

from msvae_hf.data.demos import load_demos, write_checksums
from msvae_hf.envs.levels import resolve_level
from msvae_hf.utils.runtime import unwritable_folder

#: How a goal's status is read: True once the verifier holds it done.
Status = Callable[[], bool]


def goal_statuses(instr: Instr) -> list[tuple[ActionInstr, Status | None]]:
    """Each action of a mission with the reading of its status, in the order the instruction says them: a part of a
    sequence or an "and" keeps its status on its parent (``a_done``, ``b_done``); a lone action has none (None), its
    end is the episode's."""
    if isinstance(instr, ActionInstr):
        return [(instr, None)]
    out: list[tuple[ActionInstr, Status | None]] = []
    for part, field in ((instr.instr_a, "a_done"), (instr.instr_b, "b_done")):
        if isinstance(part, ActionInstr):
            out.append((part, lambda parent=instr, field=field: getattr(parent, field) == "success"))
        else:
            out += goal_statuses(part)
    return out


def completed_goals(env: gym.Env, seed: int, actions: list[int]) -> list[tuple[int, list[str]]]:
    """The steps whose action completes goals of episode ``seed``'s mission, each with the words of the goals it
    completes (their ``surface``, in the order the instruction says them); the episode's last step, where the
    verifier holds the mission done, completes every goal not done before it."""
    env.reset(seed=int(seed))
    level: Any = env.unwrapped
    statuses = goal_statuses(level.instrs)
    words = [goal.surface(level) for goal, _ in statuses]  # at the start, as the mission's own words were made
    done = [False] * len(statuses)
    out: list[tuple[int, list[str]]] = []
    for step, action in enumerate(actions):
        _, reward, terminated, truncated, _ = env.step(int(action))
        now = [True] * len(statuses) if terminated and reward > 0 else [
            was or (status is not None and status()) for was, (_, status) in zip(done, statuses, strict=True)]
        new = [text for text, was, is_ in zip(words, done, now, strict=True) if is_ and not was]
        if new:
            out.append((step, new))
        done = now
        if terminated or truncated:
            break
    return out


def parts_of_pairs(pairs: Dataset, level: str) -> Dataset:
    """Each pair of more than one goal step cut after each (:func:`completed_goals`), every part a pair of its own
    with the goals it completes ("A and B" where one step completes two), in order; one-goal pairs give none."""
    env = gym.make(resolve_level(level))
    try:
        columns = pairs.select_columns(["seed", "actions"])
        found = [completed_goals(env, seed, actions) for seed, actions in zip(columns["seed"], columns["actions"],
                                                                               strict=True)]
    finally:
        env.close()
    lengths = [len(actions) for actions in columns["actions"]]
    if any(not steps or steps[-1][0] != length - 1 for steps, length in zip(found, lengths, strict=True)):
        raise ValueError("a pair's mission is not completed at its last step: these are not demonstrations")
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
    if out.exists() and any(out.iterdir()):
        sys.exit(f"error: {out} is not empty")
    if why := unwritable_folder(out.parent):
        sys.exit(f"error: {why}")
    try:
        demos = load_demos(args.demos)
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    if args.num_paired > len(demos["paired"]):
        sys.exit(f"error: {args.demos} has {len(demos['paired']):,} pairs, fewer than --num-paired {args.num_paired}")
    pairs = demos["paired"].select(range(args.num_paired))
    stats = json.loads((Path(args.demos) / "stats.json").read_text())
    parts = parts_of_pairs(pairs, stats["level"])
    splits = DatasetDict({**demos, "paired": concatenate_datasets([pairs, parts])})
    splits.save_to_disk(str(out))
    write_checksums(out)
    command = "python experiments/paired_parts.py " + " ".join(argv if argv is not None else sys.argv[1:])
    stats |= {"command": command, "source": args.demos, "num_paired": args.num_paired, "parts": len(parts),
              "splits": {**stats["splits"], "paired": {"episodes": len(splits["paired"])}}}
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps({"out": str(out), "pairs": args.num_paired, "parts": len(parts),
                      "paired": len(splits["paired"])}))
    return splits


if __name__ == "__main__":
    main()
