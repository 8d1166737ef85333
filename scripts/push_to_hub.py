#!/usr/bin/env python
"""``msvae_hf.cli.push_to_hub``, installed by pip as ``msvae-push-to-hub`` (see its docstring or ``--help``)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("_shim.py")))["run"]("push_to_hub", globals())
