"""Rows of a demo dataset -> padded tensors and masks, the batch layout every model reads.

    observations    uint8 [B, T_max, 7, 7, 3]  zeros on padding
    directions      long  [B, T_max]
    actions         long  [B, T_max]           0 on padding: read it with trajectory_mask
    trajectory_mask bool  [B, T_max]
    input_ids       long  [B, L_max]           <bos> words <eos> <pad>..., only when rows carry "instruction"
    attention_mask  long  [B, L_max]

Rows come from a `datasets.Dataset` in "numpy" or "python" format (or plain dicts). A row's "observations"
is the stored value, T x 49 one-byte cell codes, decoded here by `msvae_hf.data.frames.decode_frames`. Paired
rows carry the bot's "instruction"; pseudo-labelled rows carry a speaker's (see `with_pseudo_labels`); unpaired
rows carry none and give no input_ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .frames import FRAME_SHAPE, decode_frames

TRAJECTORY_COLUMNS = ("observations", "directions", "actions")


class DemoCollator:
    """Pads trajectories and tokenizes instructions; usable as a DataLoader `collate_fn`.

    Args:
        tokenizer: an `MSVAETokenizer` (or any tokenizer with the same call signature).
        allow_unknown: passed to the tokenizer; ``None`` keeps the tokenizer's own setting.
    """

    def __init__(self, tokenizer: Any, allow_unknown: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.allow_unknown = allow_unknown

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not rows:
            raise ValueError("DemoCollator got an empty batch")
        obs = [decode_frames(row["observations"]) for row in rows]
        lengths = [len(o) for o in obs]
        batch, t_max = len(rows), max(lengths)
        observations = np.zeros((batch, t_max, *FRAME_SHAPE), dtype=np.uint8)
        directions = np.zeros((batch, t_max), dtype=np.int64)
        actions = np.zeros((batch, t_max), dtype=np.int64)
        mask = np.zeros((batch, t_max), dtype=bool)
        for i, (row, o, t) in enumerate(zip(rows, obs, lengths, strict=True)):
            if len(row["directions"]) != t or len(row["actions"]) != t:
                raise ValueError(f"row {i}: observations, directions and actions differ in length")
            observations[i, :t] = o
            directions[i, :t] = np.asarray(row["directions"])
            actions[i, :t] = np.asarray(row["actions"])
            mask[i, :t] = True
        out = {
            "observations": torch.from_numpy(observations),
            "directions": torch.from_numpy(directions),
            "actions": torch.from_numpy(actions),
            "trajectory_mask": torch.from_numpy(mask),
        }
        instructions = [row.get("instruction") for row in rows]
        labelled = sum(text is not None for text in instructions)
        if labelled == batch:
            out.update(self.tokenize([str(text) for text in instructions]))
        elif labelled:
            raise ValueError(f"{labelled} of {batch} rows carry an instruction: batch them separately")
        return out

    def tokenize(self, instructions: list[str]) -> dict[str, torch.Tensor]:
        """input_ids and attention_mask (long) for a list of instruction texts."""
        kwargs = {} if self.allow_unknown is None else {"allow_unknown": self.allow_unknown}
        enc = self.tokenizer(instructions, padding=True, return_tensors="pt", **kwargs)
        return {"input_ids": enc["input_ids"].long(), "attention_mask": enc["attention_mask"].long()}


def for_loader(dataset: Any, format_type: str = "numpy") -> Any:
    """`dataset` with only the columns the collator reads, in "numpy" (fast) or "python" format."""
    columns = [c for c in (*TRAJECTORY_COLUMNS, "instruction") if c in dataset.column_names]
    return dataset.with_format(format_type, columns=columns)


def read_rows(data: Any, indices: Sequence[int]) -> list[dict[str, Any]]:
    """Rows ``indices`` of a ``for_loader`` dataset, read in one batched (column-wise) access."""
    batch = data[list(indices)]
    return [{k: batch[k][j] for k in batch} for j in range(len(indices))]


def without_instructions(dataset: Any) -> Any:
    """``dataset`` with its "instruction" column dropped, if it has one: trajectories only."""
    return dataset.remove_columns("instruction") if "instruction" in dataset.column_names else dataset


def with_pseudo_labels(dataset: Any, instructions: Sequence[str]) -> Any:
    """An unpaired split with a speaker's instructions as its "instruction" column (speaker-follower)."""
    if len(instructions) != len(dataset):
        raise ValueError(f"{len(instructions)} instructions for {len(dataset)} rows")
    return without_instructions(dataset).add_column("instruction", list(instructions))


__all__ = ["DemoCollator", "for_loader", "read_rows", "with_pseudo_labels", "without_instructions"]
