#!/usr/bin/env python
"""Compare speakers by BLEU-4 on the same held-out pairs, with paired bootstrap confidence intervals.

    python experiments/compare_speakers.py --demos data/bosslocal_100k \\
        --speaker "speaker=runs/bosslocal/speaker/best" \\
        --speaker "MS-VAE paired only=runs/bosslocal/msvae_paired/best_speaker" \\
        --speaker "MS-VAE full=runs/bosslocal/msvae/best" --out results/bosslocal_speakers.json

Each ``--speaker NAME=DIR`` is a saved speaker or MS-VAE (a folder or Hub id); the first is the baseline. All
describe the first ``--examples`` trajectories of ``--split`` greedily (as training's final evaluation does),
then sacrebleu's paired bootstrap resampling (1000 resamples, fixed seed) gives each system's corpus BLEU,
its 95% interval and the p-value of its difference to the baseline; next to BLEU, how often each gets the
instruction's sequence of actions and of objects exactly right (`instruction_parts_match`). Writes a JSON
with the scores and the first five predictions of each system; prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

from named_models import check_out, check_speaks, load_named, write_report

from msvae_hf.data.demos import load_demos
from msvae_hf.evaluation.evaluate import describe_dataset
from msvae_hf.evaluation.metrics import compare_bleu, instruction_parts_match


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True, help="a DatasetDict from scripts/make_demos.py")
    parser.add_argument("--speaker", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--split", default="test")
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--out", default=None, help="write the comparison here (JSON)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    check_out(args.out)
    demos = load_demos(args.demos)
    if args.split not in demos:
        parser.error(f"{args.demos} has no {args.split!r} split (it has {sorted(demos)})")
    speakers = load_named(args.speaker, check_speaks)  # every speaker checked before any describes
    names = list(speakers)
    pairs = demos[args.split].select(range(min(args.examples, len(demos[args.split]))))
    references = list(pairs["instruction"])
    predictions = {name: describe_dataset(model, pairs) for name, (_, model) in speakers.items()}
    scores = compare_bleu(predictions, references, num_samples=args.samples)
    result = {
        "demos": args.demos, "split": args.split, "examples": len(pairs), "bootstrap_samples": args.samples,
        "speakers": {name: {"path": path, **scores[name],
                            "parts_match": instruction_parts_match(predictions[name], references),
                            "examples": predictions[name][:5]}
                     for name, (path, _) in speakers.items()},
        "references": references[:5],
    }
    write_report(result, args.out, started)
    print(f"| speaker | BLEU-4 ({len(pairs)} {args.split} pairs) | 95% CI | p vs {names[0]} "
          "| action sequence right | object sequence right |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        s, parts = scores[name], result["speakers"][name]["parts_match"]
        p = "-" if s["p_value"] is None else f"{s['p_value']:.3f}"
        print(f"| {name} | {s['bleu']:.2f} | +-{s['ci']:.2f} | {p} | {parts['actions']:.3f} | {parts['objects']:.3f} |")
    return result


if __name__ == "__main__":
    main()
