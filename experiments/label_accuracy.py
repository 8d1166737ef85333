#!/usr/bin/env python
"""Score saved pseudo-labels against the true missions, which each trajectory's level regenerates from its seed.

    python experiments/label_accuracy.py data/pseudo_labels/gotoseqlocal/speaker_film2 [more label folders]
    python experiments/label_accuracy.py data/pseudo_labels/gotoseqlocal/speaker_film2 --record
    python experiments/label_accuracy.py --chance data/gotoseqlocal_curve --num-unpaired 10000 \
        --out results/gotoseqlocal/labels/chance_another_mission.json

Prints one JSON line a folder (msvae_hf.envs.missions.score_labels: exact, in grammar, same mission, goal count,
and per goal the action, object type and colour, and the connective; the shares of trajectories that carry out
their label, replayed in their episode, and that do it in as few steps as the bot told it: msvae_hf.envs.missions
carries_out and demonstrates; and all of these for the trajectories of each number of goals in the true mission,
``by_goal_count``). ``--record`` also writes the scores
into the folder's pseudo_labels.json as ``label_accuracy``, as scripts/label_unpaired.py does when it labels, so
that labels written without them are scored where they lie (the labels themselves are not touched).

``--chance DEMOS`` scores the yardstick beside every speaker: each unpaired trajectory labelled with the true mission
of the next one (the last with the first's), a speaker that knows the level's missions and ignores the trajectory.

``--compare A B`` compares two labellings of the same trajectories, paired: of the trajectories whose labels differ,
how many demonstrate (and carry out) A's label and not B's and the reverse, with McNemar's exact two-sided p, and the
sha256 of both labellings (their records'):

    python experiments/label_accuracy.py --compare data/pseudo_labels/gotoseqlocal/speaker_cells_film2_m10k_first2k \
        data/pseudo_labels/gotoseqlocal/speaker_cells_film2_m10k_rescored_first2k \
        --out results/gotoseqlocal/labels_compared/speaker_cells_film2_m10k_rescored_first2k.json

``--by-confidence LABELS`` says how right a labelling's labels are by how sure it was of them: each label scored as it
was chosen (msvae_hf.extensions.pragmatics.label_scores, with the speaker, rescorer and lam the labels' record names,
as scripts/keep_confident.py keeps them), and for each of ``--shares`` the accuracy of the labels scored highest and
their trajectories' mean steps:

    python experiments/label_accuracy.py --by-confidence data/pseudo_labels/bosslocal/speaker_cells_film2_m1k_rescored \
        --num-unpaired 10000 --out results/bosslocal/labels_by_confidence/speaker_cells_film2_m1k_rescored.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from msvae_hf.data.demos import load_demos
from msvae_hf.data.pseudo_labels import (
    RECORD_FILE,
    check_num_unpaired,
    confident_rows,
    label_accuracy,
    load_pseudo_labels,
    pseudo_labels_record,
    scored_labels,
    true_missions,
)
from msvae_hf.envs.missions import replay_label
from msvae_hf.utils.run_folder import write_json
from msvae_hf.utils.runtime import provenance, unwritable_folder

#: The shares of labels ``--by-confidence`` scores unless told others.
SHARES = [0.1, 0.2, 0.3, 0.5, 1.0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("labels", nargs="*", help="folders written by scripts/label_unpaired.py")
    parser.add_argument("--record", action="store_true", help="write the scores into each folder's record")
    parser.add_argument("--chance", metavar="DEMOS", help="score another trajectory's mission on DEMOS' unpaired")
    parser.add_argument("--num-unpaired", type=int, default=None,
                        help="with --chance or --by-confidence: the first N trajectories")
    parser.add_argument("--by-confidence", metavar="LABELS", help="accuracy of the labels a labelling was surest of")
    parser.add_argument("--shares", type=float, nargs="+", default=SHARES,
                        help="with --by-confidence: the shares of labels scored highest to score")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two labellings of the same trajectories")
    parser.add_argument("--out", help="with --chance, --compare or --by-confidence: write the result here (JSON)")
    args = parser.parse_args(argv)
    if not args.labels and not args.chance and not args.compare and not args.by_confidence:
        parser.error("give label folders, --chance DEMOS, --compare A B or --by-confidence LABELS")
    if sum(map(bool, (args.chance, args.compare, args.by_confidence))) > 1:
        parser.error("--chance, --compare and --by-confidence are separate runs: give one")
    if args.num_unpaired is not None and not (args.chance or args.by_confidence):
        parser.error("--num-unpaired goes with --chance or --by-confidence")
    if args.out and not (args.chance or args.compare or args.by_confidence):
        parser.error("--out goes with --chance, --compare or --by-confidence")
    if args.record and not args.labels:
        parser.error("--record writes the scores of label folders given as arguments")
    if args.shares != SHARES and not args.by_confidence:
        parser.error("--shares goes with --by-confidence")
    if args.by_confidence:
        try:
            by_confidence(args.by_confidence, args.shares, args.num_unpaired, args.out)
        except (OSError, ValueError) as err:
            sys.exit(f"error: {err}")
    if args.compare:
        try:
            compare(*args.compare, args.out)
        except (OSError, ValueError) as err:
            sys.exit(f"error: {err}")
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


def chance(demos: str, num_unpaired: int | None, out: str | None) -> dict[str, Any]:
    """Each unpaired trajectory of ``demos`` labelled with the next one's true mission, scored (module docstring)."""
    unpaired = load_demos(demos)["unpaired"]
    if num_unpaired is not None:
        unpaired = unpaired.select(range(min(num_unpaired, len(unpaired))))
    missions = true_missions(unpaired)
    others = missions[1:] + missions[:1]
    scores = scored_labels(unpaired, others, missions)
    record = {"speaker": "none: each trajectory labelled with the next one's true mission", "demos": demos,
              "num_labelled": len(missions), "label_accuracy": scores, **provenance()}
    print(json.dumps(record))
    if out:
        write_json(out, record)
    return record


