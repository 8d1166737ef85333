"""The follower and speaker sides every model shares: :class:`FollowerMixin` (``policy()``, ``follow()``) and
:class:`SpeakerMixin` (``generate()`` through transformers' GenerationMixin, ``describe()``). The baselines
(``modeling_baselines.py``) and MS-VAE (``modeling_msvae.py``) say only what their memory is
(``instruction_memory``, ``trajectory_memory``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import GenerationMixin

from ..evaluation.policy import FollowerPolicy
from .losses import sequence_log_likelihood


class FollowerMixin:
    """Follower side shared by the baseline follower and MS-VAE: ``follow()`` rolls out in envs, ``policy()`` steps
    (``reset`` / ``act``, or ``select_action`` on a gymnasium vector env's observations). ``generate`` keeps
    transformers' meaning (trajectory tensors -> token ids) and names these where it is given envs."""

    def instruction_memory(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """The memory the action decoder attends to, from an instruction: (memory [B, M, Dm], mask [B, M])."""
        raise NotImplementedError

    def action_log_likelihood(self, input_ids, attention_mask, observations, directions, actions, trajectory_mask):
        """Teacher-forced log p(a | y, o) = sum_t log p(a_t | y, o_1:t, a_1:t-1) (Eq. 5 with the instruction
        memory): (log-likelihood [B], logits [B, T, A], zeros at padded steps). The decoder's head runs on the real
        steps only (its LSTM too, but for ``film_recurrent``, which steps over the padded batch)."""
        memory, memory_mask = self.instruction_memory(input_ids, attention_mask)
        frames = self.encode_frames(observations, directions, trajectory_mask)
        states = self.action_decoder.run(frames, actions, trajectory_mask, memory, memory_mask)
        steps = self.backend.positions(trajectory_mask)
        logits = self.action_decoder.logits(steps.gather(states), memory, memory_mask, steps)
        ll = sequence_log_likelihood(logits, actions, steps, self.config.loss_reduction)
        return ll, steps.scatter(logits)

    def roll_out(self, envs, seeds, **kwargs):
        """``generate()``'s following form: the episodes of ``follow(envs, seeds, **kwargs)``, its arguments checked
        against the speaking form's so that a mixed call says which call is which."""
        speaking = sorted(set(kwargs) - set(FOLLOW_ARGUMENTS))
        if speaking:
            raise ValueError(f"generate(envs, seeds, ...) rolls out, as follow() does, and takes {FOLLOW_ARGUMENTS}; "
                             f"got {speaking}: decoding arguments belong to generate(observations, directions, "
                             "actions, trajectory_mask, ...), which speaks")
        if seeds is None:
            raise ValueError("generate(envs, seeds) rolls out one episode per seed: pass seeds=[...]")
        return self.follow(envs, seeds, **kwargs)

    def policy(self, tokenizer=None, greedy: bool = True, seed: int | None = None) -> FollowerPolicy:
        """A :class:`~msvae_hf.evaluation.rollout.RolloutPolicy` for online control (reset / act with recurrent
        state)."""
        return FollowerPolicy(self, self._resolve_tokenizer(tokenizer), greedy=greedy, seed=seed)

    def follow(
        self,
        envs,
        seeds: Sequence[int],
        tokenizer=None,
        max_steps: int | None = None,
        instructions: Sequence[str] | None = None,
        **kwargs,
    ):
        """Roll out in BabyAI envs (a level id, a list of envs or a VectorEnv), the model batched across envs.

        By default the agent follows each env's own mission; ``instructions`` (one per seed) replaces the text
        the model reads (success is still judged by the env against its mission); ``missions`` (rollout's: one
        instruction per seed, or "same_room") replaces the mission itself, which the model reads and the level's
        verifier judges the episode by.
        """
        from ..evaluation.rollout import GivenInstructions, rollout

        seeds = list(seeds)
        policy = self.policy(tokenizer)
        if instructions is not None:
            if len(instructions) != len(seeds):
                raise ValueError(f"{len(instructions)} instructions for {len(seeds)} seeds")
            policy = GivenInstructions(policy, list(instructions))
        return rollout(policy, envs, seeds, max_steps=max_steps, **kwargs)


#: The arguments of a following call of ``generate()`` besides envs and seeds (``FollowerMixin.follow``'s and
#: ``rollout``'s).
FOLLOW_ARGUMENTS = ("tokenizer", "max_steps", "instructions", "missions", "record_frames", "record_observations",
                    "progress", "batch_size")


def _is_rollout_call(observations, envs) -> bool:
    """Whether ``generate()``'s first argument (or ``envs``) names environments rather than trajectory tensors."""
    return envs is not None or isinstance(observations, (str, list, tuple)) or hasattr(observations, "step")


class SpeakerMixin:
    """Speaker side shared by the baseline speaker and MS-VAE: generate() and describe()."""

    def trajectory_memory(self, observations, directions, actions, trajectory_mask):
        """The memory the instruction decoder attends to, from a trajectory: (memory, mask)."""
        raise NotImplementedError

    def decode_instruction(self, input_ids, memory, memory_mask, cache=None) -> torch.Tensor:
        """Teacher-forced / incremental decoding of p(y_l | memory, y_<l): logits [B, n, vocab] for the n tokens
        of ``input_ids`` (``cache``, if given, holds the earlier ones and is updated in place)."""
        self.check_input_ids(input_ids)
        return self.instruction_decoder(input_ids, memory, memory_mask, cache=cache)

    def instruction_log_likelihood(self, input_ids, attention_mask, memory, memory_mask):
        """Teacher-forced log p(y | memory) summed over tokens after <bos>: (log-likelihood [B], logits
        [B, L - 1, vocab], zeros at padded positions). The decoder's position-wise layers run on the real
        tokens only. ``memory`` may hold k memories per instruction ([k * B, M, D], as the decoder takes them):
        [k * B] log-likelihoods and logits, memory by memory."""
        self.check_input_ids(input_ids)
        tokens = self.backend.positions(attention_mask[:, 1:])
        logits = self.instruction_decoder(input_ids[:, :-1], memory, memory_mask, layout=tokens)
        memories = memory.shape[0] // input_ids.shape[0] if input_ids.shape[0] else 1
        if memories > 1:
            tokens = tokens.repeat(memories)
        targets = input_ids[:, 1:].repeat(memories, 1)
        ll = sequence_log_likelihood(logits, targets, tokens, self.config.loss_reduction)
        return ll, tokens.scatter(logits)

    def prepare_inputs_for_generation(self, input_ids, cache=None, memory=None, memory_mask=None, **kwargs):
        """Feed only the tokens the cache has not seen, with the trajectory memory (expanded per beam)."""
        past = cache.get_seq_length() if cache is not None else 0
        return {"input_ids": input_ids[:, past:], "cache": cache, "memory": memory, "memory_mask": memory_mask}

    def generate(
        self,
        observations: torch.Tensor | None = None,
        directions: torch.Tensor | None = None,
        actions: torch.Tensor | None = None,
        trajectory_mask: torch.Tensor | None = None,
        envs=None,
        seeds: Sequence[int] | None = None,
        **kwargs,
    ):
        """Speak (trajectory tensors -> token ids) or, given ``envs`` and ``seeds``, follow (episodes).

        Speaking: z = posterior mean of q(z|a,o) for MS-VAE, h_tau for the baseline; any GenerationMixin decoding:
        greedy, beam search (``num_beams``), sampling (``do_sample``), ``max_new_tokens``,
        ``num_return_sequences``. Following (models that follow): ``generate(envs, seeds, instructions=None, ...)``
        with a level name, a list of envs or a VectorEnv returns ``follow(envs, seeds, ...)``'s EpisodeResults.
        """
        if _is_rollout_call(observations, envs):
            if not hasattr(self, "follow"):
                raise ValueError(f"{type(self).__name__} is a speaker: it cannot roll out in envs; "
                                 "generate(observations, directions, actions, trajectory_mask) speaks")
            if envs is None:  # generate(envs, seeds, ...) by position
                envs, seeds = observations, seeds if seeds is not None else directions
            return self.roll_out(envs, seeds, **kwargs)
        if seeds is not None:
            raise ValueError("seeds go with envs: generate(envs, seeds) rolls out; generate(observations, directions, "
                             "actions, trajectory_mask) speaks")
        if observations is None or actions is None:
            raise ValueError("generate() needs trajectory tensors (observations, directions, actions) to speak, or "
                             "envs (a level name or a list of envs) and seeds to roll out as model.follow(envs, seeds)")
        for name in ("num_beams", "num_return_sequences", "max_new_tokens"):
            value = kwargs.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"generate(): {name} must be a positive integer, got {value!r}")
        if trajectory_mask is None:
            trajectory_mask = torch.ones(actions.shape, dtype=torch.bool, device=actions.device)
        memory, memory_mask = self.trajectory_memory(observations, directions, actions, trajectory_mask)
        start = torch.full((actions.shape[0], 1), self.config.bos_token_id, dtype=torch.long, device=actions.device)
        if self.generation_config.max_new_tokens is None and "max_length" not in kwargs:  # saved without one
            kwargs.setdefault("max_new_tokens", self.config.max_instruction_length - 1)
        kwargs.setdefault("use_cache", True)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            kwargs.setdefault(name, getattr(self.config, name))
        out = GenerationMixin.generate(self, start, memory=memory, memory_mask=memory_mask, **kwargs)
        # transformers' beam search fills finished beams with `pad_token_id or eos_token_id`, i.e. with eos
        # when pad is id 0: restore "eos then pad only" for every decoding mode.
        if isinstance(out, torch.Tensor):
            return pad_after_eos(out, kwargs["eos_token_id"], kwargs["pad_token_id"])
        out.sequences = pad_after_eos(out.sequences, kwargs["eos_token_id"], kwargs["pad_token_id"])
        return out

    @torch.no_grad()
    def describe(self, observations, directions, actions, trajectory_mask=None, tokenizer=None, **kwargs) -> list[str]:
        """Instructions for trajectories, as text. Accepts padded tensors or lists of per-episode arrays."""
        tokenizer = self._resolve_tokenizer(tokenizer)
        if isinstance(observations, (list, tuple)):
            observations, directions, actions, trajectory_mask = pad_episodes(observations, directions, actions)
        device = self.device
        ids = self.generate(
            observations.to(device), directions.to(device), actions.to(device),
            None if trajectory_mask is None else trajectory_mask.to(device), **kwargs,
        )
        return tokenizer.batch_decode(ids, skip_special_tokens=True)


def pad_episodes(observations, directions, actions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-episode arrays ([T_i, 7, 7, 3], [T_i], [T_i]) -> the padded batch a model reads: observations [B, T, 7, 7,
    3] (uint8), directions and actions [B, T] (long), trajectory_mask [B, T], zeros on padding."""
    lengths = [len(a) for a in actions]
    if len(observations) != len(lengths) or len(directions) != len(lengths):
        raise ValueError(f"got {len(observations)} observation, {len(directions)} direction and {len(lengths)} "
                         "action sequences: one of each per episode")
    steps = max(lengths, default=0)
    frames = [torch.as_tensor(np.asarray(o), dtype=torch.uint8) for o in observations]
    padded = torch.zeros(len(lengths), steps, *(frames[0].shape[1:] if frames else ()), dtype=torch.uint8)
    dirs = torch.zeros(len(lengths), steps, dtype=torch.long)
    acts = torch.zeros(len(lengths), steps, dtype=torch.long)
    mask = torch.arange(steps)[None, :] < torch.tensor(lengths, dtype=torch.long)[:, None]
    for i, (o, d, a) in enumerate(zip(frames, directions, actions)):
        if len(o) != lengths[i] or len(d) != lengths[i]:
            raise ValueError(f"episode {i}: {len(o)} frames, {len(d)} directions and {lengths[i]} actions differ")
        padded[i, : lengths[i]] = o
        dirs[i, : lengths[i]] = torch.as_tensor(np.asarray(d), dtype=torch.long)
        acts[i, : lengths[i]] = torch.as_tensor(np.asarray(a), dtype=torch.long)
    return padded, dirs, acts, mask


def pad_after_eos(ids: torch.Tensor, eos_token_id: int, pad_token_id: int) -> torch.Tensor:
    """Replace every token after a sequence's first eos by pad: [N, S] -> [N, S]."""
    after = (ids == eos_token_id).long().cumsum(dim=1) - (ids == eos_token_id).long() > 0
    return ids.masked_fill(after, pad_token_id)
