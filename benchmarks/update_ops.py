"""Operators one MS-VAE update launches, on the CPU, for the default layout and the static one (the GPU's captured
update), at several padded lengths; and the peak activation memory of one update.

    python benchmarks/update_ops.py [--lengths 32 64] [--batch-size 128] [--tiny] [--demos DIR --runs 16]
                                    [--out results/benchmarks/update_ops.json]

Each operator that computes (every ATen call but views) becomes at least one kernel on a GPU. A recurrence
counts as the two operators cuDNN runs it with (``_cudnn_rnn`` and its backward): the CPU runs a GRU step by
step, so its own operators are counted apart and replaced by those two. The optimiser step is left out (fused
Adam: one kernel per parameter group on a GPU). Peak memory is the largest total of live tensors during
forward and backward (torch.cuda's caching allocator adds its rounding on a GPU). With ``--demos``, the host's
assembly of one update's batches for ``--runs`` runs, on one core.
"""

from __future__ import annotations

import argparse
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from train_step import TIMED_FOLLOWER, TINY

import msvae_hf  # noqa: F401
from msvae_hf import MSVAEConfig, MSVAEModel
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training.graphed import FRAME_MULTIPLE, LENGTH_MULTIPLE, TIME_MULTIPLE


def _computes(func) -> bool:
    """Whether an ATen operator computes (a view only aliases its input: no kernel)."""
    returns = func._schema.returns
    return not (returns and returns[0].alias_info is not None and not returns[0].alias_info.is_write)


class OperatorCount(TorchDispatchMode):
    """Counts the computing operators dispatched inside the block (views left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += _computes(func)
        return func(*args, **(kwargs or {}))


def count_update(run: Callable[[], torch.Tensor]) -> dict[str, int]:
    """Operators of ``run()`` (a forward returning the loss) and its backward, each recurrence as two."""
    calls: list[tuple[Callable, tuple]] = []
    originals = {name: getattr(torch._VF, name) for name in ("gru", "lstm")}

    def recorder(name: str):
        def record(*args):
            calls.append((originals[name], args))
            return originals[name](*args)
        return record

    for name in originals:
        setattr(torch._VF, name, recorder(name))
    try:
        with OperatorCount() as total:
            run().backward()
    finally:
        for name, fn in originals.items():
            setattr(torch._VF, name, fn)
    inside = 0
    for fn, (x, state, weights, *rest) in calls:  # each recurrence again, alone, on copies of its inputs
        x = x.detach().requires_grad_()
        weights = [w.detach().requires_grad_() for w in weights]
        state = tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()
        with OperatorCount() as alone:
            fn(x, state, weights, *rest)[0].sum().backward()
        inside += alone.count - 2  # the sum and its backward are not the recurrence's
    return {"operators": total.count - inside + 2 * len(calls), "recurrences": len(calls),
            "operators_counted_step_by_step": total.count}


def peak_memory(run: Callable[[], torch.Tensor]) -> int:
    """The largest total bytes of live tensors created during ``run()`` and its backward."""
    live: dict[int, int] = {}
    state = {"now": 0, "peak": 0}

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor) and _computes(func):
                    storage = t.untyped_storage()
                    key = storage.data_ptr()
                    if key and key not in live:
                        live[key] = storage.nbytes()
                        state["now"] += storage.nbytes()
                        state["peak"] = max(state["peak"], state["now"])
                        weakref.finalize(storage, _release, live, key, state)
            return out

    with Track():
        run().backward()
    return state["peak"]


def _release(live: dict, key: int, state: dict) -> None:
    state["now"] -= live.pop(key, 0)


def batch_of(tok: MSVAETokenizer, batch_size: int, length: int, words: int, seed: int = 0) -> dict[str, Any]:
    """A paired + unpaired batch padded to ``length`` steps and ``words`` tokens, lengths drawn as BossLocal's
    (mean 12 steps, a long tail), values in range."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for prefix in ("", "unpaired_"):
        steps = torch.empty(batch_size).geometric_(1 / 12, generator=g) - 1
        lengths = (steps + 1).clamp(max=length)
        mask = torch.arange(length)[None, :] < lengths[:, None]
        shape = (batch_size, length, 7, 7, 3)
        out[f"{prefix}observations"] = torch.randint(0, 11, shape, generator=g, dtype=torch.uint8)
        out[f"{prefix}directions"] = torch.randint(0, 4, (batch_size, length), generator=g)
        out[f"{prefix}actions"] = torch.randint(0, 7, (batch_size, length), generator=g) * mask
        out[f"{prefix}trajectory_mask"] = mask
    token_lengths = torch.randint(4, words + 1, (batch_size,), generator=g)
    out["attention_mask"] = (torch.arange(words)[None, :] < token_lengths[:, None]).long()
    out["input_ids"] = torch.randint(4, len(tok), (batch_size, words), generator=g) * out["attention_mask"]
    return out


