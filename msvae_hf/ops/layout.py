"""The package's backend choices, made in one place: which layout the model runs on and which kernels it uses.

Every switch is a context manager over a module-level stack (the innermost block wins) and the functions below
it are the only readers; :func:`layout` sets any of them at once:

* ``static`` (:func:`static_shapes`): the padded layout with no shape or branch that depends on the data (the
  GPU's captured update, :mod:`msvae_hf.graphed`), or the default layout that skips padding; ``frames``: the
  observation encoder's frame slots in the static layout (:func:`frame_slots`).
* ``length_groups`` (:func:`length_groups`): attention at real positions on the CPU per group of rows of similar
  length, or over the whole padded batch (:func:`grouped`).
* ``onednn`` (:func:`~msvae_hf.ops.linear.onednn_linear`): the CPU's fp32 linear layers on oneDNN or on
  ``F.linear``.

The recurrent layers read the static switch too (:func:`~msvae_hf.ops.recurrence.run_recurrence`). The values at
real positions are the same under every setting; only the kernels, their shapes and their speed differ.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .linear import onednn_linear
from .positions import DensePositions, FrameSlots, RealPositions

_STATIC: list[tuple[bool, int | None]] = [(False, None)]


@contextlib.contextmanager
def static_shapes(enabled: bool = True, frames: int | None = None) -> Iterator[None]:
    """Within the block the model runs on the padded layout with no shape or branch that depends on the data
    (``True``) or skips padding (``False``, the default): the same values at real positions.

    Static: position-wise layers run on every position (:class:`DensePositions`), recurrences over the padded
    sequences (a reverse direction reads each row reversed within its length), and no input value is checked on
    the device; the caller checks them on the host. The observation encoder runs on ``frames`` slots holding the
    real frames (:class:`FrameSlots`; the caller promises at most that many per call, and more fail on the device),
    or on every frame where ``frames`` is None. This is the layout of the GPU's captured update
    (:mod:`msvae_hf.graphed`): its kernels and their count do not depend on the batch.
    """
    if frames is not None and frames < 1:
        raise ValueError(f"frames must be a positive count of frame slots, got {frames}")
    _STATIC.append((enabled, frames if enabled else None))
    try:
        yield
    finally:
        _STATIC.pop()


def is_static() -> bool:
    """Whether the model runs in :func:`static_shapes`' layout."""
    return _STATIC[-1][0]


def frame_slots(mask: torch.Tensor) -> FrameSlots | None:
    """The frame slots of :func:`static_shapes` for a trajectory ``mask``, or None where every frame is encoded."""
    enabled, frames = _STATIC[-1]
    return FrameSlots(mask, frames) if enabled and frames is not None else None


def real_positions(mask: torch.Tensor) -> RealPositions | DensePositions:
    """The positions the position-wise layers run on: the real ones (:class:`RealPositions`), or every one
    under :func:`static_shapes` (:class:`DensePositions`)."""
    return DensePositions(mask) if is_static() else RealPositions(mask)


_LENGTH_GROUPS = [True]


@contextlib.contextmanager
def length_groups(enabled: bool) -> Iterator[None]:
    """Within the block, attention at real positions on the CPU runs per group of rows of similar length
    (``True``, the default) or over the whole padded batch (``False``): the same values, for comparing the two."""
    _LENGTH_GROUPS.append(enabled)
    try:
        yield
    finally:
        _LENGTH_GROUPS.pop()


def grouped(x: torch.Tensor, positions: RealPositions | None) -> bool:
    """Whether attention at ``positions`` runs per group of rows of similar length: on the CPU, where its work
    follows the padded lengths; an accelerator runs the whole padded batch in one kernel instead of one per group."""
    return positions is not None and x.device.type == "cpu" and _LENGTH_GROUPS[-1] and not is_static()


_length_groups = length_groups  # layout's argument of that name hides the function


@contextlib.contextmanager
def layout(
    static: bool | None = None,
    frames: int | None = None,
    length_groups: bool | None = None,
    onednn: bool | None = None,
) -> Iterator[None]:
    """Within the block, the switches given are set (None: left as they are), the package's backend choices in
    one call: ``static`` and ``frames`` as :func:`static_shapes` takes them (``frames`` alone applies to the
    static setting in force), ``length_groups`` as :func:`length_groups` and ``onednn`` as
    :func:`~msvae_hf.ops.linear.onednn_linear`. The switches are restored when the block ends."""
    with contextlib.ExitStack() as switches:
        if static is not None or frames is not None:
            switches.enter_context(static_shapes(is_static() if static is None else static, frames))
        if length_groups is not None:
            switches.enter_context(_length_groups(length_groups))
        if onednn is not None:
            switches.enter_context(onednn_linear(onednn))
        yield
