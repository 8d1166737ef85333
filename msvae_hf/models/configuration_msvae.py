"""Configurations for MS-VAE and its two baselines (follower, speaker).

:class:`ModulesConfig` holds what all three share: the inputs and the modules' sizes (Sec. 2.2, 3.2; App. D),
so that MS-VAE can start from trained baselines module by module. :class:`MSVAEConfig` adds the prior and the
objective's weights, which only MS-VAE has. Defaults are the paper's BabyAI settings (App. D): K=4 latent tokens
of D=128, an autoregressive GRU prior of 128, beta=0.1, gamma=100, alpha=1/20 and 50 sliced-Wasserstein
projections.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

ATTENTION_KINDS = ("none", "attention", "bottleneck")


@dataclasses.dataclass(frozen=True)
class Conditioning:
    """Where a follower's memory (h_y, or z) enters its action decoder (``msvae_hf/models/modules.py``, ActionDecoder):
    ``films_frames``: it also modulates the frames' convolution maps (FiLM), else only the head's attention reads
    it; ``keyed``: the FiLM reads it at each step by attention keyed by h'_{t-1}; ``learned_queries``: by learned
    constant queries (both: their sum, the key starting at zero)."""

    films_frames: bool
    keyed: bool = False
    learned_queries: bool = False


#: Each ``follower_conditioning`` by name: the one place a name is read (``ModulesConfig.conditioning``).
CONDITIONINGS = {
    "head": Conditioning(films_frames=False),
    "film": Conditioning(films_frames=True, learned_queries=True),
    "film_recurrent": Conditioning(films_frames=True, keyed=True),
    "film_both": Conditioning(films_frames=True, keyed=True, learned_queries=True),
}
CONDITIONING_KINDS = tuple(CONDITIONINGS)
#: The follower of the study's records of Tables 1-3 and of the quickstart's recorded numbers:
#: the instruction at the action head only, the LSTM reading a_{t-1}.
HEAD_FOLLOWER = {"follower_conditioning": "head", "previous_action_input": True}
#: The follower's fields a train config names (train_config.json), with the values they had before each was a choice,
#: which a saved config that lacks one was made with: the head follower, a FiLM on one map.
FOLLOWER_FIELDS = {**HEAD_FOLLOWER, "film_layers": 1}
#: The follower's named variants, each the model fields it sets, as the ablation and the benchmark name them
#: (experiments/follower_ablation.py, benchmarks/follower_variants.py).
FOLLOWER_VARIANTS = {
    name: {"follower_conditioning": conditioning, "previous_action_input": previous, **extra}
    for name, conditioning, previous, extra in (
        ("head_prev", "head", True, {}), ("head", "head", False, {}), ("film_prev", "film", True, {"film_layers": 1}),
        ("film", "film", False, {"film_layers": 1}), ("film_recurrent", "film_recurrent", False, {"film_layers": 1}),
        ("film_both", "film_both", False, {"film_layers": 1}), ("film2", "film", False, {"film_layers": 2}))
}
PRIOR_KINDS = ("autoregressive", "normal")
#: How a model runs (``msvae_hf/backends/registry.py``'s registry, ``BACKENDS``): the same values at real positions
#: under each.
BACKEND_NAMES = ("default", "eager", "static")
#: How each term of the objective is reduced (``msvae_hf/models/losses.py``; docs/design.md, "Loss scale").
LOSS_REDUCTIONS = ("sum", "mean")


@strict(accept_kwargs=True)
class ModulesConfig(PreTrainedConfig):
    """The inputs and module sizes that MS-VAE and both baselines share, grouped as in the paper: inputs, shared
    modules (Sec. 2.2, App. D), bottleneck attention and latent (Sec. 3.2), and how losses are reduced."""

    # the instruction decoder's layers are what transformers' generation cache counts
    attribute_map = {"num_hidden_layers": "decoder_layers", "num_attention_heads": "decoder_heads"}

    # Inputs.
    vocab_size: int = 64
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    num_actions: int = 7
    obs_shape: list[int] | tuple[int, ...] = (7, 7, 3)
    obs_num_values: int = 16
    num_directions: int = 4
    max_instruction_length: int = 64

    # Shared modules (Sec. 2.2; App. D).
    obs_embed_dim: int = 32
    obs_channels: int = 64
    hidden_size: int = 128
    word_embed_dim: int = 128
    action_embed_dim: int = 32
    decoder_layers: int = 2
    decoder_heads: int = 4
    decoder_ffn_dim: int = 256
    dropout: float = 0.0
    initializer_range: float = 0.02
    # How the model runs (msvae_hf/backends/registry.py): "default", "eager" or "static"; the same values at real
    # positions.
    backend: str = "default"

    # Bottleneck attention and latent (Sec. 3.2). `follower_attention` picks the Table 1 variant.
    num_latent_tokens: int = 4
    latent_dim: int = 128
    follower_attention: str = "bottleneck"
    # Where the memory conditions the follower (docs/design.md, "The follower"): "head", through the action head's
    # attention only; "film", also by FiLM on each frame's convolution map before the memory LSTM, its parameters
    # read once per episode; "film_recurrent", FiLM read at each step by attention keyed by the memory LSTM's
    # previous state (BabyAI 1.1's model); "film_both", FiLM read at each step by film's learned queries plus
    # film_recurrent's keys (the instruction read from the first step, the reading free to move from goal to goal).
    # The default, "film" (on both maps: film_layers) without a_{t-1}, is the follower that reads its instruction
    # most of those measured (docs/results/gotoseqlocal.md, "The follower's conditioning"); the study's records of
    # "head" with a_{t-1} (HEAD_FOLLOWER) name it in their settings.
    follower_conditioning: str = "film"
    # How many of the observation encoder's two convolution maps a FiLM follower_conditioning modulates: 1, the
    # second's (then pooled, so the instruction selects channels that a linear layer reads); 2, the first's too, so
    # that the second convolution combines, cell by cell, the features the instruction selected (BabyAI 1.1 puts a
    # convolution after each of its two FiLM layers). The default, 2, reads its instruction far sooner and more
    # (docs/results/gotoseqlocal.md, "FiLM on both maps"); a saved config that lacks the field modulated one map.
    film_layers: int = 2
    # Whether the action decoder's LSTM reads the previous action a_{t-1} (BabyAI 1.1's model does not).
    previous_action_input: bool = False
    # Not in the paper. True: the trajectory encoder (the speaker's, q(z|a,o)'s) adds to each frame's features the
    # embeddings of the cell ahead of the agent and of the cells it faces after its next action (modules.FrontCells),
    # where the objects of the goals it reaches show; the convolutions pool the cell ahead with its neighbours.
    trajectory_front_cells: bool = False
    # How each term is reduced (the paper does not say; docs/design.md, "Loss scale"): "sum" over the sequence's
    # real positions and over the latent's K tokens x D dimensions, or "mean" over them (cross-entropy's default).
    loss_reduction: str = "sum"
    # The sha256 of the vocabulary (word -> id) the model was saved with, written by save_pretrained where a
    # tokenizer travels with the model; from_pretrained refuses a tokenizer whose words map to other ids.
    vocab_sha256: str | None = None

    def __post_init__(self, **kwargs):
        self.obs_shape = list(self.obs_shape)
        for name in self.ignored_keys & set(kwargs):
            kwargs.pop(name)
        super().__post_init__(**kwargs)
        self.check_values()

    #: keys a saved config may hold that this class drops (a baseline's config saved with MS-VAE's fields)
    ignored_keys: ClassVar[frozenset[str]] = frozenset()
    #: the fields that must be positive integers (a subclass adds its own)
    positive_fields: ClassVar[tuple[str, ...]] = (
        "vocab_size", "num_actions", "obs_num_values", "num_directions", "max_instruction_length",
        "obs_embed_dim", "obs_channels", "hidden_size", "word_embed_dim", "action_embed_dim",
        "decoder_layers", "decoder_heads", "decoder_ffn_dim", "num_latent_tokens", "latent_dim",
    )

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A saved config (config.json): one that names its follower's conditioning but not ``film_layers`` was saved
        when a FiLM modulated one map, and loads so."""
        if "follower_conditioning" in config_dict and "film_layers" not in config_dict:
            config_dict = {**config_dict, "film_layers": FOLLOWER_FIELDS["film_layers"]}
        return super().from_dict(config_dict, **kwargs)

    def to_dict(self) -> dict:
        """The config as saved: without ``backend``, which says how this process runs the model, not what the model
        is (as transformers keeps ``attn_implementation`` out of config.json); ``from_pretrained(..., backend=)``
        sets it on loading."""
        out = super().to_dict()
        out.pop("backend", None)
        return out

    def _fail(self, name: str, requirement: str) -> ValueError:
        return ValueError(f"{type(self).__name__}.{name} must be {requirement}, got {getattr(self, name)!r}")

    def _check_weight(self, name: str, optional: bool = False) -> None:
        """Reject a weight that is not a finite number >= 0 (or, ``optional``, None), naming the field."""
        value = getattr(self, name)
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._fail(name, "a finite number" + (" or None" if optional else ""))
        if value < 0:
            raise self._fail(name, ">= 0")

    @property
    def conditioning(self) -> Conditioning:
        """What ``follower_conditioning`` names (:data:`CONDITIONINGS`)."""
        return CONDITIONINGS[self.follower_conditioning]

    def check_values(self) -> None:
        """Reject bad values and combinations, naming the field."""
        for name in self.positive_fields:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise self._fail(name, "a positive integer")
        if not 0.0 <= self.dropout < 1.0:
            raise self._fail("dropout", "in [0, 1)")
        if self.backend not in BACKEND_NAMES:
            raise self._fail("backend", f"one of {BACKEND_NAMES}")
        if self.follower_attention not in ATTENTION_KINDS:
            raise self._fail("follower_attention", f"one of {ATTENTION_KINDS}")
        if self.follower_conditioning not in CONDITIONING_KINDS:
            raise self._fail("follower_conditioning", f"one of {CONDITIONING_KINDS}")
        if type(self.film_layers) is not int or self.film_layers not in (1, 2):
            raise self._fail("film_layers", "1 or 2")
        for name in ("previous_action_input", "trajectory_front_cells"):
            if not isinstance(getattr(self, name), bool):
                raise self._fail(name, "true or false")
        if self.loss_reduction not in LOSS_REDUCTIONS:
            raise self._fail("loss_reduction", f"one of {LOSS_REDUCTIONS}")
        if len(self.obs_shape) != 3 or self.obs_shape[-1] != 3:
            raise self._fail("obs_shape", "(H, W, 3)")
        for size in ("latent_dim", "hidden_size"):
            if getattr(self, size) % self.decoder_heads != 0:
                raise ValueError(f"{type(self).__name__}.{size} ({getattr(self, size)}) must be divisible by "
                                 f"decoder_heads ({self.decoder_heads})")
        special = [self.pad_token_id, self.bos_token_id, self.eos_token_id]
        for name, tok in zip(("pad_token_id", "bos_token_id", "eos_token_id"), special):
            if tok is None or not 0 <= tok < self.vocab_size:
                raise self._fail(name, f"in [0, vocab_size={self.vocab_size})")


