"""Episodes/s of evaluation: batched rollout vs one episode at a time vs the bare environment.

    python benchmarks/rollout.py [--level BabyAI-GoToSeqLocal-v0] [--episodes 256] [--batch-size 256]
                                 [--model DIR] [--device cpu] [--workers N]
                                 [--out results/rollout_benchmark.json]

(a) batched: `rollout` over `batch_size` envs, one policy call per step for all live envs (with
    `--workers N` also (a') the same with the envs stepped in N processes, `EnvPool`);
(b) one at a time: the same policy and seeds, a single env, episodes in sequence;
(c) bare env: a plain `env.step` loop with uniform random actions over all 7 (no policy, no rollout).
Episode lengths differ between a policy and random actions, so steps/s is reported next to episodes/s,
and (d) replays (a)'s actions through a plain `env.step` loop: the env cost of exactly (a)'s episodes.

Without `--model` the policy is `StandInFollower`, a randomly initialised torch module shaped like the
design's pilot follower (cell embedding, two 3x3 convs of 64 channels, LSTM 128 with attention over a GRU
instruction encoding): a STAND-IN for a trained model's per-step cost, not a model.
"""

from __future__ import annotations

import argparse
import os
import time
import zlib
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from report import write_report
from torch import nn

import msvae_hf  # noqa: F401  (registers the Local levels and the Auto classes)
from msvae_hf.envs.seeds import TEST_SEED_START
from msvae_hf.evaluation.evaluate import device_name, resolve_device
from msvae_hf.evaluation.rollout import EnvPool, EpisodeResult, evaluation_seeds, resolve_level, rollout


class StandInFollower(nn.Module):
    """Random-weight follower with a trained model's per-step shape; samples actions from its logits."""

    def __init__(self, hidden: int = 128, channels: int = 64, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.cells = nn.Embedding(3 * 20, 32)  # per-cell (object, colour, state) values, summed
        self.conv = nn.Sequential(
            nn.Conv2d(32, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
        )
        self.words = nn.Embedding(256, hidden)  # word ids hashed into 256 buckets
        self.instruction = nn.GRU(hidden, hidden, batch_first=True)
        self.direction = nn.Embedding(4, channels)
        self.lstm = nn.LSTMCell(channels + 8, hidden)
        self.previous_action = nn.Embedding(8, 8)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, 7))
        self.generator = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def reset(self, instructions: Sequence[str]) -> None:
        words = [[zlib.crc32(w.encode()) % 256 for w in text.split()] for text in instructions]
        length = max(len(w) for w in words)
        ids = torch.tensor([w + [0] * (length - len(w)) for w in words])
        self.memory, _ = self.instruction(self.words(ids))
        self.memory_mask = ids.ne(0)
        n = len(instructions)
        self.h, self.c = torch.zeros(n, self.lstm.hidden_size), torch.zeros(n, self.lstm.hidden_size)
        self.previous = torch.full((n,), 7, dtype=torch.long)

    @torch.no_grad()
    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        idx = torch.as_tensor(env_ids, dtype=torch.long)
        obs = torch.as_tensor(observations, dtype=torch.long) + torch.tensor([0, 20, 40])
        x = self.cells(obs).sum(3).permute(0, 3, 1, 2)  # [n, 32, 7, 7]
        frame = self.conv(x).amax((2, 3)) + self.direction(torch.as_tensor(directions, dtype=torch.long))
        h, c = self.lstm(torch.cat([frame, self.previous_action(self.previous[idx])], 1), (self.h[idx], self.c[idx]))
        scores = torch.einsum("nd,nld->nl", h, self.memory[idx]).masked_fill(~self.memory_mask[idx], -1e9)
        context = torch.einsum("nl,nld->nd", scores.softmax(1), self.memory[idx])
        logits = self.head(torch.cat([h, context], 1))
        actions = torch.multinomial(logits.softmax(1), 1, generator=self.generator)[:, 0]
        self.h[idx], self.c[idx], self.previous[idx] = h, c, actions
        return actions.numpy()


def timed(fn: Callable[[], list[EpisodeResult] | int]) -> tuple[float, list[EpisodeResult] | int]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bare_env(env: gym.Env, seeds: Sequence[int], actions: Sequence[Sequence[int]] | None = None) -> int:
    """Plain env.step loop: random actions over all 7, or replay `actions`; returns the steps taken."""
    rng, steps = np.random.default_rng(0), 0
    for k, seed in enumerate(seeds):
        env.reset(seed=seed)
        for t in range(10**6):
            action = int(rng.integers(7)) if actions is None else actions[k][t]
            _, _, terminated, truncated, _ = env.step(action)
            steps += 1
            if terminated or truncated:
                break
    return steps


