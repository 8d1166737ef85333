"""Layers that skip padding give what the padded computation gives.

Training runs the action decoder's LSTM packed, its head, the instruction decoder's position-wise layers and
the bottleneck attention's key/value projections on the real positions only (``backends.positions.RealPositions``).
Each is compared here with the padded computation the model used before (``nn.LSTM`` over the whole padded
batch, ``nn.MultiheadAttention``, every decoder layer on [B, L]), and the whole MS-VAE objective, every term
and every gradient, with :func:`padded_reference`, the previous forward written out on the padded batch.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
import torch.nn.functional as F
from model_helpers import TERMS, build, move_film, pad_more, real_batch, tiny_kwargs, unpaired
from transformers import DynamicCache

import msvae_hf.models.modeling_msvae as modeling_msvae
from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel
from msvae_hf.backends.positions import LengthGroups, RealPositions, _group_lengths
from msvae_hf.backends.registry import Backend
from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER
from msvae_hf.models.losses import (
    domain_distance,
    kl_to_prior,
    msvae_loss,
    paired_elbo,
    reparameterize,
    unpaired_elbo,
)
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

LENGTHS = (5, 2, 4, 3, 7, 1)


def test_real_positions_round_trip_and_row_sums() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    x = torch.randn(3, 4, 5)
    positions = RealPositions(mask)
    real = positions.gather(x)
    assert real.shape == (7, 5)
    torch.testing.assert_close(real, x[mask], rtol=0, atol=0)
    torch.testing.assert_close(positions.scatter(real), x * mask.unsqueeze(-1), rtol=0, atol=0)
    values = torch.arange(7.0)
    torch.testing.assert_close(positions.sum_rows(values), torch.tensor([0.0 + 1, 2, 3 + 4 + 5 + 6]))


def padded_log_likelihood(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log-likelihood per sequence from padded logits [B, S, V], padding masked out."""
    logp = -F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (logp * mask.to(logp.dtype)).sum(dim=1)


