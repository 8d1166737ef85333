"""Rows of a demo dataset -> padded tensors and masks, the batch layout every model reads.

    observations    uint8 [B, T_max, 7, 7, 3]  zeros on padding
    directions      long  [B, T_max]
    actions         long  [B, T_max]           0 on padding: read it with trajectory_mask
    trajectory_mask bool  [B, T_max]
    input_ids       long  [B, L_max]           <bos> words <eos> <pad>..., only when rows carry "instruction"
    attention_mask  long  [B, L_max]
    goal_steps      bool  [B, T_max]           the steps that complete a goal, only when rows carry "goal_steps"
                                               (step indices, ``data.demos.with_goal_steps``)

Rows come from a `datasets.Dataset` in "numpy" or "python" format (or plain dicts). Paired rows carry the
bot's "instruction"; pseudo-labelled rows carry a speaker's (see `with_pseudo_labels`); unpaired rows carry
none and give no input_ids.

A row's "observations" is stored as one byte per cell. minigrid describes a cell by (object type, colour,
state): 11 types (unseen, empty, wall, floor, door, key, ball, box, goal, lava, agent), 6 colours and 3 states
(open, closed, locked), 11 x 6 x 3 = 198 combinations:

    frames  uint8 [T, 7, 7, 3]  (type, colour, state) of each cell, as `env.step` returns them
    codes   bytes of T * 49     cells in C order (frame t, then x, then y): byte t * 49 + x * 7 + y
    code  = 1 + type + 11 * colour + 66 * state                             in [1, 198]
    type  = (code - 1) % 11,  colour = (code - 1) // 11 % 6,  state = (code - 1) // 66

Codes start at 1 so that no byte is 0: datasets' "numpy" format returns a `binary` value as `numpy.bytes_`,
which drops trailing NUL bytes, and a frame may well end with unseen cells. A value outside its range raises
a ValueError naming it; nothing wraps. `encode_frames` and `decode_frames` are the only code that knows this
layout: everything that reads observations from rows goes through `decode_frames`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

TRAJECTORY_COLUMNS = ("observations", "directions", "actions")
#: Columns a row may carry beside its trajectory, each read into the batch where every row has it.
OPTIONAL_COLUMNS = ("instruction", "goal_steps")


# ------------------------------------------------------------------------------------ stored frames
VIEW_SIZE = 7
FRAME_SHAPE = (VIEW_SIZE, VIEW_SIZE, 3)
CELLS_PER_FRAME = VIEW_SIZE * VIEW_SIZE
#: (name, number of values) of the three channels of a cell, in minigrid's order.
CHANNELS = (("object type", 11), ("colour", 6), ("state", 3))
NUM_CODES = 11 * 6 * 3  # 198, codes 1 .. 198
CONVERT_COMMAND = "python scripts/make_demos.py --convert OLD_DIR --out NEW_DIR"


def _cell_table() -> np.ndarray:
    """uint8 [256, 3]: the (type, colour, state) of every code; rows 0 and 199..255 are never read."""
    code = np.arange(NUM_CODES)
    table = np.zeros((256, 3), dtype=np.uint8)
    table[1 : NUM_CODES + 1] = np.stack([code % 11, code // 11 % 6, code // 66], axis=1)
    return table


_CELLS = _cell_table()


def encode_frames(frames: Any) -> bytes:
    """uint8 [T, 7, 7, 3] frames -> bytes of T * 49 cell codes (formula in the module docstring)."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[1:] != FRAME_SHAPE:
        raise ValueError(f"frames must have shape [T, 7, 7, 3], got {list(frames.shape)}")
    if frames.dtype.kind not in "iu":
        raise ValueError(f"frames must hold integers, got dtype {frames.dtype}")
    for channel, (name, count) in enumerate(CHANNELS):
        values = frames[..., channel]
        outside = (values < 0) | (values >= count)
        if outside.any():
            t, x, y = (int(i) for i in np.argwhere(outside)[0])
            raise ValueError(f"{name} {values[t, x, y]} at frame {t}, cell ({x}, {y}) is outside [0, {count})")
    cells = frames.astype(np.int64)
    codes = 1 + cells[..., 0] + 11 * cells[..., 1] + 66 * cells[..., 2]
    return codes.astype(np.uint8).tobytes()


def decode_frames(codes: Any) -> np.ndarray:
    """Bytes (or a 1-D integer array) of T * 49 cell codes -> uint8 frames [T, 7, 7, 3]; inverse of `encode_frames`."""
    if isinstance(codes, (bytes, bytearray, memoryview)):
        values = np.frombuffer(codes, dtype=np.uint8)
    else:
        values = np.asarray(codes)
        if values.ndim == 4 and values.shape[1:] == FRAME_SHAPE:
            raise ValueError(
                f"observations are [T, 7, 7, 3] frames, not cell codes: a dataset in the nested-list format without "
                f"the one-byte cell codes; convert it with `{CONVERT_COMMAND}`"
            )
        if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
            raise ValueError(f"cell codes must be bytes or a 1-D integer array, got {values.dtype} "
                             f"{list(values.shape)}")
    if values.size % CELLS_PER_FRAME:
        raise ValueError(f"{values.size} cell codes are not a whole number of frames of {CELLS_PER_FRAME} cells")
    outside = (values < 1) | (values > NUM_CODES)
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(f"cell code {values[i]} at position {i} is outside [1, {NUM_CODES}]")
    return _CELLS[values.astype(np.uint8, copy=False)].reshape(-1, *FRAME_SHAPE)


# ------------------------------------------------------------------------------------------- batches
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
        if all("goal_steps" in row for row in rows):
            goal_steps = np.zeros((batch, t_max), dtype=bool)
            for i, (row, t) in enumerate(zip(rows, lengths, strict=True)):
                steps = np.asarray(row["goal_steps"], dtype=np.int64)
                outside = steps[(steps < 0) | (steps >= t)]
                if outside.size:
                    raise ValueError(f"row {i}: goal step {int(outside[0])} is outside its {t} steps")
                goal_steps[i, steps] = True
            out["goal_steps"] = torch.from_numpy(goal_steps)
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
    columns = [c for c in (*TRAJECTORY_COLUMNS, *OPTIONAL_COLUMNS) if c in dataset.column_names]
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


__all__ = [
    "DemoCollator", "decode_frames", "encode_frames", "for_loader", "read_rows", "with_pseudo_labels",
    "without_instructions",
]
