"""One optimiser update, written once: forward, backward, a check, gradient clipping and the optimiser's step.

The training loop (``training.train``, through accelerate), the captured GPU update (``graphed.CapturedUpdate``,
eager or replayed as a CUDA graph), the front-cell pre-training and the benchmarks all call :func:`update`; what
differs between them is passed in (how to backward, how to clip, what to check), never written again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["update"]


def update(
    forward: Callable[[], Any],
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float | None = None,
    *,
    backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
    clip: Callable[[Iterable[torch.Tensor], float], Any] = torch.nn.utils.clip_grad_norm_,
    check: Callable[[Any], None] | None = None,
) -> Any:
    """One update of ``optimizer``'s parameters; returns ``forward()``'s output.

    ``forward`` computes the model's output, whose ``loss`` is minimised (MS-VAE: Eq. 10's weighted sum of J-bar,
    V and D'; the baselines: their cross-entropies). ``backward(loss)`` adds its gradients (accelerate's
    ``backward`` scales them under fp16 and accumulates across micro-steps). ``check(output)`` runs once the
    gradients are in and before anything changes the weights: it may raise (a non-finite update) or tell the
    step to skip (the captured update's ``found_inf``). With ``max_grad_norm``, ``clip`` rescales the gradients
    of the optimiser's parameters to that total 2-norm. The gradients are the caller's to zero.
    """
    output = forward()
    backward(output.loss)
    if check is not None:
        check(output)
    if max_grad_norm:
        clip([p for group in optimizer.param_groups for p in group["params"]], max_grad_norm)
    optimizer.step()
    return output
