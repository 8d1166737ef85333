"""The layout and throughput machinery the architecture (:mod:`msvae_hf.modules`) runs on: the same values at real
positions, faster or with fixed shapes.

* :mod:`msvae_hf.ops.positions`: the real positions of a padded batch (:class:`RealPositions`), in groups of
  similar length (:class:`LengthGroups`), every position (:class:`DensePositions`), frame slots (:class:`FrameSlots`).
* :mod:`msvae_hf.ops.recurrence`: the recurrent layers over padded sequences (:func:`run_recurrence`).
* :mod:`msvae_hf.ops.linear`: linear layers whose CPU fp32 products run on oneDNN (:class:`Linear`).
* :mod:`msvae_hf.ops.layout`: the switches that choose among them, set together by ``layout.layout(...)``.

The functions ``layout.layout`` and ``linear.linear`` are not re-exported here: under the names of their modules
they would hide ``msvae_hf.ops.layout`` and ``msvae_hf.ops.linear``; import them from their modules.
"""

from .layout import frame_slots, grouped, is_static, length_groups, real_positions, static_shapes
from .linear import Linear, onednn_linear, onednn_matmul
from .positions import DensePositions, FrameSlots, LengthGroups, RealPositions, masked_scatter_frames
from .recurrence import packed_recurrence, run_recurrence

__all__ = [
    "DensePositions", "FrameSlots", "LengthGroups", "Linear", "RealPositions", "frame_slots", "grouped",
    "is_static", "length_groups", "masked_scatter_frames", "onednn_linear", "onednn_matmul",
    "packed_recurrence", "real_positions", "run_recurrence", "static_shapes",
]
