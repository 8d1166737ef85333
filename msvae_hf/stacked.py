"""R MS-VAE runs as one model: each parameter stacked along a leading run axis, each layer batched over runs.

One App. D MS-VAE update is a few hundred small kernels; on a GPU it is bound by their launches, not by its
FLOPs. :class:`StackedMSVAE` computes the Eq. 10 loss of R runs (seeds or data orders of one config) in one pass
whose number of kernels does not grow with R: linear layers are batched matrix products over runs, the
convolutions are grouped by run, the recurrent networks step all runs at once. Each run keeps its own
parameters, noise and data; the loss is the sum of the runs' losses, so each run's gradient is its own, and one
Adam over the stacked parameters is R Adams (Adam is elementwise).

::

    batches of R runs --stack_batches--> [R, B, ...] (padded to the longest of all runs)
    stacked parameters [R, ...] --forward--> per-run Eq. 10 loss [R] (and every term, [R, B])
    noise: run r draws from its own generator, in the order MSVAEModel.forward draws from torch's

Everything runs on the padded layout with masks (fixed shapes, no host syncs), which is what the GPU wants;
:class:`~msvae_hf.modeling_msvae.MSVAEModel` skips padding instead (the CPU's choice). Both compute the same
objective: ``tests/test_stacked.py`` checks each run's terms, gradients and Adam trajectory against the run
trained alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .losses import (
    gaussian_kl,
    msvae_loss,
    paired_elbo,
    projected_wasserstein,
    reduce_latent,
    reduce_sequence,
    unpaired_elbo,
)
from .modeling_msvae import MSVAEModel
from .ops.recurrence import gru_update, lstm_update

TRAJECTORY_KEYS = ("observations", "directions", "actions", "trajectory_mask")


@dataclass
class StackedOutput:
    """Per-run results of :meth:`StackedMSVAE.forward`: ``loss`` [R] (their sum is what to minimise), and the
    terms of Eq. 9, 3 and 10 per sample ([R, B], or [R, U] for ``v``) and ``domain_distance`` [R]."""

    loss: torch.Tensor
    j_bar: torch.Tensor
    v: torch.Tensor
    domain_distance: torch.Tensor
    a_1: torch.Tensor
    a_2: torch.Tensor
    b_1: torch.Tensor
    b_2: torch.Tensor
    c_1: torch.Tensor
    c_2: torch.Tensor


def stack_batches(batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-run batches (``DemoCollator`` output, paired keys and ``unpaired_`` keys) -> one dict of [R, B, ...]
    tensors, each time and token axis zero-padded to the longest of all runs (padding is masked)."""
    if not batches:
        raise ValueError("stack_batches needs at least one run's batch")
    keys = set(batches[0])
    for batch in batches[1:]:
        if set(batch) != keys:
            raise ValueError(f"every run's batch must have the same keys, got {sorted(keys)} and {sorted(batch)}")
    out = {}
    for key in sorted(keys):
        tensors = [b[key] for b in batches]
        if len({t.shape[0] for t in tensors}) != 1:
            raise ValueError(f"{key}: every run needs the same batch size, got {[t.shape[0] for t in tensors]}")
        length = max(t.shape[1] for t in tensors)
        out[key] = torch.stack([F.pad(t, (0, 0) * (t.dim() - 2) + (0, length - t.shape[1])) for t in tensors])
    return out


