"""Self-supervised pre-training of a speaker's encoders on trajectories alone (no instructions).

The probe of README "Results" found that no speaker here keeps the identity of the object it acts on: what
the agent faces when it picks up, drops or opens something, or at its last step. That is what an
instruction's object words name. This pretext task asks the trajectory encoder's state h_tau[t]
(the speaker's memory, App. D) for the type and colour of the cell in front of the agent at those steps, read
from the observation itself, so it can use unpaired trajectories. It is not part of MS-VAE (the paper has no
such term); the speaker then trains on the pairs as usual, from the pre-trained weights (``init_from``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import ModelOutput

from ..data.collator import DemoCollator, for_loader, read_rows, without_instructions
from ..models.frames import FRONT_CELLS
from ..training.update import update

FRONT_CELL = FRONT_CELLS[0]  # minigrid's egocentric view: the agent at (3, 6) facing up, the cell ahead at (3, 5)
EVENT_ACTIONS = (3, 4, 5)  # pickup, drop, toggle (minigrid.core.actions.Actions)


def front_cell_targets(
    observations: torch.Tensor, actions: torch.Tensor, trajectory_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(object type [B, T], colour [B, T], which steps count [B, T]): the cell in front of the agent, at
    every pickup / drop / toggle step and at each trajectory's last step."""
    mask = trajectory_mask.bool()
    cells = observations[:, :, FRONT_CELL[0], FRONT_CELL[1]].long()  # [B, T, 3]
    last = torch.zeros_like(mask)
    last[torch.arange(mask.shape[0]), mask.long().sum(1).clamp(min=1) - 1] = True
    events = (torch.isin(actions.long(), torch.tensor(EVENT_ACTIONS, device=actions.device)) | last) & mask
    return cells[..., 0], cells[..., 1], events


class FrontCellHead(nn.Module):
    """Linear read-outs of the front cell's type and colour from a trajectory encoder state."""

    def __init__(self, hidden_size: int, num_values: int) -> None:
        super().__init__()
        self.type_head = nn.Linear(hidden_size, num_values)
        self.colour_head = nn.Linear(hidden_size, num_values)

    def loss(self, states: torch.Tensor, types, colours, events) -> torch.Tensor:
        """Mean cross-entropy of type and colour over the counted steps."""
        picked = states[events]
        return F.cross_entropy(self.type_head(picked), types[events]) + F.cross_entropy(
            self.colour_head(picked), colours[events]
        )


def trajectory_states(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """h_tau [B, T, H] of a baseline speaker (its memory) or of MS-VAE's trajectory encoder."""
    mask = batch["trajectory_mask"]
    frames = getattr(model, "trajectory_frame_features", model.frame_features)
    features = frames(batch["observations"], batch["directions"], mask)
    return model.trajectory_encoder(features, batch["actions"].long(), mask.bool(), batch["observations"])


def front_cell_loss(model: Any, head: FrontCellHead, batch: dict[str, torch.Tensor]) -> ModelOutput:
    """The front-cell task's loss on ``batch``, as an output whose ``loss`` :func:`msvae_hf.training.update.update`
    minimises."""
    targets = front_cell_targets(batch["observations"], batch["actions"], batch["trajectory_mask"])
    return ModelOutput(loss=head.loss(trajectory_states(model, batch), *targets))


def pretrain_speaker_encoder(
    model: Any,
    trajectories: Any,
    updates: int,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
) -> list[float]:
    """Train ``model``'s observation and trajectory encoders on the front-cell task over ``trajectories`` (a
    dataset with observations, directions, actions); returns the loss per update. The head is discarded."""
    if len(trajectories) < batch_size:
        raise ValueError(f"{len(trajectories)} trajectories is fewer than one batch of {batch_size}")
    torch.manual_seed(seed)
    head = FrontCellHead(model.config.hidden_size, model.config.obs_num_values)
    params = [*model.obs_encoder.parameters(), *model.trajectory_encoder.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    collate = DemoCollator(model.tokenizer)
    data = for_loader(without_instructions(trajectories))
    rng = np.random.default_rng(seed)
    steps = range(updates)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="pre-training")
    model.train()
    losses = []
    for _ in steps:
        batch = collate(read_rows(data, np.sort(rng.choice(len(data), batch_size, replace=False)).tolist()))
        optimizer.zero_grad()
        output = update(functools.partial(front_cell_loss, model, head, batch), optimizer)
        losses.append(output.loss.item())
    return losses
