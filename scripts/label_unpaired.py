#!/usr/bin/env python
"""``msvae_hf.cli.label_unpaired``, installed by pip as ``msvae-label-unpaired`` (see its docstring or ``--help``)."""

from msvae_hf.cli.label_unpaired import *  # noqa: F403  (its names, for tests that load this file)
from msvae_hf.cli.label_unpaired import main

if __name__ == "__main__":
    main()
