"""A run folder: its layout, and what the trainers guarantee about it (one trainer at a time, writes that leave
nothing half-done, a stop at the first non-finite loss or gradient).

Layout (``output_dir/``)::

    .lock                      the running trainer's lock (RunLock), naming it
    checkpoints/step-000500/   accelerate save_state: model, optimizer, RNG states + train_state.json
    best/                      save_pretrained of the best model by validation (config, safetensors, tokenizer):
                               by follower_metric for followers and MS-VAE (SR unless told), by
                               speaker_metric for speakers (BLEU unless told; selections)
    best_speaker/              MS-VAE only: the best by speaker_metric, the checkpoint of its speaker role
    best_reading/, best_sr/    where also_select names that follower metric: the best by it too, tested beside best/
    tb/                        TensorBoard logs
    train_config.json          the run's TrainConfig; command.txt: each command line that started or resumed it
    results.json               validation history, App. D's smoothed max, test SR / BLEU; on pseudo-labels, their
                               record (pseudo_labels: who labelled them, how, how long); for a run started from
                               saved weights, what they were (initialised_from: weights_source)

A checkpoint or ``best/`` is written to a temporary folder and renamed into place, so a killed run never leaves
a half-written one; the last ``keep_checkpoints`` are kept. Every failure here is one line naming the folder,
file, update or field, and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import socket
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import extract_model_from_parallel
from huggingface_hub import try_to_load_from_cache
from safetensors.torch import load_file

LOCK_NAME = ".lock"
#: Disk space below which a failed write is taken for a full disk (torch's zip writer drops the errno).
NEARLY_FULL_BYTES = 16 * 2**20
_HELD: set[int] = set()  # the lock files this process holds, closed in every child it forks


def _close_held_in_child() -> None:
    """A forked child (e.g. an evaluation worker) drops its copies of the held locks' descriptors, so the lock dies
    with the trainer, not with the last orphaned worker; closing a copy does not unlock the parent's."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_in_child)


class RunFolderBusy(RuntimeError):
    """Another process holds the run folder's lock."""


