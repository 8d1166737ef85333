"""A batch's frames through the observation encoder's instruction-independent trunk, once, for every memory
that modulates them (:class:`EncodedFrames`), and where in a frame the objects the agent reaches show
(:data:`FRONT_CELLS`)."""

from __future__ import annotations

import torch

#: The cells of minigrid's egocentric view (the agent at (3, 6), facing up) that a goal reached shows in: the cell
#: ahead, then those the agent faces after its next action (left: (2, 6), right: (4, 6), forward: (3, 4)). A GoTo
#: goal is reached when the agent faces its object, and a trajectory's frames precede its actions, so the last goal
#: shows only in the last frame's cell that the last action turns to (``modules.FrontCells`` reads them).
FRONT_CELLS = ((3, 5), (2, 6), (4, 6), (3, 4))


class EncodedFrames:
    """A batch's frames through the observation encoder's trunk (:meth:`ObservationEncoder.trunk`), once; each
    call of :meth:`features` finishes them with its own FiLM parameters (or none) into [B, T, H].

    ``layout`` is the backend's ``frame_layout``: it lays out the frames of ``mask`` [B, T] row-major, so the
    frames of the first rows are a prefix of the batch's (:meth:`first_rows` relies on it)."""

    def __init__(self, encoder, layout, mask: torch.Tensor, select, place, maps: torch.Tensor,
                 directions: torch.Tensor) -> None:
        self.encoder, self.layout, self.mask, self.steps = encoder, layout, mask, mask.shape[1]
        self.select, self.place, self.maps, self.directions = select, place, maps, directions

    @classmethod
    def encode(cls, encoder, layout, mask: torch.Tensor, observations: torch.Tensor,
               directions: torch.Tensor) -> EncodedFrames:
        """The frames [B, T, ...] of ``mask`` laid out by ``layout`` and through the encoder's trunk."""
        select, place = layout(mask)
        return cls(encoder, layout, mask, select, place, encoder.trunk(select(observations)), select(directions))

    def first_rows(self, rows: int) -> EncodedFrames:
        """The frames of the batch's first ``rows`` rows, without running the trunk again: their maps are the
        first ones of the layout, as many as the layout of ``mask[:rows]`` selects (in the slot layout every
        slot: the spare ones are never read back); all rows: these frames themselves."""
        if rows == self.mask.shape[0]:
            return self
        mask = self.mask[:rows]
        select, place = self.layout(mask)
        count = select(mask).shape[0]
        return EncodedFrames(self.encoder, self.layout, mask, select, place, self.maps[:count],
                             self.directions[:count])

    def features(self, film: torch.Tensor | None = None) -> torch.Tensor:
        """[B, T, H] frame features, zeros on padding; ``film`` [B, 2CL]: each row's FiLM parameters."""
        if film is not None:
            film = self.select(film.unsqueeze(1).expand(-1, self.steps, -1))
        return self.place(self.encoder.head(self.maps, self.directions, film))

    def padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The trunk's maps [B, T, C, h, w] and the directions [B, T] placed back in the batch (zeros on padding),
        for a decoder that FiLMs them step by step."""
        maps = self.place(self.maps.flatten(1)).unflatten(-1, self.maps.shape[1:])
        return maps, self.place(self.directions.unsqueeze(-1))[..., 0]
