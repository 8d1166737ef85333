"""Expert demonstrations: the BabyAI bot's episodes as a `datasets.DatasetDict`.

Every episode is defined by its seed: `env.reset(seed=seed)` rebuilds the room and the instruction, and
the (deterministic) bot then chooses the actions. A dataset therefore depends only on its arguments,
not on `num_proc`. Splits draw from disjoint seed ranges (`episode_seeds`):

    seed = dataset_seed * SEED_STRIDE + SPLIT_OFFSETS[split] + i,   0 <= i < SPLIT_OFFSET_GAP

paired (M = 1000 in the paper) and unpaired (N = 1,000,000, App. D) are the two training pools; valid
and test are held-out paired episodes. Every demonstration seed lies below ``TEST_SEED_START`` (1e9), where the
test rollouts start (validation rollouts start at 1.5e9; ``msvae_hf.envs.seeds``), so no evaluated episode can ever
have been trained on: that bound is what ``MAX_DATASET_SEED`` is derived from.
Episodes the bot fails, or that exceed the step or wall-time limit, are dropped, counted, and replaced
by the next seeds of the same range, so each split has exactly the requested size. (The wall-time
limit is the one input that is not a function of the seed; it only matters for a stuck bot.)

Row layout: observations are the egocentric views [T, 7, 7, 3] before each of the T actions, stored as one
`binary` value of T x 49 one-byte cell codes (`msvae_hf.data.collator`: read them with `decode_frames`),
directions[T] the agent's heading before each action, actions[T] the bot's action ids, instruction the mission
text (absent from `unpaired`), level the gymnasium id, seed.

`make_demos` plays each split in chunks of seeds and saves every chunk as it completes, under a work folder
beside the output (`<out>.chunks/<split>/chunk-00042`); a rerun with the same arguments reads the chunks there
and plays on from the first missing one, so an interrupted run loses at most one chunk and ends with the
dataset an uninterrupted run gives. `convert_demos` rewrites a dataset in the nested-list format (frames as
arrays) into cell codes.

Integrity: both write ``checksums.json`` beside ``stats.json``, the sha256 of each arrow file of the final dataset
(paths relative to it), and `load_demos` checks them (`verify_checksums`) before it reads the files, so a file cut
short or with a flipped bit is refused with one line naming it and the command that regenerates it
(`regenerate_command`). Each file is hashed once: its digest is cached in ``~/.cache/msvae_hf/demo_checksums.json``
(``$XDG_CACHE_HOME`` if set) under its path, size, mtime and ctime. A later change through the file system moves the
ctime, which `touch` or `os.utime` cannot set back, so even a same-size change with its mtime restored is hashed
again. The limit: a change that bypasses the file system after the file was hashed (the disk itself rotting a bit)
leaves all three as they were and stays unseen until the cache file is deleted. A dataset without
``checksums.json`` loads unchecked.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import (
    Dataset,
    DatasetDict,
    Features,
    Sequence,
    Value,
    concatenate_datasets,
    load_from_disk,
)
from huggingface_hub import DatasetCard, DatasetCardData, HfApi, is_offline_mode, snapshot_download
from minigrid.utils.baby_ai_bot import BabyAIBot

from ..envs.levels import resolve_level
from ..envs.seeds import TEST_SEED_START
from ..hub.card_templates import template_path
from ..hub.repo_ids import is_hub_repo_id
from ..utils.run_folder import LOCK_NAME, RunLock, read_json, write_json, writing
from ..utils.runtime import check_output_folder
from .collator import CELLS_PER_FRAME, CONVERT_COMMAND, FRAME_SHAPE, encode_frames

logger = logging.getLogger(__name__)

SPLITS = ("paired", "unpaired", "valid", "test")
SPLIT_OFFSET_GAP = 10_000_000
SPLIT_OFFSETS = {split: k * SPLIT_OFFSET_GAP for k, split in enumerate(SPLITS)}
SEED_STRIDE = len(SPLITS) * SPLIT_OFFSET_GAP  # one dataset seed's four split ranges, back to back
#: The largest dataset seed whose last seed, MAX * SEED_STRIDE + SEED_STRIDE - 1, is still below the first test
#: seed: (10**9 - 4 * 10**7) // (4 * 10**7) = 24.
MAX_DATASET_SEED = (TEST_SEED_START - SEED_STRIDE) // SEED_STRIDE
DEFAULT_TIME_LIMIT_S = 10.0
#: Seeds per chunk that make_demos saves as it goes: what an interruption can lose.
DEFAULT_CHUNK_SIZE = 10_000
STATUS_OK = "ok"
#: How observations are stored; a dataset whose observations feature differs holds frames as arrays.
OBSERVATIONS_FEATURE = Value("binary")
#: The sha256 of each arrow file, written beside stats.json by make_demos and convert_demos.
CHECKSUMS_FILE = "checksums.json"
#: Set to 1 to load demonstrations without checking them against CHECKSUMS_FILE (data edited on purpose).
SKIP_CHECKSUMS_ENV = "MSVAE_SKIP_DEMO_CHECKSUMS"
#: A file changed less than this before it is hashed is not cached: a second change within the file system's
#: timestamp granularity could leave its size, mtime and ctime as they were.
RACY_WINDOW_NS = 2_000_000_000


class TooManyDroppedError(RuntimeError):
    """The bot fails so many episodes that the requested count is out of reach (e.g. a too small max_steps)."""


def demo_features(with_instruction: bool) -> Features:
    """The contract's row features; `unpaired` rows carry no instruction."""
    feats: dict[str, Any] = {
        "level": Value("string"),
        "seed": Value("int64"),
        "observations": OBSERVATIONS_FEATURE,
        "directions": Sequence(Value("int8")),
        "actions": Sequence(Value("int8")),
    }
    if with_instruction:
        feats["instruction"] = Value("string")
    return Features(feats)


