"""What a run is: :class:`TrainConfig` (every knob, documented and checked before anything is written), the
config files (YAML or JSON, with a ``base:`` chain; ``{level}`` in a text value stands for the level's folder name,
``runs/{level}/msvae`` -> ``runs/bosslocal/msvae`` with ``level: BossLocal``) and the command line of the training
scripts."""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from ..envs.levels import level_folder, resolve_level
from ..models.configuration_msvae import CONDITIONINGS, FOLLOWER_FIELDS, MODEL_TYPE_CONFIGS, ModulesConfig
from ..utils.run_folder import FOLLOWER_SELECTION, SPEAKER_METRICS

#: The models a run trains (msvae_hf.training.loop.MODEL_TYPES gives their classes).
MODEL_TYPE_NAMES = tuple(MODEL_TYPE_CONFIGS)


def option(default: Any = dataclasses.MISSING, doc: str = "", *, factory: Callable[[], Any] | None = None) -> Any:
    """A :class:`TrainConfig` field and its documentation (kept in the field's metadata, where the command line's
    help and :func:`field_docs` read it); ``factory`` makes a mutable default."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass
class TrainConfig:
    """Everything a run needs. Set in a YAML/JSON file and/or on the command line."""

    model_type: str = option("msvae", "follower | speaker | msvae")
    demos: str = option("data/bosslocal", (
        "a DatasetDict written by scripts/make_demos.py (splits paired, unpaired, valid, test)"))
    output_dir: str = option("runs/msvae", (
        "the run folder (msvae_hf/utils/run_folder.py: checkpoints, best/, TensorBoard logs, results.json)"))
    level: str | None = option(None, (
        "evaluation level; defaults to the level the demonstrations were made on. A config file's ``{level}`` (in "
        "``output_dir: runs/{level}/msvae``) stands for its folder name (BossLocal: bosslocal), so such a file needs "
        "it"))
    model: dict = option(factory=dict, doc=(
        "overrides of the model config (the fields of model_type's config class: MSVAEConfig, FollowerConfig or "
        "SpeakerConfig), e.g. {gamma: 0, follower_attention: bottleneck}"))
    init_follower: str | None = option(None, "MS-VAE only: a trained baseline follower to initialise from (App. D)")
    init_speaker: str | None = option(None, "MS-VAE only: a trained baseline speaker to initialise from")
    init_from: str | None = option(None, (
        "a saved model of the same model_type (``save_pretrained`` folder, e.g. another run's best/) to start from; "
        "``model`` overrides change its config, e.g. {gamma: 0, alpha: 0} to go on with paired data only"))
    pseudo_labels: str | None = option(None, (
        "follower or speaker: a pseudo-paired dataset from scripts/label_unpaired.py, added to the paired data (the "
        "speaker-follower's follower, Sec. 2.3; for a speaker, self-training on the unpaired trajectories)"))
    num_paired: int | None = option(None, "use only the first M paired examples (None: all)")
    num_unpaired: int | None = option(None, (
        "use only the first N unpaired trajectories: MS-VAE's, or with pseudo_labels the first N labelled (None: all)"))
    batch_size: int = option(128, "paired batch per process per micro-step")
    unpaired_batch_size: int | None = option(None, (
        "unpaired batch per process (MS-VAE); None (unset): same as batch_size"))
    learning_rate: float = option(1e-3, "Adam's step size, constant (App. D: Adam)")
    max_updates: int = option(2000, (
        "optimiser updates of the run (an MS-VAE update draws a paired and an unpaired batch)"))
    gradient_accumulation_steps: int = option(1, (
        "micro-batches per update (the global batch is batch_size x processes x this)"))
    max_grad_norm: float | None = option(None, "clip the gradients' total 2-norm to this (None: no clipping)")
    mixed_precision: str = option("no", "no | bf16 | fp16 (bf16 autocast on CPU)")
    seed: int = option(0, "the seed of the initial weights, the noise and the data order")
    eval_every: int = option(250, "validate every this many updates (and at the last one)")
    eval_episodes: int = option(200, "validation episodes for the success rate (seeds from 1.5e9)")
    eval_batch_size: int = option(256, "episodes rolled out at once in evaluation")
    eval_workers: int = option(0, (
        "processes that step the evaluation envs (rollout.EnvPool); 0: in the training process"))
    validate_reading: bool = option(True, (
        "validation also rolls out each seed told another episode's mission and another mission of its room (SR "
        "told another, SR on the same room: each as long as the rollout on the own missions); false: the own "
        "missions only"))
    follower_metric: str = option("sr", (
        "the validation metric that chooses a follower's best/ (MS-VAE's): sr (its success rate) or reading (its SR "
        "minus its SR told another episode's mission: how much of its success comes from the instruction; needs "
        "validate_reading). SR is logged either way, reading wherever validation reads"))
    also_select: str | None = option(None, (
        "a second follower metric (sr or reading, not follower_metric; followers and MS-VAE) whose best checkpoint "
        "the run also keeps, in best_<metric>/, and tests at the end beside best/ (results.json's also_selected: its "
        "update, validation score and test): both choices from one training. reading needs validate_reading"))
    bleu_examples: int = option(500, (
        "pairs of the valid / test split scored for BLEU-4; the valid ones also for their labels' replays"))
    speaker_metric: str = option("bleu", (
        "the validation metric that chooses a speaker's best/ (MS-VAE's best_speaker/): bleu (BLEU-4 against the "
        "bot's instructions) or demonstrated (the share of the valid trajectories that demonstrate the speaker's "
        "greedy label, replayed in their episode: what its labels are for). Both are logged either way"))
    test_episodes: int = option(1000, "test episodes for the final success rate (seeds from 1e9)")
    log_every: int = option(10, "log the loss terms to TensorBoard every this many updates")
    checkpoint_every: int = option(250, "write a checkpoint every this many updates (and at the last one)")
    keep_checkpoints: int = option(2, "how many of the latest checkpoints to keep")
    resume: bool = option(False, "continue from the latest checkpoint in output_dir")
    continue_from: str | None = option(None, (
        "a finished run's folder: this run starts from its last checkpoint (with its best models, curve, wall time "
        "and command lines) and trains on to ``max_updates`` in ``output_dir``, as one uninterrupted run of "
        "``max_updates`` would; the finished run is only read (:func:`continue_run`)"))
    threads: int | None = option(None, "torch.set_num_threads (None: leave torch's default)")
    retain_freed_memory: bool = option(True, (
        "keep freed host memory for reuse (glibc: :func:`retain_freed_memory`); False: the C library's default"))
    cuda_graphs: bool = option(False, (
        "on one CUDA device: each update (forward, backward, clipping, fused Adam) replayed as a CUDA graph on the "
        "static layout, one graph per batch shape (padded to multiples of 32 steps and 16 tokens, real frames "
        "rounded up to 1024 slots); non-finite updates are skipped on the device and stop the run at the next log "
        "point "
        "(:mod:`msvae_hf.training.graphed`)"))
    loader_workers: int = option(0, (
        "processes that assemble the next updates' batches ahead, pinned (0: each batch in the training loop)"))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every field's default value (what a config that leaves a field out means by it)."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out

    def __post_init__(self) -> None:
        if self.mixed_precision is False:  # YAML 1.1 reads a bare `mixed_precision: no` as false
            self.mixed_precision = "no"
        check_field_types(self)
        if self.model_type not in MODEL_TYPE_NAMES:
            raise ValueError(f"model_type must be one of {sorted(MODEL_TYPE_NAMES)}, got {self.model_type!r}")
        if self.speaker_metric not in SPEAKER_METRICS:
            raise ValueError(f"speaker_metric must be one of {sorted(SPEAKER_METRICS)}, got {self.speaker_metric!r}")
        if self.follower_metric not in FOLLOWER_SELECTION:
            raise ValueError(f"follower_metric must be one of {sorted(FOLLOWER_SELECTION)}, got "
                             f"{self.follower_metric!r}")
        if self.also_select is not None:
            if self.also_select not in FOLLOWER_SELECTION:
                raise ValueError(f"also_select must be one of {sorted(FOLLOWER_SELECTION)} or null, got "
                                 f"{self.also_select!r}")
            if self.model_type == "speaker":
                raise ValueError("also_select chooses a follower checkpoint; a speaker run has none (use "
                                 "speaker_metric)")
            if self.also_select == self.follower_metric:
                raise ValueError(f"also_select {self.also_select!r} is follower_metric too: best/ already keeps it")
        for name in ("follower_metric", "also_select"):
            if getattr(self, name) == "reading" and not self.validate_reading and self.model_type != "speaker":
                raise ValueError(f"{name} reading needs validate_reading: true (validation must roll out each seed "
                                 "told another episode's mission to measure reading)")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"mixed_precision must be no, bf16 or fp16, got {self.mixed_precision!r}")
        for name in POSITIVE_FIELDS:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}" + (
                    " (leave it unset for the default)" if name in OPTIONAL_POSITIVE_FIELDS else ""))
        if self.cuda_graphs and (self.mixed_precision != "no" or self.gradient_accumulation_steps != 1):
            raise ValueError("cuda_graphs captures one fp32 update per batch: set mixed_precision: no and "
                             "gradient_accumulation_steps: 1")
        for name in ("seed", "eval_workers", "loader_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not math.isfinite(self.learning_rate):
            raise ValueError(f"learning_rate must be finite, got {self.learning_rate!r}")
        if self.level is not None:
            resolve_level(self.level)  # ValueError naming the level and the valid names
        config_class = MODEL_TYPE_CONFIGS[self.model_type]
        unknown = sorted(set(self.model) - {f.name for f in dataclasses.fields(config_class)})
        if unknown:
            raise ValueError(f"unknown model config key(s): {unknown} (a {self.model_type} takes the fields of "
                             f"{config_class.__name__})")
        if self.pseudo_labels and self.model_type not in ("follower", "speaker"):
            raise ValueError("pseudo_labels trains a follower or a speaker: set model_type: follower or speaker")
        if (self.init_follower or self.init_speaker) and self.model_type != "msvae":
            raise ValueError("init_follower / init_speaker initialise MS-VAE: set model_type: msvae")
        if self.init_from and (self.init_follower or self.init_speaker):
            raise ValueError("init_from starts from a whole saved model: leave init_follower / init_speaker unset")


#: TrainConfig fields that must be > 0 (those of OPTIONAL_POSITIVE_FIELDS may also be unset: None).
OPTIONAL_POSITIVE_FIELDS = ("num_paired", "num_unpaired", "unpaired_batch_size", "max_grad_norm", "threads")
POSITIVE_FIELDS = ("batch_size", "learning_rate", "max_updates", "gradient_accumulation_steps", "eval_every",
                   "eval_episodes", "eval_batch_size", "bleu_examples", "test_episodes", "log_every",
                   "checkpoint_every", "keep_checkpoints", *OPTIONAL_POSITIVE_FIELDS)
_TYPE_NAMES = {int: "an integer", float: "a number", str: "text", bool: "true or false", dict: "a mapping"}


def check_field_types(cfg: TrainConfig) -> None:
    """ValueError naming the first field whose value is not of its annotated type ("batch_size must be an
    integer, got 'abc'"). An integer field takes any integral number (``1e4`` from YAML, numpy's ints) as an int,
    a number field any real number; a bool is neither."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value, kinds = getattr(cfg, f.name), typing.get_args(hints[f.name]) or (hints[f.name],)
        if value is None and type(None) in kinds:
            continue
        kind = next(k for k in kinds if k is not type(None))
        if kind in (int, float) and isinstance(value, numbers.Real) and not isinstance(value, bool):
            if kind is float:
                setattr(cfg, f.name, float(value))
                continue
            if isinstance(value, numbers.Integral) or float(value).is_integer():
                setattr(cfg, f.name, int(value))
                continue
        elif isinstance(value, kind):
            continue
        raise ValueError(f"{f.name} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {value!r}")


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e-3`` as a float (YAML 1.1 needs ``1.0e-3``; JSON and people don't)."""


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),  # a digit before the e
    list("-+0123456789."),
)


