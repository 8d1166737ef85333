"""One table of what benchmarks/gpu_update.sh measured: python benchmarks/gpu_summary.py FOLDER (markdown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _read(folder: Path, name: str) -> dict:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else {}


def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def rows(folder: Path) -> list[list[str]]:
    """(layout, updates/s in all, ms per run-update, kernels per update, device-busy ms per run-update, GB per
    run or peak, note) for every layout measured."""
    bench, out = _read(folder, "gpu_update.json"), []
    eager = bench.get("eager", {})
    if eager:
        out.append(["MSVAEModel eager (default layout, foreach Adam)", _num(eager.get("updates_per_s")),
                    _num(eager.get("ms_per_update")), _num(eager.get("kernels_per_update"), 0),
                    _num(eager.get("device_busy_ms_per_update"), 2), _num(eager.get("peak_gb"), 2), ""])
    layouts = [(name, bench[key]) for key, name in (("static_eager", "static layout, uncaptured"),
                                                    ("captured_every_frame", "CapturedUpdate, R = 1, every frame"))
               if bench.get(key)]
    layouts += [(f"CapturedUpdate, R = {c.get('runs')}", c) for c in bench.get("captured", [])]
    for name, c in layouts:
        if "failed" in c:
            out.append([name, "", "", "", "", "", c["failed"]])
            continue
        runs = c.get("runs", 1)
        out.append([name, _num(c.get("updates_per_s")), _num(c.get("ms_per_round", 0) / runs, 2),
                    _num(c.get("kernels_per_round", 0) / runs, 0), _num(c.get("device_busy_ms_per_run_update"), 2),
                    _num(c.get("peak_gb"), 2), f"{c.get('graphs')} graphs captured in {_num(c.get('capture_s'))} s"])
    for mode in ("graphs", "eager"):
        r = _read(folder, f"train_{mode}.json")
        if r:
            training = r["wall_time_s"] - r.get("validation_time_s", 0.0)
            out.append([f"scripts/train.py {'--cuda-graphs' if mode == 'graphs' else '(eager)'}",
                        _num(r["updates"] / training), _num(1e3 * training / r["updates"], 2), "", "", "",
                        f"{r['updates']} updates, validation {r.get('validation_time_s')} s apart"])
    together = _read(folder, "train_processes.json")
    if together:
        flags = " ".join(together.get("train_flags", []))
        out.append([f"{together['processes']} x scripts/train.py {flags} at once", _num(together.get("updates_per_s")),
                    "", "", "", "", f"{together.get('finished')} of {together['processes']} finished; their "
                    f"training rates added ({_num(together.get('updates_per_s_span'))} over the whole span)"])
    return out


HEADER = ["layout", "MS-VAE updates/s (all runs)", "ms per run-update", "kernels per run-update",
          "device-busy ms per run-update", "peak GB allocated", "note"]


def table(folder: Path) -> list[str]:
    """The markdown table of :func:`rows`."""
    return ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER),
            *("| " + " | ".join(row) + " |" for row in rows(folder))]


def kernels(folder: Path, layout: str = "captured", runs: int = 1, top: int = 8) -> list[str]:
    """Where one layout's device time goes: its costliest kernels per run-update (torch.profiler)."""
    bench = _read(folder, "gpu_update.json")
    entry = bench[layout] if layout != "captured" else next(c for c in bench["captured"] if c.get("runs") == runs)
    per = entry.get("runs", 1) if layout == "captured" else 1
    lines = ["| kernel (first 60 characters) | launches per run-update | device ms per run-update |",
             "| --- | --- | --- |"]
    for k in entry["top_kernels"][:top]:
        lines.append(f"| `{k['name'][:60]}` | {k['per_update'] / per:.0f} | {k['ms_per_update'] / per:.2f} |")
    return lines


def main() -> None:
    folder = Path(sys.argv[1])
    bench = _read(folder, "gpu_update.json")
    print(f"device: {bench.get('device_name')}, torch {bench.get('torch')}, commit {bench.get('commit')}")
    print("\n".join(table(folder)))
    if bench.get("parity"):
        print(f"static vs default layout, max |difference| of a loss term: {max(bench['parity'].values()):.2e}")


if __name__ == "__main__":
    main()
