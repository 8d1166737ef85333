"""MS-VAE and the baselines as models: config validation, save/load, padding/batch invariance, seeds,
gradients of the full objective, input errors and initialisation from the baselines.

Every model here is tiny (hidden 32, latent 32, 16 conv channels) and runs on real BabyAI observations
from GoToLocal resets, so the whole file takes seconds.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from model_helpers import LENGTHS, TERMS, build, move_film, pad_more, real_batch, select, tiny_kwargs, unpaired
from torch.distributions import Normal, kl_divergence
from transformers import AutoModel

import msvae_hf  # noqa: F401  (registers the Auto classes and Local levels)
from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER, ModulesConfig
from msvae_hf.models.frames import FRONT_CELLS
from msvae_hf.models.tokenization_msvae import MSVAETokenizer


# ------------------------------------------------------------------------------------------------ config
def test_config_defaults_are_appendix_d() -> None:
    c = MSVAEConfig()
    assert (c.num_latent_tokens, c.latent_dim, c.prior, c.prior_hidden_size) == (4, 128, "autoregressive", 128)
    assert (c.beta, c.gamma, c.alpha, c.swd_projections) == (0.1, 100.0, 0.05, 50)
    assert FollowerConfig().follower_attention == "attention" and MSVAEConfig().follower_attention == "bottleneck"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"follower_attention": "luong"}, "follower_attention"),
        ({"num_latent_tokens": 0}, "num_latent_tokens"),
        ({"latent_dim": 30, "decoder_heads": 4}, "latent_dim"),
        ({"obs_shape": (7, 7)}, "obs_shape"),
        ({"obs_shape": (7, 7, 4)}, "obs_shape"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"eos_token_id": 64, "vocab_size": 64}, "eos_token_id"),
        ({"dropout": 1.0}, "dropout"),
        ({"loss_reduction": "max"}, "loss_reduction"),
        ({"trajectory_front_cells": 1}, "trajectory_front_cells"),
    ],
)
@pytest.mark.parametrize("config_class", [MSVAEConfig, FollowerConfig, SpeakerConfig])
def test_config_rejects_bad_values(config_class, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{config_class.__name__}\.{field} "):
        config_class(**kwargs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"prior": "gaussian"}, "prior"),
        ({"beta": -0.1}, "beta"),
        ({"gamma": -1.0}, "gamma"),
        ({"alpha": -0.5}, "alpha"),
        ({"posterior_alignment": -1.0}, "posterior_alignment"),
        ({"posterior_alignment": "1"}, "posterior_alignment"),
        ({"gamma": float("nan")}, "gamma"),
        ({"alpha": float("inf")}, "alpha"),
        ({"trajectory_beta": float("nan")}, "trajectory_beta"),
        ({"trajectory_beta": -0.01}, "trajectory_beta"),
        ({"instruction_beta": "0.1"}, "instruction_beta"),
        ({"swd_projections": 0}, "swd_projections"),
        ({"share_observation_encoder": 1}, "share_observation_encoder"),
        ({"posterior_reads_actions": "no"}, "posterior_reads_actions"),
    ],
)
def test_msvae_config_rejects_bad_objective_and_prior_values(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^MSVAEConfig\.{field} "):
        MSVAEConfig(**kwargs)


def test_baseline_configs_hold_no_prior_or_objective(tmp_path: Path) -> None:
    """The baselines share MS-VAE's inputs and module sizes (ModulesConfig), not its prior or weights: their saved
    config.json has none, and one saved with them (a config that had every MS-VAE field) loads without them, so
    MS-VAE built from it takes its own defaults, not the baseline's leftovers."""
    msvae_only = {f.name for f in dataclasses.fields(MSVAEConfig)} - {f.name for f in dataclasses.fields(
        ModulesConfig)}
    assert {"prior", "beta", "gamma", "alpha", "swd_projections", "share_observation_encoder",
            "posterior_reads_actions"} <= msvae_only
    for config_class in (FollowerConfig, SpeakerConfig):
        config_class().save_pretrained(tmp_path / config_class.__name__)
        saved = json.loads((tmp_path / config_class.__name__ / "config.json").read_text())
        assert not msvae_only & set(saved), config_class
    full = {**MSVAEConfig(gamma=0.0, prior="normal").to_dict(), "model_type": "msvae_follower",
            "follower_attention": "attention"}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps(full))
    loaded = FollowerConfig.from_pretrained(tmp_path / "old")
    assert loaded.follower_attention == "attention" and loaded.hidden_size == MSVAEConfig().hidden_size
    assert not msvae_only & set(loaded.to_dict()) and not hasattr(loaded, "gamma")
    follower = FollowerModel(loaded)
    assert MSVAEModel.from_baselines(follower).config.to_dict() == MSVAEModel.from_baselines(
        FollowerModel(FollowerConfig(follower_attention="attention"))).config.to_dict()


