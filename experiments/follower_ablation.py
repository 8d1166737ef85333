#!/usr/bin/env python
"""The follower's ablation: where the instruction conditions the follower x whether it reads its previous action.

    python experiments/follower_ablation.py gotoseqlocal --jobs 2          # train every missing cell
    python experiments/follower_ablation.py gotoseqlocal --table           # the table, from results/ only

Each cell trains the level's supervised follower (``configs/follower.yaml``: M = 1000 pairs, 1200 updates
of 128) with one variant of the action decoder (msvae_hf/models/modules.py, ActionDecoder), on ``data/<level>_pairs_1k``
(``python scripts/make_demos.py --level LEVEL --paired 1000 --unpaired 0 --valid 500 --test 500 --seed 0 --out
data/<level>_pairs_1k``: the study's 1000 pairs, valid and test episodes, the same seeds), three seeds a variant.
A finished cell's record lands in ``results/<level>/follower_ablation/<variant>_seed<k>.json`` (the config, the
commit and machine, the test metrics and seconds per update) and is never trained again.

Variants (``follower_conditioning`` / ``previous_action_input``):

- ``head_prev``: the instruction enters at the action head only and the LSTM reads a_{t-1};
- ``head``: the same without a_{t-1};
- ``film_prev``: FiLM from the instruction on each frame's convolution map as well, with a_{t-1};
- ``film``: FiLM, without a_{t-1}, its parameters read from the instruction once per episode;
- ``film_recurrent``: FiLM read at each step by attention keyed by the memory LSTM's previous state, without
  a_{t-1} (BabyAI 1.1's model, App. D);
- ``film_both``: FiLM read at each step by learned queries plus keys from the memory LSTM's previous state, without
  a_{t-1} (it starts as ``film``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cells import LEVELS
from result_tables.follower import VARIANTS, table_follower_ablation

from msvae_hf.training.train_config import model_flags
from msvae_hf.utils.run_folder import read_json, write_json

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2)


def record_path(level: str, variant: str, seed: int) -> Path:
    return ROOT / "results" / level / "follower_ablation" / f"{variant}_seed{seed}.json"


def command(level: str, variant: str, seed: int, threads: int) -> list[str]:
    return [
        sys.executable, str(ROOT / "scripts" / "train.py"), "--config", "configs/follower.yaml",
        "--level", LEVELS[level],
        "--demos", f"data/{level}_pairs_1k", "--seed", str(seed),
        "--output-dir", f"runs/{level}/follower_ablation/{variant}_seed{seed}", "--threads", str(threads),
        *model_flags(VARIANTS[variant]),
    ]


def write_record(out: Path, path: Path, level: str, name: str, seed: int, command: str) -> dict:
    """The record of a finished run folder ``out`` (config, commit, machine, seconds per update, validation
    curve, test metrics) at ``path``, written atomically."""
    results = read_json(out / "results.json")
    train_s = results["wall_time_s"] - results.get("validation_time_s", 0.0)
    record = {
        "level": level, "variant": name, "seed": seed,
        "model": {k: v for k, v in read_json(out / "best" / "config.json").items()
                  if k in ("follower_attention", "follower_conditioning", "previous_action_input", "film_layers")},
        "command": command, "commit": results.get("commit"), "machine": results.get("machine"),
        "updates": results["updates"], "seconds_per_update": round(train_s / results["updates"], 4),
        "best": results["best"], "paper_protocol_valid_sr": results.get("paper_protocol_valid_sr"),
        "history": results["history"], "test": results["test"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    return record


def run_cell(level: str, variant: str, seed: int, threads: int) -> None:
    """Train one cell (resuming where its folder holds a checkpoint) and write its record."""
    out = ROOT / "runs" / level / "follower_ablation" / f"{variant}_seed{seed}"
    cmd = command(level, variant, seed, threads)
    if (out / "checkpoints").is_dir() and any((out / "checkpoints").iterdir()) and not (out / "results.json").exists():
        cmd.append("--resume")
    log = ROOT / "runs" / level / "logs" / f"follower_ablation_{variant}_seed{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if not (out / "results.json").exists():
        with open(log, "w", encoding="utf-8") as f:
            subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=True)
    record = write_record(out, record_path(level, variant, seed), level, variant, seed, " ".join(cmd[1:]))
    print(f"{level} {variant} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in record["test"].items()
                                                          if isinstance(v, float)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", choices=list(LEVELS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--jobs", type=int, default=2, help="cells trained at once (each on --threads threads)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--table", action="store_true", help="print the table from the records and stop")
    args = parser.parse_args()
    if args.table:
        print("\n".join(table_follower_ablation(args.level)))
        return
    if not (ROOT / "data" / f"{args.level}_pairs_1k").is_dir():
        name = LEVELS[args.level]
        raise SystemExit(f"no data/{args.level}_pairs_1k: python scripts/make_demos.py --level {name} --paired 1000 "
                         f"--unpaired 0 --valid 500 --test 500 --seed 0 --out data/{args.level}_pairs_1k")
    todo = [(v, s) for s in args.seeds for v in args.variants if not record_path(args.level, v, s).exists()]
    with ThreadPoolExecutor(args.jobs) as pool:
        for future in [pool.submit(run_cell, args.level, v, s, args.threads) for v, s in todo]:
            future.result()
    print("\n".join(table_follower_ablation(args.level)))


if __name__ == "__main__":
    main()
