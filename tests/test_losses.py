"""The MS-VAE objective term by term (msvae_hf/models/losses.py) against independent closed forms.

KL terms against torch.distributions, the sliced Wasserstein distance against scipy's exact 1-D
Wasserstein distance, and Eq. 9 / Eq. 3 (App. A sign) / Eq. 10 against hand-computed numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance
from torch.distributions import Independent, Normal, kl_divergence

from msvae_hf.backends.positions import RealPositions
from msvae_hf.models.configuration_msvae import LOSS_REDUCTIONS, MSVAEConfig
from msvae_hf.models.losses import (
    domain_distance,
    gaussian_kl,
    kl_to_prior,
    msvae_loss,
    paired_elbo,
    reduce_latent,
    sequence_log_likelihood,
    sliced_wasserstein,
    unpaired_elbo,
)
from msvae_hf.models.modules import LatentPrior

TINY = dict(hidden_size=32, latent_dim=8, prior_hidden_size=16, decoder_heads=4)


def _gaussians(shape: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(4))


# ------------------------------------------------------------------------------------------------ KL
def test_gaussian_kl_matches_torch_distributions() -> None:
    """Per token, the analytic KL equals KL of Independent(Normal) over the D dimensions."""
    mq, lq, mp, lp = _gaussians((3, 4, 5))
    ours = gaussian_kl(mq, lq, mp, lp)
    q = Independent(Normal(mq, (0.5 * lq).exp()), 1)
    p = Independent(Normal(mp, (0.5 * lp).exp()), 1)
    assert ours.shape == (3, 4)
    torch.testing.assert_close(ours, kl_divergence(q, p), rtol=1e-10, atol=1e-10)
    # KL of a distribution to itself is zero; KL is non-negative.
    torch.testing.assert_close(gaussian_kl(mq, lq, mq, lq), torch.zeros(3, 4, dtype=torch.float64))
    assert (ours >= 0).all()


def test_kl_to_prior_normal_is_closed_form() -> None:
    """prior="normal": -B_m = KL[q || N(0, I)] = 1/2 sum(mu^2 + s^2 - log s^2 - 1), summed over K and D."""
    prior = LatentPrior(MSVAEConfig(prior="normal", **TINY))
    mq, lq, _, _ = _gaussians((3, 4, 8), seed=1)
    z = torch.randn(3, 4, 8, dtype=torch.float64)
    expected = 0.5 * (mq**2 + lq.exp() - lq - 1).sum(dim=(1, 2))
    torch.testing.assert_close(kl_to_prior(mq, lq, prior, z), expected, rtol=1e-10, atol=1e-10)
    std = Independent(Normal(torch.zeros_like(mq), torch.ones_like(mq)), 2)
    torch.testing.assert_close(
        kl_to_prior(mq, lq, prior, z), kl_divergence(Independent(Normal(mq, (0.5 * lq).exp()), 2), std)
    )


def test_kl_to_prior_autoregressive_given_z() -> None:
    """Autoregressive prior: sum_k KL[q(z_k) || p(z_k | z_<k)], where p(z_k | z_<k) is recomputed here
    independently by stepping the prior's GRU cell by cell (z_0 = 0) and applying its head."""
    torch.manual_seed(0)
    prior = LatentPrior(MSVAEConfig(prior="autoregressive", **TINY)).double()
    batch, k, d = 3, 4, 8
    mq, lq, _, _ = _gaussians((batch, k, d), seed=2)
    z = torch.randn(batch, k, d, dtype=torch.float64)
    cell = torch.nn.GRUCell(d, prior.gru.hidden_size).double()
    cell.weight_ih.data, cell.weight_hh.data = prior.gru.weight_ih_l0.data, prior.gru.weight_hh_l0.data
    cell.bias_ih.data, cell.bias_hh.data = prior.gru.bias_ih_l0.data, prior.gru.bias_hh_l0.data
    h = torch.zeros(batch, prior.gru.hidden_size, dtype=torch.float64)
    total = torch.zeros(batch, dtype=torch.float64)
    previous = torch.zeros(batch, d, dtype=torch.float64)
    with torch.no_grad():
        for i in range(k):
            h = cell(previous, h)
            mean_p, logvar_p = prior.head(h).chunk(2, dim=-1)
            logvar_p = logvar_p.clamp(-10, 10)
            q = Independent(Normal(mq[:, i], (0.5 * lq[:, i]).exp()), 1)
            p = Independent(Normal(mean_p, (0.5 * logvar_p).exp()), 1)
            total += kl_divergence(q, p)
            previous = z[:, i]
        ours = kl_to_prior(mq, lq, prior, z)
    torch.testing.assert_close(ours, total, rtol=1e-9, atol=1e-9)
    # The prior of token k depends on z_<k only: changing the last token leaves the KL unchanged.
    z2 = z.clone()
    z2[:, -1] += 5.0
    with torch.no_grad():
        torch.testing.assert_close(kl_to_prior(mq, lq, prior, z2), ours)


