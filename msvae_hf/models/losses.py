"""The MS-VAE objective, one function per term (paper Eq. 1, 3, 9, 10; App. A, B).

Conventions: every term is per sample (a tensor [B]). The paper does not say how a term is reduced over a
sequence or the latent; ``reduction`` (the config's ``loss_reduction``) picks one of two readings:

- ``"sum"``: log-likelihoods summed over the sequence's real positions (a proper ELBO of the whole trajectory /
  instruction), KLs summed over the K tokens and D dimensions;
- ``"mean"``: log-likelihoods averaged over the sequence's real positions (cross-entropy's default, per
  sequence), KLs averaged over the K tokens and D dimensions.

D' (App. B) is the same under both, as printed. :func:`msvae_loss` averages over the batch, as Eq. 10's
expectations over D_p and D_u.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def reduce_sequence(total: torch.Tensor, length: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """A per-sequence sum over real positions [..., B] as ``reduction`` reads it: itself (``"sum"``), or divided
    by the sequence's ``length``, its count of real positions (``"mean"``; an empty sequence counts 1)."""
    if reduction == "sum":
        return total
    if reduction == "mean":
        return total / length.to(total.dtype).clamp(min=1)
    raise ValueError(f"loss_reduction must be 'sum' or 'mean', got {reduction!r}")


def sequence_log_likelihood(logits: torch.Tensor, targets: torch.Tensor, positions, reduction: str = "sum"
                            ) -> torch.Tensor:
    """log p(x | z) = sum_t log p(x_t | ...) over the real positions of each sequence -> [B] (``"mean"``: the
    average over them).

    ``positions`` (a :class:`~msvae_hf.backends.positions.RealPositions` of the [B, S] mask) names the real positions,
    ``logits`` [N, V] are theirs only (the layers skip padding) and ``targets`` [B, S] are padded.
    """
    logp = -F.cross_entropy(logits.float(), positions.gather(targets), reduction="none")
    return reduce_sequence(positions.sum_rows(logp), positions.lengths(), reduction)


def goal_step_loss(logits: torch.Tensor, goal_steps: torch.Tensor, mask: torch.Tensor, reduction: str = "sum"
                   ) -> torch.Tensor:
    """Binary cross-entropy of per-step logits [B, T] against whether each step completes a goal (``goal_steps``
    [B, T], bool), over the real steps of ``mask`` [B, T] -> [B] (summed, or averaged: ``reduction``). Not in the
    paper: ``SpeakerConfig.goal_steps_weight``."""
    bce = F.binary_cross_entropy_with_logits(logits.float(), goal_steps.float(), reduction="none")
    real = mask.bool()
    return reduce_sequence(bce.masked_fill(~real, 0.0).sum(-1), real.sum(-1), reduction)