def parse_yaml(text: str | IO[str]) -> Any:
    """A config file's or a command-line value's YAML (a string or an open file), numbers like 1e-3 as floats."""
    return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 (a SafeLoader subclass)


def flag_value(text: str) -> Any:
    """A command-line value as YAML; an empty one is refused (``--num-paired ""`` is a missing value, not none)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value: give one, or null for none")
    return parse_yaml(text)


def flag_text(text: str) -> str | None:
    """A text field's command-line value as typed (``--mixed-precision no`` stays "no"), ``null`` for none."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value: give one, or null for none")
    return None if text == "null" else text


def is_text_field(f: dataclasses.Field) -> bool:
    """A TrainConfig field that holds text (a path, a name, a mode): scripts/train.py keeps its command-line
    value a string, and load_config turns a number that YAML read for it back into text."""
    return f.type in ("str", "str | None", str)


def read_config_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's values with its ``base:`` chain resolved: ``base`` names another config file, relative
    to this one, whose values this file's override (``model`` key by key); a base may have a base."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    if path.resolve() in _seen:
        raise ValueError(f"config file {path} is its own base (through {' -> '.join(map(str, _seen))})")
    with open(path, encoding="utf-8") as f:
        values = parse_yaml(f) or {}  # YAML is a superset of JSON
    if not isinstance(values, dict):
        raise ValueError(f"config file {path} must hold a mapping of keys to values")
    values = dict(values)
    values["model"] = values.get("model") or {}
    if not isinstance(values["model"], dict):
        raise ValueError(f"model in {path} must be a mapping of model config keys to values")
    base = values.pop("base", None)
    if base is None:
        return values
    if not isinstance(base, str):
        raise ValueError(f"base in {path} must be the path of another config file, got {base!r}")
    inherited = read_config_file(path.parent / base, (*_seen, path.resolve()))
    return {**inherited, **values, "model": {**inherited["model"], **values["model"]}}


