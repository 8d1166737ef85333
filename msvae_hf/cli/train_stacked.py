"""Train MS-VAE runs of one config that differ only in seed as one stack (msvae_hf.training_stacked).

    python scripts/train_stacked.py --config configs/gotoseqlocal/msvae.yaml --seeds 1 2 \\
        --output-dirs runs/gotoseqlocal/msvae_seed1 runs/gotoseqlocal/msvae_seed2 \\
        --stack-dir runs/gotoseqlocal/stacks/msvae_seed1-2 [--device cuda] [scripts/train.py flags]

Each run's folder gets what scripts/train.py would write for its seed (best/, best_speaker/, tb/,
results.json); the stack's checkpoints go to --stack-dir, and --resume continues the stack from there.
Every other flag is scripts/train.py's (``--max-updates 500``, ``--model.gamma 0``), for all runs. Installed by
pip as ``msvae-train-stacked``.
"""

from __future__ import annotations

import shlex
import sys

import yaml

from ..run_folder import NonFiniteError, RunFolderBusy
from ..train_config import load_config, parse_train_args, train_arg_parser
from ..training_stacked import train_stacked
from .invocation import entry_point_command


def main(argv: list[str] | None = None) -> None:
    """``scripts/train_stacked.py`` and ``msvae-train-stacked``: ``argv`` None reads ``sys.argv``."""
    command = entry_point_command(argv)
    argv = sys.argv[1:] if argv is None else argv
    parser = train_arg_parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--output-dirs", nargs="+", required=True, help="one folder per seed, in order")
    parser.add_argument("--stack-dir", required=True, help="the stack's checkpoints")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when visible)")
    args, overrides = parse_train_args(parser, argv)
    if len(args.output_dirs) != len(args.seeds):
        parser.error(f"--output-dirs needs one folder per seed: {len(args.seeds)} seeds, "
                     f"{len(args.output_dirs)} folders")
    if "seed" in overrides or "output_dir" in overrides:
        parser.error("give seeds with --seeds and folders with --output-dirs")
    try:
        cfgs = [load_config(args.config, {**overrides, "seed": seed, "output_dir": out})
                for seed, out in zip(args.seeds, args.output_dirs)]
        command = command or shlex.join(["python", "scripts/train_stacked.py", *argv])
        results = train_stacked(cfgs, args.stack_dir, command=command, device=args.device)
    except (ValueError, OSError, RunFolderBusy, NonFiniteError) as err:  # one line each, nothing half-written
        sys.exit(f"error: {err}")
    for result in results:
        print(yaml.safe_dump({k: v for k, v in result.items() if k not in ("history", "test_examples")}))


if __name__ == "__main__":
    main()
