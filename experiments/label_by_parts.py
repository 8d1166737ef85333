#!/usr/bin/env python
"""Long trajectories labelled by their parts: each unpaired trajectory cut after the steps that complete a goal, each
part described by the speaker, and the parts' descriptions joined into one instruction of the level's grammar; scored
against the true missions as every labelling is (``label_accuracy``: replays and word classes, by goal count).

    python experiments/label_by_parts.py --demos data/bosslocal_curve --num-unpaired 10000 \
        --model "seed 0=runs/bosslocal/speaker_goals_film2_m1k/best" --out results/bosslocal/labels_by_parts.json

Two cuts, beside the speaker's labels of whole trajectories:

- ``verifier_steps``: the steps the level's verifier marks in each episode replayed from its seed, each with the
  number of goals it completes (:func:`verifier_marks`). This reads each trajectory's true mission, which no
  labelling may: it is the diagnostic of a perfect cut, asking whether parts are described more often right than
  wholes.
- ``read_out_steps``: the steps the speaker's own goal-step read-out finds (a speaker trained with
  ``goal_steps_weight``; :func:`msvae_hf.evaluation.evaluate.predicted_goal_steps`), one goal each: a labelling that
  reads nothing but the trajectory.

A part's description is kept to its last goals in the order it asks for them (:func:`goals_in_order`), as many as the
step that ends the part completes (the goals whose completion ends it), and the goals are joined in order
(:func:`joined`). The grammar says at most four goals ("A and B, then C and D"); a trajectory whose parts make more
keeps its whole label (``whole_kept``).
Prints one line a model and cut; writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import gymnasium as gym
from datasets import Dataset
from named_models import check_out, check_speaks, load_named, write_report

import msvae_hf  # noqa: F401  (registers the model types)
from msvae_hf.data.collator import CELLS_PER_FRAME
from msvae_hf.data.demos import load_demos
from msvae_hf.data.pseudo_labels import scored_labels, true_missions
from msvae_hf.envs.levels import resolve_level
from msvae_hf.envs.missions import completed_goals
from msvae_hf.evaluation.evaluate import describe_dataset, predicted_goal_steps
from msvae_hf.utils.runtime import add_threads_flag, set_threads

#: The most goals an instruction of the grammar holds: "A and B, then C and D".
MOST_GOALS = 4
TRAJECTORY_COLUMNS = ["level", "seed", "observations", "directions", "actions"]


def part_ends(steps: list[int], length: int) -> list[int]:
    """The last step of each part of a trajectory of ``length`` steps cut after each of ``steps``: the steps before
    the last one, in order and once each, then the last step (the rest of the trajectory is the last part)."""
    return sorted({s for s in steps if 0 <= s < length - 1}) + [length - 1]


def cut(rows: Dataset, steps: list[list[int]]) -> tuple[Dataset, list[int]]:
    """Each trajectory of ``rows`` cut after its ``steps`` (:func:`part_ends`) into parts that are trajectories of
    their own (the frames before each of the part's actions, its directions and actions; the trajectory's level and
    seed), in order; and for each part the index of its trajectory."""
    parts: dict[str, list[Any]] = {name: [] for name in TRAJECTORY_COLUMNS}
    owner: list[int] = []
    for i, (row, marked) in enumerate(zip(rows.select_columns(TRAJECTORY_COLUMNS), steps, strict=True)):
        start = 0
        for end in part_ends(marked, len(row["actions"])):
            parts["level"].append(row["level"])
            parts["seed"].append(row["seed"])
            parts["observations"].append(row["observations"][start * CELLS_PER_FRAME:(end + 1) * CELLS_PER_FRAME])
            parts["directions"].append(row["directions"][start:end + 1])
            parts["actions"].append(row["actions"][start:end + 1])
            owner.append(i)
            start = end + 1
    features = rows.select_columns(TRAJECTORY_COLUMNS).features
    return Dataset.from_dict(parts, features=features), owner


def goals_in_order(text: str) -> list[str]:
    """The goals of an instruction as its words, in the order it asks for them ("A, then B" and "B after you A": A,
    B; an "and" as written, either order carrying it out)."""
    first, then, second = text.partition(", then ")
    if not then:
        second, after, first = text.partition(" after you ")
        if not after:
            first, second = text, ""
    return [goal.strip() for piece in (first, second) if piece for goal in piece.split(" and ")]


def joined(descriptions: list[str]) -> str:
    """One instruction carrying out the goals of ``descriptions`` (one to :data:`MOST_GOALS`) in their order."""
    if not 1 <= len(descriptions) <= MOST_GOALS:
        raise ValueError(f"an instruction joins 1 to {MOST_GOALS} goals, not {len(descriptions)}")
    if len(descriptions) == 1:
        return descriptions[0]
    half = (len(descriptions) + 1) // 2 if len(descriptions) > 2 else 1
    return ", then ".join(" and ".join(group) for group in (descriptions[:half], descriptions[half:]))


def labels_by_parts(speaker: Any, rows: Dataset, marked: list[dict[int, int]], whole: list[str],
                    batch_size: int = 256) -> tuple[list[str], dict[str, int]]:
    """Each trajectory's label from its parts (module docstring): cut after the steps ``marked`` ({step: the goals
    its action completes}; the last part ends at the last step, one goal where it is not marked), each part's
    description kept to as many of its last goals as its end completes, all joined; its ``whole`` label where that
    makes more than :data:`MOST_GOALS` goals. With the number of parts described and of whole labels kept."""
    parts, owner = cut(rows, [sorted(m) for m in marked])
    ends = [(i, m.get(end, 1)) for i, (m, actions) in enumerate(zip(marked, rows["actions"], strict=True))
            for end in part_ends(sorted(m), len(actions))]
    goals: list[list[str]] = [[] for _ in range(len(rows))]
    for (i, count), text in zip(ends, describe_dataset(speaker, parts, batch_size=batch_size), strict=True):
        goals[i] += goals_in_order(text)[-count:]
    labels = [joined(g) if len(g) <= MOST_GOALS else w for g, w in zip(goals, whole, strict=True)]
    return labels, {"parts": len(parts), "whole_kept": sum(len(g) > MOST_GOALS for g in goals)}


def verifier_marks(rows: Dataset) -> list[dict[int, int]]:
    """For each trajectory, the steps the level's verifier marks as completing goals of its true mission, with how
    many each completes (:func:`msvae_hf.envs.missions.completed_goals`): the diagnostic cut, which reads the
    mission."""
    columns = rows.select_columns(["level", "seed", "actions"])
    marks: list[dict[int, int]] = []
    envs: dict[str, gym.Env] = {}
    try:
        for level, seed, actions in zip(columns["level"], columns["seed"], columns["actions"], strict=True):
            env = envs.setdefault(level, gym.make(resolve_level(level)))
            marks.append({step: len(words) for step, words in completed_goals(env, seed, actions)})
    finally:
        for env in envs.values():
            env.close()
    return marks


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--num-unpaired", type=int, default=10_000, help="label the first N unpaired trajectories")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR", help="a speaker")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", help="write the scores here (JSON)")
    add_threads_flag(parser, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    if args.num_unpaired < 1:
        sys.exit(f"error: --num-unpaired must be at least 1, got {args.num_unpaired}")
    check_out(args.out)
    try:
        demos = load_demos(args.demos)
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    if len(demos.get("unpaired") or []) == 0:
        sys.exit(f"error: {args.demos} has no unpaired trajectories to label")
    speakers = load_named(args.model, check_speaks)  # every model checked before any labelling
    started = time.perf_counter()
    rows = demos["unpaired"].select(range(min(args.num_unpaired, len(demos["unpaired"]))))
    missions = true_missions(rows)
    verifier = verifier_marks(rows)  # the true missions' steps: the diagnostic cut only
    report: dict = {"demos": args.demos, "num_unpaired": len(rows), "models": {}}
    for name, (path, speaker) in speakers.items():
        whole = describe_dataset(speaker, rows, batch_size=args.batch_size)
        entry: dict = {"path": path, "labels": {"whole": scored_labels(rows, whole, missions)}, "cuts": {}}
        cuts = {"verifier_steps": verifier}
        if getattr(speaker, "goal_step_head", None) is not None:
            cuts["read_out_steps"] = [dict.fromkeys(steps, 1)
                                      for steps in predicted_goal_steps(speaker, rows, args.batch_size)]
        for cut_name, steps in cuts.items():
            labels, counts = labels_by_parts(speaker, rows, steps, whole, args.batch_size)
            entry["labels"][cut_name] = scored_labels(rows, labels, missions)
            entry["cuts"][cut_name] = counts
        report["models"][name] = entry
        for labelling, scores in entry["labels"].items():
            print(json.dumps({"model": name, "labels": labelling, "demonstrated": scores["demonstrated"],
                              "by_goal_count": {k: v["demonstrated"] for k, v in scores["by_goal_count"].items()}}))
    return write_report(report, args.out, started)


if __name__ == "__main__":
    main()
