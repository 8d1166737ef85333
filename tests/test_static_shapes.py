"""The static backend's layout (``model.set_backend("static")``) against the default one: the same loss terms and
gradients at real positions, whatever the padding holds (tests/test_graphed.py runs it on the meta device: no host
reads)."""

from __future__ import annotations

import pytest
import torch
from model_helpers import TERMS, build, move_film, pad_more, real_batch, unpaired

from msvae_hf.backends.positions import DensePositions, RealPositions
from msvae_hf.backends.recurrence import _run_padded, packed_recurrence
from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER

# fp32, the same arithmetic in another order (padded vs packed recurrences, dense vs gathered products)
TOL = dict(rtol=1e-5, atol=1e-5)


def _terms_and_grads(model, batch, static: bool, seed: int = 0, frames: int | None = None):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with model.using_backend("static" if static else "default", frames=frames):
        out = model(**batch)
    out.loss.backward()
    terms = {k: getattr(out, k) for k in ("loss", *TERMS, "v", "domain_distance", "a_1_unpaired", "b_1_unpaired")}
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return terms, grads


@pytest.mark.parametrize("frames", [None, 26, 40])  # every frame; as many slots as real frames; more slots
@pytest.mark.parametrize("overrides", [{}, {"prior": "autoregressive", "share_observation_encoder": False,
                                            "unpaired_trains_action_decoder": False, "loss_reduction": "mean",
                                            **HEAD_FOLLOWER}])
def test_static_layout_gives_the_default_layouts_terms_and_gradients(tok, overrides, frames):
    model = move_film(build("msvae", tok, **overrides))
    paired = real_batch(tok)
    batch = {**paired, **unpaired(real_batch(tok, lengths=(2, 6, 3, 1), seed=1))}
    terms, grads = _terms_and_grads(model, batch, static=False)
    # garbage (in-range) values on the static batch's extra padding: only the masks keep them out
    padded = {**pad_more(paired, extra_t=4, extra_l=3), **unpaired(pad_more(real_batch(tok, (2, 6, 3, 1), 1), 2))}
    assert int(batch["trajectory_mask"].sum() + batch["unpaired_trajectory_mask"].sum()) == 26
    static_terms, static_grads = _terms_and_grads(model, padded, static=True, frames=frames)
    for name, value in terms.items():
        torch.testing.assert_close(static_terms[name], value, **TOL, msg=name)
    assert grads.keys() == static_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(static_grads[name], grad, **TOL, msg=name)


@pytest.mark.parametrize("kind", [torch.nn.GRU, torch.nn.LSTM])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_padded_recurrence_equals_the_packed_one_at_real_steps(kind, bidirectional):
    torch.manual_seed(0)
    rnn = kind(6, 5, batch_first=True, bidirectional=bidirectional)
    lengths = torch.tensor([4, 1, 3, 0])
    mask = torch.arange(5)[None, :] < lengths[:, None]
    x = torch.randn(4, 5, 6)
    steps = RealPositions(mask, packed=True)
    expected = steps.scatter(packed_recurrence(rnn, steps.gather(x), steps.batch_sizes))
    got = _run_padded(rnn, x, mask) * mask.unsqueeze(-1)
    torch.testing.assert_close(got[:3], expected[:3], **TOL)  # a row of length 0 has no real step


def test_dense_positions_sum_only_real_positions():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    dense, real = DensePositions(mask), RealPositions(mask)
    x = torch.arange(6.0).view(2, 3) + 1
    torch.testing.assert_close(dense.sum_rows(dense.gather(x)), real.sum_rows(real.gather(x)))
    torch.testing.assert_close(dense.lengths(), real.lengths())
    torch.testing.assert_close(dense.scatter(dense.gather(x)), real.scatter(real.gather(x)))
    assert dense.repeat(2).mask.shape == (4, 3)


def test_too_few_frame_slots_fail_rather_than_drop_frames(tok):
    model = build("msvae", tok)
    batch = {**real_batch(tok), **unpaired(real_batch(tok, lengths=(2, 6, 3, 1), seed=1))}  # 26 real frames
    with model.using_backend("static", frames=25), pytest.raises((IndexError, RuntimeError)):
        model(**batch)
    with pytest.raises(ValueError, match="frames is the static backend's positive count"):
        model.set_backend("static", frames=0)
    with pytest.raises(ValueError, match="frames is the static backend's positive count"):
        model.set_backend("default", frames=26)
    with pytest.raises(ValueError, match="unknown backend 'graphs'"):
        model.set_backend("graphs")
    assert model.backend.name == "default"  # a refused backend leaves the model as it was
