"""Several MS-VAE runs of one config (seeds) trained together as one :class:`~msvae_hf.stacked.StackedMSVAE`.

Each run is what :func:`msvae_hf.training.train` makes of its config alone: the same initial weights
(``set_seed(seed)`` then ``build_model``), the same batches (its own :class:`StepSampler` s), the same noise
(a generator in the state torch's is in when ``train`` starts its loop), its own Adam state, and in its own
``output_dir`` the same ``best/``, ``best_speaker/``, ``tb/``, ``train_config.json`` and ``results.json``
(with ``stacked`` added). What the runs share is the stack's folder::

      stack_dir/checkpoints/step-000500/   stack.pt (stacked weights, Adam, each run's generator) + train_state.json

so a stack resumes as a stack (``resume=True``), bit for bit. One process, one device (CUDA when visible),
fp32, no gradient accumulation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from .data.collator import DemoCollator
from .data.sampler import StepSampler
from .run_folder import RunLock, check_finite_update, checkpoint_dirs, is_empty_run_folder, nonfinite_terms, writing
from .runtime import adam, provenance, retain_freed_memory
from .stacked import TRAJECTORY_KEYS, StackedMSVAE, stack_batches
from .tokenization_msvae import MSVAETokenizer
from .train_config import TrainConfig
from .training import build_model, check_resume_config, final_evaluation, keep_best, load_training_data, validate

#: TrainConfig fields in which the runs of one stack may differ.
PER_RUN = ("seed", "output_dir")


def check_stack(cfgs: Sequence[TrainConfig]) -> None:
    """The runs must be MS-VAE runs that differ only in seed and output_dir, in the supported modes."""
    if not cfgs:
        raise ValueError("a stack needs at least one run's config")
    shared = [{k: v for k, v in dataclasses.asdict(c).items() if k not in PER_RUN} for c in cfgs]
    for i, values in enumerate(shared[1:], 1):
        if values != shared[0]:
            differ = sorted(k for k in values if values[k] != shared[0][k])
            raise ValueError(f"run {i}'s config differs from run 0's in {differ}; a stack's runs differ only in "
                             f"{' and '.join(PER_RUN)}")
    cfg = cfgs[0]
    if cfg.model_type != "msvae":
        raise ValueError(f"a stack trains MS-VAE runs, got model_type {cfg.model_type!r}")
    if cfg.mixed_precision != "no" or cfg.gradient_accumulation_steps != 1:
        raise ValueError("a stack trains in fp32 without gradient accumulation (mixed_precision: no, "
                         "gradient_accumulation_steps: 1)")
    for field in PER_RUN:
        values = [getattr(c, field) for c in cfgs]
        if len(set(values)) != len(values):
            raise ValueError(f"every run of a stack needs its own {field}, got {values}")


def train_stacked(cfgs: Sequence[TrainConfig], stack_dir: str | Path, command: str | None = None,
                  device: str | torch.device | None = None) -> list[dict[str, Any]]:
    """Train the runs ``cfgs`` together; returns each run's results.json. ``cfgs[0].resume`` continues the
    stack from the latest checkpoint in ``stack_dir``; ``device`` defaults to CUDA when visible."""
    check_stack(cfgs)
    cfg = cfgs[0]
    stack_dir = Path(stack_dir)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    check_stack_folders(cfgs, stack_dir)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.retain_freed_memory:
        retain_freed_memory()
    paired, unpaired, valid, test, level = load_training_data(cfg)
    if unpaired is None or not len(unpaired):
        raise ValueError(f"{cfg.demos}: a stack of MS-VAE runs needs the unpaired split")
    tokenizer = MSVAETokenizer.from_grammar()
    collator = DemoCollator(tokenizer)
    models, generators = [], []
    for run in cfgs:  # as train(): set_seed, build; its loop then draws from torch's generator as it is now
        set_seed(run.seed)
        models.append(build_model(run, tokenizer))
        generator = torch.Generator(device=device)
        if device.type == "cpu":
            generator.set_state(torch.get_rng_state())
        else:  # set_seed seeded CUDA's generator with the seed; train()'s noise on the GPU comes from there
            generator.manual_seed(run.seed)
        generators.append(generator)
    if not models[0].config.uses_unpaired:
        raise ValueError("a stack trains with V or D' (gamma or alpha != 0): its batches hold unpaired trajectories")
    stacked = StackedMSVAE(models).to(device)
    evaluator = models[0].to(device)  # each run's weights are loaded into it to validate and save
    optimizer = adam(stacked.parameters(), cfg.learning_rate)
    samplers = [(StepSampler(paired, cfg.batch_size, 1, run.seed, stream=0),
                 StepSampler(unpaired, cfg.unpaired_batch_size or cfg.batch_size, 1, run.seed, stream=1))
                for run in cfgs]

    with contextlib.ExitStack() as locks:
        for folder in (stack_dir, *(Path(c.output_dir) for c in cfgs)):
            locks.enter_context(RunLock(folder, command))
        check_stack_folders(cfgs, stack_dir)  # again, under the locks
        existing = checkpoint_dirs(stack_dir)
        commit = provenance()["commit"]
        state: dict[str, Any] = {"step": 0, "wall_time": 0.0, "seeds": [c.seed for c in cfgs], "commits": [commit],
                                 "runs": [{"history": [], "best": None, "best_speaker": None} for _ in cfgs]}
        if cfg.resume:
            last = existing[-1]
            saved = torch.load(last / "stack.pt", map_location=device, weights_only=True)
            state = json.loads((last / "train_state.json").read_text())
            if state["seeds"] != [c.seed for c in cfgs]:
                raise ValueError(f"checkpoint {last} holds the seeds {state['seeds']}, not {[c.seed for c in cfgs]}")
            state["commits"].append(commit)
            stacked.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            for generator, generator_state in zip(generators, saved["generators"]):
                generator.set_state(generator_state.cpu())
        writers = []
        for run in cfgs:
            out = Path(run.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "train_config.json").write_text(json.dumps(dataclasses.asdict(run), indent=2))
            if command:
                with open(out / "command.txt", "a", encoding="utf-8") as f:
                    f.write(command + "\n")
            writers.append(SummaryWriter(str(out / "tb")))

        bar = tqdm(total=cfg.max_updates, initial=state["step"], desc=f"updates ({len(cfgs)} runs)")
        started = time.time() - state["wall_time"]
        stacked.train()
        while state["step"] < cfg.max_updates:
            step = state["step"]
            batches = []
            for paired_sampler, unpaired_sampler in samplers:
                batch = collator(paired_sampler.rows(step, 0))
                u = collator(unpaired_sampler.rows(step, 0))
                batches.append({**batch, **{f"unpaired_{k}": u[k] for k in TRAJECTORY_KEYS}})
            batch = {k: v.to(device) for k, v in stack_batches(batches).items()}
            output = stacked(batch, stacked.draw_noise(generators, batch))
            output.loss.sum().backward()  # each run's loss reaches only its own slice of the parameters
            bad = [f"{name} of seed {run.seed}" for r, run in enumerate(cfgs) for name in nonfinite_terms(
                {"loss": output.loss[r], "j_bar": output.j_bar[r], "v": output.v[r],
                 "domain_distance": output.domain_distance[r]})]
            check_finite_update(step + 1, bad, stacked.named_parameters())
            if cfg.max_grad_norm:
                clip_grad_norm_per_run(stacked, cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            state["step"] = step = step + 1
            bar.update(1)
            if step % cfg.log_every == 0 or step == 1:
                for r, writer in enumerate(writers):
                    writer.add_scalar("train/loss", float(output.loss[r].detach()), step)
                    for name in ("j_bar", "v", "a_1", "a_2", "b_1", "b_2", "c_1", "c_2"):
                        writer.add_scalar(f"train/{name}", float(getattr(output, name)[r].detach().mean()), step)
                    writer.add_scalar("train/domain_distance", float(output.domain_distance[r].detach()), step)
                bar.set_postfix(loss=f"{float(output.loss.detach().mean()):.3f}")
            if step % cfg.eval_every == 0 or step == cfg.max_updates:
                for r, run in enumerate(cfgs):
                    evaluator.load_state_dict(stacked.state_dict_of(r))
                    metrics = validate(evaluator, run, level, valid)
                    for name, value in metrics.items():
                        writers[r].add_scalar(name, value, step)
                    keep_best(state["runs"][r], metrics, step, run, evaluator)
            if step % cfg.checkpoint_every == 0 or step == cfg.max_updates:
                state["wall_time"] = time.time() - started
                save_stack_checkpoint(stack_dir, state, stacked, optimizer, generators, cfg.keep_checkpoints)
        bar.close()
        for writer in writers:
            writer.close()
        results = []
        for r, run in enumerate(cfgs):
            run_state = {"step": state["step"], "wall_time": state["wall_time"], "commits": state["commits"],
                         **state["runs"][r]}
            stacked_info = {"runs": len(cfgs), "seeds": state["seeds"], "stack_dir": str(stack_dir)}
            results.append(final_evaluation(run, run_state, level, test, device=device,
                                            extra={"stacked": stacked_info}))
        return results


def check_stack_folders(cfgs: Sequence[TrainConfig], stack_dir: Path) -> None:
    """Whether the stack may train in ``stack_dir`` and its runs' folders, writing nothing: a new stack needs them
    empty, a resume a checkpoint in ``stack_dir`` and each run's own config (:func:`check_resume_config`)."""
    if cfgs[0].resume:
        if not checkpoint_dirs(stack_dir):
            raise FileNotFoundError(f"nothing to resume in {stack_dir}: it holds no checkpoint (checkpoints/step-*)")
        for run in cfgs:
            check_resume_config(run)
        return
    for out in (stack_dir, *(Path(c.output_dir) for c in cfgs)):
        if not is_empty_run_folder(out):
            raise FileExistsError(f"{out} is not empty: resume the stack or choose other folders")


def clip_grad_norm_per_run(stacked: StackedMSVAE, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for each run apart: its gradients' total 2-norm at most ``max_norm``.
    Returns the norms before clipping, [R]."""
    grads = [p.grad for p in stacked.parameters() if p.grad is not None]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).norm(dim=0)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


def save_stack_checkpoint(stack_dir: Path, state: dict, stacked: StackedMSVAE, optimizer: torch.optim.Optimizer,
                          generators: Sequence[torch.Generator], keep: int) -> Path:
    """The stack's weights, Adam state and generators into a temporary folder, then an atomic rename."""
    root = stack_dir / "checkpoints"
    final, tmp = root / f"step-{state['step']:07d}", root / f".tmp-step-{state['step']:07d}"
    shutil.rmtree(tmp, ignore_errors=True)
    with writing(tmp):
        tmp.mkdir(parents=True)
        torch.save({"model": stacked.state_dict(), "optimizer": optimizer.state_dict(),
                    "generators": [g.get_state() for g in generators]}, tmp / "stack.pt")
        (tmp / "train_state.json").write_text(json.dumps(state, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in checkpoint_dirs(stack_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final
