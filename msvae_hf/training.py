"""The training loop behind ``scripts/train.py`` (follower, speaker or MS-VAE), on accelerate.

Read top to bottom: :class:`TrainConfig` (every knob, documented), :func:`build_model`, the stateless
batch sampler, checkpoints, evaluation, then :func:`train`.

- One update of MS-VAE draws a paired and an unpaired batch (Eq. 10); the baselines draw paired only.
- Data order is a pure function of (seed, update, process): batch ``i`` of epoch ``e`` is slice ``i`` of a
  permutation seeded by ``(seed, e)``, and each process takes its own part of that global batch. So
  resuming needs only the update counter, and data parallelism shards without a distributed sampler.
- Checkpoint layout (``output_dir/``)::

      checkpoints/step-000500/   accelerate save_state: model, optimizer, RNG states + train_state.json
      best/                      save_pretrained of the best model by validation (config, safetensors, tokenizer):
                                 by SR for followers and MS-VAE, by BLEU for speakers
      best_speaker/              MS-VAE only: the best by validation BLEU, the checkpoint of its speaker role
      tb/                        TensorBoard logs
      results.json               validation history, App. D's smoothed max, test SR / BLEU

  A checkpoint is written to a temporary folder and renamed into place, so a killed run never leaves a
  half-written one; the last ``keep_checkpoints`` are kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import numbers
import os
import platform
import re
import shutil
import subprocess
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
import yaml
from accelerate import Accelerator
from accelerate.utils import extract_model_from_parallel, set_seed
from datasets import concatenate_datasets, load_from_disk
from safetensors.torch import load_file
from tqdm.auto import tqdm

from .configuration_msvae import FollowerConfig, MSVAEConfig, SpeakerConfig
from .data.collator import DemoCollator, for_loader, read_rows
from .data.demos import load_demos, require_cell_codes
from .envs.levels import resolve_level
from .envs.seeds import TEST_SEED_START, VALID_SEED_START
from .evaluation import evaluate_follower, evaluate_speaker
from .metrics import smoothed_max
from .modeling_baselines import FollowerModel, SpeakerModel
from .modeling_msvae import MSVAEModel
from .run_folder import (
    RunFolderBusy,
    RunLock,
    check_finite_update,
    config_differences,
    is_empty_run_folder,
    nonfinite_terms,
    read_json,
    writing,
)
from .tokenization_msvae import MSVAETokenizer

MODEL_TYPES = {"follower": (FollowerModel, FollowerConfig), "speaker": (SpeakerModel, SpeakerConfig),
               "msvae": (MSVAEModel, MSVAEConfig)}


@dataclass
class TrainConfig:
    """Everything a run needs. Set in a YAML/JSON file and/or on the command line."""

    model_type: str = "msvae"
    """follower | speaker | msvae"""
    demos: str = "data/bosslocal"
    """a DatasetDict written by scripts/make_demos.py (splits paired, unpaired, valid, test)"""
    output_dir: str = "runs/msvae"
    level: str | None = None
    """evaluation level; defaults to the level the demonstrations were made on"""
    model: dict = field(default_factory=dict)
    """overrides of the model config (MSVAEConfig fields), e.g. {gamma: 0, follower_attention: bottleneck}"""
    init_follower: str | None = None
    """MS-VAE only: a trained baseline follower to initialise from (App. D)"""
    init_speaker: str | None = None
    """MS-VAE only: a trained baseline speaker to initialise from"""
    init_from: str | None = None
    """a saved model of the same model_type (``save_pretrained`` folder, e.g. another run's best/) to start
    from; ``model`` overrides change its config, e.g. {gamma: 0, alpha: 0} to go on with paired data only"""
    pseudo_labels: str | None = None
    """follower or speaker: a pseudo-paired dataset from scripts/label_unpaired.py, added to the paired data
    (the speaker-follower's follower, Sec. 2.3; for a speaker, self-training on the unpaired trajectories)"""
    num_paired: int | None = None
    """use only the first M paired examples (None: all)"""
    num_unpaired: int | None = None
    """use only the first N unpaired trajectories (None: all)"""
    batch_size: int = 128
    """paired batch per process per micro-step"""
    unpaired_batch_size: int | None = None
    """unpaired batch per process (MS-VAE); None (unset): same as batch_size"""
    learning_rate: float = 1e-3
    max_updates: int = 2000
    gradient_accumulation_steps: int = 1
    max_grad_norm: float | None = None
    mixed_precision: str = "no"
    """no | bf16 | fp16 (bf16 autocast on CPU)"""
    seed: int = 0
    eval_every: int = 250
    eval_episodes: int = 200
    eval_batch_size: int = 256
    eval_workers: int = 0
    """processes that step the evaluation envs (rollout.EnvPool); 0: in the training process"""
    bleu_examples: int = 500
    test_episodes: int = 1000
    log_every: int = 10
    checkpoint_every: int = 250
    keep_checkpoints: int = 2
    resume: bool = False
    """continue from the latest checkpoint in output_dir"""
    continue_from: str | None = None
    """a finished run's folder: this run starts from its last checkpoint (with its best models, curve, wall time
    and command lines) and trains on to ``max_updates`` in ``output_dir``, as one uninterrupted run of
    ``max_updates`` would; the finished run is only read (:func:`continue_run`)"""
    threads: int | None = None
    """torch.set_num_threads (None: leave torch's default)"""
    retain_freed_memory: bool = True
    """keep freed host memory for reuse (glibc: :func:`retain_freed_memory`); False: the C library's default"""

    def __post_init__(self) -> None:
        if self.mixed_precision is False:  # YAML 1.1 reads a bare `mixed_precision: no` as false
            self.mixed_precision = "no"
        check_field_types(self)
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {sorted(MODEL_TYPES)}, got {self.model_type!r}")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"mixed_precision must be no, bf16 or fp16, got {self.mixed_precision!r}")
        for name in POSITIVE_FIELDS:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}" + (
                    " (leave it unset for the default)" if name in OPTIONAL_POSITIVE_FIELDS else ""))
        for name in ("seed", "eval_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not math.isfinite(self.learning_rate):
            raise ValueError(f"learning_rate must be finite, got {self.learning_rate!r}")
        if self.level is not None:
            resolve_level(self.level)  # ValueError naming the level and the valid names
        known = {f.name for f in dataclasses.fields(MSVAEConfig)}
        unknown = sorted(set(self.model) - known)
        if unknown:
            raise ValueError(f"unknown model config key(s): {unknown}")
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


def train_arg_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The training scripts' parser: ``--config`` and one flag per TrainConfig field (``--max-updates``);
    ``--model.KEY VALUE`` flags are read by :func:`parse_train_args`."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML or JSON file of TrainConfig fields")
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, dest=f.name, action="store_true", default=None)
        elif is_text_field(f):  # as typed: YAML would read `--mixed-precision no` as False
            parser.add_argument(flag, dest=f.name, type=str, default=None)
        else:
            parser.add_argument(flag, dest=f.name, type=parse_yaml, default=None)
    return parser


