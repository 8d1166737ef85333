#!/usr/bin/env python
"""Does MS-VAE's latent carry the instruction's content? Linear probes of each pair's goals from z of either side,
and how close q(z|y) lies to q(z|a,o) on the same pair.

    python experiments/probe_latent.py --demos data/gotoseqlocal_curve --split paired --start 100000 \
        --model "M=10k=runs/gotoseqlocal/msvae_film2_m10k/best" --out results/gotoseqlocal/latent_probe.json

For ``--examples`` pairs of ``--split`` from its ``--start``-th (pairs a model did not train on: the valid or test
split, or a curve's paired split past its M): the means of q(z|y) (Sec. 3.2, from the instruction) and of q(z|a,o)
(from the trajectory), all K tokens flattened. Labels from each pair's own mission (read by the level's grammar,
:func:`msvae_hf.envs.missions.goals`): the number of goals, and the first and the last goal's object type and colour
(a goal whose text leaves one open, "the ball", is left out of that label); and, beside them, labels of the
trajectory's actions alone, which say nothing of the mission's objects: the first action, and the number of steps
(its quartile among the probed pairs). A z_tau that predicts these and not the goals encodes how the bot moved
rather than what it was told, which a decoder can read back under z_tau and never meets under z_y. Each label is
probed by a logistic regression on the first 80 % of the pairs (experiments/probe_speaker.py's ``linear_probe``) and
scored on the rest, next to the majority class: from z_y, from z_tau, and across (the fit on z_y scored on z_tau of
the same held-out pairs), which is what a follower trained under z_y meets when it acts under z_tau, and the
reverse.

Alignment: for each held-out pair, the rank of its own z_tau among all held-out z_tau by distance to its z_y (top-1
share, and the median rank over the held-out count, 0 best, 0.5 chance); and the mean squared distance between
the two means on the same pair against pairs rolled by one.
"""

from __future__ import annotations

import argparse
import time

import torch
from named_models import check_out, check_posteriors, load_named, write_report
from probe_speaker import linear_probe

from msvae_hf.data.collator import DemoCollator, for_loader, read_rows
from msvae_hf.data.demos import load_demos
from msvae_hf.envs.missions import goals, parse_mission
from msvae_hf.utils.runtime import add_threads_flag, set_threads


def mission_labels(texts: list[str]) -> dict[str, list[str | None]]:
    """Per mission: its goal count, and the first and last goal's object type and colour (None where left open)."""
    labels: dict[str, list[str | None]] = {"goal count": [], "first goal's object type": [],
                                           "first goal's colour": [], "last goal's object type": [],
                                           "last goal's colour": []}
    for text in texts:
        said = goals(parse_mission(text))
        labels["goal count"].append(str(len(said)))
        for which, goal in (("first", said[0]), ("last", said[-1])):
            colour, kind, _ = goal.objects[0]
            labels[f"{which} goal's object type"].append(kind)
            labels[f"{which} goal's colour"].append(colour)
    return labels