def field_docs() -> dict[str, str]:
    """Each TrainConfig field's help (:func:`option`'s ``doc``) as plain text: whitespace collapsed, reST markup
    (``x``, :func:`x`) dropped."""
    return {f.name: " ".join(re.sub(r":\w+:`([^`]+)`", r"\1", f.metadata["doc"]).replace("``", "").split())
            for f in dataclasses.fields(TrainConfig) if f.metadata.get("doc")}


def field_help(f: dataclasses.Field) -> str:
    """A TrainConfig field's command-line help: its docstring (else its type) and its default."""
    default = {None: "unset", True: "true", False: "false"}.get(f.default, f.default) \
        if isinstance(f.default, (bool, type(None))) else f.default
    text = f"{field_docs().get(f.name) or f.type} (default: {default})"
    return text.replace("%", "%%")  # argparse formats help with %


def train_arg_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The training scripts' parser: ``--config`` and one flag per TrainConfig field (``--max-updates``), its help
    the field's docstring; a bool field is ``--resume`` / ``--no-resume``, unset (None) leaving the config file's
    value. A flag not given is absent from the parsed flags, so that one given as ``null`` sets its field to None
    (``--num-paired null``: every pair). ``--model.KEY VALUE`` flags are read by :func:`parse_train_args`."""
    # allow_abbrev=False: a misspelt flag that begins a real one (`--max-update`) is an error, not that flag
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--config", help="YAML or JSON file of TrainConfig fields; a flag given overrides its value")
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":
            continue
        flag, doc = "--" + f.name.replace("_", "-"), field_help(f)
        if f.type in ("bool", bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=doc)
        elif is_text_field(f):  # as typed: YAML would read `--mixed-precision no` as False
            parser.add_argument(flag, dest=f.name, type=flag_text, default=argparse.SUPPRESS, help=doc)
        else:
            parser.add_argument(flag, dest=f.name, type=flag_value, default=argparse.SUPPRESS, help=doc)
    return parser


def parse_train_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """(the parsed flags, the TrainConfig overrides they give): values are YAML (``--model.gamma 0`` is a
    number), ``--model.KEY VALUE`` reaches the model config, and an unknown flag is the parser's error."""
    args, rest = parser.parse_known_args(argv)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    bools = {f.name for f in dataclasses.fields(TrainConfig) if f.type in ("bool", bool)}
    overrides = {k: v for k, v in vars(args).items() if k in names and (v is not None or k not in bools)}
    i = 0
    while i < len(rest):
        key = rest[i]
        if not key.startswith("--model.") or i + 1 >= len(rest):
            parser.error(f"unrecognized argument: {key}")
        name, _, inline = key[2:].partition("=")
        if inline:
            overrides[name] = parse_yaml(inline)
            i += 1
        else:
            overrides[name] = parse_yaml(rest[i + 1])
            i += 2
    return args, overrides


