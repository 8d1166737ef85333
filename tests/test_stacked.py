"""Several MS-VAE runs trained as one stacked model follow the runs trained alone.

Each run has its own seed, weights, batches (of other lengths) and noise generator. Trained alone, a run is
``MSVAEModel.forward`` with torch's generator in the run's state and its own Adam; trained together, it is a
slice of :class:`~msvae_hf.stacked.StackedMSVAE` with one Adam over the stacked parameters.
"""

from __future__ import annotations

import pytest
import torch
from model_helpers import TERMS, build, key_bias_rows, real_batch, unpaired

from msvae_hf import MSVAEModel
from msvae_hf.stacked import StackedMSVAE, stack_batches
from msvae_hf.tokenization_msvae import MSVAETokenizer

RUN_LENGTHS = ((5, 2, 4, 3), (7, 1, 2, 2), (3, 3, 6, 1))
UNPAIRED_LENGTHS = ((8, 3, 6), (2, 2, 9), (4, 5, 1))
OPTIONS = dict(gamma=0.7, alpha=2.0)


def run_batches(tok: MSVAETokenizer, run: int, update: int = 0) -> dict[str, torch.Tensor]:
    """Run ``run``'s paired and unpaired batch at ``update`` (other episodes and lengths per run and update)."""
    seed = 10 * run + update
    paired = real_batch(tok, RUN_LENGTHS[(run + update) % 3], seed=seed)
    return {**paired, **unpaired(real_batch(tok, UNPAIRED_LENGTHS[run], seed=seed + 5))}


def models(tok: MSVAETokenizer, **overrides) -> list[MSVAEModel]:
    return [build("msvae", tok, seed=run, **OPTIONS, **overrides).train() for run in range(len(RUN_LENGTHS))]


def generators() -> list[torch.Generator]:
    return [torch.Generator().manual_seed(100 + run) for run in range(len(RUN_LENGTHS))]


def alone(model: MSVAEModel, batch: dict, generator: torch.Generator):
    """One forward of a run alone, with torch's generator in the state of the run's own."""
    torch.set_rng_state(generator.get_state())
    out = model(**batch, reduction="none")
    generator.set_state(torch.get_rng_state())
    return out


@pytest.mark.parametrize("overrides", [{}, {"prior": "normal", "share_observation_encoder": False},
                                       {"loss_reduction": "mean"}])
def test_every_run_gets_its_own_objective_and_gradients(tok: MSVAETokenizer, overrides: dict) -> None:
    runs = models(tok, **overrides)
    batches = [run_batches(tok, r) for r in range(len(runs))]
    stacked = StackedMSVAE(runs)
    out = stacked(stack_batches(batches), stacked.draw_noise(generators(), stack_batches(batches)))
    out.loss.sum().backward()
    for r, (model, batch, generator) in enumerate(zip(runs, batches, generators())):
        ref = alone(model, batch, generator)
        ref.loss.backward()
        for name in (*TERMS, "v", "domain_distance", "loss"):
            ours = getattr(out, name)[r]
            torch.testing.assert_close(ours, getattr(ref, name), rtol=1e-5, atol=1e-5, msg=f"run {r}: {name}")
        for name, param in model.named_parameters():
            torch.testing.assert_close(stacked.p(name).grad[r], param.grad, rtol=1e-4, atol=1e-6,
                                       msg=f"run {r}: {name}")


