"""Batches of the coming updates built ahead (``msvae_hf.data.prefetch``): the training loop's inline batches,
in micro-step order, from worker processes or inline, and padded to bucketed shapes without changing the loss."""

from __future__ import annotations

import pytest
import torch
from model_helpers import TERMS, build

from msvae_hf.data.collator import DemoCollator
from msvae_hf.data.demos import load_demos
from msvae_hf.data.prefetch import TRAJECTORY_KEYS, UpdateBatches, pad_batch, prefetched, shapes
from msvae_hf.data.sampler import StepSampler

# fp32 on the CPU; the same arithmetic over more (masked) padding
TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def parts(tiny_demos, tok):
    """(collator, paired sampler, unpaired sampler) as training builds them, for 2 processes of 8 rows."""
    demos = load_demos(tiny_demos)
    return (DemoCollator(tok), StepSampler(demos["paired"], 8, 2, seed=3, stream=0),
            StepSampler(demos["unpaired"], 8, 2, seed=3, stream=1))


def inline(parts, micro_step: int, rank: int, with_unpaired: bool = True) -> dict[str, torch.Tensor]:
    """The batch exactly as msvae_hf/training/loop.py builds it inline."""
    collator, paired_sampler, unpaired_sampler = parts
    batch = collator(paired_sampler.rows(micro_step, rank))
    if with_unpaired:
        u = collator(unpaired_sampler.rows(micro_step, rank))
        batch.update({f"unpaired_{name}": u[name] for name in TRAJECTORY_KEYS})
    return batch


def assert_same(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name].dtype == value.dtype and torch.equal(got[name], value), name


@pytest.mark.parametrize("with_unpaired", [True, False])
def test_workers_and_inline_give_the_training_loops_batches_in_order(parts, with_unpaired):
    collator, paired_sampler, unpaired_sampler = parts
    batches = UpdateBatches(collator, paired_sampler, unpaired_sampler if with_unpaired else None, rank=1)
    expected = [inline(parts, step, 1, with_unpaired) for step in range(1, 6)]  # steps 1..5 cross epochs
    rng = torch.get_rng_state()
    for workers in (0, 2):
        got = list(prefetched(batches, 1, 6, workers=workers, pin_memory=False, prefetch_factor=2))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
    assert torch.equal(torch.get_rng_state(), rng)  # the training noise is not shifted
    assert list(prefetched(batches, 4, 4, workers=0)) == []


def test_padding_to_multiples_keeps_every_value_and_pads_as_the_collator(parts, tok):
    collator, paired_sampler, unpaired_sampler = parts
    bucketed = UpdateBatches(collator, paired_sampler, unpaired_sampler, rank=0, time_multiple=8, length_multiple=5)
    for step in range(3):
        plain, padded = inline(parts, step, 0), bucketed[step]
        assert padded.keys() == plain.keys()
        t_max = max(plain["actions"].shape[1], plain["unpaired_actions"].shape[1])
        length = plain["input_ids"].shape[1]
        for name, value in plain.items():
            assert padded[name].dtype == value.dtype
            size = padded[name].shape[1]
            if name in ("input_ids", "attention_mask"):
                assert size % 5 == 0 and size - 5 < length <= size, name
                pad = tok.pad_token_id if name == "input_ids" else 0
            else:
                assert size % 8 == 0 and size - 8 < t_max <= size, name  # paired and unpaired share one length
                pad = 0
            assert torch.equal(padded[name][:, : value.shape[1]], value), name
            assert (padded[name][:, value.shape[1]:] == pad).all(), name
        key = dict(shapes(padded))
        assert key["actions"][1] == key["unpaired_actions"][1] == key["unpaired_observations"][1]
    # the collator's own padding of the same rows to a longer row's length: the same values
    rows = paired_sampler.rows(0, 0)
    longest = max(range(len(rows)), key=lambda i: len(rows[i]["actions"]))
    for short in range(len(rows)):
        pair = collator([rows[short], rows[longest]])
        alone = pad_batch(collator([rows[short]]), time_multiple=pair["actions"].shape[1])
        for name in TRAJECTORY_KEYS:
            assert torch.equal(alone[name][0], pair[name][0]), name


def test_token_padding_follows_the_tokenizers_side():
    batch = {"input_ids": torch.tensor([[1, 5, 2]]), "attention_mask": torch.tensor([[1, 1, 1]])}
    left = pad_batch(batch, length_multiple=4, pad_token_id=9, padding_side="left")
    assert left["input_ids"].tolist() == [[9, 1, 5, 2]] and left["attention_mask"].tolist() == [[0, 1, 1, 1]]
    right = pad_batch(batch, length_multiple=2, pad_token_id=9)
    assert right["input_ids"].tolist() == [[1, 5, 2, 9]] and right["attention_mask"].tolist() == [[1, 1, 1, 0]]


def test_msvae_gives_the_same_loss_terms_on_a_bucketed_batch(parts, tok):
    """The reparameterisation noise is [B, K, D] and the SWD projections [D, P], whatever T and L: with the
    same seed the bucketed batch draws the same noise, so the terms agree up to rounding."""
    collator, paired_sampler, unpaired_sampler = parts
    model = build("msvae", tok)  # eval mode, dropout 0
    plain = UpdateBatches(collator, paired_sampler, unpaired_sampler, rank=0)[2]
    bucketed = UpdateBatches(collator, paired_sampler, unpaired_sampler, rank=0, time_multiple=16,
                             length_multiple=8)[2]
    assert shapes(bucketed) != shapes(plain)
    outputs = []
    for batch in (plain, bucketed):
        torch.manual_seed(0)
        with torch.no_grad():
            outputs.append(model(**batch))
    for name in ("loss", *TERMS, "v", "domain_distance", "a_1_unpaired", "b_1_unpaired", "trajectory_mean",
                 "instruction_mean"):
        torch.testing.assert_close(getattr(outputs[1], name), getattr(outputs[0], name), **TOL, msg=name)


@pytest.mark.parametrize("kwargs, message", [
    ({"time_multiple": 0}, "time_multiple must be an integer >= 1, got 0"),
    ({"length_multiple": 2.0}, "length_multiple must be an integer >= 1, got 2.0"),
    ({"rank": 2}, r"rank must be an integer in \[0, 2\), got 2"),
])
def test_bad_batch_arguments_raise_one_line(parts, kwargs, message):
    collator, paired_sampler, unpaired_sampler = parts
    with pytest.raises(ValueError, match=f"^{message}$"):
        UpdateBatches(collator, paired_sampler, unpaired_sampler, **{"rank": 0, **kwargs})
    with pytest.raises(ValueError, match=r"^micro_step must be >= 0, got -1$"):
        UpdateBatches(collator, paired_sampler, None, rank=0)[-1]


@pytest.mark.parametrize("kwargs, message", [
    ({"start": 5, "stop": 3}, r"start \(5\) must not be after stop \(3\)"),
    ({"start": -1, "stop": 3}, "start must be an integer >= 0, got -1"),
    ({"workers": -1}, "workers must be an integer >= 0, got -1"),
    ({"prefetch_factor": 0}, "prefetch_factor must be an integer >= 1, got 0"),
])
def test_bad_prefetch_arguments_raise_one_line(parts, kwargs, message):
    batches = UpdateBatches(*parts, rank=0)
    with pytest.raises(ValueError, match=f"^{message}$"):
        prefetched(batches, **{"start": 0, "stop": 2, **kwargs})
