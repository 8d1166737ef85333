#!/usr/bin/env python
"""How hard each term of Eq. 10 pulls on the trajectory side of a trained MS-VAE.

    python benchmarks/objective_gradients.py --model runs/bosslocal/msvae/best --demos data/bosslocal_100k
    python benchmarks/objective_gradients.py --init-follower runs/bosslocal/follower/best \
        --init-speaker runs/bosslocal/speaker/best --loss-reduction mean --demos data/bosslocal_100k

On one paired + one unpaired batch (128 + 128, the training sampler's update ``--step``), prints the norm
of the gradient of gamma V, of J-bar and of D' (per unit alpha) with respect to the trajectory encoder and
its bottleneck attention (the speaker's encoder q(z|a,o)), and writes results/objective_gradients.json.
The model is a saved MS-VAE (``--model``) or MS-VAE as training starts it from the baselines (App. D:
``--init-follower`` / ``--init-speaker``); ``--loss-reduction`` reads the objective's terms as "sum" or "mean"
(docs/design.md, "Loss scale"). For each of ``--alphas`` it gives alpha D''s gradient norm and its ratio to
J-bar's and gamma V's (the norm is linear in alpha), and the alpha at which D' pulls as hard as J-bar.

It also measures the domain gap that D' (App. B) is meant to close: D' between the paired and the unpaired
batch's posterior means, against D' between two disjoint unpaired batches of the same size (the sampling
floor: what D' reads when the two distributions are the same) and between the paired batch and the held-out
``valid`` trajectories (paired-like data the model never trained on).
"""

from __future__ import annotations

import argparse

import torch
from report import write_report

import msvae_hf
from msvae_hf.data.collator import DemoCollator
from msvae_hf.data.demos import load_demos
from msvae_hf.data.sampler import StepSampler
from msvae_hf.models.losses import domain_distance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a saved MS-VAE (save_pretrained folder)")
    source.add_argument("--init-follower", help="with --init-speaker: MS-VAE from the trained baselines (App. D)")
    parser.add_argument("--init-speaker")
    parser.add_argument("--loss-reduction", choices=("sum", "mean"), help="default: the model's own")
    parser.add_argument("--alphas", type=float, nargs="*", default=[0.05, 0.5, 5.0, 50.0, 500.0])
    parser.add_argument("--demos", required=True)
    parser.add_argument("--num-paired", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--step", type=int, default=5)
    parser.add_argument("--out", default="results/objective_gradients.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    overrides = {"loss_reduction": args.loss_reduction} if args.loss_reduction else {}
    if args.model:
        model = msvae_hf.MSVAEModel.from_pretrained(args.model, **overrides)
    else:
        model = msvae_hf.MSVAEModel.from_baselines(msvae_hf.FollowerModel.from_pretrained(args.init_follower),
                                                   msvae_hf.SpeakerModel.from_pretrained(args.init_speaker),
                                                   **overrides)
    demos = load_demos(args.demos)
    collator = DemoCollator(model.tokenizer)
    paired = demos["paired"].select(range(min(args.num_paired, len(demos["paired"]))))
    batch = collator(StepSampler(paired, args.batch_size, 1, 0, 0).rows(args.step, 0))
    unpaired = collator(StepSampler(demos["unpaired"], args.batch_size, 1, 0, 1).rows(args.step, 0))
    batch.update({f"unpaired_{k}": unpaired[k] for k in ("observations", "directions", "actions", "trajectory_mask")})
    out = model(**batch)
    params = [p for n, p in model.named_parameters() if n.startswith(("trajectory_encoder", "trajectory_posterior"))]

    def grad_norm(value: torch.Tensor) -> float:
        grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
        return float(torch.sqrt(sum((g**2).sum() for g in grads if g is not None)))

    gamma = model.config.gamma
    g_v, g_j, g_d = grad_norm(-gamma * out.v), grad_norm(-out.j_bar), grad_norm(out.domain_distance)
    result = {
        "model": args.model or {"init_follower": args.init_follower, "init_speaker": args.init_speaker},
        "loss_reduction": model.config.loss_reduction, "gamma": gamma, "alpha": model.config.alpha,
        "grad_norm_gamma_v": g_v, "grad_norm_j_bar": g_j,
        "grad_norm_d_per_unit_alpha": g_d, "d_prime": float(out.domain_distance.detach()),
        "alpha_matching_j_bar": g_j / g_d, "alpha_matching_gamma_v": g_v / g_d,
        "alpha_sweep": [{"alpha": a, "grad_norm_alpha_d": a * g_d, "ratio_to_j_bar": a * g_d / g_j,
                         "ratio_to_gamma_v": a * g_d / g_v} for a in args.alphas],
    }
    # the forward's posterior means: the paired batch first, then the unpaired one
    num_paired = len(batch["actions"])
    means = out.trajectory_mean.detach()
    result.update(domain_gap(model, collator, demos, means[:num_paired], means[num_paired:], args))
    write_report(result, args.out)


@torch.no_grad()
def domain_gap(model, collator, demos, p: torch.Tensor, u1: torch.Tensor, args) -> dict[str, float]:
    """D' (App. B) between posterior means of the paired batch ``p``, the unpaired batch ``u1``, the next
    unpaired batch and the first ``valid`` trajectories."""

    def means(rows: list[dict]) -> torch.Tensor:
        b = collator(rows)
        return model.trajectory_memory(b["observations"], b["directions"], b["actions"], b["trajectory_mask"])[0]

    u2 = means(StepSampler(demos["unpaired"], args.batch_size, 1, 0, 1).rows(args.step + 1, 0))
    valid = means([demos["valid"][i] for i in range(min(args.batch_size, len(demos["valid"])))])
    d = lambda x, y: float(domain_distance(x, y, model.config.swd_projections, model.config.swd_p))
    return {"d_paired_vs_unpaired": d(p, u1), "d_unpaired_vs_unpaired": d(u2, u1), "d_paired_vs_valid": d(p, valid),
            "d_valid_vs_unpaired": d(valid, u1)}


if __name__ == "__main__":
    main()
