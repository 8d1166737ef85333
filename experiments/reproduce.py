#!/usr/bin/env python
"""Run a level's study, or some of its cells, skipping every cell whose output exists.

    python experiments/reproduce.py gotoseqlocal                       # every cell, two at a time
    python experiments/reproduce.py bosslocal --cells 'msvae_v/*' --seeds 0 1 2
    python experiments/reproduce.py bosslocal --cells 'speaker_front_*/*' 'compare_speakers/*'
    python experiments/reproduce.py gotoseqlocal --dry-run             # what would run, in order

Without ``--seeds`` each row runs on the seeds the study ran it on (experiments/cells.py); with them, every
row on those seeds (and seed 0).

With ``--cuda-graphs`` every training cell runs ``scripts/train.py --cuda-graphs --loader-workers 2``: on one CUDA
device its updates are replayed as CUDA graphs (msvae_hf.training.graphed, docs/results/benchmarks.md "The GPU update").
With ``--eval-workers N`` every training cell's validation and test envs step in N processes beside it.

A run whose record exists (``results/<level>/runs/<run>.json``) is finished, even where its run folder is not
on this machine: it is trained again only where a cell still to run needs its folder (e.g. a baseline that
MS-VAE starts from), or with ``--again``; the record of a run trained again goes to
``results/<level>/reruns/``, beside the first. Cells that only make inputs (demonstrations, pseudo-labels,
pre-trained encoders) run where a cell needs them, or when named in ``--cells``.

A cell that continues a finished run to a larger budget (``--continue-from``) trains from the start where that
run left no checkpoint when the cell starts (the same run). A training cell whose run folder holds a checkpoint
continues with ``--resume`` (bit-identical to an uninterrupted run); a folder with neither a checkpoint nor
``results.json`` (a start killed before its first checkpoint) is started again. A finished run's record goes to
``results/<level>/runs/<run>.json`` (config, seed, commit, machine, wall time, metrics, validation curve; for a run
from saved weights, their hashes and the commit and machine their run's record names) and is never overwritten; a
labelling's (speaker, command, commit, machine, wall time; labels written before their record held a wall time are not
kept) to ``results/<level>/labels/<labels>.json``, one done again beside it. Each cell logs to
``runs/<level>/logs/<cell>.log``. A training cell whose run folder another process trains (its lock is held, e.g. by
another driver's trainer) is left to it, its folder and log untouched, and counts as not done here. A trainer takes the
lock once it has loaded its data and model, before it writes into the folder; a second driver that starts the same cell
before then has its trainer refused at the lock.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cells import Cell, level_cells

from msvae_hf.data.pseudo_labels import RECORD_FILE, pseudo_labels_record
from msvae_hf.utils.run_folder import checkpoint_dirs, read_json, run_folder_holder, write_json


def run_record(run: Path) -> dict:
    """What a finished run leaves for the results: its config, command lines and results.json."""
    record = {"run": run.name, "config": json.loads((run / "train_config.json").read_text())}
    record["command"] = (run / "command.txt").read_text().splitlines() if (run / "command.txt").exists() else []
    record.update(json.loads((run / "results.json").read_text()))
    return record


def same_run(a: dict, b: dict) -> bool:
    """Whether two records hold one training run (a record may have gained fields by hand, e.g. a commit)."""
    return all(a.get(key) == b.get(key) for key in ("test", "wall_time_s", "updates"))


def record_path(level: str, run: Path, results_root: Path = Path("results")) -> Path:
    """Where a run's record goes: ``results/<level>/runs/<run>.json``."""
    return results_root / level / "runs" / f"{run.name}.json"


def save_record(level: str, run: Path, results_root: Path = Path("results")) -> Path | None:
    """Write ``results/<level>/runs/<run>.json``; a finished result is never overwritten.

    A run folder trained again after its record was written (e.g. a baseline retrained on a new machine, where
    the old folder is gone, to start other runs from) is kept beside it as ``results/<level>/reruns/<run>_<commit>
    .json``, so that what the later runs started from is on record too. Returns the path written, if any."""
    record = run_record(run)
    again = results_root / level / "reruns" / f"{run.name}_{commit_suffix(record)}.json"
    return keep_record(record, record_path(level, run, results_root), again, same_run)


