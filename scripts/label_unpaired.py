#!/usr/bin/env python
"""``msvae_hf.cli.label_unpaired``, installed by pip as ``msvae-label-unpaired`` (see its docstring or ``--help``)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("_shim.py")))["run"]("label_unpaired", globals())