def fill_level(values: dict[str, Any], path: str | None) -> None:
    """``{level}`` in each text value replaced, in place, by the folder name of ``values["level"]``; a ValueError
    naming the field where a value holds it and no level is given."""
    holders = [name for name, value in values.items() if isinstance(value, str) and "{level}" in value]
    if not holders:
        return
    if values.get("level") is None:
        raise ValueError(f"{{level}} in {', '.join(holders)} (from {path or 'the command line'}) stands for the "
                         "level's folder: give the level, e.g. --level BossLocal or --level GoToSeqLocal")
    folder = level_folder(values["level"])
    for name in holders:
        values[name] = values[name].replace("{level}", folder)


def load_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """A TrainConfig from a YAML/JSON file (with its ``base:`` chain) plus overrides (``model.gamma`` style
    keys reach ``model``)."""
    values = read_config_file(path) if path else {}
    values["model"] = dict(values.get("model") or {})
    for key, value in (overrides or {}).items():
        if key.startswith("model."):
            values["model"][key[len("model."):]] = value
        else:
            values[key] = value
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown config key(s): {unknown}; known keys: {sorted(fields)}")
    fill_level(values, path)
    for name, value in values.items():  # `output_dir: 2024` in YAML is an int: a path field takes it as text
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if is_number and is_text_field(fields[name]):
            values[name] = str(value)
    return TrainConfig(**values)


def model_flags(fields: Mapping[str, Any]) -> list[str]:
    """train.py's flags setting each model field: ``--model.<name> <value>`` (booleans as true / false)."""
    return [flag for name, value in fields.items()
            for flag in (f"--model.{name}", str(value).lower() if isinstance(value, bool) else str(value))]


def with_follower(config: Mapping[str, Any], saved: bool) -> dict[str, Any]:
    """A train config with its model's follower fields named (:data:`FOLLOWER_FIELDS`; a head follower's without
    ``film_layers``): where a saved train_config.json lacks one it was written before that field was a choice (the
    head follower, a FiLM on one map), where the current one lacks one the model config's default holds."""
    defaults = FOLLOWER_FIELDS if saved else {name: ModulesConfig.__dataclass_fields__[name].default
                                              for name in FOLLOWER_FIELDS}
    model = {**defaults, **(config.get("model") or {})}
    kind = CONDITIONINGS.get(model["follower_conditioning"])  # an unknown name is the model config's to refuse
    if kind is not None and not kind.films_frames:  # no FiLM: its layers are no part of the model
        model.pop("film_layers")
    return {**config, "model": model}