def episode_seeds(split: str, start: int, count: int, dataset_seed: int = 0) -> list[int]:
    """Seeds `start .. start+count-1` of a split's range (see the module docstring)."""
    if not 0 <= dataset_seed <= MAX_DATASET_SEED:
        raise ValueError(f"dataset seed must be in [0, {MAX_DATASET_SEED}], got {dataset_seed}")
    if start + count > SPLIT_OFFSET_GAP:
        raise ValueError(f"split {split!r} needs more than {SPLIT_OFFSET_GAP} seeds")
    base = dataset_seed * SEED_STRIDE + SPLIT_OFFSETS[split]
    return list(range(base + start, base + start + count))


def run_bot(
    env: gym.Env, seed: int, max_steps: int | None = None, time_limit_s: float = DEFAULT_TIME_LIMIT_S
) -> dict[str, Any]:
    """Play one episode of `env` with `BabyAIBot`; returns the row plus `status` ("ok" or why it failed).

    The step limit is the level's own `max_steps` unless `max_steps` is given. The frames are stored as cell
    codes (`encode_frames`); a dropped episode's row carries none.
    """
    obs, _ = env.reset(seed=seed)
    row = {"level": env.spec.id, "seed": seed, "instruction": obs["mission"]}
    images, directions, actions = [], [], []
    status, start = "failed", time.monotonic()
    try:
        bot = BabyAIBot(env.unwrapped)
        while True:
            if max_steps is not None and len(actions) >= max_steps:
                status = "step_limit"
                break
            if time.monotonic() - start > time_limit_s:
                status = "time_limit"
                break
            action = int(bot.replan())
            images.append(obs["image"])
            directions.append(int(obs["direction"]))
            actions.append(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            if terminated:
                status = STATUS_OK if reward > 0 else "failed"
                break
            if truncated:
                status = "step_limit"
                break
    except Exception:  # the bot trips assertions on rare layouts: a dropped episode, not a crash
        status = "bot_error"
    if status != STATUS_OK:
        images, directions, actions = [], [], []
    frames = encode_frames(np.asarray(images, dtype=np.uint8).reshape(-1, *FRAME_SHAPE))
    return {**row, "observations": frames, "directions": directions, "actions": actions, "status": status}


_PLAYER_PID: int | None = None  # the process in play_chunk: what it forks meanwhile ends with it
_PRCTL = None  # prctl, found by play_chunk before it forks


def _end_with_player() -> None:
    """In a process forked by :func:`play_chunk` (its pool's workers, the pool's manager): leave Ctrl-C to the
    player, let the pool's terminate() kill it, and, on Linux, die with the player however that ends
    (``PR_SET_PDEATHSIG``), so that a killed make_demos leaves nothing behind."""
    global _PLAYER_PID
    player, _PLAYER_PID = _PLAYER_PID, None  # what this process forks in turn is its own affair
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.unraisablehook = _quiet_shard_writer
    if _PRCTL is None:  # not Linux's C library: the pool's own terminate() is what ends the workers
        return
    pr_set_pdeathsig = 1
    _PRCTL(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != player:  # the player died before the call above
        os._exit(1)


def _quiet_shard_writer(unraisable) -> None:
    """``sys.unraisablehook`` in the pool's processes. datasets' shard writer (``_prepare_split_single``) yields in its
    ``finally``, so a worker whose queue is gone (the player stopping on Ctrl-C: the queue's manager ends first)
    closes it with "generator ignored GeneratorExit", which Python prints as a traceback beside make_demos' one line.
    That one is dropped (the worker's task has failed already and the player is ending); any other goes to Python's
    own hook."""
    if (unraisable.exc_type is RuntimeError and "ignored GeneratorExit" in str(unraisable.exc_value)
            and getattr(unraisable.object, "__qualname__", "").endswith("._prepare_split_single")):
        return
    sys.__unraisablehook__(unraisable)


def _find_prctl():
    """The C library's prctl, looked up in the player (never in a freshly forked child), or None."""
    try:
        return ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        return None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _PLAYER_PID is not None and _end_with_player())


def _generate_rows(seeds: list[int], level: str, max_steps: int | None, time_limit_s: float):
    """`Dataset.from_generator` target: one row per seed, dropped episodes included (by `status`)."""
    env = gym.make(level)
    for seed in seeds:
        yield run_bot(env, seed, max_steps, time_limit_s)
    env.close()


def play_chunk(
    level: str,
    split: str,
    seeds: list[int],
    num_proc: int = 1,
    max_steps: int | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    cache_dir: str | None = None,
) -> Dataset:
    """One row per seed, in seed order, with a `status` column ("ok" or why the episode was dropped).

    With ``num_proc`` > 1 the seeds are played in a pool of processes that ignore Ctrl-C and end with this one
    (:func:`_end_with_player`)."""
    global _PLAYER_PID, _PRCTL
    features = demo_features(True)
    features["status"] = Value("string")
    _PRCTL = _PRCTL or _find_prctl()
    _PLAYER_PID = os.getpid()
    try:
        chunk = Dataset.from_generator(
            _generate_rows,
            features=features,
            cache_dir=cache_dir,
            gen_kwargs={"seeds": seeds, "level": level, "max_steps": max_steps, "time_limit_s": time_limit_s},
            num_proc=num_proc if len(seeds) >= 2 * num_proc else None,
            split=split,
        )
    finally:
        _PLAYER_PID = None
    if chunk.data.column("seed").to_pylist() != list(seeds):  # the processes' shards should come back in order
        chunk = chunk.sort("seed")
    return chunk


def _kept_chunks(folder: Path) -> str:
    """What a failed write says: the chunks written so far are kept in ``folder``, and how to go on."""
    return f"the chunks written so far are kept in {folder}: free space, then rerun the same command to go on"


def _save_chunk(chunk: Dataset, path: Path) -> Dataset:
    """Write `chunk` to `path` in one rename (a half-written chunk is never taken for a complete one; a failed
    write leaves none)."""
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with writing(partial, then=_kept_chunks(path.parent)):
        chunk.save_to_disk(str(partial))
        os.replace(partial, path)
    return load_from_disk(str(path))


def _read_chunk(path: Path, first_seed: int, most: int) -> Dataset:
    """A saved chunk, checked to play consecutive seeds from `first_seed`, at most `most` of them."""
    chunk = load_from_disk(str(path))
    seeds = np.asarray(chunk.data.column("seed"))
    if not (0 < len(seeds) <= most and seeds[0] == first_seed and (np.diff(seeds) == 1).all()):
        raise ValueError(
            f"{path} does not continue the chunks before it (expected up to {most} seeds from {first_seed}, found "
            f"{len(seeds)} from {seeds[0] if len(seeds) else '-'}); delete {path.parent.parent} to start over"
        )
    return chunk


def generate_split(
    level: str,
    split: str,
    count: int,
    dataset_seed: int = 0,
    num_proc: int = 1,
    max_steps: int | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    cache_dir: str | None = None,
    chunk_size: int | None = None,
    work_dir: str | Path | None = None,
) -> tuple[Dataset, Counter]:
    """`count` successful bot episodes of one split, ordered by seed, and the dropped ones by reason.

    They are the first `count` episodes of the split's seed range that the bot completes, and `dropped` counts
    the failures before the last of them. Seeds are played in chunks of at most `chunk_size` (default: all that
    are still missing); a chunk never holds more seeds than episodes are missing, so the chunk size does not
    change the result. With `work_dir`, each chunk is saved there as `chunk-00000`, `chunk-00001`, ... as it
    completes, and chunks already there are read instead of played.
    """
    level = resolve_level(level)
    work = Path(work_dir) if work_dir is not None else None
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
        for leftover in [*work.glob("*.partial"), *work.glob(".cache-*")]:  # an interrupted chunk
            shutil.rmtree(leftover, ignore_errors=True)
    parts, dropped, kept, start, index = [], Counter(), 0, 0, 0
    played, started = 0, time.monotonic()
    while kept < count:
        if sum(dropped.values()) > 10 * count + 100:
            raise TooManyDroppedError(f"the bot failed {dict(dropped)} of {start} {split} episodes; check max_steps")
        missing = count - kept
        size = missing if chunk_size is None else min(chunk_size, missing)
        path = None if work is None else work / f"chunk-{index:05d}"
        if path is not None and path.exists():
            chunk, source = _read_chunk(path, episode_seeds(split, start, 1, dataset_seed)[0], missing), "read"
        else:
            seeds = episode_seeds(split, start, size, dataset_seed)
            if path is None:
                chunk = play_chunk(level, split, seeds, num_proc, max_steps, time_limit_s, cache_dir)
            else:
                cache = work / f".cache-{index:05d}"  # the rows as played, removed however the chunk ends
                with writing(cache, then=_kept_chunks(work)):
                    chunk = _save_chunk(play_chunk(level, split, seeds, num_proc, max_steps, time_limit_s,
                                                   str(cache)), path)
                shutil.rmtree(cache, ignore_errors=True)
            source = "played"
            played += len(chunk)
        status = chunk.data.column("status").to_pylist()
        ok = [i for i, s in enumerate(status) if s == STATUS_OK]
        dropped.update(s for s in status if s != STATUS_OK)
        parts.append(chunk.select(ok))
        kept, start, index = kept + len(ok), start + len(chunk), index + 1
        rate = played / (time.monotonic() - started)
        logger.info(
            "%s: chunk %05d %s (%d seeds: %d kept, %d dropped); %d / %d kept%s", split, index - 1, source,
            len(chunk), len(ok), len(chunk) - len(ok), kept, count,
            f"; {rate:.1f} episodes/s, about {(count - kept) / rate / 60:.0f} min to go" if played else "",
        )
    if parts:
        ds = concatenate_datasets(parts).remove_columns("status")
    else:
        ds = Dataset.from_dict({k: [] for k in demo_features(True)}, demo_features(True))
    if split == "unpaired":
        ds = ds.remove_columns("instruction")
    return ds, dropped


def split_stats(ds: Dataset) -> dict[str, float]:
    """Episode count and mean trajectory / instruction lengths (App. C's table)."""
    stats: dict[str, float] = {"episodes": len(ds)}
    if len(ds):
        steps = pc.list_value_length(ds.data.column("actions"))
        if ds._indices is not None:  # `ds.data` is the whole table, not the rows a `select` kept
            steps = pc.take(steps, ds._indices.column(0))
        stats["mean_steps"] = float(pc.mean(steps).as_py())
        if "instruction" in ds.column_names:
            stats["mean_words"] = float(np.mean([len(t.split()) for t in ds["instruction"]]))
    return stats


def render_dataset_card(level: str, stats: dict[str, dict], dropped: dict, command: str) -> DatasetCard:
    """The dataset card (``model_cards/dataset_card.md``): per split its episodes and mean lengths, the bot's
    dropped episodes, the command line."""
    rows = {
        split: {
            "episodes": st["episodes"],
            "mean_steps": f"{st['mean_steps']:.2f}" if "mean_steps" in st else "-",
            "mean_words": f"{st['mean_words']:.2f}" if "mean_words" in st else "-",
        }
        for split, st in stats.items()
    }
    episodes = sum(st["episodes"] for st in stats.values())
    data = DatasetCardData(
        pretty_name=f"{level} bot demonstrations",
        license="apache-2.0",
        size_categories=[size_category(episodes)],
        tags=["babyai", "minigrid", "imitation-learning", "instruction-following"],
        task_categories=["reinforcement-learning"],
    )
    return DatasetCard.from_template(
        data,
        template_path=str(template_path("dataset_card.md")),
        title=f"BabyAI bot demonstrations: {level}",
        level=level,
        splits=rows,
        dropped=dropped or "none",
        test_seed_start=TEST_SEED_START,
        generation_command=command,
    )


def size_category(rows: int) -> str:
    """The Hub's ``size_categories`` value for a dataset of ``rows`` rows (n<1K, 1K<n<10K, ...)."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
    return next((name for bound, name in bounds if rows < bound), "n>100M")


def work_dir(out: str | Path) -> Path:
    """Where `make_demos` keeps the chunks of an unfinished `out`: `<out>.chunks` beside it."""
    out = Path(out)
    return out.with_name(out.name + ".chunks")


def _claim_work_dir(work: Path, arguments: dict[str, Any]) -> bool:
    """Record `arguments` in a new `work` folder, or check them against the run that left `work` behind.

    Returns whether chunks of an earlier run are there; raises ValueError naming every argument that differs.
    """
    record = work / "arguments.json"
    if record.exists():
        before = read_json(record, fix=f"delete {work} to start over")
        differ = [f"{k}: {before.get(k)!r} there, {arguments.get(k)!r} now"
                  for k in sorted(set(before) | set(arguments)) if before.get(k) != arguments.get(k)]
        if differ:
            raise ValueError(
                f"{work} holds chunks of an interrupted run with other arguments ({'; '.join(differ)}): rerun with "
                f"its arguments to finish it, or delete {work} to start over"
            )
        return True
    if work.exists() and any(p.name != LOCK_NAME for p in work.iterdir()):
        raise ValueError(f"{work} exists without arguments.json: not a make_demos work folder; move or delete it")
    work.mkdir(parents=True, exist_ok=True)
    write_json(record, arguments)
    return False


def make_demos(
    level: str,
    counts: dict[str, int],
    out: str | Path,
    dataset_seed: int = 0,
    num_proc: int = 1,
    max_steps: int | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    overwrite: bool = False,
    command: str = "",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> DatasetDict:
    """Generate every split, save it with `save_to_disk` at `out` plus a README.md card and stats.json.

    Every split is played in chunks of `chunk_size` seeds, each saved under `work_dir(out)` as it completes. If
    that folder is there, it is an interrupted run: its arguments must equal these (else ValueError naming the
    ones that differ; `num_proc` and `chunk_size` do not change the data and may differ), and generation goes on
    from its chunks. The folder is removed once `out` is complete. Refuses a non-empty `out` unless `overwrite`
    (which replaces it only once generation succeeded). The lock of that folder (:class:`RunLock`) is held
    throughout: a second make_demos on the same `out` meanwhile is refused (``RunFolderBusy``, naming the first).
    A full disk is one ``OSError`` naming the file; the chunks saved before it are kept.
    """
    level = resolve_level(level)
    if set(counts) != set(SPLITS) or any(c < 0 for c in counts.values()) or not sum(counts.values()):
        raise ValueError(f"counts must give each of {SPLITS} a count >= 0, not all zero; got {counts}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out, work = Path(out), work_dir(Path(out))
    fresh = not work.exists()
    try:
        with RunLock(work, command or None, busy="wait for it to finish, or write another --out"):
            _make_demos_locked(level, counts, out, work, dataset_seed, num_proc, max_steps, time_limit_s,
                               overwrite, command, chunk_size)
    finally:
        if fresh and work.is_dir() and [p.name for p in work.iterdir()] == [LOCK_NAME]:  # refused at once
            shutil.rmtree(work, ignore_errors=True)
    return load_demos(out)


def _make_demos_locked(level: str, counts: dict[str, int], out: Path, work: Path, dataset_seed: int, num_proc: int,
                       max_steps: int | None, time_limit_s: float, overwrite: bool, command: str,
                       chunk_size: int) -> None:
    """:func:`make_demos` while it holds the lock of ``work``: nothing else writes ``out`` meanwhile."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass overwrite=True (--overwrite) to replace")
    arguments = {"level": level, **counts, "dataset_seed": dataset_seed, "max_steps": max_steps,
                 "time_limit_s": time_limit_s, "observations": OBSERVATIONS_FEATURE.dtype}
    if _claim_work_dir(work, arguments):
        logger.info("resuming from the chunks in %s", work)
    splits, dropped = {}, Counter()
    try:
        for split in SPLITS:
            splits[split], d = generate_split(
                level, split, counts[split], dataset_seed, num_proc, max_steps, time_limit_s,
                chunk_size=chunk_size, work_dir=work / split,
            )
            dropped.update({f"{split}/{k}": v for k, v in d.items()})
    except TooManyDroppedError:
        shutil.rmtree(work, ignore_errors=True)  # a rerun would fail the same way: nothing worth keeping
        raise
    except BaseException:
        logger.warning("stopped: the chunks written so far stay in %s; rerun the same command to go on", work)
        raise
    final = work / "dataset"  # complete before it becomes `out`, in one rename
    shutil.rmtree(final, ignore_errors=True)
    logger.info("saving %s to %s", ", ".join(f"{len(ds)} {s}" for s, ds in splits.items()), out)
    with writing(final, then=_kept_chunks(work)):
        empty = {s: 1 for s, ds in splits.items() if len(ds) == 0}  # datasets writes no shard for an empty split
        DatasetDict(splits).save_to_disk(str(final), num_shards=empty)
        stats = {s: split_stats(ds) for s, ds in load_from_disk(str(final)).items()}
        info = {"level": level, "dataset_seed": dataset_seed, "splits": stats, "dropped": dict(dropped),
                "max_steps": max_steps, "time_limit_s": time_limit_s, "command": command}
        write_json(final / "stats.json", info)
        render_dataset_card(level, stats, dict(dropped), command).save(final / "README.md")
        write_checksums(final)  # of the files `out` will hold: the rename below moves them unchanged
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    os.replace(final, out)
    shutil.rmtree(work)


