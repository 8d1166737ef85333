"""Seconds per update (forward + backward + Adam step) of the follower, the speaker and MS-VAE on ONE real batch.

    python benchmarks/train_step.py [--demos DIR] [--level BabyAI-BossLocal-v0]
                                    [--batch-size 128] [--steps 10] [--warmup 2] [--tiny]
                                    [--device cpu] [--mixed-precision no|bf16] [--profile-steps N]
                                    [--follower head|default]
                                    [--out results/train_step.json]

The batch: `--batch-size` paired BossLocal bot episodes (+ as many unpaired ones for MS-VAE's full Eq. 10 loss),
from `--demos` (a `make_demos` folder: splits paired / unpaired) or generated here with
`msvae_hf.data.demos.generate_split`. Every model sees the same paired batch. Models use the default (App. D) config
unless `--tiny`, with the head follower of the records, which reads a_{t-1} (`--follower head`), or the package's
default follower, FiLM on both maps of the frames and no a_{t-1} (`--follower default`). FLOPs of one forward +
backward are counted with torch.utils.flop_counter.FlopCounterMode (benchmarks/flops.py: matmul, conv and attention
FLOPs, the CPU's fused attention kernel included, the GRU/LSTM gate matmuls where they run as matmuls: packed, as
training runs them; elementwise ops are not counted); the GEMM peak is a large torch.matmul (fp32, or bf16 with
`--mixed-precision bf16`), best of 10, timed before the models and after each in the same run (the highest is kept:
a shared machine's speed drifts, by 10% or more within minutes on the 2-core CPU), on the same thread count
(reported as torch_threads) and device. On the CPU in fp32 oneDNN's matmul (the one `msvae_hf.backends.linear` runs
the linear layers on) is timed beside it: where MKL does not use the CPU's AVX-512 (AMD) it runs about half as fast
as oneDNN, so each model's fraction is given of torch.matmul's peak (`fraction_of_gemm_peak`, as before) and of the
higher of the two (`fraction_of_best_gemm_peak`). On a GPU (`--device cuda`) each timed update ends with
`torch.cuda.synchronize()`; `--mixed-precision bf16` runs forward and loss under
`torch.autocast(dtype=torch.bfloat16)`, as `accelerate` does for `--mixed_precision bf16`.

`--profile-steps N` (CPU) profiles N more MS-VAE updates with torch.profiler, under the same autocast, and adds
``msvae_profile``: the time per update of the convolutions, the matrix products, the attention kernels and
everything else, the FLOPs of each and their rate against the GEMM peak, and the operators that take the most
time, by their own time (the profiler's overhead included).

Host memory: MS-VAE is timed first with the C library's default allocator (`msvae_default_allocator`), then
`msvae_hf.utils.runtime.retain_freed_memory()` is applied, as `scripts/train.py` does, and every model is timed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import torch
from datasets import Dataset
from flops import count_flops, op_kind
from report import write_report

import msvae_hf  # noqa: F401  (registers the Local levels)
from msvae_hf import FollowerConfig, FollowerModel, MSVAEConfig, MSVAEModel, SpeakerConfig, SpeakerModel
from msvae_hf.backends.linear import AVAILABLE as ONEDNN_AVAILABLE
from msvae_hf.backends.linear import onednn_matmul
from msvae_hf.data.collator import DemoCollator, for_loader
from msvae_hf.evaluation.evaluate import device_name, resolve_device
from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER
from msvae_hf.models.tokenization_msvae import MSVAETokenizer
from msvae_hf.training.update import update
from msvae_hf.utils.runtime import adam, provenance, retain_freed_memory

TINY = dict(hidden_size=32, latent_dim=32, obs_channels=16, decoder_ffn_dim=64, word_embed_dim=32,
            prior_hidden_size=32, obs_embed_dim=8, action_embed_dim=8)


def load_batches(args: argparse.Namespace, tok: MSVAETokenizer, count: int = 1) -> list[tuple[dict, dict]]:
    """``count`` (paired batch, unpaired batch) pairs as padded tensors: the k-th of rows k * batch_size onwards
    of each split (wrapping around a split that runs out)."""
    if args.demos:
        from msvae_hf.data.demos import load_demos

        dd = load_demos(args.demos)
        paired, unpaired = dd["paired"], dd["unpaired"] if "unpaired" in dd else dd["paired"]
        return _collate_batches(tok, paired, unpaired, args.batch_size, count)
    from msvae_hf.data.demos import generate_split

    with tempfile.TemporaryDirectory() as cache:
        paired, _ = generate_split(args.level, "paired", args.batch_size * count, cache_dir=cache)
        unpaired, _ = generate_split(args.level, "unpaired", args.batch_size * count, cache_dir=cache)
        return _collate_batches(tok, paired.flatten_indices(), unpaired.flatten_indices(), args.batch_size, count)


def _collate_batches(tok: MSVAETokenizer, paired: Dataset, unpaired: Dataset, batch_size: int,
                     count: int) -> list[tuple[dict, dict]]:
    collate = DemoCollator(tok)

    def rows(split: Dataset, k: int) -> list[dict]:
        n = min(batch_size, len(split))
        return list(for_loader(split.select([(k * n + i) % len(split) for i in range(n)])))

    return [(collate(rows(paired, k)),
             as_unpaired(collate([{c: v for c, v in r.items() if c != "instruction"} for r in rows(unpaired, k)])))
            for k in range(count)]


#: The follower the benchmarks time, so that a benchmark run against another commit times the same model (their
#: records were made with it); benchmarks/follower_variants.py times the others.
TIMED_FOLLOWER = HEAD_FOLLOWER


#: ``--follower``: the follower fields each choice sets (``default``: none, the package's default follower, FiLM on
#: both maps of the frames, no a_{t-1}).
FOLLOWERS: dict[str, dict] = {"head": TIMED_FOLLOWER, "default": {}}


def three_models(tok: MSVAETokenizer, tiny: bool = False, follower: dict | None = None) -> dict[str, torch.nn.Module]:
    """The follower, the speaker and MS-VAE (App. D sizes unless ``tiny``; the follower fields ``follower``, else
    :data:`TIMED_FOLLOWER`), built in that order."""
    extra = {**(TINY if tiny else {}), "vocab_size": len(tok), **(TIMED_FOLLOWER if follower is None else follower)}
    return {"follower": FollowerModel(FollowerConfig(**extra)), "speaker": SpeakerModel(SpeakerConfig(**extra)),
            "msvae": MSVAEModel(MSVAEConfig(**extra))}


def model_batch(name: str, paired: dict, unpaired: dict) -> dict:
    """What model ``name`` trains on: the paired batch, and for MS-VAE the unpaired batch beside it."""
    return {**paired, **unpaired} if name == "msvae" else paired


def as_unpaired(batch: dict) -> dict:
    """A collated batch's trajectories under the ``unpaired_`` keys MS-VAE's forward takes."""
    return {f"unpaired_{k}": v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_peak(n: int, repeats: int, device: torch.device, dtype: torch.dtype = torch.float32,
              matmul=torch.matmul) -> float:
    """FLOP/s of an n x n matmul (2 n^3 flops) on `device`, best of `repeats`."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    matmul(a, b)
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def gemm_peaks(n: int, repeats: int, device: torch.device,
               dtype: torch.dtype = torch.float32) -> dict[str, float | None]:
    """The GEMM peak through torch.matmul (the BLAS torch was built with: MKL on x86) and, for CPU fp32, through
    oneDNN's matmul (msvae_hf.backends.linear), which outruns MKL where MKL does not use the CPU's AVX-512; None where
    there is no second backend."""
    onednn = device.type == "cpu" and dtype == torch.float32 and ONEDNN_AVAILABLE
    return {"torch_matmul": gemm_peak(n, repeats, device, dtype),
            "onednn": gemm_peak(n, repeats, device, dtype, onednn_matmul) if onednn else None}


