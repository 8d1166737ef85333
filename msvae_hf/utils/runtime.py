"""The process a run trains in: torch threads, the host allocator, the optimiser every run uses, the provenance
(commit, machine) every result records and the digest of the package's code. Used by the trainers, the scripts and
the benchmarks."""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch


def check_output_folder(out: str | os.PathLike, **inputs: str | os.PathLike | None) -> None:
    """Refuse an output folder that is, holds or lies inside one of a command's ``inputs`` (named by keyword, e.g.
    ``demos=...``): replacing it would delete what the command reads. Hub ids and unset inputs are skipped."""
    target = Path(out).resolve()
    for name, path in inputs.items():
        if path is None or not Path(path).exists():
            continue
        source = Path(path).resolve()
        if target == source or target in source.parents or source in target.parents:
            relation = "is" if target == source else ("holds" if target in source.parents else "lies inside")
            raise ValueError(f"the output folder {out} {relation} the {name} input {path}: writing it would delete "
                             f"what it reads; choose another output folder")


def unwritable_folder(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` could not be made or written into (a file in its path, a parent without write permission), or
    None; nothing is created."""
    path = Path(folder)
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so {folder} cannot be a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder} cannot be written: {existing} is not writable"
    return None


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


def adam(parameters, learning_rate: float) -> torch.optim.Adam:
    """The optimiser of every run (App. D: Adam): its ``foreach`` implementation, one kernel per operation for
    all parameters, where the CPU's default steps each parameter on its own; both give the same values."""
    return torch.optim.Adam(parameters, lr=learning_rate, foreach=True)


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


def cpu_model() -> str:
    """The CPU's model name (vendors' kernels differ in their paths on one instruction set, e.g. MKL on AMD)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@functools.cache
def code_digest() -> str | None:
    """sha256 of this package's Python source (each file's path and bytes): what a result computed by the code
    depends on, where a cache must not outlive a change of it. None where no source file is on disk (an install
    of compiled files alone)."""
    package = Path(__file__).resolve().parents[1]
    files = sorted(package.rglob("*.py"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(package).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def provenance(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The code and machine behind a result: the git commit of this package's checkout (None outside a git
    checkout; ``-dirty`` when it has uncommitted changes), and the host's CPU (its model and the instruction set
    torch dispatches to, which decide a CPU run's rounding), CPU count and accelerator."""
    root = Path(__file__).resolve().parents[2]  # the checkout holding msvae_hf/
    try:
        commit = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
                                capture_output=True, text=True, check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"commit": commit, "machine": machine(device)}


def machine(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The host behind a result (:func:`provenance`'s ``machine``): platform, CPU model, the instruction set torch
    dispatches to, CPU count, torch threads and the accelerator that ``device`` names."""
    device = torch.device(device)
    accelerator = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"platform": platform.platform(), "cpu": cpu_model(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "device": accelerator}