# ------------------------------------------------------------------------------------------------ save/load
ALL_KINDS = ["msvae", "follower-none", "follower-attention", "follower-bottleneck", "speaker", "speaker-cells",
             "msvae-cells"]


def _outputs(model, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    torch.manual_seed(123)  # MS-VAE samples z: the same RNG state for both models
    with torch.no_grad():
        out = model(**batch, reduction="none")
    return [v for v in out.values() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_save_load_round_trip_is_exact(kind: str, tok: MSVAETokenizer, tmp_path: Path) -> None:
    """AutoModel.from_pretrained(dir) gives the same class, bit-identical tensors and outputs, and the
    tokenizer saved beside the safetensors weights comes back attached."""
    model = build(kind, tok, seed=3)
    model.tokenizer = tok
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "tokenizer.json").is_file()
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    theirs = loaded.state_dict()
    assert set(theirs) == set(model.state_dict())
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(theirs[name], tensor, rtol=0, atol=0, msg=name)
    assert isinstance(loaded.tokenizer, MSVAETokenizer)
    assert loaded.tokenizer.get_vocab() == tok.get_vocab()
    batch = real_batch(tok)
    # The loaded weights are bit-identical but may sit at other memory alignments (transformers loads them
    # into shared, unaligned storage), and CPU kernels round differently by alignment: as loaded, outputs
    # agree to float32 round-off; with each tensor copied to fresh (aligned) storage they are bit-identical.
    for a, b in zip(_outputs(model, batch), _outputs(loaded, batch), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    with torch.no_grad():
        for tensor in (*loaded.parameters(), *loaded.buffers()):
            tensor.data = tensor.data.clone()
    for a, b in zip(_outputs(model, batch), _outputs(loaded, batch), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the class itself loads it too
    assert type(type(model).from_pretrained(tmp_path)) is type(model)


def test_load_other_model_type_is_a_clear_error(tok: MSVAETokenizer, tmp_path: Path) -> None:
    build("follower-bottleneck", tok).save_pretrained(tmp_path / "follower")
    with pytest.raises(ValueError, match="msvae_follower"):
        MSVAEModel.from_pretrained(tmp_path / "follower")
    with pytest.raises(ValueError, match="msvae_follower"):
        SpeakerModel.from_pretrained(tmp_path / "follower")


@pytest.mark.parametrize(("kind", "field", "value", "saved"), [
    ("msvae", "hidden_size", 64, 32), ("msvae", "vocab_size", 40, None), ("msvae", "num_latent_tokens", 8, 4),
    ("follower-attention", "obs_channels", 8, 16), ("follower-attention", "film_layers", 1, 2)])
def test_load_with_edited_config_names_the_field(tok: MSVAETokenizer, tmp_path: Path, kind, field, value, saved):
    """A config.json whose sizes no longer match the weights is refused in one ValueError naming the field, its
    value and the weights' (AutoModel and the class alike)."""
    model = build(kind, tok)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[field] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    saved = len(tok) if saved is None else saved
    for loader in (AutoModel, type(model)):
        with pytest.raises(ValueError, match=f"its {field} is {value}, the weights were saved with {field} = {saved}"):
            loader.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------------------------ invariance
@pytest.mark.parametrize("kind", ["msvae", "msvae-cells"])
def test_msvae_terms_invariant_to_padding_and_batch(kind: str, tok: MSVAETokenizer, mean_z: None) -> None:
    """Per-sample j_bar, A_m, B_m, C_m and the posteriors of sample i are the same (atol 1e-5, fp32, eval):
    alone and unpadded, inside the full batch, and inside the batch with 3 extra frames / 4 extra tokens of
    garbage padding. reparameterize is monkeypatched to return the mean (fixture `mean_z`), so z is a
    function of the sample alone, and no unpaired batch is passed, so D' (a batch statistic) is off."""
    model = build(kind, tok)
    batch = real_batch(tok)
    with torch.no_grad():
        full = model(**batch, reduction="none")
        padded = model(**pad_more(batch), reduction="none")
        for i in range(len(LENGTHS)):
            alone = model(**select(batch, [i]), reduction="none")
            for name in TERMS:
                for other in (full, padded):
                    torch.testing.assert_close(getattr(other, name)[i], getattr(alone, name)[0], atol=1e-5, rtol=0)
            for name in ("trajectory_mean", "trajectory_logvar", "instruction_mean", "instruction_logvar"):
                torch.testing.assert_close(getattr(padded, name)[i], getattr(alone, name)[0], atol=1e-5, rtol=0)
        # batch order does not matter either
        flipped = model(**select(batch, [3, 2, 1, 0], trim=False), reduction="none")
        torch.testing.assert_close(flipped.j_bar.flip(0), full.j_bar, atol=1e-5, rtol=0)


def test_msvae_unpaired_batch_does_not_change_paired_terms(tok: MSVAETokenizer, mean_z: None) -> None:
    """Adding an unpaired batch (longer trajectories, so the paired batch is re-padded inside forward) leaves
    the paired per-sample terms unchanged, and the unpaired A_1/B_1 equal those of the same trajectories
    seen as paired data."""
    model = build("msvae", tok)
    batch = real_batch(tok)
    extra = real_batch(tok, lengths=(7, 3), seed=1)
    with torch.no_grad():
        base = model(**batch, reduction="none")
        both = model(**batch, **unpaired(extra), reduction="none")
        extra_as_paired = model(**extra, reduction="none")
    for name in TERMS:
        torch.testing.assert_close(getattr(both, name), getattr(base, name), atol=1e-5, rtol=0)
    torch.testing.assert_close(both.a_1_unpaired, extra_as_paired.a_1, atol=1e-5, rtol=0)
    torch.testing.assert_close(both.b_1_unpaired, extra_as_paired.b_1, atol=1e-5, rtol=0)
    assert torch.isfinite(both.domain_distance) and float(both.domain_distance) > 0


def test_msvae_loss_with_beta_per_modality(tok: MSVAETokenizer, mean_z: None) -> None:
    """trajectory_beta weights B_1 in J-bar and in V, instruction_beta weights B_2 (App. D's suggestion): the
    loss equals Eq. 10 recombined by hand from the per-sample terms; unset, both are ``beta``."""
    batch, extra = real_batch(tok), real_batch(tok, lengths=(7, 3), seed=1)
    model = build("msvae", tok, trajectory_beta=0.01, instruction_beta=0.5, gamma=3.0, alpha=0.25)
    assert model.config.betas == (0.01, 0.5) and build("msvae", tok).config.betas == (0.1, 0.1)
    with torch.no_grad():
        out = model(**batch, **unpaired(extra), reduction="none")
    j_bar = 0.5 * (out.a_1 + 0.01 * out.b_1 + out.c_1 + out.a_2 + 0.5 * out.b_2 + out.c_2)
    v = out.a_1_unpaired + 0.01 * out.b_1_unpaired
    torch.testing.assert_close(out.j_bar, j_bar)
    torch.testing.assert_close(out.loss, -j_bar.mean() - 3.0 * v.mean() + 0.25 * out.domain_distance)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_msvae_terms_under_each_loss_reduction(tok: MSVAETokenizer, mean_z: None, reduction: str) -> None:
    """Each loss_reduction against an independent computation on a fixed batch: A_2 and C_1 from the decoder's
    padded logits (log-softmax, mask, sum or mean over each instruction's real tokens), B_2 from
    torch.distributions against the prior given z, each entry summed or averaged over K x D; A_1 and C_2 are
    the "sum" model's divided by each trajectory's length under "mean"; J-bar, V and the loss recombined."""
    batch, extra = real_batch(tok), real_batch(tok, lengths=(7, 3), seed=1)
    model = build("msvae", tok, loss_reduction=reduction, gamma=3.0, alpha=0.25)
    summed = build("msvae", tok, loss_reduction="sum")
    with torch.no_grad():
        torch.manual_seed(1)  # the same random projections for D' in both
        out = model(**batch, **unpaired(extra), reduction="none")
        torch.manual_seed(1)
        ref = summed(**batch, **unpaired(extra), reduction="none")
        ids, mask = batch["input_ids"], batch["attention_mask"][:, 1:].bool()
        logp = {}
        for name, z in (("a_2", out.instruction_mean), ("c_1", out.trajectory_mean[: len(LENGTHS)])):
            logits = model.instruction_decoder(ids[:, :-1], z, None)
            token_logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            total = (token_logp * mask).sum(1)
            logp[name] = total if reduction == "sum" else total / mask.sum(1)
        mean_p, logvar_p = model.prior(out.instruction_mean)
        entries = kl_divergence(Normal(out.instruction_mean, (0.5 * out.instruction_logvar).exp()),
                                Normal(mean_p, (0.5 * logvar_p).exp()))
    kl = entries.sum((1, 2)) if reduction == "sum" else entries.mean((1, 2))
    torch.testing.assert_close(out.a_2, logp["a_2"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.c_1, logp["c_1"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.b_2, -kl, atol=1e-5, rtol=1e-5)
    steps = batch["trajectory_mask"].sum(1).float() if reduction == "mean" else torch.ones(len(LENGTHS))
    torch.testing.assert_close(out.a_1, ref.a_1 / steps, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.c_2, ref.c_2 / steps, atol=1e-5, rtol=1e-5)
    unpaired_steps = extra["trajectory_mask"].sum(1).float() if reduction == "mean" else torch.ones(2)
    torch.testing.assert_close(out.a_1_unpaired, ref.a_1_unpaired / unpaired_steps, atol=1e-5, rtol=1e-5)
    j_bar = 0.5 * (out.a_1 + 0.1 * out.b_1 + out.c_1 + out.a_2 + 0.1 * out.b_2 + out.c_2)
    v = out.a_1_unpaired + 0.1 * out.b_1_unpaired
    torch.testing.assert_close(out.j_bar, j_bar)
    torch.testing.assert_close(out.v, v)
    torch.testing.assert_close(out.domain_distance, ref.domain_distance)  # D' as printed under both readings
    torch.testing.assert_close(out.loss, -j_bar.mean() - 3.0 * v.mean() + 0.25 * out.domain_distance)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_posterior_alignment_term(tok: MSVAETokenizer, reduction: str) -> None:
    """posterior_alignment = w: the loss gains w times the batch mean of KL[q(z|a,o) || q(z|y)] on the pairs
    (torch.distributions, summed or averaged over K x D), every other term as without it; its gradient reaches
    q(z|a,o) and none of q(z|y)'s modules. At 0 (the default) the term is not computed at all."""
    batch, extra = real_batch(tok), real_batch(tok, lengths=(7, 3), seed=1)
    plain = build("msvae", tok, seed=5, loss_reduction=reduction)
    aligned = build("msvae", tok, seed=5, loss_reduction=reduction, posterior_alignment=2.5)
    aligned.load_state_dict(plain.state_dict())
    torch.manual_seed(3)
    base = plain(**batch, **unpaired(extra), reduction="none")
    torch.manual_seed(3)
    out = aligned(**batch, **unpaired(extra), reduction="none")
    assert base.alignment is None
    pairs = len(LENGTHS)
    mean_tau, logvar_tau = out.trajectory_mean[:pairs], out.trajectory_logvar[:pairs]
    entries = kl_divergence(Normal(mean_tau, (0.5 * logvar_tau).exp()),
                            Normal(out.instruction_mean, (0.5 * out.instruction_logvar).exp()))
    kl = entries.sum((1, 2)) if reduction == "sum" else entries.mean((1, 2))
    torch.testing.assert_close(out.alignment, kl.detach(), atol=1e-5, rtol=1e-5)
    for name in (*TERMS, "v", "domain_distance"):
        torch.testing.assert_close(getattr(out, name), getattr(base, name), atol=0, rtol=0)
    torch.testing.assert_close(out.loss, base.loss + 2.5 * kl.mean(), atol=1e-4, rtol=1e-5)
    aligned.zero_grad()
    out.alignment.sum().backward()
    grads = {name: w.grad for name, w in aligned.named_parameters()}
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if n.startswith("trajectory_"))
    assert all(g is None or g.abs().sum() == 0 for n, g in grads.items() if n.startswith("instruction_posterior"))
    assert all(g is None or g.abs().sum() == 0 for n, g in grads.items() if n.startswith("instruction_encoder"))


@pytest.mark.parametrize("kind", ["follower-none", "follower-attention", "follower-bottleneck", "speaker",
                                  "speaker-cells"])
def test_baseline_loss_invariant_to_padding_and_batch(kind: str, tok: MSVAETokenizer) -> None:
    """Per-sample baseline losses (reduction="none") alone vs in a garbage-padded batch (deterministic)."""
    model = build(kind, tok)
    batch = real_batch(tok)
    with torch.no_grad():
        padded = model(**pad_more(batch), reduction="none").loss
        for i in range(len(LENGTHS)):
            alone = model(**select(batch, [i]), reduction="none").loss
            torch.testing.assert_close(padded[i], alone[0], atol=1e-5, rtol=0)
        mean = model(**batch).loss
    torch.testing.assert_close(mean, padded.mean(), atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------ seeds
@pytest.mark.parametrize("kind", ["msvae", "follower-attention", "speaker"])
def test_same_seed_same_model_and_outputs(kind: str, tok: MSVAETokenizer) -> None:
    a, b = build(kind, tok, seed=7), build(kind, tok, seed=7)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)
    batch = real_batch(tok)
    for x, y in zip(_outputs(a, batch), _outputs(b, batch), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    c = build(kind, tok, seed=8)
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


# ------------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("prior, reads_actions", [("autoregressive", True), ("normal", True),
                                                   ("autoregressive", False)])
def test_every_parameter_gets_a_gradient(prior: str, reads_actions: bool, tok: MSVAETokenizer) -> None:
    """The full loss (paired + unpaired, all of Eq. 10) reaches every trainable parameter with a finite gradient (as
    DDP needs: it waits for each one); with q(z|a,o) on the frames alone the action tokens' embedding is frozen."""
    model = move_film(build("msvae", tok, prior=prior, posterior_reads_actions=reads_actions)).train()
    batch = real_batch(tok)  # (move_film: FiLM's output at zero passes its inputs no gradient)
    out = model(**batch, **unpaired(real_batch(tok, lengths=(6, 2, 3), seed=2)))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    frozen = [name for name, param in model.named_parameters() if not param.requires_grad]
    assert frozen == ([] if reads_actions else ["trajectory_encoder.action_embedding.weight"])
    for name, param in model.named_parameters():
        if not param.requires_grad:
            assert param.grad is None, name
            continue
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_domain_distance_reaches_trajectory_encoder(tok: MSVAETokenizer) -> None:
    """D' alone has a non-zero gradient to the trajectory encoder, posterior and observation encoder, and
    none to the decoders (it reads posterior means of q(z|a,o) only)."""
    model = build("msvae", tok).train()
    out = model(**real_batch(tok), **unpaired(real_batch(tok, lengths=(6, 2, 3), seed=2)))
    out.domain_distance.backward()
    for module in ("trajectory_encoder", "trajectory_posterior", "obs_encoder"):
        grads = [p.grad for p in getattr(model, module).parameters() if p.grad is not None]
        assert grads and sum(float(g.abs().sum()) for g in grads) > 0, module
    for module in ("action_decoder", "instruction_decoder", "instruction_encoder"):
        assert all(p.grad is None or not p.grad.any() for p in getattr(model, module).parameters()), module


# ------------------------------------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("kind", ["msvae", "follower-attention", "speaker"])
def test_bad_inputs_raise(kind: str, tok: MSVAETokenizer) -> None:
    model = build(kind, tok)
    batch = real_batch(tok)
    wrong_obs = dict(batch, observations=batch["observations"][..., :2])
    with pytest.raises(ValueError, match="observations"):
        model(**wrong_obs)
    bad_ids = batch["input_ids"].clone()
    bad_ids[0, 1] = model.config.vocab_size
    with pytest.raises(ValueError, match="token ids out of range"):
        model(**dict(batch, input_ids=bad_ids))
    bad_ids[0, 1] = -1
    with pytest.raises(ValueError, match="token ids out of range"):
        model(**dict(batch, input_ids=bad_ids))
    bad_actions = batch["actions"].clone()
    bad_actions[0, 0] = 7
    with pytest.raises(ValueError, match="actions"):
        model(**dict(batch, actions=bad_actions))
    bad_values = batch["observations"].clone()
    bad_values[0, 0, 0, 0, 0] = 16
    with pytest.raises(ValueError, match="observation values"):
        model(**dict(batch, observations=bad_values))


# ------------------------------------------------------------------------------------------------ from_baselines
def test_from_baselines_copies_modules_exactly(tok: MSVAETokenizer) -> None:
    follower, speaker = build("follower-bottleneck", tok, seed=1), build("speaker", tok, seed=2)
    follower.tokenizer = tok
    model = MSVAEModel.from_baselines(follower, speaker)
    copied = {
        "obs_encoder": follower, "instruction_encoder": follower, "action_decoder": follower,
        "instruction_posterior": follower, "trajectory_encoder": speaker, "instruction_decoder": speaker,
    }
    for name, source in copied.items():
        ours, theirs = getattr(model, name).state_dict(), getattr(source, name).state_dict()
        assert set(ours) == set(theirs), name
        for key, value in theirs.items():
            torch.testing.assert_close(ours[key], value, rtol=0, atol=0, msg=f"{name}.{key}")
    assert model.tokenizer is tok and isinstance(model, MSVAEModel)
    # a speaker alone gives the observation encoder too
    only_speaker = MSVAEModel.from_baselines(speaker=speaker)
    torch.testing.assert_close(only_speaker.obs_encoder.proj.weight, speaker.obs_encoder.proj.weight, rtol=0, atol=0)
    # whose FiLM norms (a speaker has none) start as the identity, on both maps where FiLM modulates two
    two = MSVAEModel.from_baselines(speaker=speaker, follower_conditioning="film", film_layers=2)
    for norm in (two.obs_encoder.film_norm, two.obs_encoder.first_film_norm):
        assert bool((norm.weight == 1).all()) and not norm.bias.any()
    # a speaker's follower fields are none of its own: MS-VAE from it alone takes the default follower
    old_speaker = build("speaker", tok, seed=2, follower_conditioning="head", film_layers=1)
    default = MSVAEModel.from_baselines(speaker=old_speaker).config
    assert (default.follower_conditioning, default.film_layers) == ("film", 2)


def test_from_baselines_shape_mismatch_raises(tok: MSVAETokenizer) -> None:
    follower = build("follower-attention", tok, seed=1)
    speaker = build("speaker", tok, seed=2, decoder_ffn_dim=128)  # the decoder MLP differs from the follower's
    with pytest.raises(ValueError, match="instruction_decoder"):
        MSVAEModel.from_baselines(follower, speaker)
    with pytest.raises(ValueError, match="needs"):
        MSVAEModel.from_baselines()



def test_own_trajectory_observation_encoder(tok: MSVAETokenizer, tmp_path: Path) -> None:
    """share_observation_encoder=False: q(z|a,o) reads its own observation encoder, copied from the speaker
    baseline (App. D), the follower path the follower's; each path depends on its own encoder only."""
    # the head follower: its path's frame features are the encoder's alone (a FiLM follower's are modulated by z)
    follower = build("follower-bottleneck", tok, seed=1, **HEAD_FOLLOWER)
    speaker = build("speaker", tok, seed=2)
    follower.tokenizer = tok
    model = MSVAEModel.from_baselines(follower, speaker, share_observation_encoder=False).eval()
    pairs = ((model.trajectory_obs_encoder, speaker.obs_encoder), (model.obs_encoder, follower.obs_encoder))
    for ours, source in pairs:
        for key, value in source.state_dict().items():
            torch.testing.assert_close(ours.state_dict()[key], value, rtol=0, atol=0, msg=key)
    assert MSVAEModel(MSVAEConfig(**tiny_kwargs(tok))).trajectory_obs_encoder is None  # the default shares one

    batch = real_batch(tok)
    trajectory = (batch["observations"], batch["directions"], batch["actions"], batch["trajectory_mask"])

    def paths():
        with torch.no_grad():
            speaker_memory = model.trajectory_memory(*trajectory)[0]
            features = model.frame_features(*trajectory[:2], batch["trajectory_mask"])
            states = model.action_decoder.states(features, batch["actions"], batch["trajectory_mask"])
            follower_memory = model.instruction_memory(batch["input_ids"], batch["attention_mask"])[0]
            every_token = torch.ones(follower_memory.shape[:2], dtype=torch.bool)
            logits = model.action_decoder.logits(states, follower_memory, every_token)
        return speaker_memory, logits

    speaker_before, follower_before = paths()
    with torch.no_grad():
        model.trajectory_obs_encoder.proj.weight.add_(0.5)
    speaker_after, follower_after = paths()
    assert not torch.allclose(speaker_after, speaker_before)
    torch.testing.assert_close(follower_after, follower_before, rtol=0, atol=0)
    with torch.no_grad():
        model.obs_encoder.proj.weight.add_(0.5)
    speaker_last, follower_last = paths()
    torch.testing.assert_close(speaker_last, speaker_after, rtol=0, atol=0)
    assert not torch.allclose(follower_last, follower_after)

    out = model(**batch)  # the full objective trains both encoders
    out.loss.backward()
    assert model.trajectory_obs_encoder.proj.weight.grad.abs().sum() > 0
    assert model.obs_encoder.proj.weight.grad.abs().sum() > 0
    model.tokenizer = tok
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert loaded.config.share_observation_encoder is False
    torch.testing.assert_close(loaded.trajectory_obs_encoder.proj.weight, model.trajectory_obs_encoder.proj.weight,
                               rtol=0, atol=0)
    with pytest.raises(ValueError, match="share_observation_encoder"):
        MSVAEConfig(**tiny_kwargs(tok), share_observation_encoder="no")


def test_unpaired_term_can_hold_the_action_decoder_fixed(tok: MSVAETokenizer, mean_z: None) -> None:
    """unpaired_trains_action_decoder=False: the same objective values, V's gradient reaches q(z|a,o) exactly
    as before but no action-decoder weight; the paired terms still train the decoder."""
    batch = real_batch(tok)
    other = real_batch(tok, seed=1)
    inputs = {**batch, **unpaired(other)}
    models = {flag: build("msvae", tok, seed=5, unpaired_trains_action_decoder=flag, **HEAD_FOLLOWER)
              for flag in (True, False)}
    models[False].load_state_dict(models[True].state_dict())
    grads, values = {}, {}
    for flag, model in models.items():
        model.zero_grad()
        out = model(**inputs)
        values[flag] = (out.loss.detach(), out.v.detach(), out.a_1.detach())
        out.v.backward(retain_graph=True)
        grads[flag] = {name: None if w.grad is None else w.grad.clone() for name, w in model.named_parameters()}
        model.zero_grad()
        out.j_bar.backward()
        assert any(w.grad is not None and w.grad.abs().sum() > 0 for w in model.action_decoder.parameters())
    for a, b in zip(values[True], values[False], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    decoder = [n for n in grads[False] if n.startswith("action_decoder.")]
    assert all(grads[False][n] is None or grads[False][n].abs().sum() == 0 for n in decoder)
    assert any(grads[True][n] is not None and grads[True][n].abs().sum() > 0 for n in decoder)
    for name in (n for n in grads[True] if n.startswith(("trajectory_encoder.", "trajectory_posterior."))):
        assert grads[False][name] is not None and grads[False][name].abs().sum() > 0, name
        torch.testing.assert_close(grads[False][name], grads[True][name], rtol=1e-4, atol=1e-6, msg=name)


def test_posterior_can_read_the_frames_alone(tok: MSVAETokenizer) -> None:
    """posterior_reads_actions=False: q(z|a,o) is the same whatever the actions, in the forward pass (its means and
    variances) and as the speaker's memory; it equals the default model's handed zero action embeddings (the same
    modules: the weights load into either); the unread embedding takes no gradient, which DDP would wait for."""
    batch = real_batch(tok)
    model = build("msvae", tok, seed=5, posterior_reads_actions=False).eval()
    other = {**batch, "actions": (batch["actions"] + 1) % model.config.num_actions}
    out, out_other = model(**batch), model(**other)
    for name in ("trajectory_mean", "trajectory_logvar"):
        torch.testing.assert_close(getattr(out_other, name), getattr(out, name), rtol=0, atol=0)
    assert not torch.equal(out.a_1, out_other.a_1)  # the actions are still what p(a|z,o) scores
    trajectory = (batch["observations"], batch["directions"])
    memory = model.trajectory_memory(*trajectory, batch["actions"], batch["trajectory_mask"])[0]
    torch.testing.assert_close(model.trajectory_memory(*trajectory, other["actions"], batch["trajectory_mask"])[0],
                               memory, rtol=0, atol=0)
    assert not model.trajectory_encoder.action_embedding.weight.requires_grad
    default = build("msvae", tok, seed=5).eval()
    default.load_state_dict(model.state_dict())
    with torch.no_grad():
        default.trajectory_encoder.action_embedding.weight.zero_()
    torch.testing.assert_close(default(**other).trajectory_mean, out.trajectory_mean, rtol=0, atol=0)
    reads = build("msvae", tok, seed=5).eval()
    assert not torch.equal(reads(**other).trajectory_mean, reads(**batch).trajectory_mean)


def test_front_cells_read_those_cells_alone(tok: MSVAETokenizer) -> None:
    """trajectory_front_cells: a speaker's memory moves with each of FRONT_CELLS (the cell ahead, and those faced
    after turning left, right or stepping forward) and with nothing else the convolutions do not read; MS-VAE
    from such a speaker keeps them (its config from the follower's, its trajectory encoder the speaker's), and a
    trajectory encoder that reads them refuses a call without the observations."""
    speaker, plain = build("speaker-cells", tok, seed=4), build("speaker", tok, seed=4)
    batch = real_batch(tok)
    trajectory = (batch["directions"], batch["actions"], batch["trajectory_mask"])

    def memory(model, observations):
        with torch.no_grad():
            return model.trajectory_memory(observations, *trajectory)[0]

    cells = speaker.trajectory_encoder.front_cells
    base = memory(speaker, batch["observations"])
    for x, y in FRONT_CELLS:
        other = batch["observations"].clone()
        other[0, 0, x, y] = torch.tensor([6, 4, 0])  # a yellow ball (minigrid's codes), where the view had none
        moved = cells(other) - cells(batch["observations"])
        assert moved[0, 0].abs().sum() > 0 and not moved[1:].any() and not moved[0, 1:].any()
        assert not torch.equal(memory(speaker, other)[0], base[0])
        torch.testing.assert_close(memory(speaker, other)[1:], base[1:], rtol=0, atol=0)
    elsewhere = batch["observations"].clone()
    elsewhere[:, :, 0, 0] = torch.tensor([6, 4, 0])
    torch.testing.assert_close(cells(elsewhere), cells(batch["observations"]), rtol=0, atol=0)
    assert plain.trajectory_encoder.front_cells is None  # the default reads no cells
    follower = build("follower-bottleneck", tok, seed=1)
    follower.tokenizer = tok
    model = MSVAEModel.from_baselines(follower, speaker)
    assert model.config.trajectory_front_cells and not follower.config.trajectory_front_cells
    for key, value in speaker.trajectory_encoder.state_dict().items():
        torch.testing.assert_close(model.trajectory_encoder.state_dict()[key], value, rtol=0, atol=0, msg=key)
    features = torch.zeros(*batch["actions"].shape, speaker.config.hidden_size)
    with pytest.raises(ValueError, match="pass the observations"):
        speaker.trajectory_encoder(features, batch["actions"], batch["trajectory_mask"])


def test_front_cells_are_the_cells_the_next_action_faces() -> None:
    """FRONT_CELLS against minigrid: after turning left or right, or stepping forward where the step moves the agent,
    the cell ahead (FRONT_CELLS[0]) of the new frame is the old frame's FRONT_CELLS[1], [2] or [3]."""
    env = gym.make("BabyAI-GoToSeqLocal-v0")
    rng = np.random.default_rng(0)
    checked = 0
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        for _ in range(30):
            action = int(rng.integers(3))  # left, right, forward
            position = tuple(env.unwrapped.agent_pos)
            before = obs["image"]
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
            if action == 2 and tuple(env.unwrapped.agent_pos) == position:
                continue  # a blocked step: the agent faces what it faced
            x, y = FRONT_CELLS[1 + action]
            assert tuple(obs["image"][FRONT_CELLS[0]]) == tuple(before[x, y]), (seed, action)
            checked += 1
    assert checked > 300
