#!/usr/bin/env python
"""``msvae_hf.cli.evaluate``, installed by pip as ``msvae-evaluate`` (see its docstring or ``--help``)."""

from msvae_hf.cli.evaluate import *  # noqa: F403  (its names, for tests that load this file)
from msvae_hf.cli.evaluate import main

if __name__ == "__main__":
    main()
