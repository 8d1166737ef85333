"""The family base shared by every model here, as transformers' ``modeling_utils.py`` holds ``PreTrainedModel``.

:class:`MSVAEPreTrainedModel` initialises weights, checks inputs, encodes real frames only, and carries the
tokenizer with a checkpoint. :class:`FollowerMixin` (``policy()``, ``follow()``) and :class:`SpeakerMixin`
(``generate()`` through transformers' GenerationMixin, ``describe()``), in ``mixins.py``, are the follower and
speaker sides that the baselines (``modeling_baselines.py``) and MS-VAE (``modeling_msvae.py``) share; each model
says only what its memory is (``instruction_memory``, ``trajectory_memory``). What a model's frames become once
through the trunk is ``frames.py``'s :class:`EncodedFrames`; why a checkpoint does not load, ``loading.py``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

from ..backends.registry import BACKENDS, Backend, get_backend
from .configuration_msvae import ModulesConfig, MSVAEConfig
from .frames import EncodedFrames
from .loading import HUB_KWARGS, broken_weights, grown_keys, hub_file, size_mismatch, vocab_digest
from .modules import BottleneckAttention, FiLMGenerator


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
        config_file = hub_file(path, "config.json", hub)
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
            broken = broken_weights(path)
            raise OSError(f"{broken} is incomplete or corrupt ({err}): save or download it again") from err
        except RuntimeError as err:
            if "ignore_mismatched_sizes" not in str(err):
                raise
            raise ValueError(size_mismatch(cls if cls is not MSVAEPreTrainedModel else None, path, hub)) from err
        grown = grown_keys(model.config, saved_config)
        info["missing_keys"] = set(info.get("missing_keys", ())) - grown
        problems = {k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v}
        if problems:
            raise ValueError(f"checkpoint {path} does not match {cls.__name__}'s config: {problems}")
        if hub_file(path, "tokenizer.json", hub) is not None:
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
