#!/usr/bin/env python
"""Pre-train a fresh baseline speaker's encoders on trajectories alone (msvae_hf.extensions.pretraining), then save it
for ``scripts/train.py --init-from``.

    python experiments/pretrain_speaker.py --demos data/bosslocal_100k --split unpaired --updates 600 \\
        --config configs/speaker.yaml --out runs/bosslocal/speaker_init
    python scripts/train.py --config configs/speaker.yaml --level BossLocal --init-from runs/bosslocal/speaker_init

``--split paired`` uses the paired trajectories only (their instructions unused): the control that tells
what the unpaired ones add.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import msvae_hf  # noqa: F401
from msvae_hf.data.demos import load_demos
from msvae_hf.extensions.pretraining import pretrain_speaker_encoder
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training.loop import build_model
from msvae_hf.training.train_config import load_config, read_config_file
from msvae_hf.utils.runtime import add_threads_flag, set_threads


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", required=True)
    parser.add_argument("--config", default=None,
                        help="a train config (YAML/JSON) whose model section sizes the speaker, as train.py would")
    parser.add_argument("--split", default="unpaired", help="whose trajectories to pre-train on")
    parser.add_argument("--num-trajectories", type=int, default=None, help="the first N of the split")
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    add_threads_flag(parser)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        sys.exit(f"error: {out} is not empty")
    set_threads(args.threads)
    demos = load_demos(args.demos)
    if args.split not in demos:
        sys.exit(f"error: {args.demos} has no {args.split!r} split (it has {sorted(demos)})")
    data = demos[args.split]
    if args.num_trajectories is not None:
        data = data.select(range(min(args.num_trajectories, len(data))))
    torch.manual_seed(args.seed)
    tokenizer = MSVAETokenizer.from_grammar()
    sizes = read_config_file(args.config)["model"] if args.config else {}  # its model section only
    model = build_model(load_config(None, {"model_type": "speaker", "demos": args.demos, "model": sizes}), tokenizer)
    try:
        losses = pretrain_speaker_encoder(model, data, args.updates, args.batch_size, args.learning_rate,
                                          seed=args.seed, progress=True)
    except ValueError as err:
        sys.exit(f"error: {err}")
    model.save_pretrained(out)
    (out / "pretraining.json").write_text(json.dumps(
        {**vars(args), "trajectories": len(data), "first_loss": losses[0], "last_loss": losses[-1]}, indent=2))
    print(f"pre-trained on {len(data)} {args.split} trajectories: loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"saved to {out}")


if __name__ == "__main__":
    main()
