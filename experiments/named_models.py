"""What the study's probes share: models named on the command line (``--model NAME=DIR``), each loaded and checked
before any work, and the JSON report each writes with its wall time and provenance."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import AutoModel

import msvae_hf  # noqa: F401  (registers the model types)
from msvae_hf.utils.run_folder import write_json
from msvae_hf.utils.runtime import provenance


def load_named(specs: list[str], check: Callable[[Any], None] | None = None) -> dict[str, tuple[str, Any]]:
    """``NAME=DIR`` (or ``DIR``, named by itself) as {name: (dir, model)}, in order: every model loaded, and given to
    ``check`` (which raises ValueError naming what is wrong), before any is used; the first that fails exits in one
    line naming its folder."""
    models = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        try:
            model = AutoModel.from_pretrained(path)
            if check is not None:
                check(model)
        except (OSError, ValueError) as err:
            sys.exit(f"error: {path}: {err}")
        models[name or path] = (path, model)
    return models


def write_report(report: dict, out: str | None, started: float) -> dict:
    """``report`` with the seconds since ``started`` (``time.perf_counter``) and the code and machine behind it,
    written as JSON at ``out`` where one is given."""
    report |= {"wall_time_s": time.perf_counter() - started, **provenance()}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_json(out, report)
    return report
