#!/usr/bin/env python
"""``msvae_hf.cli.push_to_hub``, installed by pip as ``msvae-push-to-hub`` (see its docstring or ``--help``)."""

import os
import signal
import sys


def stopped() -> None:
    """Ctrl-C outside the command's own handling: say so in one line, then end as an uncaught Ctrl-C ends a process
    (by SIGINT, so that the shell sees an interrupted command, not a failed one)."""
    print("stopped", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


try:
    from msvae_hf.cli.push_to_hub import *  # noqa: F403  (its names, for tests that load this file)
    from msvae_hf.cli.push_to_hub import main
except KeyboardInterrupt:  # Ctrl-C while the package loads (torch, datasets): nothing has started
    if __name__ != "__main__":
        raise
    stopped()

if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C before or after main's own handling (parsing flags, printing the result)
        stopped()
