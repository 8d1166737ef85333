"""MS-VAE updates per second on one GPU: today's eager update against the captured one (msvae_hf.training.graphed), one
run alone and R runs side by side, with a profile of each (kernels, device-busy time, peak memory).

    python benchmarks/gpu_update.py --demos DIR [--runs 1 16 64] [--updates 100] [--eager-updates 20]
                                    [--device cuda] [--tiny] [--out results/benchmarks/gpu_update.json]

Layouts, each timed in this one call on the same device, App. D sizes, batches of 128 paired + 128 unpaired
BossLocal episodes (run r, update i reads update i + 7r of one seeded stream of batches, drawn as training draws
them: msvae_hf.data.prefetch, padded to buckets of 32 steps and 16 tokens, assembled before the clock starts):
- ``eager``: ``MSVAEModel`` on the default layout, Adam (foreach): the update ``scripts/train.py`` runs today.
- ``static_eager``: one run's ``CapturedUpdate`` launched eagerly (the static layout without a graph).
- ``captured_every_frame``: one captured run whose observation encoder runs on every padded frame.
- ``captured`` R = 1, 16, 64: R runs, each a ``CapturedUpdate`` (its own weights, fused Adam, CUDA stream and
  one graph per bucket), replayed round-robin; updates/s = R x rounds / seconds. Capture time is reported apart.
Each layout's profile (torch.profiler over a few updates) counts the device's kernels per update and their busy
time; ``parity`` compares the static layout's terms with the default layout's on one batch (eval mode, same noise).
On the CPU (``--device cpu --tiny``) the same code runs uncaptured: a smoke test of the script, not a measure.
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import torch
from report import write_report
from train_step import TIMED_FOLLOWER, TINY, synchronize

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf import MSVAEConfig, MSVAEModel
from msvae_hf.data.collator import DemoCollator
from msvae_hf.data.prefetch import UpdateBatches
from msvae_hf.data.sampler import StepSampler
from msvae_hf.evaluation.evaluate import device_name, resolve_device
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training.graphed import FRAME_MULTIPLE, LENGTH_MULTIPLE, TIME_MULTIPLE, CapturedUpdate, captured_adam
from msvae_hf.training.update import update
from msvae_hf.utils.runtime import adam, provenance


def load_batches(args: argparse.Namespace, tok: MSVAETokenizer, count: int) -> list[dict[str, torch.Tensor]]:
    """``count`` update batches (paired + unpaired) of one seeded stream, bucketed and pinned where CUDA is."""
    from datasets import load_from_disk

    demos = load_from_disk(args.demos)
    paired = StepSampler(demos["paired"], args.batch_size, 1, 0, stream=0)
    unpaired = StepSampler(demos["unpaired"], args.batch_size, 1, 0, stream=1)
    updates = UpdateBatches(DemoCollator(tok), paired, unpaired, rank=0, time_multiple=TIME_MULTIPLE,
                             length_multiple=LENGTH_MULTIPLE)
    batches = [updates[i] for i in range(count)]
    if torch.cuda.is_available():
        batches = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
    return batches


def make_model(args: argparse.Namespace, vocab_size: int, seed: int, device: torch.device) -> MSVAEModel:
    torch.manual_seed(seed)
    config = MSVAEConfig(**(TINY if args.tiny else {}), **TIMED_FOLLOWER, vocab_size=vocab_size)
    return MSVAEModel(config).to(device).train()


def profile(step, updates: int, device: torch.device) -> dict[str, Any]:
    """Kernels per update and their busy milliseconds per update, from torch.profiler over ``updates`` updates."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with torch_profile(activities=activities) as prof:
        for i in range(updates):
            step(i)
        synchronize(device)
    kernels, busy_us, by_name = 0, 0.0, {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
            busy_us += event.time_range.elapsed_us()
            name = event.name[:90]
            count, us = by_name.get(name, (0, 0.0))
            by_name[name] = (count + 1, us + event.time_range.elapsed_us())
    top = sorted(by_name.items(), key=lambda item: -item[1][1])[:12]
    return {"kernels_per_update": kernels / updates, "device_busy_ms_per_update": busy_us / 1e3 / updates,
            "top_kernels": [{"name": name, "per_update": count / updates, "ms_per_update": us / 1e3 / updates}
                            for name, (count, us) in top],
            "cpu_ops_per_update": sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU)
            / updates}


