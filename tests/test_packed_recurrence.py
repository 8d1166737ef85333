"""The CPU's packed recurrence and the observation encoder's shortcuts give what the plain layers give.

On the CPU the recurrent layers gather the real positions in packed order (``RealPositions(mask, packed=True)``)
and run ``backends.recurrence.packed_recurrence`` instead of ``nn.GRU``/``nn.LSTM`` on a ``PackedSequence``. The
observation encoder looks each cell up in a table of every cell's summed embedding, max-pools before its second
ReLU and
reads the pooled map in memory order with ``proj``'s columns reordered. Each is compared with the layers it
stands for (values and gradients), and the whole MS-VAE objective with all of them put back as they were.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from model_helpers import TERMS, build, pad_more, real_batch, unpaired
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import msvae_hf.backends.registry as backends
import msvae_hf.models.modules as modules
from msvae_hf.backends.positions import RealPositions
from msvae_hf.backends.recurrence import packed_recurrence
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

LENGTHS = torch.tensor([9, 1, 4, 4, 7, 2, 9, 3])


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_recurrence_equals_the_torch_layer(kind: type[nn.RNNBase], bidirectional: bool) -> None:
    """Outputs and the gradients of input and weights, sequences of lengths 1 to the longest, unsorted."""
    torch.manual_seed(0)
    rnn = kind(6, 5, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(len(LENGTHS), int(LENGTHS.max()), 6, requires_grad=True)
    weights = torch.randn(int(LENGTHS.sum()), 5 * (2 if bidirectional else 1))

    def run(recurrence) -> tuple[torch.Tensor, ...]:
        packed = pack_padded_sequence(x, LENGTHS, batch_first=True, enforce_sorted=False)
        out = recurrence(packed)
        return (out, *torch.autograd.grad((out * weights).sum(), [x, *rnn.parameters()]))

    ours = run(lambda packed: packed_recurrence(rnn, packed.data, packed.batch_sizes.tolist()))
    ref = run(lambda packed: rnn(packed)[0].data)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_packed_positions_are_the_packed_sequence_layout() -> None:
    """Gathered in packed order, a batch is ``pack_padded_sequence``'s data (its row order within a step aside,
    where lengths tie), and scattering it back is ``pad_packed_sequence``, zeros on padding."""
    mask = torch.arange(int(LENGTHS.max()))[None, :] < LENGTHS[:, None]
    x = torch.randn(*mask.shape, 3)
    steps = RealPositions(mask, packed=True)
    packed = pack_padded_sequence(x, LENGTHS, batch_first=True, enforce_sorted=False)
    assert steps.batch_sizes == packed.batch_sizes.tolist()
    ours, start = steps.gather(x), 0
    for size in steps.batch_sizes:  # each step holds the same rows
        a, b = ours[start:start + size], packed.data[start:start + size]
        torch.testing.assert_close(a[a[:, 0].argsort()], b[b[:, 0].argsort()], rtol=0, atol=0)
        start += size
    torch.testing.assert_close(steps.scatter(ours), x * mask.unsqueeze(-1), rtol=0, atol=0)
    torch.testing.assert_close(steps.sum_rows(ours[:, 0]), (x[..., 0] * mask).sum(1))


def nchw_observation_encoder(self: modules.ObservationEncoder, observations, directions) -> torch.Tensor:
    """The observation encoder with each cell's values embedded and summed, the second ReLU before the max-pool
    and ``proj`` over the pooled map flattened in (C, h, w) order."""
    offsets = torch.arange(observations.shape[-1]) * self.num_values  # channel c's value v: row c * values + v
    cells = self.cell_embedding(observations.long() + offsets).sum(dim=-2)
    conv, relu = self.conv[:3], self.conv[-1]
    x = F.max_pool2d(relu(conv(cells.permute(0, 3, 1, 2).contiguous())), 2)  # ReLU, then the max-pool
    return F.relu(self.proj(x.flatten(1)) + self.direction_embedding(directions.long()))


@pytest.mark.parametrize("num_values", [16, 41])
def test_observation_encoder_equals_the_nchw_projection(num_values: int) -> None:
    """With the table of every cell's embedding (16 values) and with the sum per cell (41 ** 3 > the most)."""
    config = build("msvae", MSVAETokenizer.from_grammar(), obs_num_values=num_values).config
    encoder = modules.ObservationEncoder(config)
    assert encoder.cell_table == (num_values**3 <= modules.MAX_CELL_TABLE)
    observations = torch.randint(0, config.obs_num_values, (5, 7, 7, 3))
    directions = torch.randint(0, 4, (5,))
    ours, ref = encoder(observations, directions), nchw_observation_encoder(encoder, observations, directions)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    ours_grads = torch.autograd.grad(ours.square().sum(), list(encoder.parameters()))
    ref_grads = torch.autograd.grad(ref.square().sum(), list(encoder.parameters()))
    for a, b in zip(ours_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def torch_run_recurrence(rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The recurrent layers as PyTorch runs them on a ``PackedSequence``."""
    lengths = mask.long().sum(1).clamp(min=1)
    out, _ = rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0] * mask.unsqueeze(-1)


def test_msvae_objective_and_gradients_equal_the_torch_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every term of Eq. 10 and every gradient, against the same model with PyTorch's packed recurrence and
    the (C, h, w) projection (same noise)."""
    tok = MSVAETokenizer.from_grammar()
    model = build("msvae", tok, gamma=0.7, alpha=2.0).train()
    batch = pad_more(real_batch(tok, (5, 2, 4, 3, 7, 1)))
    extra = pad_more(real_batch(tok, (8, 3, 6), seed=1), seed=1)

    def run() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        out = model(**batch, **unpaired(extra), reduction="none")
        out.loss.backward()
        return dict(out.items()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ours, ours_grads = run()
    with monkeypatch.context() as patch:
        patch.setattr(backends, "run_recurrence", lambda rnn, x, mask, **_: torch_run_recurrence(rnn, x, mask))
        patch.setattr(modules.ObservationEncoder, "forward", nchw_observation_encoder)
        ref, ref_grads = run()
    for name in (*TERMS, "v", "domain_distance", "loss"):
        torch.testing.assert_close(ours[name], ref[name], rtol=1e-5, atol=1e-5, msg=name)
    assert ours_grads.keys() == ref_grads.keys() and len(ours_grads) == len(list(model.parameters()))
    for name, grad in ref_grads.items():
        torch.testing.assert_close(ours_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
