"""Where the real positions of a right-padded batch are, and how position-wise layers reach them.

Training batches are mostly padding (BabyAI episodes: mean 12 steps, longest about 44 in a batch of 128), so the
layers that work position by position run on the real positions only. :class:`RealPositions` gathers them (row by
row, or in a ``PackedSequence``'s step order) and scatters results back; :class:`LengthGroups` cuts the rows into
a few groups of similar length for attention on the CPU; :class:`DensePositions` has the same interface over
every position, for the static layout (the ``"static"`` backend), where :class:`FrameSlots` holds the real frames
in a fixed number of slots. The model's backend (:mod:`msvae_hf.backends.registry`) chooses among them.
"""

from __future__ import annotations

import functools

import numpy as np
import torch


class RealPositions:
    """The real positions of a right-padded batch (``mask`` [B, S]), so position-wise layers skip padding.

    ``gather`` takes [B, S, ...] to the N real positions [N, ...] (row-major order), ``scatter`` puts [N, ...]
    back into a zero-padded [B, S, ...], and ``sum_rows`` sums a value per real position into one per row [B].
    Training batches are mostly padding (BabyAI episodes: mean 12 steps, longest about 44 in a batch of 128).

    ``packed=True`` orders the positions as a ``PackedSequence`` does (step by step, the longer sequences first
    in each step; ``batch_sizes[t]`` sequences live at step t), a row of length 0 counting as length 1.
    """

    def __init__(self, mask: torch.Tensor, packed: bool = False) -> None:
        self.batch_size, self.length = mask.shape
        if packed:
            self.index, self.batch_sizes = _packed_order(mask)
        else:
            self.index = mask.bool().reshape(-1).nonzero().squeeze(1)
        self.rows = torch.div(self.index, self.length, rounding_mode="floor")

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, ...] -> [N, ...]."""
        return x.reshape(-1, *x.shape[2:]).index_select(0, self.index)

    def scatter(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [B, S, ...], zeros on padding."""
        out = x.new_zeros(self.batch_size * self.length, *x.shape[1:]).index_copy(0, self.index, x)
        return out.view(self.batch_size, self.length, *x.shape[1:])

    def repeat(self, copies: int) -> RealPositions:
        """The positions of the batch stacked ``copies`` times ([copies * B, S]): gathered rows in that order."""
        if hasattr(self, "batch_sizes"):
            raise ValueError("RealPositions.repeat takes row-major positions, not packed ones")
        out = object.__new__(RealPositions)
        out.batch_size, out.length = copies * self.batch_size, self.length
        offsets = torch.arange(copies, device=self.index.device)[:, None]
        out.index = (self.index + offsets * self.batch_size * self.length).reshape(-1)
        out.rows = (self.rows + offsets * self.batch_size).reshape(-1)
        return out

    def sum_rows(self, x: torch.Tensor) -> torch.Tensor:
        """[N] -> [B]: the sum over each row's real positions."""
        return x.new_zeros(self.batch_size).index_add(0, self.rows, x)

    def lengths(self) -> torch.Tensor:
        """[B]: each row's count of real positions."""
        return torch.bincount(self.rows, minlength=self.batch_size)

    @functools.cached_property
    def groups(self) -> LengthGroups:
        """These positions' rows in groups of similar length (:class:`LengthGroups`), built once."""
        return LengthGroups(self)