@strict(accept_kwargs=True)
class MSVAEConfig(ModulesConfig):
    """Configuration of :class:`~msvae_hf.MSVAEModel`: the shared modules (:class:`ModulesConfig`), the observation
    encoder's sharing, what q(z|a,o) reads, the prior (App. D) and the objective's weights (Eq. 10, App. D)."""

    model_type = "msvae"
    positive_fields = (*ModulesConfig.positive_fields, "prior_hidden_size", "swd_projections", "swd_p")
    # MS-VAE only. True: one observation encoder serves q(z|a,o) and p(a|z,o) (one conv pass per frame).
    # False: q(z|a,o) has its own, as the speaker baseline it comes from (App. D: "the existing encoder ...
    # of the speaker"), so V and the action terms do not reshape the features the speaker reads.
    share_observation_encoder: bool = True
    # True (Sec. 3.2): q(z|a,o) reads the frames and the action tokens. False: the frames alone (the actions' input
    # held at zero, its embedding untrained): z_tau then cannot copy the action tokens, though consecutive frames
    # still show most actions (a turn changes the direction, a step the view) and the mask the length; a code of
    # the actions is one the action decoder reads back under z_tau and never meets under z_y
    # (experiments/probe_latent.py measures what z_tau holds).
    posterior_reads_actions: bool = True

    # Prior (App. D): "autoregressive" (GRU, as Hafner et al. 2019) or "normal" (N(0, I)).
    prior: str = "autoregressive"
    prior_hidden_size: int = 128

    # Objective (Eq. 10; App. D).
    beta: float = 0.1
    trajectory_beta: float | None = None
    instruction_beta: float | None = None
    gamma: float = 100.0
    alpha: float = 0.05
    # Not in the paper (0: Eq. 10 as printed). > 0 adds this weight times KL[q(z|a,o) || q(z|y)] on the paired rows,
    # q(z|y) held fixed for it (cf. JMVAE-kl, Suzuki et al. 2016, which pulls each one-modality posterior to the
    # joint one): z_tau is pulled to the code the follower reads, so that V trains the action decoder on codes of
    # goals, not a private code of actions. Its gradient reaches q(z|a,o)'s modules, the shared observation
    # encoder among them (share_observation_encoder), and nothing on the instruction's side.
    posterior_alignment: float = 0.0
    # True (Eq. 3): V trains every module it touches. False: V's action likelihood reaches only q(z|a,o) (and
    # the prior through its KL): the action decoder, trained on paired data, is held fixed for it, so the
    # trajectory encoder must produce codes the follower can act on instead of a private code of its own.
    unpaired_trains_action_decoder: bool = True
    swd_projections: int = 50
    swd_p: int = 2

    @property
    def betas(self) -> tuple[float, float]:
        """The KL weight per modality (trajectory, instruction): App. D uses one beta for both and notes that
        a beta per modality "may contribute to improved performance"; ``trajectory_beta`` /
        ``instruction_beta`` set them apart (None: ``beta``)."""
        return (
            self.beta if self.trajectory_beta is None else self.trajectory_beta,
            self.beta if self.instruction_beta is None else self.instruction_beta,
        )

    @property
    def uses_unpaired(self) -> bool:
        """Whether Eq. 10 has a term on unpaired trajectories: V (gamma) or D' (alpha); training then draws an
        unpaired batch each update."""
        return self.gamma != 0 or self.alpha != 0

    def check_values(self) -> None:
        """Reject bad values and combinations, naming the field."""
        super().check_values()
        for name in ("beta", "gamma", "alpha", "trajectory_beta", "instruction_beta", "posterior_alignment"):
            self._check_weight(name, optional=name in ("trajectory_beta", "instruction_beta"))
        for name in ("share_observation_encoder", "posterior_reads_actions", "unpaired_trains_action_decoder"):
            if not isinstance(getattr(self, name), bool):
                raise self._fail(name, "true or false")
        if self.prior not in PRIOR_KINDS:
            raise self._fail("prior", f"one of {PRIOR_KINDS}")
        if not self.unpaired_trains_action_decoder and self.conditioning.films_frames:
            raise ValueError("MSVAEConfig.unpaired_trains_action_decoder=False holds the action decoder fixed behind "
                             "z, which every FiLM follower_conditioning also feeds into the frames: "
                             "use 'head'")


