"""The family base shared by every model here, as transformers' ``modeling_utils.py`` holds ``PreTrainedModel``.

:class:`MSVAEPreTrainedModel` initialises weights, checks inputs, encodes real frames only, and carries the
tokenizer with a checkpoint. :class:`FollowerMixin` (``policy()``, ``follow()``) and :class:`SpeakerMixin`
(``generate()`` through transformers' GenerationMixin, ``describe()``) are the follower and speaker sides that
the baselines (``modeling_baselines.py``) and MS-VAE (``modeling_msvae.py``) share; each model says only what
its memory is (``instruction_memory``, ``trajectory_memory``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.utils import cached_file

from ..backends.registry import BACKENDS, Backend, get_backend
from ..evaluation.policy import FollowerPolicy
from .configuration_msvae import CONDITIONINGS, ModulesConfig, MSVAEConfig
from .losses import sequence_log_likelihood
from .modules import BottleneckAttention, FiLMGenerator, ObservationEncoder


class MSVAEPreTrainedModel(PreTrainedModel):
    """Base class: weight init, input checks, frame encoding and the tokenizer that travels with the model."""

    config_class = MSVAEConfig
    base_model_prefix = "msvae"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []
    backend: Backend = BACKENDS["default"]

    def __init__(self, config: ModulesConfig) -> None:
        super().__init__(config)
        self.tokenizer = None
        if self.can_generate() and self.generation_config.max_new_tokens is None:
            # a speaker's default length, saved in generation_config.json and overridden as in transformers
            self.generation_config.max_new_tokens = config.max_instruction_length - 1

    # ----------------------------------------------------------------- backend
    def post_init(self) -> None:
        super().post_init()
        self.set_backend(self.config.backend)

    def set_backend(self, backend: str | Backend, frames: int | None = None) -> None:
        """Run the model on ``backend`` (a name in :data:`~msvae_hf.backends.registry.BACKENDS` or a
        :class:`~msvae_hf.backends.registry.Backend`; ``frames``: the static backend's frame slots): set on the model
        and on every layer that declares a ``backend``. The values at real positions are the same under every
        backend."""
        backend = get_backend(backend, frames)
        for module in self.modules():
            if hasattr(type(module), "backend"):
                module.backend = backend

    @contextlib.contextmanager
    def using_backend(self, backend: str | Backend, frames: int | None = None) -> Iterator[None]:
        """Within the block the model runs on ``backend`` (as :meth:`set_backend` takes it); the backend it had is
        set again when the block ends."""
        previous = self.backend
        self.set_backend(backend, frames)
        try:
            yield
        finally:
            self.set_backend(previous)

    # ----------------------------------------------------------------- weights
    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """PyTorch-style fan-in init for linear/conv layers and RNNs; the bottleneck queries ~ N(0, 1/H); the
        observation encoder's channel offsets (a non-persistent buffer, rebuilt on load)."""
        if getattr(module, "starts_at_zero", False):  # film_both's keys: it starts as film
            init.zeros_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, (nn.Linear, nn.Conv2d)):
            init.kaiming_uniform_(module.weight, a=5**0.5)
            if module.bias is not None:
                bound = 1 / max(1, module.weight[0].numel()) ** 0.5
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, (nn.GRU, nn.LSTM)):
            bound = 1 / module.hidden_size**0.5
            for param in module.parameters():
                init.uniform_(param, -bound, bound)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, std=1.0 if module.padding_idx is None else 0.1)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.MultiheadAttention):
            init.xavier_uniform_(module.in_proj_weight)
            init.zeros_(module.in_proj_bias)
            init.zeros_(module.out_proj.bias)
        elif isinstance(module, (BottleneckAttention, FiLMGenerator)):
            if hasattr(module, "queries"):  # film_recurrent's queries come from the LSTM's state alone
                init.normal_(module.queries, std=module.queries.shape[-1] ** -0.5)
            if isinstance(module, FiLMGenerator):  # FiLM starts as the identity, gamma = beta = 0
                init.zeros_(module.out.weight)
                init.zeros_(module.out.bias)
        elif isinstance(module, nn.GroupNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, ObservationEncoder):
            # non-persistent buffer: from_pretrained builds the model on meta and never loads it
            offsets = torch.arange(module.channel_offsets.shape[0]) * module.num_values
            init.copy_(module.channel_offsets, offsets.to(module.channel_offsets))

    # ----------------------------------------------------------------- inputs
    def check_input_ids(self, input_ids: torch.Tensor) -> None:
        """Token ids must index the vocabulary."""
        if (self.backend.checks_values and input_ids.numel()
                and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size)):
            raise ValueError(
                f"token ids out of range: got [{int(input_ids.min())}, {int(input_ids.max())}], "
                f"vocab_size={self.config.vocab_size}"
            )

    def check_trajectory(self, observations: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> None:
        """Padded trajectory tensors must agree: observations [B, T, *obs_shape], actions and mask [B, T]; every
        trajectory has a real step and its actions index the action embedding (the observation encoder checks
        the frames' values and directions)."""
        expected = [*actions.shape, *self.config.obs_shape]
        if list(observations.shape) != expected or list(mask.shape) != list(actions.shape):
            raise ValueError(
                f"observations must have shape [B, T, {', '.join(map(str, self.config.obs_shape))}] matching "
                f"actions/trajectory_mask [B, T]; got observations {list(observations.shape)}, "
                f"actions {list(actions.shape)}, trajectory_mask {list(mask.shape)}"
            )
        if not self.backend.checks_values or not actions.numel():  # static: the caller checks values on the host
            return
        empty = (~mask.bool().any(1)).nonzero()
        if len(empty):
            raise ValueError(f"trajectory {int(empty[0])} has no real step (its trajectory_mask is all False): "
                             "every trajectory needs at least one frame")
        if actions[mask].min() < 0 or actions[mask].max() >= self.config.num_actions:
            raise ValueError(f"actions must be in [0, num_actions={self.config.num_actions})")


    def frame_features(
        self,
        observations: torch.Tensor,
        directions: torch.Tensor,
        trajectory_mask: torch.Tensor,
        encoder: torch.nn.Module | None = None,
        film: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode real frames only, once: [B, T, 7, 7, 3] -> [B, T, H] (zeros on padding), with ``encoder``
        (default: the model's ``obs_encoder``), each row's frames FiLMed by ``film`` [B, 2CL] where given."""
        return self.encode_frames(observations, directions, trajectory_mask, encoder).features(film)

    def encode_frames(
        self,
        observations: torch.Tensor,
        directions: torch.Tensor,
        trajectory_mask: torch.Tensor,
        encoder: torch.nn.Module | None = None,
    ) -> EncodedFrames:
        """The observation encoder's instruction-independent trunk on the real frames (:class:`EncodedFrames`),
        from which each memory's features are finished without running it again."""
        mask = trajectory_mask.bool()
        encoder = self.obs_encoder if encoder is None else encoder
        return EncodedFrames.encode(encoder, self.backend.frame_layout, mask, observations, directions)

    # ----------------------------------------------------------------- tokenizer travels with the model
    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """Save weights (safetensors) and config, and the attached tokenizer if any."""
        if self.tokenizer is not None:
            self.config.vocab_sha256 = vocab_digest(self.tokenizer)
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """Load strictly: a checkpoint of another model type or with missing/unexpected weights is an error.

        From a folder or a Hub id alike, the tokenizer saved beside the weights is attached as ``model.tokenizer``,
        read through the same Hub arguments (``revision``, ``token``, ``cache_dir``, ``local_files_only``, ...;
        ``HF_HUB_OFFLINE=1`` reads the cache). A truncated or corrupt safetensors file is an ``OSError`` naming the
        file (the safetensors error chained).
        """
        path = str(pretrained_model_name_or_path)
        hub = {name: kwargs[name] for name in HUB_KWARGS if name in kwargs}
        config_file = _hub_file(path, "config.json", hub)
        saved_config: dict = {}
        if config_file is not None:
            with open(config_file, encoding="utf-8") as f:
                saved_config = json.load(f)
            saved_type = saved_config.get("model_type")
            if cls.config_class.model_type != saved_type and cls is not MSVAEPreTrainedModel:
                raise ValueError(
                    f"{path} holds a {saved_type!r} checkpoint, not {cls.config_class.model_type!r}: "
                    f"load it with transformers.AutoModel or the matching class"
                )
        want_info = kwargs.pop("output_loading_info", False)
        try:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        except SafetensorError as err:
            broken = _broken_weights(path)
            raise OSError(f"{broken} is incomplete or corrupt ({err}): save or download it again") from err
        except RuntimeError as err:
            if "ignore_mismatched_sizes" not in str(err):
                raise
            raise ValueError(_size_mismatch(cls, path, hub)) from err
        grown = _grown_keys(model.config, saved_config)
        info["missing_keys"] = set(info.get("missing_keys", ())) - grown
        problems = {k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v}
        if problems:
            raise ValueError(f"checkpoint {path} does not match {cls.__name__}'s config: {problems}")
        if _hub_file(path, "tokenizer.json", hub) is not None:
            from .tokenization_msvae import MSVAETokenizer

            model.tokenizer = MSVAETokenizer.from_pretrained(path, **hub)
            saved = model.config.vocab_sha256
            if saved is not None and vocab_digest(model.tokenizer) != saved:
                raise ValueError(f"the tokenizer of {path} maps its words to other ids than the model was saved with "
                                 f"(vocabulary sha256 {vocab_digest(model.tokenizer)[:12]}, the model's "
                                 f"{saved[:12]}): restore its tokenizer.json")
        return (model, info) if want_info else model

    def push_to_hub(
        self,
        repo_id: str,
        *,
        metrics: dict | None = None,
        training_command: str = "",
        dataset: str = "",
        commit_message: str = "Upload msvae-hf model",
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
        api=None,
    ):
        """Upload weights, config, tokenizer and a model card rendered from ``model_cards/`` (msvae_hf.hub.cards).

        Takes transformers' arguments (``token``, ``revision``, ``create_pr``, ``private``, ``commit_message``,
        ``commit_description``, ``max_shard_size``, ``tags``), forwarded as transformers forwards them;
        ``metrics`` (e.g. ``{"success_rate": 0.55, "bleu": 17.0}``) and ``training_command`` go into the card;
        ``api`` defaults to ``huggingface_hub.HfApi()`` (tests pass a fake that records calls).
        """
        import tempfile

        from ..hub.cards import render_model_card
        from ..hub.push import push_folder_to_hub

        kind = {"msvae": "msvae", "msvae_follower": "follower", "msvae_speaker": "speaker"}[self.config.model_type]
        card = render_model_card(
            self.config.to_dict(), metrics or {}, training_command, dataset, kind, repo_id=repo_id, tags=tags or ()
        )
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder, max_shard_size=max_shard_size)
            return push_folder_to_hub(
                folder, repo_id, card=card, api=api, private=private, commit_message=commit_message,
                commit_description=commit_description, token=token, revision=revision, create_pr=create_pr,
            )

    def _resolve_tokenizer(self, tokenizer):
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        if tokenizer is None:
            raise ValueError("no tokenizer: pass tokenizer=... or attach one with `model.tokenizer = tok`")
        return tokenizer


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


def vocab_digest(tokenizer) -> str:
    """The sha256 of a tokenizer's vocabulary (each word and its id, in id order)."""
    import hashlib

    pairs = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


#: The keyword arguments of ``from_pretrained`` that say where and how to fetch files (transformers' AutoModel list).
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")


def _hub_file(path_or_repo_id: str, filename: str, hub: dict) -> str | None:
    """The local copy of ``filename`` in a folder or a Hub repo (fetched with the ``hub`` arguments, or read from
    the cache offline), or None where it is absent or cannot be reached (``from_pretrained`` then says why)."""
    try:
        return cached_file(path_or_repo_id, filename, _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False, **hub)
    except (OSError, ValueError):
        return None


#: The config fields a weight's shape is made of, to name in a mismatch between config.json and the weights.
SIZE_FIELDS = ("vocab_size", "hidden_size", "latent_dim", "num_latent_tokens", "word_embed_dim", "obs_channels",
               "obs_embed_dim", "action_embed_dim", "decoder_ffn_dim", "prior_hidden_size", "num_actions",
               "max_instruction_length", "obs_num_values", "num_directions")


def _size_mismatch(cls, path: str, hub: dict) -> str:
    """Which config field of ``path`` builds other weight shapes than its weights have (found by building the model
    with each candidate field at the weights' size), or the first weight whose shape differs."""
    from safetensors import safe_open as open_weights
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, **hub)
    model_class = cls if cls is not MSVAEPreTrainedModel else _class_of(config)

    def shapes(config) -> dict[str, tuple[int, ...]]:
        with torch.device("meta"):
            return {k: tuple(v.shape) for k, v in model_class(config).state_dict().items()}

    with open_weights(_hub_file(path, "model.safetensors", hub), framework="pt") as f:
        saved = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    expected = shapes(config)
    wrong = [name for name in saved if name in expected and expected[name] != saved[name]]
    if not wrong:
        return f"config.json of {path} does not match its weights' shapes: restore the config.json saved with them"
    fields = [name for name in SIZE_FIELDS if hasattr(config, name)]  # a baseline's config has no prior
    # film_layers multiplies the FiLM's output (2C per map), so no weight's size is its value: its other value is tried
    layers = [("film_layers", 3 - config.film_layers)] if hasattr(config, "film_layers") else []
    tried = set()
    for weight in wrong:  # a weight whose size is a field's (not, say, twice it) names the field
        sizes = [(field, b) for field in fields
                 for b in {b for a, b in zip(expected[weight], saved[weight]) if a == getattr(config, field) != b}]
        for field, size in sizes + layers:
            if (field, size) in tried:
                continue
            tried.add((field, size))
            try:
                fits = all(shape == saved.get(name, shape) for name, shape in
                           shapes(type(config)(**{**config.to_dict(), field: size})).items())
            except (ValueError, TypeError):
                continue
            if fits:
                return (f"config.json of {path} does not match its weights: its {field} is "
                        f"{getattr(config, field)}, the weights were saved with {field} = {size} ({weight} is "
                        f"{list(saved[weight])}): restore the config.json saved with them")
    first = wrong[0]
    return (f"config.json of {path} does not match its weights: {first} is {list(saved[first])} in the weights but "
            f"{list(expected[first])} by the config: restore the config.json saved with them")


def _class_of(config) -> type:
    from transformers import AutoModel

    return AutoModel._model_mapping[type(config)]


def _grown_keys(config: ModulesConfig, saved: dict) -> set[str]:
    """The weights a model may lack in its checkpoint because its config grows the saved one (``saved``, the
    checkpoint's config.json): a FiLM read by learned queries (``film``) loaded as one keyed by h'_{t-1} besides
    (``film_both``) gains the keys W, which start at zero (so it computes what the saved follower did)."""
    now = CONDITIONINGS.get(getattr(config, "follower_conditioning", None))
    before = CONDITIONINGS.get(saved.get("follower_conditioning"))
    if not (now and before and now.learned_queries and before.learned_queries and now.keyed and not before.keyed):
        return set()
    return {"action_decoder.film.key.weight", "action_decoder.film.key.bias"}


def _broken_weights(path: str) -> str:
    """The first safetensors file of the folder ``path`` that does not open, else a description of the weights."""
    if not os.path.isdir(path):
        return f"the cached model.safetensors of {path}"
    files = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
    for name in files:
        try:
            with safe_open(os.path.join(path, name), framework="pt"):
                pass
        except SafetensorError:
            return os.path.join(path, name)
    return os.path.join(path, files[0] if len(files) == 1 else "*.safetensors")


class FollowerMixin:
    """Follower side shared by the baseline follower and MS-VAE: ``follow()`` rolls out in envs, ``policy()`` steps
    (``reset`` / ``act``, or ``select_action`` on a gymnasium vector env's observations). ``generate`` keeps
    transformers' meaning (trajectory tensors -> token ids) and names these where it is given envs."""

    def instruction_memory(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """The memory the action decoder attends to, from an instruction: (memory [B, M, Dm], mask [B, M])."""
        raise NotImplementedError

    def action_log_likelihood(self, input_ids, attention_mask, observations, directions, actions, trajectory_mask):
        """Teacher-forced log p(a | y, o) = sum_t log p(a_t | y, o_1:t, a_1:t-1) (Eq. 5 with the instruction
        memory): (log-likelihood [B], logits [B, T, A], zeros at padded steps). The decoder's head runs on the real
        steps only (its LSTM too, but for ``film_recurrent``, which steps over the padded batch)."""
        memory, memory_mask = self.instruction_memory(input_ids, attention_mask)
        frames = self.encode_frames(observations, directions, trajectory_mask)
        states = self.action_decoder.run(frames, actions, trajectory_mask, memory, memory_mask)
        steps = self.backend.positions(trajectory_mask)
        logits = self.action_decoder.logits(steps.gather(states), memory, memory_mask, steps)
        ll = sequence_log_likelihood(logits, actions, steps, self.config.loss_reduction)
        return ll, steps.scatter(logits)

    def roll_out(self, envs, seeds, **kwargs):
        """``generate()``'s following form: the episodes of ``follow(envs, seeds, **kwargs)``, its arguments checked
        against the speaking form's so that a mixed call says which call is which."""
        speaking = sorted(set(kwargs) - set(FOLLOW_ARGUMENTS))
        if speaking:
            raise ValueError(f"generate(envs, seeds, ...) rolls out, as follow() does, and takes {FOLLOW_ARGUMENTS}; "
                             f"got {speaking}: decoding arguments belong to generate(observations, directions, "
                             "actions, trajectory_mask, ...), which speaks")
        if seeds is None:
            raise ValueError("generate(envs, seeds) rolls out one episode per seed: pass seeds=[...]")
        return self.follow(envs, seeds, **kwargs)

    def policy(self, tokenizer=None, greedy: bool = True, seed: int | None = None) -> FollowerPolicy:
        """A :class:`~msvae_hf.evaluation.rollout.RolloutPolicy` for online control (reset / act with recurrent
        state)."""
        return FollowerPolicy(self, self._resolve_tokenizer(tokenizer), greedy=greedy, seed=seed)

    def follow(
        self,
        envs,
        seeds: Sequence[int],
        tokenizer=None,
        max_steps: int | None = None,
        instructions: Sequence[str] | None = None,
        **kwargs,
    ):
        """Roll out in BabyAI envs (a level id, a list of envs or a VectorEnv), the model batched across envs.

        By default the agent follows each env's own mission; ``instructions`` (one per seed) replaces the text
        the model reads (success is still judged by the env against its mission); ``missions`` (rollout's: one
        instruction per seed, or "same_room") replaces the mission itself, which the model reads and the level's
        verifier judges the episode by.
        """
        from ..evaluation.rollout import GivenInstructions, rollout

        seeds = list(seeds)
        policy = self.policy(tokenizer)
        if instructions is not None:
            if len(instructions) != len(seeds):
                raise ValueError(f"{len(instructions)} instructions for {len(seeds)} seeds")
            policy = GivenInstructions(policy, list(instructions))
        return rollout(policy, envs, seeds, max_steps=max_steps, **kwargs)


#: The arguments of a following call of ``generate()`` besides envs and seeds (``FollowerMixin.follow``'s and
#: ``rollout``'s).
FOLLOW_ARGUMENTS = ("tokenizer", "max_steps", "instructions", "missions", "record_frames", "record_observations",
                    "progress", "batch_size")


def _is_rollout_call(observations, envs) -> bool:
    """Whether ``generate()``'s first argument (or ``envs``) names environments rather than trajectory tensors."""
    return envs is not None or isinstance(observations, (str, list, tuple)) or hasattr(observations, "step")


class SpeakerMixin:
    """Speaker side shared by the baseline speaker and MS-VAE: generate() and describe()."""

    def trajectory_memory(self, observations, directions, actions, trajectory_mask):
        """The memory the instruction decoder attends to, from a trajectory: (memory, mask)."""
        raise NotImplementedError

    def decode_instruction(self, input_ids, memory, memory_mask, cache=None) -> torch.Tensor:
        """Teacher-forced / incremental decoding of p(y_l | memory, y_<l): logits [B, n, vocab] for the n tokens
        of ``input_ids`` (``cache``, if given, holds the earlier ones and is updated in place)."""
        self.check_input_ids(input_ids)
        return self.instruction_decoder(input_ids, memory, memory_mask, cache=cache)

    def instruction_log_likelihood(self, input_ids, attention_mask, memory, memory_mask):
        """Teacher-forced log p(y | memory) summed over tokens after <bos>: (log-likelihood [B], logits
        [B, L - 1, vocab], zeros at padded positions). The decoder's position-wise layers run on the real
        tokens only. ``memory`` may hold k memories per instruction ([k * B, M, D], as the decoder takes them):
        [k * B] log-likelihoods and logits, memory by memory."""
        self.check_input_ids(input_ids)
        tokens = self.backend.positions(attention_mask[:, 1:])
        logits = self.instruction_decoder(input_ids[:, :-1], memory, memory_mask, layout=tokens)
        memories = memory.shape[0] // input_ids.shape[0]
        if memories > 1:
            tokens = tokens.repeat(memories)
        targets = input_ids[:, 1:].repeat(memories, 1)
        ll = sequence_log_likelihood(logits, targets, tokens, self.config.loss_reduction)
        return ll, tokens.scatter(logits)

    def prepare_inputs_for_generation(self, input_ids, cache=None, memory=None, memory_mask=None, **kwargs):
        """Feed only the tokens the cache has not seen, with the trajectory memory (expanded per beam)."""
        past = cache.get_seq_length() if cache is not None else 0
        return {"input_ids": input_ids[:, past:], "cache": cache, "memory": memory, "memory_mask": memory_mask}

    def generate(
        self,
        observations: torch.Tensor | None = None,
        directions: torch.Tensor | None = None,
        actions: torch.Tensor | None = None,
        trajectory_mask: torch.Tensor | None = None,
        envs=None,
        seeds: Sequence[int] | None = None,
        **kwargs,
    ):
        """Speak (trajectory tensors -> token ids) or, given ``envs`` and ``seeds``, follow (episodes).

        Speaking: z = posterior mean of q(z|a,o) for MS-VAE, h_tau for the baseline; any GenerationMixin decoding:
        greedy, beam search (``num_beams``), sampling (``do_sample``), ``max_new_tokens``,
        ``num_return_sequences``. Following (models that follow): ``generate(envs, seeds, instructions=None, ...)``
        with a level name, a list of envs or a VectorEnv returns ``follow(envs, seeds, ...)``'s EpisodeResults.
        """
        if _is_rollout_call(observations, envs):
            if not hasattr(self, "follow"):
                raise ValueError(f"{type(self).__name__} is a speaker: it cannot roll out in envs; "
                                 "generate(observations, directions, actions, trajectory_mask) speaks")
            if envs is None:  # generate(envs, seeds, ...) by position
                envs, seeds = observations, seeds if seeds is not None else directions
            return self.roll_out(envs, seeds, **kwargs)
        if seeds is not None:
            raise ValueError("seeds go with envs: generate(envs, seeds) rolls out; generate(observations, directions, "
                             "actions, trajectory_mask) speaks")
        if observations is None or actions is None:
            raise ValueError("generate() needs trajectory tensors (observations, directions, actions) to speak, or "
                             "envs (a level name or a list of envs) and seeds to roll out as model.follow(envs, seeds)")
        for name in ("num_beams", "num_return_sequences", "max_new_tokens"):
            value = kwargs.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"generate(): {name} must be a positive integer, got {value!r}")
        if trajectory_mask is None:
            trajectory_mask = torch.ones(actions.shape, dtype=torch.bool, device=actions.device)
        memory, memory_mask = self.trajectory_memory(observations, directions, actions, trajectory_mask)
        start = torch.full((actions.shape[0], 1), self.config.bos_token_id, dtype=torch.long, device=actions.device)
        if self.generation_config.max_new_tokens is None and "max_length" not in kwargs:  # saved without one
            kwargs.setdefault("max_new_tokens", self.config.max_instruction_length - 1)
        kwargs.setdefault("use_cache", True)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            kwargs.setdefault(name, getattr(self.config, name))
        out = GenerationMixin.generate(self, start, memory=memory, memory_mask=memory_mask, **kwargs)
        # transformers' beam search fills finished beams with `pad_token_id or eos_token_id`, i.e. with eos
        # when pad is id 0: restore "eos then pad only" for every decoding mode.
        if isinstance(out, torch.Tensor):
            return pad_after_eos(out, kwargs["eos_token_id"], kwargs["pad_token_id"])
        out.sequences = pad_after_eos(out.sequences, kwargs["eos_token_id"], kwargs["pad_token_id"])
        return out

    @torch.no_grad()
    def describe(self, observations, directions, actions, trajectory_mask=None, tokenizer=None, **kwargs) -> list[str]:
        """Instructions for trajectories, as text. Accepts padded tensors or lists of per-episode arrays."""
        tokenizer = self._resolve_tokenizer(tokenizer)
        if isinstance(observations, (list, tuple)):
            observations, directions, actions, trajectory_mask = pad_episodes(observations, directions, actions)
        device = self.device
        ids = self.generate(
            observations.to(device), directions.to(device), actions.to(device),
            None if trajectory_mask is None else trajectory_mask.to(device), **kwargs,
        )
        return tokenizer.batch_decode(ids, skip_special_tokens=True)


def pad_episodes(observations, directions, actions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-episode arrays ([T_i, 7, 7, 3], [T_i], [T_i]) -> the padded batch a model reads: observations [B, T, 7, 7,
    3] (uint8), directions and actions [B, T] (long), trajectory_mask [B, T], zeros on padding."""
    lengths = [len(a) for a in actions]
    if len(observations) != len(lengths) or len(directions) != len(lengths):
        raise ValueError(f"got {len(observations)} observation, {len(directions)} direction and {len(lengths)} "
                         "action sequences: one of each per episode")
    steps = max(lengths, default=0)
    frames = [torch.as_tensor(np.asarray(o), dtype=torch.uint8) for o in observations]
    padded = torch.zeros(len(lengths), steps, *(frames[0].shape[1:] if frames else ()), dtype=torch.uint8)
    dirs = torch.zeros(len(lengths), steps, dtype=torch.long)
    acts = torch.zeros(len(lengths), steps, dtype=torch.long)
    mask = torch.arange(steps)[None, :] < torch.tensor(lengths, dtype=torch.long)[:, None]
    for i, (o, d, a) in enumerate(zip(frames, directions, actions)):
        if len(o) != lengths[i] or len(d) != lengths[i]:
            raise ValueError(f"episode {i}: {len(o)} frames, {len(d)} directions and {lengths[i]} actions differ")
        padded[i, : lengths[i]] = o
        dirs[i, : lengths[i]] = torch.as_tensor(np.asarray(d), dtype=torch.long)
        acts[i, : lengths[i]] = torch.as_tensor(np.asarray(a), dtype=torch.long)
    return padded, dirs, acts, mask


def pad_after_eos(ids: torch.Tensor, eos_token_id: int, pad_token_id: int) -> torch.Tensor:
    """Replace every token after a sequence's first eos by pad: [N, S] -> [N, S]."""
    after = (ids == eos_token_id).long().cumsum(dim=1) - (ids == eos_token_id).long() > 0
    return ids.masked_fill(after, pad_token_id)
