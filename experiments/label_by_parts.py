#!/usr/bin/env python
"""Long trajectories labelled by their parts: each unpaired trajectory cut after the steps that complete a goal, each
part described by the speaker, and the parts' descriptions joined into one instruction of the level's grammar; scored
against the true missions as every labelling is (``label_accuracy``: replays and word classes, by goal count).

    python experiments/label_by_parts.py --demos data/bosslocal_curve --num-unpaired 10000 \
        --model "seed 0=runs/bosslocal/speaker_goals_film2_m1k/best" --out results/bosslocal/labels_by_parts.json

Two cuts, beside the speaker's labels of whole trajectories:

- ``verifier_steps``: the steps the level's verifier marks in each episode replayed from its seed
  (:func:`msvae_hf.data.demos.with_goal_steps`). This reads each trajectory's true mission, which no labelling may:
  it is the diagnostic of a perfect cut, asking whether parts are described more often right than wholes.
- ``read_out_steps``: the steps the speaker's own goal-step read-out finds (a speaker trained with
  ``goal_steps_weight``; :func:`msvae_hf.evaluation.evaluate.predicted_goal_steps`), a labelling that reads nothing
  but the trajectory.

A part's description is kept to its last goal in the order of execution (the goal whose completion ends the part:
:func:`last_goal`), and the parts are joined in order (:func:`joined`). The grammar says at most four goals
("A and B, then C and D"); a trajectory cut into more parts keeps its whole label (``whole_kept``).
Prints one line a model and cut; writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from datasets import Dataset
from named_models import load_named, write_report

import msvae_hf  # noqa: F401  (registers the model types)
from msvae_hf.data.collator import CELLS_PER_FRAME
from msvae_hf.data.demos import load_demos, with_goal_steps
from msvae_hf.data.pseudo_labels import scored_labels, true_missions
from msvae_hf.evaluation.evaluate import describe_dataset, predicted_goal_steps
from msvae_hf.utils.runtime import add_threads_flag, set_threads, unwritable_folder

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


def last_goal(text: str) -> str:
    """The goal an instruction asks for last ("A, then B": B; "A after you B": A; "A and B": B), as its words."""
    first, then, second = text.partition(", then ")
    if not then:
        second, after, first = text.partition(" after you ")
        if not after:
            second = text
    return second.rpartition(" and ")[2].strip()


def joined(descriptions: list[str]) -> str:
    """One instruction carrying out the goals of ``descriptions`` (one to :data:`MOST_GOALS`) in their order."""
    if not 1 <= len(descriptions) <= MOST_GOALS:
        raise ValueError(f"an instruction joins 1 to {MOST_GOALS} goals, not {len(descriptions)}")
    if len(descriptions) == 1:
        return descriptions[0]
    half = (len(descriptions) + 1) // 2 if len(descriptions) > 2 else 1
    return ", then ".join(" and ".join(group) for group in (descriptions[:half], descriptions[half:]))


def labels_by_parts(speaker: Any, rows: Dataset, steps: list[list[int]], whole: list[str],
                    batch_size: int = 256) -> tuple[list[str], dict[str, int]]:
    """Each trajectory's label from its parts (module docstring), or its ``whole`` label where it is cut into more
    than :data:`MOST_GOALS` parts; with the number of parts described and of whole labels kept."""
    parts, owner = cut(rows, steps)
    descriptions: list[list[str]] = [[] for _ in range(len(rows))]
    for i, text in zip(owner, describe_dataset(speaker, parts, batch_size=batch_size), strict=True):
        descriptions[i].append(last_goal(text))
    labels = [joined(d) if len(d) <= MOST_GOALS else w for d, w in zip(descriptions, whole, strict=True)]
    return labels, {"parts": len(parts), "whole_kept": sum(len(d) > MOST_GOALS for d in descriptions)}


def check_speaks(model: Any) -> None:
    """ValueError unless ``model`` can describe trajectories (a speaker, or MS-VAE)."""
    if not hasattr(model, "describe"):
        raise ValueError(f"it holds a {model.config.model_type} model, which cannot speak")


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
    if args.out and (why := unwritable_folder(Path(args.out).parent)):
        sys.exit(f"error: {why}")
    demos = load_demos(args.demos)
    if len(demos.get("unpaired") or []) == 0:
        sys.exit(f"error: {args.demos} has no unpaired trajectories to label")
    speakers = load_named(args.model, check_speaks)  # every model checked before any labelling
    started = time.perf_counter()
    rows = demos["unpaired"].select(range(min(args.num_unpaired, len(demos["unpaired"]))))
    missions = true_missions(rows)
    verifier = list(with_goal_steps(rows)["goal_steps"])  # the true missions' steps: the diagnostic cut only
    report: dict = {"demos": args.demos, "num_unpaired": len(rows), "models": {}}
    for name, (path, speaker) in speakers.items():
        whole = describe_dataset(speaker, rows, batch_size=args.batch_size)
        entry: dict = {"path": path, "labels": {"whole": scored_labels(rows, whole, missions)}, "cuts": {}}
        cuts = {"verifier_steps": verifier}
        if getattr(speaker, "goal_step_head", None) is not None:
            cuts["read_out_steps"] = predicted_goal_steps(speaker, rows, args.batch_size)
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