def peak_summary(samples: list[dict[str, float | None]]) -> dict[str, Any]:
    """gemm_peaks samples (before the models and after each) -> each backend's samples and highest, and the
    best of both (best_gemm_peak_flops_per_s). gemm_peak_flops_per_s stays torch.matmul's, as it always was."""
    torch_matmul = [s["torch_matmul"] for s in samples]
    onednn = [s["onednn"] for s in samples if s["onednn"] is not None]
    return {"gemm_peak_flops_per_s_samples": torch_matmul,
            "gemm_peak_flops_per_s_before_after": [torch_matmul[0], torch_matmul[-1]],
            "gemm_peak_flops_per_s": max(torch_matmul),
            "onednn_gemm_peak_flops_per_s_samples": onednn,
            "onednn_gemm_peak_flops_per_s": max(onednn, default=None),
            "best_gemm_peak_flops_per_s": max(torch_matmul + onednn)}


def add_fractions(r: dict[str, Any], peaks: dict[str, Any]) -> None:
    """A timing's achieved FLOP/s as fractions of torch.matmul's peak and of the best peak (peak_summary)."""
    r["fraction_of_gemm_peak"] = r["achieved_flops_per_s"] / peaks["gemm_peak_flops_per_s"]
    r["fraction_of_best_gemm_peak"] = r["achieved_flops_per_s"] / peaks["best_gemm_peak_flops_per_s"]


