#!/usr/bin/env python
"""``msvae_hf.cli.train``, installed by pip as ``msvae-train`` (see its docstring or ``--help``)."""

from msvae_hf.cli.train import *  # noqa: F403  (its names, for tests that load this file)
from msvae_hf.cli.train import main

if __name__ == "__main__":
    main()
