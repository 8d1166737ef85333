"""msvae_hf.training.update.update: the one update every loop calls, against its closed form on a quadratic."""

import pytest
import torch
from transformers.utils import ModelOutput

from msvae_hf.training.update import update


def quadratic(weight: torch.nn.Parameter):
    """loss = ||w||^2 / 2, whose gradient is w itself."""
    return lambda: ModelOutput(loss=0.5 * (weight**2).sum())


def test_an_update_steps_along_the_clipped_gradient() -> None:
    start = torch.tensor([3.0, -4.0])  # norm 5
    weight = torch.nn.Parameter(start.clone())
    output = update(quadratic(weight), torch.optim.SGD([weight], lr=1.0), max_grad_norm=1.0)
    assert output.loss.item() == pytest.approx(12.5)
    # clip_grad_norm_ scales the gradient (w) by 1 / (5 + 1e-6); SGD with lr 1 subtracts it
    torch.testing.assert_close(weight.detach(), start - start / (5.0 + 1e-6), rtol=0, atol=1e-7)


def test_without_a_norm_the_gradient_is_not_clipped() -> None:
    start = torch.tensor([3.0, -4.0])
    weight = torch.nn.Parameter(start.clone())
    update(quadratic(weight), torch.optim.SGD([weight], lr=0.5))
    torch.testing.assert_close(weight.detach(), start * 0.5, rtol=0, atol=0)


def test_the_check_sees_the_unclipped_gradient_and_can_stop_the_step() -> None:
    weight = torch.nn.Parameter(torch.tensor([3.0, -4.0]))
    seen = []

    def check(output) -> None:
        seen.append(weight.grad.clone())
        raise FloatingPointError("stop")

    with pytest.raises(FloatingPointError, match="stop"):
        update(quadratic(weight), torch.optim.SGD([weight], lr=1.0), max_grad_norm=1.0, check=check)
    torch.testing.assert_close(seen[0], torch.tensor([3.0, -4.0]))
    torch.testing.assert_close(weight.detach(), torch.tensor([3.0, -4.0]))  # nothing stepped


def test_backward_and_clip_are_the_callers() -> None:
    """The training loop passes accelerate's backward (fp16 scaling) and clip; the update calls exactly them."""
    weight = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    calls = []

    def backward(loss: torch.Tensor) -> None:
        calls.append("backward")
        (2 * loss).backward()

    def clip(parameters, max_norm: float) -> None:
        calls.append(("clip", [p is weight for p in parameters], max_norm))

    update(quadratic(weight), torch.optim.SGD([weight], lr=0.25), 7.0, backward=backward, clip=clip)
    assert calls == ["backward", ("clip", [True], 7.0)]
    torch.testing.assert_close(weight.detach(), torch.tensor([0.5, 0.5]))  # 1 - 0.25 * 2 * 1
