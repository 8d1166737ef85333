"""How much faster two processes work than one on this machine, for pure Python and for a torch matmul: the
ceiling of any 2-process speedup here (two vCPUs may share one physical core).

    python benchmarks/cpu_scaling.py [--seconds 10] [--out results/cpu_scaling.json]

Each worker runs a fixed amount of work (calibrated to about `--seconds` in one process); the work is done
once by one process, then twice over by two processes side by side. Speedup = 2 x (one process's time) /
(two processes' wall time).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

from report import write_report


def python_work(n: int) -> int:
    total = 0
    for i in range(n):
        total = (total + i * i) % 1_000_003
    return total


def matmul_work(n: int) -> float:
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    for _ in range(n):
        a = torch.tanh(a @ a * 1e-3)
    return float(a.sum())


def wall(work, n: int, processes: int) -> float:
    start = time.perf_counter()
    with mp.get_context("fork").Pool(processes) as pool:
        pool.map(work, [n] * processes)
    return time.perf_counter() - start


def scaling(work, seconds: float) -> dict[str, float]:
    n = 1000
    while (elapsed := wall(work, n, 1)) < seconds / 10:
        n *= 4
    n = int(n * seconds / elapsed)
    one, two = wall(work, n, 1), wall(work, n, 2)
    return {"work_units": n, "one_process_s": one, "two_processes_s": two, "speedup_2_vs_1": 2 * one / two}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", default="results/cpu_scaling.json")
    args = parser.parse_args()
    write_report({"cpu_count": os.cpu_count(), "load_average_before": os.getloadavg(),
                  "python": scaling(python_work, args.seconds), "torch_matmul": scaling(matmul_work, args.seconds),
                  "load_average_after": os.getloadavg()}, args.out)


if __name__ == "__main__":
    main()
