#!/usr/bin/env python
"""``msvae_hf.cli.evaluate``, installed by pip as ``msvae-evaluate`` (see its docstring or ``--help``)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("_shim.py")))["run"]("evaluate", globals())