class LengthGroups:
    """The rows of a right-padded batch in a few groups of similar length, each padded to its own longest row.

    Attention over a padded [B, S] layout costs each row about S^2, however short the row: a batch of BabyAI
    instructions is mostly padding (BossLocal: 13 tokens on average, 31 the longest of 128). The rows are sorted
    by length and cut into at most ``max_groups`` runs where the work sum_g rows_g x length_g^2 is least;
    attention then runs once per group on [rows_g, length_g]. Rows without a real position are in no group.

    ``pad`` takes [N, ...] at the real positions (row-major, as :class:`RealPositions` gathers them) to one
    zero-padded [rows_g, length_g, ...] tensor per group, ``unpad`` takes those back to [N, ...] and ``rows``
    takes a per-row tensor [B, ...] to each group's rows [rows_g, ...] (e.g. the memory cross-attention reads).
    """

    def __init__(self, positions: RealPositions, max_groups: int = 8) -> None:
        lengths = torch.bincount(positions.rows, minlength=positions.batch_size)
        order = lengths.argsort(descending=True, stable=True)
        counts: dict[int, int] = {}
        for length in lengths.tolist():
            if length:
                counts[length] = counts.get(length, 0) + 1
        # each group's padded length, longest first (one empty group where no row has a real position)
        self.lengths = _group_lengths(counts, max_groups) or [0]
        bounds = torch.tensor(self.lengths, dtype=torch.long, device=lengths.device)
        sorted_lengths = lengths[order]
        group = (bounds[None, :] >= sorted_lengths[:, None]).sum(1) - 1  # the group whose run holds each row
        group[sorted_lengths == 0] = len(self.lengths)  # rows without a real position: no group
        self.sizes = torch.bincount(group, minlength=len(self.lengths) + 1)[:-1].tolist()  # the last: empty rows
        self.order = order[: sum(self.sizes)]
        starts = torch.tensor([0, *self.sizes], dtype=torch.long, device=lengths.device).cumsum(0)[:-1]
        offsets = torch.cat([bounds.new_zeros(1), (bounds * bounds.new_tensor(self.sizes)).cumsum(0)])
        rank = torch.arange(len(self.order), device=lengths.device)
        g = group[: len(self.order)]
        base = lengths.new_zeros(positions.batch_size)
        base[self.order] = offsets[g] + (rank - starts[g]) * bounds[g]  # where each row's first position goes
        self.slots = base[positions.rows] + positions.index - positions.rows * positions.length
        self.total = int(offsets[-1])
        self.batch_size = positions.batch_size
        self._row_lengths = sorted_lengths[: len(self.order)].split(self.sizes)

    def pad(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[N, ...] -> one [rows_g, length_g, ...] per group, zeros on padding."""
        flat = x.new_zeros(self.total, *x.shape[1:]).index_copy(0, self.slots, x)
        numel = [rows * length for rows, length in zip(self.sizes, self.lengths)]
        return [part.view(rows, length, *x.shape[1:])
                for part, rows, length in zip(flat.split(numel), self.sizes, self.lengths)]

    def unpad(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The inverse of ``pad``: one [rows_g, length_g, ...] per group -> [N, ...]."""
        return torch.cat([part.flatten(0, 1) for part in parts]).index_select(0, self.slots)

    def rows(self, x: torch.Tensor | None) -> list[torch.Tensor | None]:
        """[B, ...] -> each group's rows [rows_g, ...], in ``pad``'s order (None: None for every group, e.g. the
        memory mask of a memory with no padding)."""
        if x is None:
            return [None] * len(self.sizes)
        return list(x.index_select(0, self.order).split(self.sizes))

    def join_rows(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The inverse of ``rows``: each group's rows [rows_g, ...] -> [B, ...], zeros for rows in no group."""
        joined = torch.cat(parts)
        return joined.new_zeros(self.batch_size, *joined.shape[1:]).index_copy(0, self.order, joined)

    def masks(self) -> list[torch.Tensor]:
        """Each group's real positions, [rows_g, length_g] booleans (``pad``'s layout)."""
        return [torch.arange(length, device=self.order.device)[None, :] < row_lengths[:, None]
                for length, row_lengths in zip(self.lengths, self._row_lengths)]


def _group_lengths(counts: dict[int, int], max_groups: int) -> list[int]:
    """The padded lengths (longest first) of at most ``max_groups`` groups of rows that minimise the attention
    work sum_g rows_g x length_g^2, a group being a run of the rows sorted by length; ``counts``: length -> rows.

    Dynamic programming over the distinct lengths, one group more per round."""
    lengths = np.array(sorted(counts, reverse=True), dtype=np.float64)
    n = len(lengths)
    rows_before = np.concatenate([[0.0], np.cumsum([counts[int(length)] for length in lengths])])
    # work of lengths i..j as one group padded to lengths[i] (i <= j), at [i, j]
    group_work = (rows_before[None, 1:] - rows_before[:-1, None]) * lengths[:, None] ** 2
    group_work[np.tril_indices(n, -1)] = np.inf
    work = np.concatenate([[0.0], np.full(n, np.inf)])  # the least work of the j longest lengths so far
    cuts = []  # per round: for each j, where the last group of the j longest lengths starts
    for _ in range(min(max_groups, n)):
        total = work[:-1, None] + group_work
        cut = total.argmin(0)
        work = np.concatenate([[np.inf], total[cut, np.arange(n)]])
        cuts.append(cut)
    starts, j = [], n
    for cut in reversed(cuts):
        if j == 0:
            break
        j = int(cut[j - 1])
        starts.append(j)
    return [int(lengths[i]) for i in reversed(starts)]


def _packed_order(mask: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """Flat [B * S] indices of a right-padded batch's positions in packed order, and the live rows per step."""
    length = mask.shape[1]
    lengths = mask.long().sum(1).clamp(min=1)
    order = lengths.argsort(descending=True, stable=True)
    steps = torch.arange(int(lengths.max()), device=mask.device)
    live = steps[:, None] < lengths[order][None, :]  # [steps, B]
    return (order[None, :] * length + steps[:, None])[live], live.sum(1).tolist()


class DensePositions:
    """Every position of a right-padded batch (``mask`` [B, S]), with :class:`RealPositions`' interface: the
    static layout (the ``"static"`` backend), where no shape depends on the data.

    ``gather`` is a reshape to [B * S, ...] (padding included, so position-wise layers run on it too),
    ``scatter`` the reshape back with padding zeroed, ``sum_rows`` sums the real positions only. No call reads a
    value on the host, so a whole update can be captured as a CUDA graph over fixed shapes.
    """

    def __init__(self, mask: torch.Tensor) -> None:
        self.mask = mask.bool()
        self.batch_size, self.length = mask.shape

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, ...] -> [B * S, ...]."""
        return x.reshape(-1, *x.shape[2:])

    def scatter(self, x: torch.Tensor) -> torch.Tensor:
        """[B * S, ...] -> [B, S, ...], zeros on padding."""
        x = x.view(self.batch_size, self.length, *x.shape[1:])
        return x * self.mask.view(*self.mask.shape, *[1] * (x.dim() - 2)).to(x.dtype)

    def repeat(self, copies: int) -> DensePositions:
        """The positions of the batch stacked ``copies`` times ([copies * B, S])."""
        return DensePositions(self.mask.repeat(copies, 1))

    def sum_rows(self, x: torch.Tensor) -> torch.Tensor:
        """[B * S] -> [B]: the sum over each row's real positions."""
        return (x.view(self.batch_size, self.length) * self.mask.to(x.dtype)).sum(1)

    def lengths(self) -> torch.Tensor:
        """[B]: each row's count of real positions."""
        return self.mask.sum(1)


class FrameSlots:
    """The real frames of a padded batch (``mask`` [B, T]) in a fixed number of slots, found on the device.

    Slot k holds the k-th real frame (row-major order); slots past the last real frame hold frame 0 and are
    never read back. ``gather`` takes [B, T, ...] to [slots, ...], ``scatter`` takes [slots, H] back to [B, T, H]
    with zeros on padding: the observation encoder runs on the slots only, as the default layout runs it on the
    real frames, with shapes fixed by ``slots`` alone. A batch with more real frames than slots fails on the
    device (an index out of range), never silently.
    """

    def __init__(self, mask: torch.Tensor, slots: int) -> None:
        self.shape, self.slots = mask.shape, slots
        flat = mask.reshape(-1).bool()
        # where each frame's features come from: a zero row first (padding), then slot k at row k + 1; a real frame
        # past the last slot points past the last row
        self.source = torch.where(flat, flat.long().cumsum(0), 0)
        frames = torch.arange(flat.numel(), device=mask.device)
        # each slot's frame: the real frames scattered to their rows (padding to the zero row, then dropped)
        self.frame = torch.zeros(slots + 1, dtype=torch.long, device=mask.device).scatter_(0, self.source, frames)
        self.frame = self.frame[1:]

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] -> [slots, ...]."""
        return x.flatten(0, 1).index_select(0, self.frame)

    def scatter(self, x: torch.Tensor) -> torch.Tensor:
        """[slots, H] -> [B, T, H], zeros on padding."""
        rows = torch.cat([x.new_zeros(1, *x.shape[1:]), x])
        return rows.index_select(0, self.source).view(*self.shape, *x.shape[1:])


def masked_scatter_frames(features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place per-frame features [N, H] back into a padded [B, T, H] tensor (zeros on padding)."""
    out = features.new_zeros(*mask.shape, features.shape[-1])
    out[mask] = features
    return out
