"""Demonstrations stored before the one-byte cell codes (observations as `Array4D` [T, 7, 7, 3] nested lists,
about 230 bytes of list offsets per frame on top of its 147 values) -> the same rows with cell codes.

    python scripts/make_demos.py --convert data/bosslocal_100k --out data/bosslocal_100k_codes
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict, load_from_disk

from .demos import OBSERVATIONS_FEATURE, render_dataset_card
from .frames import FRAME_SHAPE, encode_frames


def _encode_batch(batch: dict[str, Any]) -> dict[str, list[bytes]]:
    return {"observations": [encode_frames(np.asarray(frames, np.uint8).reshape(-1, *FRAME_SHAPE))
                             for frames in batch["observations"]]}


def convert_demos(old: str | Path, out: str | Path, overwrite: bool = False) -> Dataset | DatasetDict:
    """Copy a dataset stored before the cell codes (observations as `Array4D` [T, 7, 7, 3]) to `out` with its
    observations as cell codes; every other column, row and the card, stats and label files come along.

    Takes a `make_demos` DatasetDict or a single Dataset (a pseudo-labelled split of scripts/label_unpaired.py).
    Nothing is written to `old`. Refuses a non-empty `out` unless `overwrite`.
    """
    old, out = Path(old), Path(out)
    if old.resolve() == out.resolve():
        raise ValueError("convert to a new folder: --out must differ from the dataset converted")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass overwrite=True (--overwrite) to replace")
    data = load_from_disk(str(old))
    named = dict(data) if isinstance(data, DatasetDict) else {"rows": data}
    if all(ds.features.get("observations") == OBSERVATIONS_FEATURE for ds in named.values()):
        raise ValueError(f"{old} already stores observations as cell codes")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        converted = {}
        for name, ds in named.items():
            features = ds.features.copy()
            features["observations"] = OBSERVATIONS_FEATURE
            converted[name] = ds.with_format("numpy", columns=["observations"], output_all_columns=True).map(
                _encode_batch, batched=True, batch_size=1000, features=features,
                cache_file_name=str(tmp / f"{name}.arrow"), desc=f"converting {name}",
            ).with_format(None)
        final = tmp / "dataset"
        if isinstance(data, DatasetDict):
            empty = {s: 1 for s, ds in converted.items() if len(ds) == 0}
            DatasetDict(converted).save_to_disk(str(final), num_shards=empty)
        else:
            converted["rows"].save_to_disk(str(final))
        for extra in [*old.glob("*.json"), *old.glob("*.md")]:  # card, stats, pseudo-label record
            if not (final / extra.name).exists():
                shutil.copy2(extra, final / extra.name)
        stats_file = final / "stats.json"
        if stats_file.exists() and (final / "README.md").exists():  # the card describes the columns: renew it
            info = json.loads(stats_file.read_text())
            render_dataset_card(info["level"], info["splits"], info["dropped"], info["command"]).save(
                final / "README.md")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(final, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return load_from_disk(str(out))


__all__ = ["convert_demos"]
