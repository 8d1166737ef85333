"""Generate BabyAI bot demonstrations (App. C levels) as a DatasetDict on disk.

    python scripts/make_demos.py --level BossLocal --paired 1000 --unpaired 100000 --valid 500 --test 500 \\
        --seed 0 --num-proc 2 --out data/bosslocal [--overwrite] [--push-to-hub REPO] [--max-steps N]

Each split is played in chunks of --chunk-size seeds, saved as they complete under <out>.chunks/ (one log
line per chunk). If the run stops (Ctrl-C, a killed job, a reboot), the same command goes on from the chunks
there and ends with the dataset an uninterrupted run gives; other arguments are refused, naming the ones that
differ (--num-proc and --chunk-size may change). For a large set in the background:

    nohup python scripts/make_demos.py --level BossLocal --paired 1000 --unpaired 1000000 --valid 500 \\
        --test 500 --num-proc 2 --out data/bosslocal_1m > make_demos.log 2>&1 &

The dataset's checksums.json holds the sha256 of each of its arrow files (also after --convert); load_demos checks
them, and its errors give this command (the one stats.json records, with --overwrite) to regenerate a damaged set.

A dataset saved before observations were stored as one-byte cell codes is converted with

    python scripts/make_demos.py --convert OLD_DIR --out NEW_DIR

Installed by pip as ``msvae-make-demos`` (the same flags).
"""

from __future__ import annotations

import _thread
import argparse
import logging
import os
import shlex
import signal
import sys
import threading

import datasets
from datasets.exceptions import DatasetsError

from ..data.demos import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TIME_LIMIT_S,
    SPLITS,
    TooManyDroppedError,
    convert_demos,
    make_demos,
    push_demos_to_hub,
    work_dir,
)
from ..envs.levels import resolve_level
from ..hub.push import HubRequestError, hub_request
from ..utils.run_folder import RunFolderBusy
from .invocation import entry_point_command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate the command line (argparse errors exit with status 2 and a message)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", help="GoToSeqLocal, BossLocal, GoToSeq, BossLevel or a full id")
    for split in SPLITS:
        p.add_argument(f"--{split}", type=int, default=0, help=f"number of {split} episodes")
    p.add_argument("--seed", type=int, default=0, help="dataset seed: selects the episode seed ranges")
    p.add_argument("--num-proc", type=int, default=1, help="bot processes (the data does not depend on it)")
    p.add_argument("--out", required=True, help="output directory (save_to_disk layout + README.md)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--max-steps", type=int, default=None, help="drop bot episodes longer than this")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="seconds per episode")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help="seeds per saved chunk: the most an interruption loses (the data does not depend on it)")
    p.add_argument("--convert", metavar="OLD_DIR", default=None,
                   help="instead of generating: copy OLD_DIR (observations as [T, 7, 7, 3] arrays) to --out with "
                        "observations as one-byte cell codes")
    p.add_argument("--push-to-hub", metavar="REPO", default=None, help="upload --out to this dataset repo")
    args = p.parse_args(argv)
    if args.convert:
        given = [f"--{s}" for s in SPLITS if getattr(args, s)] + (["--level"] if args.level else [])
        if given:
            p.error(f"--convert copies a dataset as it is: drop {' '.join(given)}")
        return args
    if args.level is None:
        p.error("--level is required (unless --convert)")
    try:
        args.level = resolve_level(args.level)
    except ValueError as err:
        p.error(str(err))
    counts = {s: getattr(args, s) for s in SPLITS}
    if any(c < 0 for c in counts.values()):
        p.error(f"episode counts must be >= 0, got {counts}")
    if not sum(counts.values()):
        p.error("all episode counts are zero: ask for at least one of --paired/--unpaired/--valid/--test")
    if args.num_proc < 1 or (args.max_steps is not None and args.max_steps < 1) or args.time_limit <= 0:
        p.error("--num-proc and --max-steps must be >= 1 and --time-limit > 0")
    if args.chunk_size < 1:
        p.error(f"--chunk-size must be >= 1, got {args.chunk_size}")
    args.counts = counts
    return args


_SIGNALS: list[int] = []  # the stop signals this process received
_REDELIVERED: list[int] = []  # stops swallowed where Python could not raise them, delivered again
#: Seconds a stop's cleanup may take before the process ends anyway (the saved chunks are whole either way).
STOP_GRACE_S = 30.0
_WATCHDOGS: list[threading.Timer] = []  # armed by a stop; main() disarms them where the process goes on
_STOP_LINE = ["stopped"]  # what a stop says, set by main() once it knows the work folder


