"""One-byte cell codes: every (type, colour, state) round-trips, nothing out of range passes, datasets keep them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from datasets import Dataset, Features, Value
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

from msvae_hf.data.collator import CHANNELS, NUM_CODES, decode_frames, encode_frames


def all_cells() -> np.ndarray:
    """uint8 [5, 7, 7, 3]: the 198 (type, colour, state) combinations, then empty cells (type 1) to fill."""
    cells = np.array([(t, c, s) for s in range(3) for c in range(6) for t in range(11)], dtype=np.uint8)
    frames = np.ones((5 * 49, 3), dtype=np.uint8) * np.array([1, 0, 0], dtype=np.uint8)
    frames[: len(cells)] = cells
    return frames.reshape(5, 7, 7, 3)


def test_channel_sizes_are_minigrids() -> None:
    assert [count for _, count in CHANNELS] == [len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)]
    assert NUM_CODES == 198


def test_every_cell_round_trips_to_its_own_code() -> None:
    frames = all_cells()
    codes = encode_frames(frames)
    assert isinstance(codes, bytes) and len(codes) == 5 * 49
    values = np.frombuffer(codes, np.uint8)
    assert sorted(set(values[:198].tolist())) == list(range(1, 199))  # one code each, none is 0
    for t, x, y in [(0, 0, 0), (1, 3, 5), (4, 6, 6)]:
        cell_type, colour, state = frames[t, x, y].tolist()
        assert values[t * 49 + x * 7 + y] == 1 + cell_type + 11 * colour + 66 * state
    decoded = decode_frames(codes)
    assert decoded.dtype == np.uint8 and decoded.shape == (5, 7, 7, 3)
    np.testing.assert_array_equal(decoded, frames)
    np.testing.assert_array_equal(decode_frames(values), frames)  # a 1-D integer array of codes works too
    np.testing.assert_array_equal(decode_frames(values.astype(np.int64)), frames)
    assert decode_frames(b"").shape == (0, 7, 7, 3) and encode_frames(np.zeros((0, 7, 7, 3), np.uint8)) == b""


def test_real_episode_round_trips() -> None:
    env = gym.make("BabyAI-BossLocal-v0")
    obs, _ = env.reset(seed=3)
    frames = []
    for action in [0, 2, 2, 1, 2, 5, 3]:
        frames.append(obs["image"])
        obs, *_ = env.step(action)
    env.close()
    frames = np.stack(frames)
    np.testing.assert_array_equal(decode_frames(encode_frames(frames)), frames)


@pytest.mark.parametrize("channel, value, message", [
    (0, 11, "object type 11 at frame 1, cell (2, 4) is outside [0, 11)"),
    (1, 6, "colour 6 at frame 1, cell (2, 4) is outside [0, 6)"),
    (2, 3, "state 3 at frame 1, cell (2, 4) is outside [0, 3)"),
    (0, -1, "object type -1 at frame 1, cell (2, 4) is outside [0, 11)"),
])
def test_encode_refuses_values_outside_their_range(channel: int, value: int, message: str) -> None:
    frames = all_cells().astype(np.int64)
    frames[1, 2, 4, channel] = value
    with pytest.raises(ValueError) as err:
        encode_frames(frames)
    assert str(err.value) == message


def test_encode_refuses_bad_shapes_and_types() -> None:
    with pytest.raises(ValueError, match=r"shape \[T, 7, 7, 3\], got \[2, 7, 7\]"):
        encode_frames(np.zeros((2, 7, 7), np.uint8))
    with pytest.raises(ValueError, match="integers, got dtype float32"):
        encode_frames(np.zeros((1, 7, 7, 3), np.float32))


def test_decode_refuses_codes_outside_the_range_and_partial_frames() -> None:
    codes = bytearray(encode_frames(all_cells()))
    for bad in (0, 199, 255):
        codes[60] = bad
        with pytest.raises(ValueError, match=f"cell code {bad} at position 60 is outside \\[1, 198\\]"):
            decode_frames(bytes(codes))
    with pytest.raises(ValueError, match="cell code 300 at position 0"):
        decode_frames(np.full(49, 300))
    with pytest.raises(ValueError, match="50 cell codes are not a whole number of frames of 49 cells"):
        decode_frames(b"\x01" * 50)
    with pytest.raises(ValueError, match="--convert OLD_DIR --out NEW_DIR"):  # a row of an old Array4D dataset
        decode_frames(all_cells())


@pytest.mark.parametrize("format_type", ["numpy", "python", None])
def test_codes_survive_a_dataset_in_every_format(format_type: str | None) -> None:
    """numpy's bytes drop trailing NULs; codes are never 0, so frames ending in unseen cells come back whole."""
    unseen = np.zeros((2, 7, 7, 3), np.uint8)  # every cell (0, 0, 0): code 1
    mixed = all_cells()
    ds = Dataset.from_dict({"observations": [encode_frames(unseen), encode_frames(mixed)]},
                           features=Features({"observations": Value("binary")})).with_format(format_type)
    np.testing.assert_array_equal(decode_frames(ds[0]["observations"]), unseen)
    batch = ds[[0, 1]]["observations"]
    np.testing.assert_array_equal(decode_frames(batch[0]), unseen)
    np.testing.assert_array_equal(decode_frames(batch[1]), mixed)