class DiskFull(OSError):
    """ENOSPC raised by :func:`writing`, naming what it removed; an outer ``writing`` passes it on as it is."""


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm of an update is NaN or infinite."""


class RunLock:
    """An exclusive ``fcntl`` lock on ``folder/.lock``, held until :meth:`release` (or the process ends); ``busy``
    says what to do when another process holds it.

    The lock file names its holder (host, process id, command) so that a refused second trainer can say who
    holds the folder. The kernel drops the lock when the holder dies, so a killed run never leaves it stuck.
    """

    def __init__(self, folder: str | Path, command: str | None = None,
                 busy: str = "wait for it to finish or train into another output_dir") -> None:
        import fcntl  # POSIX only: the package trains on Linux and macOS

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / LOCK_NAME
        while True:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if not _flock_soon(self._fd, fcntl.LOCK_EX):
                holder = _holder_line(self.path)
                os.close(self._fd)
                raise RunFolderBusy(f"{self.folder} is in use by {holder}: {busy}") from None
            try:  # the holder before may have removed the file (its folder) while we waited: lock the one there now
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    break
            except FileNotFoundError:
                self.folder.mkdir(parents=True, exist_ok=True)
            os.close(self._fd)
        _HELD.add(self._fd)
        holder = f"pid {os.getpid()} on {socket.gethostname()}" + (f" ({command})" if command else "")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, holder.encode(), 0)

    def release(self) -> None:
        """Unlock (the file stays; an unlocked file is no claim)."""
        import fcntl

        if self._fd is not None:
            _HELD.discard(self._fd)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _flock_soon(fd: int, kind: int, tries: int = 5, wait_s: float = 0.05) -> bool:
    """Take ``fcntl.flock`` ``kind`` on ``fd`` without blocking, trying ``tries`` times ``wait_s`` apart (a moment's
    hold, such as :func:`run_folder_holder`'s, is not a holder); False where another holds it throughout."""
    import fcntl

    for attempt in range(tries):
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < tries:
                time.sleep(wait_s)
    return False


def _holder_line(path: Path) -> str:
    """What a :class:`RunLock` file says of its holder."""
    return path.read_text(encoding="utf-8", errors="replace").strip() or "another process"


def run_folder_holder(folder: str | Path) -> str | None:
    """Who holds ``folder``'s :class:`RunLock` (the line it wrote), or None where no live process does. Creates
    nothing and takes no lock that outlives the call: a driver asks before it touches a run folder."""
    import fcntl

    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if not _flock_soon(fd, fcntl.LOCK_SH, tries=1):
            return _holder_line(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_empty_run_folder(folder: str | Path) -> bool:
    """True when ``folder`` does not exist or holds nothing but its lock file."""
    folder = Path(folder)
    if not folder.exists():
        return True
    return folder.is_dir() and all(p.name == LOCK_NAME for p in folder.iterdir())


#: What a start leaves in its run folder before its first checkpoint.
START_FILES = frozenset({LOCK_NAME, "train_config.json", "command.txt", "tb", "checkpoints"})


def is_unstarted_run_folder(folder: str | Path) -> bool:
    """True when ``folder`` holds only what a start that failed before its first checkpoint leaves (its config,
    command line, TensorBoard logs and no complete checkpoint): nothing to resume and nothing to keep, so a new
    run may start there afresh."""
    folder = Path(folder)
    if not folder.is_dir() or any(p.name not in START_FILES for p in folder.iterdir()):
        return False
    return not checkpoint_dirs(folder)


def clear_unstarted_run_folder(folder: str | Path) -> None:
    """Remove what :func:`is_unstarted_run_folder` allows, but the lock."""
    for path in Path(folder).iterdir():
        if path.name != LOCK_NAME:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the errors it was raised from or during (``__cause__``, ``__context__``), outermost first."""
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        err = err.__cause__ or err.__context__
    return seen


def _is_disk_full(err: BaseException, path: Path) -> bool:
    """ENOSPC anywhere in ``err``'s chain (datasets wraps a failed cache write in its own error), or a failed write
    where the disk is (nearly) full: torch's zip writer and C++ streams drop the errno ("unexpected pos", "iostream
    error")."""
    chain = _chain(err)
    if any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in chain):
        return True
    if any("no space left" in str(e).lower() for e in chain):
        return True
    if not any(isinstance(e, (OSError, RuntimeError)) for e in chain):
        return False
    folder = next((p for p in (path, *path.parents) if p.exists()), None)
    try:
        return folder is not None and shutil.disk_usage(folder).free < NEARLY_FULL_BYTES
    except OSError:
        return False


@contextlib.contextmanager
def writing(path: str | Path, then: str = "earlier checkpoints are intact: free space, then resume"
            ) -> Iterator[Path]:
    """Write a file or folder at ``path`` (a temporary name, renamed into place by the caller): on any error
    the partial ``path`` is removed; a full disk becomes one :class:`DiskFull` (an ``OSError(ENOSPC)``) naming
    ``path`` and saying ``then`` (what is intact, what to do); one an inner ``writing`` raised goes on unchanged."""
    path = Path(path)
    try:
        yield path
    except BaseException as err:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        if isinstance(err, Exception) and not isinstance(err, DiskFull) and _is_disk_full(err, path):
            raise DiskFull(errno.ENOSPC, f"no space left on device writing {path}; it was removed and {then}") from err
        raise


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any], may_change: Iterable[str],
                       defaults: Mapping[str, Any] | None = None) -> list[str]:
    """``"name: X there, Y here"`` for each field of ``current`` (but ``may_change``) that ``saved`` holds
    otherwise; a field ``saved`` lacks (a config written before the field existed) counts as its value in
    ``defaults``, and as equal where ``defaults`` has none."""
    skip, defaults = set(may_change), defaults or {}
    differ = []
    for name, value in current.items():
        there = saved[name] if name in saved else defaults.get(name, value)
        if name not in skip and there != value:
            differ.append(f"{name}: {there!r} there{'' if name in saved else ' (its default)'}, {value!r} here")
    return differ


def read_json(path: str | Path, fix: str = "restore it or start a new run") -> dict[str, Any]:
    """A JSON file's object; ValueError naming the file (and ``fix``: what to do) when it is empty, cut short or not
    JSON."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        if not text.strip():
            raise ValueError(f"{path} is empty: it was cut short (a full disk, a killed write) or edited; {fix}")
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}): it was cut short or "
                         f"edited; {fix}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not an object: it was edited; {fix}")
    return value


def write_json(path: str | Path, value: Any, indent: int | None = 2, default: Any = None) -> None:
    """Write ``value`` as JSON at ``path`` in one rename: a crash or a full disk leaves the file as it was (or
    absent), never cut short; a full disk is one ``OSError(ENOSPC)`` naming ``path`` (see :func:`writing`)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(tmp, then=f"{path.name} is as it was: free space, then rerun"):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=indent, default=default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def scalar_terms(output: Any) -> dict[str, torch.Tensor]:
    """The scalar tensors of a model output (the loss and, for MS-VAE, every term of Eq. 10), detached."""
    return {k: v.detach() for k, v in output.items() if torch.is_tensor(v) and v.dim() == 0}


