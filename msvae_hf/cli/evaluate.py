"""Evaluate a trained follower (or MS-VAE) by batched rollouts on fixed evaluation seeds.

    python scripts/evaluate.py --model DIR --level BossLocal --episodes 1000 [--seed-start 1000000000]
        [--batch-size 256] [--render N --out DIR] [--json PATH]

Prints the success rate, the success rate told another episode's mission (each seed told the next seed's;
success judged by its own), SPL against the bot on the same seeds, mean steps beside the bot's and the mean
BabyAI reward; `--json` writes the summary and one record per episode told its own mission (seed, instruction,
actions, steps, reward, success). `--render N` writes GIFs of the first N
episodes, captioned with the model's own description of each trajectory when it has a speaker (`describe`).
`--model` is a saved model folder (e.g. RUN/best) or a Hub id `user/name`; a bad one stops with one line.
Installed by pip as `msvae-evaluate` (the same flags).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoModel, AutoTokenizer

from ..envs.seeds import TEST_SEED_START
from ..evaluation.evaluate import evaluate_follower, resolve_device
from ..evaluation.render import render_rollouts
from ..evaluation.rollout import evaluation_seeds, resolve_level
from ..utils.run_folder import BEST_FOLDERS, write_json
from ..utils.runtime import unwritable_folder

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
SPEAKER_BLEU = "msvae_hf.evaluation.evaluate.evaluate_speaker(model, load_demos(DEMOS)['test'])"


def missing_model(path: str) -> str | None:
    """Why ``path`` holds no model to load, or None when it is a model folder or a Hub id to try."""
    folder = Path(path)
    if folder.is_dir():
        if (folder / "config.json").is_file():
            return None
        saved = [str(folder / name) for name in BEST_FOLDERS if (folder / name / "config.json").is_file()]
        if saved:
            return f"no model in {path}: did you mean {' or '.join(saved)}?"
        if (folder / "train_state.json").is_file() or folder.name == "checkpoints":
            run = folder.parent if folder.name == "checkpoints" else folder.parent.parent
            return (f"{path} is a training checkpoint (the state --resume reads), not a model: the run's model is "
                    f"{run / 'best'}")
        return f"no model in {path}: it has no config.json (pass a folder written by save_pretrained)"
    if folder.is_file():
        hint = f": did you mean {folder.parent}?" if (folder.parent / "config.json").is_file() else ""
        return f"{path} is a file, not a model folder{hint}"
    if HUB_ID.fullmatch(path) and not path.endswith((".", "-")) and ".." not in path:
        if folder.parent.is_dir():  # "runs/typo" beside a runs/ folder: a local path mistyped, not a Hub id
            return f"no model at {path} (the folder {folder.parent} is here, and holds no {folder.name})"
        return None  # not here: a Hub id
    return f"no model at {path}"


@contextlib.contextmanager
def hub_quiet() -> Iterator[None]:
    """huggingface_hub's own log (retry warnings of an unreachable Hub) held to errors for the block."""
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub_logger.setLevel(level)


def load_follower(path: str, device: Any) -> tuple[Any, Any]:
    """The model at ``path`` (a folder or Hub id) and its tokenizer; a speaker is refused (it cannot act)."""
    why = missing_model(path)
    if why is not None:
        raise ValueError(why)
    try:
        with hub_quiet():  # huggingface_hub's retries would print before the one line that says what failed
            model_type = AutoConfig.from_pretrained(path).model_type
        if model_type != "msvae_speaker":  # a speaker is refused before its weights load
            model, tokenizer = AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        if os.path.isdir(path):
            raise
        raise ValueError(f"no model at {path}: not a local folder, and from the Hub: {err}") from err
    if model_type == "msvae_speaker":
        raise ValueError(f"{path} is a speaker ({model_type}); evaluate.py rolls out followers and MS-VAE "
                         f"(for a speaker's BLEU use {SPEAKER_BLEU})")
    if not hasattr(model, "policy"):
        raise ValueError(f"{path} is a {model_type} model, which cannot follow instructions")
    return model.eval().to(device), tokenizer


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse, before any work, counts and seeds out of range and a ``--json`` that cannot be written as a file."""
    for name in ("episodes", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for name in ("seed_start", "render", "num_workers"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.json and Path(args.json).is_dir():
        raise ValueError(f"--json {args.json} is a folder: give the path of the JSON file to write")
    if args.json and (why := unwritable_folder(Path(args.json).parent)) is not None:
        raise ValueError(f"--json {args.json}: {why}")
    if args.render and (why := unwritable_folder(args.out)) is not None:
        raise ValueError(f"--out {args.out} (for --render): {why}")


def main(argv: list[str] | None = None) -> None:
    """``scripts/evaluate.py`` and ``msvae-evaluate``: ``argv`` None reads ``sys.argv`` (and the program name
    its messages give from it)."""
    parser = argparse.ArgumentParser(
        prog=None if argv is None else "evaluate.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="a saved model folder (e.g. RUN/best) or a Hub id user/name")
    parser.add_argument("--level", default="BossLocal", help="gymnasium id or BabyAI short name")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seed-start", type=int, default=TEST_SEED_START)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--render", type=int, default=0, metavar="N", help="write GIFs of the first N episodes")
    parser.add_argument("--out", default="results/gifs", help="folder for the GIFs")
    parser.add_argument("--json", default=None, help="write the summary and per-episode records here")
    parser.add_argument("--num-workers", type=int, default=0,
                        help="processes that step the envs (0: this one); the results do not change")
    parser.add_argument("--device", default="auto", help="auto (cuda if visible, else cpu), cpu, cuda, cuda:1, ...")
    args = parser.parse_args(argv)

    try:
        check_arguments(args)
        level = resolve_level(args.level)
        model, tokenizer = load_follower(args.model, resolve_device(args.device))
    except (OSError, ValueError) as err:
        message = " ".join(str(err).split())  # one line, whatever the error's own layout
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    summary, results = evaluate_follower(model, level, args.episodes, args.seed_start, args.batch_size, tokenizer,
                                         progress=True, num_workers=args.num_workers)
    print(
        f"{level}: success rate {summary['success_rate']:.3f} (told another episode's mission "
        f"{summary['success_rate_other_mission']:.3f}"
        + (f", told another mission of the same room and judged by it {summary['success_rate_same_room']:.3f}"
           if "success_rate_same_room" in summary else "")
        + f"), SPL {summary['spl']:.3f}, mean steps "
        f"{summary['mean_steps']:.2f} (the bot's {summary['bot_mean_steps']:.2f}), mean reward "
        f"{summary['mean_reward']:.3f} over {summary['episodes']} episodes"
    )
    if args.json:
        record = {"model": args.model, "level": level, "seed_start": args.seed_start, "summary": summary}
        record["episodes"] = [r.to_dict() for r in results]
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json, record, indent=1)
        print(f"wrote {args.json}")
    if args.render:
        describe = None
        if hasattr(model, "describe"):
            describe = lambda episodes: model.describe(
                observations=[e.observations for e in episodes],
                directions=[e.directions for e in episodes],
                actions=[e.actions for e in episodes],
                tokenizer=tokenizer,
            )
        seeds = evaluation_seeds(min(args.render, args.episodes), args.seed_start)
        paths = render_rollouts(model.policy(tokenizer), level, seeds, args.out, describe=describe)
        print(f"wrote {len(paths)} GIFs to {args.out}")


if __name__ == "__main__":
    main()
