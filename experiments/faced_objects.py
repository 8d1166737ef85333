#!/usr/bin/env python
"""What a trajectory shows of its goals: the objects the agent faces in the bot's demonstrations, against the steps
the level's verifier marks as completing a goal.

    python experiments/faced_objects.py --demos data/gotoseqlocal_curve --split paired --episodes 10000 \
        --out results/gotoseqlocal/faced_objects.json

A "go to" goal completes at the step the agent faces its object (the script reads levels of "go to" missions alone,
GoToSeqLocal's), so a speaker that reads the cells the agent faces (``trajectory_front_cells``) sees every goal; it also
sees the objects the bot faces on its way. For each of the split's first ``--episodes`` demonstrations, replayed from
its seed on its level: the objects faced (the cell ahead holds an object at the start or after a step) at a step that
completes a goal (:func:`msvae_hf.envs.missions.completed_goals`) and at any other step. Reported: the share of episodes
in which the agent faces an object at no goal step of that episode (an object no goal is completed at); how often the
number of distinct objects faced equals the number of goals the mission asks for
(:func:`msvae_hf.envs.missions.goal_count`), which is what a speaker naming each object it saw would say; how often the
number of steps that complete a goal equals it (a step can complete several goals), the most a speaker that names one
goal for each such step could get right; all three by the mission's goal count; and which action brought each facing
about (forward, a turn, or the episode's start).

``--labels FOLDER`` (a labelling by scripts/label_unpaired.py) surveys the labelled trajectories instead, their true
missions regenerated from their seeds, and scores the labels' number of goals against the mission's and against the
number of distinct objects faced: where the two differ, a speaker that names what it saw says the second.

    python experiments/faced_objects.py --labels data/pseudo_labels/gotoseqlocal/speaker_cells_film2_m10k_first10k \
        --episodes 3000 --out results/gotoseqlocal/faced_objects_speaker_cells_film2_m10k.json

Nothing here trains or runs a model.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import gymnasium as gym
from datasets import load_from_disk
from named_models import check_out, write_report

import msvae_hf  # noqa: F401  (registers the levels)
from msvae_hf.data.demos import load_demos
from msvae_hf.envs.levels import resolve_level
from msvae_hf.envs.missions import (
    InstructionError,
    completed_goals,
    goal_count,
    goals,
    parse_mission,
    regenerate_missions,
)

ACTIONS = {None: "start", 0: "left", 1: "right", 2: "forward"}


def facings(env: gym.Env, seed: int, actions: list[int]) -> list[tuple[int, int | None, tuple]]:
    """(step, action, object) for the episode's start (step -1, no action) and each step after which the cell ahead
    holds an object (its type, colour and position), episode ``seed`` replayed with ``actions``: what the frames
    show in the cell ahead, the start's frame and each action's next frame, and the last action's."""
    env.reset(seed=int(seed))
    level = env.unwrapped
    out = []
    for step, action in ((-1, None), *enumerate(map(int, actions))):
        if action is not None:
            env.step(action)
        cell = level.grid.get(*level.front_pos)
        if cell is not None and cell.type != "wall":
            out.append((step, action, (cell.type, cell.color, tuple(int(x) for x in level.front_pos))))
    return out


def _label_goals(label: str) -> int | None:
    """How many goals ``label`` asks for; None where the level's grammar cannot read it."""
    try:
        return goal_count(label)
    except InstructionError:
        return None


