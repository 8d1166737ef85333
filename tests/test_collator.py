"""DemoCollator: shapes, dtypes, masks, padding values, unpaired rows, DataLoader over a Dataset, and the same
batches as from the frames stored as [T, 7, 7, 3] arrays (the nested-list format)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import as_array4d
from datasets import Dataset, Features, Sequence, Value
from torch.utils.data import DataLoader

from msvae_hf.data.collator import DemoCollator, decode_frames, encode_frames, for_loader, read_rows, with_pseudo_labels
from msvae_hf.data.demos import load_demos
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

FEATURES = Features(
    {
        "observations": Value("binary"),
        "directions": Sequence(Value("int8")),
        "actions": Sequence(Value("int8")),
        "instruction": Value("string"),
        "level": Value("string"),
        "seed": Value("int64"),
    }
)
INSTRUCTIONS = ["go to the red ball, then pick up a key", "open the door", "go to a box", "pick up the ball"]
LENGTHS = [3, 5, 1, 4]


def make_rows(paired: bool = True) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for i, t in enumerate(LENGTHS):
        frames = np.stack([rng.integers(0, n, size=(t, 7, 7), dtype=np.uint8) for n in (11, 6, 3)], axis=-1)
        row = {
            "observations": encode_frames(frames),
            "directions": rng.integers(0, 4, size=t).astype(np.int8),
            "actions": rng.integers(1, 7, size=t).astype(np.int8),
            "level": "BabyAI-GoToSeqLocal-v0",
            "seed": i,
        }
        if paired:
            row["instruction"] = INSTRUCTIONS[i]
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def collator() -> DemoCollator:
    return DemoCollator(MSVAETokenizer.from_grammar())


def check_batch(batch: dict, rows: list[dict], paired: bool) -> None:
    b, t_max = len(rows), max(len(r["actions"]) for r in rows)
    assert batch["observations"].shape == (b, t_max, 7, 7, 3) and batch["observations"].dtype == torch.uint8
    for key in ("directions", "actions"):
        assert batch[key].shape == (b, t_max) and batch[key].dtype == torch.long
    mask = batch["trajectory_mask"]
    assert mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [len(r["actions"]) for r in rows]
    for i, row in enumerate(rows):
        t = len(row["actions"])
        assert mask[i, :t].all() and not mask[i, t:].any()
        np.testing.assert_array_equal(batch["observations"][i, :t].numpy(), decode_frames(row["observations"]))
        np.testing.assert_array_equal(batch["actions"][i, :t].numpy(), np.asarray(row["actions"]))
        np.testing.assert_array_equal(batch["directions"][i, :t].numpy(), np.asarray(row["directions"]))
    assert (batch["observations"][~mask] == 0).all()
    assert (batch["actions"][~mask] == 0).all() and (batch["directions"][~mask] == 0).all()
    if paired:
        ids, att = batch["input_ids"], batch["attention_mask"]
        assert ids.dtype == torch.long and att.dtype == torch.long and ids.shape == att.shape
        assert ids.shape[0] == b and (ids[:, 0] == 1).all()
        assert (ids[att == 0] == 0).all()
        assert (ids[torch.arange(b), att.sum(1) - 1] == 2).all()
    else:
        assert "input_ids" not in batch and "attention_mask" not in batch


def test_paired_rows(collator):
    rows = make_rows()
    batch = collator(rows)
    check_batch(batch, rows, paired=True)
    tok = collator.tokenizer
    assert tok.batch_decode(batch["input_ids"], skip_special_tokens=True) == INSTRUCTIONS


def test_unpaired_rows_give_no_input_ids(collator):
    rows = make_rows(paired=False)
    check_batch(collator(rows), rows, paired=False)


def test_mixed_batch_is_an_error(collator):
    rows = make_rows()
    del rows[1]["instruction"]
    with pytest.raises(ValueError, match="3 of 4 rows"):
        collator(rows)


def test_length_mismatch_is_an_error(collator):
    rows = make_rows()
    rows[0]["actions"] = rows[0]["actions"][:-1]
    with pytest.raises(ValueError, match="row 0"):
        collator(rows)


@pytest.mark.parametrize("format_type", ["numpy", "python"])
def test_dataloader_over_dataset(collator, format_type):
    rows = make_rows()
    ds = Dataset.from_list(rows, features=FEATURES)
    view = for_loader(ds, format_type)
    assert isinstance(view[0]["observations"], bytes)  # numpy.bytes_ in "numpy" format
    loader = DataLoader(view, batch_size=4, collate_fn=collator)
    (batch,) = list(loader)
    check_batch(batch, rows, paired=True)
    assert collator.tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True) == INSTRUCTIONS

    unpaired = ds.remove_columns("instruction")
    (batch,) = list(DataLoader(for_loader(unpaired, format_type), batch_size=4, collate_fn=collator))
    check_batch(batch, rows, paired=False)


def test_pseudo_labels(collator):
    rows = make_rows(paired=False)
    features = Features({k: v for k, v in FEATURES.items() if k != "instruction"})
    unpaired = Dataset.from_list(rows, features=features)
    speaker_says = ["go to a box"] * len(rows)
    labelled = with_pseudo_labels(unpaired, speaker_says)
    (batch,) = list(DataLoader(for_loader(labelled), batch_size=4, collate_fn=collator))
    assert collator.tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True) == speaker_says
    with pytest.raises(ValueError, match="3 instructions for 4 rows"):
        with_pseudo_labels(unpaired, speaker_says[:3])


def test_allow_unknown_passes_through():
    rows = make_rows()
    rows[0]["instruction"] = "go to the pink ball"
    with pytest.raises(ValueError, match="'pink'"):
        DemoCollator(MSVAETokenizer.from_grammar())(rows)
    batch = DemoCollator(MSVAETokenizer.from_grammar(), allow_unknown=True)(rows)
    assert (batch["input_ids"][0] == 3).sum() == 1


def test_collator_pickles_for_worker_processes(collator):
    import pickle

    rows = make_rows()
    copy = pickle.loads(pickle.dumps(collator))
    assert torch.equal(copy(rows)["input_ids"], collator(rows)["input_ids"])


def legacy_collate(rows: list[dict], tokenizer) -> dict[str, torch.Tensor]:
    """The collator as it was when rows held frames [T, 7, 7, 3] (Array4D): the reference batches."""
    obs = [np.asarray(row["observations"], dtype=np.uint8) for row in rows]
    lengths = [len(o) for o in obs]
    batch, t_max = len(rows), max(lengths)
    observations = np.zeros((batch, t_max, *obs[0].shape[1:]), dtype=np.uint8)
    directions = np.zeros((batch, t_max), dtype=np.int64)
    actions = np.zeros((batch, t_max), dtype=np.int64)
    mask = np.zeros((batch, t_max), dtype=bool)
    for i, (row, o, t) in enumerate(zip(rows, obs, lengths, strict=True)):
        observations[i, :t] = o
        directions[i, :t] = np.asarray(row["directions"])
        actions[i, :t] = np.asarray(row["actions"])
        mask[i, :t] = True
    out = {"observations": torch.from_numpy(observations), "directions": torch.from_numpy(directions),
           "actions": torch.from_numpy(actions), "trajectory_mask": torch.from_numpy(mask)}
    if all("instruction" in row for row in rows):
        enc = tokenizer([str(row["instruction"]) for row in rows], padding=True, return_tensors="pt")
        out.update(input_ids=enc["input_ids"].long(), attention_mask=enc["attention_mask"].long())
    return out


def assert_same_batch(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("split", ["paired", "unpaired"])
@pytest.mark.parametrize("format_type", ["numpy", "python"])
def test_batches_equal_those_of_the_array4d_frames(tiny_demos, collator, split, format_type):
    """Real bot episodes: the cell-coded rows collate to the very tensors the [T, 7, 7, 3] rows gave."""
    coded = load_demos(tiny_demos)[split].select(range(24))
    old = as_array4d(coded)
    new_view, old_view = for_loader(coded, format_type), for_loader(old, format_type)
    for indices in ([0, 1, 2, 3, 4, 5, 6, 7], list(range(8, 24)), [5]):
        assert_same_batch(collator(read_rows(new_view, indices)), legacy_collate(read_rows(old_view, indices),
                                                                                 collator.tokenizer))
