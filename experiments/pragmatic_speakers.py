#!/usr/bin/env python
"""BLEU of follower-rescored speakers: lam chosen on validation pairs, reported on test pairs.

    python experiments/pragmatic_speakers.py --demos data/bosslocal_100k \\
        --system "paired only#0=runs/bosslocal/msvae_paired/best_speaker,runs/bosslocal/msvae_paired/best" \\
        --system "full#0=runs/bosslocal/msvae_gamma1_alpha10/best_speaker,runs/bosslocal/msvae_gamma1_alpha10/best" \\
        --out results/pragmatic_speakers.json

Each ``--system NAME=SPEAKER_DIR[,FOLLOWER_DIR]`` is a saved speaker (or MS-VAE) and the follower (or MS-VAE)
that rescores its candidates (default: the speaker itself). ``NAME#k`` marks seed k of method NAME. For every
system, ``--candidates`` beam-search instructions per trajectory are scored by both models
(`msvae_hf.extensions.pragmatics`); lam (speaker weight) is the value of ``--lams`` with the best BLEU on the
``--valid-split`` pairs, and the test BLEU of that lam is reported beside greedy decoding (the number training
reports) and lam = 1 (beam search alone). Over seeds: mean, sd and Student's t-test of each method against
the first; per seed, sacrebleu's paired bootstrap of rescored against greedy on the same test pairs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from named_models import check_follows, check_out, check_speaks, load_checked, write_report

from msvae_hf.data.demos import load_demos
from msvae_hf.evaluation.evaluate import describe_dataset
from msvae_hf.evaluation.metrics import bleu, compare_bleu
from msvae_hf.extensions.pragmatics import LAMS, NUM_CANDIDATES, score_candidates
from msvae_hf.utils.runtime import add_threads_flag, set_threads

DEFAULT_LAMS = ",".join(f"{lam:g}" for lam in LAMS)


def parse_system(text: str) -> tuple[str, str, str]:
    name, sep, paths = text.rpartition("=")
    if not sep or not name or not paths:
        raise argparse.ArgumentTypeError(f"--system takes NAME=SPEAKER_DIR[,FOLLOWER_DIR], got {text!r}")
    speaker, _, follower = paths.partition(",")
    return name, speaker, follower or speaker


def seed_table(systems: dict[str, dict], metric: str) -> dict[str, dict]:
    """Mean, sd, n of ``metric`` per method (name before '#'), t-test 'greater than' the first method."""
    from scipy.stats import ttest_ind

    groups: dict[str, list[float]] = defaultdict(list)
    for name, row in systems.items():
        groups[name.partition("#")[0]].append(row[metric])
    reference = next(iter(groups))
    out = {}
    for method, xs in groups.items():
        entry: dict = {"values": xs, "n": len(xs), "mean": statistics.fmean(xs),
                       "sd": statistics.stdev(xs) if len(xs) > 1 else None}
        ref = groups[reference]
        if method != reference and len(xs) > 1 and len(ref) > 1:
            entry["p_greater_than_first"] = float(ttest_ind(xs, ref, alternative="greater").pvalue)
        out[method] = entry
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--system", type=parse_system, action="append", required=True,
                        metavar="NAME=SPEAKER_DIR[,FOLLOWER_DIR]")
    parser.add_argument("--candidates", type=int, default=NUM_CANDIDATES, help="beam size = candidates per trajectory")
    parser.add_argument("--lams", default=DEFAULT_LAMS, help="comma-separated speaker weights to choose from")
    parser.add_argument("--valid-split", default="valid")
    parser.add_argument("--test-split", default="test")
    parser.add_argument("--examples", type=int, default=500, help="pairs of each split")
    add_threads_flag(parser)
    parser.add_argument("--out", default=None, help="write the results here (JSON)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    check_out(args.out)
    set_threads(args.threads)
    lams = [float(x) for x in args.lams.split(",")]
    names = [name for name, _, _ in args.system]
    if len(set(names)) != len(names):
        parser.error(f"system names must differ, got {names}")
    demos = load_demos(args.demos)
    for split in (args.valid_split, args.test_split):
        if split not in demos:
            parser.error(f"{args.demos} has no {split!r} split (it has {sorted(demos)})")
    pairs = {split: demos[split].select(range(min(args.examples, len(demos[split]))))
             for split in (args.valid_split, args.test_split)}
    refs = {split: list(ds["instruction"]) for split, ds in pairs.items()}

    models = {}  # every model checked before any work; an MS-VAE that speaks and follows is loaded once
    for name, speaker_path, follower_path in args.system:
        if follower_path == speaker_path:
            speaker = follower = load_checked(speaker_path, lambda model: (check_speaks(model), check_follows(model)))
        else:
            speaker, follower = load_checked(speaker_path, check_speaks), load_checked(follower_path, check_follows)
        models[name] = speaker, follower
    systems: dict[str, dict] = {}
    for name, speaker_path, follower_path in args.system:
        speaker, follower = models[name]
        curves, chosen = {}, {}
        for split, ds in pairs.items():
            cands = score_candidates(speaker, follower, ds, num_candidates=args.candidates)
            chosen[split] = {lam: cands.choose(lam) for lam in lams}
            curves[split] = {lam: bleu(texts, refs[split]) for lam, texts in chosen[split].items()}
        best_lam = max(lams, key=lambda lam: (curves[args.valid_split][lam], lam))  # ties: more speaker
        greedy = describe_dataset(speaker, pairs[args.test_split])
        test_refs = refs[args.test_split]
        rescored = chosen[args.test_split][best_lam]
        paired = compare_bleu({"greedy": greedy, "rescored": rescored}, test_refs)
        systems[name] = {
            "speaker": speaker_path, "follower": follower_path, "lam": best_lam,
            "test_bleu_greedy": bleu(greedy, test_refs), "test_bleu_beam": curves[args.test_split][1.0]
            if 1.0 in lams else None,
            "test_bleu_rescored": curves[args.test_split][best_lam],
            "p_rescored_vs_greedy": paired["rescored"]["p_value"],
            "valid_bleu_by_lam": curves[args.valid_split], "test_bleu_by_lam": curves[args.test_split],
            "examples": [{"reference": r, "greedy": g, "rescored": s}
                         for r, g, s in list(zip(test_refs, greedy, rescored))[:5]],
        }
        row = systems[name]
        print(f"{name}: lam {best_lam}, test BLEU greedy {row['test_bleu_greedy']:.2f}, "
              f"rescored {row['test_bleu_rescored']:.2f}", flush=True)

    over_seeds = {metric: seed_table(systems, metric)
                  for metric in ("test_bleu_greedy", "test_bleu_beam", "test_bleu_rescored")
                  if all(row[metric] is not None for row in systems.values())}
    result = {"demos": args.demos, "candidates": args.candidates, "lams": lams, "examples": args.examples,
              "valid_split": args.valid_split, "test_split": args.test_split,
              "systems": systems, "over_seeds": over_seeds}
    write_report(result, args.out, started)
    print("\n| system | lam (valid) | test BLEU greedy | test BLEU rescored | p (rescored vs greedy) |")
    print("| --- | --- | --- | --- | --- |")
    for name, row in systems.items():
        print(f"| {name} | {row['lam']} | {row['test_bleu_greedy']:.2f} | {row['test_bleu_rescored']:.2f} "
              f"| {row['p_rescored_vs_greedy']:.3f} |")
    print("\n| method | " + " | ".join(over_seeds) + " |")
    print("| --- |" + " --- |" * len(over_seeds))
    for method in next(iter(over_seeds.values())):
        cells = []
        for metric in over_seeds:
            e = over_seeds[metric][method]
            cell = f"{e['mean']:.2f}" + (f" +- {e['sd']:.2f}" if e["sd"] is not None else "") + f" (n = {e['n']})"
            if "p_greater_than_first" in e:
                cell += f", p = {e['p_greater_than_first']:.3g}"
            cells.append(cell)
        print(f"| {method} | " + " | ".join(cells) + " |")
    return result


if __name__ == "__main__":
    main()