def trajectory_labels(actions: list[list[int]]) -> dict[str, list[str]]:
    """Per trajectory: its first action and its number of steps' quartile among these trajectories (q1 shortest):
    the bins are cut at the lengths at a quarter, a half and three quarters of the sorted lengths, a length equal
    to a cut going up, so tied lengths share a bin and the bins need not be equal."""
    lengths = sorted(len(a) for a in actions)
    cuts = [lengths[len(lengths) * q // 4] for q in (1, 2, 3)]
    return {"first action": [str(int(a[0])) for a in actions],
            "steps quartile": [f"q{1 + sum(len(a) >= cut for cut in cuts)}" for a in actions]}


@torch.no_grad()
def posterior_means(model, rows: list[dict], batch_size: int = 250) -> tuple[torch.Tensor, torch.Tensor]:
    """The means of q(z|y) and of q(z|a,o) for each pair, [N, K * D] each."""
    collate = DemoCollator(model.tokenizer)
    mean_y, mean_tau = [], []
    for start in range(0, len(rows), batch_size):
        batch = collate(rows[start:start + batch_size])
        features = model.trajectory_frame_features(batch["observations"], batch["directions"],
                                                   batch["trajectory_mask"])
        mean_tau.append(model.trajectory_posterior_params(features, batch["actions"], batch["trajectory_mask"],
                                                          batch["observations"])[0].flatten(1))
        mean_y.append(model.instruction_posterior_params(batch["input_ids"], batch["attention_mask"])[0].flatten(1))
    return torch.cat(mean_y), torch.cat(mean_tau)


def alignment(mean_y: torch.Tensor, mean_tau: torch.Tensor) -> dict[str, float]:
    """How near each pair's z_y lies to its own z_tau among all of them (rank 0 best) and against a rolled pair."""
    distances = torch.cdist(mean_y, mean_tau)
    own = distances.diagonal()
    ranks = (distances < own[:, None]).sum(1).float()
    same = (mean_y - mean_tau).pow(2).sum(1).mean()
    rolled = (mean_y - mean_tau.roll(1, 0)).pow(2).sum(1).mean()
    return {"top1": float((ranks == 0).float().mean()), "median_rank_share": float(ranks.median() / len(ranks)),
            "mean_sq_distance_same_pair": float(same), "mean_sq_distance_rolled_pair": float(rolled),
            "pairs": len(ranks)}


def probe_model(model, rows: list[dict], texts: list[str]) -> dict:
    """Every label (the mission's and the actions') probed from z_y, z_tau and across, and the alignment of the two
    means on the held-out pairs."""
    mean_y, mean_tau = posterior_means(model, rows)
    n = int(len(rows) * 0.8)
    report: dict = {"alignment": alignment(mean_y[n:], mean_tau[n:]), "labels": {}}
    labels = {**mission_labels(texts), **trajectory_labels([list(row["actions"]) for row in rows])}
    for label, values in labels.items():
        keep = torch.tensor([v is not None for v in values])
        classes = sorted({v for v in values if v is not None})
        y = torch.tensor([classes.index(v) for v in values if v is not None])
        zy, zt = mean_y[keep], mean_tau[keep]
        from_y, from_tau = linear_probe(zy, y, also={"z_tau": zt}), linear_probe(zt, y, also={"z_y": zy})
        report["labels"][label] = {
            "classes": classes, "majority": from_y["majority"], "test_examples": from_y["test_examples"],
            "from z_y": from_y["accuracy"], "from z_tau": from_tau["accuracy"],
            "fit on z_y, scored on z_tau": from_y["z_tau"], "fit on z_tau, scored on z_y": from_tau["z_y"],
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--split", default="valid", help="a split with instructions (paired, valid or test)")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                        help="an MS-VAE checkpoint (its two posteriors); repeatable")
    parser.add_argument("--start", type=int, default=0, help="the split's first pair probed")
    parser.add_argument("--examples", type=int, default=2000)
    add_threads_flag(parser, default=1)
    parser.add_argument("--out", default="results/latent_probe.json")
    args = parser.parse_args()
    started = time.perf_counter()
    check_out(args.out)
    set_threads(args.threads)
    split = load_demos(args.demos)[args.split]
    rows = read_rows(for_loader(split), range(args.start, min(args.start + args.examples, len(split))))
    if len(rows) < 10:
        raise SystemExit(f"error: {args.split} of {args.demos} holds {len(rows)} pairs from pair {args.start}: a "
                         "probe needs at least 10")
    texts = [row["instruction"] for row in rows]
    models = load_named(args.model, check_posteriors)  # every model checked before any is probed
    report: dict = {"demos": args.demos, "split": args.split, "start": args.start, "pairs": len(rows), "models": {}}
    print("| model | label | majority | from z_y | from z_tau | z_y -> z_tau | z_tau -> z_y |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    for name, (path, model) in models.items():
        report["models"][name] = {"path": path, **probe_model(model, rows, texts)}
        for label, r in report["models"][name]["labels"].items():
            print(f"| {name} | {label} | {r['majority']:.3f} | {r['from z_y']:.3f} | {r['from z_tau']:.3f} | "
                  f"{r['fit on z_y, scored on z_tau']:.3f} | {r['fit on z_tau, scored on z_y']:.3f} |")
        a = report["models"][name]["alignment"]
        print(f"{name}: own z_tau nearest to z_y in {a['top1']:.3f} of {a['pairs']} held-out pairs, median rank "
              f"share {a['median_rank_share']:.3f}; squared distance {a['mean_sq_distance_same_pair']:.2f} same pair, "
              f"{a['mean_sq_distance_rolled_pair']:.2f} another")
    write_report(report, args.out, started)


if __name__ == "__main__":
    main()
