"""Two settings of one switch of the CPU code, timed in one process, updates alternating.

    python benchmarks/attention_layout.py [--switch length_groups|linear] [--demos DIR] [--batch-size 128]
                                          [--batches 1] [--steps 20] [--warmup 2] [--tiny]
                                          [--out results/attention_layout.json]

`--switch length_groups` (the default): attention over the whole padded batch (`padded`,
`Backend(length_groups=False)`, every attention kernel over [B, S]) against attention per group of rows of similar
length (`grouped`, the default backend, `backends.positions.LengthGroups`). `--switch linear`: the linear layers on
`F.linear` (`f_linear`, `Backend(onednn=False)`) against oneDNN's matmul (`onednn`, the default backend).

Each model (follower, speaker, MS-VAE: App. D sizes unless `--tiny`) trains on ONE real BossLocal batch (as
`benchmarks/train_step.py` loads it), or with `--batches N` on N distinct batches in turn, as training meets
batches of new lengths (which matters where a library builds kernels per shape, as oneDNN does), its updates
(forward, backward, `runtime.adam` step) alternating between the two settings update by update, both on the
same batch in each round. Both see the machine in the same state, so their ratio does not move with its
speed the way two separate runs' do. Per model and setting: the median, fastest and slowest seconds per update
(wall clock), the FLOPs of one forward + backward (`benchmarks/flops.py`) and the fraction of the single-thread
GEMM peak (a large matmul, sampled before the models and after each; the highest, each of torch.matmul and
oneDNN's matmul, `train_step.gemm_peaks`); and the first setting's time over the second's, the speed-up.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

import torch
from flops import count_flops
from report import write_report
from train_step import add_fractions, gemm_peaks, load_batches, model_batch, peak_summary, three_models

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf.backends.registry import Backend
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training.update import update
from msvae_hf.utils.runtime import adam, provenance, retain_freed_memory

SWITCHES = {"length_groups": ("padded", "grouped"), "linear": ("f_linear", "onednn")}
"""Each switch (a field of :class:`~msvae_hf.backends.registry.Backend`, ``onednn`` for ``linear``): the names of its
settings False and True."""


def time_layouts(model: torch.nn.Module, batches: list[dict], steps: int, warmup: int,
                 switch: str = "length_groups") -> dict[str, Any]:
    """Updates alternating between the switch's two settings, round i on batches[i % len(batches)] in both: per
    setting the seconds per update and the FLOPs of one forward + backward (the mean over the batches)."""
    names = SWITCHES[switch]
    field = "onednn" if switch == "linear" else switch
    settings = {name: Backend(name, **{field: enabled}) for name, enabled in zip(names, (False, True), strict=True)}
    model.train()
    optimizer = adam(model.parameters(), 1e-4)
    out: dict[str, Any] = {}
    for name, backend in settings.items():
        with model.using_backend(backend):
            flops = [count_flops(lambda b=b: model(**b).loss.backward())["all"] for b in batches]
        out[name] = {"flops_fwd_bwd": sum(flops) / len(flops)}
    times: dict[str, list[float]] = {name: [] for name in settings}
    for i in range(warmup + steps):
        batch = batches[i % len(batches)]
        for name, backend in settings.items() if i % 2 == 0 else reversed(settings.items()):
            with model.using_backend(backend):
                start = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                update(functools.partial(model, **batch), optimizer)
                if i >= warmup:
                    times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        t.sort()
        out[name] |= {"seconds_per_update": t[len(t) // 2], "min_s": t[0], "max_s": t[-1]}
        out[name]["achieved_flops_per_s"] = out[name]["flops_fwd_bwd"] / out[name]["seconds_per_update"]
    first, second = names
    out[f"{first}_over_{second}"] = out[first]["seconds_per_update"] / out[second]["seconds_per_update"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switch", default="length_groups", choices=list(SWITCHES))
    parser.add_argument("--demos", help="make_demos folder (paired/unpaired splits); generated if absent")
    parser.add_argument("--level", default="BabyAI-BossLocal-v0")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=1,
                        help="distinct batches, one per round in turn, as training meets new lengths (default: one)")
    parser.add_argument("--steps", type=int, default=20, help="timed updates per setting")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--gemm-size", type=int, default=2048)
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--out", default="results/attention_layout.json")
    args = parser.parse_args()

    device = torch.device("cpu")  # both switches change the CPU's code only
    torch.manual_seed(0)
    retain_freed_memory()
    tok = MSVAETokenizer.from_grammar()
    batches = load_batches(args, tok, args.batches)
    paired, unpaired = batches[0]
    models = {name: (model, [model_batch(name, p, u) for p, u in batches])
              for name, model in three_models(tok, args.tiny).items()}
    peaks = [gemm_peaks(args.gemm_size, 10, device)]
    results: dict[str, Any] = {
        "switch": args.switch, "settings": list(SWITCHES[args.switch]),
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__, "tiny": args.tiny, "level": args.level, "steps": args.steps,
        "batches": args.batches,
        "batch_paired": int(paired["actions"].shape[0]), "batch_unpaired": int(unpaired["unpaired_actions"].shape[0]),
        "mean_instruction_tokens": float(paired["attention_mask"].sum(1).float().mean()),
        "longest_instruction_tokens": int(paired["attention_mask"].sum(1).max()),
        **provenance(device), "models": {},
    }
    for name, (model, batch) in models.items():
        results["models"][name] = time_layouts(model, batch, args.steps, args.warmup, args.switch)
        peaks.append(gemm_peaks(args.gemm_size, 10, device))
    results |= peak_summary(peaks)
    for r in results["models"].values():
        for name in results["settings"]:
            add_fractions(r[name], results)
    write_report(results, args.out)


if __name__ == "__main__":
    main()