def reparameterize(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """z = mu + sigma * eps, eps ~ N(0, I) (the reparameterisation trick)."""
    return mean + torch.randn_like(mean) * torch.exp(0.5 * logvar)


def gaussian_kl(
    mean_q: torch.Tensor, logvar_q: torch.Tensor, mean_p: torch.Tensor, logvar_p: torch.Tensor
) -> torch.Tensor:
    """KL[N(mu_q, s_q^2) || N(mu_p, s_p^2)], analytic, per token: [B, K, D] -> [B, K]."""
    kl = 0.5 * (logvar_p - logvar_q + (logvar_q.exp() + (mean_q - mean_p) ** 2) / logvar_p.exp() - 1.0)
    return kl.sum(dim=-1)


def reduce_latent(kl_per_token: torch.Tensor, latent_dim: int, reduction: str = "sum") -> torch.Tensor:
    """KL per token [..., K] (summed over D) -> per sample [...]: the sum over the K tokens, or (``"mean"``) the
    average over the K tokens and ``latent_dim`` dimensions."""
    total = kl_per_token.sum(dim=-1)
    if reduction == "sum":
        return total
    if reduction == "mean":
        return total / (kl_per_token.shape[-1] * latent_dim)
    raise ValueError(f"loss_reduction must be 'sum' or 'mean', got {reduction!r}")


def kl_to_prior(mean_q: torch.Tensor, logvar_q: torch.Tensor, prior, z: torch.Tensor, reduction: str = "sum"
                ) -> torch.Tensor:
    """-B_m = KL[q(z|x_m) || p(z)] (App. A), summed over tokens (``"mean"``: averaged over tokens and
    dimensions): [B].

    For N(0, I) this is the closed form. For the autoregressive prior p(z) = prod_k p(z_k | z_<k) it is
    sum_k KL[q(z_k|x) || p(z_k | z_<k)], analytic per token given the sampled z_<k.
    """
    mean_p, logvar_p = prior(z)
    return reduce_latent(gaussian_kl(mean_q, logvar_q, mean_p, logvar_p), mean_q.shape[-1], reduction)


def paired_elbo(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    c: tuple[torch.Tensor, torch.Tensor],
    beta: float | tuple[float, float],
) -> torch.Tensor:
    """J-bar = 1/2 sum_m [A_m + beta_m B_m + C_m] (Eq. 9 with App. D's beta): per paired sample [B].

    m = 1 is the trajectory x_(1) = a|o, m = 2 the instruction x_(2) = y. A_m reconstructs x_m from
    z ~ q(z|x_m); B_m = -KL[q(z|x_m) || p(z)]; C_m is the cross-modal term, x_(n != m) from z ~ q(z|x_m).
    ``beta`` is one weight for both modalities (App. D) or a pair (beta_1, beta_2).
    """
    betas = (beta, beta) if isinstance(beta, (int, float)) else tuple(beta)
    return 0.5 * sum(a[m] + betas[m] * b[m] + c[m] for m in range(2))


def posterior_alignment(mean_tau: torch.Tensor, logvar_tau: torch.Tensor, mean_y: torch.Tensor,
                        logvar_y: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """KL[q(z|a,o) || q(z|y)] per pair [B], reduced over the latent as ``reduction`` says, with q(z|y) a constant:
    its gradient moves q(z|a,o) (and what it reads) only, not q(z|y) (not in the paper;
    MSVAEConfig.posterior_alignment weights it)."""
    kl = gaussian_kl(mean_tau, logvar_tau, mean_y.detach(), logvar_y.detach())
    return reduce_latent(kl, mean_tau.shape[-1], reduction)


def unpaired_elbo(a_1: torch.Tensor, b_1: torch.Tensor, beta: float) -> torch.Tensor:
    """V = A_1 + beta B_1 (Eq. 3 / App. A): the trajectory ELBO on unpaired data, per sample [B].

    Eq. 3 prints "+ KL"; App. A writes V = A_1 + B_1 with B_1 = -KL, which is what an ELBO needs.
    """
    return a_1 + beta * b_1


def sliced_wasserstein(
    x: torch.Tensor,
    y: torch.Tensor,
    num_projections: int = 50,
    p: int = 2,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sliced Wasserstein distance SW_p^p between the empirical distributions of x [N, D] and y [M, D].

    Kolouri et al. (2019), Algorithm 1: project both sets on random unit directions, then the 1-D
    Wasserstein distance of each projection is the integral over levels u in (0, 1) of the p-th power gap
    between the two quantile functions, averaged over projections. Empirical quantile functions are step
    functions, so the integral is an exact sum over the merged steps {i/N} U {j/M}; with N = M it is the
    mean p-th power gap between sorted values. In one dimension it is exactly W_p^p.
    """
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"sliced_wasserstein needs [N, D] and [M, D] inputs, got {list(x.shape)}, {list(y.shape)}")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError("sliced_wasserstein needs at least one sample in each set")
    theta = torch.randn(x.shape[1], num_projections, generator=generator, device=x.device)
    return projected_wasserstein(x, y, theta, p)


def projected_wasserstein(x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, p: int = 2) -> torch.Tensor:
    """The mean over projections of W_p^p between x [..., N, D] and y [..., M, D] projected on the columns of
    theta [..., D, P] (normalised here), batched over the leading dims -> [...]; :func:`sliced_wasserstein`
    with its random directions drawn."""
    x, y = x.float(), y.float()
    theta = theta / theta.norm(dim=-2, keepdim=True)
    px, _ = torch.sort(x @ theta, dim=-2)
    py, _ = torch.sort(y @ theta, dim=-2)
    if px.shape[-2] == py.shape[-2]:
        return (px - py).abs().pow(p).mean(dim=(-2, -1))
    ix, iy, widths = _merged_quantile_steps(px.shape[-2], py.shape[-2], px.device)
    gaps = (px[..., ix, :] - py[..., iy, :]).abs().pow(p) * widths.unsqueeze(1)
    return gaps.sum(dim=-2).mean(dim=-1)


def _merged_quantile_steps(n: int, m: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps of two empirical quantile functions of n and m sorted values on (0, 1].

    Returns, for each interval between consecutive levels of {i/n} U {j/m}, the index of the value each
    quantile function takes on it and the interval's width (zero-width duplicates included).
    """
    # made on ``device``: no host-to-device copy, which a CUDA graph's capture refuses (a GPU's division may round
    # a width's last bit otherwise than the CPU's)
    steps = [torch.arange(1, k + 1, device=device) / k for k in (n, m)]
    levels, _ = torch.sort(torch.cat(steps).double())
    widths = torch.diff(levels, prepend=levels.new_zeros(1))
    mid = levels - widths / 2
    ix = (mid * n).floor().long().clamp(0, n - 1)
    iy = (mid * m).floor().long().clamp(0, m - 1)
    return ix, iy, widths.float()


def domain_distance(
    mean_paired: torch.Tensor, mean_unpaired: torch.Tensor, num_projections: int = 50, p: int = 2
) -> torch.Tensor:
    """D' = sum_k SW(rho_k, upsilon_k) (App. B) on posterior means mu_k of q(z|a,o): [Bp, K, D], [Bu, K, D]."""
    return sum(
        sliced_wasserstein(mean_paired[:, k], mean_unpaired[:, k], num_projections, p)
        for k in range(mean_paired.shape[1])
    )


def msvae_loss(
    j_bar: torch.Tensor, v: torch.Tensor | None, d: torch.Tensor | None, gamma: float, alpha: float,
    alignment: torch.Tensor | None = None, alignment_weight: float = 0.0,
) -> torch.Tensor:
    """Eq. 10 as a loss to minimise: -(E_p[J-bar] + gamma E_u[V]) + alpha D', plus ``alignment_weight`` times
    E_p[KL[q(z|a,o) || q(z|y)]] where ``alignment`` is given (:func:`posterior_alignment`; not in the paper)."""
    loss = -j_bar.mean()
    if v is not None and v.numel():
        loss = loss - gamma * v.mean()
    if d is not None:
        loss = loss + alpha * d
    if alignment is not None:
        loss = loss + alignment_weight * alignment.mean()
    return loss