def require_cell_codes(data: Dataset | DatasetDict, path: str | Path) -> None:
    """Refuse demonstrations whose observations are not stored as cell codes, naming the command that converts."""
    for name, ds in (data.items() if isinstance(data, DatasetDict) else [("rows", data)]):
        feature = ds.features.get("observations")
        if feature is not None and feature != OBSERVATIONS_FEATURE:
            raise ValueError(
                f"{path} ({name}) stores observations as {feature}, not as one-byte cell codes; convert it with "
                f"`{CONVERT_COMMAND.replace('OLD_DIR', shlex.quote(str(path)))}`"
            )


#: The bounds of the small integer columns: MiniGrid's four headings and seven actions.
COLUMN_RANGES = {"directions": (0, 3), "actions": (0, 6)}


def check_demo_columns(ds: Dataset, split: str, path: str | Path, with_instruction: bool | None = None,
                       regenerate: str | None = None) -> None:
    """Refuse a split that lacks a column of :func:`demo_features` (``instruction`` everywhere but ``unpaired``,
    unless ``with_instruction`` says otherwise), whose directions or actions lie outside :data:`COLUMN_RANGES`, or
    whose rows hold frames, directions and actions of different lengths: one ValueError naming the split, the
    column and ``regenerate``, the command that writes it again (default: :func:`regenerate_command`)."""
    with_instruction = split != "unpaired" if with_instruction is None else with_instruction
    fix = f"regenerate it with `{regenerate or regenerate_command(path)}`"
    missing = [c for c in demo_features(with_instruction) if c not in ds.column_names]
    if missing:
        raise ValueError(f"{path}: split {split!r} has no {', '.join(map(repr, missing))} column (it has "
                         f"{', '.join(ds.column_names)}); {fix}")
    if not len(ds) or ds._indices is not None:  # a selection: its table holds rows the split does not
        return
    table = ds.data
    for column, (low, high) in COLUMN_RANGES.items():
        bounds = pc.min_max(pc.list_flatten(table.column(column)))
        lowest, highest = bounds["min"].as_py(), bounds["max"].as_py()
        if lowest is not None and (lowest < low or highest > high):
            bad = lowest if lowest < low else highest
            raise ValueError(f"{path}: split {split!r}, column {column!r} holds {bad}, outside {low}..{high}; {fix}")
    steps = pc.list_value_length(table.column("actions"))
    checks = (("directions", pc.list_value_length(table.column("directions")), steps, "directions"),
              ("observations", pc.binary_length(table.column("observations")), pc.multiply(steps, CELLS_PER_FRAME),
               f"cell codes ({CELLS_PER_FRAME} a frame)"))
    for column, lengths, expected, unit in checks:
        unequal = pc.not_equal(lengths, expected)
        if pc.any(unequal).as_py():
            row = pc.index(unequal, True).as_py()
            raise ValueError(f"{path}: split {split!r}, row {row} holds {lengths[row].as_py()} {unit} in column "
                             f"{column!r} for {steps[row].as_py()} actions; {fix}")


