"""MS-VAE updates per second of R runs: stacked in one process, against one process per run.

    python benchmarks/stacked_step.py [--demos DIR] [--runs 1 4 8 16] [--processes 9] [--batch-size 128]
                                      [--steps 10] [--warmup 3] [--device cuda] [--tiny]
                                      [--out results/benchmarks/stacked_step.json]

Layouts, each timed in this one call on the same device:
- ``processes``: `--processes` processes side by side, each training one MS-VAE (`MSVAEModel`, its own Adam) on
  its own batches, as `experiments/gpu_grid.sh` runs a grid; updates/s summed over the processes.
- ``stacked``: one process training R runs as `msvae_hf.stacked.StackedMSVAE` (one Adam over the stacked
  parameters), for each R of `--runs`; updates/s = R / seconds per stacked update.

Every run gets its own `--batch-size` paired + as many unpaired episodes (run r reads rows from r * batch
size on), from `--demos` or generated here. An update is forward, backward and Adam step, and ends with a
device synchronisation. FLOPs per update are counted with torch.utils.flop_counter (benchmarks/flops.py:
matmuls, convolutions, attention) and set against a large `torch.matmul` timed in the same call.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import torch
import torch.multiprocessing as mp
from flops import count_flops
from report import write_report
from train_step import TINY, as_unpaired, gemm_peak, synchronize

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf import MSVAEConfig, MSVAEModel
from msvae_hf.data.collator import DemoCollator, for_loader
from msvae_hf.evaluation import device_name, resolve_device
from msvae_hf.runtime import adam, provenance, retain_freed_memory
from msvae_hf.stacked import StackedMSVAE, stack_batches
from msvae_hf.tokenization_msvae import MSVAETokenizer


def run_batches(args: argparse.Namespace, tok: MSVAETokenizer, runs: int) -> list[dict[str, torch.Tensor]]:
    """One paired + unpaired batch per run, each from its own rows."""
    from msvae_hf.data.demos import generate_split, load_demos

    need = runs * args.batch_size
    with tempfile.TemporaryDirectory() as cache:
        if args.demos:
            demos = load_demos(args.demos)
            paired, unpaired = demos["paired"], demos["unpaired"]
        else:
            paired = generate_split(args.level, "paired", need, cache_dir=cache)[0].flatten_indices()
            unpaired = generate_split(args.level, "unpaired", need, cache_dir=cache)[0].flatten_indices()
        if len(paired) < need or len(unpaired) < need:
            raise SystemExit(f"{runs} runs of batch {args.batch_size} need {need} paired and unpaired episodes, "
                             f"the demos have {len(paired)} and {len(unpaired)}")
        collate = DemoCollator(tok)
        batches = []
        for r in range(runs):
            rows = range(r * args.batch_size, (r + 1) * args.batch_size)
            p = collate(list(for_loader(paired.select(rows))))
            u = collate([{k: v for k, v in row.items() if k != "instruction"}
                         for row in for_loader(unpaired.select(rows))])
            batches.append({**p, **as_unpaired(u)})
    return batches


def make_model(args: argparse.Namespace, vocab_size: int, seed: int) -> MSVAEModel:
    torch.manual_seed(seed)
    return MSVAEModel(MSVAEConfig(**(TINY if args.tiny else {}), vocab_size=vocab_size))


def time_steps(step, steps: int, warmup: int, device: torch.device) -> list[float]:
    for _ in range(warmup):
        step()
    synchronize(device)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return sorted(times)


def lone_process(rank: int, args: argparse.Namespace, batch: dict, vocab_size: int, barrier, results) -> None:
    """One run alone, timed between two barriers shared with the other processes."""
    torch.set_num_threads(args.threads_per_process)
    retain_freed_memory()
    device = resolve_device(args.device)
    model = make_model(args, vocab_size, rank).to(device).train()
    batch = {k: v.to(device) for k, v in batch.items()}
    optimizer = adam(model.parameters(), 1e-4)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    synchronize(device)
    barrier.wait()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize(device)
    results[rank] = time.perf_counter() - start
    barrier.wait()


def time_processes(args: argparse.Namespace, batches: list[dict], vocab_size: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(args.processes), ctx.Manager().dict()
    workers = [ctx.Process(target=lone_process, args=(r, args, batches[r], vocab_size, barrier, results))
               for r in range(args.processes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
        if w.exitcode:
            raise SystemExit(f"a timing process failed (exit code {w.exitcode})")
    per_process = [args.steps / results[r] for r in range(args.processes)]
    return {"processes": args.processes, "threads_per_process": args.threads_per_process,
            "updates_per_s_per_run": per_process, "updates_per_s": sum(per_process)}


def time_stacked(args: argparse.Namespace, batches: list[dict], runs: int, vocab_size: int,
                 device: torch.device, peak: float) -> dict[str, Any]:
    stacked = StackedMSVAE([make_model(args, vocab_size, r) for r in range(runs)]).to(device).train()
    batch = {k: v.to(device) for k, v in stack_batches(batches[:runs]).items()}
    generators = [torch.Generator(device=device).manual_seed(r) for r in range(runs)]
    optimizer = adam(stacked.parameters(), 1e-4)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        stacked(batch, stacked.draw_noise(generators, batch)).loss.sum().backward()
        optimizer.step()

    flops = count_flops(lambda: stacked(batch, stacked.draw_noise(generators, batch)).loss.sum().backward())["all"]
    times = time_steps(step, args.steps, args.warmup, device)
    median = times[len(times) // 2]
    return {"runs": runs, "seconds_per_update": median, "min_s": times[0], "max_s": times[-1],
            "updates_per_s": runs / median, "flops_fwd_bwd": flops, "fraction_of_gemm_peak": flops / median / peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", help="make_demos folder (paired/unpaired splits); generated if absent")
    parser.add_argument("--level", default="BabyAI-BossLocal-v0")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--processes", type=int, default=9, help="runs side by side in the process layout")
    parser.add_argument("--threads-per-process", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gemm-size", type=int, default=2048)
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto (cuda if visible)")
    parser.add_argument("--out", default="results/stacked_step.json")
    args = parser.parse_args()
    if min(args.runs) < 1 or args.processes < 1:
        parser.error("--runs and --processes must be positive")

    retain_freed_memory()
    device = resolve_device(args.device)
    tok = MSVAETokenizer.from_grammar()
    batches = run_batches(args, tok, max(*args.runs, args.processes))
    peak = gemm_peak(args.gemm_size, 5, device)
    results: dict[str, Any] = {
        "device": str(device), "device_name": device_name(device), "torch": torch.__version__, "tiny": args.tiny,
        "level": args.level, "batch_paired": args.batch_size, "batch_unpaired": args.batch_size,
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "gemm_peak_flops_per_s": peak, **provenance(device),
        "processes": time_processes(args, batches, len(tok)),
        "stacked": [],
    }
    for runs in args.runs:
        try:
            results["stacked"].append(time_stacked(args, batches, runs, len(tok), device, peak))
        except torch.OutOfMemoryError:  # the larger stacks may not fit; the smaller ones are kept
            results["stacked"].append({"runs": runs, "out_of_memory": True})
            torch.cuda.empty_cache()
    base = results["processes"]["updates_per_s"]
    results["stacked_over_processes"] = {str(s["runs"]): s["updates_per_s"] / base
                                         for s in results["stacked"] if "updates_per_s" in s}
    write_report(results, args.out)


if __name__ == "__main__":
    main()
