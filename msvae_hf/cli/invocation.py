"""How a command-line tool was started: as ``python scripts/<name>.py`` or as its installed entry point."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

#: The prefix of the entry points setup.py installs (``msvae-train``, ``msvae-make-demos``, ...).
ENTRY_POINT_PREFIX = "msvae-"


def entry_point_command(argv: list[str] | None) -> str | None:
    """The command line as typed (``msvae-train --config x.yaml``) when this process is an installed entry point
    and ``main`` read ``sys.argv`` (``argv`` None); else None (a script, or ``main(argv)`` called in-process)."""
    name = Path(sys.argv[0]).name if sys.argv else ""
    if argv is not None or not name.startswith(ENTRY_POINT_PREFIX):
        return None
    return shlex.join([name, *sys.argv[1:]])
