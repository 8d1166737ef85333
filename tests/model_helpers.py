"""Tiny models and real BabyAI batches for the model tests: one place for what several test files build.

Every model is tiny (hidden 32, latent 32, 16 conv channels) and runs on real BabyAI observations from
GoToLocal resets (random left / right / forward actions), so a test that uses them takes seconds.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

import msvae_hf  # noqa: F401  (registers the Auto classes and Local levels)
from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

TINY = dict(
    hidden_size=32, latent_dim=32, obs_channels=16, decoder_ffn_dim=64, word_embed_dim=32, prior_hidden_size=32,
    obs_embed_dim=8, action_embed_dim=8,
)
LENGTHS = (5, 2, 4, 3)
TERMS = ("j_bar", "a_1", "a_2", "b_1", "b_2", "c_1", "c_2")


def tiny_kwargs(tok: MSVAETokenizer, **overrides) -> dict:
    return {**TINY, "vocab_size": len(tok), **overrides}


def build(kind: str, tok: MSVAETokenizer, seed: int = 0, **overrides):
    """A tiny model in eval mode: kind is "msvae", "speaker" or "follower-<attention>"; "msvae-cells" and
    "speaker-cells": their trajectory encoder reads the front cells."""
    torch.manual_seed(seed)
    kind, cells = kind.removesuffix("-cells"), kind.endswith("-cells")
    kw = tiny_kwargs(tok, **({"trajectory_front_cells": True} if cells else {}), **overrides)
    if kind == "msvae":
        return MSVAEModel(MSVAEConfig(**kw)).eval()
    if kind == "speaker":
        return SpeakerModel(SpeakerConfig(**kw)).eval()
    return FollowerModel(FollowerConfig(follower_attention=kind.split("-", 1)[1], **kw)).eval()


def real_batch(tok: MSVAETokenizer, lengths=LENGTHS, seed: int = 0) -> dict[str, torch.Tensor]:
    """Padded trajectories of real GoToLocal frames (random left/right/forward actions) and their missions."""
    rng = np.random.default_rng(seed)
    plans = [[int(rng.integers(3)) for _ in range(n)] for n in lengths]
    return played_batch(tok, plans, [seed * 100 + i for i in range(len(lengths))])


def played_batch(tok: MSVAETokenizer, plans: list[list[int]], seeds: list[int],
                 instructions: list[str] | None = None) -> dict[str, torch.Tensor]:
    """GoToLocal episode ``seeds[i]`` played with the actions ``plans[i]``: its real frames, padded, with the
    missions (or ``instructions``) tokenised."""
    env = gym.make("BabyAI-GoToLocal-v0")
    t_max = max(map(len, plans))
    obs = torch.zeros(len(plans), t_max, 7, 7, 3, dtype=torch.uint8)
    dirs = torch.zeros(len(plans), t_max, dtype=torch.long)
    acts = torch.zeros(len(plans), t_max, dtype=torch.long)
    mask = torch.zeros(len(plans), t_max, dtype=torch.bool)
    missions = []
    for i, plan in enumerate(plans):
        o, _ = env.reset(seed=seeds[i])
        missions.append(o["mission"])
        for t, a in enumerate(plan):
            obs[i, t], dirs[i, t], acts[i, t], mask[i, t] = torch.from_numpy(o["image"]), o["direction"], a, True
            o, *_ = env.step(a)
    env.close()
    enc = tok(instructions or missions, padding=True, return_tensors="pt")
    return {
        "observations": obs, "directions": dirs, "actions": acts, "trajectory_mask": mask,
        "input_ids": enc["input_ids"].long(), "attention_mask": enc["attention_mask"].long(),
    }


def select(batch: dict[str, torch.Tensor], idx: list[int], trim: bool = True) -> dict[str, torch.Tensor]:
    """Rows idx of a batch, trimmed to their own longest trajectory / instruction (no extra padding)."""
    out = {k: v[idx] for k, v in batch.items()}
    if trim:
        t, length = int(out["trajectory_mask"].sum(1).max()), int(out["attention_mask"].sum(1).max())
        for k in ("observations", "directions", "actions", "trajectory_mask"):
            out[k] = out[k][:, :t]
        for k in ("input_ids", "attention_mask"):
            out[k] = out[k][:, :length]
    return out


def move_film(model, seed: int = 1):
    """``model`` with its FiLM (zero at initialisation: the identity) and film_both's keys (zero too) moved off zero,
    as training moves them, so that a test sees the frames modulated; a model without FiLM as it is."""
    film = getattr(getattr(model, "action_decoder", None), "film", None)
    if film is not None:
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed)
            film.out.weight.copy_(0.1 * torch.randn(film.out.weight.shape, generator=generator))
            film.out.bias.copy_(0.1 * torch.randn(film.out.bias.shape, generator=generator))
            if film.keyed and hasattr(film, "queries"):
                film.key.weight.copy_(0.1 * torch.randn(film.key.weight.shape, generator=generator))
    return model


def pad_more(batch: dict[str, torch.Tensor], extra_t: int = 3, extra_l: int = 4, seed: int = 0) -> dict:
    """Extra padding at the end of time and instruction axes, filled with GARBAGE (valid-range) values so
    that only the masks can keep it out of the real positions."""
    g = torch.Generator().manual_seed(seed)
    b = batch["actions"].shape[0]
    out = dict(batch)
    out["observations"] = torch.cat(
        [batch["observations"], torch.randint(0, 11, (b, extra_t, 7, 7, 3), generator=g, dtype=torch.uint8)], 1
    )
    out["directions"] = torch.cat([batch["directions"], torch.randint(0, 4, (b, extra_t), generator=g)], 1)
    out["actions"] = torch.cat([batch["actions"], torch.randint(0, 7, (b, extra_t), generator=g)], 1)
    out["trajectory_mask"] = torch.cat([batch["trajectory_mask"], torch.zeros(b, extra_t, dtype=torch.bool)], 1)
    out["input_ids"] = torch.cat([batch["input_ids"], torch.randint(4, 30, (b, extra_l), generator=g)], 1)
    out["attention_mask"] = torch.cat([batch["attention_mask"], torch.zeros(b, extra_l, dtype=torch.long)], 1)
    return out


def unpaired(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    keys = ("observations", "directions", "actions", "trajectory_mask")
    return {f"unpaired_{k}": batch[k] for k in keys}


def key_bias_rows(name: str, param: torch.Tensor) -> torch.Tensor:
    """Mask of the attention key biases: a constant added to all of a query's scores, so their gradient is
    zero but for rounding, and Adam (which divides by the gradient's size) moves them by rounding noise."""
    mask = torch.zeros_like(param, dtype=torch.bool)
    if name.endswith(("in_proj_bias", "qkv.bias")):
        third = param.shape[0] // 3
        mask[third:2 * third] = True
    elif name.endswith("cross_kv.bias"):
        mask[: param.shape[0] // 2] = True
    elif name.endswith("key_proj.bias"):
        mask[:] = True
    return mask
