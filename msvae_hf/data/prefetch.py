"""The batches of the coming training updates, built ahead of time in worker processes and pinned.

``UpdateBatches[micro_step]`` is the batch the training loop builds inline for ``micro_step`` on process ``rank``
(``StepSampler`` rows are a pure function of (seed, stream, step, rank), so any process may build any step):

    batch = collator(paired_sampler.rows(micro_step, rank))
    if unpaired_sampler is not None:
        u = collator(unpaired_sampler.rows(micro_step, rank))
        batch.update({f"unpaired_{name}": u[name] for name in TRAJECTORY_KEYS})

optionally padded to "bucketed" shapes (see `pad_batch`), so that a CUDA graph is captured once per bucket.
``prefetched(batches, start, stop)`` yields micro-steps start .. stop - 1 in order, from a ``DataLoader``.

Values are not checked here: the limits (``num_actions``, ``vocab_size``, ``obs_num_values``,
``num_directions``) belong to the model's config. The collator already guarantees observation channels in
minigrid's ranges (``decode_frames``) and the tokenizer gives ids below ``len(tokenizer)``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import torch

from .sampler import StepSampler

TRAJECTORY_KEYS = ("observations", "directions", "actions", "trajectory_mask")
#: Keys with a time axis that padding extends: the trajectories' and the paired rows' goal steps (if asked for).
TIME_KEYS = (*TRAJECTORY_KEYS, "goal_steps")
TOKEN_KEYS = ("input_ids", "attention_mask")

Batch = dict[str, torch.Tensor]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _pad(t: torch.Tensor, length: int, value: int | bool, left: bool = False) -> torch.Tensor:
    """``t`` padded with ``value`` along dim 1 to ``length`` (at the end, or at the start with ``left``)."""
    extra = length - t.shape[1]
    if extra == 0:
        return t
    out = t.new_full((t.shape[0], length, *t.shape[2:]), value)
    (out[:, extra:] if left else out[:, : t.shape[1]]).copy_(t)
    return out


def pad_batch(batch: Batch, time_multiple: int = 1, length_multiple: int = 1, pad_token_id: int = 0,
              padding_side: str = "right") -> Batch:
    """``batch`` with its time axis (paired and unpaired trajectories together) padded to the smallest multiple
    of ``time_multiple`` that holds the longer of the two, and its token axis to a multiple of
    ``length_multiple``; padding is what the collator pads with (zeros, False, ``pad_token_id``, mask 0).
    A multiple of 1 leaves that axis as it is (paired and unpaired lengths may then differ)."""
    _positive("time_multiple", time_multiple)
    _positive("length_multiple", length_multiple)
    out = dict(batch)
    if time_multiple > 1:
        names = [n for n in batch if n.removeprefix("unpaired_") in TIME_KEYS]
        t_max = max(batch[n].shape[1] for n in names)
        length = -(-t_max // time_multiple) * time_multiple
        out.update({n: _pad(batch[n], length, False if batch[n].dtype == torch.bool else 0) for n in names})
    if length_multiple > 1 and "input_ids" in batch:
        length = -(-batch["input_ids"].shape[1] // length_multiple) * length_multiple
        left = padding_side == "left"
        out["input_ids"] = _pad(batch["input_ids"], length, pad_token_id, left)
        out["attention_mask"] = _pad(batch["attention_mask"], length, 0, left)
    return out


def shapes(batch: Batch) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The bucket key of a batch: (name, shape) of every tensor, by name (dtypes are fixed by the collator)."""
    return tuple((name, tuple(batch[name].shape)) for name in sorted(batch))


class UpdateBatches(torch.utils.data.Dataset):
    """Micro-step -> the training batch of process ``rank`` (module doc), padded to multiples (`pad_batch`).

    Args:
        collator: a `DemoCollator` (its tokenizer's ``pad_token_id`` and ``padding_side`` pad input_ids).
        paired_sampler, unpaired_sampler: the `StepSampler` of the paired split and of the unpaired one (or None).
        rank: the process whose share of each global batch is built.
        time_multiple, length_multiple: trajectory and instruction lengths are padded to multiples of these.
    """

    def __init__(self, collator: Any, paired_sampler: StepSampler, unpaired_sampler: StepSampler | None,
                 rank: int, time_multiple: int = 1, length_multiple: int = 1) -> None:
        self.collator, self.paired_sampler, self.unpaired_sampler = collator, paired_sampler, unpaired_sampler
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < paired_sampler.world_size:
            raise ValueError(f"rank must be an integer in [0, {paired_sampler.world_size}), got {rank!r}")
        self.rank = rank
        self.time_multiple = _positive("time_multiple", time_multiple)
        self.length_multiple = _positive("length_multiple", length_multiple)
        tokenizer = getattr(collator, "tokenizer", None)
        self.pad_token_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        self.padding_side = str(getattr(tokenizer, "padding_side", "right"))

    def __getitem__(self, micro_step: int) -> Batch:
        micro_step = operator.index(micro_step)
        if micro_step < 0:
            raise ValueError(f"micro_step must be >= 0, got {micro_step}")
        batch = self.collator(self.paired_sampler.rows(micro_step, self.rank))
        if self.unpaired_sampler is not None:
            u = self.collator(self.unpaired_sampler.rows(micro_step, self.rank))
            batch.update({f"unpaired_{name}": u[name] for name in TRAJECTORY_KEYS})
        return pad_batch(batch, self.time_multiple, self.length_multiple, self.pad_token_id, self.padding_side)


def _one_thread(worker_id: int) -> None:
    """``worker_init_fn``: a worker builds one batch at a time and needs no intra-op thread pool."""
    torch.set_num_threads(1)


def prefetched(batches: UpdateBatches, start: int, stop: int, workers: int = 2, pin_memory: bool = True,
               prefetch_factor: int = 4) -> Iterator[Batch]:
    """The batches of micro-steps ``start .. stop - 1``, in that order, built ahead by ``workers`` processes
    (0: built inline when asked for) with up to ``workers * prefetch_factor`` waiting, in pinned memory when
    ``pin_memory`` and an accelerator is present. The process's torch RNG is not touched (the loader draws its
    worker seed from a private generator), so the training noise is the same as with inline batches."""
    for name, value in (("start", start), ("stop", stop), ("workers", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if start > stop:
        raise ValueError(f"start ({start}) must not be after stop ({stop})")
    _positive("prefetch_factor", prefetch_factor)
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6; before it, CUDA only
    has_accelerator = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    loader = torch.utils.data.DataLoader(
        batches, batch_size=None, sampler=range(start, stop), num_workers=workers,
        pin_memory=pin_memory and has_accelerator, prefetch_factor=prefetch_factor if workers else None,
        worker_init_fn=_one_thread if workers else None, generator=torch.Generator(),
    )
    return iter(loader)


__all__ = ["TOKEN_KEYS", "TRAJECTORY_KEYS", "UpdateBatches", "pad_batch", "prefetched", "shapes"]
