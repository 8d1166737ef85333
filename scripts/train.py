#!/usr/bin/env python
"""``msvae_hf.cli.train``, installed by pip as ``msvae-train`` (see its docstring or ``--help``)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("_shim.py")))["run"]("train", globals())
