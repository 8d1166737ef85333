"""Speaker-follower data augmentation (Sec. 2.3; Table 3): a speaker labels the unpaired trajectories.

The result is the ``unpaired`` split plus an ``instruction`` column written by the speaker, saved with
``save_to_disk`` beside a ``pseudo_labels.json`` that records which speaker made it and how. A follower
trains on paired + pseudo-paired data with ``scripts/train.py --pseudo-labels DIR``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from .data.collator import with_pseudo_labels
from .data.demos import load_demos
from .evaluation import describe_dataset
from .runtime import check_output_folder


def label_unpaired(
    speaker: Any,
    demos: str | os.PathLike,
    out: str | os.PathLike,
    batch_size: int = 256,
    do_sample: bool = False,
    num_unpaired: int | None = None,
    overwrite: bool = False,
    speaker_path: str | None = None,
    progress: bool = True,
) -> Any:
    """Write one speaker instruction per unpaired trajectory (greedy, or sampled with ``do_sample``)."""
    out = Path(out)
    check_output_folder(out, demos=demos, speaker=speaker_path)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty: pass overwrite=True (--overwrite) to replace it")
    unpaired = load_demos(demos).get("unpaired")
    if unpaired is None or len(unpaired) == 0:
        raise ValueError(f"{demos} has no unpaired trajectories to label")
    if num_unpaired is not None:
        unpaired = unpaired.select(range(min(num_unpaired, len(unpaired))))
    texts = describe_dataset(speaker, unpaired, batch_size=batch_size, progress=progress, do_sample=do_sample)
    labelled = with_pseudo_labels(unpaired, texts)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    labelled.save_to_disk(str(tmp))
    info = {
        "speaker": speaker_path, "speaker_type": speaker.config.model_type, "demos": str(demos),
        "decoding": "sampled" if do_sample else "greedy", "num_labelled": len(labelled),
    }
    (tmp / "pseudo_labels.json").write_text(json.dumps(info, indent=2))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return labelled
