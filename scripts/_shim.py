"""What every ``scripts/<name>.py`` does: load ``msvae_hf.cli.<name>`` and, run as a script, call its ``main``. A
Ctrl-C outside the command's own handling (while the package loads: torch, datasets; or before and after ``main``'s
own) ends in one line, "stopped", never a traceback."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import Any


def stopped() -> None:
    """Say so in one line, then end as an uncaught Ctrl-C ends a process (by SIGINT, so that the shell sees an
    interrupted command, not a failed one)."""
    print("stopped", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def run(name: str, namespace: dict[str, Any]) -> None:
    """Put ``msvae_hf.cli.<name>``'s public names and its ``main`` into ``namespace`` (the shim's globals: tests load
    a shim as a module) and, where the shim runs as a script, call ``main``."""
    as_script = namespace.get("__name__") == "__main__"
    try:
        module = importlib.import_module(f"msvae_hf.cli.{name}")
    except KeyboardInterrupt:
        if not as_script:
            raise
        stopped()
    names = getattr(module, "__all__", [key for key in vars(module) if not key.startswith("_")])
    namespace.update({key: getattr(module, key) for key in [*names, "main"]})
    if as_script:
        try:
            module.main()
        except KeyboardInterrupt:
            stopped()
