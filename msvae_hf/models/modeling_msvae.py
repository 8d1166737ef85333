"""MS-VAE (Sec. 3): the baseline follower and speaker joined through a shared latent z = [z_1..z_K].

::

                 input_ids --InstructionEncoder--> h_y --BottleneckAttention--> q(z|y)   = N(mu_y,   s_y^2)   [B,K,D]
   (o, a) --ObservationEncoder/TrajectoryEncoder--> h_tau --BottleneckAttention--> q(z|a,o) = N(mu_tau, s_tau^2)
   (share_observation_encoder=False: q(z|a,o) reads its own ObservationEncoder, the speaker's, App. D)
   q(z|y,a,o) = 1/2 q(z|y) + 1/2 q(z|a,o)                                      (Eq. 1, mixture of experts)
   z --ActionDecoder (attention over z)--> p(a|z,o);   z --InstructionDecoder (cross-attention)--> p(y|z)
   loss = -(E_p[J-bar] + gamma E_u[V]) + alpha D'                              (Eq. 9, 3, App. B, Eq. 10)
   (unpaired_trains_action_decoder=False: V's log p(a|z,o) reaches q(z|a,o) only, the decoder held fixed)
   (posterior_reads_actions=False: q(z|a,o) reads the frames without the action tokens)
   (posterior_alignment=w > 0: + w KL[q(z|a,o) || q(z|y)] on the pairs, q(z|y) held fixed; not in the paper)

As a follower z = mean of q(z|y); as a speaker z = mean of q(z|a,o) (Sec. 3.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationMixin
from transformers.utils import ModelOutput

from .configuration_msvae import FOLLOWER_FIELDS, SPEAKER_ONLY_FIELDS, MSVAEConfig
from .losses import (
    domain_distance,
    kl_to_prior,
    msvae_loss,
    paired_elbo,
    posterior_alignment,
    reparameterize,
    sequence_log_likelihood,
    unpaired_elbo,
)
from .mixins import FollowerMixin, SpeakerMixin
from .modeling_baselines import FollowerModel, SpeakerModel
from .modeling_utils import MSVAEPreTrainedModel
from .modules import (
    ActionDecoder,
    BottleneckAttention,
    InstructionDecoder,
    InstructionEncoder,
    LatentPrior,
    ObservationEncoder,
    TrajectoryEncoder,
)


@dataclass
class MSVAEOutput(ModelOutput):
    r"""
    Output of :meth:`MSVAEModel.forward`: the loss of Eq. 10 and every term of it, or one decoding step.

    With a paired batch of `B` pairs (and optionally an unpaired batch of `U` trajectories) every field but
    `logits` and `cache` is returned; `v`, `domain_distance`, `a_1_unpaired` and `b_1_unpaired` only when the
    unpaired batch is given (else `None`), `alignment` only when `config.posterior_alignment` is not 0. A decoding
    step (`memory=...`, as `generate()` calls it) returns only `logits` and `cache`. Each expectation over q is
    estimated with one reparameterised sample of z. The per-sample terms have shape `(B,)` (`(U,)` for the unpaired
    ones) with `reduction="none"` and are batch means of shape `()` otherwise; m = 1 is the trajectory
    x_(1) = a|o, m = 2 the instruction x_(2) = y.

    loss (`torch.FloatTensor` of shape `()`):
        The quantity to minimise, -(E_p[J-bar] + gamma E_u[V]) + alpha D' (Eq. 10 with App. B's D'), + w
        E_p[alignment] where `config.posterior_alignment` = w is not 0; always a batch mean whatever `reduction`.
    j_bar (`torch.FloatTensor` of shape `(B,)` or `()`):
        J-bar = 1/2 sum_m [A_m + beta_m B_m + C_m], the lower bound on the paired ELBO (Eq. 9, App. A, with
        App. D's beta).
    v (`torch.FloatTensor` of shape `(U,)` or `()`):
        V = A_1 + beta_1 B_1 on the unpaired trajectories, the trajectory ELBO (Eq. 3, with App. A's sign:
        B_1 = -KL).
    domain_distance (`torch.FloatTensor` of shape `()`):
        D' = sum_k SW(rho_k, upsilon_k), the sliced Wasserstein distance between the posterior means of
        q(z|a,o) on the paired and the unpaired trajectories, token by token (App. B; D in Eq. 10).
    a_1 (`torch.FloatTensor` of shape `(B,)` or `()`):
        A_1 = E_q(z|a,o)[log p(a|z,o)]: the paired trajectories' actions reconstructed (Eq. 9, App. A; the
        action decoder of Eq. 5).
    a_2 (`torch.FloatTensor` of shape `(B,)` or `()`):
        A_2 = E_q(z|y)[log p(y|z)]: the instructions reconstructed (Eq. 9, App. A; the decoder of Eq. 6).
    b_1 (`torch.FloatTensor` of shape `(B,)` or `()`):
        B_1 = -KL[q(z|a,o) || p(z)] on the paired trajectories (Eq. 9, App. A).
    b_2 (`torch.FloatTensor` of shape `(B,)` or `()`):
        B_2 = -KL[q(z|y) || p(z)] (Eq. 9, App. A).
    c_1 (`torch.FloatTensor` of shape `(B,)` or `()`):
        C_1 = E_q(z|a,o)[log p(y|z)]: the speaker's cross-modal term, the instruction from the trajectory
        (Eq. 9, App. A).
    c_2 (`torch.FloatTensor` of shape `(B,)` or `()`):
        C_2 = E_q(z|y)[log p(a|z,o)]: the follower's cross-modal term, the actions from the instruction
        (Eq. 9, App. A).
    a_1_unpaired (`torch.FloatTensor` of shape `(U,)` or `()`):
        A_1 on the unpaired trajectories, the reconstruction term of V (Eq. 3).
    b_1_unpaired (`torch.FloatTensor` of shape `(U,)` or `()`):
        B_1 = -KL[q(z|a,o) || p(z)] on the unpaired trajectories, the KL term of V (Eq. 3).
    alignment (`torch.FloatTensor` of shape `(B,)` or `()`):
        KL[q(z|a,o) || q(z|y)] on the pairs, q(z|y) held fixed: the term `config.posterior_alignment` weights
        (not in the paper). Returned only when that weight is not 0.
    trajectory_mean (`torch.FloatTensor` of shape `(B + U, K, D)`):
        Means of q(z|a,o) (bottleneck attention, Sec. 3.2), the paired rows first, then the unpaired ones.
    trajectory_logvar (`torch.FloatTensor` of shape `(B + U, K, D)`):
        Log-variances of q(z|a,o), in the same order.
    instruction_mean (`torch.FloatTensor` of shape `(B, K, D)`):
        Means of q(z|y) (bottleneck attention, Sec. 3.2).
    instruction_logvar (`torch.FloatTensor` of shape `(B, K, D)`):
        Log-variances of q(z|y).
    logits (`torch.FloatTensor` of shape `(batch_size, num_new_tokens, vocab_size)`):
        Instruction-decoder scores (before softmax) for the new tokens of `input_ids` given z (Eq. 6 and 8).
        Returned only by a decoding step.
    cache (`transformers.Cache`):
        The instruction decoder's self-attention keys and values so far, updated in place. Returned only by a
        decoding step, as the `cache` that was passed in.
    """

    loss: torch.Tensor | None = None
    j_bar: torch.Tensor | None = None
    v: torch.Tensor | None = None
    domain_distance: torch.Tensor | None = None
    a_1: torch.Tensor | None = None
    a_2: torch.Tensor | None = None
    b_1: torch.Tensor | None = None
    b_2: torch.Tensor | None = None
    c_1: torch.Tensor | None = None
    c_2: torch.Tensor | None = None
    a_1_unpaired: torch.Tensor | None = None
    b_1_unpaired: torch.Tensor | None = None
    alignment: torch.Tensor | None = None
    trajectory_mean: torch.Tensor | None = None
    trajectory_logvar: torch.Tensor | None = None
    instruction_mean: torch.Tensor | None = None
    instruction_logvar: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: object | None = None


class MSVAEModel(FollowerMixin, SpeakerMixin, MSVAEPreTrainedModel, GenerationMixin):
    """Multimodal sequential VAE (Akuzawa, Iwasawa, Matsuo, IJCAI 2022): follower and speaker in one model."""

    config_class = MSVAEConfig

    def __init__(self, config: MSVAEConfig) -> None:
        super().__init__(config)
        self.obs_encoder = ObservationEncoder(config, film=config.conditioning.films_frames)
        self.instruction_encoder = InstructionEncoder(config)
        self.instruction_posterior = BottleneckAttention(config, config.hidden_size)
        self.trajectory_encoder = TrajectoryEncoder(config)
        self.trajectory_obs_encoder = None if config.share_observation_encoder else ObservationEncoder(config)
        self.trajectory_posterior = BottleneckAttention(config, config.hidden_size)
        self.prior = LatentPrior(config)
        self.action_decoder = ActionDecoder(config, config.latent_dim)
        self.instruction_decoder = InstructionDecoder(config, config.latent_dim)
        self.post_init()

    # ------------------------------------------------------------- posteriors (Sec. 3.2)
    def instruction_posterior_params(self, input_ids, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """q(z|y): bottleneck attention over the instruction encoder states -> (mean, logvar) [B, K, D]."""
        self.check_input_ids(input_ids)
        mask = attention_mask.bool()
        states, _ = self.instruction_encoder(input_ids, mask)
        return self.instruction_posterior(states, mask)

    def trajectory_frame_features(self, observations, directions, trajectory_mask, shared=None) -> torch.Tensor:
        """The frame features q(z|a,o) reads [B, T, H]: ``shared`` (the action decoder's, or computed here)
        with one observation encoder, else those of the trajectory side's own encoder."""
        if self.trajectory_obs_encoder is None and shared is not None:
            return shared
        return self.frame_features(observations, directions, trajectory_mask, encoder=self.trajectory_obs_encoder)

    def trajectory_posterior_params(self, frame_features, actions, trajectory_mask, observations=None):
        """q(z|a,o): bottleneck attention over the trajectory encoder states -> (mean, logvar) [B, K, D]; the
        encoder reads the frames alone where ``config.posterior_reads_actions`` is False, and ``observations``
        where ``config.trajectory_front_cells``."""
        mask = trajectory_mask.bool()
        states = self.trajectory_encoder(frame_features, actions.long(), mask, observations)
        return self.trajectory_posterior(states, mask)

    def instruction_memory(self, input_ids, attention_mask):
        """Follower: z = mean of q(z|y) (Eq. 7; Sec. 3.1, "we can replace z with mean")."""
        mean, _ = self.instruction_posterior_params(input_ids, attention_mask)
        return mean, torch.ones(mean.shape[:2], dtype=torch.bool, device=mean.device)

    def trajectory_memory(self, observations, directions, actions, trajectory_mask):
        """Speaker: z = mean of q(z|a,o) (Eq. 8 with the mean for the sample, as Sec. 3.1 allows)."""
        self.check_trajectory(observations, actions, trajectory_mask)
        features = self.trajectory_frame_features(observations, directions, trajectory_mask)
        mean, _ = self.trajectory_posterior_params(features, actions, trajectory_mask, observations)
        return mean, torch.ones(mean.shape[:2], dtype=torch.bool, device=mean.device)

    # ------------------------------------------------------------- likelihood terms
    def _action_log_likelihood(self, states, z, actions, mask, frozen_decoder: bool = False) -> torch.Tensor:
        """log p(a | z, o) = sum_t log p(a_t | z, o_1:t, a_1:t-1) (Eq. 5), attention over the K tokens of z.

        The head runs on the real steps only. ``frozen_decoder``: the decoder's weights are detached, so the
        gradient reaches z (and the encoder behind it) only (``unpaired_trains_action_decoder=False``)."""
        steps = self.backend.positions(mask)  # every token of z is real: no memory mask
        if frozen_decoder:
            weights = {name: w.detach() for name, w in self.action_decoder.named_parameters()}
            logits = torch.func.functional_call(self.action_decoder, weights, (steps.gather(states), z, None, steps))
        else:
            logits = self.action_decoder.logits(steps.gather(states), z, None, steps)
        return sequence_log_likelihood(logits, actions, steps, self.config.loss_reduction)

    def _instruction_log_likelihood(self, zs: list[torch.Tensor], input_ids, attention_mask) -> list[torch.Tensor]:
        """log p(y | z) = sum_l log p(y_l | z, y_<l) (Sec. 3.1), teacher forced, for each z of ``zs`` (each
        [B, K, D]): one decoder pass, its first self-attention (which does not read z) once for all."""
        memory = torch.cat(zs)  # every token of z is real: no memory mask
        ll = self.instruction_log_likelihood(input_ids, attention_mask, memory, None)[0]
        return list(ll.chunk(len(zs)))

    # ------------------------------------------------------------- forward
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        observations=None,
        directions=None,
        actions=None,
        trajectory_mask=None,
        unpaired_observations=None,
        unpaired_directions=None,
        unpaired_actions=None,
        unpaired_trajectory_mask=None,
        memory=None,
        memory_mask=None,
        cache=None,
        reduction: str = "mean",
        **kwargs,
    ) -> MSVAEOutput:
        """The full objective (Eq. 10) on a paired batch and an optional unpaired batch.

        With ``memory`` (used by ``generate()``) it only runs one step of the instruction decoder.
        """
        if memory is not None:
            logits = self.decode_instruction(input_ids, memory, memory_mask, cache=cache)
            return MSVAEOutput(logits=logits, cache=cache)
        if reduction not in ("mean", "none"):
            raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
        self.check_trajectory(observations, actions, trajectory_mask)
        num_paired = actions.shape[0]
        if unpaired_actions is not None:
            self.check_trajectory(unpaired_observations, unpaired_actions, unpaired_trajectory_mask)
            observations, directions, actions, trajectory_mask = _concat_padded(
                (observations, directions, actions, trajectory_mask),
                (unpaired_observations, unpaired_directions, unpaired_actions, unpaired_trajectory_mask),
            )
        actions = actions.long()
        # One observation-encoder trunk pass (per encoder) over every real frame, paired and unpaired together.
        frames = self.encode_frames(observations, directions, trajectory_mask)
        features = frames.features()
        speaker_features = self.trajectory_frame_features(observations, directions, trajectory_mask, shared=features)
        mean_tau, logvar_tau = self.trajectory_posterior_params(speaker_features, actions, trajectory_mask,
                                                                observations)
        mean_y, logvar_y = self.instruction_posterior_params(input_ids, attention_mask)
        z_tau, z_y = reparameterize(mean_tau, logvar_tau), reparameterize(mean_y, logvar_y)
        p = slice(0, num_paired)
        # h'_t under z_tau (every row) and z_y (the paired rows): one pass per z where the frames read z (FiLM), one
        # pass for both where z enters at the head only (the follower's conditioning decides: ActionDecoder.run_each)
        states, states_y = self.action_decoder.run_each(frames, actions, trajectory_mask, (z_tau, z_y), plain=features)
        if unpaired_actions is not None and not self.config.unpaired_trains_action_decoder:
            u = slice(num_paired, None)
            a_1_all = torch.cat([
                self._action_log_likelihood(states[p], z_tau[p], actions[p], trajectory_mask[p]),
                self._action_log_likelihood(states[u].detach(), z_tau[u], actions[u], trajectory_mask[u],
                                            frozen_decoder=True),
            ])
        else:
            a_1_all = self._action_log_likelihood(states, z_tau, actions, trajectory_mask)
        b_1_all = -kl_to_prior(mean_tau, logvar_tau, self.prior, z_tau, self.config.loss_reduction)
        a_1, b_1 = a_1_all[p], b_1_all[p]
        c_2 = self._action_log_likelihood(states_y[p], z_y, actions[p], trajectory_mask[p])
        a_2, c_1 = self._instruction_log_likelihood([z_y, z_tau[p]], input_ids, attention_mask)
        b_2 = -kl_to_prior(mean_y, logvar_y, self.prior, z_y, self.config.loss_reduction)
        betas = self.config.betas
        j_bar = paired_elbo((a_1, a_2), (b_1, b_2), (c_1, c_2), betas)

        v = a_1_u = b_1_u = d = None
        if unpaired_actions is not None:
            u = slice(num_paired, None)
            a_1_u, b_1_u = a_1_all[u], b_1_all[u]
            v = unpaired_elbo(a_1_u, b_1_u, betas[0])
            d = domain_distance(mean_tau[p], mean_tau[u], self.config.swd_projections, self.config.swd_p)
        weight = self.config.posterior_alignment
        alignment = (posterior_alignment(mean_tau[p], logvar_tau[p], mean_y, logvar_y, self.config.loss_reduction)
                     if weight else None)
        loss = msvae_loss(j_bar, v, d, self.config.gamma, self.config.alpha, alignment, weight)

        reduce = (lambda t: t) if reduction == "none" else (lambda t: None if t is None else t.mean())
        return MSVAEOutput(
            loss=loss, j_bar=reduce(j_bar), v=reduce(v), domain_distance=d,
            a_1=reduce(a_1), a_2=reduce(a_2), b_1=reduce(b_1), b_2=reduce(b_2), c_1=reduce(c_1), c_2=reduce(c_2),
            a_1_unpaired=reduce(a_1_u), b_1_unpaired=reduce(b_1_u), alignment=reduce(alignment),
            trajectory_mean=mean_tau, trajectory_logvar=logvar_tau,
            instruction_mean=mean_y, instruction_logvar=logvar_y,
        )

    # ------------------------------------------------------------- initialisation from baselines (App. D)
    @classmethod
    def from_baselines(
        cls, follower: FollowerModel | None = None, speaker: SpeakerModel | None = None, **config_overrides
    ) -> MSVAEModel:
        """Build MS-VAE and copy trained baseline weights into it (App. D).

        From the follower: observation encoder, instruction encoder f_enc, action decoder (f_dec, f_att,
        f_act) and, for a bottleneck follower, its bottleneck attention as q(z|y). From the speaker: the
        trajectory encoder and the instruction decoder, and its observation encoder as q(z|a,o)'s own with
        ``share_observation_encoder=False``. Shapes must agree, or a ValueError names the module.
        """
        source = follower if follower is not None else speaker
        if source is None:
            raise ValueError("from_baselines needs a trained follower, a speaker, or both")
        # a speaker's config names no follower of its own (its follower fields are whatever its config held): MS-VAE
        # from a speaker alone takes the default follower, or the one config_overrides names
        dropped = ("model_type", "architectures", *SPEAKER_ONLY_FIELDS, *(FOLLOWER_FIELDS if follower is None else ()))
        config_dict = {k: v for k, v in source.config.to_dict().items() if k not in dropped}
        if speaker is not None:  # the trajectory encoder's inputs are the speaker's
            config_dict["trajectory_front_cells"] = speaker.config.trajectory_front_cells
        config_dict.update(config_overrides)
        model = cls(MSVAEConfig(**config_dict))
        sources: list[tuple[str, MSVAEPreTrainedModel]] = []
        if follower is not None:
            sources += [(n, follower) for n in ("obs_encoder", "instruction_encoder", "action_decoder")]
            if follower.config.follower_attention == "bottleneck":
                sources.append(("instruction_posterior", follower))
        if speaker is not None:
            sources += [("trajectory_encoder", speaker), ("instruction_decoder", speaker)]
            if follower is None:
                sources.append(("obs_encoder", speaker))
            if model.trajectory_obs_encoder is not None:
                sources.append(("trajectory_obs_encoder", speaker))
        for name, baseline in sources:
            source_name = "obs_encoder" if name == "trajectory_obs_encoder" else name
            try:
                target, weights = getattr(model, name), getattr(baseline, source_name).state_dict()
                if name == "obs_encoder" and baseline is speaker and target.film_norm is not None:
                    # a speaker's encoder has no FiLM norms: the follower side's start as the identity
                    weights = {**{k: v for k, v in target.state_dict().items() if "film_norm." in k}, **weights}
                target.load_state_dict(weights)
            except RuntimeError as err:
                raise ValueError(f"cannot initialise MS-VAE's {name} from the baseline: {err}") from err
        model.tokenizer = source.tokenizer
        return model


def _concat_padded(first, second):
    """Concatenate two padded trajectory batches along the batch dimension, padding time to the longer."""
    length = max(first[2].shape[1], second[2].shape[1])

    def pad(t: torch.Tensor) -> torch.Tensor:
        extra = length - t.shape[1]
        if extra == 0:
            return t
        return torch.cat([t, t.new_zeros(t.shape[0], extra, *t.shape[2:])], dim=1)

    return tuple(torch.cat([pad(a), pad(b)], dim=0) for a, b in zip(first, second))