# ------------------------------------------------------------------------------------------------ SWD
def test_swd_zero_on_identical_sets() -> None:
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    assert float(sliced_wasserstein(x, x, 50)) == 0.0
    assert float(sliced_wasserstein(x, x[torch.randperm(20)], 50)) == 0.0  # order does not matter


def test_swd_grows_with_shift() -> None:
    """SW between N(0, I) and N(s * 1, I) samples, same samples and projections, is monotone in s."""
    base = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    other = torch.randn(200, 4, generator=torch.Generator().manual_seed(1))
    values = [
        float(sliced_wasserstein(base, other + s, 50, generator=torch.Generator().manual_seed(3)))
        for s in (0.0, 1.0, 2.0, 4.0)
    ]
    assert all(a < b for a, b in zip(values, values[1:])), values
    assert values[-1] > 10 * values[0]


@pytest.mark.parametrize("n, m", [(7, 7), (5, 9), (12, 4), (1, 3), (6, 10)])
def test_swd_one_dimension_p1_equals_scipy(n: int, m: int) -> None:
    """In 1-D every projection is +-1, so SW_1 is exactly the W_1 of scipy (equal and unequal sizes)."""
    g = torch.Generator().manual_seed(n * 100 + m)
    x, y = torch.randn(n, 1, generator=g), 2 * torch.randn(m, 1, generator=g) + 0.5
    ours = float(sliced_wasserstein(x, y, num_projections=3, p=1))
    assert ours == pytest.approx(wasserstein_distance(x[:, 0].numpy(), y[:, 0].numpy()), rel=1e-5, abs=1e-6)


def test_swd_one_dimension_p2_sorted_closed_form() -> None:
    """p = 2, equal sizes: W_2^2 = mean (x_(i) - y_(i))^2 over sorted values; unequal sizes: the integral of
    the squared quantile gap, here written out by hand for n = 2, m = 4."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(9, 1, generator=g), torch.randn(9, 1, generator=g) + 1
    expected = ((x[:, 0].sort().values - y[:, 0].sort().values) ** 2).mean()
    assert float(sliced_wasserstein(x, y, 5, p=2)) == pytest.approx(float(expected), rel=1e-5)
    # quantiles: x = 0 on (0, 1/2], 1 on (1/2, 1]; y = 0, 1, 2, 3 on quarters.
    # gaps^2 per quarter: 0, 1, 1, 4 -> W_2^2 = 6 / 4.
    x2, y2 = torch.tensor([[1.0], [0.0]]), torch.tensor([[3.0], [0.0], [2.0], [1.0]])
    assert float(sliced_wasserstein(x2, y2, 2, p=2)) == pytest.approx(1.5, rel=1e-6)
    assert float(sliced_wasserstein(y2, x2, 2, p=2)) == pytest.approx(1.5, rel=1e-6)


def test_swd_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="sliced_wasserstein"):
        sliced_wasserstein(torch.zeros(3, 2), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="at least one sample"):
        sliced_wasserstein(torch.zeros(0, 2), torch.zeros(3, 2))


def test_domain_distance_sums_per_token() -> None:
    """D' = sum_k SW(rho_k, upsilon_k) (App. B): with K = 1 and 1-D tokens it is W_2^2 of the token means."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 3, 1, generator=g), torch.randn(6, 3, 1, generator=g) + 2
    expected = sum(((a[:, k, 0].sort().values - b[:, k, 0].sort().values) ** 2).mean() for k in range(3))
    assert float(domain_distance(a, b, num_projections=4, p=2)) == pytest.approx(float(expected), rel=1e-5)


# ------------------------------------------------------------------------------------------------ ELBOs
def test_sequence_log_likelihood_sums_the_real_positions_of_each_row() -> None:
    """Two rows, [0.5, 0.5] then [0.25, 0.75] (the third step padding), and one real step of [0.9, 0.1]."""
    targets, mask = torch.tensor([[0, 1, 1], [1, 0, 0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    logits = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]]))  # the 3 real positions, row-major
    expected = [np.log(0.5) + np.log(0.75), np.log(0.1)]
    got = sequence_log_likelihood(logits, targets, RealPositions(mask))
    assert got.tolist() == pytest.approx(expected, rel=1e-6)


def test_sequence_log_likelihood_mean_averages_the_real_positions_of_each_row() -> None:
    """loss_reduction "mean": the same two rows, each averaged over its own real steps (2 and 1)."""
    targets, mask = torch.tensor([[0, 1, 1], [1, 0, 0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    logits = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]]))
    expected = [(np.log(0.5) + np.log(0.75)) / 2, np.log(0.1)]
    got = sequence_log_likelihood(logits, targets, RealPositions(mask), reduction="mean")
    assert got.tolist() == pytest.approx(expected, rel=1e-6)
    packed = sequence_log_likelihood(logits[[0, 2, 1]], targets, RealPositions(mask, packed=True), reduction="mean")
    assert packed.tolist() == pytest.approx(expected, rel=1e-6)  # the packed order counts the same steps


