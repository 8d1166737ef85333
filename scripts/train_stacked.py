#!/usr/bin/env python
"""``msvae_hf.cli.train_stacked``, installed by pip as ``msvae-train-stacked`` (see its docstring or ``--help``)."""

from msvae_hf.cli.train_stacked import *  # noqa: F403  (its names, for tests that load this file)
from msvae_hf.cli.train_stacked import main

if __name__ == "__main__":
    main()