def by_confidence(labels: str, shares: list[float], num_unpaired: int | None, out: str | None) -> dict[str, Any]:
    """The accuracy of the share of ``labels`` (their first ``num_unpaired``) that their labelling scored highest,
    for each of ``shares`` (module docstring)."""
    import statistics

    from msvae_hf.cli.keep_confident import load_labelling
    from msvae_hf.extensions.pragmatics import label_scores

    if bad := [share for share in shares if not 0.0 < share <= 1.0]:
        raise ValueError(f"--shares must lie in (0, 1], got {bad[0]}")
    check_num_unpaired(num_unpaired)
    if out and (why := unwritable_folder(Path(out).parent)):
        raise ValueError(why)
    started = time.perf_counter()
    speaker, rescorer, lam = load_labelling(labels)
    labelled = load_pseudo_labels(labels)
    if num_unpaired is not None:
        labelled = labelled.select(range(min(num_unpaired, len(labelled))))
    scores = label_scores(speaker, labelled, rescorer, lam).tolist()
    steps = [len(actions) for actions in labelled["actions"]]
    by_share = {}
    for share in sorted(shares):
        top = confident_rows(scores, share)
        by_share[f"{share:g}"] = {**label_accuracy(labelled.select(top)), "threshold": min(scores[i] for i in top),
                                  "mean_steps": statistics.fmean(steps[i] for i in top)}
    record = {"labels": labels, "sha256": pseudo_labels_record(labels).get("sha256"), "lam": lam,
              "labelled": len(labelled), "by_share": by_share, "wall_time_s": time.perf_counter() - started,
              **provenance()}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_json(out, record)
    print(json.dumps(record))
    return record


def compare(a: str, b: str, out: str | None) -> dict[str, Any]:
    """Two labellings of the same trajectories, paired by trajectory (module docstring)."""
    import gymnasium as gym
    from scipy.stats import binomtest

    if out and (why := unwritable_folder(Path(out).parent)):
        raise ValueError(why)
    first, second = load_pseudo_labels(a), load_pseudo_labels(b)
    if list(first["seed"]) != list(second["seed"]) or list(first["level"]) != list(second["level"]):
        raise ValueError(f"{a} and {b} label different trajectories (their levels and seeds differ): compare "
                         "labellings of the same unpaired trajectories")
    envs: dict[str, gym.Env] = {}
    counts = {test: {"a_only": 0, "b_only": 0} for test in ("demonstrated", "carried_out")}
    differ = 0
    for x, y in zip(first, second, strict=True):
        if x["instruction"] == y["instruction"]:
            continue
        differ += 1
        env = envs.setdefault(x["level"], gym.make(x["level"]))
        in_a, in_b = (replay_label(env, x["seed"], x["actions"], row["instruction"]) for row in (x, y))
        for test, count in counts.items():
            count["a_only"] += in_a[test] and not in_b[test]
            count["b_only"] += in_b[test] and not in_a[test]
    for env in envs.values():
        env.close()
    for test in counts.values():
        discordant = test["a_only"] + test["b_only"]
        test["p_mcnemar_exact"] = binomtest(test["a_only"], discordant).pvalue if discordant else 1.0
    record = {"a": a, "b": b, "sha256": {"a": pseudo_labels_record(a).get("sha256"),
                                         "b": pseudo_labels_record(b).get("sha256")},
              "labelled": len(first), "labels_differ": differ, **counts, **provenance()}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_json(out, record)
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
