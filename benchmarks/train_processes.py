"""MS-VAE updates per second of P training runs at once, each its own ``scripts/train.py`` process: how a study's
seeds share one machine (``experiments/reproduce.py --jobs P``; on a GPU with ``--cuda-graphs``).

    python benchmarks/train_processes.py --config CFG --processes 4 --out OUT/train_processes.json \
        [--timeout 150] [-- train.py flags, e.g. --cuda-graphs --loader-workers 2]

Run k trains seed k into its own folder under a temporary directory; all start together. Each run's training rate
is its updates over its wall time less its validation (``results.json``); ``updates_per_s`` adds the runs' rates,
which is the machine's where they train at the same time, and ``updates_per_s_span`` is all their updates over
the wall time from the first start to the last exit (start-ups, captures and final evaluations included): the
machine's rate lies between the two. A run past the timeout is killed with its loader workers. The runs start in
the repository root: relative paths inside the config (e.g. ``demos``) are read from there.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report import write_report

from msvae_hf.utils.runtime import provenance

ROOT = Path(__file__).resolve().parents[1]


def run_all(config: str, processes: int, flags: list[str], timeout: float,
            folder: Path) -> tuple[list[dict[str, Any]], float]:
    """Start ``processes`` train.py runs at once and wait for them: one dict per run (its rate, or why none) and
    the seconds from the first start to the last exit."""
    config = str(Path(config).resolve())  # the runs start in the repository root
    started = time.perf_counter()
    procs = []
    for k in range(processes):
        log = open(folder / f"run{k}.log", "w", encoding="utf-8")  # noqa: SIM115  (closed below)
        command = [sys.executable, str(ROOT / "scripts" / "train.py"), "--config", config, "--seed", str(k),
                   "--output-dir", str(folder / f"run{k}"), *flags]
        procs.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                       start_new_session=True), log))
    runs = []
    for proc, log in procs:
        try:
            proc.wait(timeout=max(1.0, timeout - (time.perf_counter() - started)))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run and its loader workers
            proc.wait()
        log.close()
    span = time.perf_counter() - started
    for k, (proc, _) in enumerate(procs):
        results = folder / f"run{k}" / "results.json"
        if proc.returncode != 0 or not results.is_file():
            tail = (folder / f"run{k}.log").read_text(encoding="utf-8", errors="replace").replace("\r", "\n")
            runs.append({"seed": k, "failed": f"exit {proc.returncode}", "log_tail": tail.strip().splitlines()[-3:]})
            continue
        r = json.loads(results.read_text(encoding="utf-8"))
        training = r["wall_time_s"] - r.get("validation_time_s", 0.0)
        if training <= 0:  # both times are rounded to 0.1 s in results.json
            runs.append({"seed": k, "failed": f"no training time to rate ({r['wall_time_s']} s wall)"})
            continue
        runs.append({"seed": k, "updates": r["updates"], "wall_time_s": r["wall_time_s"],
                     "validation_time_s": r.get("validation_time_s"), "updates_per_s": r["updates"] / training})
    return runs, span


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a train.py config (YAML/JSON) every run shares")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds for all runs together")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.processes < 1:
        parser.error(f"--processes must be positive, got {args.processes}")
    with tempfile.TemporaryDirectory() as folder:
        runs, span = run_all(args.config, args.processes, flags, args.timeout, Path(folder))
    rates = [r["updates_per_s"] for r in runs if "updates_per_s" in r]
    updates = sum(r["updates"] for r in runs if "updates_per_s" in r)
    write_report({"processes": args.processes, "train_flags": flags, **provenance(), "runs": runs,
                  "finished": len(rates), "updates_per_s": sum(rates) if rates else None, "span_s": span,
                  "updates_per_s_span": updates / span if rates else None}, args.out)


if __name__ == "__main__":
    main()
