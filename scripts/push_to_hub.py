#!/usr/bin/env python
"""``msvae_hf.cli.push_to_hub``, installed by pip as ``msvae-push-to-hub`` (see its docstring or ``--help``)."""

from msvae_hf.cli.push_to_hub import *  # noqa: F403  (its names, for tests that load this file)
from msvae_hf.cli.push_to_hub import main

if __name__ == "__main__":
    main()
