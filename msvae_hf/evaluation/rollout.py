"""Batched evaluation of instruction followers in BabyAI environments.

`rollout` knows gymnasium environments and the small `RolloutPolicy` protocol (reset / act), never the
model classes, so models can call it from `generate()` without an import cycle.

Loop (one wave)::

    envs.reset(seed=s_i)  ->  policy.reset(missions)
    while any env is live:
        a = policy.act(obs[live], dir[live], live)     # ONE call for all live envs
        step the live envs only; an env is done once terminated or truncated

Seeds are consumed in waves of `len(envs)` episodes (`batch_size` when a level id is given): each wave
resets every env of the wave with its seed and calls `policy.reset` once, so `env_ids` are always
positions in the current wave. Waves (rather than refilling finished slots) keep the protocol simple:
a policy starts a batch of episodes and never has to reset one slot mid-batch. Results come back in seed
order and depend only on the seeds and the policy, not on the wave size, for any policy whose choice for
one episode does not depend on the other episodes in its batch (`RandomPolicy` and `BotPolicy` qualify).

A `VectorEnv` is stepped as a whole (its API has no partial step): finished slots get a dummy action 0 and
autoreset, and their outputs are ignored; a last wave with fewer seeds than slots pads the extra slots.
A list of envs (or a level id) steps only the live envs, so it wastes nothing and is the faster input.

An `EnvPool` steps the envs of a wave in worker processes, each owning a shard of them (slot k lives in
worker k mod W), so that a many-core machine runs the envs in parallel while the policy, called once per
step in this process, may sit on a GPU. Results are the same as with a list of envs.

``missions="same_room"`` gives each episode, once reset, another mission of its level drawn for the same room
(`msvae_hf.envs.missions.draw_same_room_mission`): the policy reads it and the level's verifier judges the episode
by it. A follower that reads scores on such missions as on the episodes' own; one that ignores its instruction
scores about as a random walk does. ``missions`` given as texts (one per seed) makes each the episode's mission,
judged by the verifier (`set_mission`): text outside the levels' grammar is refused before any episode, one naming
nothing in its episode's room (or that the level cannot judge) when that episode is reset, before it steps. Only
``missions="own"`` runs on a `VectorEnv`.

Policies that need the environments themselves (the BabyAI bot) define `bind_envs(envs)`; the rollout
calls it after resetting a wave and before `policy.reset`, with the unwrapped-able gymnasium envs of the
wave in batch order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from ..envs.levels import resolve_level
from ..envs.missions import InstructionError, draw_same_room_mission, parse_mission, set_mission
from ..envs.seeds import TEST_SEED_START, check_seed


@runtime_checkable
class RolloutPolicy(Protocol):
    """What `rollout` needs from a policy; models expose `model.policy(tokenizer=None)` returning one."""

    def reset(self, instructions: Sequence[str]) -> None:
        """Start a batch of `len(instructions)` episodes (clears any recurrent state)."""

    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        """Observations uint8 [n, 7, 7, 3] and directions [n] for the n live envs, `env_ids` their
        positions in the batch given to `reset`; returns n action ids."""


@dataclass
class EpisodeResult:
    """One evaluated episode. `instruction` is the mission by which success is judged: the episode's own, also
    where the follower was told other words (``instructions=``; those are the caller's), or with
    ``missions="same_room"`` the one drawn for its room, or the text given as its mission (``missions=[...]``, in
    lower case with single spaces). `instructions=` belongs to `evaluate_policy` and `follow`, which wrap the policy.
    `frames` (RGB, steps + 1 of them), `observations` [steps, 7, 7, 3] and `directions` [steps] (before each action)
    are filled only when recording was asked for."""

    seed: int
    instruction: str
    actions: list[int]
    steps: int
    reward: float
    success: bool
    frames: list[np.ndarray] | None = field(default=None, repr=False)
    observations: np.ndarray | None = field(default=None, repr=False)
    directions: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly record without the recordings."""
        record = asdict(self)
        for key in ("frames", "observations", "directions"):
            record.pop(key)
        return record


#: What `rollout`'s ``missions`` takes: each episode's own mission, or another for the same room.
MISSIONS = ("own", "same_room")

ACT_BEFORE_RESET = "act() before reset(): call reset(instructions) first"


def evaluation_seeds(n: int, start: int = TEST_SEED_START) -> list[int]:
    """`n` fixed evaluation seeds from `start`, disjoint from the demonstrations' (`msvae_hf.envs.seeds`)."""
    return list(range(start, start + n))


class RandomPolicy:
    """Uniform random actions over the first `num_actions` ids: 3 = left/right/forward, 7 = all.

    Episode k of a run (counted across `reset` calls) draws from the k-th child of `SeedSequence(seed)`,
    so results do not depend on how episodes are batched.
    """

    def __init__(self, num_actions: int = 3, seed: int = 0):
        if num_actions not in (3, 7):
            raise ValueError(f"num_actions must be 3 (left/right/forward) or 7 (all), got {num_actions}")
        self.num_actions = num_actions
        self._seeds = np.random.SeedSequence(seed)
        self._rngs: list[np.random.Generator] | None = None  # set by reset()

    def reset(self, instructions: Sequence[str]) -> None:
        self._rngs = [np.random.default_rng(s) for s in self._seeds.spawn(len(instructions))]

    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        if self._rngs is None:
            raise ValueError(ACT_BEFORE_RESET)
        return np.array([self._rngs[i].integers(self.num_actions) for i in env_ids], dtype=np.int64)


class BotPolicy:
    """minigrid's BabyAIBot (the demonstrator) as a policy; needs the envs through `bind_envs`."""

    def __init__(self) -> None:
        self._envs: list[gym.Env] = []
        self._bots: list[Any] | None = None  # set by reset()

    def bind_envs(self, envs: Sequence[gym.Env]) -> None:
        self._envs = list(envs)

    def reset(self, instructions: Sequence[str]) -> None:
        from minigrid.utils.baby_ai_bot import BabyAIBot

        if len(self._envs) != len(instructions):
            raise RuntimeError("BotPolicy needs bind_envs(envs) for the batch before reset (rollout does it)")
        self._bots = [BabyAIBot(env) for env in self._envs]

    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        if self._bots is None:
            raise ValueError(ACT_BEFORE_RESET)
        return np.array([int(self._bots[i].replan()) for i in env_ids], dtype=np.int64)


class GivenInstructions:
    """Wraps a policy so that, wave after wave, it reads the caller's instructions (one per seed, in seed order)
    instead of the envs' missions; the envs still judge success by their own missions."""

    def __init__(self, policy: RolloutPolicy, instructions: Sequence[str]) -> None:
        self.policy, self.instructions, self.used = policy, list(instructions), 0

    def reset(self, missions: Sequence[str]) -> None:
        batch = self.instructions[self.used : self.used + len(missions)]
        if len(batch) != len(missions):
            raise ValueError(f"{len(self.instructions)} instructions given for more episodes than that")
        self.used += len(missions)
        self.policy.reset(batch)

    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        return self.policy.act(observations, directions, env_ids)


class _EnvBatch:
    """A wave of envs behind one interface: a list of envs, or a VectorEnv stepped as a whole."""

    def __init__(self, envs: Sequence[gym.Env] | gym.vector.VectorEnv):
        self.vector: gym.vector.VectorEnv | None = None
        self.envs: list[gym.Env] | None = None  # None for a VectorEnv without `.envs` (async)
        if isinstance(envs, gym.vector.VectorEnv):
            mode = envs.metadata.get("autoreset_mode")
            if getattr(mode, "name", mode) == "DISABLED":
                raise ValueError("a VectorEnv with autoreset_mode DISABLED cannot be stepped past an episode's end, "
                                 "as a wave steps every slot: make it with autoreset_mode NEXT_STEP or SAME_STEP, or "
                                 "pass a list of envs")
            self.vector, self.size = envs, envs.num_envs
            self.envs = list(envs.envs) if hasattr(envs, "envs") else None
        else:
            self.envs, self.size = list(envs), len(envs)

    def reset(self, seeds: list[int], missions: str | list[str] = "own") -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Reset slot i with seeds[i]; then each gets another mission for its room (``missions`` "same_room") or
        the text ``missions[i]``, as `rollout`'s ``missions``."""
        if self.vector is not None:
            if missions != "own":
                raise ValueError("missions other than 'own' need a list of envs, a level id or an EnvPool, not a "
                                 "VectorEnv")
            padded = seeds + [seeds[-1]] * (self.size - len(seeds))  # pad slots never become live
            obs, _ = self.vector.reset(seed=padded)
            return obs["image"], obs["direction"], list(obs["mission"])[: len(seeds)]
        outs = [env.reset(seed=s)[0] for env, s in zip(self.envs, seeds, strict=False)]
        told = [o["mission"] for o in outs]
        if missions == "same_room":
            told = [draw_same_room_mission(env, s) for env, s in zip(self.envs, seeds, strict=False)]
        elif missions != "own":
            told = [set_mission(env, text) for env, text in zip(self.envs, missions, strict=False)]
        return _stack(outs) + (told,)

    def step(self, actions: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step the live slots with `actions`; returns obs image, direction, reward, done for them."""
        if self.vector is not None:
            full = np.zeros(self.size, dtype=np.int64)
            full[live] = actions
            obs, reward, term, trunc, _ = self.vector.step(full)
            return obs["image"][live], obs["direction"][live], reward[live], (term | trunc)[live]
        outs = [self.envs[i].step(int(a)) for i, a in zip(live, actions, strict=True)]
        image, direction = _stack([o[0] for o in outs])
        return image, direction, np.array([o[1] for o in outs]), np.array([o[2] or o[3] for o in outs])

    def frames(self, ids: np.ndarray) -> list[np.ndarray]:
        """RGB frames of the slots `ids`."""
        if self.envs is None:
            every = self.vector.call("get_frame")  # type: ignore[union-attr]
            return [every[i] for i in ids]
        return [self.envs[i].unwrapped.get_frame() for i in ids]


def _pool_worker(conn: Any, level: str, num_envs: int, inherited: Sequence[Any] = ()) -> None:
    """An `EnvPool` worker: an `_EnvBatch` of `num_envs` envs of `level`, driven over `conn`.

    Each request is (method, args) of `_EnvBatch`; the answer is ("ok", result), or ("error", traceback)
    when the env raised, so the caller sees the worker's own error. `inherited`: the pool's ends of the pipes,
    which a forked worker holds copies of; closed here, so that the pool's process dying (killed, say) ends the
    worker too (its `recv` then sees the pipe's end) rather than leaving it waiting, with its envs, for ever.
    """
    import traceback

    from ..envs import levels as _registers_levels  # noqa: F401  (the Local levels, in a spawned process)

    for end in inherited:
        end.close()
    batch = _EnvBatch([gym.make(level) for _ in range(num_envs)])
    while True:
        try:
            command, args = conn.recv()
        except EOFError:  # the pool's process is gone
            return
        if command == "close":
            conn.close()
            return
        try:
            conn.send(("ok", getattr(batch, command)(*args)))
        except InstructionError as err:  # a mission the room cannot take: the caller's one line, not a traceback
            conn.send(("instruction", str(err)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


class EnvPool:
    """`num_envs` envs of `level` in `num_workers` processes, stepped in parallel; a `rollout` input.

    Slot k lives in worker k mod `num_workers` (as its local slot k // `num_workers`), so the live envs of a
    wave stay spread over the workers. Use it as a context manager (or call `close`). `start_method` is
    multiprocessing's: "fork" (the default where there is one) starts fast and needs no
    `if __name__ == "__main__"` guard; the workers use only gymnasium and numpy, never torch or CUDA.
    "spawn"/"forkserver" work where the caller has that guard. After an error (a worker died or its env
    raised) the pool refuses further calls: close it and make a new one.
    """

    def __init__(self, level: str, num_envs: int, num_workers: int, start_method: str | None = None) -> None:
        import multiprocessing as mp

        if num_envs < 1 or num_workers < 1:
            raise ValueError(f"EnvPool needs num_envs >= 1 and num_workers >= 1, got {num_envs} and {num_workers}")
        self.level, self.size = resolve_level(level), num_envs
        self.num_workers = min(num_workers, num_envs)
        self.envs = None  # not in this process: policies that need the envs (the bot) cannot run on a pool
        self._broken = False
        if start_method is None:
            start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        context = mp.get_context(start_method)
        self._conns, self._procs = [], []
        for w in range(self.num_workers):
            parent, child = context.Pipe()
            shard = len(range(w, num_envs, self.num_workers))
            inherited = [*self._conns, parent] if start_method == "fork" else []
            proc = context.Process(target=_pool_worker, args=(child, self.level, shard, inherited), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    def _call(self, command: str, slots: Sequence[int], make_args: Any, parts: int) -> list[list[Any]]:
        """`_EnvBatch.<command>` on the workers that own `slots`; `make_args(local slots, positions)` gives
        a worker's arguments. Returns the `parts` parts of the answers, each in the order of `slots`."""
        if self._broken:
            raise RuntimeError("this EnvPool stopped after an earlier error: close it and make a new one")
        positions: list[list[int]] = [[] for _ in self._conns]
        for j, k in enumerate(slots):
            positions[int(k) % self.num_workers].append(j)
        try:
            for w, conn in enumerate(self._conns):
                if positions[w]:
                    local = [int(slots[j]) // self.num_workers for j in positions[w]]
                    try:
                        conn.send((command, make_args(local, positions[w])))
                    except OSError as err:  # BrokenPipeError, ConnectionResetError
                        raise self._died(w) from err
            out: list[list[Any]] = [[None] * len(slots) for _ in range(parts)]
            for w in range(len(self._conns)):
                if positions[w]:
                    answer = self._receive(w)
                    for part, values in enumerate((answer,) if parts == 1 else answer):
                        for j, value in zip(positions[w], values, strict=True):
                            out[part][j] = value
            return out
        except BaseException:
            self._broken = True  # answers may be left unread in the pipes: never reuse them
            raise

    def _receive(self, w: int) -> Any:
        try:
            status, payload = self._conns[w].recv()
        except (EOFError, OSError) as err:
            raise self._died(w) from err
        if status == "instruction":
            raise InstructionError(payload)
        if status == "error":
            raise RuntimeError(f"EnvPool worker {w} ({self.level}) failed:\n{payload}")
        return payload

    def _died(self, w: int) -> RuntimeError:
        self._procs[w].join(timeout=1)
        return RuntimeError(f"EnvPool worker {w} ({self.level}) died, exit code {self._procs[w].exitcode}")

    def reset(self, seeds: list[int], missions: str | list[str] = "own") -> tuple[np.ndarray, np.ndarray, list[str]]:
        # a worker's slots of a wave are its local slots 0, 1, ... in order, as _EnvBatch.reset wants them
        def arguments(local: list[int], pos: list[int]) -> tuple[list[int], str | list[str]]:
            return [seeds[j] for j in pos], missions if isinstance(missions, str) else [missions[j] for j in pos]

        image, direction, told = self._call("reset", range(len(seeds)), arguments, parts=3)
        return np.stack(image), np.array(direction), told

    def step(self, actions: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step the live slots with `actions`; returns obs image, direction, reward, done for them."""
        image, direction, reward, done = self._call(
            "step", live, lambda local, pos: (np.asarray(actions)[pos], np.array(local)), parts=4
        )
        return np.stack(image), np.array(direction), np.array(reward), np.array(done)

    def frames(self, ids: np.ndarray) -> list[np.ndarray]:
        return self._call("frames", ids, lambda local, pos: (np.array(local),), parts=1)[0]

    def close(self) -> None:
        for conn, proc in zip(self._conns, self._procs, strict=True):
            if proc.is_alive():
                try:
                    conn.send(("close", None))
                except OSError:  # a pipe already broken: the worker is gone
                    pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        self._conns, self._procs = [], []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stack(obs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    return np.stack([o["image"] for o in obs]), np.array([o["direction"] for o in obs])


def rollout(
    policy: RolloutPolicy,
    envs_or_level: str | Sequence[gym.Env] | gym.vector.VectorEnv | EnvPool,
    seeds: Sequence[int],
    max_steps: int | None = None,
    record_frames: bool = False,
    record_observations: bool = False,
    progress: bool = False,
    batch_size: int | None = None,
    missions: str | Sequence[str] = "own",
) -> list[EpisodeResult]:
    """Run one episode per seed and return the results in seed order.

    Args:
        policy: a `RolloutPolicy`; `policy.act` is called once per step for all live envs of a wave.
        envs_or_level: a gymnasium id or BabyAI short name (then `min(batch_size, len(seeds))` envs are
            made, one per seed when `batch_size` is None), a list of envs, a `VectorEnv`, or an `EnvPool`.
        seeds: one env seed per episode.
        max_steps: stop an episode after this many steps (reward 0) even if the env would go on;
            None keeps the env's own limit.
        record_frames: keep RGB frames (`get_frame()`) before the first and after every action.
        record_observations: keep the egocentric observations and directions before every action.
        progress: show a tqdm bar over episodes.
        batch_size: wave size when a level id is given.
        missions: "own" (each seed's mission), "same_room" (another mission of the level for the seed's room,
            which the episode is judged by; module docstring) or one instruction text per seed (each episode's
            mission, judged by the level's verifier). `EpisodeResult.instruction` is the mission the episode was
            judged by.
    """
    if isinstance(missions, str):
        if missions not in MISSIONS:
            raise ValueError(f"missions must be one of {', '.join(MISSIONS)} or one instruction per seed, got "
                             f"{missions!r}")
    elif len(missions) != len(seeds):
        raise ValueError(f"{len(missions)} missions for {len(seeds)} seeds")
    else:
        for text in missions:  # the grammar, before any episode runs (the room is checked at each reset)
            parse_mission(" ".join(str(text).lower().split()))
    seeds = [check_seed(s) for s in seeds]
    if not seeds:
        return []
    if isinstance(envs_or_level, str):
        level = resolve_level(envs_or_level)
        n_envs = min(batch_size or len(seeds), len(seeds))
        envs_or_level = [gym.make(level) for _ in range(n_envs)]
    batch = envs_or_level if isinstance(envs_or_level, EnvPool) else _EnvBatch(envs_or_level)
    if batch.size == 0:
        raise ValueError("rollout needs at least one env")
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(seeds), desc="episodes")
    results: list[EpisodeResult] = []
    for start in range(0, len(seeds), batch.size):
        results += _run_wave(
            policy, batch, seeds[start : start + batch.size], max_steps, record_frames, record_observations,
            missions if isinstance(missions, str) else list(missions[start : start + batch.size]),
        )
        if bar is not None:
            bar.update(len(results) - bar.n)
    if bar is not None:
        bar.close()
    return results


def _run_wave(
    policy: RolloutPolicy,
    batch: _EnvBatch | EnvPool,
    seeds: list[int],
    max_steps: int | None,
    record_frames: bool,
    record_observations: bool,
    told: str | list[str] = "own",
) -> list[EpisodeResult]:
    n = len(seeds)
    image, direction, missions = batch.reset(seeds, told)
    image, direction = image[:n], direction[:n]
    if hasattr(policy, "bind_envs"):
        if batch.envs is None:
            raise ValueError(f"{type(policy).__name__} needs the envs; pass a list or a SyncVectorEnv")
        policy.bind_envs(batch.envs[:n])
    policy.reset(missions)
    actions: list[list[int]] = [[] for _ in range(n)]
    rewards = np.zeros(n)
    live = np.arange(n)
    frames = [[f] for f in batch.frames(live)] if record_frames else None
    seen_obs: list[list[np.ndarray]] = [[] for _ in range(n)]
    seen_dir: list[list[int]] = [[] for _ in range(n)]
    while live.size:
        if record_observations:
            for j, i in enumerate(live):
                seen_obs[i].append(image[j])
                seen_dir[i].append(int(direction[j]))
        chosen = np.asarray(policy.act(image.astype(np.uint8), direction, live)).astype(np.int64)
        image, direction, reward, done = batch.step(chosen, live)
        for j, i in enumerate(live):
            actions[i].append(int(chosen[j]))
            rewards[i] = reward[j]
        if frames is not None:
            new = batch.frames(live)
            for j, i in enumerate(live):
                frames[i].append(new[j])
        if max_steps is not None:
            done = done | np.array([len(actions[i]) >= max_steps for i in live], dtype=bool)
        keep = ~np.asarray(done, dtype=bool)
        live, image, direction = live[keep], image[keep], direction[keep]
    return [
        EpisodeResult(
            seed=seeds[i],
            instruction=missions[i],
            actions=actions[i],
            steps=len(actions[i]),
            reward=float(rewards[i]),
            success=bool(rewards[i] > 0),
            frames=frames[i] if frames is not None else None,
            observations=np.stack(seen_obs[i]).astype(np.uint8) if record_observations else None,
            directions=np.array(seen_dir[i], dtype=np.int64) if record_observations else None,
        )
        for i in range(n)
    ]


def evaluate_policy(
    policy: RolloutPolicy,
    level: str,
    episodes: int = 1000,
    seed_start: int = TEST_SEED_START,
    batch_size: int = 256,
    progress: bool = False,
    num_workers: int = 0,
    instructions: Sequence[str] | None = None,
    missions: str = "own",
) -> list[EpisodeResult]:
    """Roll `policy` out on `episodes` evaluation seeds of `level`, `batch_size` envs at a time; with
    `num_workers` > 0 the envs step in that many processes (`EnvPool`), with the same results. `instructions`
    (one per seed) replaces the missions the policy reads (success is still judged by each env's own);
    `missions` as `rollout`'s ("own" or "same_room")."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0 (0: step the envs in this process), got {num_workers}")
    seeds = evaluation_seeds(episodes, seed_start)
    if instructions is not None:
        if len(instructions) != len(seeds):
            raise ValueError(f"{len(instructions)} instructions for {len(seeds)} seeds")
        policy = GivenInstructions(policy, instructions)
    if num_workers > 0 and seeds:
        with EnvPool(level, min(batch_size, len(seeds)), num_workers) as pool:
            return rollout(policy, pool, seeds, progress=progress, missions=missions)
    return rollout(policy, level, seeds, batch_size=batch_size, progress=progress, missions=missions)