def add_threads_flag(parser: argparse.ArgumentParser, default: int | None = None) -> None:
    """``--threads N`` (N >= 1) for the scripts beside training: torch threads of the process, read by
    :func:`set_threads`; None leaves torch's default. One thread beside other jobs on the same cores: torch's
    default of one per core then oversubscribes them."""
    def positive(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
        return value

    parser.add_argument("--threads", type=positive, default=default,
                        help="torch threads (default: %(default)s, None: torch's); 1 beside other jobs")


def set_threads(threads: int | None) -> None:
    """torch.set_num_threads(threads), unless None."""
    if threads is not None:
        torch.set_num_threads(threads)


def parse_train_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """(the parsed flags, the TrainConfig overrides they give): values are YAML (``--model.gamma 0`` is a
    number), ``--model.KEY VALUE`` reaches the model config, and an unknown flag is the parser's error."""
    args, rest = parser.parse_known_args(argv)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    overrides = {k: v for k, v in vars(args).items() if k in names and v is not None}
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
    for name, value in values.items():  # `output_dir: 2024` in YAML is an int: a path field takes it as text
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if is_number and is_text_field(fields[name]):
            values[name] = str(value)
    return TrainConfig(**values)


# ---------------------------------------------------------------------------------------------- model
def adam(parameters, learning_rate: float) -> torch.optim.Adam:
    """The optimiser of every run (App. D: Adam): its ``foreach`` implementation, one kernel per operation for
    all parameters, where the CPU's default steps each parameter on its own; both give the same values."""
    return torch.optim.Adam(parameters, lr=learning_rate, foreach=True)


def build_model(cfg: TrainConfig, tokenizer: MSVAETokenizer) -> torch.nn.Module:
    """A fresh model of ``cfg.model_type`` sized to the tokenizer, a saved one (``init_from``), or MS-VAE from
    trained baselines."""
    overrides = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                 "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, **cfg.model}
    if cfg.init_from:
        model_cls, config_cls = MODEL_TYPES[cfg.model_type]
        if not (Path(cfg.init_from) / "config.json").is_file():
            raise FileNotFoundError(f"init_from: no saved model (config.json) in {cfg.init_from}")
        saved_type = json.loads((Path(cfg.init_from) / "config.json").read_text()).get("model_type")
        if saved_type != config_cls.model_type:
            raise ValueError(f"init_from {cfg.init_from} holds a {saved_type!r} model, not {config_cls.model_type!r} "
                             f"(model_type: {cfg.model_type})")
        model = model_cls.from_pretrained(cfg.init_from, **cfg.model)
        if model.config.vocab_size != len(tokenizer):
            raise ValueError(f"init_from {cfg.init_from} has a vocabulary of {model.config.vocab_size} words, "
                             f"the tokenizer {len(tokenizer)}")
    elif cfg.model_type == "msvae" and (cfg.init_follower or cfg.init_speaker):
        follower = FollowerModel.from_pretrained(cfg.init_follower) if cfg.init_follower else None
        speaker = SpeakerModel.from_pretrained(cfg.init_speaker) if cfg.init_speaker else None
        model = MSVAEModel.from_baselines(follower, speaker, **cfg.model)
    else:
        model_cls, config_cls = MODEL_TYPES[cfg.model_type]
        model = model_cls(config_cls(**overrides))
    model.tokenizer = tokenizer
    return model


# ---------------------------------------------------------------------------------------------- data
class StepSampler:
    """Rows for update ``step`` on process ``rank``: a pure function of (seed, step, rank) (see module doc)."""

    def __init__(self, dataset: Any, batch_size: int, world_size: int, seed: int, stream: int) -> None:
        self.data = for_loader(dataset)
        self.batch_size, self.world_size = batch_size, world_size
        self.seed, self.stream = seed, stream
        self.per_epoch = len(dataset) // (batch_size * world_size)
        if self.per_epoch == 0:
            raise ValueError(
                f"dataset of {len(dataset)} rows is smaller than one global batch "
                f"({batch_size} x {world_size} processes)"
            )

    def indices(self, step: int, rank: int) -> np.ndarray:
        epoch, i = divmod(step, self.per_epoch)
        perm = np.random.default_rng([self.seed, self.stream, epoch]).permutation(len(self.data))
        global_batch = perm[i * self.batch_size * self.world_size:(i + 1) * self.batch_size * self.world_size]
        return np.sort(global_batch[rank * self.batch_size:(rank + 1) * self.batch_size])

    def rows(self, step: int, rank: int) -> list[dict]:
        return read_rows(self.data, self.indices(step, rank).tolist())


def load_training_data(cfg: TrainConfig) -> tuple[Any, Any, Any, Any, str]:
    """(paired, unpaired, valid, test, level) with the subsets and pseudo-labels the config asks for."""
    demos = load_demos(cfg.demos)
    paired = demos["paired"]
    if len(paired) == 0:
        raise ValueError(f"{cfg.demos}: the paired split is empty")
    if cfg.num_paired is not None:
        paired = paired.select(range(min(cfg.num_paired, len(paired))))
    unpaired = demos["unpaired"] if "unpaired" in demos else None
    if cfg.model_type == "msvae" and unpaired is not None and cfg.num_unpaired is not None:
        unpaired = unpaired.select(range(min(cfg.num_unpaired, len(unpaired))))
    if cfg.pseudo_labels:
        pseudo = load_from_disk(cfg.pseudo_labels)
        require_cell_codes(pseudo, cfg.pseudo_labels)
        columns = [c for c in paired.column_names if c in pseudo.column_names]
        paired = concatenate_datasets([paired.select_columns(columns), pseudo.select_columns(columns)])
    level = cfg.level or paired[0]["level"]
    return paired, unpaired, demos.get("valid"), demos.get("test"), level


# ---------------------------------------------------------------------------------------------- checkpoints
def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step-") and (p / "train_state.json").exists())


#: TrainConfig fields a continued run may change: where it writes, how far it goes and how it runs, not what it
#: trains on or how (see :func:`continuable_checkpoint`).
CONTINUE_MAY_CHANGE = ("output_dir", "max_updates", "resume", "continue_from", "threads", "eval_workers",
                       "eval_batch_size", "keep_checkpoints", "retain_freed_memory")


#: TrainConfig fields ``--resume`` may change: how the run is executed, not what or how long it trains.
RESUME_MAY_CHANGE = ("output_dir", "resume", "continue_from", "threads", "eval_workers", "eval_batch_size",
                     "keep_checkpoints", "retain_freed_memory", "log_every", "checkpoint_every")


def check_run_folder(cfg: TrainConfig) -> None:
    """Whether ``cfg`` may train in its ``output_dir``, writing nothing: a new run needs it empty or absent, a
    resume needs a checkpoint and the config the folder trained with (but :data:`RESUME_MAY_CHANGE`)."""
    out = Path(cfg.output_dir)
    if not cfg.resume:
        if not is_empty_run_folder(out):
            raise FileExistsError(f"{out} is not empty: pass --resume to continue its run or choose another "
                                  "output_dir")
        return
    if not checkpoint_dirs(out):
        raise FileNotFoundError(f"nothing to resume in {out}: it holds no checkpoint (checkpoints/step-*); "
                                "run without --resume to start a new run in an empty or new output_dir")
    check_resume_config(cfg)


def check_resume_config(cfg: TrainConfig) -> None:
    """ValueError naming each field in which ``cfg`` differs from the ``train_config.json`` its ``output_dir``
    trained with (but :data:`RESUME_MAY_CHANGE`); a folder without one passes."""
    out = Path(cfg.output_dir)
    if (out / "train_config.json").is_file():
        differ = config_differences(read_json(out / "train_config.json"), dataclasses.asdict(cfg), RESUME_MAY_CHANGE)
        if differ:
            raise ValueError(f"--resume {out}: it trained with another config; " + "; ".join(differ)
                             + " (resume with its own config, or --continue-from it into a new output_dir)")


def claim_run_folder(cfg: TrainConfig, accelerator: Accelerator, command: str | None) -> RunLock | None:
    """The main process's exclusive lock on ``output_dir`` (:class:`~msvae_hf.run_folder.RunLock`), the folder
    checked again under it; a refusal reaches every process, so none is left waiting."""
    lock, error = None, None
    if accelerator.is_main_process:
        try:
            lock = RunLock(cfg.output_dir, command)
            check_run_folder(cfg)
        except (RunFolderBusy, ValueError, OSError) as err:
            if lock is not None:
                lock.release()
            lock, error = None, err
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        box = [None if error is None else str(error)]
        broadcast_object_list(box, from_process=0)
        if box[0] is not None and error is None:
            error = RunFolderBusy(box[0])
    if error is not None:
        raise error
    return lock


def scalar_terms(output: Any) -> dict[str, torch.Tensor]:
    """The scalar tensors of a model output (the loss and, for MS-VAE, every term of Eq. 10), detached."""
    return {k: v.detach() for k, v in output.items() if torch.is_tensor(v) and v.dim() == 0}


def continuable_checkpoint(cfg: TrainConfig) -> Path:
    """The checkpoint of the finished run ``cfg.continue_from`` that ``cfg`` continues from; ValueError or
    FileNotFoundError naming what stands in the way (nothing is written).

    The continued run is one uninterrupted run of ``cfg.max_updates``: it needs the finished run's config in all
    but :data:`CONTINUE_MAY_CHANGE` (the data order is a function of seed and update, and the learning rate is
    constant), a last checkpoint at the finished run's last update, and that update on the validation schedule
    (a run validates at its last update, which a longer run does only where ``eval_every`` divides it)."""
    source = Path(cfg.continue_from)
    if not (source / "results.json").is_file() or not (source / "train_config.json").is_file():
        raise FileNotFoundError(f"continue_from {source} is not a finished run (results.json, train_config.json)")
    saved = read_json(source / "train_config.json")
    differ = config_differences(saved, dataclasses.asdict(cfg), CONTINUE_MAY_CHANGE)
    if differ:
        raise ValueError(f"continue_from {source} trained with another config; " + "; ".join(differ))
    finished = json.loads((source / "results.json").read_text())["updates"]
    last = checkpoint_dirs(source)[-1:]
    if not last or json.loads((last[0] / "train_state.json").read_text())["step"] != finished:
        raise FileNotFoundError(f"continue_from {source} holds no checkpoint of its last update ({finished})")
    if finished >= cfg.max_updates:
        raise ValueError(f"continue_from {source} has {finished} updates: max_updates must be more, got "
                         f"{cfg.max_updates}")
    if finished % cfg.eval_every:
        raise ValueError(f"continue_from {source} stopped at update {finished}, off the validation schedule "
                         f"(eval_every {cfg.eval_every}): its curve would differ from one run of {cfg.max_updates}")
    return last[0]


def continue_run(checkpoint: Path, output_dir: Path) -> None:
    """Copy what a finished run hands on (best models, TensorBoard logs, command lines) into the empty
    ``output_dir``, its last ``checkpoint`` last, through a temporary folder: a copy cut short leaves no
    checkpoint, i.e. a folder to start again, never one to resume."""
    source = checkpoint.parents[1]
    output_dir.mkdir(parents=True, exist_ok=True)
    for name in ("best", "best_speaker", "tb"):
        if (source / name).is_dir():
            shutil.copytree(source / name, output_dir / name)
    if (source / "command.txt").is_file():
        shutil.copy2(source / "command.txt", output_dir / "command.txt")
    tmp = output_dir / "checkpoints" / f".tmp-{checkpoint.name}"
    shutil.copytree(checkpoint, tmp)
    os.replace(tmp, output_dir / "checkpoints" / checkpoint.name)


def save_checkpoint(accelerator: Accelerator, output_dir: str, state: dict, keep: int) -> Path:
    """accelerate ``save_state`` into a temporary folder, then an atomic rename; prune old ones."""
    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{state['step']:07d}"
    tmp = root / f".tmp-step-{state['step']:07d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    with writing(tmp):
        accelerator.save_state(str(tmp))
        if accelerator.is_main_process:
            (tmp / "train_state.json").write_text(json.dumps(state, indent=2))
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in checkpoint_dirs(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def own_storage(models: list[torch.nn.Module], weights: list[dict], output_dir: str) -> None:
    """accelerate's save-state pre-hook: every tensor of the state dicts to save gets its own storage.

    On a GPU, cuDNN keeps a GRU/LSTM's weights as views into one flat buffer; accelerate's safetensors
    writer takes such views for shared tensors and DROPS them ("Removed shared tensor ... while saving"),
    leaving a checkpoint without the recurrent weights. Copies of the views are saved whole.
    """
    for i, state in enumerate(weights):
        weights[i] = {k: v.clone() if torch.is_tensor(v) else v for k, v in state.items()}


def load_model_weights(models: list[torch.nn.Module], input_dir: str) -> None:
    """accelerate's load-state pre-hook: checkpointed weights go in through ``load_state_dict``.

    accelerate would call safetensors' ``load_model``, which refuses a model on a GPU whose GRU/LSTM weights
    are views into one flat cuDNN buffer ("None is covering the entire storage"); ``load_state_dict`` copies
    into them in place. The model leaves ``models`` so accelerate does not load it again.
    """
    path = Path(input_dir) / "model.safetensors"
    if len(models) != 1 or not path.is_file():
        return  # anything else (several models, a .bin checkpoint): accelerate's own loading
    model = extract_model_from_parallel(models.pop())  # the checkpoint holds the unwrapped model's names
    device = next(model.parameters()).device
    model.load_state_dict(load_file(path, device=str(device)))


def register_checkpoint_hooks(accelerator: Accelerator) -> None:
    """`own_storage` before `save_state`, `load_model_weights` before `load_state`: GPU RNN weights share
    one cuDNN buffer, which accelerate's safetensors path would drop on saving and refuse on loading."""
    accelerator.register_save_state_pre_hook(own_storage)
    accelerator.register_load_state_pre_hook(load_model_weights)


def save_best(model: Any, output_dir: str, name: str = "best") -> None:
    """``save_pretrained`` (tokenizer included) into ``output_dir/name``, atomically."""
    final, tmp = Path(output_dir) / name, Path(output_dir) / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with writing(tmp):
        model.save_pretrained(tmp)
    old = Path(output_dir) / f".{name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- evaluation
def validate(model: Any, cfg: TrainConfig, level: str, valid: Any) -> dict[str, float]:
    """Validation SR on fixed seeds (followers, MS-VAE) and BLEU on the valid split (speakers, MS-VAE).

    Runs under ``torch.random.fork_rng`` so evaluating never changes the training RNG stream.
    """
    metrics: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        if cfg.model_type in ("follower", "msvae"):
            summary, _ = evaluate_follower(model, level, cfg.eval_episodes, VALID_SEED_START, cfg.eval_batch_size,
                                           num_workers=cfg.eval_workers)
            metrics.update({f"valid/{k}": v for k, v in summary.items() if k != "episodes"})
        if cfg.model_type in ("speaker", "msvae") and valid is not None and len(valid):
            metrics["valid/bleu"], _ = evaluate_speaker(model, valid, max_examples=cfg.bleu_examples)
    return metrics


def keep_best(state: dict, metrics: dict[str, float], step: int, cfg: TrainConfig, model: Any) -> None:
    """Add a validation to ``state["history"]`` and save ``model`` into each :func:`selections` folder whose
    metric it improves (``state[folder]`` holds the step and score kept)."""
    state["history"].append({"step": step, **metrics})
    for name, metric in selections(cfg).items():
        score, kept = metrics.get(metric), state.get(name)
        if score is not None and (kept is None or score > kept["score"]):
            state[name] = {"step": step, "score": score}
            save_best(model, cfg.output_dir, name)


def primary_metric(cfg: TrainConfig) -> str:
    return "valid/bleu" if cfg.model_type == "speaker" else "valid/success_rate"


def selections(cfg: TrainConfig) -> dict[str, str]:
    """Which folder keeps the best model by which validation metric.

    MS-VAE is both a follower and a speaker (Sec. 5.1 evaluates it by SR and by BLEU), so it keeps one
    checkpoint per role, each chosen by its own metric, as the baseline follower and speaker are.
    """
    chosen = {"best": primary_metric(cfg)}
    if cfg.model_type == "msvae":
        chosen["best_speaker"] = "valid/bleu"
    return chosen


# ---------------------------------------------------------------------------------------------- loop
def retain_freed_memory() -> bool:
    """Let glibc's malloc keep freed memory for reuse, for the rest of the process.

    By default glibc maps each large block afresh (over 128 KiB, a threshold that adapts up to 32 MiB) and
    unmaps it when freed, so every CPU update page-faults its large activations in again: about a fifth of
    an MS-VAE update on this project's CPU (``benchmarks/train_step.py`` times both). After this call no block
    is mmapped and the heap is never trimmed: the process keeps its peak heap. Returns False where the C
    library is not glibc (nothing changed).
    """
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def train(cfg: TrainConfig, command: str | None = None) -> dict[str, Any]:
    """Train, validate, checkpoint, keep the best model, then evaluate it on the test seeds/split.

    ``command`` (the command line that started this run, from ``scripts/train.py``) is appended to
    ``output_dir/command.txt``, one line per start or resume, for the model card.
    """
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.retain_freed_memory:
        retain_freed_memory()
    accelerator = Accelerator(
        mixed_precision=cfg.mixed_precision, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        log_with="tensorboard", project_dir=cfg.output_dir,
    )
    out = Path(cfg.output_dir)
    check_run_folder(cfg)  # every rank checks (none has written anything yet), so no rank waits for a failed one
    source = None
    if cfg.continue_from and not cfg.resume:
        source = continuable_checkpoint(cfg)
    set_seed(cfg.seed)
    paired, unpaired, valid, test, level = load_training_data(cfg)
    resolve_level(level)
    tokenizer = MSVAETokenizer.from_grammar()
    collator = DemoCollator(tokenizer)
    model = build_model(cfg, tokenizer)
    optimizer = adam(model.parameters(), cfg.learning_rate)
    model, optimizer = accelerator.prepare(model, optimizer)
    register_checkpoint_hooks(accelerator)
    raw_model = accelerator.unwrap_model(model)
    world, rank = accelerator.num_processes, accelerator.process_index
    micro = cfg.gradient_accumulation_steps
    paired_sampler = StepSampler(paired, cfg.batch_size, world, cfg.seed, stream=0)
    unpaired_sampler = None
    if cfg.model_type == "msvae" and unpaired is not None and len(unpaired) and raw_model.config.uses_unpaired:
        unpaired_sampler = StepSampler(unpaired, cfg.unpaired_batch_size or cfg.batch_size, world, cfg.seed, stream=1)

    # Everything is checked: the first write is the lock, and the folder is checked again under it.
    lock = claim_run_folder(cfg, accelerator, command)
    try:
        existing = checkpoint_dirs(out)
        commit = provenance()["commit"]  # the code that trains; final_evaluation may run under a later one
        state = {"step": 0, "model_type": cfg.model_type, "history": [], "best": None, "best_speaker": None,
                 "wall_time": 0.0, "commits": [commit]}
        if source is not None:
            if accelerator.is_main_process:
                continue_run(source, out)
            accelerator.wait_for_everyone()
            existing = checkpoint_dirs(out)
        if cfg.resume or source is not None:
            last = existing[-1]
            saved = read_json(last / "train_state.json")
            if saved.get("model_type") != cfg.model_type:
                raise ValueError(f"checkpoint {last} is a {saved.get('model_type')!r} run, not {cfg.model_type!r}")
            accelerator.load_state(str(last))
            state = saved
            if "commits" not in state and source is not None:  # a checkpoint from before commits were kept in it
                finished = json.loads((Path(cfg.continue_from) / "results.json").read_text())
                state["commits"] = finished.get("training_commits") or [finished.get("commit")]
            state.setdefault("commits", []).append(commit)
        accelerator.init_trackers("tb", config={k: v for k, v in dataclasses.asdict(cfg).items()
                                                if isinstance(v, (int, float, str, bool))})
        if accelerator.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
            (out / "train_config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
            if command:
                if world > 1 and command.startswith("python "):
                    command = f"accelerate launch --num_processes {world} " + command[len("python "):]
                with open(out / "command.txt", "a", encoding="utf-8") as f:
                    f.write(command + "\n")

        bar = tqdm(total=cfg.max_updates, initial=state["step"], disable=not accelerator.is_main_process,
                   desc="updates")
        started = time.time() - state["wall_time"]
        model.train()
        bad_terms: list[str] = []  # the non-finite loss terms of this update's micro-steps
        while state["step"] < cfg.max_updates:
            step = state["step"]
            for k in range(micro):
                micro_step = step * micro + k
                batch = collator(paired_sampler.rows(micro_step, rank))
                if unpaired_sampler is not None:
                    u = collator(unpaired_sampler.rows(micro_step, rank))
                    batch.update({f"unpaired_{name}": u[name] for name in
                                  ("observations", "directions", "actions", "trajectory_mask")})
                batch = {name: t.to(accelerator.device) for name, t in batch.items()}
                with accelerator.accumulate(model):
                    output = model(**batch)
                    accelerator.backward(output.loss)
                    bad_terms = bad_terms or nonfinite_terms({"loss": output.loss, **scalar_terms(output)})
                    if accelerator.sync_gradients:  # fp16's gradients are scaled, its scaler skips inf steps
                        check_finite_update(step + 1, bad_terms, None if cfg.mixed_precision == "fp16" else
                                            raw_model.named_parameters())
                        bad_terms = []
                    if cfg.max_grad_norm and accelerator.sync_gradients:
                        accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
            state["step"] = step = step + 1
            bar.update(1)
            if step % cfg.log_every == 0 or step == 1:
                logs = {f"train/{k}": float(v) for k, v in scalar_terms(output).items()}
                accelerator.log(logs, step=step)
                bar.set_postfix(loss=f"{logs['train/loss']:.3f}")
            if step % cfg.eval_every == 0 or step == cfg.max_updates:
                if accelerator.is_main_process:
                    metrics = validate(raw_model, cfg, level, valid)
                    accelerator.log(metrics, step=step)
                    keep_best(state, metrics, step, cfg, raw_model)
                    bar.write(f"step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
                state = _broadcast(state, accelerator)
            if step % cfg.checkpoint_every == 0 or step == cfg.max_updates:
                state["wall_time"] = time.time() - started
                save_checkpoint(accelerator, cfg.output_dir, state, cfg.keep_checkpoints)
        bar.close()
        results = {}
        if accelerator.is_main_process:
            results = final_evaluation(cfg, state, level, test, device=accelerator.device)
        accelerator.end_training()
        return results
    finally:
        if lock is not None:
            lock.release()


def _broadcast(state: dict, accelerator: Accelerator) -> dict:
    """Every process takes the main process's bookkeeping (history, best) after validation."""
    if accelerator.num_processes == 1:
        return state
    from accelerate.utils import broadcast_object_list

    box = [state]
    broadcast_object_list(box, from_process=0)
    return box[0]


def final_evaluation(
    cfg: TrainConfig, state: dict, level: str, test: Any, device: torch.device | str = "cpu",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate ``best/`` on the test seeds (SR) and the speaker checkpoint on the test split (BLEU).

    The speaker checkpoint is ``best_speaker/`` for MS-VAE and ``best/`` otherwise; both run on ``device``
    (the training device); writes ``results.json`` (with ``extra``'s keys added).
    """
    model_cls = MODEL_TYPES[cfg.model_type][0]
    best = Path(cfg.output_dir) / "best"
    model = model_cls.from_pretrained(best).to(device)
    results: dict[str, Any] = {
        "model_type": cfg.model_type, "level": level, "seed": cfg.seed, "updates": state["step"],
        "wall_time_s": round(state["wall_time"], 1), **provenance(device),
        "best": state["best"], "history": state["history"], **(extra or {}),
    }
    if state.get("commits"):  # the commit each start or resume trained with; "commit" is the first
        results["commit"], results["training_commits"] = state["commits"][0], state["commits"]
    if state.get("best_speaker"):
        results["best_speaker"] = state["best_speaker"]
    srs = [h["valid/success_rate"] for h in state["history"] if "valid/success_rate" in h]
    if srs:
        results["paper_protocol_valid_sr"] = smoothed_max(srs, window=5)
        summary, _ = evaluate_follower(model, level, cfg.test_episodes, TEST_SEED_START, cfg.eval_batch_size,
                                       num_workers=cfg.eval_workers)
        results["test"] = summary
    if cfg.model_type in ("speaker", "msvae") and test is not None and len(test):
        results["test_bleu"], predictions = evaluate_speaker(model, test, max_examples=cfg.bleu_examples)
        speaker = state.get("best_speaker")
        if cfg.model_type == "msvae" and speaker:
            results["test_bleu_of_best"] = results["test_bleu"]
            if speaker["step"] != state["best"]["step"]:  # otherwise best_speaker/ holds the same weights
                speaker_model = model_cls.from_pretrained(Path(cfg.output_dir) / "best_speaker").to(device)
                results["test_bleu"], predictions = evaluate_speaker(speaker_model, test,
                                                                     max_examples=cfg.bleu_examples)
        results["test_examples"] = [
            {"reference": r, "prediction": p} for r, p in zip(test["instruction"][:5], predictions[:5])
        ]
    with open(Path(cfg.output_dir) / "results.json", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, default=_json_default)
    return results


def provenance(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The code and machine behind a result: the git commit of this package's checkout (None outside a git
    checkout; ``-dirty`` when it has uncommitted changes), and the host's CPU count and accelerator."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
                                capture_output=True, text=True, check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    device = torch.device(device)
    accelerator = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"commit": commit, "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                          "torch_threads": torch.get_num_threads(), "device": accelerator}}


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value)}")
