#!/usr/bin/env python
"""Run a level's study, or some of its cells, skipping every cell whose output exists.

    python experiments/reproduce.py gotoseqlocal                       # every cell, two at a time
    python experiments/reproduce.py bosslocal --cells 'msvae_v/*' --seeds 0 1 2
    python experiments/reproduce.py bosslocal --cells 'speaker_front_*/*' 'compare_speakers/*'
    python experiments/reproduce.py gotoseqlocal --dry-run             # what would run, in order

Without ``--seeds`` each row runs on the seeds the study ran it on (experiments/cells.py); with them, every
row on those seeds (and seed 0).

A training cell whose run folder holds a checkpoint continues with ``--resume`` (bit-identical to an
uninterrupted run); a folder with neither a checkpoint nor ``results.json`` (a start killed before its first
checkpoint) is started again. A finished run's record goes to ``results/<level>/runs/<run>.json`` (config,
seed, commit, machine, wall time, metrics, validation curve) and is never overwritten. Each cell logs to
``runs/<level>/logs/<cell>.log``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from cells import Cell, level_cells

from msvae_hf.training import checkpoint_dirs


def run_record(run: Path) -> dict:
    """What a finished run leaves for the results: its config, command lines and results.json."""
    record = {"run": run.name, "config": json.loads((run / "train_config.json").read_text())}
    record["command"] = (run / "command.txt").read_text().splitlines() if (run / "command.txt").exists() else []
    record.update(json.loads((run / "results.json").read_text()))
    return record


def save_record(level: str, run: Path, results_root: Path = Path("results")) -> Path | None:
    """Write ``results/<level>/runs/<run>.json`` unless it exists (a finished result is never overwritten)."""
    out = results_root / level / "runs" / f"{run.name}.json"
    if out.exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(run_record(run), indent=2) + "\n")
    return out


def prepare(cell: Cell, dry_run: bool = False) -> list[str]:
    """The command to run now: with ``--resume`` where the run folder holds a checkpoint. A run folder without
    one (a start killed before its first checkpoint) is removed, unless ``dry_run``."""
    command = list(cell.command)
    if cell.run_dir is not None and cell.run_dir.exists():
        if checkpoint_dirs(cell.run_dir):
            command.append("--resume")
        elif not dry_run:
            shutil.rmtree(cell.run_dir)
    return command


def select(cells: list[Cell], patterns: list[str] | None) -> list[Cell]:
    """The cells matching ``patterns`` (fnmatch on names) and, first, every unfinished cell they need."""
    by_name = {c.name: c for c in cells}
    chosen = [c for c in cells if not patterns or any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    if patterns and not chosen:
        raise SystemExit(f"no cell matches {patterns}; cells: {', '.join(by_name)}")
    wanted: dict[str, Cell] = {}

    def add(cell: Cell) -> None:
        if cell.name in wanted:
            return
        for need in cell.needs:
            if not by_name[need].output.exists():
                add(by_name[need])
        wanted[cell.name] = cell

    for cell in chosen:
        add(cell)
    return list(wanted.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", help="bosslocal or gotoseqlocal")
    parser.add_argument("--cells", nargs="*", help="cell name patterns (fnmatch), e.g. 'msvae*/seed0' demos")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="default: each row's own seeds")
    parser.add_argument("--jobs", type=int, default=2, help="cells run at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each cell")
    parser.add_argument("--num-proc", type=int, default=2, help="bot processes of the demos cell (same data)")
    parser.add_argument("--dry-run", action="store_true", help="print the cells that would run, in order")
    args = parser.parse_args(argv)
    try:
        seeds = None if args.seeds is None else tuple(args.seeds)
        every = level_cells(args.level, seeds, args.threads, num_proc=args.num_proc)
        cells = select(every, args.cells)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from err
    todo = [c for c in cells if not c.output.exists()]
    for cell in cells:
        if cell.output.exists() and cell.run_dir is not None:
            save_record(args.level, cell.run_dir)
    if args.dry_run:
        for cell in todo:
            print(f"{cell.name}: {shlex.join(prepare(cell, dry_run=True))}")
        return
    logs = Path("runs", args.level, "logs")
    logs.mkdir(parents=True, exist_ok=True)
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    done = {c.name for c in every if c.output.exists()}  # a finished need is not among the selected cells
    failed: list[str] = []
    # SIGTERM (e.g. gpu_grid.sh's deadline) stops the cells too, not only this loop; the caller's handler is put
    # back afterwards (a process forked later, e.g. by datasets' worker pools, must not inherit this one).
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        schedule(cells, todo, running, done, failed, logs, args)
    except KeyboardInterrupt:
        for name, (proc, _) in running.items():
            proc.terminate()
            print(f"stopped {name}", flush=True)
        for proc, _ in running.values():
            proc.wait()
        sys.exit(124)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failed:
        sys.exit(f"failed or blocked: {', '.join(failed)}")


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def schedule(cells: list[Cell], todo: list[Cell], running: dict[str, tuple[subprocess.Popen, float]],
             done: set[str], failed: list[str], logs: Path, args: argparse.Namespace) -> None:
    """Start each cell once what it needs is done, at most ``args.jobs`` at a time, until none is left."""
    while todo or running:
        for name, (proc, started) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            cell = next(c for c in cells if c.name == name)
            minutes = (time.time() - started) / 60
            if proc.returncode == 0 and cell.output.exists():
                done.add(name)
                print(f"done   {name} ({minutes:.1f} min)", flush=True)
                if cell.run_dir is not None:
                    save_record(args.level, cell.run_dir)
            else:
                failed.append(name)
                print(f"FAILED {name} (exit {proc.returncode}; see {logs / (name.replace('/', '_') + '.log')})",
                      flush=True)
        while blocked := {c.name for c in todo if any(n in failed for n in c.needs)}:  # and what needs those
            todo[:] = [c for c in todo if c.name not in blocked]
            failed += sorted(blocked)
        ready = [c for c in todo if all(n in done for n in c.needs)]
        if todo and not ready and not running:
            sys.exit(f"cannot start {', '.join(c.name for c in todo)}: what they need is neither done nor running")
        for cell in ready:
            if cell.output.exists():  # finished meanwhile, e.g. by another driver
                todo.remove(cell)
                done.add(cell.name)
                continue
            if len(running) >= args.jobs:
                break
            command = prepare(cell)
            log = open(logs / (cell.name.replace("/", "_") + ".log"), "a", encoding="utf-8")  # noqa: SIM115
            log.write(f"$ {shlex.join(command)}\n")
            log.flush()
            running[cell.name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), time.time())
            todo.remove(cell)
            print(f"start  {cell.name}: {shlex.join(command)}", flush=True)
        time.sleep(2)


if __name__ == "__main__":
    main()
