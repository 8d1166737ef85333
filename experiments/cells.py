"""The cells of each level's study: one command each, done when its output exists.

A cell trains a run (``scripts/train.py``), makes demonstrations or labels a pool of unpaired trajectories.
Names read ``<row>/seed<k>`` for runs (the row is the config's name, ``configs/<level>/<row>.yaml``) and
``demos`` / ``labels/<labeller>`` for data. Run folders follow one convention: ``runs/<level>/<row>`` for
seed 0 and ``runs/<level>/<row>_seed<k>`` for seed k. Every MS-VAE seed starts from the seed-0 baselines
(App. D initialisation), so its seeds differ in data order and noise only; the speaker-followers of all
seeds read the same labels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: The paper's two one-room levels (App. C): folder name -> the name make_demos takes.
LEVELS = {"bosslocal": "BossLocal", "gotoseqlocal": "GoToSeqLocal"}

#: Table 2 and Table 3 of the paper: row (config name) -> (its label, what it needs first besides demos).
TABLE_ROWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "follower": ("supervised follower (Table 2) / follower (Table 3)", ()),
    "speaker": ("supervised speaker", ()),
    "msvae_paired": ("MS-VAE, paired only", ("follower/seed0", "speaker/seed0")),
    "msvae": ("MS-VAE full (+ V + D')", ("follower/seed0", "speaker/seed0")),
    "msvae_v": ("MS-VAE + V", ("follower/seed0", "speaker/seed0")),
    "speaker_follower": ("speaker-follower", ("labels/speaker",)),
    "msvae_speaker_follower": ("MS-VAE-speaker-follower", ("labels/msvae",)),
}

#: Labellers of the unpaired pool: name -> the seed-0 run whose best/ speaks.
LABELLERS = {"speaker": "speaker", "msvae": "msvae"}


@dataclass(frozen=True)
class Cell:
    """One step of a study: ``command`` makes ``output``; the cells named in ``needs`` come first."""

    name: str
    command: tuple[str, ...]
    output: Path
    needs: tuple[str, ...] = ()
    run_dir: Path | None = field(default=None)
    """for a training cell, its run folder: resumed where it holds a checkpoint"""


def run_dir(level: str, row: str, seed: int) -> Path:
    """``runs/<level>/<row>`` for seed 0, ``runs/<level>/<row>_seed<k>`` otherwise."""
    return Path("runs", level, row if seed == 0 else f"{row}_seed{seed}")


def run_row(run: str) -> tuple[str, int]:
    """(row, seed) of a run folder's name: ``msvae_v_seed2`` -> ("msvae_v", 2), ``msvae`` -> ("msvae", 0)."""
    match = re.fullmatch(r"(.+)_seed(\d+)", run)
    return (match.group(1), int(match.group(2))) if match else (run, 0)


def row_label(level: str, row: str) -> str:
    """The label a results table gives ``row`` of ``level``'s study."""
    if row in TABLE_ROWS:
        return TABLE_ROWS[row][0]
    raise KeyError(f"{level} has no row {row!r}")


def demos_dir(level: str) -> Path:
    return Path("data", f"{level}_100k")


def level_cells(level: str, seeds: tuple[int, ...] = (0, 1, 2), threads: int = 1) -> list[Cell]:
    """Every cell of Tables 2 and 3 on ``level`` for ``seeds`` (seed 0 always: the others start from it)."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; known: {sorted(LEVELS)}")
    demos = demos_dir(level)
    cells = [Cell(
        "demos",
        ("python", "scripts/make_demos.py", "--level", LEVELS[level], "--paired", "1000", "--unpaired", "100000",
         "--valid", "500", "--test", "500", "--seed", "0", "--num-proc", "2", "--out", str(demos)),
        demos / "README.md",  # the dataset card, written last
    )]
    labels = {}
    for name, row in LABELLERS.items():
        out = Path("data", "pseudo_labels", level, name)
        labels[f"labels/{name}"] = Cell(
            f"labels/{name}",
            ("python", "scripts/label_unpaired.py", "--speaker", str(run_dir(level, row, 0) / "best"),
             "--demos", str(demos), "--out", str(out)),
            out / "pseudo_labels.json", (f"{row}/seed0",),
        )
    for seed in sorted({0, *seeds}):  # seed-major: every row of seed 0 is scheduled before seed 1
        for row, (_, needs) in TABLE_ROWS.items():
            for need in needs:
                if need in labels:
                    cells.append(labels.pop(need))
            out = run_dir(level, row, seed)
            command = ["python", "scripts/train.py", "--config", f"configs/{level}/{row}.yaml",
                       "--threads", str(threads)]
            if seed:
                command += ["--seed", str(seed), "--output-dir", str(out)]
            cells.append(Cell(f"{row}/seed{seed}", tuple(command), out / "results.json", ("demos", *needs), out))
    return cells