def measure(model: MSVAEModel, batch: dict, static: bool) -> dict[str, int]:
    """The static layout as the captured update runs it: real frames in slots, rounded up as it rounds them."""
    real = int(batch["trajectory_mask"].sum() + batch["unpaired_trajectory_mask"].sum())
    frames = -(-real // FRAME_MULTIPLE) * FRAME_MULTIPLE if static else None

    def run() -> torch.Tensor:
        with model.using_backend("static" if static else "default", frames=frames):
            return model(**batch).loss
    return {**count_update(run), "peak_activation_bytes": peak_memory(run), "frame_slots": frames}


def host_assembly(demos: str, runs: int, updates: int, batch_size: int) -> dict[str, float]:
    """Seconds to assemble one update's batches for ``runs`` runs on one core (msvae_hf.data.prefetch, bucketed as
    the captured update reads them), over ``updates`` updates."""
    import time

    from datasets import load_from_disk

    from msvae_hf.data.collator import DemoCollator
    from msvae_hf.data.prefetch import UpdateBatches
    from msvae_hf.data.sampler import StepSampler

    data, collator = load_from_disk(demos), DemoCollator(MSVAETokenizer.from_grammar())
    batches = [UpdateBatches(collator, StepSampler(data["paired"], batch_size, 1, seed, 0),
                             StepSampler(data["unpaired"], batch_size, 1, seed, 1), 0, TIME_MULTIPLE, LENGTH_MULTIPLE)
               for seed in range(runs)]
    batches[0][0]  # first reads (file mapping) outside the clock
    start = time.perf_counter()
    for step in range(updates):
        for run in batches:
            run[step]
    seconds = (time.perf_counter() - start) / updates
    return {"runs": runs, "updates": updates, "seconds_per_update_of_all_runs": seconds,
            "seconds_per_run_update": seconds / runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--demos", help="a demo folder: also time the host's batch assembly for --runs runs")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--out", default="results/benchmarks/update_ops.json")
    args = parser.parse_args()
    from report import write_report

    tok = MSVAETokenizer.from_grammar()
    torch.manual_seed(0)
    model = MSVAEModel(MSVAEConfig(**(TINY if args.tiny else {}), **TIMED_FOLLOWER, vocab_size=len(tok))).train()
    results: dict[str, Any] = {"tiny": args.tiny, "batch_paired": args.batch_size, "batch_unpaired": args.batch_size,
                               "torch": torch.__version__, "layouts": []}
    for length in args.lengths:
        batch = batch_of(tok, args.batch_size, length, words=32)
        for static in (False, True):
            results["layouts"].append({"layout": "static" if static else "default", "padded_steps": length,
                                       **measure(model, batch, static)})
    if args.demos:
        results["host_assembly"] = host_assembly(args.demos, args.runs, 10, args.batch_size)
    write_report(results, args.out)


if __name__ == "__main__":
    main()
