"""Seconds of a pragmatic labelling (``label_unpaired --rescore-with``) that speaks its candidates, and of the next
round that reads them from ``--candidates-cache`` and runs only its follower.

    python benchmarks/rescoring_rounds.py --speaker runs/bosslocal/speaker_cells_film2_m1k/best \\
        --rescore-with runs/bosslocal/speaker_follower_cells_film2_m1k/best [--demos data/bosslocal_curve] \\
        [--num-unpaired 1024] [--lam 0.1] [--out results/benchmarks/rescoring_rounds.json]

On the first ``--num-unpaired`` unpaired trajectories, in one process, one after another: the labelling without a cache
(``spoken``), the first round with one (``spoken_and_kept``: it also writes the candidates), the next round reading them
(``read``), and one pass that only collates the trajectories (``collating``: the rescoring collates them a second time
where it follows the speaking), after a warm-up labelling of 8. Each round writes its labels to a temporary folder;
``read``'s labels are checked to equal ``spoken``'s. Ratios are to ``spoken``; the labels' scoring against the true
missions is left out of every time (``label_accuracy`` is off).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
from datasets import load_from_disk
from report import write_report
from transformers import AutoModel

import msvae_hf  # noqa: F401  (registers the Local levels and Auto classes)
from msvae_hf.data import pseudo_labels
from msvae_hf.data.demos import load_demos
from msvae_hf.evaluation.evaluate import trajectory_batches
from msvae_hf.extensions.pragmatics import NUM_CANDIDATES
from msvae_hf.utils.runtime import provenance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speaker", required=True)
    parser.add_argument("--rescore-with", required=True)
    parser.add_argument("--demos", default="data/bosslocal_curve")
    parser.add_argument("--num-unpaired", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256, help="candidates a batch, as label_unpaired's")
    parser.add_argument("--lam", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/benchmarks/rescoring_rounds.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    speaker, follower = AutoModel.from_pretrained(args.speaker), AutoModel.from_pretrained(args.rescore_with)
    unpaired = load_demos(args.demos)["unpaired"].select(range(args.num_unpaired))
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(pseudo_labels, "label_accuracy", lambda _: {}):
        cache = Path(tmp, "cache")
        pseudo_labels.label_unpaired(speaker, args.demos, Path(tmp, "warm-up"), batch_size=args.batch_size,
                                     num_unpaired=8, progress=False, rescorer=follower, lam=args.lam)
        for name, kept in (("spoken", None), ("spoken_and_kept", cache), ("read", cache)):
            start = time.perf_counter()
            pseudo_labels.label_unpaired(
                speaker, args.demos, Path(tmp, name), batch_size=args.batch_size, num_unpaired=args.num_unpaired,
                progress=False, rescorer=follower, lam=args.lam, candidates_cache=kept)
            seconds[name] = time.perf_counter() - start
        same = load_from_disk(str(Path(tmp, "read")))["instruction"] == load_from_disk(str(Path(tmp, "spoken")))[
            "instruction"]
    start = time.perf_counter()
    for _ in trajectory_batches(follower, unpaired, max(1, args.batch_size // NUM_CANDIDATES)):
        pass
    seconds["collating"] = time.perf_counter() - start
    write_report({
        "speaker": args.speaker, "rescorer": args.rescore_with, "demos": args.demos,
        "trajectories": args.num_unpaired, "lam": args.lam, "seconds": seconds,
        "ratio_to_spoken": {name: value / seconds["spoken"] for name, value in seconds.items()},
        "read_labels_equal_spoken": same, **provenance(),
    }, args.out)


if __name__ == "__main__":
    main()
