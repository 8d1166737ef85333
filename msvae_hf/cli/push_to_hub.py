"""Push a finished training run's best model to the Hugging Face Hub with a model card.

    python scripts/push_to_hub.py --run runs/bosslocal/msvae --repo user/msvae-bosslocal [--private]
    python scripts/push_to_hub.py --run runs/bosslocal/msvae --repo user/x --dry-run /tmp/x   # stage only

Uploads ``RUN/best`` (model.safetensors, config.json, tokenizer files) plus results.json,
train_config.json and command.txt, and a README.md card (msvae_hf.hub.cards.render_run_card) with the test
success rate and its protocol, the paper-protocol smoothed max of validation SR, test BLEU, the exact
training command, the configuration and the demonstrations. Authentication is huggingface_hub's own
(``hf auth login`` or HF_TOKEN).

Nothing is staged or uploaded when a model the run kept (``best/``, ``best_speaker/``, ``best_<metric>/``) holds a NaN
or inf weight (a diverged run).
What is uploaded names no local absolute path: the card, train_config.json and command.txt show each one
relative to the folder the run was trained from (e.g. ``data/bosslocal_100k``), and ``--dataset`` names the
demonstrations by their Hub id. The run folder itself is never modified. Installed by pip as
``msvae-push-to-hub`` (the same flags).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..hub.push import HubRequestError, push_run


class _DryRunApi:
    """Stands in for HfApi on --dry-run: uploads nothing."""

    def create_repo(self, **kwargs: Any) -> None:
        return None

    def upload_folder(self, **kwargs: Any) -> str:
        return f"dry run: staged {kwargs['folder_path']}"


def main(argv: list[str] | None = None, api: Any = None) -> Any:
    """``scripts/push_to_hub.py`` and ``msvae-push-to-hub``: ``argv`` None reads ``sys.argv``; ``api`` stands in
    for ``HfApi`` (tests)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a run directory (output_dir of scripts/train.py)")
    parser.add_argument("--repo", required=True, help="the Hub model repo, user/name")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--dataset", default=None,
                        help="Hub dataset id (user/name) of the demonstrations, named in the card's model-index "
                        "and as demos in the pushed train_config.json (default: the demos path, relative)")
    parser.add_argument("--base-model", nargs="+", default=[], metavar="ID",
                        help="Hub ids of the pushed checkpoints the run was initialised from (MS-VAE: its baseline "
                        "follower and speaker), the card's base_model")
    parser.add_argument("--dry-run", metavar="DIR", default=None,
                        help="write the folder that would be pushed to DIR (must be empty) and upload nothing")
    args = parser.parse_args(argv)
    if args.dry_run is not None:
        api = _DryRunApi()
    try:
        info = push_run(args.run, args.repo, api=api, private=args.private, dataset=args.dataset,
                        staging_dir=args.dry_run, base_models=args.base_model)
    except (FileNotFoundError, FileExistsError, ValueError, HubRequestError) as err:
        sys.exit(f"error: {err}")
    where = Path(args.dry_run) if args.dry_run else f"https://huggingface.co/{args.repo}"
    print(f"{info}\n-> {where}")
    return info


if __name__ == "__main__":
    main()
