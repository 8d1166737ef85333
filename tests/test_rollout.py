"""The batched rollout against real BabyAI environments (GoToLocal: one room, 64 steps)."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import imageio.v2 as imageio
import minigrid  # noqa: F401  (registers the BabyAI levels)
import numpy as np
import pytest

from msvae_hf.evaluation.metrics import summarize_episodes as summarize
from msvae_hf.evaluation.render import render_rollouts, save_episode_gif
from msvae_hf.evaluation.rollout import (
    BotPolicy,
    EnvPool,
    RandomPolicy,
    RolloutPolicy,
    evaluate_policy,
    evaluation_seeds,
    resolve_level,
    rollout,
)

LEVEL = "BabyAI-GoToLocal-v0"


class ObservationHashPolicy:
    """Deterministic and recurrent: the action depends on the observation, the direction and a per-env
    step counter. Counts `act` calls to check that the rollout makes one call per step for the batch."""

    def __init__(self) -> None:
        self.calls = 0
        self.steps = np.zeros(0, dtype=np.int64)

    def reset(self, instructions: Sequence[str]) -> None:
        self.steps = np.zeros(len(instructions), dtype=np.int64)

    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        assert observations.dtype == np.uint8 and observations.shape == (len(env_ids), 7, 7, 3)
        self.calls += 1
        self.steps[env_ids] += 1
        keys = observations.reshape(len(env_ids), -1).astype(np.int64).sum(1) + directions + self.steps[env_ids]
        return keys % 3


def actions_of(results) -> list[list[int]]:
    return [r.actions for r in results]


def test_policies_satisfy_the_protocol() -> None:
    for policy in (RandomPolicy(), BotPolicy(), ObservationHashPolicy()):
        assert isinstance(policy, RolloutPolicy)


def test_success_is_positive_reward_and_steps_count_actions() -> None:
    results = rollout(RandomPolicy(3, seed=0), LEVEL, evaluation_seeds(30))
    assert [r.seed for r in results] == evaluation_seeds(30)
    assert 0 < sum(r.success for r in results) < 30  # both outcomes occur, so the check below bites
    for r in results:
        assert r.success == (r.reward > 0)
        assert r.steps == len(r.actions) and 1 <= r.steps <= 64
        assert set(r.actions) <= {0, 1, 2}
        assert r.steps == 64 or r.success  # a failed episode only ends at the env's step limit
    summary = summarize(results)
    assert summary["success_rate"] == pytest.approx(np.mean([r.success for r in results]))
    assert summary["episodes"] == 30


def test_rollout_is_deterministic_given_seeds() -> None:
    seeds = evaluation_seeds(12, start=5_000)
    first = [r.to_dict() for r in rollout(RandomPolicy(7, seed=3), LEVEL, seeds)]
    again = [r.to_dict() for r in rollout(RandomPolicy(7, seed=3), LEVEL, seeds)]
    other = [r.to_dict() for r in rollout(RandomPolicy(7, seed=4), LEVEL, seeds)]
    assert first == again
    assert first != other


def test_batched_equals_one_at_a_time() -> None:
    seeds = evaluation_seeds(10)
    policy = ObservationHashPolicy()
    batched = rollout(policy, LEVEL, seeds)
    assert policy.calls == max(r.steps for r in batched)  # one act call per step for all live envs
    for batch_size in (1, 4):  # one at a time; waves of 4, 4, 2
        assert actions_of(rollout(ObservationHashPolicy(), LEVEL, seeds, batch_size=batch_size)) == actions_of(batched)
    # the random policy's streams are per episode, so its results do not depend on the batching either
    random_batched = rollout(RandomPolicy(3, seed=1), LEVEL, seeds)
    assert actions_of(rollout(RandomPolicy(3, seed=1), LEVEL, seeds, batch_size=3)) == actions_of(random_batched)


def test_bot_solves_go_to_local() -> None:
    results = rollout(BotPolicy(), LEVEL, evaluation_seeds(20))
    assert summarize(results)["success_rate"] >= 0.95


def test_vector_env_and_env_list_give_the_same_episodes() -> None:
    seeds = evaluation_seeds(7)  # waves of 3, 3, 1 (the last wave pads the vector env)
    vector = gym.make_vec(LEVEL, num_envs=3, vectorization_mode="sync")
    env_list = [gym.make(LEVEL) for _ in range(3)]
    for make_policy in (BotPolicy, ObservationHashPolicy):
        from_vector = rollout(make_policy(), vector, seeds)
        from_list = rollout(make_policy(), env_list, seeds)
        assert [r.to_dict() for r in from_vector] == [r.to_dict() for r in from_list]
    vector.close()


def test_env_pool_gives_the_same_episodes() -> None:
    """Envs stepped in worker processes: the same actions, rewards, observations and frames as in-process
    envs, in waves of 3, 3, 1 (3 slots over 2 workers); evaluate_policy's num_workers changes nothing."""
    seeds = evaluation_seeds(7)
    in_process = rollout(ObservationHashPolicy(), [gym.make(LEVEL) for _ in range(3)], seeds,
                         record_observations=True, record_frames=True)
    with EnvPool(LEVEL, 3, 2) as pool:
        pooled = rollout(ObservationHashPolicy(), pool, seeds, record_observations=True, record_frames=True)
        with pytest.raises(ValueError, match="BotPolicy needs the envs"):
            rollout(BotPolicy(), pool, seeds)
    for a, b in zip(in_process, pooled, strict=True):
        assert a.to_dict() == b.to_dict()
        assert np.array_equal(a.observations, b.observations) and np.array_equal(a.directions, b.directions)
        assert all(np.array_equal(x, y) for x, y in zip(a.frames, b.frames, strict=True))
    plain = evaluate_policy(RandomPolicy(7, seed=3), LEVEL, episodes=5, batch_size=4)
    pooled = evaluate_policy(RandomPolicy(7, seed=3), LEVEL, episodes=5, batch_size=4, num_workers=2)
    assert [r.to_dict() for r in plain] == [r.to_dict() for r in pooled]