def _sha256(file: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | Path) -> dict[str, str]:
    """Write ``CHECKSUMS_FILE`` in `folder`: the sha256 of each of its arrow files, by path relative to it."""
    folder = Path(folder)
    digests = {f.relative_to(folder).as_posix(): _sha256(f) for f in sorted(folder.rglob("*.arrow"))}
    (folder / CHECKSUMS_FILE).write_text(json.dumps({"sha256": digests}, indent=2) + "\n")
    return digests


def regenerate_command(path: str | Path) -> str:
    """The command that writes the demonstrations at `path` again: the make_demos command stats.json records (with
    --overwrite), else one rebuilt from the arguments stats.json records."""
    path = Path(path)
    try:
        info = json.loads((path / "stats.json").read_text())
        command = str(info.get("command") or "")
        if "make_demos" in command or "msvae-make-demos" in command:  # the script or its entry point
            return command if "--overwrite" in command.split() else f"{command} --overwrite"
        args = ["--level", str(info["level"])]
        for split in SPLITS:
            if episodes := info["splits"].get(split, {}).get("episodes", 0):
                args += [f"--{split}", str(episodes)]
        args += ["--seed", str(info["dataset_seed"])]
        if info.get("max_steps") is not None:
            args += ["--max-steps", str(info["max_steps"])]
        if info.get("time_limit_s", DEFAULT_TIME_LIMIT_S) != DEFAULT_TIME_LIMIT_S:
            args += ["--time-limit", str(info["time_limit_s"])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"python scripts/make_demos.py <its arguments> --out {shlex.quote(str(path))} --overwrite"
    return shlex.join(["python", "scripts/make_demos.py", *args, "--out", str(path), "--overwrite"])


def _checksum_cache_file() -> Path | None:
    """Where verified digests are cached (None when there is no home folder to put it in)."""
    root = os.environ.get("XDG_CACHE_HOME")
    try:
        return (Path(root) if root else Path.home() / ".cache") / "msvae_hf" / "demo_checksums.json"
    except RuntimeError:
        return None


def _read_checksum_cache(file: Path | None) -> dict[str, Any]:
    """The cache: resolved path -> [size, mtime_ns, ctime_ns, sha256]; empty if missing or unreadable."""
    try:
        cache = json.loads(file.read_text()) if file is not None else {}
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_checksum_cache(file: Path | None, cache: dict[str, Any]) -> None:
    """Save the cache in one rename, dropping files that are gone; a cache that cannot be written is skipped."""
    if file is None:
        return
    tmp = None
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=file.parent, prefix=f".{file.name}-", delete=False) as f:
            tmp = f.name
            json.dump({k: v for k, v in cache.items() if os.path.exists(k)}, f)
        os.replace(tmp, file)
    except OSError as err:
        logger.debug("checksum cache %s not written: %s", file, err)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


