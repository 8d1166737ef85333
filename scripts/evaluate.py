"""Evaluate a trained follower (or MS-VAE) by batched rollouts on fixed evaluation seeds.

    python scripts/evaluate.py --model DIR --level BossLocal --episodes 1000 [--seed-start 1000000000]
        [--batch-size 256] [--render N --out DIR] [--json PATH]

Prints the success rate, mean steps and mean BabyAI reward; `--json` writes the summary and one record per
episode (seed, instruction, actions, steps, reward, success). `--render N` writes GIFs of the first N
episodes, captioned with the model's own description of each trajectory when it has a speaker (`describe`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformers import AutoModel, AutoTokenizer

import msvae_hf  # noqa: F401  (registers the Local levels, the models and the tokenizer)
from msvae_hf.envs.seeds import TEST_SEED_START
from msvae_hf.evaluation import resolve_device
from msvae_hf.metrics import summarize_episodes as summarize
from msvae_hf.render import render_rollouts
from msvae_hf.rollout import evaluate_policy, evaluation_seeds, resolve_level


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="directory with the saved model and its tokenizer")
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
    args = parser.parse_args()

    level = resolve_level(args.level)
    model = AutoModel.from_pretrained(args.model).eval().to(resolve_device(args.device))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    results = evaluate_policy(
        model.policy(tokenizer), level, args.episodes, args.seed_start, args.batch_size, progress=True,
        num_workers=args.num_workers,
    )
    summary = summarize(results)
    print(
        f"{level}: success rate {summary['success_rate']:.3f}, mean steps {summary['mean_steps']:.2f}, "
        f"mean reward {summary['mean_reward']:.3f} over {summary['episodes']} episodes"
    )
    if args.json:
        record = {"model": args.model, "level": level, "seed_start": args.seed_start, "summary": summary}
        record["episodes"] = [r.to_dict() for r in results]
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
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
