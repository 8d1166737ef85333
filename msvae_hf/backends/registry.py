"""How a model runs, chosen in one place: the registry of backends (``config.backend``, ``model.set_backend``).

A :class:`Backend` says which kernels and which layout the model's layers use. It is set on a model, never read
from module-level state: :meth:`~msvae_hf.models.modeling_utils.MSVAEPreTrainedModel.set_backend` hands it to every
layer that declares a ``backend`` attribute (as transformers' ``gradient_checkpointing_enable`` reaches its layers), and
each layer asks its own backend for positions, recurrences and products. The values at real positions are the same
under every backend; only the kernels, their shapes and their speed differ.

Registered backends (:data:`BACKENDS`, the values of ``config.backend``):

* ``"default"``: the positions that hold data only (:class:`~msvae_hf.backends.positions.RealPositions`); on the CPU,
  attention per group of rows of similar length and the large fp32 products on oneDNN (:mod:`msvae_hf.backends.linear`).
* ``"eager"``: the same positions, attention over the whole padded batch and every product on ``F.linear``.
* ``"static"``: the padded layout with no shape or branch that depends on the data and no input value read on the
  device (the GPU's captured update, :mod:`msvae_hf.training.graphed`); with ``frames``, the observation encoder runs
  on that
  many frame slots holding the real frames (:class:`~msvae_hf.backends.positions.FrameSlots`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from . import linear as linear_ops
from .positions import DensePositions, FrameSlots, RealPositions, masked_scatter_frames
from .recurrence import run_recurrence

#: Where a batch's position-wise values sit: its real positions, or every position in the static layout.
Layout = RealPositions | DensePositions


@dataclasses.dataclass(frozen=True)
class Backend:
    """One way to run the model: the layout (``static``, ``frames``) and the CPU kernels (``length_groups``,
    ``onednn``); see the module's docstring for the registered ones."""

    name: str = "default"
    static: bool = False
    frames: int | None = None
    length_groups: bool = True
    onednn: bool = True

    def __post_init__(self) -> None:
        if self.frames is not None and (not self.static or self.frames < 1):
            raise ValueError(f"frames is the static backend's positive count of frame slots, got {self.frames} "
                             f"for backend {self.name!r}")

    def with_frames(self, frames: int | None) -> Backend:
        """This backend with ``frames`` frame slots (static backends only)."""
        return dataclasses.replace(self, frames=frames)

    @property
    def checks_values(self) -> bool:
        """Whether the layers check input values on the device (the static layout leaves that to the host)."""
        return not self.static

    def positions(self, mask: torch.Tensor) -> Layout:
        """The layout of ``mask`` [B, S] that position-wise layers run on: its real positions, or every one in the
        static layout. A model gathers a padded batch to it once; its layers hand it to this backend's attention
        (:meth:`attend_from`, :meth:`attend_over`) and never read it."""
        return DensePositions(mask) if self.static else RealPositions(mask)

    def grouped(self, x: torch.Tensor, layout: Layout | None) -> bool:
        """Whether attention at ``layout``'s positions runs per group of rows of similar length: on the CPU, where
        its work follows the padded lengths; an accelerator runs the whole padded batch in one kernel instead."""
        return isinstance(layout, RealPositions) and x.device.type == "cpu" and self.length_groups and not self.static

    def attend_from(self, attend: Callable[..., torch.Tensor], queries: torch.Tensor, layout: Layout | None,
                    *rows: torch.Tensor | None) -> torch.Tensor:
        """Attention whose queries sit at ``layout``'s positions ([N, ...], or a padded [B, n, ...] where ``layout``
        is None): ``attend(queries [b, n, ...], *rows)`` on a padded batch of b rows, each of ``rows`` [B, ...] (or
        None) cut to the same rows, gives [b, n, ...]; the result is in the queries' form. On the CPU, per group of
        rows of similar length (:class:`~msvae_hf.backends.positions.LengthGroups`); elsewhere once over the padded
        batch (zeros at its padded positions)."""
        if layout is None:
            return attend(queries, *rows)
        if self.grouped(queries, layout):
            groups = layout.groups
            cut = [groups.rows(row) for row in rows]
            return groups.unpad([attend(part, *(row[g] for row in cut)) for g, part in enumerate(groups.pad(queries))])
        return layout.gather(attend(layout.scatter(queries), *rows))

    def attend_over(self, attend: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], keys: torch.Tensor,
                    layout: Layout, mask: torch.Tensor) -> torch.Tensor:
        """Attention of per-row queries over keys (and values) at ``layout``'s positions ([N, ...], ``layout`` of
        ``mask`` [B, S]): ``attend(keys [b, n, ...], key_mask [b, n])`` gives [b, ...] for b padded rows; the result
        is [B, ...]. On the CPU per group of rows of similar length, elsewhere once over the padded batch."""
        if self.grouped(keys, layout):
            groups = layout.groups
            return groups.join_rows([attend(part, part_mask) for part, part_mask in zip(groups.pad(keys),
                                                                                      groups.masks())])
        return attend(layout.scatter(keys), mask.bool())

    def frame_layout(self, mask: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor],
                                                         Callable[[torch.Tensor], torch.Tensor]]:
        """Which frames of a trajectory ``mask`` [B, T] the observation encoder runs on: (select, [B, T, ...] ->
        [N, ...]; place, [N, F] -> [B, T, F] with zeros on padding). The real frames; in the static layout the
        frame slots, or every frame (padding holds zeros, valid values) with padding zeroed after."""
        if not self.static:
            return (lambda x: x[mask]), (lambda features: masked_scatter_frames(features, mask))
        if self.frames is not None:
            slots = FrameSlots(mask, self.frames)
            return slots.gather, slots.scatter

        def place(features: torch.Tensor) -> torch.Tensor:
            return features.view(*mask.shape, -1) * mask.unsqueeze(-1).to(features.dtype)

        return (lambda x: x.flatten(0, 1)), place

    def recurrence(self, rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``rnn`` over right-padded ``x`` [B, S, I] (``mask`` [B, S]) -> [B, S, hidden x directions], zeros on
        padding (:func:`~msvae_hf.backends.recurrence.run_recurrence`)."""
        return run_recurrence(rnn, x, mask, static=self.static, onednn=self.onednn)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``F.linear(x, weight, bias)``, on oneDNN where this backend and the product allow it."""
        return linear_ops.linear(x, weight, bias, onednn=self.onednn)


#: The backends a config names (``config.backend``, one of ``configuration_msvae.BACKEND_NAMES``).
BACKENDS: dict[str, Backend] = {
    "default": Backend("default"),
    "eager": Backend("eager", length_groups=False, onednn=False),
    "static": Backend("static", static=True),
}


def get_backend(backend: str | Backend, frames: int | None = None) -> Backend:
    """A registered backend by name (or a :class:`Backend` as given), with ``frames`` frame slots where given."""
    if isinstance(backend, str):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: one of {sorted(BACKENDS)}")
        backend = BACKENDS[backend]
    elif not isinstance(backend, Backend):
        raise TypeError(f"a backend is a name in {sorted(BACKENDS)} or a Backend, got {type(backend).__name__}")
    return backend if frames is None else backend.with_frames(frames)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) whose product its backend computes (:meth:`Backend.linear`)."""

    backend: Backend = BACKENDS["default"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backend.linear(x, self.weight, self.bias)
