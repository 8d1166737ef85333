"""msvae_hf.backends.linear: CPU fp32 linear layers on oneDNN give F.linear's values and gradients to fp32 rounding, and
F.linear itself, bit for bit, wherever they do not run on oneDNN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from model_helpers import build, real_batch, unpaired
from torch import nn

import msvae_hf.backends.linear as linear_module
from msvae_hf import MSVAETokenizer
from msvae_hf.backends.linear import AVAILABLE, MIN_ROWS, ROW_BUCKET, linear
from msvae_hf.backends.registry import BACKENDS, Backend, Linear

FP32_SUMS = {"rtol": 1e-4, "atol": 1e-4}
"""fp32 against float64, for sums of about a thousand products of order one."""
needs_onednn = pytest.mark.skipif(not AVAILABLE, reason="this torch build has no oneDNN linear")


def grads_of(fn, *tensors: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fn(*tensors) and the gradients of a fixed weighted sum of it w.r.t. each tensor."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    (out * weights).sum().backward()
    return out.detach(), [leaf.grad for leaf in leaves]


@pytest.fixture
def small_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN from one row on, rows padded to multiples of 8: the tiny tests' products take oneDNN's path."""
    monkeypatch.setattr(linear_module, "MIN_ROWS", 1)
    monkeypatch.setattr(linear_module, "ROW_BUCKET", 8)


def on_onednn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """Records the operand shapes of every oneDNN product from here on."""
    shapes: list[tuple[int, ...]] = []
    matmul = linear_module.onednn_matmul

    def recording(x, weight, bias=None):  # noqa: ANN001, ANN202
        shapes.append((*x.shape, weight.shape[0]))
        return matmul(x, weight, bias)

    monkeypatch.setattr(linear_module, "onednn_matmul", recording)
    return shapes


