"""What the plotting scripts share: a level's figure saved under its title, and the command line that makes one."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from cells import LEVELS  # noqa: E402


def save_figure(fig: plt.Figure, title: str, out: Path) -> None:
    """Title ``fig``, lay it out, write it to ``out`` (its folder made) and close it."""
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def level_plot_main(plot: Callable[[str, Path], None], doc: str | None, argv: list[str] | None = None) -> None:
    """``SCRIPT LEVEL --out PNG``: ``plot(level, out)``, then say where it went."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("level", choices=sorted(LEVELS))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    plot(args.level, Path(args.out))
    print(f"wrote {args.out}")
