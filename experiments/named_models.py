"""What the study's probes share: models named on the command line (``--model NAME=DIR``), each loaded and checked
before any work, the report's folder checked before any work, and the JSON report each writes with its wall time and
provenance."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import AutoModel

import msvae_hf  # noqa: F401  (registers the model types)
from msvae_hf.cli.evaluate import hub_quiet, missing_model
from msvae_hf.utils.run_folder import write_json
from msvae_hf.utils.runtime import provenance, unwritable_folder


def load_checked(path: str, check: Callable[[Any], None] | None = None) -> Any:
    """The model at ``path`` (a folder or Hub id), given to ``check`` (which raises ValueError naming what is wrong);
    exits in one line naming ``path`` where there is none or it fails the check."""
    if why := missing_model(path):
        sys.exit(f"error: {why}")
    try:
        with hub_quiet():
            model = AutoModel.from_pretrained(path)
        if check is not None:
            check(model)
    except (OSError, ValueError) as err:
        sys.exit(f"error: {path}: {(str(err).splitlines() or [type(err).__name__])[0]}")
    return model


def load_named(specs: list[str], check: Callable[[Any], None] | None = None) -> dict[str, tuple[str, Any]]:
    """``NAME=DIR`` (or ``DIR``, named by itself) as {name: (dir, model)}, in order: every model loaded and checked
    (:func:`load_checked`) before any is used; a name given twice exits in one line."""
    models = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")  # the last "=": names may hold one ("gamma=1=DIR")
        name = name or path
        if name in models:
            sys.exit(f"error: two models are named {name!r}: give each its own NAME=")
        models[name] = (path, load_checked(path, check))
    return models


def requires(attribute: str, lacking: str) -> Callable[[Any], None]:
    """A ``check`` for :func:`load_checked`: ValueError, saying what the model lacks, unless it has ``attribute``."""
    def check(model: Any) -> None:
        if not hasattr(model, attribute):
            raise ValueError(f"it holds a {model.config.model_type} model, {lacking}")
    return check


#: Can describe trajectories (a speaker, or MS-VAE).
check_speaks = requires("describe", "which cannot speak")
#: Reads instructions to act (a follower, or MS-VAE).
check_follows = requires("instruction_memory", "which cannot follow")
#: Encodes trajectories (a speaker, or MS-VAE).
check_reads_trajectories = requires("trajectory_memory", "which reads no trajectories")
#: MS-VAE, with both posteriors q(z|y) and q(z|a,o).
check_posteriors = requires("instruction_posterior_params", "not MS-VAE: it has no posteriors")


def check_out(out: str | Path | None) -> None:
    """Exit in one line, before any work, where the report's folder cannot be written."""
    if out and (why := unwritable_folder(Path(out).parent)):
        sys.exit(f"error: {why}")


def write_report(report: dict, out: str | None, started: float) -> dict:
    """``report`` with the seconds since ``started`` (``time.perf_counter``) and the code and machine behind it,
    written as JSON at ``out`` where one is given."""
    report |= {"wall_time_s": time.perf_counter() - started, **provenance()}
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_json(out, report)
    return report