def load_policy(model_dir: str | None, device: torch.device):
    if model_dir is None:
        if device.type != "cpu":
            raise ValueError("the stand-in policy runs on the CPU: pass --model DIR to benchmark on a GPU")
        return StandInFollower().eval(), "StandInFollower (random-weight stand-in for a trained model)"
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(model_dir).eval().to(device)
    return model.policy(AutoTokenizer.from_pretrained(model_dir)), f"{type(model).__name__} from {model_dir}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--level", default="BabyAI-GoToSeqLocal-v0")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--model", default=None, help="a saved model directory (default: the stand-in policy)")
    parser.add_argument("--seed-start", type=int, default=TEST_SEED_START)
    parser.add_argument("--workers", type=int, default=0,
                        help="also time the batched rollout with the envs in this many processes (EnvPool)")
    parser.add_argument("--device", default="cpu", help="where --model runs: cpu, cuda, auto (cuda if visible)")
    parser.add_argument("--out", default="results/rollout_benchmark.json")
    args = parser.parse_args()

    level, seeds = resolve_level(args.level), evaluation_seeds(args.episodes, args.seed_start)
    device = resolve_device(args.device)
    policy, policy_name = load_policy(args.model, device)
    envs = [gym.make(level) for _ in range(min(args.batch_size, args.episodes))]
    for env, seed in zip(envs, seeds, strict=False):  # warm-up: first resets and torch kernels
        env.reset(seed=seed)
    rollout(policy, envs[:8], seeds[:8])

    rows: dict[str, dict[str, float]] = {}

    def record(name: str, seconds: float, steps: int, results: list[EpisodeResult] | None = None) -> None:
        rows[name] = {
            "seconds": seconds,
            "episodes_per_s": len(seeds) / seconds,
            "steps_per_s": steps / seconds,
        }
        if results is not None:
            rows[name]["success_rate"] = float(np.mean([r.success for r in results]))
        speed = f"{len(seeds) / seconds:9.1f} episodes/s {steps / seconds:10.0f} steps/s"
        print(f"{name:>16}: {speed} ({seconds:.2f} s)")

    seconds, batched = timed(lambda: rollout(policy, envs, seeds))
    record("batched", seconds, sum(r.steps for r in batched), batched)
    pool_start = None
    if args.workers:
        pool_start, pool = timed(lambda: EnvPool(level, len(envs), args.workers))
        with pool:
            rollout(policy, pool, seeds[:8])  # warm-up, as for the envs above
            seconds, pooled = timed(lambda: rollout(policy, pool, seeds))
        record("batched_env_pool", seconds, sum(r.steps for r in pooled), pooled)
        if args.model and [r.actions for r in pooled] != [r.actions for r in batched]:  # greedy: must agree
            raise RuntimeError("the env pool's episodes differ from the in-process batched episodes")
    seconds, single = timed(lambda: rollout(policy, envs[:1], seeds))
    record("one_at_a_time", seconds, sum(r.steps for r in single), single)
    seconds, steps = timed(lambda: bare_env(envs[0], seeds))
    record("bare_env_random", seconds, steps)
    seconds, steps = timed(lambda: bare_env(envs[0], seeds, [r.actions for r in batched]))
    record("bare_env_replay", seconds, steps)

    ratios = {
        f"{batched}_over_{other}_{unit}": rows[batched][unit] / rows[other][unit]
        for batched in ("batched", "batched_env_pool") if batched in rows
        for other in ("bare_env_random", "bare_env_replay", "one_at_a_time")
        for unit in ("episodes_per_s", "steps_per_s")
    }
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")
    report = {
        "level": level,
        "episodes": len(seeds),
        "batch_size": len(envs),
        "policy": policy_name,
        "env_pool_workers": args.workers,
        "env_pool_start_s": pool_start,
        "device": str(device),
        "device_name": device_name(device),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "load_average_1min_after": os.getloadavg()[0],  # the machine is shared: high load = noisy numbers
        "results": rows,
        "ratios": ratios,
        "targets": {"batched_over_bare_env": 0.5, "batched_over_one_at_a_time": 10.0},
    }
    write_report(report, args.out, echo=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
