"""What ``from_pretrained`` says when a checkpoint does not load: the file it could not open, the config field that
builds other shapes than the weights have, the weights a grown config may lack, and the tokenizer's vocabulary
digest that a checkpoint records."""

from __future__ import annotations

import json
import os

import torch
from safetensors import SafetensorError, safe_open
from transformers.utils import cached_file

from .configuration_msvae import CONDITIONINGS, ModulesConfig


def vocab_digest(tokenizer) -> str:
    """The sha256 of a tokenizer's vocabulary (each word and its id, in id order)."""
    import hashlib

    pairs = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


#: The keyword arguments of ``from_pretrained`` that say where and how to fetch files (transformers' AutoModel list).
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")


def hub_file(path_or_repo_id: str, filename: str, hub: dict) -> str | None:
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


def size_mismatch(model_class: type | None, path: str, hub: dict) -> str:
    """Which config field of ``path`` builds other weight shapes than its weights have (found by building
    ``model_class``, None: the class ``path``'s config names, with each candidate field at the weights' size), or the
    first weight whose shape differs."""
    from safetensors import safe_open as open_weights
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, **hub)
    model_class = model_class or _class_of(config)

    def shapes(config) -> dict[str, tuple[int, ...]]:
        with torch.device("meta"):
            return {k: tuple(v.shape) for k, v in model_class(config).state_dict().items()}

    with open_weights(hub_file(path, "model.safetensors", hub), framework="pt") as f:
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


def grown_keys(config: ModulesConfig, saved: dict) -> set[str]:
    """The weights a model may lack in its checkpoint because its config grows the saved one (``saved``, the
    checkpoint's config.json): a FiLM read by learned queries (``film``) loaded as one keyed by h'_{t-1} besides
    (``film_both``) gains the keys W, which start at zero (so it computes what the saved follower did)."""
    now = CONDITIONINGS.get(getattr(config, "follower_conditioning", None))
    before = CONDITIONINGS.get(saved.get("follower_conditioning"))
    if not (now and before and now.learned_queries and before.learned_queries and now.keyed and not before.keyed):
        return set()
    return {"action_decoder.film.key.weight", "action_decoder.film.key.bias"}


def broken_weights(path: str) -> str:
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