def nonfinite_terms(terms: Mapping[str, torch.Tensor | None]) -> list[str]:
    """The names of the terms (tensors of an update's loss, e.g. ``loss``, ``j_bar``, ``v``) holding NaN or inf."""
    return [name for name, value in terms.items()
            if torch.is_tensor(value) and not bool(torch.isfinite(value.detach()).all())]


def gradient_norm(grads: Iterable[torch.Tensor]) -> float:
    """The total 2-norm of ``grads`` (inf or NaN where one is not finite or the sum overflows)."""
    norms = [torch.linalg.vector_norm(g.detach().float()) for g in grads]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def check_finite_update(step: int, bad_terms: list[str],
                        parameters: Iterable[tuple[str, torch.nn.Parameter]] | None = None) -> float | None:
    """Stop update ``step`` (1-based) where a term of its loss (``bad_terms``, :func:`nonfinite_terms` of its
    micro-steps) or, given ``parameters`` (named, with gradients), its gradient norm is not finite; returns the
    norm. NonFiniteError names the update and the terms, or the first parameter whose gradient is not finite.

    With several processes the gradients are checked after their all-reduce, where they are the same on every
    process, so every process stops at the same update (one whose loss alone is not finite names its terms).
    """
    advice = ("; nothing of this update was saved: lower the learning rate or clip gradients (max_grad_norm), "
              "then resume from the last checkpoint")
    if bad_terms:
        raise NonFiniteError(f"update {step}: the loss is not finite (non-finite: {', '.join(bad_terms)})" + advice)
    if parameters is None:
        return None
    named = [(name, p.grad) for name, p in parameters if p.grad is not None]
    norm = gradient_norm(g for _, g in named)
    if not math.isfinite(norm):
        first = next((name for name, g in named if not bool(torch.isfinite(g).all())), None)
        where = f"first at {first}" if first else "every gradient is finite, their norm overflows"
        raise NonFiniteError(f"update {step}: the gradient norm is {norm} ({where})" + advice)
    return norm


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step-") and (p / "train_state.json").exists())


#: The file of a checkpoint that lists every other file of it with its sha256, written last.
CHECKSUMS = "checksums.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_damage(folder: str | Path) -> str | None:
    """Why the checkpoint ``folder`` cannot be resumed exactly (a file missing, or not the bytes its digest in
    :data:`CHECKSUMS` says), or None where every file is intact. A checkpoint written without digests is taken
    as it is (nothing to check it against)."""
    folder = Path(folder)
    listed = folder / CHECKSUMS
    if not listed.is_file():
        return None
    try:
        digests = json.loads(listed.read_text())
    except (OSError, ValueError) as err:
        return f"{listed} is unreadable ({err})"
    for name, digest in digests.items():
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        if _sha256(path) != digest:
            return f"{path} is damaged (its sha256 differs from the one written with it)"
    return None


def intact_checkpoint(output_dir: str | Path) -> Path:
    """The newest checkpoint of ``output_dir`` whose files are all intact (:func:`checkpoint_damage`); each newer,
    damaged one is named in a warning. None intact: a ValueError naming the damaged files."""
    damaged = []
    for folder in reversed(checkpoint_dirs(output_dir)):
        why = checkpoint_damage(folder)
        if why is None:
            if damaged:
                warnings.warn(f"resuming from {folder}, the newest intact checkpoint: " + "; ".join(damaged),
                              stacklevel=2)
            return folder
        damaged.append(why)
    raise ValueError("no intact checkpoint to resume: " + "; ".join(damaged) + " (start the run again in a new "
                     "output_dir)")


