"""Seconds per update of the follower's variants (``follower_conditioning`` x ``previous_action_input``), as the
baseline follower and inside MS-VAE, on one real batch, timed in interleaved rounds so that a shared machine's
drift falls on every variant alike; the ratio to today's ``head`` + a_{t-1} is the number to read.

    python benchmarks/follower_variants.py [--demos DIR] [--level BabyAI-GoToSeqLocal-v0] [--batch-size 128]
        [--rounds 5] [--steps 4] [--tiny] [--out results/benchmarks/follower_variants.json]

Each round times ``--steps`` Adam updates (after one warm-up update) of every (model, variant), in the same order;
a variant's figure is the median over its rounds of the per-round median. Default (App. D) sizes unless ``--tiny``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from train_step import TINY, load_batches, model_batch

from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel
from msvae_hf.models.configuration_msvae import FOLLOWER_VARIANTS as VARIANTS
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training.update import update
from msvae_hf.utils.runtime import adam, provenance, retain_freed_memory


def build(name: str, variant: str, tok: MSVAETokenizer, tiny: bool) -> torch.nn.Module:
    extra = {**(TINY if tiny else {}), "vocab_size": len(tok), **VARIANTS[variant]}
    torch.manual_seed(0)
    if name == "follower":
        return FollowerModel(FollowerConfig(follower_attention="attention", **extra)).train()
    return MSVAEModel(MSVAEConfig(**extra)).train()


def time_round(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, steps: int) -> float:
    """The median seconds of ``steps`` updates, after one untimed."""
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        update(functools.partial(model, **batch), optimizer)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", help="make_demos folder (paired/unpaired splits); generated if absent")
    parser.add_argument("--level", default="BabyAI-GoToSeqLocal-v0")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--out", default="results/benchmarks/follower_variants.json")
    args = parser.parse_args()
    retain_freed_memory()
    tok = MSVAETokenizer.from_grammar()
    (paired, unpaired), = load_batches(args, tok)
    runs = {(name, variant): build(name, variant, tok, args.tiny)
            for name in ("follower", "msvae") for variant in VARIANTS}
    optimizers = {key: adam(model.parameters(), 1e-4) for key, model in runs.items()}
    seconds: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for _ in range(args.rounds):
        for (name, variant), model in runs.items():
            seconds[name, variant].append(time_round(model, optimizers[name, variant],
                                                     model_batch(name, paired, unpaired), args.steps))
    results: dict[str, Any] = {
        "level": args.level, "batch_paired": int(paired["actions"].shape[0]), "tiny": args.tiny,
        "rounds": args.rounds, "steps": args.steps, "torch_threads": torch.get_num_threads(), **provenance(),
        "models": {},
    }
    for name in ("follower", "msvae"):
        reference = statistics.median(seconds[name, "head_prev"])
        results["models"][name] = {
            variant: {"seconds_per_update": statistics.median(seconds[name, variant]),
                      "ratio_to_head_prev": statistics.median(seconds[name, variant]) / reference,
                      "parameters": sum(p.numel() for p in runs[name, variant].parameters())}
            for variant in VARIANTS}
    print("| model | " + " | ".join(VARIANTS) + " |")
    print("| --- " * (len(VARIANTS) + 1) + "|")
    for name, row in results["models"].items():
        print(f"| {name} | " + " | ".join(f"{v['seconds_per_update']:.3f} s ({v['ratio_to_head_prev']:.2f}x)"
                                         for v in row.values()) + " |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
