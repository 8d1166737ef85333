#!/usr/bin/env python
"""The speakers' test descriptions scored by the BLEU-4 variants a 2022 implementation could have used, to see
which (if any) lands on the paper's scale (its BLEU column: 4.8-11.7 where ours, sacrebleu's corpus BLEU, reads
20-40 for the same kind of speaker).

    python experiments/bleu_scales.py --demos data/bosslocal_100k \\
        --speaker "speaker (baseline)=runs/bosslocal/speaker/best" "MS-VAE + V=runs/bosslocal/msvae_v/best" \\
        --out results/bosslocal/bleu_scales.json
    python experiments/bleu_scales.py --rescore results/bosslocal/bleu_scales.json   # scores again, no model

Each speaker describes every test trajectory (greedy, as the tables' BLEU; with ``--sample`` also by sampling
each word, as a decoder that draws its words would); the descriptions are kept in the JSON, so the scores can be
computed again without the models. Scorers (all sacrebleu, 13a tokenisation): ``corpus`` (the tables' headline:
corpus BLEU, exponential smoothing), ``corpus_no_smoothing``, ``sentence_mean_exp`` (each pair's BLEU, then the
mean: sacrebleu.sentence_bleu), ``sentence_mean_floor`` (the same with zero n-gram counts floored at 0.1, as
NLTK's SmoothingFunction().method1), and ``sentence_mean_no_smoothing`` (NLTK's sentence_bleu default: a pair
without a matching 4-gram scores 0; pairs of fewer than four words score 0 too), each also on the references and
predictions lower-cased (``_lowercase``; the bot's instructions are lower-case already, so these should not
move).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU

SCORERS = {
    "corpus": dict(level="corpus", smooth_method="exp"),
    "corpus_no_smoothing": dict(level="corpus", smooth_method="none"),
    "sentence_mean_exp": dict(level="sentence", smooth_method="exp", effective_order=True),
    "sentence_mean_floor": dict(level="sentence", smooth_method="floor", smooth_value=0.1),
    "sentence_mean_no_smoothing": dict(level="sentence", smooth_method="none"),
}


def score(predictions: list[str], references: list[str], level: str, lowercase: bool = False, **kwargs) -> float:
    """BLEU-4 (0-100) of ``predictions`` against one reference each, corpus-level or the mean over pairs."""
    metric = BLEU(lowercase=lowercase, **kwargs)
    if level == "corpus":
        return float(metric.corpus_score(predictions, [references]).score)
    return statistics.fmean(metric.sentence_score(p, [r]).score for p, r in zip(predictions, references))


def scores(predictions: list[str], references: list[str]) -> dict[str, float]:
    """Every scorer of :data:`SCORERS`, as it is and lower-cased."""
    out = {}
    for name, spec in SCORERS.items():
        out[name] = score(predictions, references, **spec)
        out[f"{name}_lowercase"] = score(predictions, references, lowercase=True, **spec)
    return out


def describe(model: Any, demos: str, **generate_kwargs) -> tuple[list[str], list[str]]:
    """The speaker ``model`` on the test split of ``demos``: (its descriptions, the bot's instructions)."""
    from msvae_hf.data.demos import load_demos
    from msvae_hf.evaluation.evaluate import describe_dataset

    test = load_demos(demos)["test"]
    return describe_dataset(model, test, **generate_kwargs), list(test["instruction"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", help="the demo folder whose test split the speakers describe")
    parser.add_argument("--speaker", nargs="+", default=[], help="NAME=PATH of a saved speaker or MS-VAE")
    parser.add_argument("--sample", action="store_true",
                        help="also describe each trajectory by sampling the words (seeded), as NAME (sampled)")
    parser.add_argument("--out", help="JSON written (descriptions, references, scores)")
    parser.add_argument("--rescore", help="a JSON this script wrote: score its descriptions again, in place")
    args = parser.parse_args()
    if args.rescore:
        data = json.loads(Path(args.rescore).read_text())
        out = Path(args.rescore)
    else:
        if not (args.demos and args.speaker and args.out):
            parser.error("give --demos, --speaker and --out (or --rescore FILE)")
        from named_models import check_out, check_speaks, load_named  # torch only where speakers describe

        check_out(args.out)
        data = {"demos": args.demos, "split": "test", "speakers": {}}
        for name, (path, model) in load_named(args.speaker, check_speaks).items():  # all checked before any work
            predictions, references = describe(model, args.demos)
            data["references"] = references
            data["speakers"][name] = {"path": path, "decoding": "greedy", "predictions": predictions}
            if args.sample:
                import torch

                torch.manual_seed(0)
                predictions, _ = describe(model, args.demos, do_sample=True)
                data["speakers"][f"{name} (sampled)"] = {"path": path, "decoding": "sampled, torch seed 0",
                                                         "predictions": predictions}
        out = Path(args.out)
    for entry in data["speakers"].values():
        entry["scores"] = scores(entry["predictions"], data["references"])
    data["scorers"] = {name: spec for name, spec in SCORERS.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    for name, entry in data["speakers"].items():
        print(name, {k: round(v, 2) for k, v in entry["scores"].items() if not k.endswith("_lowercase")})


if __name__ == "__main__":
    main()
