#!/usr/bin/env python
"""Linear probes: how much of what the agent faces at a trajectory's last step can be read off the
speaker's representations (a diagnostic for the speaker's object words).

    python experiments/probe_speaker.py --demos data/bosslocal_100k --model A=runs/x/best_speaker --model B=...

Among the first ``--examples`` unpaired trajectories (no instruction is used), those whose last observation (the
view before the last action: for "pick up"/"open" the object acted on) has an object (door, key, ball, box) in
the cell in front of the agent; the labels are that object's type and colour. Features: the observation
encoder's output for that frame and the speaker's latent (mean of q(z|a,o), all K tokens; the trajectory
encoder's last state for a baseline speaker). A multinomial logistic regression is fit on the first 80 % and
scored on the rest, next to the majority class. Writes ``--out`` (JSON) and prints a table.
"""

from __future__ import annotations

import argparse
import time

import torch
from minigrid.core.constants import OBJECT_TO_IDX
from named_models import check_out, check_reads_trajectories, load_named, write_report

from msvae_hf.data.collator import DemoCollator, for_loader, read_rows
from msvae_hf.data.demos import load_demos
from msvae_hf.extensions.pretraining import FRONT_CELL
from msvae_hf.utils.runtime import add_threads_flag, set_threads

LABELS = {"object type": 0, "colour": 1}
OBJECT_TYPES = tuple(OBJECT_TO_IDX[name] for name in ("door", "key", "ball", "box"))


def features(model, rows: list[dict], batch_size: int = 250) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(features by name [N, F], front cell of the last frame [N, 3]) for the trajectories that end facing an
    object; instructions are not used."""
    collate = DemoCollator(model.tokenizer)
    out: dict[str, list[torch.Tensor]] = {"last frame": [], "speaker latent": []}
    cells = []
    for start in range(0, len(rows), batch_size):
        batch = collate([{**r, "instruction": ""} for r in rows[start:start + batch_size]])
        mask = batch["trajectory_mask"].bool()
        last, index = mask.sum(1) - 1, torch.arange(mask.shape[0])
        with torch.no_grad():
            # the frames the speaker reads: MS-VAE's trajectory-side features, or the baseline's only ones
            frame_features = getattr(model, "trajectory_frame_features", model.frame_features)
            frames = frame_features(batch["observations"], batch["directions"], batch["trajectory_mask"])
            memory, _ = model.trajectory_memory(
                batch["observations"], batch["directions"], batch["actions"], batch["trajectory_mask"]
            )
        if not hasattr(model, "trajectory_posterior"):  # a baseline speaker: its memory is the encoder states
            memory = memory[index, last].unsqueeze(1)
        out["last frame"].append(frames[index, last])
        out["speaker latent"].append(memory.flatten(1))
        cells.append(batch["observations"][index, last][:, FRONT_CELL[0], FRONT_CELL[1]].long())
    cells = torch.cat(cells)
    keep = torch.isin(cells[:, 0], torch.tensor(OBJECT_TYPES))
    return {k: torch.cat(v)[keep] for k, v in out.items()}, cells[keep]


def linear_probe(x: torch.Tensor, y: torch.Tensor, train_fraction: float = 0.8, steps: int = 300,
                 seed: int = 0, also: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """Logistic regression on standardised features (full-batch Adam): held-out accuracy and majority class; with
    ``also`` (name -> other features of the same examples), the same fit's held-out accuracy on each of them too."""
    n = int(len(y) * train_fraction)
    if n == 0 or n == len(y):
        raise ValueError(f"need examples on both sides of the split, got {len(y)} with train_fraction {train_fraction}")
    mean, std = x[:n].mean(0), x[:n].std(0) + 1e-6
    x = (x - mean) / std
    others = {name: (other - mean) / std for name, other in (also or {}).items()}
    classes = int(y.max()) + 1
    generator = torch.Generator().manual_seed(seed)
    weight = torch.nn.Parameter(torch.randn(x.shape[1], classes, generator=generator) * 0.01)
    bias = torch.nn.Parameter(torch.zeros(classes))
    optimizer = torch.optim.Adam([weight, bias], lr=1e-2, weight_decay=1e-3)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(x[:n] @ weight + bias, y[:n]).backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = {name: float(((z[n:] @ weight + bias).argmax(1) == y[n:]).float().mean())
                    for name, z in {"accuracy": x, **others}.items()}
    majority = int(torch.bincount(y[:n]).argmax())
    return {**accuracy, "majority": float((y[n:] == majority).float().mean()), "test_examples": len(y) - n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--examples", type=int, default=5000)
    add_threads_flag(parser, default=1)
    parser.add_argument("--out", default="results/speaker_probe.json")
    args = parser.parse_args()
    started = time.perf_counter()
    check_out(args.out)
    set_threads(args.threads)
    unpaired = load_demos(args.demos)["unpaired"]
    rows = read_rows(for_loader(unpaired), range(min(args.examples, len(unpaired))))
    models = load_named(args.model, check_reads_trajectories)  # every model checked before any is probed
    report: dict = {"demos": args.demos, "examples": len(rows), "models": {}}
    print("| model | label | features | held-out accuracy | majority class |\n| --- | --- | --- | --- | --- |")
    for name, (path, model) in models.items():
        feats, cells = features(model, rows)
        report["models"][name] = {"path": path, "examples_facing_an_object": len(cells)}
        for label, channel in LABELS.items():
            for feature_name, x in feats.items():
                result = linear_probe(x, cells[:, channel])
                report["models"][name][f"{label} from {feature_name}"] = result
                print(f"| {name} | {label} | {feature_name} | {result['accuracy']:.3f} | {result['majority']:.3f} |")
    write_report(report, args.out, started)


if __name__ == "__main__":
    main()