def save_checkpoint(accelerator: Accelerator, output_dir: str, state: dict, keep: int) -> Path:
    """accelerate ``save_state`` into a temporary folder with its files' digests (:data:`CHECKSUMS`), then an
    atomic rename; prune old ones."""
    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{state['step']:07d}"
    tmp = root / f".tmp-step-{state['step']:07d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    with writing(tmp):
        accelerator.save_state(str(tmp))
        accelerator.wait_for_everyone()  # every process's random states are written
        if accelerator.is_main_process:
            (tmp / "train_state.json").write_text(json.dumps(state, indent=2))
            digests = {str(p.relative_to(tmp)): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
            (tmp / CHECKSUMS).write_text(json.dumps(digests, indent=1))
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


def weights_source(path: str) -> dict[str, Any]:
    """What a run starts from (``init_from``, ``init_follower``, ``init_speaker``), as ``initialised_from`` records
    it: the path as given and the sha256 of its ``model.safetensors``; for a local folder beside a ``results.json``
    (a run's ``best/``), the commit and machine that record names (a CPU run's draw depends on the CPU); for a Hub
    id, the revision of the cached snapshot ``from_pretrained`` read."""
    source: dict[str, Any] = {"path": path}
    folder, results = Path(path), None
    if folder.is_dir():
        weights, results = folder / "model.safetensors", folder.parent / "results.json"
    else:  # a Hub id: the local cache's snapshot, named by its commit
        cached = try_to_load_from_cache(path, "model.safetensors")
        weights = Path(cached) if isinstance(cached, str) else None
        if weights is not None:
            source["revision"] = weights.parent.name
    if weights is not None and weights.is_file():
        source["sha256"] = _sha256(weights)
    if results is not None and results.is_file():
        trained = read_json(results)
        source.update({k: trained[k] for k in ("commit", "machine") if k in trained})
    return source


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


def keep_best(state: dict, metrics: dict[str, float], step: int, model: Any, output_dir: str,
              chosen: dict[str, str]) -> None:
    """Add a validation to ``state["history"]`` and save ``model`` into each folder of ``chosen`` (folder -> metric,
    :func:`selections`) whose metric it improves (``state[folder]`` holds the step and score kept; a tie keeps the
    earlier)."""
    state["history"].append({"step": step, **metrics})
    for name, metric in chosen.items():
        score, kept = metrics.get(metric), state.get(name)
        if score is not None and (kept is None or score > kept["score"]):
            state[name] = {"step": step, "score": score}
            save_best(model, output_dir, name)


#: What ``speaker_metric`` names (a training config's): the validation metric that chooses a speaker.
SPEAKER_METRICS = {"bleu": "valid/bleu", "demonstrated": "valid/demonstrated"}
#: What ``follower_metric`` names: the validation metric that chooses a follower (MS-VAE's ``best/``): its SR, or its
#: SR by reading (SR minus SR told another episode's mission; :func:`~msvae_hf.evaluation.metrics.follower_summary`).
FOLLOWER_SELECTION = {"sr": "valid/success_rate", "reading": "valid/reading"}


def primary_metric(model_type: str, speaker_metric: str = "bleu", follower_metric: str = "sr") -> str:
    """The validation metric that chooses ``best/``: a speaker's ``speaker_metric`` (:data:`SPEAKER_METRICS`; BLEU
    unless told), a follower's and MS-VAE's ``follower_metric`` (:data:`FOLLOWER_SELECTION`; SR unless told)."""
    if model_type == "speaker":
        return SPEAKER_METRICS[speaker_metric]
    return FOLLOWER_SELECTION[follower_metric]


def also_selected_folder(follower_metric: str) -> str:
    """The folder that keeps the best model by ``follower_metric`` where a run also selects on it (``also_select``):
    ``best_reading`` or ``best_sr``."""
    return f"best_{follower_metric}"


#: Every folder of a run that holds a model chosen on validation (:func:`selections`), ``best/`` first.
BEST_FOLDERS = ("best", "best_speaker", *(also_selected_folder(m) for m in FOLLOWER_SELECTION))


def selections(model_type: str, speaker_metric: str = "bleu", follower_metric: str = "sr",
               also_select: str | None = None) -> dict[str, str]:
    """Which folder keeps the best model by which validation metric.

    MS-VAE is both a follower and a speaker (Sec. 5.1 evaluates it by SR and by BLEU), so it keeps one
    checkpoint per role, each chosen by its own metric, as the baseline follower and speaker are. A follower or
    MS-VAE that also selects on another follower metric (``also_select``) keeps that choice beside ``best/``
    (:func:`also_selected_folder`): two choices from one training.
    """
    chosen = {"best": primary_metric(model_type, speaker_metric, follower_metric)}
    if model_type == "msvae":
        chosen["best_speaker"] = SPEAKER_METRICS[speaker_metric]
    if also_select is not None:
        chosen[also_selected_folder(also_select)] = FOLLOWER_SELECTION[also_select]
    return chosen
