"""The paper's Local BabyAI levels (App. C): registration, bot success, lengths, quiet resets."""

from __future__ import annotations

import contextlib
import io

import gymnasium as gym
import numpy as np
import pytest
from minigrid.envs.babyai.core.levelgen import LevelGen
from minigrid.utils.baby_ai_bot import BabyAIBot

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf.envs.levels import BOSS_LOCAL_ID, GOTOSEQ_LOCAL_ID, LEVELS, resolve_level

# App. C, Table "Average length of trajectories and language instructions": (steps, words).
APP_C = {GOTOSEQ_LOCAL_ID: (8.85, 10.56), BOSS_LOCAL_ID: (12.07, 11.57)}


def bot_episodes(env_id: str, seeds: range) -> tuple[list[bool], list[int], list[int]]:
    """Success, steps and instruction words of the bot's episodes."""
    env = gym.make(env_id)
    success, steps, words = [], [], []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        bot, reward, t, done = BabyAIBot(env.unwrapped), 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(bot.replan())
            t, done = t + 1, terminated or truncated
        success.append(reward > 0)
        steps.append(t)
        words.append(len(env.unwrapped.mission.split()))
    return success, steps, words


def test_levels_register_on_import() -> None:
    for env_id in APP_C:
        assert env_id in gym.registry
        env = gym.make(env_id)
        obs, _ = env.reset(seed=0)
        assert obs["image"].shape == (7, 7, 3)
        assert env.unwrapped.width == env.unwrapped.height == 8  # one 8x8 room, no doors
        assert not any(o is not None and o.type == "door" for o in env.unwrapped.grid.grid)


@pytest.mark.parametrize("env_id", list(APP_C))
def test_bot_solves_and_lengths_match_app_c(env_id: str) -> None:
    success, steps, words = bot_episodes(env_id, range(1000, 1500))
    assert np.mean(success[:200]) >= 0.99
    paper_steps, paper_words = APP_C[env_id]
    assert abs(np.mean(steps) / paper_steps - 1) < 0.15, np.mean(steps)
    assert abs(np.mean(words) / paper_words - 1) < 0.15, np.mean(words)


def test_no_door_instructions() -> None:
    env = gym.make(BOSS_LOCAL_ID)
    missions = [env.reset(seed=s)[0]["mission"] for s in range(300)]
    assert not any("open" in m or "door" in m for m in missions)
    assert any("pick up" in m for m in missions) and any("put" in m for m in missions)


def test_rejection_messages_do_not_reach_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    # The plain LevelGen with BossLocal's arguments prints "Sampling rejected: ..." for seed 0 ...
    raw = LevelGen(num_rows=1, num_cols=1, num_dists=8, locked_room_prob=0, locations=False,
                   unblocking=False, action_kinds=["goto", "pickup", "putnext"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        raw.reset(seed=0)
    assert "Sampling rejected" in buf.getvalue()
    # ... the registered levels keep it quiet.
    for env_id in APP_C:
        env = gym.make(env_id)
        for seed in range(20):
            env.reset(seed=seed)
    assert capsys.readouterr().out == ""


def test_resolve_level() -> None:
    assert resolve_level("BossLocal") == BOSS_LOCAL_ID
    assert resolve_level("GoToSeqLocal") == GOTOSEQ_LOCAL_ID
    assert resolve_level("GoToSeq") == "BabyAI-GoToSeq-v0"
    assert resolve_level("BabyAI-BossLevel-v0") == "BabyAI-BossLevel-v0"
    with pytest.raises(ValueError, match="BossLocal.*GoToSeq"):
        resolve_level("BossLocl")
    assert all(v in gym.registry for v in LEVELS.values())
