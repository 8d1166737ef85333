"""Linear layers whose large fp32 matrix products on the CPU run on oneDNN.

PyTorch's CPU ``F.linear`` calls the BLAS it was built with (MKL). On an AMD CPU with AVX-512 MKL takes its
AVX2 code path: one core of a Zen 5 machine reaches about 110 GFLOP/s through it, and about 240 through
oneDNN's fp32 matmul, which every x86 torch build carries for its convolutions (``benchmarks/train_step.py``
measures both peaks). :func:`linear` runs forward and backward through oneDNN there, for products of at least
MIN_ROWS rows; everywhere else (fewer rows, other devices and dtypes, autocast, builds without oneDNN, or with
``onednn=False``, as the ``"eager"`` backend asks) it is ``F.linear``. The values agree with ``F.linear`` to fp32
rounding, not bit for bit: the two libraries sum the products in different orders.
"""

from __future__ import annotations

import platform

import torch
import torch.nn.functional as F


def _onednn_available() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False  # measured on x86 only; elsewhere F.linear stays
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


AVAILABLE = _onednn_available()
"""Whether the linear layers may use oneDNN: an x86 CPU and a torch build with oneDNN's fp32 linear."""


def onednn_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ weight[N, K]^T (+ bias) on oneDNN, which reads transposed and sliced operands in place.
    Where oneDNN declines (e.g. operands whose shapes do not fit) ``F.linear`` computes it, or raises its own
    error, which names the shapes."""
    try:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    except RuntimeError:
        return F.linear(x, weight, bias)


MIN_ROWS = 512
"""Products with fewer rows stay on ``F.linear``: the recurrences' per-step products, which gain nothing."""
ROW_BUCKET = 256
"""oneDNN builds (and caches, 1024 by default) one kernel per shape; rows are padded with zeros to a multiple of
this, so that batches of other lengths reuse the kernels instead of building new ones at every update."""


def _pad_rows(x: torch.Tensor) -> torch.Tensor:
    """x [M, K] with zero rows appended up to a multiple of ROW_BUCKET."""
    missing = -x.shape[0] % ROW_BUCKET
    return F.pad(x, (0, 0, 0, missing)) if missing else x


class _OneDNNLinear(torch.autograd.Function):
    """F.linear's forward and backward, each product through oneDNN on rows padded to ROW_BUCKET (the padding's
    products are zero and are dropped)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        rows = x.reshape(-1, x.shape[-1])
        out = onednn_matmul(_pad_rows(rows), weight, bias)[: rows.shape[0]]
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.reshape(-1, grad.shape[-1])
        padded = _pad_rows(grad)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_matmul(padded, weight.t())[: grad.shape[0]].view(x.shape)
        if ctx.needs_input_grad[1]:
            grad_w = onednn_matmul(padded.t(), _pad_rows(x.reshape(-1, x.shape[-1])).t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        AVAILABLE
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and x.numel() >= MIN_ROWS * x.shape[-1] > 0
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, onednn: bool = True
) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; on oneDNN for CPU fp32 tensors where ``onednn`` (see the module's docstring)."""
    if onednn and _use_onednn(x, weight):
        return _OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)