@strict(accept_kwargs=True)
class FollowerConfig(ModulesConfig):
    """Baseline follower (Sec. 2.2): instruction -> actions. `follower_attention` picks Table 1's variant."""

    model_type = "msvae_follower"
    follower_attention: str = "attention"


@strict(accept_kwargs=True)
class SpeakerConfig(ModulesConfig):
    """Baseline speaker (Sec. 2.3; App. D): trajectory -> instruction with a 2-layer transformer decoder."""

    model_type = "msvae_speaker"
    # Not in the paper. > 0: beside -log p(y | a, o) the speaker minimises this weight times the binary
    # cross-entropy of a linear read-out of each frame's state h_tau[t] against whether step t's action completes
    # a goal of the pair's mission (the verifier's judgement, replayed from the episode's seed:
    # data.demos.with_goal_steps), summed (or averaged: loss_reduction) over the trajectory's steps. The
    # trajectory encoder is taught on the pairs where the goals are reached, which the instruction's object and
    # colour words name; labelling reads the trajectory alone.
    goal_steps_weight: float = 0.0

    def check_values(self) -> None:
        """Reject bad values and combinations, naming the field."""
        super().check_values()
        self._check_weight("goal_steps_weight")


#: MS-VAE's own fields (prior, objective): a baseline's config drops them where a saved one holds them.
MSVAE_ONLY_FIELDS = frozenset(f.name for f in dataclasses.fields(MSVAEConfig)) - frozenset(
    f.name for f in dataclasses.fields(ModulesConfig))
FollowerConfig.ignored_keys = SpeakerConfig.ignored_keys = MSVAE_ONLY_FIELDS
#: The speaker's own training fields: MS-VAE built from a speaker (``MSVAEModel.from_baselines``) drops them.
SPEAKER_ONLY_FIELDS = frozenset(f.name for f in dataclasses.fields(SpeakerConfig)) - frozenset(
    f.name for f in dataclasses.fields(ModulesConfig))

#: The config class of each ``TrainConfig.model_type``.
MODEL_TYPE_CONFIGS = {"follower": FollowerConfig, "speaker": SpeakerConfig, "msvae": MSVAEConfig}

__all__ = ["ModulesConfig", "MSVAEConfig", "FollowerConfig", "SpeakerConfig", "ATTENTION_KINDS", "PRIOR_KINDS",
           "CONDITIONING_KINDS", "CONDITIONINGS", "Conditioning", "FOLLOWER_FIELDS", "FOLLOWER_VARIANTS",
           "HEAD_FOLLOWER", "LOSS_REDUCTIONS", "MODEL_TYPE_CONFIGS", "SPEAKER_ONLY_FIELDS"]
