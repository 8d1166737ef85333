#!/usr/bin/env python
"""``msvae_hf.cli.make_demos``, installed by pip as ``msvae-make-demos`` (see its docstring or ``--help``)."""

from msvae_hf.cli.make_demos import *  # noqa: F403  (its names, for tests that load this file)
from msvae_hf.cli.make_demos import main

if __name__ == "__main__":
    main()