@needs_onednn
@pytest.mark.parametrize("shape", [(MIN_ROWS + 7, 5), (3, MIN_ROWS // 2 + 1, 5), (2 * ROW_BUCKET, 5)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_values_and_gradients_are_the_closed_form(shape: tuple[int, ...], with_bias: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Against x W^T + b and its gradients (g W, g^T x, sum g) computed in float64; every product on oneDNN
    over rows padded to a multiple of ROW_BUCKET."""
    products = on_onednn(monkeypatch)
    torch.manual_seed(0)
    x, weight, bias = torch.randn(shape), torch.randn(6, 5), torch.randn(6)
    operands = (x, weight, bias) if with_bias else (x, weight)
    out, grads = grads_of(linear, *operands)
    x64, w64 = x.double().reshape(-1, 5), weight.double()
    expected = x64 @ w64.T + (bias.double() if with_bias else 0)
    g = torch.linspace(-1, 1, expected.numel(), dtype=torch.float64).view(expected.shape)
    torch.testing.assert_close(out.double().reshape(-1, 6), expected, **FP32_SUMS)
    torch.testing.assert_close(grads[0].double().reshape(-1, 5), g @ w64, **FP32_SUMS)
    torch.testing.assert_close(grads[1].double(), g.T @ x64, **FP32_SUMS)
    if with_bias:
        torch.testing.assert_close(grads[2].double(), g.sum(0), **FP32_SUMS)
    assert out.shape == (*shape[:-1], 6)
    assert len(products) == 3 and all(p[0] % ROW_BUCKET == 0 or p[1] % ROW_BUCKET == 0 for p in products)


def test_few_rows_stay_on_f_linear_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Products under MIN_ROWS rows (the recurrences' steps) and empty ones are F.linear's own."""
    products = on_onednn(monkeypatch)
    torch.manual_seed(5)
    for shape in ((MIN_ROWS - 1, 5), (0, 5)):
        x, weight, bias = torch.randn(shape), torch.randn(6, 5), torch.randn(6)
        out, grads = grads_of(linear, x, weight, bias)
        ref, ref_grads = grads_of(F.linear, x, weight, bias)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        for got, want in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert products == []


@needs_onednn
@pytest.mark.usefixtures("small_rows")
def test_strided_operands_and_frozen_inputs() -> None:
    """Transposed and sliced operands give F.linear's values; a tensor that needs no gradient gets none;
    operands whose shapes do not fit get F.linear's error, which names them."""
    torch.manual_seed(1)
    x = torch.randn(5, 9).T  # [9, 5], not contiguous
    for weight in (torch.randn(5, 6).T, torch.randn(6, 8)[:, :5], torch.randn(8, 6).T[:5].T):
        torch.testing.assert_close(linear(x, weight), F.linear(x, weight), rtol=1e-6, atol=1e-6)
    w = torch.randn(5, 6).T.clone().requires_grad_()
    linear(x, w).sum().backward()
    torch.testing.assert_close(w.grad, torch.ones(9, 6).T @ x, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        linear(x, torch.randn(6, 4))


@pytest.mark.parametrize("case", ["switched off", "float64", "bf16 autocast"])
def test_elsewhere_it_is_f_linear_bit_for_bit(case: str) -> None:
    torch.manual_seed(2)
    dtype = torch.float64 if case == "float64" else torch.float32
    x, weight, bias = (torch.randn(*s, dtype=dtype) for s in ((8, 3, 5), (6, 5), (6,)))
    def product(*tensors: torch.Tensor) -> torch.Tensor:
        return linear(*tensors, onednn=case != "switched off")

    with torch.autocast("cpu", torch.bfloat16, enabled=case == "bf16 autocast"):
        out, grads = grads_of(product, x, weight, bias)
        ref, ref_grads = grads_of(F.linear, x, weight, bias)
    assert out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.usefixtures("small_rows")
def test_a_models_backend_reaches_its_linear_layers_and_is_restored() -> None:
    """set_backend("eager") puts every Linear on F.linear; using_backend restores the backend it found."""
    tok = MSVAETokenizer.from_grammar()
    model = build("msvae", tok)
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    assert layers and all(layer.backend is BACKENDS["default"] for layer in layers)
    with model.using_backend("eager"):
        assert all(layer.backend is BACKENDS["eager"] for layer in layers)
        x = torch.randn(4, layers[0].in_features)
        torch.testing.assert_close(layers[0](x), F.linear(x, layers[0].weight, layers[0].bias), rtol=0, atol=0)
    assert all(layer.backend is BACKENDS["default"] for layer in layers)


@pytest.mark.usefixtures("small_rows")
def test_layer_is_an_nn_linear_with_the_same_state_dict() -> None:
    torch.manual_seed(3)
    plain = nn.Linear(5, 4)
    layer = Linear(5, 4)
    assert isinstance(layer, nn.Linear)
    layer.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5)
    torch.testing.assert_close(layer(x), plain(x), rtol=1e-6, atol=1e-6)
    layer.backend = BACKENDS["eager"]
    torch.testing.assert_close(layer(x), plain(x), rtol=0, atol=0)


@needs_onednn
def test_msvae_objective_and_gradients_match_f_linear(small_rows: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole Eq. 10 loss and every parameter's gradient, oneDNN against F.linear, on one batch."""
    products = on_onednn(monkeypatch)
    tok = MSVAETokenizer.from_grammar()
    model = build("msvae", tok).train()
    batch = real_batch(tok)
    batch = {**batch, **unpaired(real_batch(tok, seed=1))}

    def run(enabled: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(4)
        with model.using_backend("default" if enabled else Backend("default, F.linear", onednn=False)):
            loss = model(**batch).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    loss, grads = run(True)
    assert len(products) > 100  # every layer's products, the recurrences' steps included
    ref_loss, ref_grads = run(False)
    assert grads.keys() == ref_grads.keys()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    for name, grad in grads.items():
        scale = ref_grads[name].abs().max().clamp(min=1e-12)
        assert (grad - ref_grads[name]).abs().max() <= 1e-4 * scale, name
