#!/usr/bin/env python
"""Train a follower, a speaker or MS-VAE on BabyAI demonstrations.

    python scripts/train.py --config configs/bosslocal/msvae.yaml --max-updates 500 --model.gamma 0
    accelerate launch --cpu --num_processes 2 scripts/train.py --config ... --mixed-precision bf16

Every field of msvae_hf.training.TrainConfig is a flag (``--max-updates``); ``--model.KEY VALUE`` overrides
a model config field. Values are parsed as YAML (``--model.gamma 0`` is a number). An unknown flag or key
is an error that names it.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

import yaml

from msvae_hf.training import TrainConfig, is_text_field, load_config, parse_yaml, train


def parse_args(argv: list[str]) -> tuple[str | None, dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML or JSON file of TrainConfig fields")
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, dest=f.name, action="store_true", default=None)
        elif is_text_field(f):  # as typed: YAML would read `--mixed-precision no` as False
            parser.add_argument(flag, dest=f.name, type=str, default=None)
        else:
            parser.add_argument(flag, dest=f.name, type=parse_yaml, default=None)
    args, rest = parser.parse_known_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config" and v is not None}
    i = 0
    while i < len(rest):
        key = rest[i]
        if not key.startswith("--model.") or i + 1 >= len(rest):
            parser.error(f"unrecognized argument: {key}")
        name, _, inline = key[2:].partition("=")
        if inline:
            overrides[name] = parse_yaml(inline)
            i += 1
        else:
            overrides[name] = parse_yaml(rest[i + 1])
            i += 2
    return args.config, overrides


def main(argv: list[str] | None = None) -> None:
    config_path, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_config(config_path, overrides)
    except (ValueError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
    command = shlex.join(["python", *(sys.argv if argv is None else ["scripts/train.py", *argv])])
    try:
        results = train(cfg, command=command)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        sys.exit(f"error: {err}")
    if results:
        print(yaml.safe_dump({k: v for k, v in results.items() if k not in ("history", "test_examples")}))


if __name__ == "__main__":
    main()
