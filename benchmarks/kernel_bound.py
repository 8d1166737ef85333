"""How close to the GEMM peak an update could come on its own kernels: each product replayed alone.

    python benchmarks/kernel_bound.py [--demos DIR] [--batch-size 128] [--steps 10] [--warmup 2]
                                      [--repeats 5] [--tiny] [--follower head|default]
                                      [--out results/kernel_bound.json]

For each model (follower, speaker, MS-VAE; App. D sizes unless `--tiny`) on ONE real batch, as
`benchmarks/train_step.py` loads it: one forward + backward is run under a dispatch mode that keeps a copy of
the inputs of every operator that does counted FLOPs (those of `torch.utils.flop_counter`'s registry, with
`benchmarks/flops.py`'s additions: matrix products, convolutions, attention kernels), with their shapes,
strides and arguments. Each distinct call is then replayed alone, `--repeats` times after one warm-up (the
median kept; a call's time includes its own dispatch, a few microseconds), and its time multiplied by how
often the update makes it. The sum is the time the update's kernels need by themselves, with warm caches and
nothing between them: a lower bound on the update's time for these kernels, and so FLOPs / that time / the
peak is a ceiling on the fraction of the GEMM peak the update can reach while it is made of these operators.
Beside it: the update's own time (`train_step.time_updates`, Adam step included) and the time outside the
kernels (the difference). The peaks are sampled as train_step.py does (before the models and after each;
torch.matmul's and oneDNN's). Per model the JSON lists the operators that take the most kernel time, with their
shapes, calls per update and achieved rate.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from flops import op_kind
from report import write_report
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode, flop_registry
from train_step import (
    FOLLOWERS,
    add_fractions,
    gemm_peaks,
    load_batches,
    model_batch,
    peak_summary,
    three_models,
    time_updates,
)

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.utils.runtime import provenance, retain_freed_memory

KINDS = ("convolution", "matmul", "attention", "other")
"""flops.op_kind's kinds; a FLOP-counted operator outside the first three (none in these models) counts as other."""


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with the same sizes and strides (overlapping or with gaps included), on new memory."""
    if t.layout != torch.strided or t.numel() == 0:
        return t.clone()
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    flat = torch.empty(extent, dtype=t.dtype, device=t.device)
    flat.copy_(t.as_strided((extent,), (1,), t.storage_offset()))
    return flat.as_strided(t.shape, t.stride())


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), str(value.dtype))
    return repr(value)


class KernelRecorder(TorchDispatchMode):
    """Keeps one copy of the arguments of each distinct FLOP-counted call (same operator, shapes, strides,
    dtypes and other arguments) and how many times it was made."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[tuple, dict[str, Any]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func.overloadpacket in flop_registry:
            key = (func, repr(tree_map(_describe, (args, kwargs))))
            if key in self.calls:
                self.calls[key]["count"] += 1
            else:
                self.calls[key] = {"func": func, "args": tree_map(_copy_if_tensor, args),
                                   "kwargs": tree_map(_copy_if_tensor, kwargs), "count": 1}
        return func(*args, **kwargs)


def _copy_if_tensor(value: Any) -> Any:
    return _copy(value) if isinstance(value, torch.Tensor) else value


def record_kernels(fn: Callable[[], Any]) -> list[dict[str, Any]]:
    """Run ``fn`` (a forward + backward) and return its distinct FLOP-counted calls (func, args, kwargs, count)."""
    recorder = KernelRecorder()
    with recorder:
        fn()
    return list(recorder.calls.values())


