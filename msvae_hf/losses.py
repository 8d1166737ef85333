"""The MS-VAE objective, one function per term (paper Eq. 1, 3, 9, 10; App. A, B).

Conventions: every term is per sample (a tensor [B]); log-likelihoods are summed over the sequence
(a proper ELBO of the whole trajectory / instruction) and KLs over the K tokens and D dimensions.
:func:`msvae_loss` averages over the batch, as Eq. 10's expectations over D_p and D_u.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sequence_log_likelihood(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log p(x | z) = sum_t log p(x_t | ...) over real positions: logits [B, S, V], targets/mask [B, S] -> [B]."""
    logp = -F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    return (logp * mask.to(logp.dtype)).sum(dim=1)


def reparameterize(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """z = mu + sigma * eps, eps ~ N(0, I) (the reparameterisation trick)."""
    return mean + torch.randn_like(mean) * torch.exp(0.5 * logvar)


def gaussian_kl(
    mean_q: torch.Tensor, logvar_q: torch.Tensor, mean_p: torch.Tensor, logvar_p: torch.Tensor
) -> torch.Tensor:
    """KL[N(mu_q, s_q^2) || N(mu_p, s_p^2)], analytic, per token: [B, K, D] -> [B, K]."""
    kl = 0.5 * (logvar_p - logvar_q + (logvar_q.exp() + (mean_q - mean_p) ** 2) / logvar_p.exp() - 1.0)
    return kl.sum(dim=-1)


def kl_to_prior(mean_q: torch.Tensor, logvar_q: torch.Tensor, prior, z: torch.Tensor) -> torch.Tensor:
    """-B_m = KL[q(z|x_m) || p(z)] (App. A), summed over tokens: [B].

    For N(0, I) this is the closed form. For the autoregressive prior p(z) = prod_k p(z_k | z_<k) it is
    sum_k KL[q(z_k|x) || p(z_k | z_<k)], analytic per token given the sampled z_<k.
    """
    mean_p, logvar_p = prior(z)
    return gaussian_kl(mean_q, logvar_q, mean_p, logvar_p).sum(dim=-1)


def paired_elbo(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    c: tuple[torch.Tensor, torch.Tensor],
    beta: float,
) -> torch.Tensor:
    """J-bar = 1/2 sum_m [A_m + beta B_m + C_m] (Eq. 9 with App. D's beta): per paired sample [B].

    m = 1 is the trajectory x_(1) = a|o, m = 2 the instruction x_(2) = y. A_m reconstructs x_m from
    z ~ q(z|x_m); B_m = -KL[q(z|x_m) || p(z)]; C_m is the cross-modal term, x_(n != m) from z ~ q(z|x_m).
    """
    return 0.5 * sum(a[m] + beta * b[m] + c[m] for m in range(2))


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
    Wasserstein distance of each projection is the mean p-th power gap between sorted values (the
    quantile functions); averaged over projections. With N != M the quantile functions are compared at
    max(N, M) levels by linear interpolation. In one dimension it is exactly W_p^p.
    """
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"sliced_wasserstein needs [N, D] and [M, D] inputs, got {list(x.shape)}, {list(y.shape)}")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError("sliced_wasserstein needs at least one sample in each set")
    x, y = x.float(), y.float()
    theta = torch.randn(x.shape[1], num_projections, generator=generator, device=x.device)
    theta = theta / theta.norm(dim=0, keepdim=True)
    px, _ = torch.sort(x @ theta, dim=0)
    py, _ = torch.sort(y @ theta, dim=0)
    if px.shape[0] != py.shape[0]:
        n = max(px.shape[0], py.shape[0])
        px, py = _quantiles(px, n), _quantiles(py, n)
    return (px - py).abs().pow(p).mean()


def _quantiles(sorted_values: torch.Tensor, n: int) -> torch.Tensor:
    """Empirical quantile function of sorted [N, P] values at levels (i + 0.5) / n, i < n (linear interp)."""
    count = sorted_values.shape[0]
    if count == n:
        return sorted_values
    pos = ((torch.arange(n, device=sorted_values.device) + 0.5) / n * count - 0.5).clamp(0, count - 1)
    lo = pos.floor().long()
    hi = (lo + 1).clamp(max=count - 1)
    w = (pos - lo).unsqueeze(1)
    return sorted_values[lo] * (1 - w) + sorted_values[hi] * w


def domain_distance(
    mean_paired: torch.Tensor, mean_unpaired: torch.Tensor, num_projections: int = 50, p: int = 2
) -> torch.Tensor:
    """D' = sum_k SW(rho_k, upsilon_k) (App. B) on posterior means mu_k of q(z|a,o): [Bp, K, D], [Bu, K, D]."""
    return sum(
        sliced_wasserstein(mean_paired[:, k], mean_unpaired[:, k], num_projections, p)
        for k in range(mean_paired.shape[1])
    )


def msvae_loss(
    j_bar: torch.Tensor, v: torch.Tensor | None, d: torch.Tensor | None, gamma: float, alpha: float
) -> torch.Tensor:
    """Eq. 10 as a loss to minimise: -(E_p[J-bar] + gamma E_u[V]) + alpha D'."""
    loss = -j_bar.mean()
    if v is not None and v.numel():
        loss = loss - gamma * v.mean()
    if d is not None:
        loss = loss + alpha * d
    return loss