class StackedMSVAE(nn.Module):
    """The parameters of R same-config :class:`MSVAEModel` s, stacked, and their losses computed together."""

    def __init__(self, models: Sequence[MSVAEModel]) -> None:
        super().__init__()
        if not models:
            raise ValueError("StackedMSVAE needs at least one model")
        config = models[0].config
        reference = {k: v for k, v in config.to_dict().items() if k != "architectures"}
        for i, model in enumerate(models[1:], 1):
            other = {k: v for k, v in model.config.to_dict().items() if k != "architectures"}
            if other != reference:
                differ = sorted(k for k in reference.keys() | other.keys() if reference.get(k) != other.get(k))
                raise ValueError(f"model {i}'s config differs from model 0's in {differ}")
        if config.dropout:
            raise ValueError(f"StackedMSVAE computes without dropout, got dropout={config.dropout}")
        if not config.unpaired_trains_action_decoder:
            raise ValueError("StackedMSVAE needs unpaired_trains_action_decoder=True (App. D)")
        self.config = config
        self.num_runs = len(models)
        self.names = [name for name, _ in models[0].named_parameters()]
        self.params = nn.ParameterList(
            nn.Parameter(torch.stack([dict(m.named_parameters())[n].detach() for m in models]).clone())
            for n in self.names
        )
        self._index = {name: i for i, name in enumerate(self.names)}

    def p(self, name: str) -> torch.Tensor:
        """The stacked parameter ``name`` (an MSVAEModel parameter name): [R, ...]."""
        return self.params[self._index[name]]

    def state_dict_of(self, run: int) -> dict[str, torch.Tensor]:
        """Run ``run``'s parameters, as :meth:`MSVAEModel.load_state_dict` takes them."""
        return {name: self.p(name)[run].detach().clone() for name in self.names}

    # ------------------------------------------------------------------------------------------ noise
    def draw_noise(self, generators: Sequence[torch.Generator], batch: dict[str, torch.Tensor]) -> dict:
        """Each run's noise from its own generator, in MSVAEModel.forward's order: eps for z ~ q(z|a,o) over
        the paired then unpaired trajectories, eps for z ~ q(z|y), then one projection matrix per token for D'."""
        if len(generators) != self.num_runs:
            raise ValueError(f"need one generator per run ({self.num_runs}), got {len(generators)}")
        cfg, device = self.config, self.params[0].device
        k, d = cfg.num_latent_tokens, cfg.latent_dim
        b, u = batch["actions"].shape[1], batch["unpaired_actions"].shape[1]
        eps_tau, eps_y, theta = [], [], []
        for g in generators:
            eps_tau.append(torch.randn(b + u, k, d, generator=g, device=device))
            eps_y.append(torch.randn(b, k, d, generator=g, device=device))
            theta.append(torch.stack([torch.randn(d, cfg.swd_projections, generator=g, device=device)
                                      for _ in range(k)]))
        return {"eps_tau": torch.stack(eps_tau), "eps_y": torch.stack(eps_y), "theta": torch.stack(theta)}

    # ------------------------------------------------------------------------------------------ forward
    def forward(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> StackedOutput:
        """Eq. 10 for every run on a :func:`stack_batches` batch with paired and unpaired trajectories."""
        cfg = self.config
        for key in (*TRAJECTORY_KEYS, "input_ids", "attention_mask", *(f"unpaired_{k}" for k in TRAJECTORY_KEYS)):
            if key not in batch:
                raise ValueError(f"the stacked batch has no {key!r} (paired and unpaired batches are both needed)")
            if batch[key].shape[0] != self.num_runs:
                raise ValueError(f"{key} has {batch[key].shape[0]} runs, the model {self.num_runs}")
        num_paired = batch["actions"].shape[1]
        trajectory = [_cat_time(batch[k], batch[f"unpaired_{k}"]) for k in TRAJECTORY_KEYS]
        obs, dirs, actions, mask = trajectory[0], trajectory[1], trajectory[2].long(), trajectory[3].bool()
        features = self._frame_features("obs_encoder", obs, dirs, mask)
        speaker_features = features if cfg.share_observation_encoder else self._frame_features(
            "trajectory_obs_encoder", obs, dirs, mask)
        mean_tau, logvar_tau = self._bottleneck(
            "trajectory_posterior", self._trajectory_states(speaker_features, actions, mask), mask)
        ids, ids_mask = batch["input_ids"].long(), batch["attention_mask"].bool()
        mean_y, logvar_y = self._bottleneck("instruction_posterior", self._instruction_states(ids, ids_mask), ids_mask)
        z_tau = mean_tau + noise["eps_tau"] * torch.exp(0.5 * logvar_tau)
        z_y = mean_y + noise["eps_y"] * torch.exp(0.5 * logvar_y)
        states = self._action_states(features, actions, mask)

        p, u = slice(0, num_paired), slice(num_paired, None)
        a_1_all = self._action_log_likelihood(states, z_tau, actions, mask)
        b_1_all = -self._kl_to_prior(mean_tau, logvar_tau, z_tau)
        c_2 = self._action_log_likelihood(states[:, p], z_y, actions[:, p], mask[:, p])
        a_2 = self._instruction_log_likelihood(z_y, ids, ids_mask)
        c_1 = self._instruction_log_likelihood(z_tau[:, p], ids, ids_mask)
        b_2 = -self._kl_to_prior(mean_y, logvar_y, z_y)
        betas = cfg.betas
        a_1, b_1 = a_1_all[:, p], b_1_all[:, p]
        j_bar = paired_elbo((a_1, a_2), (b_1, b_2), (c_1, c_2), betas)
        v = unpaired_elbo(a_1_all[:, u], b_1_all[:, u], betas[0])
        d = projected_wasserstein(mean_tau[:, p].transpose(1, 2), mean_tau[:, u].transpose(1, 2), noise["theta"],
                                  cfg.swd_p).sum(-1)  # SW per run and token (App. B), summed over tokens
        loss = torch.stack([msvae_loss(j_bar[r], v[r], d[r], cfg.gamma, cfg.alpha) for r in range(self.num_runs)])
        return StackedOutput(loss=loss, j_bar=j_bar, v=v, domain_distance=d, a_1=a_1, a_2=a_2, b_1=b_1, b_2=b_2,
                             c_1=c_1, c_2=c_2)

    # ------------------------------------------------------------------------------------------ modules
    def _frame_features(self, prefix: str, obs, dirs, mask) -> torch.Tensor:
        """ObservationEncoder over every frame slot [R, B, T, 7, 7, 3] -> [R, B, T, H], zeros on padding."""
        r, b, t = obs.shape[:3]
        cfg = self.config
        offsets = torch.arange(obs.shape[-1], device=obs.device) * cfg.obs_num_values
        cells = _embedding(obs.reshape(r, b * t, *obs.shape[3:]).long() + offsets,
                           self.p(f"{prefix}.cell_embedding.weight")).sum(-2)  # [R, N, 7, 7, E]
        n, height, width, e = cells.shape[1:]
        x = cells.permute(1, 0, 4, 2, 3).reshape(n, r * e, height, width)
        for i in (0, 2):  # conv, ReLU, conv, ReLU: grouped by run
            w, bias = self.p(f"{prefix}.conv.{i}.weight"), self.p(f"{prefix}.conv.{i}.bias")
            x = F.relu(F.conv2d(x, w.flatten(0, 1), bias.flatten(), padding=1, groups=r))
        x = F.max_pool2d(x, 2)
        x = x.reshape(n, r, -1).transpose(0, 1)  # each run's [C, h, w] flattened, as Tensor.flatten(1)
        out = F.relu(_linear(x, self.p(f"{prefix}.proj.weight"), self.p(f"{prefix}.proj.bias"))
                     + _embedding(dirs.reshape(r, n).long(), self.p(f"{prefix}.direction_embedding.weight")))
        return out.view(r, b, t, -1) * mask.unsqueeze(-1)

    def _trajectory_states(self, features, actions, mask) -> torch.Tensor:
        """TrajectoryEncoder (GRU) -> h_tau [R, B, T, H], zeros on padding."""
        x = torch.cat([features, _embedding(actions, self.p("trajectory_encoder.action_embedding.weight"))], -1)
        return _gru(x, *self._rnn("trajectory_encoder.gru", "")) * mask.unsqueeze(-1)

    def _instruction_states(self, ids, mask) -> torch.Tensor:
        """InstructionEncoder (bidirectional GRU) -> h_y [R, B, L, H], zeros on padding; the backward direction
        starts at each instruction's last token, as over packed sequences."""
        x = _embedding(ids, self.p("instruction_encoder.word_embedding.weight"), self.config.pad_token_id)
        forward = _gru(x, *self._rnn("instruction_encoder.gru", ""))
        steps = torch.arange(ids.shape[-1], device=ids.device)
        lengths = mask.long().sum(-1, keepdim=True)
        reverse = torch.where(steps < lengths, lengths - 1 - steps, steps)  # [R, B, L], its own inverse
        backward = _gather_time(_gru(_gather_time(x, reverse), *self._rnn("instruction_encoder.gru", "_reverse")),
                                reverse)
        return torch.cat([forward, backward], -1) * mask.unsqueeze(-1)

    def _bottleneck(self, prefix: str, states, mask) -> tuple[torch.Tensor, torch.Tensor]:
        """BottleneckAttention (Sec. 3.2): K learned queries over states [R, B, S, H] -> mean, logvar [R, B, K, D]."""
        r, b, s, hidden = states.shape
        heads = self.config.decoder_heads
        w_q, w_kv = self.p(f"{prefix}.attention.in_proj_weight").split([hidden, 2 * hidden], dim=1)
        b_q, b_kv = self.p(f"{prefix}.attention.in_proj_bias").split([hidden, 2 * hidden], dim=1)
        keys = _linear(states, self.p(f"{prefix}.key_proj.weight"), self.p(f"{prefix}.key_proj.bias"))
        k, v = _linear(keys, w_kv, b_kv).chunk(2, -1)
        q = _linear(self.p(f"{prefix}.queries"), w_q, b_q)  # [R, K, H]
        q = q.unsqueeze(1).expand(r, b, *q.shape[1:])
        tokens = F.scaled_dot_product_attention(
            _heads(q, heads), _heads(k, heads), _heads(v, heads), attn_mask=mask.reshape(r * b, 1, 1, s))
        tokens = _linear(_merge_heads(tokens, r), self.p(f"{prefix}.attention.out_proj.weight"),
                         self.p(f"{prefix}.attention.out_proj.bias"))
        mean = _linear(tokens, self.p(f"{prefix}.to_mean.weight"), self.p(f"{prefix}.to_mean.bias"))
        logvar = _linear(tokens, self.p(f"{prefix}.to_logvar.weight"), self.p(f"{prefix}.to_logvar.bias"))
        return mean, logvar.clamp(-10.0, 10.0)

    def _kl_to_prior(self, mean, logvar, z) -> torch.Tensor:
        """-B_m = sum_k KL[q(z_k|x) || p(z_k|z_<k)] (App. A, D) per sample: [R, N]."""
        if self.config.prior == "normal":
            mean_p, logvar_p = torch.zeros_like(z), torch.zeros_like(z)
        else:
            previous = torch.cat([torch.zeros_like(z[:, :, :1]), z[:, :, :-1]], dim=2)
            out = _gru(previous, *self._rnn("prior.gru", ""))
            mean_p, logvar_p = _linear(out, self.p("prior.head.weight"), self.p("prior.head.bias")).chunk(2, -1)
            logvar_p = logvar_p.clamp(-10.0, 10.0)
        return reduce_latent(gaussian_kl(mean, logvar, mean_p, logvar_p), mean.shape[-1], self.config.loss_reduction)

    def _action_states(self, features, actions, mask) -> torch.Tensor:
        """h'_t of the action decoder's LSTM: [R, B, T, H] (padding comes last, so never reaches a real step)."""
        start = torch.full_like(actions[..., :1], self.config.num_actions)
        previous = torch.cat([start, actions[..., :-1]], dim=-1)
        x = torch.cat([features, _embedding(previous, self.p("action_decoder.action_embedding.weight"))], -1)
        return _lstm(x, *self._rnn("action_decoder.lstm", "")) * mask.unsqueeze(-1)

    def _action_log_likelihood(self, states, z, actions, mask) -> torch.Tensor:
        """log p(a | z, o) (Eq. 5): Luong attention over the K tokens of z, then f_act -> [R, B]."""
        values = _linear(z, self.p("action_decoder.attention.memory_proj.weight"),
                         self.p("action_decoder.attention.memory_proj.bias"))  # [R, B, K, H]
        scores = states @ values.transpose(-1, -2) / math.sqrt(states.shape[-1])
        context = torch.softmax(scores, dim=-1) @ values
        hidden = torch.tanh(_linear(torch.cat([context, states], -1), self.p("action_decoder.head.0.weight"),
                                    self.p("action_decoder.head.0.bias")))
        logits = _linear(hidden, self.p("action_decoder.head.2.weight"), self.p("action_decoder.head.2.bias"))
        return _masked_log_likelihood(logits, actions, mask, self.config.loss_reduction)

    def _instruction_log_likelihood(self, z, ids, mask) -> torch.Tensor:
        """log p(y | z) (Eq. 6): the two-layer transformer decoder, teacher forced -> [R, B]."""
        r, b = ids.shape[:2]
        prefix, heads = "instruction_decoder", self.config.decoder_heads
        inputs = ids[..., :-1]
        steps = torch.arange(inputs.shape[-1], device=ids.device)
        x = (_embedding(inputs, self.p(f"{prefix}.token_embedding.weight"), self.config.pad_token_id)
             + self.p(f"{prefix}.position_embedding.weight")[:, steps].unsqueeze(1))
        memory = _linear(z, self.p(f"{prefix}.memory_proj.weight"), self.p(f"{prefix}.memory_proj.bias"))
        causal = steps[None, :] <= steps[:, None]
        for i in range(self.config.decoder_layers):
            layer = f"{prefix}.layers.{i}"

            def lin(name: str, x: torch.Tensor, layer: str = layer) -> torch.Tensor:
                return _linear(x, self.p(f"{layer}.{name}.weight"), self.p(f"{layer}.{name}.bias"))

            def norm(name: str, x: torch.Tensor, layer: str = layer) -> torch.Tensor:
                return _layer_norm(x, self.p(f"{layer}.{name}.weight"), self.p(f"{layer}.{name}.bias"))

            q, k, v = lin("qkv", norm("norm1", x)).chunk(3, -1)
            attn = F.scaled_dot_product_attention(_heads(q, heads), _heads(k, heads), _heads(v, heads),
                                                  attn_mask=causal)
            x = x + lin("self_out", _merge_heads(attn, r))
            mk, mv = lin("cross_kv", memory).chunk(2, -1)
            attn = F.scaled_dot_product_attention(_heads(lin("cross_q", norm("norm2", x)), heads), _heads(mk, heads),
                                                  _heads(mv, heads))
            x = x + lin("cross_out", _merge_heads(attn, r))
            x = x + lin("mlp.2", F.gelu(lin("mlp.0", norm("norm3", x))))
        x = _layer_norm(x, self.p(f"{prefix}.norm.weight"), self.p(f"{prefix}.norm.bias"))
        logits = _linear(x, self.p(f"{prefix}.lm_head.weight"), self.p(f"{prefix}.lm_head.bias"))
        return _masked_log_likelihood(logits, ids[..., 1:], mask[..., 1:], self.config.loss_reduction)

    def _rnn(self, prefix: str, suffix: str) -> tuple[torch.Tensor, ...]:
        return tuple(self.p(f"{prefix}.{kind}_l0{suffix}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))


# ---------------------------------------------------------------------------------------------- layers
def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Each run's nn.Linear: x [R, ..., in], weight [R, out, in], bias [R, out] -> [R, ..., out]."""
    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    out = torch.bmm(flat, weight.transpose(1, 2)) if bias is None else torch.baddbmm(
        bias.unsqueeze(1), flat, weight.transpose(1, 2))
    return out.view(*x.shape[:-1], weight.shape[1])


def _embedding(ids: torch.Tensor, table: torch.Tensor, padding_idx: int | None = None) -> torch.Tensor:
    """Each run's nn.Embedding: ids [R, ...], table [R, V, E] -> [R, ..., E]; no gradient reaches the
    ``padding_idx`` row, as nn.Embedding's."""
    r, size = table.shape[:2]
    offsets = (torch.arange(r, device=ids.device) * size).view(r, *([1] * (ids.dim() - 1)))
    out = F.embedding(ids + offsets, table.reshape(r * size, -1))
    if padding_idx is not None:
        out = torch.where((ids == padding_idx).unsqueeze(-1), out.detach(), out)
    return out


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    return F.layer_norm(x, x.shape[-1:], eps=eps) * weight.view(shape) + bias.view(shape)


def _gru(x, weight_ih, weight_hh, bias_ih, bias_hh) -> torch.Tensor:
    """nn.GRU's recurrence (PyTorch's gate order r, z, n) for every run: x [R, B, T, I] -> [R, B, T, H]."""
    r, b, t = x.shape[:3]
    gates_x = _linear(x, weight_ih, bias_ih)
    h = x.new_zeros(r, b, weight_hh.shape[2])
    outputs = []
    for step in range(t):
        h = gru_update(gates_x[:, :, step], _linear(h, weight_hh, bias_hh), h)
        outputs.append(h)
    return torch.stack(outputs, dim=2)


def _lstm(x, weight_ih, weight_hh, bias_ih, bias_hh) -> torch.Tensor:
    """nn.LSTM's recurrence (gate order i, f, g, o) for every run: x [R, B, T, I] -> [R, B, T, H]."""
    r, b, t = x.shape[:3]
    gates_x = _linear(x, weight_ih, bias_ih)
    h = x.new_zeros(r, b, weight_hh.shape[2])
    c = torch.zeros_like(h)
    outputs = []
    for step in range(t):
        h, c = lstm_update(gates_x[:, :, step] + _linear(h, weight_hh, bias_hh), c)
        outputs.append(h)
    return torch.stack(outputs, dim=2)


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [R, B, T, E] reordered along T by index [R, B, T]."""
    return torch.gather(x, 2, index.unsqueeze(-1).expand(*index.shape, x.shape[-1]))


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[R, B, n, H] -> [R * B, heads, n, H / heads]."""
    r, b, n, hidden = x.shape
    return x.reshape(r * b, n, heads, hidden // heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor, runs: int) -> torch.Tensor:
    """[R * B, heads, n, dh] -> [R, B, n, heads * dh]."""
    rb, heads, n, dh = x.shape
    return x.transpose(1, 2).reshape(runs, rb // runs, n, heads * dh)


def _masked_log_likelihood(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, reduction: str
                           ) -> torch.Tensor:
    """log p(target) over real positions, reduced as :func:`~msvae_hf.losses.reduce_sequence`: logits
    [R, B, S, V] -> [R, B]."""
    logp = -F.cross_entropy(logits.float().flatten(0, 2), targets.flatten(), reduction="none")
    return reduce_sequence((logp.view(targets.shape) * mask.to(logp.dtype)).sum(-1), mask.sum(-1), reduction)


def _cat_time(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Two [R, B, T, ...] batches joined along B, time padded to the longer."""
    length = max(first.shape[2], second.shape[2])

    def pad(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t, (0, 0) * (t.dim() - 3) + (0, length - t.shape[2]))

    return torch.cat([pad(first), pad(second)], dim=1)
