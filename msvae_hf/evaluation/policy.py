"""Online control of a follower: :class:`FollowerPolicy` (``reset`` / ``act``, or ``select_action`` on a gymnasium
vector env's observations), the :class:`~msvae_hf.evaluation.rollout.RolloutPolicy` that ``model.policy()`` returns and
``model.follow()`` rolls out. It reads the model through ``instruction_memory``, ``obs_encoder`` and
``action_decoder.step`` only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .rollout import ACT_BEFORE_RESET


def _check_instructions(instructions: Sequence[str]) -> None:
    """A policy's ``reset`` argument must be a non-empty list of non-blank strings (not one string)."""
    if isinstance(instructions, str):
        raise ValueError(f"reset() takes a list of instructions, got one string {instructions!r}: wrap it in a list")
    if len(instructions) == 0:
        raise ValueError("reset() got no instructions: pass one per episode")
    for i, text in enumerate(instructions):
        if not isinstance(text, str):
            raise ValueError(f"instruction {i} is a {type(text).__name__}, not a string: {text!r}")
        if not text.strip():
            raise ValueError(f"instruction {i} is empty ({text!r}): every episode needs an instruction to follow")


class FollowerPolicy:
    """Step-by-step control: ``reset(instructions)`` then ``act(obs, directions, env_ids)`` once per step.

    The memory (h_y, or z = mean of q(z|y)) is computed once at reset; each ``act`` runs the observation
    encoder and one LSTM step for the live envs only, all in one batched call.
    """

    def __init__(self, model, tokenizer, greedy: bool = True, seed: int | None = None) -> None:
        self.model, self.tokenizer, self.greedy = model, tokenizer, greedy
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.memory: torch.Tensor | None = None  # set by reset()

    @torch.no_grad()
    def reset(self, instructions: Sequence[str]) -> None:
        """Start one episode per instruction; each must be a non-blank string."""
        _check_instructions(instructions)
        model = self.model
        device = model.device
        enc = self.tokenizer(list(instructions), padding=True, return_tensors="pt")
        self.memory, self.memory_mask = model.instruction_memory(
            enc["input_ids"].to(device), enc["attention_mask"].to(device)
        )
        self.film = model.action_decoder.film_parameters(self.memory, self.memory_mask)
        n, hidden = len(instructions), model.config.hidden_size
        self.h = torch.zeros(1, n, hidden, device=device)
        self.c = torch.zeros(1, n, hidden, device=device)
        self.previous = torch.full((n,), model.config.num_actions, dtype=torch.long, device=device)

    @torch.no_grad()
    def select_action(self, observation: dict, episode_start: np.ndarray | None = None) -> np.ndarray:
        """One action per env of a gymnasium vector env, from its observation as it comes (``image`` [n, 7, 7,
        3], ``direction`` [n], ``mission`` n strings); ``episode_start`` [n] marks the envs whose episode begins
        with this observation, whose recurrent state starts again from their new mission: the step's ``terminated |
        truncated`` where the vector env resets in the same step (``AutoresetMode.SAME_STEP``), the previous step's
        under gymnasium's default ``NEXT_STEP`` (there the step that ends an episode returns its last frame). The
        first call starts every env."""
        missions = list(observation["mission"])
        n = len(missions)
        if self.memory is None or self.memory.shape[0] != n:
            self.reset(missions)
        elif episode_start is not None and np.asarray(episode_start).any():
            restart = torch.as_tensor(np.asarray(episode_start, dtype=bool), device=self.h.device)
            h, c, previous = self.h, self.c, self.previous
            self.reset(missions)  # memory for every env's current mission; the others keep their state
            keep = ~restart
            self.h[:, keep], self.c[:, keep], self.previous[keep] = h[:, keep], c[:, keep], previous[keep]
        return self.act(observation["image"], observation["direction"], np.arange(n))

    @torch.no_grad()
    def act(self, observations: np.ndarray, directions: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        """One action per live env: observations [n, 7, 7, 3], directions [n], env_ids [n] (batch positions)."""
        if self.memory is None:
            raise ValueError(ACT_BEFORE_RESET)
        model = self.model
        device = model.device
        observations, env_ids = np.asarray(observations), np.asarray(env_ids)
        if not np.issubdtype(observations.dtype, np.integer):
            raise ValueError(f"observations must be BabyAI's integer codes (uint8), got {observations.dtype}: pass "
                             "the env's obs['image'] as it comes, not normalised")
        directions = np.asarray(directions)
        if observations.ndim != 4 or directions.ndim != 1 or env_ids.ndim != 1 or not (
                len(observations) == len(directions) == len(env_ids)):
            raise ValueError(f"act() needs observations [n, 7, 7, 3], directions [n] and env_ids [n], got shapes "
                             f"{observations.shape}, {directions.shape} and {env_ids.shape}")
        n = self.memory.shape[0]
        if env_ids.size and (not np.issubdtype(env_ids.dtype, np.integer) or env_ids.min() < 0 or env_ids.max() >= n):
            raise ValueError(f"env_ids must be positions in the batch given to reset(), in [0, {n}), got {env_ids}")
        idx = torch.as_tensor(env_ids, dtype=torch.long, device=device)
        obs = torch.as_tensor(observations, device=device)
        dirs = torch.as_tensor(directions, dtype=torch.long, device=device)
        film = model.action_decoder.step_film(self.memory[idx], self.memory_mask[idx],
                                              None if self.film is None else self.film[idx],
                                              (self.h[:, idx], self.c[:, idx]))
        features = model.obs_encoder(obs, dirs, film)
        logits, (h, c) = model.action_decoder.step(
            features, self.previous[idx], (self.h[:, idx], self.c[:, idx]), self.memory[idx], self.memory_mask[idx]
        )
        self.h[:, idx], self.c[:, idx] = h, c
        if self.greedy:
            actions = logits.argmax(-1)
        else:
            actions = torch.multinomial(logits.float().softmax(-1).cpu(), 1, generator=self.generator)[:, 0]
            actions = actions.to(device)
        self.previous[idx] = actions
        return actions.cpu().numpy()
