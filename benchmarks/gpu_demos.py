"""The demo folder benchmarks/gpu_update.sh carries to the GPU machine (12 MB): from a BossLocal study's demos,
its pairs twice and 48 valid pairs as the paired split (2,048 rows, so that 16 runs of 128 pairs read rows of
their own), the first 16,384 unpaired trajectories, and 64 valid and 64 test pairs.

    python benchmarks/gpu_demos.py data/bosslocal_100k .gpu/demos
"""

from __future__ import annotations

import argparse

from datasets import DatasetDict, concatenate_datasets, load_from_disk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="a BossLocal demo folder (make_demos)")
    parser.add_argument("out", help="the folder written")
    args = parser.parse_args()
    demos, out = load_from_disk(args.source), args.out
    paired = concatenate_datasets([demos["paired"], demos["paired"], demos["valid"].select(range(48))])
    DatasetDict(paired=paired, unpaired=demos["unpaired"].select(range(16384)),
                valid=demos["valid"].select(range(64)), test=demos["test"].select(range(64))).save_to_disk(out)


if __name__ == "__main__":
    main()
