"""The kernels the backends (:mod:`msvae_hf.backends`) run the architecture on: the same values at real positions,
faster or with fixed shapes. The model's layers reach them only through their backend.

* :mod:`msvae_hf.ops.positions`: the real positions of a padded batch (:class:`RealPositions`), in groups of
  similar length (:class:`LengthGroups`), every position (:class:`DensePositions`), frame slots (:class:`FrameSlots`).
* :mod:`msvae_hf.ops.recurrence`: the recurrent layers over padded sequences (:func:`run_recurrence`).
* :mod:`msvae_hf.ops.linear`: CPU fp32 products on oneDNN (:func:`~msvae_hf.ops.linear.linear`).

The function ``linear.linear`` is not re-exported here: under the name of its module it would hide
``msvae_hf.ops.linear``; import it from its module.
"""

from .linear import onednn_matmul
from .positions import DensePositions, FrameSlots, LengthGroups, RealPositions, masked_scatter_frames
from .recurrence import packed_recurrence, run_recurrence

__all__ = [
    "DensePositions", "FrameSlots", "LengthGroups", "RealPositions", "masked_scatter_frames", "onednn_matmul",
    "packed_recurrence", "run_recurrence",
]
