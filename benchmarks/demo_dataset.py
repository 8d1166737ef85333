"""A whole demonstration set, generated and measured as a user meets it: the wall and CPU time of
`scripts/make_demos.py`, bytes on disk per split and per demo, and one shuffled epoch of its unpaired split
(rows/s and resident memory, anonymous and file-backed apart, in a fresh process).

    python benchmarks/demo_dataset.py --level BossLocal --unpaired 1000000 --dir data/bosslocal_1m \\
        --out results/benchmarks/demo_dataset_bosslocal_1m.json

Where --dir already holds the finished dataset, nothing is generated and `generation` is null. An interrupted
run goes on with the same command (make_demos resumes from its chunks); the timing then covers what was left,
and `chunks_at_start` counts the chunks that were already there. Writes --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from datasets import load_from_disk
from demo_generation import cpu_seconds, folder_bytes
from report import write_report

from msvae_hf.data.demos import SPLITS, work_dir
from msvae_hf.envs.levels import resolve_level
from msvae_hf.utils.runtime import provenance

ROOT = Path(__file__).resolve().parents[1]


def generate(command: list[str], work: Path) -> dict:
    """Run make_demos (`command`) to the end: wall and CPU seconds, and the chunks it found to resume from."""
    chunks = sum(1 for _ in work.rglob("*.arrow")) if work.exists() else 0
    start, cpu, load = time.perf_counter(), cpu_seconds(), os.getloadavg()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    cpu = cpu_seconds() - cpu  # make_demos and its bot processes, reaped by now
    return {"command": shlex.join(command), "wall_seconds": wall, "cpu_seconds": cpu,
            "cores_busy": cpu / (wall * (os.cpu_count() or 1)), "chunks_at_start": chunks,
            "load_average_before": load, "load_average_after": os.getloadavg()}


def measure(path: Path, batch_size: int, max_seconds: float) -> dict:
    """Rows and bytes of every split on disk, and an epoch of the unpaired split in a fresh process."""
    data = load_from_disk(str(path))
    splits = {name: {"rows": len(data[name]), "bytes": folder_bytes(path / name)} for name in data}
    demos = sum(s["rows"] for s in splits.values())
    total = folder_bytes(path)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "demo_generation.py"), "--iterate-only", str(path),
           "--batch-size", str(batch_size), "--max-iter-seconds", str(max_seconds)]
    it = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    return {"splits": splits, "demos": demos, "bytes_on_disk": total, "bytes_per_demo": total / demos,
            "observations_feature": str(data["unpaired"].features["observations"]), "iteration": it,
            "rss_under_2gb": it["peak_rss_mb"] < 2048, "disk_under_2gb": total < 2e9}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", default="BossLocal")
    p.add_argument("--paired", type=int, default=1000)
    p.add_argument("--unpaired", type=int, default=1_000_000)
    p.add_argument("--valid", type=int, default=500)
    p.add_argument("--test", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument("--dir", required=True, help="the dataset's folder (generated there unless it is finished)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--max-iter-seconds", type=float, default=600.0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    path = Path(args.dir)
    finished = path.is_dir() and (path / "dataset_dict.json").exists() and not work_dir(path).exists()
    command = [sys.executable, str(ROOT / "scripts" / "make_demos.py"), "--level", args.level,
               *(x for split in SPLITS for x in (f"--{split}", str(getattr(args, split)))),
               "--seed", str(args.seed), "--num-proc", str(args.num_proc), "--out", str(path)]
    result = {"level": resolve_level(args.level), **provenance(),
              "generation": None if finished else generate(command, work_dir(path))}
    result.update(measure(path, args.batch_size, args.max_iter_seconds))
    if result["generation"] and not result["generation"]["chunks_at_start"]:  # a rate of the whole run only
        result["generation"]["demos_per_s"] = result["demos"] / result["generation"]["wall_seconds"]
    write_report(result, args.out)


if __name__ == "__main__":
    main()
