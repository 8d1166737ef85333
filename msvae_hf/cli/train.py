"""Train a follower, a speaker or MS-VAE on BabyAI demonstrations.

    python scripts/train.py --config configs/msvae.yaml --level BossLocal --max-updates 500 --model.gamma 0
    accelerate launch --cpu --num_processes 2 scripts/train.py --config ... --mixed-precision bf16
    msvae-train --config configs/msvae.yaml --level BossLocal   # the same, as installed by pip

Every field of msvae_hf.training.loop.TrainConfig is a flag (``--max-updates``); ``--model.KEY VALUE`` overrides
a model config field. Values are parsed as YAML (``--model.gamma 0`` is a number). An unknown flag or key
is an error that names it.
"""

from __future__ import annotations

import shlex
import sys

import yaml

from ..training.loop import train
from ..training.train_config import load_config, parse_train_args, train_arg_parser
from ..utils.run_folder import NonFiniteError, RunFolderBusy
from .invocation import entry_point_command


def parse_args(argv: list[str]) -> tuple[str | None, dict]:
    """(config path, TrainConfig overrides) from the command line."""
    args, overrides = parse_train_args(train_arg_parser(__doc__), argv)
    return args.config, overrides


def main(argv: list[str] | None = None) -> None:
    """``scripts/train.py`` and ``msvae-train``: ``argv`` None reads ``sys.argv``."""
    config_path, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_config(config_path, overrides)
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    typed = sys.argv if argv is None else ["scripts/train.py", *argv]
    command = entry_point_command(argv) or shlex.join(["python", *typed])
    try:
        results = train(cfg, command=command)
    except (ValueError, OSError, RunFolderBusy, NonFiniteError) as err:  # one line each, nothing half-written
        sys.exit(f"error: {err}")
    if results:
        print(yaml.safe_dump({k: v for k, v in results.items() if k not in ("history", "test_examples")}))


if __name__ == "__main__":
    main()
