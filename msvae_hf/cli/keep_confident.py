"""Keep the share of a labelling's pseudo-labels that it was surest of, for a speaker-follower to train on.

    python scripts/keep_confident.py --labels data/pseudo_labels/bosslocal/speaker_rescored \\
        --fraction 0.3 --out data/pseudo_labels/bosslocal/speaker_rescored_top30

Each trajectory's label is scored as the labelling chose it, with the speaker, rescorer and lam its record names:
lam * log p_S(y|a,o) + (1 - lam) * log p_F(a|y,o) (``msvae_hf.extensions.pragmatics.label_scores``); the
``--fraction`` that score highest are written with a record (``kept``) and their accuracy against the true
missions. Installed by pip as ``msvae-keep-confident`` (the same flags).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from transformers import AutoModel

from ..data.pseudo_labels import check_fraction, keep_confident, labelling_models
from ..utils.runtime import add_threads_flag, set_threads
from .evaluate import missing_model
from .invocation import entry_point_command


def load_labelling(labels: str) -> tuple[Any, Any, float]:
    """The speaker and rescorer (None: none) that chose the pseudo-labels at ``labels``, loaded, and the lam they
    were weighed by (:func:`~msvae_hf.data.pseudo_labels.labelling_models`)."""
    speaker_path, rescorer_path, lam = labelling_models(labels)
    for path in (speaker_path, rescorer_path):
        if path is not None and (why := missing_model(path)) is not None:
            raise ValueError(f"{why} (named by {labels}'s record)")
    rescorer = None if rescorer_path is None else AutoModel.from_pretrained(rescorer_path)
    return AutoModel.from_pretrained(speaker_path), rescorer, lam


def main(argv: list[str] | None = None) -> None:
    """``scripts/keep_confident.py`` and ``msvae-keep-confident``: ``argv`` None reads ``sys.argv``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", required=True, help="pseudo-labels written by scripts/label_unpaired.py")
    parser.add_argument("--fraction", type=float, required=True, help="the share of them to keep, in (0, 1]")
    parser.add_argument("--out", required=True, help="where to write the kept pseudo-labels")
    parser.add_argument("--batch-size", type=int, default=64, help="trajectories a batch")
    parser.add_argument("--overwrite", action="store_true")
    add_threads_flag(parser)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    command = entry_point_command(argv) or shlex.join(
        ["python", "scripts/keep_confident.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        check_fraction(args.fraction)  # before the models are loaded
        speaker, rescorer, lam = load_labelling(args.labels)
        kept = keep_confident(args.labels, args.out, args.fraction, speaker, rescorer, lam,
                              batch_size=args.batch_size, overwrite=args.overwrite, command=command)
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    print(f"kept {len(kept)} labelled trajectories -> {args.out}")


if __name__ == "__main__":
    main()
