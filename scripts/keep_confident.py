#!/usr/bin/env python
"""``msvae_hf.cli.keep_confident``, installed by pip as ``msvae-keep-confident`` (see its docstring or ``--help``)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("_shim.py")))["run"]("keep_confident", globals())