def padded_bottleneck(module, states: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bottleneck attention as ``nn.MultiheadAttention`` computes it over the padded keys."""
    keys = module.key_proj(states)
    queries = module.queries.unsqueeze(0).expand(states.shape[0], -1, -1)
    tokens, _ = module.attention(queries, keys, keys, key_padding_mask=~mask.bool(), need_weights=False)
    return module.to_mean(tokens), module.to_logvar(tokens).clamp(-10.0, 10.0)


def padded_action_log_likelihood(model, observations, directions, actions, memory, mask,
                                 memory_mask=None) -> torch.Tensor:
    """log p(a | memory, o) with every padded frame encoded (FiLMed by the memory where the follower has FiLM), the
    LSTM over the whole padded batch and the head at every position."""
    decoder = model.action_decoder
    film = decoder.film_parameters(memory, memory_mask)
    b, t = actions.shape
    features = model.obs_encoder(observations.flatten(0, 1), directions.flatten(0, 1),
                                 None if film is None else film.repeat_interleave(t, 0)).view(b, t, -1)
    inputs = [features]
    if decoder.reads_previous_action:
        inputs.append(decoder.action_embedding(decoder.previous_actions(actions)))
    states, _ = decoder.lstm(torch.cat(inputs, dim=-1))
    memory_mask = torch.ones(memory.shape[:2], dtype=torch.bool) if memory_mask is None else memory_mask
    logits = decoder.head(torch.cat([decoder.attention(states, memory, memory_mask), states], dim=-1))
    return padded_log_likelihood(logits, actions, mask)


def padded_reference(model: MSVAEModel, batch: dict, extra: dict) -> dict[str, torch.Tensor]:
    """The MS-VAE objective (Eq. 9, 3, 10) on the padded batches, every layer at every position."""
    num_paired = batch["actions"].shape[0]
    trajectory = modeling_msvae._concat_padded(
        tuple(batch[k] for k in ("observations", "directions", "actions", "trajectory_mask")),
        tuple(extra[k] for k in ("observations", "directions", "actions", "trajectory_mask")),
    )
    obs, dirs, actions, mask = trajectory[0], trajectory[1], trajectory[2].long(), trajectory[3].bool()
    features = model.frame_features(obs, dirs, mask)
    mean_tau, logvar_tau = padded_bottleneck(
        model.trajectory_posterior, model.trajectory_encoder(features, actions, mask), mask)
    ids, ids_mask = batch["input_ids"], batch["attention_mask"].bool()
    mean_y, logvar_y = padded_bottleneck(model.instruction_posterior, model.instruction_encoder(ids, ids_mask)[0],
                                         ids_mask)
    z_tau, z_y = reparameterize(mean_tau, logvar_tau), reparameterize(mean_y, logvar_y)
    p, u = slice(0, num_paired), slice(num_paired, None)

    def instruction_ll(z: torch.Tensor) -> torch.Tensor:
        logits = model.instruction_decoder(ids[:, :-1], z, torch.ones(z.shape[:2], dtype=torch.bool))
        return padded_log_likelihood(logits, ids[:, 1:], batch["attention_mask"][:, 1:])

    a_1_all = padded_action_log_likelihood(model, obs, dirs, actions, z_tau, mask)
    b_1_all = -kl_to_prior(mean_tau, logvar_tau, model.prior, z_tau)
    terms = {
        "a_1": a_1_all[p], "b_1": b_1_all[p],
        "c_2": padded_action_log_likelihood(model, obs[p], dirs[p], actions[p], z_y, mask[p]),
        "a_2": instruction_ll(z_y), "c_1": instruction_ll(z_tau[p]),
        "b_2": -kl_to_prior(mean_y, logvar_y, model.prior, z_y),
    }
    betas = model.config.betas
    terms["j_bar"] = paired_elbo((terms["a_1"], terms["a_2"]), (terms["b_1"], terms["b_2"]),
                                 (terms["c_1"], terms["c_2"]), betas)
    terms["v"] = unpaired_elbo(a_1_all[u], b_1_all[u], betas[0])
    terms["domain_distance"] = domain_distance(mean_tau[p], mean_tau[u], model.config.swd_projections,
                                               model.config.swd_p)
    terms["loss"] = msvae_loss(terms["j_bar"], terms["v"], terms["domain_distance"], model.config.gamma,
                               model.config.alpha)
    return terms


@pytest.mark.parametrize("follower", [{}, HEAD_FOLLOWER], ids=["film", "head-prev"])
@pytest.mark.parametrize("prior", ["autoregressive", "normal"])
def test_msvae_objective_and_gradients_equal_the_padded_computation(tok: MSVAETokenizer, prior: str,
                                                                     follower: dict) -> None:
    """Every term of Eq. 10 and every parameter's gradient, against :func:`padded_reference` (same noise),
    on batches with extra padding at the end of both axes, for the default follower and the study's."""
    model = move_film(build("msvae", tok, prior=prior, gamma=0.7, alpha=2.0, **follower)).train()
    batch = pad_more(real_batch(tok, LENGTHS))
    extra = pad_more(real_batch(tok, (8, 3, 6), seed=1), seed=1)

    def run(forward) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)  # the same reparameterisation noise and projections for both
        terms = forward()
        terms["loss"].backward()
        return terms, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ours, ours_grads = run(lambda: model(**batch, **unpaired(extra), reduction="none"))
    ref, ref_grads = run(lambda: padded_reference(model, batch, extra))
    for name in (*TERMS, "v", "domain_distance", "loss"):
        torch.testing.assert_close(ours[name], ref[name], rtol=1e-5, atol=1e-5, msg=name)
    assert ours_grads.keys() == ref_grads.keys() and len(ours_grads) == len(list(model.parameters()))
    for name, grad in ref_grads.items():
        torch.testing.assert_close(ours_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("follower", [{}, HEAD_FOLLOWER], ids=["film", "head-prev"])
def test_follower_log_likelihood_equals_the_padded_lstm(tok: MSVAETokenizer, follower: dict) -> None:
    """The baseline follower's packed LSTM gives the padded LSTM's likelihood, with garbage in the padding."""
    torch.manual_seed(0)
    model = FollowerModel(FollowerConfig(**tiny_kwargs(tok), **follower)).eval()
    move_film(model)
    batch = pad_more(real_batch(tok, LENGTHS))
    with torch.no_grad():
        ours = model(**batch, reduction="none").log_likelihood
        memory, memory_mask = model.instruction_memory(batch["input_ids"], batch["attention_mask"])
        ref = padded_action_log_likelihood(model, batch["observations"], batch["directions"], batch["actions"],
                                           memory, batch["trajectory_mask"], memory_mask)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_decoder_at_real_positions_equals_the_padded_decoder(tok: MSVAETokenizer) -> None:
    """Teacher-forced logits at the real tokens, with and without a ``layout`` of them."""
    model = build("msvae", tok)
    batch = pad_more(real_batch(tok, LENGTHS))
    z = torch.randn(len(LENGTHS), model.config.num_latent_tokens, model.config.latent_dim)
    memory_mask = torch.ones(z.shape[:2], dtype=torch.bool)
    tokens = RealPositions(batch["attention_mask"])
    with torch.no_grad():
        padded = model.instruction_decoder(batch["input_ids"], z, memory_mask)
        real = model.instruction_decoder(batch["input_ids"], z, memory_mask, layout=tokens)
    assert real.shape == (int(batch["attention_mask"].sum()), len(tok))
    torch.testing.assert_close(real, padded[batch["attention_mask"].bool()], rtol=1e-5, atol=1e-5)


def test_decoder_length_groups_equal_the_padded_decoder_with_a_memory_mask(tok: MSVAETokenizer) -> None:
    """Attention per group of rows of similar length (the CPU's attention at a ``layout`` of real positions) gives
    the padded decoder's logits and gradients where the memory has padding of its own (the speaker's h_tau)."""
    model = build("msvae", tok)
    batch = pad_more(real_batch(tok, LENGTHS))
    kept = torch.arange(batch["input_ids"].shape[1])[None, :] < torch.tensor([7, 3, 5, 2, 7, 4])[:, None]
    batch["attention_mask"] = batch["attention_mask"] * kept  # instructions of several lengths
    batch["input_ids"] = batch["input_ids"].masked_fill(~batch["attention_mask"].bool(), tok.pad_token_id)
    memory = torch.randn(len(LENGTHS), 5, model.config.latent_dim, requires_grad=True)
    memory_mask = torch.arange(5)[None, :] < torch.tensor([5, 1, 3, 2, 4, 5])[:, None]
    tokens = RealPositions(batch["attention_mask"])
    assert len(tokens.groups.sizes) > 1  # the test's rows fall in several groups

    def run(positions) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        memory.grad = None
        out = model.instruction_decoder(batch["input_ids"], memory, memory_mask, layout=positions)
        out = out if positions is not None else out[batch["attention_mask"].bool()]
        (out * torch.linspace(-1.0, 1.0, out.shape[-1])).sum().backward()
        return out.detach(), [memory.grad] + [p.grad for p in model.instruction_decoder.parameters()]

    ours, ours_grads = run(tokens)
    ref, ref_grads = run(None)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(ours_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_length_groups_switch_keeps_the_objective(tok: MSVAETokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend without length groups (``Backend(length_groups=False)``) runs attention over the whole padded
    batch (fewer, larger kernels), with the same terms of Eq. 10 and gradients as the length groups."""
    model = build("msvae", tok).train()
    batch = pad_more(real_batch(tok, LENGTHS))
    kept = torch.arange(batch["input_ids"].shape[1])[None, :] < torch.tensor([7, 3, 5, 2, 7, 4])[:, None]
    batch["attention_mask"] = batch["attention_mask"] * kept
    extra = unpaired(pad_more(real_batch(tok, (8, 3, 6), seed=1), seed=1))
    shapes: list[torch.Size] = []
    attention = F.scaled_dot_product_attention

    def counted(q: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        shapes.append(q.shape)
        return attention(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)

    def run() -> tuple[dict[str, torch.Tensor], list[torch.Tensor], int]:
        model.zero_grad(set_to_none=True)
        shapes.clear()
        torch.manual_seed(5)
        out = model(**batch, **extra, reduction="none")
        out.loss.backward()
        return ({name: getattr(out, name) for name in (*TERMS, "v", "loss")},
                [p.grad.clone() for p in model.parameters()], len(shapes))

    grouped, grouped_grads, grouped_calls = run()
    with model.using_backend(Backend("default, padded attention", length_groups=False)):
        padded, padded_grads, padded_calls = run()
    assert grouped_calls > padded_calls
    for name, value in padded.items():
        torch.testing.assert_close(grouped[name], value, rtol=1e-5, atol=1e-5, msg=name)
    for a, b in zip(grouped_grads, padded_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_length_groups_pad_each_row_once_and_unpad_exactly() -> None:
    """Every row with a real position lies in one group, its positions first and zeros after; ``unpad``
    returns the real positions bit for bit; rows without a real position are in no group."""
    generator = torch.Generator().manual_seed(0)
    for trial in range(50):
        rows, length = 1 + trial % 13, 1 + trial % 9
        lengths = torch.randint(0, length + 1, (rows,), generator=generator)
        mask = torch.arange(length)[None, :] < lengths[:, None]
        positions = RealPositions(mask)
        groups = LengthGroups(positions, max_groups=1 + trial % 4)
        x = torch.randn(rows, length, 3, generator=generator)
        parts = groups.pad(positions.gather(x))
        assert len(parts) <= 1 + trial % 4 and sum(groups.sizes) == int((lengths > 0).sum())
        torch.testing.assert_close(groups.unpad(parts), x[mask], rtol=0, atol=0)
        for part, part_rows, row_ids in zip(parts, groups.rows(x), groups.rows(torch.arange(rows))):
            torch.testing.assert_close(part_rows, x[row_ids], rtol=0, atol=0)
            for padded, row in zip(part, row_ids.tolist()):
                n = int(lengths[row])
                assert 0 < n <= part.shape[1]
                torch.testing.assert_close(padded[:n], x[row, :n], rtol=0, atol=0)
                assert not padded[n:].any()


def test_group_lengths_minimise_the_attention_work() -> None:
    """The groups' padded lengths give the least sum of rows x length^2 over every way of cutting the rows,
    sorted by length, into at most that many runs (checked against every cut)."""
    def work(counts: dict[int, int], padded: list[int]) -> int:
        return sum(rows * min(p for p in padded if p >= length) ** 2 for length, rows in counts.items())

    rng = random.Random(0)
    for _ in range(100):
        lengths = rng.sample(range(1, 40), rng.randint(1, 7))
        counts = {length: rng.randint(1, 20) for length in lengths}
        groups, longest_first = rng.randint(1, 5), sorted(lengths, reverse=True)
        best = min(work(counts, [longest_first[0], *cut]) for k in range(min(groups, len(lengths)))
                   for cut in itertools.combinations(longest_first[1:], k))
        ours = _group_lengths(counts, groups)
        assert len(ours) <= groups and ours[0] == longest_first[0] and work(counts, ours) == best
    assert _group_lengths({}, 4) == []


def test_decoder_under_stacked_memories_equals_one_pass_per_memory(tok: MSVAETokenizer) -> None:
    """Several memories per instruction: the first self-attention shared by the stacked memories gives each
    memory's own pass, in the memories' order, logits and gradients; a memory of a row count that is not a multiple
    of the instructions', several memories with a cache, or a layout with a cache, is refused, each naming its
    misuse."""
    model = build("msvae", tok)
    batch = pad_more(real_batch(tok, LENGTHS))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    zs = [torch.randn(len(LENGTHS), model.config.num_latent_tokens, model.config.latent_dim, requires_grad=True)
          for _ in range(3)]

    def run(forward) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        for z in zs:
            z.grad = None
        out = forward()
        (out * torch.linspace(0.5, 2.0, out.shape[0])).sum().backward()
        return out.detach(), [z.grad for z in zs] + [p.grad for p in model.instruction_decoder.parameters()]

    ours, ours_grads = run(lambda: model.instruction_log_likelihood(ids, mask, torch.cat(zs), None)[0])
    ref, ref_grads = run(lambda: torch.cat([model.instruction_log_likelihood(ids, mask, z, None)[0] for z in zs]))
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(ours_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="memory must hold one or more rows per instruction"):
        model.instruction_decoder(ids, torch.cat(zs)[:-1], None)
    with pytest.raises(ValueError, match=rf"^{len(zs)} memories per instruction are for teacher forcing"):
        model.instruction_decoder(ids, torch.cat(zs), None, cache=DynamicCache())
    with pytest.raises(ValueError, match="^a layout of real positions is for teacher forcing: pass no cache"):
        model.instruction_decoder(ids, zs[0], None, cache=DynamicCache(), layout=RealPositions(mask.bool()))


def test_real_positions_repeat_stacks_the_batch() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    x = torch.randn(2, 3, 4)
    twice = RealPositions(mask).repeat(2)
    torch.testing.assert_close(twice.gather(torch.cat([x, x + 1])), torch.cat([x[mask], x[mask] + 1]), rtol=0, atol=0)
    torch.testing.assert_close(twice.sum_rows(torch.ones(6)), torch.tensor([2.0, 1, 2, 1]))
    with pytest.raises(ValueError, match="row-major"):
        RealPositions(mask, packed=True).repeat(2)


def test_bottleneck_attention_equals_multihead_attention(tok: MSVAETokenizer) -> None:
    model = build("msvae", tok, num_latent_tokens=3)
    states = torch.randn(4, 6, model.config.hidden_size)
    mask = torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0], [1] * 3 + [0] * 3, [1] + [0] * 5], dtype=torch.bool)
    states[~mask] = 1e3  # garbage on padding
    with torch.no_grad():
        ours = model.trajectory_posterior(states, mask)
        ref = padded_bottleneck(model.trajectory_posterior, states, mask)
    for a, b in zip(ours, ref):
        assert a.shape == (4, 3, model.config.latent_dim)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_state_dict_keeps_the_multihead_attention_names(tok: MSVAETokenizer) -> None:
    """The state dict keeps nn.MultiheadAttention's names, so earlier checkpoints load."""
    names = set(MSVAEModel(MSVAEConfig(**tiny_kwargs(tok))).state_dict())
    assert {"trajectory_posterior.attention.in_proj_weight", "trajectory_posterior.attention.out_proj.weight",
            "instruction_posterior.attention.in_proj_bias"} <= names