def save_labels_record(level: str, labels: Path, results_root: Path = Path("results")) -> Path | None:
    """Write the record of the pseudo-labels at ``labels`` (who labelled, how, how long, at which commit) to
    ``results/<level>/labels/<labels>.json``, and that of a labelling done again beside it as ``<labels>_<commit>
    .json``, as :func:`save_record` does a run's; labels whose record holds no wall time are not kept."""
    record = pseudo_labels_record(labels)
    if "wall_time_s" not in record:
        return None
    folder = results_root / level / "labels"
    return keep_record(record, folder / f"{labels.name}.json", folder / f"{labels.name}_{commit_suffix(record)}.json",
                       lambda a, b: all(a.get(key) == b.get(key) for key in ("wall_time_s", "commit", "command")))


def commit_suffix(record: dict) -> str:
    """A record's commit as a file name's suffix: its first 7 characters (``unknown`` where it names none)."""
    return str(record.get("commit") or "unknown")[:7]


def keep_record(record: dict, out: Path, again: Path, same: Callable[[dict, dict], bool]) -> Path | None:
    """Write ``record`` at ``out``, or at ``again`` where ``out`` holds another one (the same work done again).
    Nothing is written where ``same`` finds it at either, nor where both hold others (a third time at one commit).
    Returns the path written, if any."""
    for path in (out, again):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, record)
            return path
        if same(read_json(path, fix="restore it from git"), record):
            return None
    return None


def save_cell_record(level: str, cell: Cell) -> Path | None:
    """Keep a finished cell's record: a training run's, or a labelling's (a cell whose output is a labels record)."""
    if cell.run_dir is not None:
        return save_record(level, cell.run_dir)
    if cell.output.name == RECORD_FILE:
        return save_labels_record(level, cell.output.parent)
    return None


def continued_run(command: tuple[str, ...] | list[str]) -> str | None:
    """The run folder a train.py command continues (``--continue-from``), if any."""
    return command[command.index("--continue-from") + 1] if "--continue-from" in command else None


def prepare(cell: Cell, dry_run: bool = False) -> list[str]:
    """The command to run now: with ``--resume`` where the run folder holds a checkpoint. A run folder without
    one (a start killed before its first checkpoint) is removed, unless ``dry_run``. A run to continue
    (``--continue-from``) that left no checkpoint is trained from the start to the whole budget instead, the same
    run (decided when the cell starts, not in a ``dry_run``, where the run to continue may not have trained
    yet)."""
    command = list(cell.command)
    if cell.run_dir is not None and checkpoint_dirs(cell.run_dir):
        return [*command, "--resume"]
    if (source := continued_run(command)) is not None and not dry_run and not checkpoint_dirs(source):
        at = command.index("--continue-from")
        del command[at:at + 2]
    if not dry_run and cell.run_dir is not None and cell.run_dir.exists():
        shutil.rmtree(cell.run_dir)
    return command


def recorded(level: str, cell: Cell, results_root: Path = Path("results")) -> bool:
    """Whether a training cell's run has its record, ``results/<level>/runs/<run>.json``: its result exists
    even where its run folder does not (e.g. on another machine)."""
    return cell.run_dir is not None and record_path(level, cell.run_dir, results_root).exists()


def is_input(cell: Cell) -> bool:
    """A cell that makes only what other cells read, under data/ or runs/ (demonstrations, pseudo-labels,
    pre-trained encoders), not a run with a record."""
    return cell.run_dir is None and bool({Path("data"), Path("runs")} & set(cell.output.parents))


def select(cells: list[Cell], patterns: list[str] | None,
           finished: Callable[[Cell], bool] = lambda cell: False) -> list[Cell]:
    """The cells matching ``patterns`` (fnmatch on names; none: every cell that makes a result) but those
    ``finished`` (e.g. recorded) and, first, every cell they need whose output is missing."""
    by_name = {c.name: c for c in cells}
    chosen = [c for c in cells if any(fnmatch.fnmatch(c.name, p) for p in patterns)] if patterns else \
        [c for c in cells if not is_input(c)]
    if patterns and not chosen:
        raise SystemExit(f"no cell matches {patterns}; cells: {', '.join(by_name)}")
    chosen = [c for c in chosen if c.output.exists() or not finished(c)]
    wanted: dict[str, Cell] = {}

    def add(cell: Cell) -> None:
        if cell.name in wanted:
            return
        for need in () if cell.output.exists() else cell.needs:  # a finished cell needs nothing more
            if not by_name[need].output.exists():
                add(by_name[need])
        wanted[cell.name] = cell

    for cell in chosen:
        add(cell)
    return list(wanted.values())