def time_updates(model: torch.nn.Module, batch: dict, steps: int, warmup: int, device: torch.device,
                 mixed_precision: str = "no") -> dict[str, Any]:
    """Median seconds per Adam update and the FLOPs of one forward + backward."""
    model.train()
    optimizer = adam(model.parameters(), 1e-4)

    def forward() -> Any:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision == "bf16"):
            return model(**batch)

    flops = count_flops(lambda: forward().loss.backward())["all"]
    optimizer.zero_grad()
    times = []
    for i in range(warmup + steps):
        synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        update(forward, optimizer)
        synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    return {"seconds_per_update": median, "min_s": times[0], "max_s": times[-1], "flops_fwd_bwd": flops,
            "achieved_flops_per_s": flops / median,
            "parameters": sum(p.numel() for p in model.parameters())}


def profile_updates(model: torch.nn.Module, batch: dict, steps: int, mixed_precision: str = "no",
                    top: int = 15) -> dict[str, Any]:
    """Where a CPU update's time goes: milliseconds per update by kind of operator (flops.op_kind), the FLOPs
    of each kind (one forward + backward, flops.count_flops) and the operators that take the most time."""
    from torch.profiler import ProfilerActivity, profile

    optimizer = adam(model.parameters(), 1e-4)
    model.train()

    def forward() -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed_precision == "bf16"):
            return model(**batch)

    def one_update() -> None:
        optimizer.zero_grad(set_to_none=True)
        update(forward, optimizer)

    one_update()  # Adam's state, outside the profile
    flops = count_flops(lambda: forward().loss.backward())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            one_update()
    ms = {"convolution": 0.0, "matmul": 0.0, "attention": 0.0, "other": 0.0}
    by_op = {}
    for e in prof.key_averages():
        t = e.self_cpu_time_total / 1e3 / steps
        ms[op_kind(e.key)] += t
        by_op[e.key] = (t, e.count // steps)
    ranked = sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]
    return {"steps": steps, "ms_per_update": ms, "total_ms_per_update": sum(ms.values()),
            "flops_per_update": {kind: flops[kind] for kind in ms},
            "flops_per_s": {kind: flops[kind] / (t / 1e3) if t else None for kind, t in ms.items()},
            "top_operators": [{"op": k, "ms_per_update": v[0], "calls_per_update": v[1]} for k, v in ranked]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demos", help="make_demos folder (paired/unpaired splits); generated if absent")
    parser.add_argument("--level", default="BabyAI-BossLocal-v0")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--gemm-size", type=int, default=2048)
    parser.add_argument("--tiny", action="store_true", help="tiny models (a smoke run), not App. D's")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto (cuda if visible)")
    parser.add_argument("--mixed-precision", default="no", choices=["no", "bf16"])
    parser.add_argument("--follower", default="head", choices=sorted(FOLLOWERS),
                        help="head: the follower of the records (TIMED_FOLLOWER, with a_{t-1}); default: the "
                             "package's default (FiLM on both maps, no a_{t-1}), in the follower and in MS-VAE")
    parser.add_argument("--profile-steps", type=int, default=0, help="MS-VAE updates to profile after timing")
    parser.add_argument("--out", default="results/train_step.json")
    args = parser.parse_args()

    device = resolve_device(args.device)
    if args.profile_steps and device.type != "cpu":
        parser.error("--profile-steps profiles CPU updates (torch.profiler's CPU activity); use --device cpu")
    torch.manual_seed(0)
    tok = MSVAETokenizer.from_grammar()
    (paired, unpaired), = load_batches(args, tok)
    models = three_models(tok, args.tiny, FOLLOWERS[args.follower])
    batches = {name: {k: v.to(device) for k, v in model_batch(name, paired, unpaired).items()} for name in models}
    dtype = torch.bfloat16 if args.mixed_precision == "bf16" else torch.float32
    peaks = [gemm_peaks(args.gemm_size, 10, device, dtype)]
    results: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "device": str(device), "device_name": device_name(device),
        "mixed_precision": args.mixed_precision, "torch": torch.__version__, "tiny": args.tiny, "level": args.level,
        "follower": args.follower,
        "batch_paired": int(paired["actions"].shape[0]), "batch_unpaired": int(unpaired["unpaired_actions"].shape[0]),
        "mean_steps": float(paired["trajectory_mask"].sum(1).float().mean()),
        **provenance(device), "models": {},
    }
    for label, name in [("msvae_default_allocator", "msvae"), *((n, n) for n in models)]:
        if label == "follower":
            results["retain_freed_memory"] = retain_freed_memory()
        model = models[name].to(device)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        r = time_updates(model, batches[name], args.steps, args.warmup, device, args.mixed_precision)
        peaks.append(gemm_peaks(args.gemm_size, 10, device, dtype))  # the machine's speed drifts: sample it often
        model.load_state_dict(state)  # every timing starts from the same weights
        if label == name:
            results["models"][name] = r
        else:
            results[label] = r
    results |= peak_summary(peaks)
    peak, best = results["gemm_peak_flops_per_s"], results["best_gemm_peak_flops_per_s"]
    for r in (*results["models"].values(), results["msvae_default_allocator"]):
        add_fractions(r, results)
    follower_s = results["models"]["follower"]["seconds_per_update"]
    results["ratio_msvae_over_follower"] = results["models"]["msvae"]["seconds_per_update"] / follower_s
    results["ratio_speaker_over_follower"] = results["models"]["speaker"]["seconds_per_update"] / follower_s
    results["ratio_msvae_default_allocator_over_retained"] = (
        results["msvae_default_allocator"]["seconds_per_update"] / results["models"]["msvae"]["seconds_per_update"])
    if args.profile_steps:
        profile = profile_updates(models["msvae"], batches["msvae"], args.profile_steps, args.mixed_precision)
        for key, p in (("fraction_of_gemm_peak", peak), ("fraction_of_best_gemm_peak", best)):
            profile[key] = {kind: rate / p if rate else None for kind, rate in profile["flops_per_s"].items()}
        results["msvae_profile"] = profile
    write_report(results, args.out)


if __name__ == "__main__":
    main()