class InvalidActionPolicy(ObservationHashPolicy):
    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        return np.full(len(env_ids), 99)


def test_env_pool_workers_end_with_the_process_that_made_the_pool() -> None:
    """A process killed while its pool is open (a run stopped by SIGKILL or SIGTERM) leaves no worker behind: each
    forked worker closes its copies of the pool's pipe ends, so the pool's death reads as the pipe's end there."""
    import subprocess
    import sys

    import psutil

    make = ("import time; from msvae_hf.evaluation.rollout import EnvPool\n"
            f"pool = EnvPool({LEVEL!r}, 3, 3)\n"
            "print(*[p.pid for p in pool._procs], flush=True)\n"
            "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", make], stdout=subprocess.PIPE, text=True)
    try:
        workers = [psutil.Process(int(pid)) for pid in owner.stdout.readline().split()]
        assert len(workers) == 3 and all(w.is_running() for w in workers)
    finally:
        owner.kill()
        owner.wait()
    _, alive = psutil.wait_procs(workers, timeout=30)
    alive = [w for w in alive if w.status() != psutil.STATUS_ZOMBIE]
    for w in alive:
        w.kill()
    assert alive == []


def test_env_pool_errors_name_the_worker_and_the_cause() -> None:
    """An env's own error comes back with the worker's traceback; a dead worker is named; after either the
    pool refuses to go on (answers could be out of step); bad sizes are errors."""
    with EnvPool(LEVEL, 2, 2) as pool:
        with pytest.raises(RuntimeError, match="(?s)EnvPool worker 0 .* failed.*99"):
            rollout(InvalidActionPolicy(), pool, evaluation_seeds(2))
        with pytest.raises(RuntimeError, match="stopped after an earlier error"):
            rollout(RandomPolicy(3), pool, evaluation_seeds(2))
    with EnvPool(LEVEL, 2, 2) as pool:
        pool._procs[1].kill()
        pool._procs[1].join()
        with pytest.raises(RuntimeError, match="EnvPool worker 1 .* died"):
            rollout(RandomPolicy(3), pool, evaluation_seeds(2))
    with pytest.raises(ValueError, match="num_workers >= 1"):
        EnvPool(LEVEL, 2, 0)
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        evaluate_policy(RandomPolicy(3), LEVEL, episodes=2, num_workers=-1)


def test_max_steps_cuts_episodes() -> None:
    results = rollout(RandomPolicy(3, seed=0), LEVEL, evaluation_seeds(8), max_steps=5)
    assert all(r.steps <= 5 for r in results) and any(r.steps == 5 for r in results)


def test_recording_and_gif(tmp_path) -> None:
    (episode,) = rollout(BotPolicy(), LEVEL, [11], record_frames=True, record_observations=True)
    assert len(episode.frames) == episode.steps + 1
    assert episode.observations.shape == (episode.steps, 7, 7, 3) and episode.directions.shape == (episode.steps,)
    path = save_episode_gif(episode.frames, tmp_path / "ep.gif", episode.instruction, caption="a description")
    frames = imageio.mimread(path)
    assert len(frames) == episode.steps + 1
    height, width = episode.frames[0].shape[:2]
    assert frames[0].shape[1] == width and frames[0].shape[0] > height  # text band under the frame
    # identical frames (an agent turning in place four times) must not be merged by the GIF writer
    still = [episode.frames[0]] * 3
    assert len(imageio.mimread(save_episode_gif(still, tmp_path / "still.gif", "stay"))) == 3


def test_level_names_and_evaluate_policy() -> None:
    assert resolve_level("GoToLocal") == LEVEL == resolve_level(LEVEL)
    with pytest.raises(ValueError, match="NoSuchLevel"):
        resolve_level("NoSuchLevel")
    results = evaluate_policy(BotPolicy(), "GoToLocal", episodes=6, seed_start=123, batch_size=4)
    assert [r.seed for r in results] == list(range(123, 129))
    with pytest.raises(ValueError, match="num_actions"):
        RandomPolicy(num_actions=5)


def test_render_rollouts_names_and_captions(tmp_path) -> None:
    seen: list[int] = []

    def describe(episodes) -> list[str]:
        seen.extend(e.observations.shape[0] for e in episodes)
        return [f"caption {e.seed}" for e in episodes]

    paths = render_rollouts(BotPolicy(), LEVEL, [3, 4], tmp_path, describe=describe)
    assert [p.name for p in paths] == ["3_success.gif", "4_success.gif"]
    assert len(seen) == 2 and all(len(imageio.mimread(p)) == n + 1 for p, n in zip(paths, seen))
