"""Tables of the benchmarks' outputs under ``results/benchmarks/``: update times and GEMM peaks, profiles,
decoding, rollouts, demonstration sets, and gpu_check.sh's and gpu_update.sh's runs."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from cells import LEVELS

from .records import RESULTS, fmt, read_json


def table_train_step(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py: seconds per update and the fraction of the GEMM peak, per model."""
    data = read_json(level, name, root)
    where = data.get("device_name", data["device"])
    lines = [f"| model ({where}, {data['torch_threads']} thread(s), {PRECISION[data.get('mixed_precision', 'no')]}) | "
             "s / update | GFLOP / update | fraction of GEMM peak |", "| --- | --- | --- | --- |"]
    rows = list(data["models"].items())
    if "msvae_default_allocator" in data:  # timed before retain_freed_memory()
        rows.append(("msvae, the C library's default allocator", data["msvae_default_allocator"]))
    for model, m in rows:
        lines.append(f"| {model} | {m['seconds_per_update']:.4f} | {m['flops_fwd_bwd'] / 1e9:.1f} | "
                     f"{fmt(m.get('fraction_of_gemm_peak'), '.2f')} |")
    return lines


def table_train_step_profile(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py --profile-steps: an MS-VAE update's profiled time and FLOPs by kind of operator,
    each kind's rate against the GEMM peak."""
    data = read_json(level, name, root)
    profile, peak = data["msvae_profile"], data["gemm_peak_flops_per_s"]
    total, flops = profile["total_ms_per_update"], profile["flops_per_update"]
    lines = [f"| operators (MS-VAE, {profile['steps']} profiled updates) | ms / update | share of the time | "
             "GFLOP / update | share of the FLOPs | GFLOP/s (fraction of the GEMM peak) |",
             "| --- | --- | --- | --- | --- | --- |"]
    all_flops = sum(flops.values())
    for kind, ms in [*profile["ms_per_update"].items(), ("all", total)]:
        f = all_flops if kind == "all" else flops[kind]
        rate = f / (ms / 1e3) if ms else 0.0
        lines.append(f"| {kind} | {ms:.1f} | {ms / total:.2f} | {f / 1e9:.1f} | {f / all_flops:.2f} | "
                     f"{rate / 1e9:.1f} ({rate / peak:.2f}) |")
    return lines


def table_kernel_bound(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/kernel_bound.py: per model the update's time and fraction of the best GEMM peak beside its
    kernels replayed alone (the ceiling), and each kind of kernel's rate."""
    data = read_json(level, name, root)
    best = data["best_gemm_peak_flops_per_s"]
    lines = [f"| model ({data['torch_threads']} thread(s), best GEMM peak {best / 1e9:.0f} GFLOP/s) | s / update "
             "(fraction of the peak) | its kernels alone: s (fraction: the ceiling) | convolutions | matrix products "
             "| attention | s outside the kernels |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, r in data["models"].items():
        update, kernels = r["update"], r["kernels"]
        kinds = [fmt(kernels["by_kind"][kind]["fraction_of_best_gemm_peak"], ".2f")
                 for kind in ("convolution", "matmul", "attention")]
        lines.append(f"| {model} | {update['seconds_per_update']:.4f} ({update['fraction_of_best_gemm_peak']:.2f}) | "
                     f"{kernels['seconds']:.4f} ({kernels['ceiling_fraction_of_best_gemm_peak']:.2f}) | "
                     f"{' | '.join(kinds)} | {r['seconds_outside_kernels']:.4f} |")
    return lines


def table_speaker_decode(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/speaker_decode.py: sequences per second with and without the decoder cache."""
    data = read_json(level, name, root)
    lines = [f"| model ({data['batch_size']} trajectories x {data['new_tokens']} tokens) | cached seq/s | "
             "uncached seq/s | cached / uncached | identical sequences |", "| --- | --- | --- | --- | --- |"]
    for model, m in data["models"].items():
        lines.append(f"| {model} | {m['sequences_per_s_cached']:.0f} | {m['sequences_per_s_uncached']:.0f} | "
                     f"{m['speedup_cached_over_uncached']:.2f} | {m['identical_sequences']} |")
    return lines


def table_rollout(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/rollout.py: steps and episodes per second of each way of rolling out."""
    data = read_json(level, name, root)
    lines = [f"| {data['episodes']} {data['level']} episodes, {data['policy']} | episodes/s | steps/s |",
             "| --- | --- | --- |"]
    for way, r in data["results"].items():
        lines.append(f"| {way.replace('_', ' ')} | {r['episodes_per_s']:.1f} | {r['steps_per_s']:.0f} |")
    return lines


def table_demo_generation(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/demo_generation.py: demos per second, bytes per demo, memory while iterating."""
    data = read_json(level, name, root)
    it = data["iteration"]
    return [
        "| quantity | value |", "| --- | --- |",
        f"| demos/s, 1 process ({data['level']}) | {data['demos_per_s_1proc']:.0f} |",
        f"| demos/s, 2 processes | {data['demos_per_s_2proc']:.0f} ({data['speedup_2_vs_1']:.2f}x) |",
        *([f"| 2 processes against 1, round by round (order alternating; median above) | "
           f"{', '.join(f'{r:.2f}x' for r in data['speedup_per_round'])} |"] if data.get("repeats", 1) > 1 else []),
        *([f"| CPU seconds, 1 / 2 processes (cores kept busy by 2) | {data['cpu_seconds_1proc']:.1f} / "
           f"{data['cpu_seconds_2proc']:.1f} ({data['cpu_busy_2proc']:.2f}) |"] if "cpu_seconds_1proc" in data else []),
        f"| bytes per demo on disk | {data['bytes_per_demo']:.0f} |",
        *iteration_rows(it),
    ]


def iteration_rows(it: dict) -> list[str]:
    """Two table rows from an epoch of DataLoader over a demo set (benchmarks/demo_generation.py's `iterate`)."""
    return [f"| rows iterated (batches of {it['batch_size']}) | {it['rows_iterated']} at {it['rows_per_s']:.0f} "
            "rows/s |",
            f"| peak resident memory: anonymous / file-backed (MB) | {it['peak_anon_mb']:.0f} / "
            f"{it['peak_file_mb']:.0f} |"]


PRECISION = {"no": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}


def train_step_where(data: dict) -> str:
    return (f"{data.get('device_name', data['device'])}, {data['torch_threads']} thread(s), "
            f"{PRECISION[data.get('mixed_precision', 'no')]}")


def table_train_step_compare(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py's JSONs side by side: milliseconds per update of each model, and how many times
    faster than the first JSON each is."""
    runs = [(name, read_json(level, name, root)) for name in names.split(",")]
    models = list(runs[0][1]["models"])
    lines = ["| benchmark | where | " + " | ".join(f"{m} ms / update" for m in models) + " | msvae / follower |",
             "| --- | --- |" + " --- |" * (len(models) + 1)]
    first = runs[0][1]["models"]
    for name, data in runs:
        cells = []
        for m in models:
            s = data["models"][m]["seconds_per_update"]
            cells.append(f"{1000 * s:.1f}" + ("" if name == runs[0][0] else
                                               f" ({first[m]['seconds_per_update'] / s:.2f}x)"))
        lines.append(f"| {name}.json | {train_step_where(data)} | " + " | ".join(cells) +
                     f" | {data['ratio_msvae_over_follower']:.2f} |")
    return lines


def table_train_step_peak(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/train_step.py's JSONs in the order run: the commit timed, the GEMM peaks it measured in order
    (before the models and after them, or after each), and MS-VAE's seconds per update and fraction of the
    highest peak."""
    lines = ["| benchmark | commit | GEMM peaks measured, in order (GFLOP/s) | msvae s / update | "
             "msvae GFLOP / update | msvae fraction of GEMM peak |", "| --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        data = read_json(level, name, root)
        peaks = (data.get("gemm_peak_flops_per_s_samples") or data.get("gemm_peak_flops_per_s_before_after")
                 or [data["gemm_peak_flops_per_s"]])
        m = data["models"]["msvae"]
        lines.append(f"| {name}.json | {str(data.get('commit', '-'))[:7]} | "
                     f"{' / '.join(f'{p / 1e9:.1f}' for p in peaks)} | {m['seconds_per_update']:.4f} | "
                     f"{m['flops_fwd_bwd'] / 1e9:.1f} | {fmt(m.get('fraction_of_gemm_peak'), '.2f')} |")
    return lines


def table_attention_layout(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/attention_layout.py's JSONs: each model's seconds per update in the switch's two settings
    (padded batch and length groups, or F.linear and oneDNN; updates alternating in one process), the speed-up,
    and each setting's GFLOP and fraction of the GEMM peak: the highest torch.matmul peak the run measured, or,
    where the first JSON has it, the best of torch.matmul's and oneDNN's (``best``)."""
    first_data = read_json(level, names.split(",")[0], root)
    a, b = first_data.get("settings", ["padded", "grouped"])
    best = "best_gemm_peak_flops_per_s" in first_data
    peak, key = ("best GEMM peak", "fraction_of_best_gemm_peak") if best else ("GEMM peak", "fraction_of_gemm_peak")
    lines = [f"| benchmark | model | {a} s / update | {b} s / update | {a} / {b} | GFLOP / update ({a}, {b}) | "
             f"fraction of {peak} ({a}, {b}) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        data = read_json(level, name, root)
        for model, r in data["models"].items():
            first, second = r[a], r[b]
            lines.append(f"| {name}.json | {model} | {first['seconds_per_update']:.4f} | "
                         f"{second['seconds_per_update']:.4f} | {r[f'{a}_over_{b}']:.2f}x | "
                         f"{first['flops_fwd_bwd'] / 1e9:.1f}, {second['flops_fwd_bwd'] / 1e9:.1f} | "
                         f"{first[key]:.2f}, {second[key]:.2f} |")
    return lines


def table_gemm_peaks(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """JSONs that time both GEMM backends (benchmarks/train_step.py, attention_layout.py): the peaks of
    torch.matmul and of oneDNN's matmul in the order measured, and each model's (default setting's) seconds per
    update and fraction of either peak."""
    lines = ["| benchmark | commit | torch.matmul peaks (GFLOP/s) | oneDNN matmul peaks (GFLOP/s) | model | "
             "s / update | fraction of torch.matmul peak | fraction of best peak |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        data = read_json(level, name, root)
        peaks = [" / ".join(f"{p / 1e9:.1f}" for p in data[k]) or "-"
                 for k in ("gemm_peak_flops_per_s_samples", "onednn_gemm_peak_flops_per_s_samples")]
        for model, r in data["models"].items():
            r = r[data["settings"][1]] if "settings" in data else r
            lines.append(f"| {name}.json | {str(data.get('commit', '-'))[:7]} | {peaks[0]} | {peaks[1]} | {model} | "
                         f"{r['seconds_per_update']:.4f} | {r['fraction_of_gemm_peak']:.2f} | "
                         f"{r['fraction_of_best_gemm_peak']:.2f} |")
    return lines


TRAIN_STEP_LINE = re.compile(r'"(seconds_per_update|ratio_msvae_over_follower)": ([-+0-9.e]+)')


def train_step_groups(text: str) -> list[tuple[list[float], float]]:
    """The benchmarks in a gpu_check.sh log: (seconds per update of each model, msvae / follower), in order."""
    groups, seconds = [], []
    for key, value in TRAIN_STEP_LINE.findall(text):
        if key == "seconds_per_update":
            seconds.append(float(value))
        else:
            groups.append((seconds, float(value)))
            seconds = []
    return groups


def table_train_step_log(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """Seconds per update that benchmarks/gpu_check.sh printed into each LOG (a ``.txt``). The script runs
    benchmarks/train_step.py once in fp32 and once in bf16 autocast and prints its JSON's times without the
    precision; a benchmark whose times equal a train_step JSON of the same folder takes that JSON's precision,
    and the other benchmark of the same log the other precision."""
    lines = ["| log | benchmark | precision | follower ms | speaker ms | msvae ms | msvae / follower |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in names.split(","):
        path = root / level / f"{name}.txt"
        if not path.exists():
            raise SystemExit(f"no {path}")
        jsons = {p.name: json.loads(p.read_text()) for p in sorted(path.parent.glob("train_step*.json"))}
        groups = train_step_groups(path.read_text())
        matched: dict[int, tuple[str, str]] = {}
        for i, (seconds, _) in enumerate(groups):
            for file, data in jsons.items():
                if [m["seconds_per_update"] for m in data["models"].values()] == seconds:
                    matched[i] = (data.get("mixed_precision", "no"), file)
        for i, (seconds, ratio) in enumerate(groups):
            if i in matched:
                precision = f"{PRECISION[matched[i][0]]} (= {matched[i][1]})"
            else:
                others = {"no", "bf16"} - {p for p, _ in matched.values()}
                precision = f"{PRECISION[others.pop()]} (log only)" if len(groups) == 2 and len(others) == 1 else "?"
            lines.append(f"| {path.name} | {i + 1} of {len(groups)} | {precision} | "
                         + " | ".join(f"{1000 * s:.1f}" for s in seconds) + f" | {ratio:.2f} |")
    return lines


def table_rollout_ratios(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/rollout.py: its ratios between the ways of rolling out."""
    data = read_json(level, name, root)
    lines = ["| ratio | value |", "| --- | --- |"]
    for key, value in data["ratios"].items():
        lines.append(f"| {key.replace('_over_', ' / ').replace('_per_s', '/s').replace('_', ' ')} | {value:.2f} |")
    return lines


def table_smoke(level: str, folder: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_check.sh's short training runs (``smoke_<model>_<precision>.json``, each run's
    results.json): that scripts/train.py ran to the end and saved, with the metrics of a barely trained model."""
    lines = ["| model | --mixed-precision | updates | wall (s) | best/ at update | test SR (episodes) | test BLEU-4 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    paths = sorted((root / level / folder).glob("smoke_*.json"))
    if not paths:
        raise SystemExit(f"no smoke_*.json under {root / level / folder}")
    for path in paths:
        r = json.loads(path.read_text())
        flag = path.stem.split("_", 2)[2]
        precision = f"{flag.removeprefix('launch-')} ({PRECISION[flag.removeprefix('launch-')]})"
        if flag.startswith("launch-"):
            precision += ", under accelerate launch"
        test = r.get("test") or {}
        sr_text = "-" if not test else f"{test['success_rate']:.3f} ({test['episodes']})"
        lines.append(f"| {r['model_type']} | {precision} | {r['updates']} | {r['wall_time_s']:.1f} | "
                     f"{r['best']['step']} | {sr_text} | {fmt(r.get('test_bleu'), '.2f')} |")
    return lines


def table_resume(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_check.sh's resume.json: the weights after 30 updates of two runs, compared."""
    data = read_json(level, name, root)
    lines = ["| weights after 30 updates | bit-identical | max abs difference |", "| --- | --- | --- |"]
    for key, c in data.items():
        lines.append(f"| {key.replace('_vs_', ' vs ').replace('_', ' ')} | {'yes' if c['bit_identical'] else 'no'} | "
                     f"{c['max_abs_diff']:.2g} |")
    return lines


def table_demo_storage(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """Bytes per demonstration on disk, frames as nested lists against one byte per cell, per level and split."""
    data = read_json(level, name, root)
    lines = ["| level | split | episodes | nested lists (B/demo) | cell codes (B/demo) | ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    for lvl, entry in data["levels"].items():
        for split, new in entry["cell_codes"].items():
            old = entry["nested_lists"][split]
            lines.append(f"| {LEVELS.get(lvl, lvl)} | {split} | {new['episodes']} | {old['bytes_per_demo']:.0f} | "
                         f"{new['bytes_per_demo']:.0f} | {old['bytes_per_demo'] / new['bytes_per_demo']:.1f}x |")
    return lines


def table_demo_dataset(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/demo_dataset.py: a whole generated set, its generation's time, its size, an epoch over it."""
    data = read_json(level, name, root)
    gen = data["generation"]
    splits = ", ".join(f"{split} {entry['rows']}" for split, entry in data["splits"].items())
    lines = ["| quantity | value |", "| --- | --- |",
             f"| demonstrations ({data['level']}): {splits} | {data['demos']} |"]
    if gen:
        rate = f", {gen['demos_per_s']:.0f} demos/s" if "demos_per_s" in gen else " (went on from chunks)"
        lines += [f"| generation: wall time{rate} | {gen['wall_seconds'] / 3600:.2f} h |",
                  f"| generation: CPU time (cores kept busy) | {gen['cpu_seconds'] / 3600:.2f} h "
                  f"({gen['cores_busy']:.2f}) |"]
    return lines + [
        f"| on disk: all splits (bytes per demo) | {data['bytes_on_disk'] / 1e9:.2f} GB "
        f"({data['bytes_per_demo']:.0f}) |",
        *iteration_rows(data["iteration"]),
    ]


def _gpu_summary():
    """benchmarks/gpu_summary.py, which also prints its table on the GPU machine (loaded from its file: the
    benchmarks are scripts, not a package on the path)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_summary.py"
    spec = importlib.util.spec_from_file_location("gpu_summary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_gpu_update(level: str, folder: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_update.sh's folder: updates/s, kernels, device-busy time and memory of each layout."""
    return _gpu_summary().table(root / level / folder)


def table_gpu_kernels(level: str, folder: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/gpu_update.sh's folder: the captured lone run's costliest kernels per update."""
    return _gpu_summary().kernels(root / level / folder)


def table_update_ops(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/update_ops.py: operators per MS-VAE update and peak activations per layout and length."""
    data = json.loads((root / level / f"{name}.json").read_text())
    lines = ["| layout | padded steps | operators per update | recurrence calls | operators, recurrences step by "
             "step | peak activations (MB) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in data["layouts"]:
        lines.append(f"| {r['layout']} | {r['padded_steps']} | {r['operators']} | {r['recurrences']} | "
                     f"{r['operators_counted_step_by_step']} | {r['peak_activation_bytes'] / 1e6:.0f} |")
    return lines