def replay(call: dict[str, Any], repeats: int) -> dict[str, Any]:
    """A recorded call alone: its FLOPs, and the median of ``repeats`` timings after one warm-up."""
    func, args, kwargs = call["func"], call["args"], call["kwargs"]
    with FlopCounterMode(display=False) as counter:
        func(*args, **kwargs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func(*args, **kwargs)
        times.append(time.perf_counter() - start)
    times.sort()
    shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
    return {"op": str(func), "kind": op_kind(str(func)), "shapes": shapes, "calls_per_update": call["count"],
            "flops": counter.get_total_flops() * call["count"], "seconds": times[len(times) // 2] * call["count"]}


def kernel_bound(model: torch.nn.Module, batch: dict, repeats: int, top: int = 12) -> dict[str, Any]:
    """The update's FLOP-counted kernels replayed alone: their seconds and FLOPs by kind and in all, and the
    ``top`` distinct calls by time."""
    model.train()
    calls = record_kernels(lambda: model(**batch).loss.backward())
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        timed = [replay(c, repeats) for c in calls]
    del calls
    by_kind = {kind: {"seconds": sum(t["seconds"] for t in timed if t["kind"] == kind),
                      "flops": sum(t["flops"] for t in timed if t["kind"] == kind)} for kind in KINDS}
    ranked = sorted(timed, key=lambda t: -t["seconds"])[:top]
    return {"distinct_calls": len(timed), "calls_per_update": sum(t["calls_per_update"] for t in timed),
            "seconds": sum(t["seconds"] for t in timed), "flops": sum(t["flops"] for t in timed),
            "by_kind": by_kind,
            "top_calls": [{**t, "flops_per_s": t["flops"] / t["seconds"] if t["seconds"] else None} for t in ranked]}


def add_kernel_fractions(r: dict[str, Any], peaks: dict[str, Any]) -> None:
    """Fractions of the best GEMM peak: of the kernels alone (the ceiling), of each kind, and of each top call;
    and the update's seconds outside the kernels."""
    best = peaks["best_gemm_peak_flops_per_s"]
    k = r["kernels"]
    k["ceiling_fraction_of_best_gemm_peak"] = k["flops"] / k["seconds"] / best
    for v in k["by_kind"].values():
        v["fraction_of_best_gemm_peak"] = v["flops"] / v["seconds"] / best if v["seconds"] else None
    for t in k["top_calls"]:
        t["fraction_of_best_gemm_peak"] = t["flops_per_s"] / best if t["flops_per_s"] else None
    r["kernel_share_of_update"] = k["seconds"] / r["update"]["seconds_per_update"]
    r["seconds_outside_kernels"] = r["update"]["seconds_per_update"] - k["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", help="make_demos folder (paired/unpaired splits); generated if absent")
    parser.add_argument("--level", default="BabyAI-BossLocal-v0")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed whole updates per model")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="timings of each distinct kernel call (median)")
    parser.add_argument("--gemm-size", type=int, default=2048)
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--follower", default="head", choices=sorted(FOLLOWERS),
                        help="head: the follower of the records (with a_{t-1}); default: the package's default "
                             "(FiLM on both maps, no a_{t-1}), in the follower and in MS-VAE")
    parser.add_argument("--out", default="results/kernel_bound.json")
    args = parser.parse_args()
    if args.repeats < 1 or args.steps < 1:
        parser.error("--repeats and --steps must be at least 1")

    device = torch.device("cpu")
    torch.manual_seed(0)
    retain_freed_memory()
    tok = MSVAETokenizer.from_grammar()
    (paired, unpaired), = load_batches(args, tok)
    models = {name: (model, model_batch(name, paired, unpaired))
              for name, model in three_models(tok, args.tiny, FOLLOWERS[args.follower]).items()}
    peaks = [gemm_peaks(args.gemm_size, 10, device)]
    results: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__, "tiny": args.tiny, "follower": args.follower, "level": args.level,
        "repeats": args.repeats,
        "batch_paired": int(paired["actions"].shape[0]), "batch_unpaired": int(unpaired["unpaired_actions"].shape[0]),
        **provenance(device), "models": {},
    }
    for name, (model, batch) in models.items():
        update = time_updates(model, batch, args.steps, args.warmup, device)
        results["models"][name] = {"update": update, "kernels": kernel_bound(model, batch, args.repeats)}
        peaks.append(gemm_peaks(args.gemm_size, 10, device))
    results |= peak_summary(peaks)
    for r in results["models"].values():
        add_fractions(r["update"], results)
        add_kernel_fractions(r, results)
    write_report(results, args.out)


if __name__ == "__main__":
    main()
