#!/usr/bin/env python
"""Score saved pseudo-labels against the true missions, which each trajectory's level regenerates from its seed.

    python experiments/label_accuracy.py data/pseudo_labels/gotoseqlocal/speaker_film2 [more label folders]
    python experiments/label_accuracy.py data/pseudo_labels/gotoseqlocal/speaker_film2 --record
    python experiments/label_accuracy.py --chance data/gotoseqlocal_curve --num-unpaired 10000 \
        --out results/gotoseqlocal/labels/chance_another_mission.json

Prints one JSON line a folder (msvae_hf.envs.missions.score_labels: exact, in grammar, same mission, goal count,
and per goal the action, object type and colour, and the connective; and the shares of trajectories that carry out
their label, replayed in their episode, and that do it in as few steps as the bot told it: msvae_hf.envs.missions
carries_out and demonstrates). ``--record`` also writes the scores
into the folder's pseudo_labels.json as ``label_accuracy``, as scripts/label_unpaired.py does when it labels, so
that labels written without them are scored where they lie (the labels themselves are not touched).

``--chance DEMOS`` scores the yardstick beside every speaker: each unpaired trajectory labelled with the true mission
of the next one (the last with the first's), a speaker that knows the level's missions and ignores the trajectory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from msvae_hf.data.demos import load_demos
from msvae_hf.data.pseudo_labels import (
    RECORD_FILE,
    label_accuracy,
    label_shares,
    load_pseudo_labels,
    pseudo_labels_record,
    true_missions,
)
from msvae_hf.envs.missions import score_labels
from msvae_hf.utils.run_folder import write_json
from msvae_hf.utils.runtime import provenance


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("labels", nargs="*", help="folders written by scripts/label_unpaired.py")
    parser.add_argument("--record", action="store_true", help="write the scores into each folder's record")
    parser.add_argument("--chance", metavar="DEMOS", help="score another trajectory's mission on DEMOS' unpaired")
    parser.add_argument("--num-unpaired", type=int, default=None, help="with --chance: the first N trajectories")
    parser.add_argument("--out", help="with --chance: write the scores here (JSON)")
    args = parser.parse_args(argv)
    if not args.labels and not args.chance:
        parser.error("give label folders, or --chance DEMOS")
    if not args.chance and (args.num_unpaired is not None or args.out):
        parser.error("--num-unpaired and --out go with --chance")
    if args.chance:
        chance(args.chance, args.num_unpaired, args.out)
    if not args.labels:
        return
    try:
        sets = [(Path(folder), load_pseudo_labels(folder)) for folder in args.labels]  # all checked first
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    commit = provenance()["commit"]  # the scoring's code, which may be later than the labelling's
    for folder, labelled in sets:
        scores = label_accuracy(labelled)
        print(json.dumps({"folder": str(folder), **scores}))
        if args.record:
            record = pseudo_labels_record(folder)
            if "unreadable" in record:
                sys.exit(f"error: {folder / RECORD_FILE} cannot be read ({record['unreadable']}); not written")
            write_json(folder / RECORD_FILE, {**record, "label_accuracy": {**scores, "scored_at": commit}})


def chance(demos: str, num_unpaired: int | None, out: str | None) -> dict:
    """Each unpaired trajectory of ``demos`` labelled with the next one's true mission, scored (module docstring)."""
    unpaired = load_demos(demos)["unpaired"]
    if num_unpaired is not None:
        unpaired = unpaired.select(range(min(num_unpaired, len(unpaired))))
    missions = true_missions(unpaired)
    others = missions[1:] + missions[:1]
    scores = {**score_labels(others, missions), **label_shares(unpaired, others)}
    record = {"speaker": "none: each trajectory labelled with the next one's true mission", "demos": demos,
              "num_labelled": len(missions), "label_accuracy": scores, **provenance()}
    print(json.dumps(record))
    if out:
        write_json(out, record)
    return record


if __name__ == "__main__":
    main()
