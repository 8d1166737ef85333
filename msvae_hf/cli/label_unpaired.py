"""Label every unpaired trajectory with a trained speaker (baseline or MS-VAE) for the speaker-follower.

    python scripts/label_unpaired.py --speaker runs/bosslocal/speaker/best --demos data/bosslocal_100k \\
        --out data/pseudo_labels/bosslocal/speaker

With ``--rescore-with FOLLOWER`` the speaker proposes ``--num-candidates`` instructions a trajectory and the
follower's log p(a | y, o) joins the speaker's in choosing one (a pragmatic speaker; ``--lam`` the speaker's weight,
chosen on the valid pairs when not given). ``--candidates-cache DIR`` keeps the speaker's candidates in DIR: the next
round, the same speaker's candidates rescored by another follower, reads them there and runs only that follower.

Installed by pip as ``msvae-label-unpaired`` (the same flags).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from transformers import AutoModel

from ..data.pseudo_labels import check_num_unpaired, check_rescorer, label_unpaired
from ..extensions.pragmatics import NUM_CANDIDATES
from ..utils.runtime import add_threads_flag, set_threads
from .evaluate import missing_model
from .invocation import entry_point_command


def main(argv: list[str] | None = None) -> None:
    """``scripts/label_unpaired.py`` and ``msvae-label-unpaired``: ``argv`` None reads ``sys.argv``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speaker", required=True, help="a saved speaker or MS-VAE (save_pretrained folder)")
    parser.add_argument("--demos", required=True, help="demonstrations with an unpaired split")
    parser.add_argument("--out", required=True, help="where to write the pseudo-paired dataset")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="sequences a batch: trajectories, or with --rescore-with candidates (a trajectory's all)")
    parser.add_argument("--sample", action="store_true", help="sample instructions instead of greedy decoding")
    parser.add_argument("--num-unpaired", type=int, default=None, help="label only the first N trajectories")
    parser.add_argument("--rescore-with", default=None, metavar="FOLLOWER",
                        help="a saved follower or MS-VAE that rescores the speaker's candidates")
    parser.add_argument("--num-candidates", type=int, default=None,
                        help=f"candidates a trajectory, with --rescore-with (default {NUM_CANDIDATES})")
    parser.add_argument("--lam", type=float, default=None,
                        help="the speaker's weight in [0, 1], with --rescore-with (default: chosen on the valid pairs)")
    parser.add_argument("--candidates-cache", default=None, metavar="DIR",
                        help="with --rescore-with: keep the speaker's candidates in DIR, and read them there when the "
                             "same speaker labels the same trajectories again (a later round rescores them alone)")
    parser.add_argument("--overwrite", action="store_true")
    add_threads_flag(parser)
    args = parser.parse_args(argv)
    if args.rescore_with is None and (args.lam is not None or args.num_candidates is not None
                                      or args.candidates_cache is not None):
        parser.error("--lam, --num-candidates and --candidates-cache go with --rescore-with FOLLOWER")
    num_candidates = NUM_CANDIDATES if args.num_candidates is None else args.num_candidates
    set_threads(args.threads)
    command = entry_point_command(argv) or shlex.join(
        ["python", "scripts/label_unpaired.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        check_num_unpaired(args.num_unpaired)  # before a speaker is fetched
        if (why := missing_model(args.speaker)) is not None:
            raise ValueError(why)
        rescorer = None
        if args.rescore_with is not None:
            if (why := missing_model(args.rescore_with)) is not None:
                raise ValueError(why)
            rescorer = AutoModel.from_pretrained(args.rescore_with)
            check_rescorer(rescorer, num_candidates, args.lam)
        speaker = AutoModel.from_pretrained(args.speaker)
        if not hasattr(speaker, "describe"):
            raise ValueError(f"{args.speaker} holds a {speaker.config.model_type} model, which cannot speak")
        labelled = label_unpaired(
            speaker, args.demos, args.out, batch_size=args.batch_size, do_sample=args.sample,
            num_unpaired=args.num_unpaired, overwrite=args.overwrite, speaker_path=args.speaker, command=command,
            rescorer=rescorer, num_candidates=num_candidates, lam=args.lam, rescorer_path=args.rescore_with,
            candidates_cache=args.candidates_cache,
        )
    except (OSError, ValueError) as err:  # FileExistsError, FileNotFoundError, a full disk: one line each
        sys.exit(f"error: {err}")
    print(f"labelled {len(labelled)} trajectories -> {args.out}; e.g. {labelled[0]['instruction']!r}")


if __name__ == "__main__":
    main()