def time_eager(args, batches, vocab_size: int, device: torch.device) -> dict[str, Any]:
    model = make_model(args, vocab_size, 0, device)
    optimizer = adam(model.parameters(), 1e-4)
    on_device = [{k: v.to(device) for k, v in b.items()} for b in batches[:8]]

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        update(functools.partial(model, **on_device[i % len(on_device)]), optimizer)

    for i in range(3):
        step(i)
    torch.cuda.reset_peak_memory_stats(device) if device.type == "cuda" else None
    synchronize(device)
    start = time.perf_counter()
    for i in range(args.eager_updates):
        step(i)
    synchronize(device)
    seconds = time.perf_counter() - start
    result = {"updates_per_s": args.eager_updates / seconds, "ms_per_update": 1e3 * seconds / args.eager_updates,
              **profile(step, 3, device)}
    if device.type == "cuda":
        result["peak_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    return result


def time_captured(args, batches, runs: int, vocab_size: int, device: torch.device, capture: bool = True,
                  frame_multiple: int | None = FRAME_MULTIPLE) -> dict[str, Any]:
    """R runs round-robin, each its own CapturedUpdate on its own stream (``capture=False``: the same update
    on the static layout, launched eagerly; ``frame_multiple=None``: the observation encoder on every frame)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    updates = []
    for r in range(runs):
        model = make_model(args, vocab_size, r, device)
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        updates.append(CapturedUpdate(model, captured_adam(model.parameters(), 1e-4), stream=stream,
                                      capture=capture and device.type == "cuda", frame_multiple=frame_multiple))
    n = len(batches)
    start = time.perf_counter()
    for i in range(n):  # capture every bucket the batches hold, once per run
        for r, run in enumerate(updates):
            run(batches[(i + 7 * r) % n])
    synchronize(device)
    capture_s = time.perf_counter() - start
    graphs = sum(len(u._graphs) for u in updates)

    def round_(i: int) -> None:
        for r, run in enumerate(updates):
            run(batches[(i + 7 * r) % n])

    rounds = max(1, args.updates // runs) if runs > 1 else args.updates
    synchronize(device)
    start = time.perf_counter()
    for i in range(rounds):
        round_(i)
    synchronize(device)
    seconds = time.perf_counter() - start
    for run in updates:
        run.check()
    result = {"runs": runs, "captured": capture, "rounds": rounds, "updates_per_s": runs * rounds / seconds,
              "ms_per_round": 1e3 * seconds / rounds, "capture_s": capture_s, "graphs": graphs,
              "buckets": sorted({tuple(b["observations"].shape[:2]) + (b["input_ids"].shape[1],) for b in batches})}
    prof = profile(round_, 2, device)
    result.update({k.replace("per_update", "per_round"): v for k, v in prof.items()})
    result["device_busy_ms_per_run_update"] = prof["device_busy_ms_per_update"] / runs
    if device.type == "cuda":
        result["peak_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
        result["gb_per_run"] = (torch.cuda.memory_allocated(device) - before) / 1e9 / runs
    return result


def parity(args, batches, vocab_size: int, device: torch.device) -> dict[str, float]:
    """max |static - default| of each loss term on one batch, eval mode, the same noise (fp32)."""
    model = make_model(args, vocab_size, 0, device).eval()
    batch = {k: v.to(device) for k, v in batches[0].items()}
    out = {}
    for static in (False, True):
        torch.manual_seed(0)
        with torch.no_grad(), model.using_backend("static" if static else "default"):
            o = model(**batch)
        out[static] = {k: v for k, v in o.items() if torch.is_tensor(v) and v.dim() == 0}
    return {k: float((out[True][k] - v).abs()) for k, v in out[False].items()}


def _guarded(measure) -> dict[str, Any]:
    """``measure()``, or what stopped it (out of memory, a capture that failed) as one line."""
    try:
        return measure()
    except Exception as err:  # noqa: BLE001 (reported, and the next layout is measured)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return {"failed": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True, help="a demo folder (load_from_disk): paired and unpaired splits")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=32, help="distinct update batches cycled through")
    parser.add_argument("--updates", type=int, default=100, help="updates in all per captured layout")
    parser.add_argument("--eager-updates", type=int, default=20)
    parser.add_argument("--tf32", action="store_true", help="TF32 matrix products (default: fp32)")
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--device", default="cuda", help="cpu, cuda, auto (cuda if visible)")
    parser.add_argument("--out", default="results/benchmarks/gpu_update.json")
    args = parser.parse_args()
    if min(args.runs) < 1:
        parser.error("--runs must be positive")
    device = resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    tok = MSVAETokenizer.from_grammar()
    batches = load_batches(args, tok, args.batches)
    results: dict[str, Any] = {
        "device": str(device), "device_name": device_name(device), "torch": torch.__version__, "tiny": args.tiny,
        "batch_paired": args.batch_size, "batch_unpaired": args.batch_size, "tf32": args.tf32,
        **provenance(device), "parity": parity(args, batches, len(tok), device),
        "eager": time_eager(args, batches, len(tok), device),
    }
    write_report(results, args.out, echo=False)  # what is measured so far survives a later failure
    results["static_eager"] = _guarded(lambda: time_captured(args, batches, 1, len(tok), device, capture=False))
    results["captured_every_frame"] = _guarded(
        lambda: time_captured(args, batches, 1, len(tok), device, frame_multiple=None))
    results["captured"] = []
    for runs in args.runs:
        results["captured"].append({"runs": runs, **_guarded(
            lambda: time_captured(args, batches, runs, len(tok), device))})  # noqa: B023 (called at once)
        write_report(results, args.out, echo=False)
    write_report(results, args.out)


if __name__ == "__main__":
    main()
