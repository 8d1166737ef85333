"""Benchmark of the demo pipeline: bot demos/s with 1 and 2 processes, bytes per demo on disk, and the
resident memory of iterating a large memory-mapped dataset with a DataLoader.

    python benchmarks/demo_generation.py                        # quick: 1,000 demos timed, 200,000 rows
    python benchmarks/demo_generation.py --num-demos 1000000    # the paper's N = 1M unpaired pool (App. D)

The large dataset is synthesized: the timed demos repeated (`concatenate_datasets`) up to --num-demos
rows, saved once to --big-dir and reused. Its rows have the real per-row size, which is what the memory
check needs; generating 1M real demos takes ~2 h on one core here. Iteration runs in a fresh process so
its RSS is the loader's alone; RSS is split into anonymous memory (Python objects, batches) and
file-backed pages of the memory map (page cache the kernel may reclaim). Writes results/demo_generation.json.
Measured here: anonymous RSS stays ~0.4 GB at 200k and 1M rows; file-backed RSS grows to the size of the
data touched (one shuffled epoch of 1M rows maps all 3.3 GB), so total RSS passes 2 GB at 1M rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import psutil
from datasets import concatenate_datasets, load_from_disk
from report import write_report

from msvae_hf.data.demos import generate_split
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

    ds = load_from_disk(path)["unpaired"]
    try:  # the project's collator when present; otherwise plain numpy rows
        from msvae_hf.data.collator import DemoCollator, for_loader

        loader_ds, collate = for_loader(ds), DemoCollator(tokenizer=None)
    except ImportError:
        loader_ds, collate = ds.with_format("numpy"), lambda rows: rows
    torch.manual_seed(0)
    loader = DataLoader(loader_ds, batch_size=batch_size, shuffle=True, collate_fn=collate)
    start, rows, peak = time.perf_counter(), 0, rss_parts()
    first = dict(peak)
    for i, batch in enumerate(loader):
        rows += len(batch["actions"]) if isinstance(batch, dict) else len(batch)
        if i % 20 == 0:
            now = rss_parts()
            peak = {k: max(v, now.get(k, 0.0)) for k, v in peak.items()}
            if time.perf_counter() - start > max_seconds:
                break
    seconds = time.perf_counter() - start
    return {"rows_in_dataset": len(ds), "rows_iterated": rows, "seconds": seconds, "rows_per_s": rows / seconds,
            "batch_size": batch_size, "collator": collate.__class__.__name__,
            **{f"start_{k}": v for k, v in first.items()}, **{f"peak_{k}": v for k, v in peak.items()}}


def timed_generation(level: str, n: int, num_proc: int, cache_dir: str) -> tuple[datasets.Dataset, float]:
    start = time.perf_counter()
    ds, dropped = generate_split(level, "unpaired", n, num_proc=num_proc, cache_dir=cache_dir)
    return ds, time.perf_counter() - start


def build_big(base: datasets.Dataset, num_demos: int, path: Path) -> dict:
    """Save `num_demos` rows (base repeated) at `path`, or reuse what is there."""
    if path.exists() and len(load_from_disk(str(path))["unpaired"]) >= num_demos:
        return {"reused": True}
    start = time.perf_counter()
    parts = [base] * (num_demos // len(base)) + [base.select(range(num_demos % len(base)))]
    datasets.DatasetDict({"unpaired": concatenate_datasets(parts)}).save_to_disk(str(path))
    return {"reused": False, "build_seconds": time.perf_counter() - start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", default="GoToSeqLocal")
    p.add_argument("--rate-demos", type=int, default=1000, help="demos generated per timing run")
    p.add_argument("--num-demos", type=int, default=200_000, help="rows of the memory-map check (paper: 1M)")
    p.add_argument("--big-dir", default=str(ROOT / "data" / "bench_big"))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--max-iter-seconds", type=float, default=300.0)
    p.add_argument("--out", default=str(ROOT / "results" / "demo_generation.json"))
    p.add_argument("--iterate-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.iterate_only:
        print(json.dumps(iterate(args.iterate_only, args.batch_size, args.max_iter_seconds)))
        return
    datasets.disable_progress_bars()
    level = resolve_level(args.level)
    result: dict = {"level": level, "rate_demos": args.rate_demos, "cpu_count": os.cpu_count(),
                    "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        one, t1 = timed_generation(level, args.rate_demos, 1, f"{tmp}/c1")
        two, t2 = timed_generation(level, args.rate_demos, 2, f"{tmp}/c2")
        assert one["seed"] == two["seed"], "num_proc changed the dataset"
        datasets.DatasetDict({"unpaired": one}).save_to_disk(f"{tmp}/saved")
        size = sum(f.stat().st_size for f in Path(f"{tmp}/saved").rglob("*.arrow"))
        result.update(demos_per_s_1proc=args.rate_demos / t1, demos_per_s_2proc=args.rate_demos / t2,
                      speedup_2_vs_1=t1 / t2, bytes_per_demo=size / args.rate_demos,
                      mean_steps=sum(map(len, one["actions"])) / len(one))
        result["big"] = {"path": args.big_dir, "num_demos": args.num_demos, "synthesized_by_repeating": True,
                         **build_big(one, args.num_demos, Path(args.big_dir))}
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