def survey(env: gym.Env, rows, labels: list[str] | None = None) -> dict:
    """The report's counts over ``rows`` (each with "seed", "actions" and its true mission as "instruction"), and
    where ``labels`` (one a row) are given, their goal counts against the mission's and the objects faced."""
    by_count: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    brought: dict[str, collections.Counter] = {"goal": collections.Counter(), "other": collections.Counter()}
    for i, row in enumerate(rows):
        asked = goals(parse_mission(row["instruction"]))
        if any(goal.action != "goto" for goal in asked):
            raise ValueError(f"{row['instruction']!r} asks for more than going to objects: faced objects say where "
                             "go-to goals end, not where the agent picks up, opens or puts")
        goals_asked = len(asked)
        steps = {step for step, _ in completed_goals(env, row["seed"], row["actions"], demonstration=True)}
        seen = facings(env, row["seed"], row["actions"])
        objects = {obj for _, _, obj in seen}
        others = objects - {obj for step, _, obj in seen if step in steps}
        for step, action, _ in seen:
            brought["goal" if step in steps else "other"][ACTIONS.get(action, "other action")] += 1
        counts = by_count[goals_asked]
        counts["episodes"] += 1
        counts["faces_other_object"] += bool(others)
        faced = len(objects)
        counts["distinct_faced_is_goal_count"] += faced == goals_asked
        counts["goal_steps_is_goal_count"] += len(steps) == goals_asked
        if labels is not None:
            said = _label_goals(labels[i])
            counts["label_is_goal_count"] += said == goals_asked
            counts["label_is_faced_count"] += said == faced
            if faced != goals_asked:
                counts["faced_differs"] += 1
                counts["faced_differs_label_is_goal_count"] += said == goals_asked
                counts["faced_differs_label_is_faced_count"] += said == faced
    total = collections.Counter()
    for counts in by_count.values():
        total.update(counts)

    def shares(counts: collections.Counter) -> dict:
        n, differs = counts["episodes"], counts["faced_differs"]
        out = {"episodes": n, "faces_other_object": counts["faces_other_object"] / n,
               "distinct_faced_is_goal_count": counts["distinct_faced_is_goal_count"] / n,
               "goal_steps_is_goal_count": counts["goal_steps_is_goal_count"] / n}
        if labels is not None:
            out["labels"] = {
                "goal_count_right": counts["label_is_goal_count"] / n,
                "goal_count_is_distinct_faced": counts["label_is_faced_count"] / n,
                "where_they_differ": {
                    "episodes": differs,
                    "goal_count_right": counts["faced_differs_label_is_goal_count"] / differs if differs else None,
                    "goal_count_is_distinct_faced":
                        counts["faced_differs_label_is_faced_count"] / differs if differs else None}}
        return out

    return {**shares(total), "by_goal_count": {str(k): shares(by_count[k]) for k in sorted(by_count)},
            "facings_brought_by": {kind: dict(sorted(c.items())) for kind, c in brought.items()}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--demos", help="demonstrations (a folder of scripts/make_demos.py)")
    source.add_argument("--labels", help="a labelling (a folder of scripts/label_unpaired.py)")
    parser.add_argument("--split", default="paired", help="with --demos: a split with its missions")
    parser.add_argument("--episodes", type=int, default=10_000, help="the first this many trajectories")
    parser.add_argument("--out", help="write the report here (JSON)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        sys.exit(f"error: --episodes must be at least 1, got {args.episodes}")
    check_out(args.out)
    if args.demos:
        demos = load_demos(args.demos)
        if args.split not in demos:
            sys.exit(f"error: {args.demos} has no split {args.split!r}; it has {sorted(demos)}")
        split, where = demos[args.split], f"{args.demos}, split {args.split}"
        if "instruction" not in split.column_names:
            sys.exit(f"error: {where} holds no missions (an unpaired split); name a paired one")
    else:
        try:
            split, where = load_from_disk(args.labels), args.labels
        except FileNotFoundError:
            sys.exit(f"error: {args.labels} is not a labelling (no dataset; scripts/label_unpaired.py writes one)")
    levels = set(split.unique("level"))
    if len(levels) != 1:
        sys.exit(f"error: {where} holds {sorted(levels)}: one level at a time")
    level = resolve_level(levels.pop())
    started = time.perf_counter()
    rows = split.select(range(min(args.episodes, len(split)))).select_columns(["seed", "actions", "instruction"])
    labels = None
    if args.labels:  # the labels as "instruction"; the true missions from the seeds
        labels = list(rows["instruction"])
        rows = rows.remove_columns("instruction").add_column("instruction", regenerate_missions(level, rows["seed"]))
    env = gym.make(level)
    try:
        report = {"source": where, **survey(env, rows, labels)}
    except ValueError as err:
        sys.exit(f"error: {where}: {err}")
    finally:
        env.close()
    print(f"{report['episodes']} episodes: an object faced at no goal step in {100 * report['faces_other_object']:.1f}"
          f" %; distinct objects faced = goals asked in {100 * report['distinct_faced_is_goal_count']:.1f} %; steps "
          f"completing a goal = goals asked in {100 * report['goal_steps_is_goal_count']:.1f} %")
    if labels is not None:
        said, differ = report["labels"], report["labels"]["where_they_differ"]
        where = "" if not differ["episodes"] else (
            f"; where those differ ({differ['episodes']}): right in {100 * differ['goal_count_right']:.1f} %, = faced "
            f"in {100 * differ['goal_count_is_distinct_faced']:.1f} %")
        print(f"labels: goal count right in {100 * said['goal_count_right']:.1f} %, = distinct objects faced in "
              f"{100 * said['goal_count_is_distinct_faced']:.1f} %{where}")
    return write_report(report, args.out, started)


if __name__ == "__main__":
    main()
