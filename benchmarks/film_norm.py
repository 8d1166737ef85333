"""What one FiLM of the default follower costs on the CPU, against one copy of its map.

    python benchmarks/film_norm.py [--frames 3032] [--repeats 9] [--out results/benchmarks/film_norm.json]

One FiLM of a convolution map, as the follower's observation encoder computes it (``modules._modulate``:
GroupNorm(1, C) of map * (1 + gamma) + beta, per frame), forward + backward on ``--frames`` frames of the default
config's map ([N, 64, 7, 7], channels last as the encoder's maps lie), gradients to the map, gamma, beta and the
norm's parameters. Beside it, the same function as ONE autograd function with a closed-form backward (per-frame,
per-channel sums, then one affine pass forward and one backward: :class:`ClosedFormFiLMNorm`, a trial that the
package does not use, as it changes the order of the floating-point sums), and a copy of the map: one pass that
reads it and writes another, the unit of a memory-bound operator's time. Each time is the best of ``--repeats``
after one warm-up; the JSON gives them in ms and as copies of the map, and the largest difference between the two
functions' outputs and gradients, each over the plain one's largest magnitude.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from report import write_report
from torch.autograd.function import once_differentiable

from msvae_hf import MSVAEConfig
from msvae_hf.models.modules import _modulate
from msvae_hf.utils.runtime import provenance, retain_freed_memory


class ClosedFormFiLMNorm(torch.autograd.Function):
    """norm(x * (1 + gamma) + beta) for GroupNorm(1, C) with weight w and bias v, from per-(frame, channel) sums.

    With s = 1 + gamma, the frame's mean mu and variance of y = s x + beta follow from each channel's mean and
    variance of x, and the output is one affine map of x per (frame, channel): a x + b with a = w s / sigma and
    b = w (beta - mu) / sigma + v. The backward is the layer norm's, dy = (w G - mean(w G) - y_hat mean(w G y_hat))
    / sigma (means over the frame), written in the same per-(frame, channel) sums of G and G x.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, film: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                eps: float) -> torch.Tensor:
        gamma, beta = film.chunk(2, dim=1)
        p = x.shape[2] * x.shape[3]
        mean_c = x.sum((2, 3)) / p
        var_c = (x.square().sum((2, 3)) / p - mean_c.square()).clamp_(min=0)
        s = 1 + gamma
        m = s * mean_c + beta
        mu = m.mean(1, keepdim=True)
        rstd = torch.rsqrt((s * s * var_c).mean(1, keepdim=True) + (m - mu).square().mean(1, keepdim=True) + eps)
        a, shift = weight * s * rstd, beta - mu
        ctx.save_for_backward(x, s, shift, rstd, a, weight, mean_c, var_c)
        return torch.addcmul((weight * shift * rstd + bias)[..., None, None], x, a[..., None, None])

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, s, shift, rstd, a, weight, mean_c, var_c = ctx.saved_tensors
        p = x.shape[2] * x.shape[3]
        d = x.shape[1] * p
        gs, gx = g.sum((2, 3)), (g * x).sum((2, 3))
        s1 = (weight * gs).sum(1, keepdim=True) / d
        s2 = (weight * rstd * (s * gx + shift * gs)).sum(1, keepdim=True) / d
        scale_x = -(s * rstd).square() * s2
        offset = -s * rstd * (s1 + rstd * shift * s2)
        dx = torch.addcmul(offset[..., None, None], x, scale_x[..., None, None]).addcmul_(g, a[..., None, None])
        sx, sxx = p * mean_c, p * (var_c + mean_c.square())
        dgamma = rstd * weight * gx - rstd * s1 * sx - rstd * rstd * s2 * (s * sxx + shift * sx)
        dbeta = rstd * weight * gs - rstd * s1 * p - rstd * rstd * s2 * (s * sx + shift * p)
        dweight = (rstd * (s * gx + shift * gs)).sum(0)
        return dx, torch.cat([dgamma, dbeta], 1), dweight, gs.sum(0), None


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    """The best of ``repeats`` timings of ``fn`` after one warm-up, in ms."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=3032, help="frames of the map (3032: BossLocal's MS-VAE batch)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default="results/benchmarks/film_norm.json")
    args = parser.parse_args()
    if args.frames < 1 or args.repeats < 1:
        parser.error("--frames and --repeats must be at least 1")
    retain_freed_memory()
    torch.manual_seed(0)
    config = MSVAEConfig(vocab_size=40)
    channels = config.obs_channels
    norm = torch.nn.GroupNorm(1, channels)
    maps = torch.randn(args.frames, channels, 7, 7).to(memory_format=torch.channels_last).requires_grad_()
    film = torch.randn(args.frames, 2 * channels, requires_grad=True)
    leaves = (maps, film, norm.weight, norm.bias)

    def plain() -> torch.Tensor:
        return _modulate(maps, film, norm)

    def closed_form() -> torch.Tensor:
        return ClosedFormFiLMNorm.apply(maps, film, norm.weight, norm.bias, norm.eps)

    grad = torch.randn_like(plain())
    outputs = [f() for f in (plain, closed_form)]
    grads = [torch.autograd.grad(out, leaves, grad) for out in outputs]
    pairs = [(outputs[1], outputs[0]), *zip(grads[1], grads[0])]
    difference = max(float((a - b).detach().abs().max() / b.detach().abs().max()) for a, b in pairs)

    def timed(f: Callable[[], torch.Tensor]) -> Callable[[], object]:
        return lambda: torch.autograd.grad(f(), leaves, grad)

    copy_ms = best_ms(lambda: maps.detach().clone(), args.repeats)
    ms = {"plain": best_ms(timed(plain), args.repeats), "closed_form": best_ms(timed(closed_form), args.repeats)}
    write_report({"frames": args.frames, "map": [args.frames, channels, 7, 7], "repeats": args.repeats,
                  "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                  **provenance(torch.device("cpu")), "copy_ms": copy_ms, "film_norm_ms": ms,
                  "film_norm_in_copies": {k: v / copy_ms for k, v in ms.items()},
                  "closed_form_speedup": ms["plain"] / ms["closed_form"], "max_relative_difference": difference},
                 args.out)


if __name__ == "__main__":
    main()
