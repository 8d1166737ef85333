"""Benchmark of the demo pipeline: bot demos/s with 1 and 2 processes, bytes per demo on disk, and the
resident memory of iterating a large memory-mapped dataset with a DataLoader.

    python benchmarks/demo_generation.py                                  # 20,000 demos timed, 1M rows iterated
    python benchmarks/demo_generation.py --rate-demos 200 --num-demos 2000 --big-dir /tmp/big --out /tmp/x.json
    python benchmarks/demo_generation.py --level BossLocal --rate-demos 10000 --repeats 3 ...  # 3 rounds

Each timing run generates --rate-demos demos of the `unpaired` split (20,000 by default, so that starting the
processes does not decide the 2-process ratio). Bytes per demo are those of the stored format: every file
`save_to_disk` writes for the 1-process demos (what `du -sb` counts), divided by their number, and the size of
a million such demos. The large dataset is synthesized: the timed demos repeated (`concatenate_datasets`) up
to --num-demos rows (default 1M, the paper's unpaired pool, App. D), saved once to --big-dir and reused. Its
rows are real rows, which is what the memory check needs; generating 1M demos takes hours. Iteration runs in
a fresh process so its RSS is the loader's alone; RSS is split into anonymous memory (Python objects,
batches) and file-backed pages of the memory map (page cache the kernel may reclaim). Each timing run also
records the CPU seconds of every process that generated (``cpu_seconds_1proc``, ``cpu_seconds_2proc``) and how
busy the two processes kept both cores (``cpu_busy_2proc``: CPU seconds / (2 x wall)): whether the 2-process
ratio is lost to work added by the second process, to idle time, or to each core running slower.

``--repeats R`` times R rounds, the order alternating (1 then 2 processes, then 2 then 1, ...), so that a
machine speeding up or slowing down during the benchmark falls on both counts: each round gives one ratio
(``speedup_per_round``), and the speed-up reported is their median; rates and CPU seconds are medians over
the rounds. Writes --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import psutil
from datasets import concatenate_datasets, load_from_disk
from report import write_report

from msvae_hf.data.demos import OBSERVATIONS_FEATURE, generate_split
from msvae_hf.envs.levels import resolve_level

ROOT = Path(__file__).resolve().parents[1]


def rss_parts() -> dict[str, float]:
    """Resident memory of this process in MB: total, anonymous, file-backed (Linux /proc; total elsewhere)."""
    out = {"rss_mb": psutil.Process().memory_info().rss / 2**20}
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                out[f"{key[3:].lower()}_mb"] = int(value.split()[0]) / 1024
    return out


def iterate(path: str, batch_size: int, max_seconds: float) -> dict[str, float]:
    """One shuffled epoch (or `max_seconds`) of a DataLoader over the `unpaired` split; RSS sampled."""
    import torch
    from torch.utils.data import DataLoader

    from msvae_hf.data.collator import DemoCollator, for_loader

    ds = load_from_disk(path)["unpaired"]
    loader_ds, collate = for_loader(ds), DemoCollator(tokenizer=None)  # decodes the frames, as training does
    torch.manual_seed(0)
    loader = DataLoader(loader_ds, batch_size=batch_size, shuffle=True, collate_fn=collate)
    start, rows, peak = time.perf_counter(), 0, rss_parts()
    first = dict(peak)
    for i, batch in enumerate(loader):
        rows += len(batch["actions"])
        if i % 20 == 0:
            now = rss_parts()
            peak = {k: max(v, now.get(k, 0.0)) for k, v in peak.items()}
            if time.perf_counter() - start > max_seconds:
                break
    seconds = time.perf_counter() - start
    return {"rows_in_dataset": len(ds), "rows_iterated": rows, "seconds": seconds, "rows_per_s": rows / seconds,
            "batch_size": batch_size, "collator": collate.__class__.__name__,
            **{f"start_{k}": v for k, v in first.items()}, **{f"peak_{k}": v for k, v in peak.items()}}


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its finished child processes so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_generation(level: str, n: int, num_proc: int, cache_dir: str) -> tuple[datasets.Dataset, float, float]:
    """(the demos, wall seconds, CPU seconds of every process that made them)."""
    start, cpu = time.perf_counter(), cpu_seconds()
    ds, dropped = generate_split(level, "unpaired", n, num_proc=num_proc, cache_dir=cache_dir)
    return ds, time.perf_counter() - start, cpu_seconds() - cpu


def timed_rounds(level: str, n: int, repeats: int, tmp: str) -> tuple[datasets.Dataset, dict]:
    """(the first demos made, the timings): ``repeats`` rounds of ``n`` demos with 1 and with 2 processes, the
    order alternating round by round; every round must make the same demos."""
    seconds: dict[int, list[float]] = {1: [], 2: []}
    cpu: dict[int, list[float]] = {1: [], 2: []}
    first = None
    for round_ in range(repeats):
        for num_proc in (1, 2) if round_ % 2 == 0 else (2, 1):
            ds, wall, used = timed_generation(level, n, num_proc, f"{tmp}/round{round_}_proc{num_proc}")
            if first is None:
                first = ds
            elif ds["seed"] != first["seed"]:
                raise AssertionError(f"{num_proc} process(es) made other demos than the first timing")
            seconds[num_proc].append(wall)
            cpu[num_proc].append(used)
    ratios = [one / two for one, two in zip(seconds[1], seconds[2])]
    busy = [used / (2 * wall) for used, wall in zip(cpu[2], seconds[2])]
    med = statistics.median
    return first, {
        "repeats": repeats, "seconds_1proc": seconds[1], "seconds_2proc": seconds[2], "speedup_per_round": ratios,
        "demos_per_s_1proc": n / med(seconds[1]), "demos_per_s_2proc": n / med(seconds[2]),
        "speedup_2_vs_1": med(ratios), "cpu_seconds_1proc": med(cpu[1]), "cpu_seconds_2proc": med(cpu[2]),
        "cpu_busy_2proc": med(busy),
    }


def folder_bytes(path: Path) -> int:
    """Bytes of every file below `path` (as `du -sb` counts them)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build_big(base: datasets.Dataset, num_demos: int, path: Path) -> dict:
    """Save `num_demos` rows (base repeated) at `path`, or reuse what is there if it is in the stored format."""
    if path.exists():
        there = load_from_disk(str(path))["unpaired"]
        if len(there) >= num_demos and there.features["observations"] == OBSERVATIONS_FEATURE:
            return {"reused": True, "bytes": folder_bytes(path)}
    start = time.perf_counter()
    parts = [base] * (num_demos // len(base)) + [base.select(range(num_demos % len(base)))]
    datasets.DatasetDict({"unpaired": concatenate_datasets(parts)}).save_to_disk(str(path))
    return {"reused": False, "build_seconds": time.perf_counter() - start, "bytes": folder_bytes(path)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", default="GoToSeqLocal")
    p.add_argument("--rate-demos", type=int, default=20_000,
                   help="demos generated per timing run (enough that process start-up does not decide the ratio)")
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds of timings, 1 and 2 processes in alternating order (median of the ratios)")
    p.add_argument("--num-demos", type=int, default=1_000_000, help="rows of the memory-map check (paper: 1M)")
    p.add_argument("--big-dir", default=str(ROOT / "data" / "bench_big"))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--max-iter-seconds", type=float, default=300.0)
    p.add_argument("--out", default=str(ROOT / "results" / "demo_generation.json"))
    p.add_argument("--iterate-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.iterate_only:
        print(json.dumps(iterate(args.iterate_only, args.batch_size, args.max_iter_seconds)))
        return
    datasets.disable_progress_bars()
    level = resolve_level(args.level)
    result: dict = {"level": level, "rate_demos": args.rate_demos, "cpu_count": os.cpu_count(),
                    "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        one, timings = timed_rounds(level, args.rate_demos, args.repeats, tmp)
        datasets.DatasetDict({"unpaired": one}).save_to_disk(f"{tmp}/saved")
        size = folder_bytes(Path(f"{tmp}/saved"))
        result.update(**timings, observations_feature=str(one.features["observations"]),
                      bytes_per_demo=size / args.rate_demos, gb_per_million_demos=size / args.rate_demos * 1e6 / 1e9,
                      mean_steps=sum(map(len, one["actions"])) / len(one))
        big = build_big(one, args.num_demos, Path(args.big_dir))
        result["big"] = {"path": args.big_dir, "num_demos": args.num_demos, "synthesized_by_repeating": True,
                         "bytes_per_row": big["bytes"] / args.num_demos, **big}
    cmd = [sys.executable, __file__, "--iterate-only", args.big_dir, "--batch-size", str(args.batch_size),
           "--max-iter-seconds", str(args.max_iter_seconds)]
    it = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    result["iteration"] = it
    result["rss_under_2gb"] = it["peak_rss_mb"] < 2048
    result["anon_rss_under_2gb"] = it.get("peak_anon_mb", it["peak_rss_mb"]) < 2048  # excluding mmap pages
    result["load_average_after"] = os.getloadavg()
    write_report(result, args.out)


if __name__ == "__main__":
    main()
