"""What the trainers guarantee about a run folder: one trainer at a time, writes that leave nothing half-done,
a resume that trains what the folder trained, and a stop at the first non-finite loss or gradient.

Every failure here is one line naming the folder, file, update or field, and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import shutil
import socket
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

LOCK_NAME = ".lock"


class RunFolderBusy(RuntimeError):
    """Another process holds the run folder's lock."""


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm of an update is NaN or infinite."""


class RunLock:
    """An exclusive ``fcntl`` lock on ``folder/.lock``, held until :meth:`release` (or the process ends).

    The lock file names its holder (host, process id, command) so that a refused second trainer can say who
    holds the folder. The kernel drops the lock when the holder dies, so a killed run never leaves it stuck.
    """

    def __init__(self, folder: str | Path, command: str | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / LOCK_NAME
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.path.read_text(encoding="utf-8", errors="replace").strip() or "another process"
            os.close(self._fd)
            raise RunFolderBusy(f"{self.folder} is in use by {holder}: wait for it to finish or train into "
                                "another output_dir") from None
        holder = f"pid {os.getpid()} on {socket.gethostname()}" + (f" ({command})" if command else "")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, holder.encode(), 0)

    def release(self) -> None:
        """Unlock (the file stays; an unlocked file is no claim)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def is_empty_run_folder(folder: str | Path) -> bool:
    """True when ``folder`` does not exist or holds nothing but its lock file."""
    folder = Path(folder)
    if not folder.exists():
        return True
    return folder.is_dir() and all(p.name == LOCK_NAME for p in folder.iterdir())


def _is_disk_full(err: BaseException) -> bool:
    """ENOSPC, or torch's zip writer's failure when the disk is full (it drops the errno)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err).lower()
    return "no space left" in text or "quota exceeded" in text or "file write failed" in text


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[Path]:
    """Write a file or folder at ``path`` (a temporary name, renamed into place by the caller): on any error
    the partial ``path`` is removed; a full disk becomes one ``OSError(ENOSPC)`` naming ``path``."""
    path = Path(path)
    try:
        yield path
    except BaseException as err:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        if isinstance(err, Exception) and _is_disk_full(err):
            raise OSError(errno.ENOSPC, f"no space left on device writing {path}; it was removed and earlier "
                                        "checkpoints are intact: free space, then resume") from err
        raise


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any], may_change: Iterable[str]) -> list[str]:
    """``"name: X there, Y here"`` for each field of ``current`` (but ``may_change``) that ``saved`` holds
    otherwise (a field ``saved`` lacks counts as its default, i.e. equal)."""
    skip = set(may_change)
    return [f"{name}: {saved[name]!r} there, {value!r} here" for name, value in current.items()
            if name not in skip and name in saved and saved[name] != value]


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON file's object; ValueError naming the file when it is cut short or not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}): it was cut short or "
                         "edited; restore it or start a new run") from None


def check_finite_update(step: int, terms: Mapping[str, torch.Tensor | None],
                        parameters: Iterable[tuple[str, torch.nn.Parameter]] | None = None) -> float | None:
    """Stop update ``step`` (1-based) when its loss or gradient norm is not finite.

    ``terms`` are the update's scalar loss terms, ``"loss"`` first; ``parameters`` (named, with gradients),
    when given, have their total gradient norm checked too, which is returned. NonFiniteError names the
    update, the non-finite terms or the first parameter whose gradient is not finite.
    """
    loss = terms["loss"]
    if not torch.isfinite(loss.detach()).all():
        bad = [name for name, value in terms.items()
               if name != "loss" and value is not None and not torch.isfinite(value.detach()).all()]
        raise NonFiniteError(f"update {step}: the loss is {float(loss.detach().float().sum())}"
                             + (f" (non-finite: {', '.join(bad)})" if bad else "")
                             + "; nothing of this update was saved: lower the learning rate or clip gradients "
                               "(max_grad_norm), then resume from the last checkpoint")
    if parameters is None:
        return None
    named = [(name, p.grad) for name, p in parameters if p.grad is not None]
    if not named:
        return None
    norm = float(torch.nn.utils.get_total_norm([g.detach() for _, g in named]))
    if not math.isfinite(norm):
        first = next(name for name, g in named if not torch.isfinite(g).all())
        raise NonFiniteError(f"update {step}: the gradient norm is {norm} (first at {first}); nothing of this "
                             "update was saved: lower the learning rate or clip gradients (max_grad_norm), then "
                             "resume from the last checkpoint")
    return norm