def _end_now(signum: int) -> None:
    """End the process at once, saying the stop's one line (the watchdog's end, and a second stop's)."""
    print(_STOP_LINE[0], file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(128 + signum)


def _interrupt(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM -> KeyboardInterrupt, recorded: a killed make_demos stops as Ctrl-C stops it (the
    pool's ``finally`` may put its own error in the interrupt's place, so the record is what says it was one)."""
    if _REDELIVERED:  # the same stop again (:func:`_redeliver_swallowed_stop`), not a second one
        _REDELIVERED.pop()
    else:
        _SIGNALS.append(signum)
        if len(_SIGNALS) == 1:  # a cleanup stuck in the pool's joins must not keep the process: end it anyway
            watchdog = threading.Timer(STOP_GRACE_S, _end_now, args=(signum,))
            watchdog.daemon = True
            watchdog.start()
            _WATCHDOGS.append(watchdog)
    if len(_SIGNALS) > 1:  # stopped again while the first stop's cleanup runs: end now, never a traceback
        _end_now(signum)
    raise KeyboardInterrupt


def _redeliver_swallowed_stop(unraisable) -> None:
    """``sys.unraisablehook`` while make_demos runs: a stop that lands where Python cannot raise (an at-fork callback,
    e.g. logging's lock release as the pool forks) is swallowed as "Exception ignored", and the run would go on;
    it is delivered again instead, at the main thread's next step, with nothing printed. Anything else goes to
    Python's own hook."""
    if unraisable.exc_type is KeyboardInterrupt and _SIGNALS:
        _REDELIVERED.append(_SIGNALS[-1])
        # from another thread, a moment later: the main thread takes it in its own code, not here, where it would be
        # swallowed again (were it swallowed again, this hook would deliver it once more)
        later = threading.Timer(0.05, _thread.interrupt_main, args=(_SIGNALS[-1],))
        later.daemon = True
        later.start()
        return
    sys.__unraisablehook__(unraisable)


def main(argv: list[str] | None = None) -> None:
    """``scripts/make_demos.py`` and ``msvae-make-demos``: ``argv`` None reads ``sys.argv``."""
    args = parse_args(argv)
    args_given = sys.argv[1:] if argv is None else argv
    command = entry_point_command(argv) or shlex.join(["python", "scripts/make_demos.py", *args_given])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    bars = datasets.is_progress_bar_enabled()
    # As the process's own command (not main([...]) called in-process), on the main thread: SIGINT and SIGTERM stop
    # it cleanly, but for a signal its parent told it to ignore (a background job keeps ignoring Ctrl-C).
    handles = argv is None and threading.current_thread() is threading.main_thread()
    _SIGNALS.clear()
    _REDELIVERED.clear()
    _STOP_LINE[0] = "stopped" + ("" if args.convert else f": the same command goes on from the chunks saved in "
                                                      f"{work_dir(args.out)}")
    stops = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)
             if handles and signal.getsignal(s) is not signal.SIG_IGN}
    unraisable_hook = sys.unraisablehook
    if stops:
        sys.unraisablehook = _redeliver_swallowed_stop
    try:
        if args.convert:
            dd = convert_demos(args.convert, args.out, overwrite=args.overwrite)
        else:
            datasets.disable_progress_bars()  # one log line per chunk instead of a bar per chunk
            dd = make_demos(
                args.level, args.counts, args.out, args.seed, args.num_proc, args.max_steps, args.time_limit,
                overwrite=args.overwrite, command=command, chunk_size=args.chunk_size,
            )
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt) or _SIGNALS:
            if _SIGNALS:  # the process itself was told to end: end it now, with no exit handlers, which a loaded
                _end_now(_SIGNALS[0])  # machine's pool joins can keep waiting (the saved chunks are whole)
            raise SystemExit(_STOP_LINE[0]) from None
        if isinstance(err, (OSError, ValueError, RunFolderBusy, TooManyDroppedError)):  # a full disk too
            raise SystemExit(f"error: {err}") from err
        if isinstance(err, DatasetsError):  # datasets' wrapper of a failed generation: its cause is the news
            cause = err.__cause__ or err.__context__
            raise SystemExit(f"error: {err}" + (f" ({type(cause).__name__}: {' '.join(str(cause).split())})"
                                                if cause else "")) from err
        raise
    finally:
        for signum, handler in stops.items():
            signal.signal(signum, handler or signal.SIG_DFL)
        while _WATCHDOGS:
            _WATCHDOGS.pop().cancel()
        sys.unraisablehook = unraisable_hook
        if bars:
            datasets.enable_progress_bars()
    print(dd)
    print(f"saved to {args.out}")
    if args.push_to_hub:
        try:
            with hub_request("upload demonstrations to", args.push_to_hub):
                print(push_demos_to_hub(args.out, args.push_to_hub))
        except (HubRequestError, ValueError) as err:
            raise SystemExit(f"error: {err} (the demonstrations are saved in {args.out})") from None


if __name__ == "__main__":
    main()
