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

Row layout: observations[T, 7, 7, 3] uint8 are the egocentric views
before each of the T actions, directions[T] the agent's heading before each action, actions[T] the bot's
action ids, instruction the mission text (absent from `unpaired`), level the gymnasium id, seed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.compute as pc
from datasets import (
    Array4D,
    Dataset,
    DatasetDict,
    Features,
    Sequence,
    Value,
    concatenate_datasets,
    load_from_disk,
)
from huggingface_hub import DatasetCard, DatasetCardData, HfApi
from minigrid.utils.baby_ai_bot import BabyAIBot

from ..card_templates import template_path
from ..envs.levels import resolve_level
from ..envs.seeds import TEST_SEED_START

SPLITS = ("paired", "unpaired", "valid", "test")
SPLIT_OFFSET_GAP = 10_000_000
SPLIT_OFFSETS = {split: k * SPLIT_OFFSET_GAP for k, split in enumerate(SPLITS)}
SEED_STRIDE = len(SPLITS) * SPLIT_OFFSET_GAP  # one dataset seed's four split ranges, back to back
#: The largest dataset seed whose last seed, MAX * SEED_STRIDE + SEED_STRIDE - 1, is still below the first test
#: seed: (10**9 - 4 * 10**7) // (4 * 10**7) = 24.
MAX_DATASET_SEED = (TEST_SEED_START - SEED_STRIDE) // SEED_STRIDE
DEFAULT_TIME_LIMIT_S = 10.0
STATUS_OK = "ok"


def demo_features(with_instruction: bool) -> Features:
    """The contract's row features; `unpaired` rows carry no instruction."""
    feats: dict[str, Any] = {
        "level": Value("string"),
        "seed": Value("int64"),
        "observations": Array4D((None, 7, 7, 3), "uint8"),
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

    The step limit is the level's own `max_steps` unless `max_steps` is given. A dropped episode's row
    carries no frames.
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
    frames = np.asarray(images, dtype=np.uint8).reshape(-1, 7, 7, 3)
    return {**row, "observations": frames, "directions": directions, "actions": actions, "status": status}


def _generate_rows(seeds: list[int], level: str, max_steps: int | None, time_limit_s: float):
    """`Dataset.from_generator` target: one row per seed, dropped episodes included (by `status`)."""
    env = gym.make(level)
    for seed in seeds:
        yield run_bot(env, seed, max_steps, time_limit_s)
    env.close()


def generate_split(
    level: str,
    split: str,
    count: int,
    dataset_seed: int = 0,
    num_proc: int = 1,
    max_steps: int | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    cache_dir: str | None = None,
) -> tuple[Dataset, Counter]:
    """`count` successful bot episodes of one split, ordered by seed, and the dropped ones by reason."""
    level = resolve_level(level)
    features = demo_features(True)
    features["status"] = Value("string")
    parts, dropped, next_index = [], Counter(), 0
    while (missing := count - sum(len(p) for p in parts)) > 0:
        if sum(dropped.values()) > 10 * count + 100:
            raise RuntimeError(f"the bot failed {dict(dropped)} of {next_index} {split} episodes; check max_steps")
        seeds = episode_seeds(split, next_index, missing, dataset_seed)
        next_index += missing
        ds = Dataset.from_generator(
            _generate_rows,
            features=features,
            cache_dir=cache_dir,
            gen_kwargs={"seeds": seeds, "level": level, "max_steps": max_steps, "time_limit_s": time_limit_s},
            num_proc=num_proc if missing >= 2 * num_proc else None,
            split=split,
        )
        status = ds.data.column("status").to_pylist()
        dropped.update(s for s in status if s != STATUS_OK)
        parts.append(ds.select([i for i, s in enumerate(status) if s == STATUS_OK]))
    if parts:
        ds = concatenate_datasets(parts).remove_columns("status")
    else:
        ds = Dataset.from_dict({k: [] for k in features if k != "status"}, demo_features(True))
    seeds = ds.data.column("seed").to_pylist()
    if seeds != sorted(seeds):
        ds = ds.sort("seed")
    if split == "unpaired":
        ds = ds.remove_columns("instruction")
    return ds, dropped


def split_stats(ds: Dataset) -> dict[str, float]:
    """Episode count and mean trajectory / instruction lengths (App. C's table)."""
    stats: dict[str, float] = {"episodes": len(ds)}
    if len(ds):
        stats["mean_steps"] = float(pc.mean(pc.list_value_length(ds.data.column("actions"))).as_py())
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
    data = DatasetCardData(
        pretty_name=f"{level} bot demonstrations",
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
) -> DatasetDict:
    """Generate every split, save it with `save_to_disk` at `out` plus a README.md card and stats.json.

    Refuses a non-empty `out` unless `overwrite` (which replaces it only once generation succeeded).
    """
    level = resolve_level(level)
    if set(counts) != set(SPLITS) or any(c < 0 for c in counts.values()) or not sum(counts.values()):
        raise ValueError(f"counts must give each of {SPLITS} a count >= 0, not all zero; got {counts}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass overwrite=True (--overwrite) to replace")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        splits, dropped = {}, Counter()
        for split in SPLITS:
            splits[split], d = generate_split(
                level, split, counts[split], dataset_seed, num_proc, max_steps, time_limit_s, str(tmp)
            )
            dropped.update({f"{split}/{k}": v for k, v in d.items()})
        dd = DatasetDict(splits)
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        empty = {s: 1 for s, ds in dd.items() if len(ds) == 0}  # datasets writes no shard for an empty split
        dd.save_to_disk(str(out), num_shards=empty)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stats = {s: split_stats(ds) for s, ds in dd.items()}
    info = {"level": level, "dataset_seed": dataset_seed, "splits": stats, "dropped": dict(dropped),
            "max_steps": max_steps, "time_limit_s": time_limit_s, "command": command}
    (out / "stats.json").write_text(json.dumps(info, indent=2))
    render_dataset_card(level, stats, dict(dropped), command).save(out / "README.md")
    return load_demos(out)


def load_demos(path: str | Path) -> DatasetDict:
    """Load (memory-mapped) a DatasetDict written by `make_demos`, with clear errors."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no demonstrations at {path}; create them with scripts/make_demos.py")
    try:
        dd = load_from_disk(str(path))
    except FileNotFoundError as err:
        raise ValueError(f"{path} is not a dataset saved with save_to_disk ({err})") from err
    if not isinstance(dd, DatasetDict):
        raise ValueError(f"{path} holds a single Dataset, expected a DatasetDict with splits {SPLITS}")
    if "paired" not in dd:
        raise ValueError(f"{path} has no 'paired' split (splits: {list(dd)})")
    return dd


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


def push_demos_to_hub(path: str | Path, repo_id: str, api: HfApi | None = None, private: bool = False) -> Any:
    """Upload a `make_demos` folder (arrow files + card) to a Hub dataset repo with `upload_folder`."""
    load_demos(path)  # refuse to push something that is not a demo dataset
    api = api or HfApi()
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    return api.upload_folder(
        folder_path=str(path), repo_id=repo_id, repo_type="dataset", commit_message="Upload BabyAI demos"
    )
