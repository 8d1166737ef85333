"""FLOPs of a forward + backward by kind of operator, counted by ``torch.utils.flop_counter.FlopCounterMode``.

FlopCounterMode counts matrix products, convolutions and the GPU's fused attention kernels. PyTorch's fused
attention kernel for the CPU (``_scaled_dot_product_flash_attention_for_cpu`` and its backward) has no formula
there and would count as zero; importing this module registers the GPU kernels' formulas for it (the scores
recomputed in the backward included, as the kernel does). Likewise oneDNN's matmul
(``mkldnn::_linear_pointwise``, which ``msvae_hf.backends.linear`` runs the CPU's linear layers on) gets addmm's count,
2 M K N, so that a model counts the same FLOPs on either backend.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    register_flop_formula,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

_aten = torch.ops.aten
_CPU_ATTENTION = _aten._scaled_dot_product_flash_attention_for_cpu
_CPU_ATTENTION_BACKWARD = _aten._scaled_dot_product_flash_attention_for_cpu_backward

if _CPU_ATTENTION not in flop_registry:
    @register_flop_formula(_CPU_ATTENTION, get_raw=True)
    def _cpu_attention_flops(query, key, value, *args, out_val=None, **kwargs) -> int:  # noqa: ANN001
        return sdpa_flop_count(query.shape, key.shape, value.shape)

if _CPU_ATTENTION_BACKWARD not in flop_registry:
    @register_flop_formula(_CPU_ATTENTION_BACKWARD, get_raw=True)
    def _cpu_attention_backward_flops(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:  # noqa: ANN001
        return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


_ONEDNN_LINEAR = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
if _ONEDNN_LINEAR is not None and _ONEDNN_LINEAR not in flop_registry:
    @register_flop_formula(_ONEDNN_LINEAR)
    def _onednn_linear_flops(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:  # noqa: ANN001
        return 2 * prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]


def op_kind(op: str) -> str:
    """``convolution``, ``matmul``, ``attention`` or ``other`` for an operator's name, as FlopCounterMode
    (``aten.mm``) or torch.profiler (``aten::mm``) writes it."""
    name = op.replace("::", ".").removeprefix("aten.").removeprefix("mkldnn.").split(".")[0]
    if "convolution" in name:
        return "convolution"
    if name in ("mm", "addmm", "bmm", "baddbmm", "_linear_pointwise"):
        return "matmul"
    return "attention" if "scaled_dot_product" in name or "attention" in name else "other"


def count_flops(fn: Callable[[], Any]) -> dict[str, int]:
    """Run ``fn`` (e.g. a forward and backward) and return its FLOPs by :func:`op_kind`, and ``all``."""
    with FlopCounterMode(display=False) as counter:
        fn()
    kinds = {"convolution": 0, "matmul": 0, "attention": 0, "other": 0}
    for op, flops in counter.get_flop_counts()["Global"].items():
        kinds[op_kind(str(op))] += flops
    return {**kinds, "all": sum(kinds.values())}