def test_adam_on_the_stack_follows_each_run_alone(tok: MSVAETokenizer) -> None:
    """Five updates with new batches each: each run's parameters within 1e-6 of the run trained alone
    (relative, over all its parameters but the key biases, whose gradients the test above finds zero)."""
    runs = models(tok)
    stacked = StackedMSVAE(runs)
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in runs]
    stacked_optimizer = torch.optim.Adam(stacked.parameters(), lr=1e-3)
    gens_alone, gens_stacked = generators(), generators()
    for update in range(5):
        batches = [run_batches(tok, r, update) for r in range(len(runs))]
        for model, batch, optimizer, generator in zip(runs, batches, optimizers, gens_alone):
            optimizer.zero_grad()
            alone(model, batch, generator).loss.backward()
            optimizer.step()
        stacked_optimizer.zero_grad()
        batch = stack_batches(batches)
        stacked(batch, stacked.draw_noise(gens_stacked, batch)).loss.sum().backward()
        stacked_optimizer.step()
    for r, model in enumerate(runs):
        differences, values = [], []
        for name, param in model.named_parameters():
            keep = ~key_bias_rows(name, param)
            differences.append((stacked.p(name)[r].detach() - param.detach())[keep])
            values.append(param.detach()[keep])
        relative = torch.cat(differences).norm() / torch.cat(values).norm()
        assert relative < 1e-6, (r, float(relative))
        assert not torch.equal(stacked.p("prior.head.weight")[r], runs[(r + 1) % 3].prior.head.weight)
    restored = build("msvae", tok, seed=7, **OPTIONS)
    restored.load_state_dict(stacked.state_dict_of(1))
    torch.testing.assert_close(restored.state_dict()["prior.head.weight"], stacked.p("prior.head.weight")[1])


def test_stack_batches_pads_to_the_longest_run(tok: MSVAETokenizer) -> None:
    batches = [run_batches(tok, r) for r in range(3)]
    stacked = stack_batches(batches)
    longest = max(b["observations"].shape[1] for b in batches)
    assert stacked["observations"].shape == (3, 4, longest, 7, 7, 3)
    for r, batch in enumerate(batches):
        t = batch["trajectory_mask"].shape[1]
        assert torch.equal(stacked["trajectory_mask"][r, :, :t], batch["trajectory_mask"])
        assert not stacked["trajectory_mask"][r, :, t:].any()


def test_bad_stacks_are_refused(tok: MSVAETokenizer) -> None:
    with pytest.raises(ValueError, match="at least one model"):
        StackedMSVAE([])
    with pytest.raises(ValueError, match=r"differs from model 0's in \['gamma'\]"):
        StackedMSVAE([build("msvae", tok, gamma=1.0), build("msvae", tok, gamma=2.0)])
    with pytest.raises(ValueError, match="unpaired_trains_action_decoder"):
        StackedMSVAE([build("msvae", tok, unpaired_trains_action_decoder=False)])
    batches = [run_batches(tok, r) for r in range(2)]
    with pytest.raises(ValueError, match="same batch size"):
        stack_batches([batches[0], {k: v[:2] for k, v in batches[1].items()}])
    with pytest.raises(ValueError, match="same keys"):
        stack_batches([batches[0], {k: v for k, v in batches[1].items() if not k.startswith("unpaired_")}])
    stacked = StackedMSVAE(models(tok)[:2])
    paired_only = stack_batches([{k: v for k, v in b.items() if not k.startswith("unpaired_")} for b in batches])
    with pytest.raises(ValueError, match="no 'unpaired_observations'"):
        stacked(paired_only, {})
    with pytest.raises(ValueError, match="one generator per run"):
        stacked.draw_noise(generators(), stack_batches(batches))


def test_gradient_clipping_is_each_runs_own(tok: MSVAETokenizer) -> None:
    """clip_grad_norm_per_run clips each run's gradients as torch.nn.utils.clip_grad_norm_ clips the run's alone."""
    from msvae_hf.training_stacked import clip_grad_norm_per_run

    runs = models(tok)
    batches = [run_batches(tok, r) for r in range(len(runs))]
    stacked = StackedMSVAE(runs)
    batch = stack_batches(batches)
    stacked(batch, stacked.draw_noise(generators(), batch)).loss.sum().backward()
    max_norm = 5.0
    norms = clip_grad_norm_per_run(stacked, max_norm)
    for r, (model, run_batch, generator) in enumerate(zip(runs, batches, generators())):
        alone(model, run_batch, generator).loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        torch.testing.assert_close(norms[r], norm, rtol=1e-4, atol=0)
        assert float(norm) > max_norm  # the test clips
        for name, param in model.named_parameters():
            torch.testing.assert_close(stacked.p(name).grad[r], param.grad, rtol=1e-4, atol=1e-6, msg=name)
