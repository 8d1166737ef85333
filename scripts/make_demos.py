#!/usr/bin/env python
"""``msvae_hf.cli.make_demos``, installed by pip as ``msvae-make-demos`` (see its docstring or ``--help``)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("_shim.py")))["run"]("make_demos", globals())