def training_flags(cell: Cell, flags: tuple[str, ...]) -> Cell:
    """A scripts/train.py cell with ``flags`` added to its command; any other cell as it is."""
    if cell.command[:2] != ("python", "scripts/train.py") or not flags:
        return cell
    return dataclasses.replace(cell, command=(*cell.command, *flags))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", help="bosslocal or gotoseqlocal")
    parser.add_argument("--cells", nargs="*", help="cell name patterns (fnmatch), e.g. 'msvae*/seed0' demos")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="default: each row's own seeds")
    parser.add_argument("--jobs", type=int, default=2, help="cells run at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each cell")
    parser.add_argument("--num-proc", type=int, default=2, help="bot processes of the demos cell (same data)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="train.py cells with --cuda-graphs --loader-workers 2 (one CUDA device; its records "
                             "say so in their config)")
    parser.add_argument("--eval-workers", type=int, default=0,
                        help="processes that step each training cell's validation and test envs (train.py's "
                             "--eval-workers; 0: in the cell's own process)")
    parser.add_argument("--again", action="store_true",
                        help="train recorded runs again too (their records go to results/<level>/reruns/)")
    parser.add_argument("--dry-run", action="store_true", help="print the cells that would run, in order")
    args = parser.parse_args(argv)
    try:
        seeds = None if args.seeds is None else tuple(args.seeds)
        every = level_cells(args.level, seeds, args.threads, num_proc=args.num_proc)
        flags = (("--cuda-graphs", "--loader-workers", "2") if args.cuda_graphs else ()) + \
            (("--eval-workers", str(args.eval_workers)) if args.eval_workers else ())
        every = [training_flags(cell, flags) for cell in every]
        cells = select(every, args.cells, lambda cell: not args.again and recorded(args.level, cell))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from err
    todo = [c for c in cells if not c.output.exists()]
    for cell in cells:
        if cell.output.exists():
            save_cell_record(args.level, cell)
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
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # timeout(1) signals its child, then the whole group again
        for name, (proc, _) in running.items():
            proc.terminate()
            print(f"stopped {name}", flush=True)
        deadline = time.monotonic() + STOP_GRACE_S  # one grace period for all, not one each in turn
        for name, (proc, _) in running.items():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # the caller (gpu_grid.sh) archives what the cells wrote next
                proc.kill()
                proc.wait()
                print(f"killed {name}: not stopped {STOP_GRACE_S} s after SIGTERM", flush=True)
        sys.exit(124)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failed:
        sys.exit(f"failed or blocked: {', '.join(failed)}")


#: How long a stopped cell may take to end after SIGTERM before it is killed.
STOP_GRACE_S = 30


def _stop(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the stopping
    raise KeyboardInterrupt


def schedule(cells: list[Cell], todo: list[Cell], running: dict[str, tuple[subprocess.Popen, float]],
             done: set[str], failed: list[str], logs: Path, args: argparse.Namespace) -> None:
    """Start each cell once what it needs is done (and the cells it runs after, where they run too), at most
    ``args.jobs`` at a time, until none is left."""
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
                save_cell_record(args.level, cell)
            else:
                failed.append(name)
                print(f"FAILED {name} (exit {proc.returncode}; see {logs / (name.replace('/', '_') + '.log')})",
                      flush=True)
        while blocked := {c.name for c in todo if any(n in failed for n in c.needs)}:  # and what needs those
            todo[:] = [c for c in todo if c.name not in blocked]
            failed += sorted(blocked)
        pending = {c.name for c in cells if c in todo or c.name in running}
        ready = [c for c in todo if all(n in done for n in c.needs) and not set(c.after) & pending]
        if todo and not ready and not running:
            sys.exit(f"cannot start {', '.join(c.name for c in todo)}: what they need is neither done nor running")
        for cell in ready:
            if cell.output.exists():  # finished meanwhile, e.g. by another driver
                todo.remove(cell)
                done.add(cell.name)
                continue
            if len(running) >= args.jobs:
                break
            if cell.run_dir is not None and (holder := run_folder_holder(cell.run_dir)) is not None:
                todo.remove(cell)  # another driver trains it: neither its folder nor its log is touched
                failed.append(cell.name)
                print(f"BUSY   {cell.name}: {cell.run_dir} is in use by {holder}; left to it", flush=True)
                continue
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