def test_kl_to_prior_mean_averages_tokens_and_dimensions() -> None:
    """loss_reduction "mean": KL[q || N(0, I)] averaged over the K x D entries, by torch.distributions."""
    prior = LatentPrior(MSVAEConfig(prior="normal", **TINY))
    mq, lq, _, _ = _gaussians((3, 4, 8), seed=1)
    z = torch.randn(3, 4, 8, dtype=torch.float64)
    per_entry = kl_divergence(Normal(mq, (0.5 * lq).exp()), Normal(torch.zeros_like(mq), torch.ones_like(mq)))
    torch.testing.assert_close(kl_to_prior(mq, lq, prior, z, reduction="mean"), per_entry.mean(dim=(1, 2)))


@pytest.mark.parametrize("reduction", ["avg", "none", None])
def test_an_unknown_reduction_is_refused(reduction) -> None:
    positions = RealPositions(torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="loss_reduction must be 'sum' or 'mean'"):
        sequence_log_likelihood(torch.zeros(2, 3), torch.zeros(1, 2, dtype=torch.long), positions, reduction)
    with pytest.raises(ValueError, match="loss_reduction must be 'sum' or 'mean'"):
        reduce_latent(torch.zeros(1, 4), 8, reduction)
    assert LOSS_REDUCTIONS == ("sum", "mean")  # what the config accepts is what these functions take


def test_paired_elbo_eq9_closed_form() -> None:
    """J-bar = 1/2 [(A_1 + beta B_1 + C_1) + (A_2 + beta B_2 + C_2)] (Eq. 9 with App. D's beta)."""
    a = (torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -4.0]))
    b = (torch.tensor([-0.5, -1.0]), torch.tensor([-2.0, -0.0]))
    c = (torch.tensor([-6.0, -1.0]), torch.tensor([-7.0, -0.5]))
    # sample 0: 1/2 [(-1 - 0.05 - 6) + (-3 - 0.2 - 7)] = 1/2 (-7.05 - 10.2) = -8.625
    # sample 1: 1/2 [(-2 - 0.1 - 1) + (-4 - 0 - 0.5)] = 1/2 (-3.1 - 4.5) = -3.8
    torch.testing.assert_close(paired_elbo(a, b, c, beta=0.1), torch.tensor([-8.625, -3.8]))


def test_paired_elbo_beta_per_modality() -> None:
    """A pair (beta_1, beta_2) weights B_1 and B_2 apart; equal betas give the single-beta value."""
    a = (torch.tensor([-1.0]), torch.tensor([-3.0]))
    b = (torch.tensor([-0.5]), torch.tensor([-2.0]))
    c = (torch.tensor([-6.0]), torch.tensor([-7.0]))
    # 1/2 [(-1 - 0.01 * 0.5 - 6) + (-3 - 1.0 * 2 - 7)] = 1/2 (-7.005 - 12) = -9.5025
    torch.testing.assert_close(paired_elbo(a, b, c, beta=(0.01, 1.0)), torch.tensor([-9.5025]))
    torch.testing.assert_close(paired_elbo(a, b, c, beta=(0.1, 0.1)), paired_elbo(a, b, c, beta=0.1))


def test_unpaired_elbo_sign_of_appendix_a() -> None:
    """V = A_1 + beta B_1 with B_1 = -KL (App. A): a larger KL lowers V (Eq. 3's printed "+ KL" is a typo)."""
    a_1, kl = torch.tensor([-2.0, -2.0]), torch.tensor([1.0, 3.0])
    v = unpaired_elbo(a_1, -kl, beta=0.5)
    torch.testing.assert_close(v, torch.tensor([-2.5, -3.5]))
    assert v[1] < v[0]


def test_msvae_loss_eq10_closed_form() -> None:
    """loss = -(mean J-bar + gamma mean V) + alpha D'; V and D' optional."""
    j_bar, v, d = torch.tensor([-8.0, -4.0]), torch.tensor([-1.0, -3.0, -2.0]), torch.tensor(0.4)
    # -(-6 + 100 * -2) + 0.05 * 0.4 = 206.02
    assert float(msvae_loss(j_bar, v, d, gamma=100.0, alpha=0.05)) == pytest.approx(206.02, rel=1e-6)
    assert float(msvae_loss(j_bar, None, None, gamma=100.0, alpha=0.05)) == pytest.approx(6.0)
    assert float(msvae_loss(j_bar, torch.zeros(0), None, gamma=100.0, alpha=0.05)) == pytest.approx(6.0)
