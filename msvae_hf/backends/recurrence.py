"""The recurrent layers' runs over right-padded sequences, so that padding never reaches a real position.

:func:`run_recurrence` picks the run for the layout its caller names (the model's backend,
:mod:`msvae_hf.backends.registry`): over the padded batch in the static layout (:func:`_run_padded`), stepped on the
real positions in packed order on the CPU (:func:`packed_recurrence`), or on a ``PackedSequence`` elsewhere.
:func:`gru_update` and :func:`lstm_update` are one step of ``nn.GRU`` and ``nn.LSTM``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .linear import linear
from .positions import RealPositions


def run_recurrence(
    rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor, static: bool = False, onednn: bool = True
) -> torch.Tensor:
    """Run an RNN over right-padded sequences so padding never reaches a real position: ``x`` [B, S, I],
    ``mask`` [B, S] -> [B, S, hidden x directions], zeros on padding.

    ``static`` (the static backend's layout, no shape that depends on the data): a one-layer GRU or LSTM runs over
    the padded batch
    (:func:`_run_padded`). Otherwise, on the CPU, a one-layer GRU or LSTM runs through :func:`packed_recurrence`
    on the real positions gathered in packed order; elsewhere ``rnn`` runs on a ``PackedSequence``. The CPU's
    ``pack_padded_sequence`` and ``pad_packed_sequence`` copy step by step, and the backward of each step's copy is
    a tensor the size of the whole batch.
    """
    if static:
        out = _run_padded(rnn, x, mask)
    elif x.device.type == "cpu" and isinstance(rnn, nn.GRU | nn.LSTM) and rnn.num_layers == 1:
        steps = RealPositions(mask, packed=True)
        out = steps.scatter(packed_recurrence(rnn, steps.gather(x), steps.batch_sizes, onednn))
    else:
        lengths = mask.long().sum(1).clamp(min=1).cpu()
        out, _ = rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out * mask.unsqueeze(-1).to(out.dtype)


def _run_padded(rnn: nn.GRU | nn.LSTM, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A one-layer GRU or LSTM over right-padded ``x`` [B, S, I] with no shape that depends on the data: one
    call per direction over the whole padded batch (one cuDNN kernel on a GPU). The forward direction reaches a
    row's padding only after its real steps; the reverse direction reads each row reversed within its length
    (padding after the real steps again) and its outputs are put back in order. Values at real positions equal
    :func:`packed_recurrence`'s; the caller zeroes padding."""
    if rnn.num_layers != 1 or not rnn.batch_first or getattr(rnn, "proj_size", 0):
        raise ValueError("the static layout runs one-layer, batch-first GRUs and LSTMs without projections")
    lstm = isinstance(rnn, nn.LSTM)
    run = torch._VF.lstm if lstm else torch._VF.gru
    hidden = rnn.hidden_size

    def direction(inputs: torch.Tensor, suffix: str) -> torch.Tensor:
        weights = [getattr(rnn, f"{name}_l0{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        h0 = inputs.new_zeros(1, inputs.shape[0], hidden)
        state = (h0, h0) if lstm else h0
        return run(inputs, state, weights, True, 1, 0.0, rnn.training, False, True)[0]

    out = direction(x, "")
    if not rnn.bidirectional:
        return out
    length = mask.long().sum(1, keepdim=True)
    steps = torch.arange(x.shape[1], device=x.device)[None, :]
    reverse = torch.where(steps < length, length - 1 - steps, steps)  # an involution on each row's steps
    flip = reverse.unsqueeze(-1)
    backward = direction(x.gather(1, flip.expand(-1, -1, x.shape[2])), "_reverse")
    return torch.cat([out, backward.gather(1, flip.expand(-1, -1, hidden))], dim=-1)


def packed_recurrence(
    rnn: nn.GRU | nn.LSTM, data: torch.Tensor, batch_sizes: list[int], onednn: bool = True
) -> torch.Tensor:
    """``rnn(packed)[0].data`` of a one-layer GRU or LSTM (either direction) from zero states, the same values:
    packed ``data`` [N, input] whose step t is ``batch_sizes[t]`` rows -> [N, hidden x directions].

    The input projections of every step are one matrix product, cut into steps with ``split``. PyTorch's own
    packed recurrence on the CPU cuts them with one ``narrow`` per step, whose backward writes a zero tensor
    the size of the whole sequence for each step: time and memory grow with length x positions.
    """
    directions = [""] + (["_reverse"] if rnn.bidirectional else [])
    out = [_one_direction(rnn, data, batch_sizes, suffix, onednn) for suffix in directions]
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


def _one_direction(
    rnn: nn.GRU | nn.LSTM, data: torch.Tensor, sizes: list[int], suffix: str, onednn: bool
) -> torch.Tensor:
    """One direction of :func:`packed_recurrence` over packed ``data`` [N, I] (steps of ``sizes`` rows)."""
    weight_hh, bias_hh = getattr(rnn, f"weight_hh_l0{suffix}"), getattr(rnn, f"bias_hh_l0{suffix}")
    weight_ih, bias_ih = getattr(rnn, f"weight_ih_l0{suffix}"), getattr(rnn, f"bias_ih_l0{suffix}")
    inputs = linear(data, weight_ih, bias_ih, onednn).split(sizes)
    lstm, hidden = isinstance(rnn, nn.LSTM), weight_hh.shape[1]
    h = c = data.new_zeros(0, hidden)
    outputs: list[torch.Tensor] = [data] * len(sizes)
    # A sequence's rows come first in every step it is in, so the live states are always a prefix.
    for step in reversed(range(len(sizes))) if suffix else range(len(sizes)):
        size = sizes[step]
        if size < h.shape[0]:
            h, c = h[:size], c[:size]
        elif size > h.shape[0]:  # the reverse direction: sequences start at their last step, from zeros
            new = data.new_zeros(size - h.shape[0], hidden)
            h, c = torch.cat([h, new]), torch.cat([c, new]) if lstm else c  # a GRU has no cell state
        if lstm:
            h, c = lstm_update(inputs[step] + linear(h, weight_hh, bias_hh, onednn), c)
        else:
            h = gru_update(inputs[step], linear(h, weight_hh, bias_hh, onednn), h)
        outputs[step] = h
    return torch.cat(outputs)


def gru_update(input_gates: torch.Tensor, hidden_gates: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """nn.GRU's step (gate order r, z, n) from the input's and the state's projections [..., 3H]."""
    xr, xz, xn = input_gates.chunk(3, -1)
    hr, hz, hn = hidden_gates.chunk(3, -1)
    reset, update = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    candidate = torch.tanh(xn + reset * hn)
    return candidate + update * (h - candidate)  # (1 - z) n + z h, in PyTorch's order of operations


def lstm_update(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.LSTM's step (gate order i, f, g, o) from the summed projections [..., 4H]: (h, c)."""
    i, f, g, o = gates.chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c