_UNCHECKED: set[Path] = set()  # datasets without checksums already reported


def verify_checksums(path: str | Path, regenerate: str | None = None) -> None:
    """Check each arrow file of `path` against its ``CHECKSUMS_FILE``; ValueError (one line) naming the first that
    differs and ``regenerate``, the command that writes `path` again (default: :func:`regenerate_command`).
    Digests are cached by file path, size, mtime and ctime (see the module docstring), so a second call reads no
    file again. A dataset without ``CHECKSUMS_FILE`` passes unchecked."""
    path = Path(path)
    record = path / CHECKSUMS_FILE
    ways_out = (f"regenerate the dataset with `{regenerate or regenerate_command(path)}`, or, if you changed it on "
                f"purpose, skip this check with load_demos(..., verify=False) or {SKIP_CHECKSUMS_ENV}=1")
    if not record.exists():
        if path not in _UNCHECKED:
            _UNCHECKED.add(path)
            logger.info("%s has no %s: its files are not verified", path,
                        CHECKSUMS_FILE)
        return
    try:
        expected = json.loads(record.read_text())["sha256"]
        expected = {str(k): str(v) for k, v in expected.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{record} is unreadable ({type(err).__name__}: {err}); {ways_out}") from err
    cache_file = _checksum_cache_file()
    cache, changed = _read_checksum_cache(cache_file), False
    try:
        for name, digest in expected.items():
            file = path / name
            try:
                st = file.stat()
            except FileNotFoundError:
                raise ValueError(f"{file} is missing (it is listed in {record}); {ways_out}") from None
            key, stamp = str(file.resolve()), [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
            entry = cache.get(key)
            if isinstance(entry, list) and len(entry) == 4 and entry[:3] == stamp:
                actual = entry[3]
            else:
                actual = _sha256(file)
                if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_WINDOW_NS:
                    cache[key], changed = [*stamp, actual], True
            if actual != digest:
                raise ValueError(
                    f"{file}: its sha256 differs from the one recorded in {record} (the file is damaged or was "
                    f"changed after it was written); {ways_out}"
                )
    finally:
        if changed:
            _write_checksum_cache(cache_file, cache)


def checksums_skipped() -> bool:
    """Whether ``SKIP_CHECKSUMS_ENV`` asks to skip the checksums."""
    return os.environ.get(SKIP_CHECKSUMS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _unreadable_message(path: Path, err: BaseException, regenerate: str | None = None) -> str:
    """One line naming the arrow file of `path` that pyarrow cannot read (found by reading each) and ``regenerate``,
    the command that writes it again (default: :func:`regenerate_command`)."""
    broken = None
    for file in sorted(path.rglob("*.arrow")):
        try:
            with pa.memory_map(str(file)) as source:
                pa.ipc.open_stream(source).read_all()
        except (OSError, pa.ArrowException):
            broken = file
            break
    detail = " ".join(f"{type(err).__name__}: {err}".split())
    what = f"{broken} cannot be read" if broken is not None else f"{path} cannot be read"
    return (f"{what} ({detail}): it is damaged or cut short; regenerate the dataset with "
            f"`{regenerate or regenerate_command(path)}`")


def _hub_snapshot(name: str) -> Path | None:
    """The local snapshot of the Hub dataset repo ``name`` ("user/name"), downloaded, or read from the cache when
    ``HF_HUB_OFFLINE`` is set; None when ``name`` is no Hub repo id from here (``is_hub_repo_id``: e.g. its
    first folder exists here).
    FileNotFoundError when the repo cannot be had."""
    if not is_hub_repo_id(name):
        return None
    try:
        return Path(snapshot_download(name, repo_type="dataset", local_files_only=is_offline_mode()))
    except (OSError, ValueError) as err:
        raise FileNotFoundError(
            f"no demonstrations at {name}: no such folder here, and the Hub dataset {name} cannot be had "
            f"({type(err).__name__}: {' '.join(str(err).split())}); create them with scripts/make_demos.py"
        ) from err


def load_checked(path: Path, verify: bool = True, regenerate: str | None = None,
                 hint: str = "") -> Dataset | DatasetDict:
    """``load_from_disk(path)`` once its files match their checksums (unless ``verify`` is False or
    ``MSVAE_SKIP_DEMO_CHECKSUMS=1``): one ValueError for a folder holding no saved dataset (with ``hint``) or for the
    file pyarrow cannot read, naming ``regenerate``, the command that writes it again (default:
    :func:`regenerate_command`). The loading of demonstrations and of pseudo-labels."""
    if verify and not checksums_skipped():
        verify_checksums(path, regenerate=regenerate)
    if (path / "config.json").is_file() and not (path / "dataset_dict.json").is_file():
        raise ValueError(f"{path} holds a saved model (config.json), not a dataset (demonstrations are written by "
                         f"scripts/make_demos.py){hint}")
    try:
        return load_from_disk(str(path))
    except FileNotFoundError as err:
        if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
            raise ValueError(f"{path} is a saved dataset with a file missing ({' '.join(str(err).split())})"
                             f"{hint}") from err
        raise ValueError(f"{path} is not a dataset saved with save_to_disk: it holds no dataset_dict.json or "
                         f"dataset_info.json{hint}") from err
    except (OSError, pa.ArrowException) as err:
        raise ValueError(_unreadable_message(path, err, regenerate=regenerate)) from err


def load_demos(path: str | Path, verify: bool = True) -> DatasetDict:
    """Load (memory-mapped) a DatasetDict written by `make_demos`, with clear one-line errors.

    ``path`` is a folder, or the id of a Hub dataset repo that `push_demos_to_hub` filled (downloaded once, or read
    from the Hub cache when ``HF_HUB_OFFLINE=1``). The arrow files are first checked against the ``checksums.json``
    written with them (`verify_checksums`: each file is hashed once, then cached). Skip that check for data edited
    on purpose with ``verify=False`` or the environment variable ``MSVAE_SKIP_DEMO_CHECKSUMS=1`` (for
    scripts/train.py). A file pyarrow cannot read is named, with the command that regenerates the dataset.
    """
    local = Path(path)
    path = local if local.exists() else _hub_snapshot(str(path)) or local
    if not path.exists():
        raise FileNotFoundError(f"no demonstrations at {path}; create them with scripts/make_demos.py")
    dd = load_checked(path, verify)
    if not isinstance(dd, DatasetDict):
        raise ValueError(f"{path} holds a single Dataset, expected a DatasetDict with splits {SPLITS}")
    if "paired" not in dd:
        raise ValueError(f"{path} has no 'paired' split (splits: {list(dd)})")
    require_cell_codes(dd, path)
    for split, ds in dd.items():
        check_demo_columns(ds, split, path)
    return dd


def _encode_batch(batch: dict[str, Any]) -> dict[str, list[bytes]]:
    """`Dataset.map` target: a batch of [T, 7, 7, 3] observations -> their cell codes."""
    return {"observations": [encode_frames(np.asarray(frames, np.uint8).reshape(-1, *FRAME_SHAPE))
                             for frames in batch["observations"]]}


def convert_demos(old: str | Path, out: str | Path, overwrite: bool = False) -> Dataset | DatasetDict:
    """Copy a dataset in the nested-list format (observations as `Array4D` [T, 7, 7, 3]) to `out` with its
    observations as cell codes; every other column, row and the card, stats and label files come along.

    Takes a `make_demos` DatasetDict or a single Dataset (a pseudo-labelled split of scripts/label_unpaired.py).
    Nothing is written to `old`. Refuses a non-empty `out` unless `overwrite`.
    """
    old, out = Path(old), Path(out)
    check_output_folder(out, converted=old)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass overwrite=True (--overwrite) to replace")
    data = load_from_disk(str(old))
    named = dict(data) if isinstance(data, DatasetDict) else {"rows": data}
    if all(ds.features.get("observations") == OBSERVATIONS_FEATURE for ds in named.values()):
        raise ValueError(f"{old} already stores observations as cell codes")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        converted = {}
        for name, ds in named.items():
            features = ds.features.copy()
            features["observations"] = OBSERVATIONS_FEATURE
            converted[name] = ds.with_format("numpy", columns=["observations"], output_all_columns=True).map(
                _encode_batch, batched=True, batch_size=1000, features=features,
                cache_file_name=str(tmp / f"{name}.arrow"), desc=f"converting {name}",
            ).with_format(None)
        final = tmp / "dataset"
        if isinstance(data, DatasetDict):
            empty = {s: 1 for s, ds in converted.items() if len(ds) == 0}
            DatasetDict(converted).save_to_disk(str(final), num_shards=empty)
        else:
            converted["rows"].save_to_disk(str(final))
        for extra in [*old.glob("*.json"), *old.glob("*.md")]:  # card, stats, pseudo-label record
            if not (final / extra.name).exists():
                shutil.copy2(extra, final / extra.name)
        stats_file = final / "stats.json"
        if stats_file.exists() and (final / "README.md").exists():  # the card describes the columns: renew it
            info = json.loads(stats_file.read_text())
            render_dataset_card(info["level"], info["splits"], info["dropped"], info["command"]).save(
                final / "README.md")
        write_checksums(final)  # the new files' (replacing any copied from `old`)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(final, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return load_from_disk(str(out))


@dataclass
class Replay:
    """A stored episode replayed from its seed."""

    observations: np.ndarray  # uint8 [T, 7, 7, 3], before each action
    directions: np.ndarray  # [T]
    instruction: str
    reward: float
    success: bool


def replay_episode(level: str, seed: int, actions: list[int]) -> Replay:
    """Replay `actions` from `env.reset(seed=seed)`: the frames seen and the final reward."""
    env = gym.make(resolve_level(level))
    obs, _ = env.reset(seed=int(seed))
    instruction, images, directions, reward, done = obs["mission"], [], [], 0.0, False
    for action in actions:
        if done:
            raise ValueError(f"episode of seed {seed} ended before its {len(actions)} actions were replayed")
        images.append(obs["image"])
        directions.append(obs["direction"])
        obs, reward, terminated, truncated, _ = env.step(int(action))
        done = terminated or truncated
    env.close()
    return Replay(
        np.asarray(images, np.uint8).reshape(-1, 7, 7, 3), np.asarray(directions), instruction,
        float(reward), bool(reward > 0),
    )


def completed_goals_of(dataset: Dataset, level: str) -> list[list[tuple[int, list[str]]]]:
    """Each row's :func:`msvae_hf.envs.missions.completed_goals` (the steps that complete a goal of its episode's own
    mission, with those goals' words), its episode replayed from its seed on ``level``. Each row must be a whole
    demonstration, its mission completed by its last action; any other is refused (ValueError naming the row)."""
    from ..envs.missions import completed_goals

    env = gym.make(resolve_level(level))
    columns = dataset.select_columns(["seed", "actions"])
    found = []
    try:
        for i, (seed, actions) in enumerate(zip(columns["seed"], columns["actions"], strict=True)):
            try:
                found.append(completed_goals(env, seed, actions, demonstration=True))
            except ValueError as err:  # e.g. a part from experiments/paired_parts.py, which starts mid-episode
                raise ValueError(f"row {i}: {err}") from None
    finally:
        env.close()
    return found


def with_goal_steps(dataset: Dataset, level: str | None = None) -> Dataset:
    """``dataset`` with a "goal_steps" column: for each row, the steps whose action completes a goal of its episode's
    own mission (:func:`msvae_hf.envs.missions.goal_steps`, each episode replayed from its seed on ``level``, or
    on the rows' own "level"). What a speaker trained with ``goal_steps_weight`` reads beside the pairs. Each row must
    be a whole demonstration, its mission completed by its last action; any other is refused (ValueError naming the
    row, :func:`completed_goals_of`)."""
    if len(dataset) == 0:
        raise ValueError("with_goal_steps got an empty dataset")
    missing = {"seed", "actions"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"with_goal_steps needs each row's seed and actions; the dataset lacks {sorted(missing)}")
    levels = {level} if level is not None else set(dataset.unique("level"))
    if len(levels) != 1:
        raise ValueError(f"with_goal_steps replays one level at a time; the rows hold {sorted(levels)}")
    steps = [[step for step, _ in found] for found in completed_goals_of(dataset, levels.pop())]
    if "goal_steps" in dataset.column_names:
        dataset = dataset.remove_columns("goal_steps")
    return dataset.add_column("goal_steps", steps)


def push_demos_to_hub(path: str | Path, repo_id: str, api: HfApi | None = None, private: bool = False) -> Any:
    """Upload a `make_demos` folder (arrow files, checksums, stats and card) to a Hub dataset repo with
    `upload_folder`: `load_demos` reads it back by its id, `datasets.load_dataset` by the card's ``configs:``. A card
    without ``configs:`` is renewed from stats.json first."""
    load_demos(path)  # refuse to push something that is not a demo dataset
    readme, stats = Path(path) / "README.md", Path(path) / "stats.json"
    if stats.is_file() and not (readme.is_file() and DatasetCard.load(readme).data.get("configs")):
        info = json.loads(stats.read_text())
        render_dataset_card(info["level"], info["splits"], info["dropped"], info["command"]).save(readme)
    api = api or HfApi()
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    return api.upload_folder(
        folder_path=str(path), repo_id=repo_id, repo_type="dataset", commit_message="Upload BabyAI demos"
    )
