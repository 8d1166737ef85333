#!/usr/bin/env python
"""``msvae_hf.cli.make_demos``, installed by pip as ``msvae-make-demos`` (see its docstring or ``--help``)."""

try:
    from msvae_hf.cli.make_demos import *  # noqa: F403  (its names, for tests that load this file)
    from msvae_hf.cli.make_demos import main
except KeyboardInterrupt:  # Ctrl-C while the package loads (torch, datasets): nothing has started
    if __name__ != "__main__":
        raise
    raise SystemExit("stopped") from None

if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C before or after main's own handling (parsing flags, printing the result)
        raise SystemExit("stopped") from None
