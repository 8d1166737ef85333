"""An episode's egocentric views stored as one byte per cell: the `observations` column of a demo dataset.

minigrid describes a cell by (object type, colour, state): 11 types (unseen, empty, wall, floor, door, key,
ball, box, goal, lava, agent), 6 colours and 3 states (open, closed, locked), 11 x 6 x 3 = 198 combinations,
so one byte holds a cell:

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

from typing import Any

import numpy as np

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
                f"observations are [T, 7, 7, 3] frames, not cell codes: a dataset stored before the one-byte cell "
                f"codes; convert it with `{CONVERT_COMMAND}`"
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


__all__ = ["CONVERT_COMMAND", "FRAME_SHAPE", "NUM_CODES", "decode_frames", "encode_frames"]
