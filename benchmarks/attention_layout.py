"""Attention over the whole padded batch against attention per group of rows of similar length, in one process.

    python benchmarks/attention_layout.py [--demos DIR] [--batch-size 128] [--steps 20] [--warmup 2]
                                          [--tiny] [--out results/attention_layout.json]

Each model (follower, speaker, MS-VAE: App. D sizes unless `--tiny`) trains on ONE real BossLocal batch (as
`benchmarks/train_step.py` loads it), its updates (forward, backward, `training.adam` step) alternating between
the two layouts update by update: `msvae_hf.modules.length_groups(False)` (every attention kernel over the padded
[B, S] batch) and the default (one kernel per group of rows of similar length, `modules.LengthGroups`). Both
layouts see the machine in the same state, so their ratio does not move with its speed the way two separate
runs' do. Per model and layout: the median, fastest and slowest seconds per update (wall clock), the FLOPs of one
forward + backward (`benchmarks/flops.py`) and the fraction of the single-thread GEMM peak (a large matmul,
sampled before the models and after each; the highest); and padded / grouped, the speed-up.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch
from flops import count_flops
from report import write_report
from train_step import TINY, gemm_peak, load_batches

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.modules import length_groups
from msvae_hf.tokenization_msvae import MSVAETokenizer
from msvae_hf.training import adam, provenance, retain_freed_memory

LAYOUTS = {"padded": False, "grouped": True}


def time_layouts(model: torch.nn.Module, batch: dict, steps: int, warmup: int) -> dict[str, Any]:
    """Updates alternating between the layouts: per layout the seconds per update and the FLOPs."""
    model.train()
    optimizer = adam(model.parameters(), 1e-4)
    out: dict[str, Any] = {}
    for name, grouped in LAYOUTS.items():
        with length_groups(grouped):
            out[name] = {"flops_fwd_bwd": count_flops(lambda: model(**batch).loss.backward())["all"]}
    times: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    for i in range(warmup + steps):
        for name, grouped in LAYOUTS.items() if i % 2 == 0 else reversed(LAYOUTS.items()):
            with length_groups(grouped):
                start = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                model(**batch).loss.backward()
                optimizer.step()
                if i >= warmup:
                    times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        t.sort()
        out[name] |= {"seconds_per_update": t[len(t) // 2], "min_s": t[0], "max_s": t[-1]}
        out[name]["achieved_flops_per_s"] = out[name]["flops_fwd_bwd"] / out[name]["seconds_per_update"]
    out["padded_over_grouped"] = out["padded"]["seconds_per_update"] / out["grouped"]["seconds_per_update"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", help="make_demos folder (paired/unpaired splits); generated if absent")
    parser.add_argument("--level", default="BabyAI-BossLocal-v0")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="timed updates per layout")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--gemm-size", type=int, default=2048)
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--out", default="results/attention_layout.json")
    args = parser.parse_args()

    device = torch.device("cpu")  # the length groups are the CPU's layout
    torch.manual_seed(0)
    retain_freed_memory()
    tok = MSVAETokenizer.from_grammar()
    paired, unpaired = load_batches(args, tok)
    extra = {**(TINY if args.tiny else {}), "vocab_size": len(tok)}
    models = {
        "follower": (FollowerModel(FollowerConfig(**extra)), paired),
        "speaker": (SpeakerModel(SpeakerConfig(**extra)), paired),
        "msvae": (MSVAEModel(MSVAEConfig(**extra)), {**paired, **unpaired}),
    }
    peaks = [gemm_peak(args.gemm_size, 10, device)]
    results: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__, "tiny": args.tiny, "level": args.level, "steps": args.steps,
        "batch_paired": int(paired["actions"].shape[0]), "batch_unpaired": int(unpaired["unpaired_actions"].shape[0]),
        "mean_instruction_tokens": float(paired["attention_mask"].sum(1).float().mean()),
        "longest_instruction_tokens": int(paired["attention_mask"].sum(1).max()),
        **provenance(device), "models": {},
    }
    for name, (model, batch) in models.items():
        results["models"][name] = time_layouts(model, batch, args.steps, args.warmup)
        peaks.append(gemm_peak(args.gemm_size, 10, device))
    results["gemm_peak_flops_per_s_samples"] = peaks
    results["gemm_peak_flops_per_s"] = peak = max(peaks)
    for r in results["models"].values():
        for name in LAYOUTS:
            r[name]["fraction_of_gemm_peak"] = r[name]["achieved_flops_per_s"] / peak
    write_report(results, args.out)


if __name__ == "__main__":
    main()
