"""The two baselines: the follower (Sec. 2.2; Table 1's variants) and the speaker (Sec. 2.3; App. D).

Both inherit everything MS-VAE also uses from ``modeling_utils.py`` (the family base, the follower policy, the
speaker's ``generate()``); here each says only which memory its decoder attends to and what its loss is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.utils import ModelOutput

from .configuration_msvae import FollowerConfig, SpeakerConfig
from .losses import goal_step_loss
from .mixins import FollowerMixin, SpeakerMixin
from .modeling_utils import MSVAEPreTrainedModel
from .modules import (
    ActionDecoder,
    BottleneckAttention,
    InstructionDecoder,
    InstructionEncoder,
    ObservationEncoder,
    TrajectoryEncoder,
)


@dataclass
class FollowerOutput(ModelOutput):
    r"""
    Output of :meth:`FollowerModel.forward`, the imitation loss of the baseline follower (Sec. 2.2).

    loss (`torch.FloatTensor` of shape `()`, or `(batch_size,)` with `reduction="none"`):
        Negative log-likelihood of the demonstrated actions, -log p(a | y, o) = -sum_t log p(a_t | y, o_1:t,
        a_1:t-1) (Eq. 5 with the instruction memory h_y in place of z), averaged over the batch unless
        `reduction="none"`. Always returned.
    log_likelihood (`torch.FloatTensor` of shape `(batch_size,)`):
        log p(a | y, o) per trajectory, summed over its real steps (padding excluded). Always returned.
    logits (`torch.FloatTensor` of shape `(batch_size, num_steps, num_actions)`):
        Teacher-forced action scores (before softmax) at every step; zeros at padded steps.
        Always returned.
    """

    loss: torch.Tensor | None = None
    log_likelihood: torch.Tensor | None = None
    logits: torch.Tensor | None = None


@dataclass
class SpeakerOutput(ModelOutput):
    r"""
    Output of :meth:`SpeakerModel.forward`: the speaker's loss (Sec. 2.3) on trajectories, or one decoding step.

    loss (`torch.FloatTensor` of shape `()`, or `(batch_size,)` with `reduction="none"`):
        Negative log-likelihood of the instruction, -log p(y | a, o) = -sum_l log p(y_l | h_tau, y_<l) over the
        tokens after `<bos>` (the speaker's counterpart of Eq. 6, with the trajectory states h_tau as memory),
        averaged over the batch unless `reduction="none"`. Returned when `attention_mask` is given.
    log_likelihood (`torch.FloatTensor` of shape `(batch_size,)`):
        log p(y | a, o) per instruction, summed over its real tokens after `<bos>`. Returned with `loss`.
    logits (`torch.FloatTensor` of shape `(batch_size, sequence_length, vocab_size)`):
        Token scores (before softmax). With `attention_mask` (teacher forcing) `sequence_length` is the
        instruction length minus one (the scores of tokens 2..L); without it (a `generate()` step) it is the
        number of new tokens in `input_ids`. Zeros at padded positions. Always returned.
    cache (`transformers.Cache`):
        The instruction decoder's self-attention keys and values of the tokens decoded so far, updated in place.
        Returned only by a decoding step (no `attention_mask`), as the `cache` that was passed in.
    goal_step_loss (`torch.FloatTensor` of shape `()`, or `(batch_size,)` with `reduction="none"`):
        With `config.goal_steps_weight > 0` and `goal_steps` given: the binary cross-entropy of the goal-step
        read-out (losses.goal_step_loss), which `loss` holds times the weight. Not in the paper.
    """

    loss: torch.Tensor | None = None
    log_likelihood: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: object | None = None
    goal_step_loss: torch.Tensor | None = None


class FollowerModel(FollowerMixin, MSVAEPreTrainedModel):
    """Baseline follower (Sec. 2.2; Table 1's variants by ``config.follower_attention``).

    ``"none"``: one instruction vector (seq2seq); ``"attention"``: Luong attention over h_y;
    ``"bottleneck"``: attention over K deterministic tokens from :class:`BottleneckAttention`.
    """

    config_class = FollowerConfig

    def __init__(self, config: FollowerConfig) -> None:
        super().__init__(config)
        self.obs_encoder = ObservationEncoder(config, film=config.conditioning.films_frames)
        self.instruction_encoder = InstructionEncoder(config)
        if config.follower_attention == "bottleneck":
            self.instruction_posterior = BottleneckAttention(config, config.hidden_size)
            memory_size = config.latent_dim
        else:
            memory_size = config.hidden_size
        self.action_decoder = ActionDecoder(config, memory_size)
        self.post_init()

    def instruction_memory(self, input_ids, attention_mask):
        self.check_input_ids(input_ids)
        mask = attention_mask.bool()
        states, summary = self.instruction_encoder(input_ids, mask)
        kind = self.config.follower_attention
        if kind == "none":
            return summary.unsqueeze(1), torch.ones_like(mask[:, :1])
        if kind == "bottleneck":
            mean, _ = self.instruction_posterior(states, mask)
            return mean, torch.ones(mean.shape[:2], dtype=torch.bool, device=mean.device)
        return states, mask

    def generate(self, envs=None, seeds=None, **kwargs):
        """Follow: ``generate(envs, seeds, instructions=None, ...)`` returns ``follow(envs, seeds, ...)``'s episodes
        (a level name, a list of envs or a VectorEnv). A follower does not speak: trajectory tensors are refused."""
        if isinstance(envs, torch.Tensor) or "observations" in kwargs:
            raise ValueError("FollowerModel does not speak: generate(envs, seeds) rolls out (as model.follow); "
                             "generate(observations, ...) is a speaker's or MS-VAE's")
        if envs is None:
            raise ValueError("generate(envs, seeds) rolls out: pass envs (a level name or a list of envs) and seeds")
        return self.roll_out(envs, seeds, **kwargs)

    def forward(
        self, input_ids, attention_mask, observations, directions, actions, trajectory_mask, reduction: str = "mean",
        **kwargs,
    ) -> FollowerOutput:
        """Imitation loss -log p(a | y, o) = -sum_t log p(a_t | y, o_1:t, a_1:t-1) (Eq. 5 with memory h_y)."""
        self.check_trajectory(observations, actions, trajectory_mask)
        ll, logits = self.action_log_likelihood(
            input_ids, attention_mask, observations, directions, actions, trajectory_mask
        )
        return FollowerOutput(loss=-ll if reduction == "none" else -ll.mean(), log_likelihood=ll, logits=logits)


class SpeakerModel(SpeakerMixin, MSVAEPreTrainedModel, GenerationMixin):
    """Baseline speaker (App. D): GRU trajectory encoder, two-layer transformer instruction decoder."""

    config_class = SpeakerConfig

    def __init__(self, config: SpeakerConfig) -> None:
        super().__init__(config)
        self.obs_encoder = ObservationEncoder(config)
        self.trajectory_encoder = TrajectoryEncoder(config)
        self.instruction_decoder = InstructionDecoder(config, config.hidden_size)
        # which steps complete a goal, read from h_tau[t] (goal_steps_weight; not in the paper)
        self.goal_step_head = nn.Linear(config.hidden_size, 1) if config.goal_steps_weight else None
        self.post_init()

    def trajectory_memory(self, observations, directions, actions, trajectory_mask):
        self.check_trajectory(observations, actions, trajectory_mask)
        features = self.frame_features(observations, directions, trajectory_mask)
        mask = trajectory_mask.bool()
        return self.trajectory_encoder(features, actions.long(), mask, observations), mask

    def goal_step_logits(self, observations, directions, actions, trajectory_mask) -> torch.Tensor:
        """[B, T] logits of the goal-step read-out: whether step t's action completes a goal of the trajectory's
        mission (a speaker trained with ``goal_steps_weight`` > 0; padded steps are -inf)."""
        if self.goal_step_head is None:
            raise ValueError("this speaker has no goal-step read-out: train one with goal_steps_weight > 0")
        memory, mask = self.trajectory_memory(observations, directions, actions, trajectory_mask)
        return self.goal_step_head(memory).squeeze(-1).float().masked_fill(~mask, float("-inf"))

    def forward(
        self,
        input_ids,
        attention_mask=None,
        observations=None,
        directions=None,
        actions=None,
        trajectory_mask=None,
        memory=None,
        memory_mask=None,
        cache=None,
        goal_steps=None,
        reduction: str = "mean",
        **kwargs,
    ) -> SpeakerOutput:
        """With trajectories: teacher-forced loss -log p(y | a, o), plus ``goal_steps_weight`` times the goal-step
        loss where ``goal_steps`` [B, T] (bool) is given. With ``memory``: one decoding step."""
        if memory is None:
            memory, memory_mask = self.trajectory_memory(observations, directions, actions, trajectory_mask)
        elif goal_steps is not None:
            raise ValueError("goal_steps are read from the trajectory's states: pass the trajectory, not memory")
        if attention_mask is None:  # decoding: logits for the new tokens only
            return SpeakerOutput(logits=self.decode_instruction(input_ids, memory, memory_mask, cache=cache),
                                 cache=cache)
        ll, logits = self.instruction_log_likelihood(input_ids, attention_mask, memory, memory_mask)
        loss, steps = -ll, None
        if self.goal_step_head is not None and goal_steps is not None:
            steps = goal_step_loss(self.goal_step_head(memory).squeeze(-1), goal_steps, memory_mask,
                                   self.config.loss_reduction)
            loss = loss + self.config.goal_steps_weight * steps
        elif self.goal_step_head is not None and self.training:
            raise ValueError("this speaker trains with goal_steps_weight > 0: its batches need goal_steps "
                             "(data.demos.with_goal_steps adds them to a demo split)")
        if reduction != "none":
            loss, steps = loss.mean(), None if steps is None else steps.mean()
        return SpeakerOutput(loss=loss, log_likelihood=ll, logits=logits, goal_step_loss=steps)
