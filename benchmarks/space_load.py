"""What a visitor of the Space waits under a burst: N requests sent at once over loopback HTTP (Follow and Bot
mixed), each one's seconds from sending to its answer, and how many the bounded queue turned away.

    python benchmarks/space_load.py --model outputs/quickstart/msvae/best [--requests 40]
        [--out results/benchmarks/space_load.json]

The app is app.build(model) served on a free port of this machine (one rollout at a time, at most
app.QUEUE_SIZE waiting), called through gradio_client as a browser calls it.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

import psutil
from report import write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # app.py, at the repository's root

import app  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def burst(model: str, requests: int) -> dict:
    """Serve ``model``, send ``requests`` requests at once, and time each answer."""
    from gradio_client import Client

    demo = app.build(model)
    port = free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        client.predict(model, "GoToSeqLocal", 1_000_000_001, api_name="/bot")  # loaded, warm
        rss = psutil.Process().memory_info().rss
        calls = [((model, "GoToLocal", 1_000_000_000 + i, "go to a ball"), "/follow") if i % 2 else
                 ((model, "GoToSeqLocal", 1_000_000_000 + i), "/bot") for i in range(requests)]
        sent = time.perf_counter()
        jobs = [client.submit(*args, api_name=api) for args, api in calls]
        waits, refused = [], 0
        for job in jobs:
            try:
                job.result(timeout=600)
                waits.append(time.perf_counter() - sent)
            except Exception:  # noqa: BLE001  (the queue full, or an instruction naming nothing in the room)
                refused += 1
        grown = (psutil.Process().memory_info().rss - rss) / 2**20
    finally:
        demo.close()
    return {"requests": requests, "answered": len(waits), "refused": refused, "queue_size": app.QUEUE_SIZE,
            "median_wait_s": statistics.median(waits), "max_wait_s": max(waits), "memory_growth_mb": grown}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--out", default="results/benchmarks/space_load.json")
    args = parser.parse_args()
    write_report({"model": args.model, **burst(args.model, args.requests)}, args.out)


if __name__ == "__main__":
    main()
