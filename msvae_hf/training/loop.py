"""The training loop behind ``scripts/train.py`` (follower, speaker or MS-VAE), on accelerate.

Read top to bottom: :func:`build_model`, the data, the run folder's checks (new, resumed, continued), evaluation,
then :func:`train`. What a run is lives in :mod:`msvae_hf.training.train_config`, the run folder's layout and guarantees
in :mod:`msvae_hf.utils.run_folder`, the process set-up in :mod:`msvae_hf.utils.runtime`, the batch sampler in
:mod:`msvae_hf.data.sampler`.

- One update of MS-VAE draws a paired and an unpaired batch (Eq. 10); the baselines draw paired only.
- Data order is a pure function of (seed, update, process) (:class:`~msvae_hf.data.sampler.StepSampler`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from datasets import concatenate_datasets
from tqdm.auto import tqdm

from ..data.collator import DemoCollator
from ..data.demos import load_demos, with_goal_steps
from ..data.prefetch import UpdateBatches, prefetched
from ..data.pseudo_labels import label_replays, load_pseudo_labels, pseudo_labels_record, replay_shares
from ..data.sampler import StepSampler
from ..envs.levels import resolve_level
from ..envs.seeds import TEST_SEED_START, VALID_SEED_START
from ..evaluation.evaluate import evaluate_follower, evaluate_speaker, instruction_use
from ..evaluation.metrics import smoothed_max
from ..hub.repo_ids import is_hub_repo_id
from ..models.configuration_msvae import FOLLOWER_FIELDS, MODEL_TYPE_CONFIGS
from ..models.modeling_baselines import FollowerModel, SpeakerModel
from ..models.modeling_msvae import MSVAEModel
from ..models.tokenization_msvae import MSVAETokenizer
from ..utils.run_folder import (
    BEST_FOLDERS,
    RunFolderBusy,
    RunLock,
    also_selected_folder,
    check_finite_update,
    checkpoint_dirs,
    clear_unstarted_run_folder,
    config_differences,
    intact_checkpoint,
    is_empty_run_folder,
    is_unstarted_run_folder,
    keep_best,
    nonfinite_terms,
    read_json,
    register_checkpoint_hooks,
    save_checkpoint,
    scalar_terms,
    selections,
    weights_source,
    write_json,
)
from ..utils.runtime import adam, provenance, retain_freed_memory
from .graphed import LENGTH_MULTIPLE, TIME_MULTIPLE, CapturedUpdate, captured_adam
from .train_config import TrainConfig, model_flags, with_follower
from .update import update

MODEL_TYPES = {name: (model_cls, model_cls.config_class)
               for name, model_cls in (("follower", FollowerModel), ("speaker", SpeakerModel), ("msvae", MSVAEModel))}
assert {name: config for name, (_, config) in MODEL_TYPES.items()} == MODEL_TYPE_CONFIGS


# ---------------------------------------------------------------------------------------------- model
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
    if cfg.model_type != "speaker":
        check_follower(cfg, model)
    model.tokenizer = tokenizer
    return model


def check_follower(cfg: TrainConfig, model: torch.nn.Module) -> None:
    """ValueError where a model built from saved weights has another follower than ``cfg`` names (its own or the
    default's, which train_config.json records): a checkpoint saved with a FiLM on one map trains under a command
    that names ``film_layers`` 1, not the default."""
    named = with_follower(dataclasses.asdict(cfg), saved=False)["model"]
    wrong = {name: getattr(model.config, name) for name in FOLLOWER_FIELDS
             if name in named and getattr(model.config, name) != named[name]}
    if wrong:
        source = cfg.init_from or cfg.init_follower or cfg.init_speaker
        raise ValueError(f"{source} holds a follower with " + ", ".join(f"{k}={v!r}" for k, v in wrong.items())
                         + ", where this run names " + ", ".join(f"{k}={named[k]!r}" for k in wrong)
                         + f": name its follower ({' '.join(model_flags(wrong))})")


# ---------------------------------------------------------------------------------------------- data
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
        pseudo = load_pseudo_labels(cfg.pseudo_labels)
        if cfg.num_unpaired is not None:  # the pseudo-labelled rows are the unpaired trajectories, labelled
            pseudo = pseudo.select(range(min(cfg.num_unpaired, len(pseudo))))
        columns = [c for c in paired.column_names if c in pseudo.column_names]
        paired = concatenate_datasets([paired.select_columns(columns), pseudo.select_columns(columns)])
    level = cfg.level or paired[0]["level"]
    return paired, unpaired, demos.get("valid"), demos.get("test"), level


# ---------------------------------------------------------------------------------------------- run folder
#: TrainConfig fields a continued run may change: where it writes, how far it goes and how it runs, not what it
#: trains on or how (see :func:`continuable_checkpoint`).
CONTINUE_MAY_CHANGE = ("output_dir", "max_updates", "resume", "continue_from", "threads", "eval_workers",
                       "eval_batch_size", "keep_checkpoints", "retain_freed_memory", "loader_workers")


#: TrainConfig fields ``--resume`` may change: how the run is executed, not what or how long it trains.
RESUME_MAY_CHANGE = ("output_dir", "resume", "continue_from", "threads", "eval_workers", "eval_batch_size",
                     "keep_checkpoints", "retain_freed_memory", "log_every", "checkpoint_every", "loader_workers")


def check_run_folder(cfg: TrainConfig) -> None:
    """Whether ``cfg`` may train in its ``output_dir``, writing nothing: a new run needs it empty, absent or left
    by a start that failed before its first checkpoint (:func:`is_unstarted_run_folder`), a resume needs a
    checkpoint and the config the folder trained with (but :data:`RESUME_MAY_CHANGE`)."""
    out = Path(cfg.output_dir)
    if not cfg.resume:
        if not is_empty_run_folder(out) and not is_unstarted_run_folder(out):
            raise FileExistsError(f"{out} is not empty: pass --resume to continue its run or choose another "
                                  "output_dir")
        return
    if not checkpoint_dirs(out):
        raise FileNotFoundError(f"nothing to resume in {out}: it holds no checkpoint (checkpoints/step-*); "
                                "run without --resume to start a new run in an empty or new output_dir")
    check_resume_config(cfg)


def evaluated_level(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A saved or current config with ``level`` as the gymnasium id its run evaluates on: where it is None, the level
    its demonstrations were made on (their stats.json), so that a run that named its level and one that left it to
    the demonstrations compare equal; left as it is where neither can be read."""
    level = config.get("level")
    if level is None:
        try:
            level = read_json(Path(str(config.get("demos", ""))) / "stats.json").get("level")
        except (OSError, ValueError):
            return config
    try:
        return {**config, "level": resolve_level(level) if isinstance(level, str) else level}
    except ValueError:
        return config


def check_resume_config(cfg: TrainConfig) -> None:
    """ValueError naming each field in which ``cfg`` differs from the ``train_config.json`` its ``output_dir``
    trained with (but :data:`RESUME_MAY_CHANGE`); a folder without one passes."""
    out = Path(cfg.output_dir)
    if (out / "train_config.json").is_file():
        differ = config_differences(with_follower(evaluated_level(read_json(out / "train_config.json")), True),
                                    with_follower(evaluated_level(dataclasses.asdict(cfg)), False), RESUME_MAY_CHANGE,
                                    TrainConfig.defaults())
        if differ:
            raise ValueError(f"--resume {out}: it trained with another config; " + "; ".join(differ)
                             + " (resume with its own config, or --continue-from it into a new output_dir)")


def claim_run_folder(cfg: TrainConfig, accelerator: Accelerator, command: str | None) -> RunLock | None:
    """The main process's exclusive lock on ``output_dir`` (:class:`~msvae_hf.utils.run_folder.RunLock`), the folder
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
    differ = config_differences(with_follower(evaluated_level(saved), True),
                                with_follower(evaluated_level(dataclasses.asdict(cfg)), False), CONTINUE_MAY_CHANGE,
                                TrainConfig.defaults())
    if differ:
        raise ValueError(f"continue_from {source} trained with another config; " + "; ".join(differ))
    finished = read_json(source / "results.json", fix="continue from a finished run").get("updates")
    if not isinstance(finished, int):
        raise ValueError(f"{source / 'results.json'} names no number of updates: not a finished run's results")
    last = checkpoint_dirs(source)[-1:]
    if not last or read_json(last[0] / "train_state.json").get("step") != finished:
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
    for name in (*BEST_FOLDERS, "tb"):
        if (source / name).is_dir():
            shutil.copytree(source / name, output_dir / name)
    if (source / "command.txt").is_file():
        shutil.copy2(source / "command.txt", output_dir / "command.txt")
    tmp = output_dir / "checkpoints" / f".tmp-{checkpoint.name}"
    shutil.copytree(checkpoint, tmp)
    os.replace(tmp, output_dir / "checkpoints" / checkpoint.name)


# ---------------------------------------------------------------------------------------------- evaluation
def validate(model: Any, cfg: TrainConfig, level: str, valid: Any) -> dict[str, float]:
    """Validation on fixed seeds (followers, MS-VAE: :func:`evaluate_follower`'s metrics), the teacher-forced
    action accuracy on the valid pairs with their own and with another pair's instruction (followers, MS-VAE), and
    for speakers and MS-VAE the greedy labels of the first ``bleu_examples`` valid pairs: their BLEU-4 and the
    shares of those trajectories that carry out and that demonstrate their label, replayed in their episode
    (:func:`~msvae_hf.data.pseudo_labels.label_replays`).

    Runs under ``torch.random.fork_rng`` so evaluating never changes the training RNG stream.
    """
    metrics: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        if cfg.model_type in ("follower", "msvae"):
            summary, _ = evaluate_follower(model, level, cfg.eval_episodes, VALID_SEED_START, cfg.eval_batch_size,
                                           num_workers=cfg.eval_workers, reading=cfg.validate_reading)
            metrics.update({f"valid/{k}": v for k, v in summary.items() if k != "episodes"})
            if valid is not None and len(valid) >= 2:  # teacher forced: how much the actions depend on the words
                use = instruction_use(model, valid.select(range(min(len(valid), cfg.bleu_examples))))
                metrics["valid/action_accuracy"] = use["accuracy_own"]
                metrics["valid/action_accuracy_other_instruction"] = use["accuracy_other"]
        if cfg.model_type in ("speaker", "msvae") and valid is not None and len(valid):
            metrics["valid/bleu"], labels = evaluate_speaker(model, valid, max_examples=cfg.bleu_examples)
            replays = label_replays(valid.select(range(len(labels))), labels)
            metrics.update({f"valid/{key}": share for key, share in replay_shares(replays).items()})
    return metrics


# ---------------------------------------------------------------------------------------------- loop


@dataclass
class Run:
    """A run set up by :func:`prepare_run`: everything checked and built, nothing written yet."""

    cfg: TrainConfig
    accelerator: Accelerator
    model: torch.nn.Module  # as accelerate prepared it (wrapped for several processes)
    raw_model: Any  # the model itself
    optimizer: Any
    batches: UpdateBatches
    level: str
    valid: Any
    test: Any
    labels_record: dict[str, Any] | None  # the pseudo-labels' record as read, not as it may later be
    continues: Path | None  # the finished run's checkpoint this run continues from (``continue_from``)


def train(cfg: TrainConfig, command: str | None = None) -> dict[str, Any]:
    """Train, validate, checkpoint, keep the best model, then evaluate it on the test seeds/split.

    ``command`` (the command line that started this run, from ``scripts/train.py``) is appended to
    ``output_dir/command.txt``, one line per start or resume, for the model card.
    """
    run = prepare_run(cfg)
    # Everything is checked: the first write is the lock, and the folder is checked again under it.
    lock = claim_run_folder(cfg, run.accelerator, command)
    try:
        state = start_run(run, command)
        train_loop(run, state)
        results = {}
        if run.accelerator.is_main_process:
            results = final_evaluation(cfg, state, run.level, run.test, device=run.accelerator.device,
                                       labels_record=run.labels_record)
        run.accelerator.end_training()
        return results
    finally:
        if lock is not None:
            lock.release()


def prepare_run(cfg: TrainConfig) -> Run:
    """Check the run folder, load the data, build the model, the optimiser and the batches, writing nothing."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.retain_freed_memory:
        retain_freed_memory()
    accelerator = Accelerator(
        mixed_precision=cfg.mixed_precision, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        log_with="tensorboard", project_dir=cfg.output_dir,
    )
    check_run_folder(cfg)  # every rank checks (none has written anything yet), so no rank waits for a failed one
    continues = continuable_checkpoint(cfg) if cfg.continue_from and not cfg.resume else None
    set_seed(cfg.seed)
    paired, unpaired, valid, test, level = load_training_data(cfg)
    labels_record = pseudo_labels_record(cfg.pseudo_labels) if cfg.pseudo_labels else None
    resolve_level(level)
    tokenizer = MSVAETokenizer.from_grammar()
    model = build_model(cfg, tokenizer)
    if getattr(model.config, "goal_steps_weight", 0):
        if cfg.pseudo_labels:
            raise ValueError("goal_steps_weight reads where each pair's own mission is done; pseudo-labelled rows "
                             "have no mission to read it from: train this speaker on the pairs alone")
        paired = with_goal_steps(paired, level)
    if cfg.cuda_graphs and (accelerator.device.type != "cuda" or accelerator.num_processes > 1):
        raise ValueError(f"cuda_graphs needs one process on a CUDA device, got {accelerator.num_processes} on "
                         f"{accelerator.device.type}")
    optimizer = (captured_adam if cfg.cuda_graphs else adam)(model.parameters(), cfg.learning_rate)
    model, optimizer = accelerator.prepare(model, optimizer)
    register_checkpoint_hooks(accelerator)
    raw_model = accelerator.unwrap_model(model)
    world, rank = accelerator.num_processes, accelerator.process_index
    paired_sampler = StepSampler(paired, cfg.batch_size, world, cfg.seed, stream=0)
    unpaired_sampler = None
    if cfg.model_type == "msvae" and unpaired is not None and len(unpaired) and raw_model.config.uses_unpaired:
        unpaired_sampler = StepSampler(unpaired, cfg.unpaired_batch_size or cfg.batch_size, world, cfg.seed, stream=1)
    bucket = dict(time_multiple=TIME_MULTIPLE, length_multiple=LENGTH_MULTIPLE) if cfg.cuda_graphs else {}
    batches = UpdateBatches(DemoCollator(tokenizer), paired_sampler, unpaired_sampler, rank, **bucket)
    return Run(cfg, accelerator, model, raw_model, optimizer, batches, level, valid, test, labels_record, continues)


def start_run(run: Run, command: str | None) -> dict[str, Any]:
    """Begin writing: clear a failed start, copy a continued run's folder, load the checkpoint a resume or a
    continued run goes on from, start TensorBoard and record the config and ``command``; returns the bookkeeping
    (step, history, best models, wall time, the commits that trained)."""
    cfg, accelerator, out = run.cfg, run.accelerator, Path(run.cfg.output_dir)
    if not cfg.resume and accelerator.is_main_process and is_unstarted_run_folder(out):
        clear_unstarted_run_folder(out)  # a start that failed before its first checkpoint: begin afresh
    accelerator.wait_for_everyone()
    commit = provenance()["commit"]  # the code that trains; final_evaluation may run under a later one
    state = {"step": 0, "model_type": cfg.model_type, "history": [], "best": None, "best_speaker": None,
             "wall_time": 0.0, "commits": [commit]}
    if run.continues is not None:
        if accelerator.is_main_process:
            continue_run(run.continues, out)
        accelerator.wait_for_everyone()
    if cfg.resume or run.continues is not None:
        last = intact_checkpoint(out)
        saved = read_json(last / "train_state.json")
        if saved.get("model_type") != cfg.model_type:
            raise ValueError(f"checkpoint {last} is a {saved.get('model_type')!r} run, not {cfg.model_type!r}")
        accelerator.load_state(str(last))
        state = saved
        if "commits" not in state and run.continues is not None:  # a checkpoint whose train_state holds no commits
            finished = read_json(Path(cfg.continue_from) / "results.json")
            state["commits"] = finished.get("training_commits") or [finished.get("commit")]
        state.setdefault("commits", []).append(commit)
    else:  # a first start names the saved weights it starts from; a resume keeps what its start named
        sources = {"model": cfg.init_from, "follower": cfg.init_follower, "speaker": cfg.init_speaker}
        if any(sources.values()):
            state["initialised_from"] = {role: weights_source(path) for role, path in sources.items() if path}
    accelerator.init_trackers("tb", config={k: v for k, v in dataclasses.asdict(cfg).items()
                                            if isinstance(v, (int, float, str, bool))})
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "train_config.json", with_follower(dataclasses.asdict(cfg), saved=False))
        if command:
            world = accelerator.num_processes
            if world > 1 and command.startswith("python "):
                command = f"accelerate launch --num_processes {world} " + command[len("python "):]
            with open(out / "command.txt", "a", encoding="utf-8") as f:
                f.write(command + "\n")
    return state


def eager_update(run: Run, state: dict[str, Any]) -> Callable[[Mapping[str, torch.Tensor]], Any]:
    """A micro-step of the eager update (:func:`msvae_hf.training.update.update` through accelerate: its backward, its
    clipping once the micro-steps are summed), stopped before its step where the loss or, once summed, the
    gradients are not finite (fp16's gradients are scaled and its scaler skips such steps itself)."""
    cfg, accelerator, model = run.cfg, run.accelerator, run.model
    bad_terms: list[str] = []  # the non-finite loss terms of this update's micro-steps

    def check(output: Any) -> None:
        nonlocal bad_terms
        if not bad_terms and not bool(torch.isfinite(output.loss.detach())):  # one sync; terms on failure
            bad_terms = nonfinite_terms(scalar_terms(output))
        if accelerator.sync_gradients:
            check_finite_update(state["step"] + 1, bad_terms, None if cfg.mixed_precision == "fp16" else
                                run.raw_model.named_parameters())
            bad_terms = []

    def micro_step(batch: Mapping[str, torch.Tensor]) -> Any:
        batch = {name: t.to(accelerator.device, non_blocking=True) for name, t in batch.items()}
        with accelerator.accumulate(model):
            output = update(functools.partial(model, **batch), run.optimizer,
                            cfg.max_grad_norm if accelerator.sync_gradients else None,
                            backward=accelerator.backward, clip=accelerator.clip_grad_norm_, check=check)
            run.optimizer.zero_grad()
        return output

    return micro_step


def train_loop(run: Run, state: dict[str, Any]) -> None:
    """Update from ``state["step"]`` to ``max_updates``: log the terms, validate (keeping the best models) and
    checkpoint on their schedules. ``state`` is updated in place."""
    cfg, accelerator = run.cfg, run.accelerator
    bar = tqdm(total=cfg.max_updates, initial=state["step"], disable=not accelerator.is_main_process,
               desc="updates")
    started = time.time() - state["wall_time"]
    run.model.train()
    # built once the optimiser state is loaded (a resume), so that its graphs capture the tensors trained
    captured = (CapturedUpdate(run.raw_model, run.optimizer.optimizer, cfg.max_grad_norm, start=state["step"])
                if cfg.cuda_graphs else None)
    micro_step = captured or eager_update(run, state)  # the captured update is replayed; nothing waits for it
    micro = cfg.gradient_accumulation_steps
    batches = prefetched(run.batches, state["step"] * micro, cfg.max_updates * micro, cfg.loader_workers,
                         pin_memory=accelerator.device.type == "cuda")
    while state["step"] < cfg.max_updates:
        for _ in range(micro):
            output = micro_step(next(batches))
        state["step"] = step = state["step"] + 1
        bar.update(1)
        last = step == cfg.max_updates
        logs, validates = step % cfg.log_every == 0 or step == 1, step % cfg.eval_every == 0 or last
        saves = step % cfg.checkpoint_every == 0 or last
        if captured is not None and (logs or validates or saves):
            captured.check()  # a skipped non-finite update stops the run before anything is saved
        if logs:
            terms = captured.last_terms() if captured is not None else scalar_terms(output)
            accelerator.log({f"train/{k}": float(v) for k, v in terms.items()}, step=step)
            bar.set_postfix(loss=f"{float(terms['loss']):.3f}")
        if validates:
            validate_and_keep(run, state, step, bar)
        if saves:
            state["wall_time"] = time.time() - started
            save_checkpoint(accelerator, cfg.output_dir, state, cfg.keep_checkpoints)
    bar.close()


def validate_and_keep(run: Run, state: dict[str, Any], step: int, bar: Any) -> None:
    """Validate on the main process, keep the best models, and give every process its bookkeeping."""
    if run.accelerator.is_main_process:
        started = time.time()
        metrics = validate(run.raw_model, run.cfg, run.level, run.valid)
        state["validation_time"] = state.get("validation_time", 0.0) + time.time() - started
        run.accelerator.log(metrics, step=step)
        keep_best(state, metrics, step, run.raw_model, run.cfg.output_dir,
                  selections(run.cfg.model_type, run.cfg.speaker_metric, run.cfg.follower_metric,
                             run.cfg.also_select))
        bar.write(f"step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    state.update(_broadcast(state, run.accelerator))


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
    labels_record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate ``best/`` on the test seeds (SR) and the speaker checkpoint on the test split (BLEU), and the
    checkpoint chosen on ``also_select`` on the same test seeds (:func:`also_selected`).

    The speaker checkpoint is ``best_speaker/`` for MS-VAE and ``best/`` otherwise; both run on ``device``
    (the training device); writes ``results.json``, with ``labels_record`` (the record of the pseudo-labels the
    run read, :func:`~msvae_hf.data.pseudo_labels.pseudo_labels_record`) under ``pseudo_labels``.
    """
    model_cls = MODEL_TYPES[cfg.model_type][0]
    best = Path(cfg.output_dir) / "best"
    model = model_cls.from_pretrained(best).to(device)
    results: dict[str, Any] = {
        "model_type": cfg.model_type, "level": level, "seed": cfg.seed, "updates": state["step"],
        "wall_time_s": round(state["wall_time"], 1),
        "validation_time_s": round(state.get("validation_time", 0.0), 1), **provenance(device),
        "demos_from_hub": is_hub_repo_id(cfg.demos),  # as load_demos read cfg.demos here (a card names it)
        "best": state["best"], "history": state["history"],
    }
    if state.get("commits"):  # the commit each start or resume trained with; "commit" is the first
        results["commit"], results["training_commits"] = state["commits"][0], state["commits"]
    if state.get("initialised_from"):
        results["initialised_from"] = state["initialised_from"]
    if state.get("best_speaker"):
        results["best_speaker"] = state["best_speaker"]
    if labels_record is not None:  # who labelled D_u, how, and how long it took: part of a speaker-follower's cost
        results["pseudo_labels"] = labels_record
    srs = [h["valid/success_rate"] for h in state["history"] if "valid/success_rate" in h]
    if srs:
        results["paper_protocol_valid_sr"] = smoothed_max(srs, window=5)
        results["test"] = summary = follower_test(model, cfg, level)
        if cfg.also_select is not None and state.get(also_selected_folder(cfg.also_select)):
            results["also_selected"] = also_selected(cfg, state, summary, level, device)
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
    write_json(Path(cfg.output_dir) / "results.json", results, default=_json_default)
    return results


def follower_test(model: Any, cfg: TrainConfig, level: str) -> dict[str, Any]:
    """A follower checkpoint's test: ``cfg.test_episodes`` greedy episodes of ``level`` from the test seeds
    (:func:`~msvae_hf.evaluation.evaluate.evaluate_follower`'s summary), the one protocol of every checkpoint a run
    tests."""
    return evaluate_follower(model, level, cfg.test_episodes, TEST_SEED_START, cfg.eval_batch_size,
                             num_workers=cfg.eval_workers)[0]


def also_selected(cfg: TrainConfig, state: dict, best_test: dict[str, Any], level: str,
                  device: torch.device | str) -> dict[str, Any]:
    """The checkpoint chosen on ``cfg.also_select`` (:func:`also_selected_folder`): its metric, folder, update and
    validation score, and its test on the seeds ``best/``'s took (``best_test``, taken as it is where both chose
    one update)."""
    folder = also_selected_folder(cfg.also_select)
    kept = state[folder]
    if kept["step"] == state["best"]["step"]:
        test = best_test
    else:
        test = follower_test(MODEL_TYPES[cfg.model_type][0].from_pretrained(Path(cfg.output_dir) / folder).to(device),
                             cfg, level)
    return {"metric": cfg.also_select, "folder": folder, "best": kept, "test": test}


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value)}")
