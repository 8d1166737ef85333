"""The GPU benchmark script, run on the CPU with tiny models, as it must run before it goes to a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, tiny_model

from msvae_hf.backends.linear import AVAILABLE as ONEDNN_AVAILABLE

ROOT = Path(__file__).resolve().parents[1]


def test_flops_count_the_cpu_attention_kernel_by_its_matrix_products(monkeypatch) -> None:
    """benchmarks/flops.py: the CPU's fused attention counts as its matrix products (4 B H L S d forward, and
    10 B H L S d backward, the scores recomputed), beside a matmul and a convolution in their kinds."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from flops import count_flops, op_kind

    b, h, length, s, d = 2, 3, 5, 7, 8
    q = torch.randn(b, h, length, d, requires_grad=True)
    k, v = torch.randn(b, h, s, d, requires_grad=True), torch.randn(b, h, s, d, requires_grad=True)
    attention = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward())
    assert attention["attention"] == 14 * b * h * length * s * d and attention["all"] == attention["attention"]
    conv, x = torch.nn.Conv2d(3, 4, 3), torch.randn(2, 3, 6, 6)
    mixed = count_flops(lambda: (conv(x).sum() + (torch.randn(3, 5, requires_grad=True) @ torch.randn(5, 2)).sum())
                        .backward())
    assert mixed["matmul"] == 2 * 3 * 5 * 2 * 2  # forward, and the gradient of the left factor
    assert mixed["convolution"] > 0 and mixed["attention"] == 0
    assert [op_kind(n) for n in ("aten::mm", "aten.addmm", "aten::mkldnn_convolution", "aten::_scaled_dot_product_"
                                 "flash_attention_for_cpu_backward", "aten::copy_")] == \
        ["matmul", "matmul", "convolution", "attention", "other"]


@pytest.mark.skipif(not ONEDNN_AVAILABLE, reason="this torch build has no oneDNN linear")
def test_flops_count_a_linear_layer_the_same_on_either_backend(monkeypatch) -> None:
    """oneDNN's matmul counts as addmm does: 2 M K N forward, twice that backward (input and weight)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from flops import count_flops, op_kind

    from msvae_hf.backends.linear import linear

    x, w, b = torch.randn(3, 7, 5, requires_grad=True), torch.randn(6, 5, requires_grad=True), torch.randn(6)
    counts = []
    for enabled in (True, False):
        counts.append(count_flops(lambda enabled=enabled: linear(x, w, b, onednn=enabled).sum().backward()))
    assert counts[0] == counts[1] and counts[0]["matmul"] == 3 * 2 * 21 * 5 * 6
    assert op_kind("mkldnn::_linear_pointwise") == "matmul"


def test_train_step_profiles_an_update_by_kind_of_operator(tmp_path: Path) -> None:
    out = tmp_path / "train_step.json"
    subprocess.run(["python", "benchmarks/train_step.py", "--tiny", "--batch-size", "4", "--steps", "1", "--warmup",
                    "1", "--gemm-size", "256", "--profile-steps", "1", "--out", str(out)], cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=600)
    data = json.loads(out.read_text())
    profile = data["msvae_profile"]
    assert set(profile["ms_per_update"]) == set(profile["flops_per_update"]) == {"convolution", "matmul", "attention",
                                                                                 "other"}
    assert profile["flops_per_update"]["attention"] > 0 and profile["flops_per_update"]["other"] == 0
    # the timed update's count is the profiled one's: the same forward and backward, counted the same way
    assert data["models"]["msvae"]["flops_fwd_bwd"] == sum(profile["flops_per_update"].values())
    # the peak sampled before the models and after each timing (the default allocator's MS-VAE and the three)
    peaks = data["gemm_peak_flops_per_s_samples"]
    assert len(peaks) == 5 and data["gemm_peak_flops_per_s"] == max(peaks)
    assert data["models"]["msvae"]["fraction_of_gemm_peak"] == pytest.approx(
        data["models"]["msvae"]["achieved_flops_per_s"] / max(peaks))
    # oneDNN's matmul sampled alongside; the best peak is the higher of the two backends'
    onednn = data["onednn_gemm_peak_flops_per_s_samples"]
    assert len(onednn) == (5 if ONEDNN_AVAILABLE else 0)
    assert data["best_gemm_peak_flops_per_s"] == max(peaks + onednn)
    assert data["models"]["msvae"]["fraction_of_best_gemm_peak"] == pytest.approx(
        data["models"]["msvae"]["achieved_flops_per_s"] / data["best_gemm_peak_flops_per_s"])
    assert profile["fraction_of_best_gemm_peak"]["matmul"] == pytest.approx(
        profile["flops_per_s"]["matmul"] / data["best_gemm_peak_flops_per_s"])


@pytest.mark.slow
def test_demo_dataset_generates_a_set_once_and_measures_it_as_stored(tmp_path: Path) -> None:
    """benchmarks/demo_dataset.py: make_demos timed, every split's rows and bytes (all of the folder's files), an
    epoch of the unpaired split; run again on the finished set it generates nothing and measures the same."""
    folder, command = tmp_path / "set", ["python", "benchmarks/demo_dataset.py", "--level", "GoToSeqLocal",
                                         "--paired", "3", "--unpaired", "8", "--valid", "2", "--test", "1",
                                         "--num-proc", "1", "--dir", str(tmp_path / "set")]
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    for out in (first, again):
        subprocess.run([*command, "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=600)
    made, measured = json.loads(first.read_text()), json.loads(again.read_text())
    assert {k: v["rows"] for k, v in made["splits"].items()} == {"paired": 3, "unpaired": 8, "valid": 2, "test": 1}
    assert made["bytes_on_disk"] == sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert made["bytes_per_demo"] == made["bytes_on_disk"] / 14 and made["iteration"]["rows_iterated"] == 8
    generation = made["generation"]
    assert generation["chunks_at_start"] == 0 and generation["demos_per_s"] == 14 / generation["wall_seconds"]
    assert "--unpaired 8" in generation["command"] and generation["cpu_seconds"] > 0
    assert measured["generation"] is None and measured["splits"] == made["splits"]


@pytest.mark.slow
def test_attention_layout_times_both_layouts_of_every_model(tmp_path: Path) -> None:
    """benchmarks/attention_layout.py: each model's updates in both layouts, their FLOPs (the length groups pad
    less, so count fewer) and the speed-up as the ratio of the medians."""
    out = tmp_path / "attention_layout.json"
    subprocess.run(["python", "benchmarks/attention_layout.py", "--tiny", "--batch-size", "6", "--steps", "1",
                    "--warmup", "1", "--gemm-size", "256", "--out", str(out)], cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=600)
    data = json.loads(out.read_text())
    assert set(data["models"]) == {"follower", "speaker", "msvae"}
    for r in data["models"].values():
        assert r["grouped"]["flops_fwd_bwd"] <= r["padded"]["flops_fwd_bwd"]
        assert r["padded_over_grouped"] == pytest.approx(
            r["padded"]["seconds_per_update"] / r["grouped"]["seconds_per_update"])
        assert r["grouped"]["fraction_of_gemm_peak"] == pytest.approx(
            r["grouped"]["achieved_flops_per_s"] / data["gemm_peak_flops_per_s"])
    assert data["models"]["msvae"]["grouped"]["flops_fwd_bwd"] < data["models"]["msvae"]["padded"]["flops_fwd_bwd"]
    assert data["switch"] == "length_groups" and data["settings"] == ["padded", "grouped"]


@pytest.mark.slow
def test_attention_layout_times_the_linear_backends(tmp_path: Path) -> None:
    """--switch linear over two batches in turn: both settings timed and named, the ratio and the fractions of the
    best peak. A tiny batch's products are all under linear.MIN_ROWS rows, so both settings run F.linear and count
    the same FLOPs; test_flops_count_a_linear_layer_the_same_on_either_backend covers oneDNN's products."""
    out = tmp_path / "linear.json"
    subprocess.run(["python", "benchmarks/attention_layout.py", "--switch", "linear", "--tiny", "--batch-size", "4",
                    "--batches", "2", "--steps", "2", "--warmup", "1", "--gemm-size", "256", "--out", str(out)],
                   cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=600)
    data = json.loads(out.read_text())
    assert data["switch"] == "linear" and data["settings"] == ["f_linear", "onednn"] and data["batches"] == 2
    for r in data["models"].values():
        assert r["onednn"]["flops_fwd_bwd"] == r["f_linear"]["flops_fwd_bwd"] > 0
        assert r["f_linear_over_onednn"] == pytest.approx(
            r["f_linear"]["seconds_per_update"] / r["onednn"]["seconds_per_update"])
        assert r["onednn"]["fraction_of_best_gemm_peak"] == pytest.approx(
            r["onednn"]["achieved_flops_per_s"] / data["best_gemm_peak_flops_per_s"])


@pytest.mark.slow
def test_demo_generation_times_its_rounds_and_reports_the_median_ratio(tmp_path: Path) -> None:
    """benchmarks/demo_generation.py --repeats, end to end: one 1-process and one 2-process timing per round, one
    ratio per round, the speed-up their median (the order of the rounds: the test below)."""
    out = tmp_path / "generation.json"
    subprocess.run(["python", "benchmarks/demo_generation.py", "--level", "GoToSeqLocal", "--rate-demos", "6",
                    "--repeats", "2", "--num-demos", "10", "--big-dir", str(tmp_path / "big"), "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    data = json.loads(out.read_text())
    assert data["repeats"] == 2 and len(data["seconds_1proc"]) == len(data["seconds_2proc"]) == 2
    ratios = [one / two for one, two in zip(data["seconds_1proc"], data["seconds_2proc"])]
    assert data["speedup_per_round"] == pytest.approx(ratios)
    assert data["speedup_2_vs_1"] == pytest.approx(sum(ratios) / 2)  # the median of two
    assert data["iteration"]["rows_iterated"] == 10
    # the package's default follower (FiLM on both maps): each z's pass runs the second convolution again
    film = tmp_path / "train_step_film.json"
    subprocess.run(["python", "benchmarks/train_step.py", "--tiny", "--batch-size", "4", "--steps", "1", "--warmup",
                    "1", "--gemm-size", "256", "--follower", "default", "--out", str(film)], cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=600)
    film_data = json.loads(film.read_text())
    assert data["follower"] == "head" and film_data["follower"] == "default"
    assert film_data["models"]["msvae"]["flops_fwd_bwd"] > data["models"]["msvae"]["flops_fwd_bwd"]


def test_demo_generation_rounds_alternate_which_count_of_processes_goes_first(monkeypatch) -> None:
    """Rounds 0, 2, ... time 1 process then 2, rounds 1, 3, ... 2 then 1; each round's ratio pairs its own two
    timings, and demos that differ between timings stop the benchmark."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import demo_generation

    calls, walls = [], iter([10.0, 5.0, 4.0, 9.0, 12.0, 6.0])

    def fake(level, n, num_proc, cache_dir):  # noqa: ANN001, ANN202
        calls.append(num_proc)
        return {"seed": [1, 2]}, next(walls), 1.0

    monkeypatch.setattr(demo_generation, "timed_generation", fake)
    _, timings = demo_generation.timed_rounds("L", 6, 3, "/tmp")
    assert calls == [1, 2, 2, 1, 1, 2]
    assert timings["seconds_1proc"] == [10.0, 9.0, 12.0] and timings["seconds_2proc"] == [5.0, 4.0, 6.0]
    assert timings["speedup_per_round"] == [2.0, 2.25, 2.0] and timings["speedup_2_vs_1"] == 2.0
    assert timings["demos_per_s_1proc"] == 6 / 10.0 and timings["demos_per_s_2proc"] == 6 / 5.0

    seeds = iter([[1, 2], [1, 3]])
    monkeypatch.setattr(demo_generation, "timed_generation", lambda *a: ({"seed": next(seeds)}, 1.0, 1.0))
    with pytest.raises(AssertionError, match="2 process"):
        demo_generation.timed_rounds("L", 6, 1, "/tmp")


@pytest.mark.slow
def test_demo_generation_refuses_fewer_than_one_round(tmp_path: Path) -> None:
    result = subprocess.run(["python", "benchmarks/demo_generation.py", "--repeats", "0", "--out",
                             str(tmp_path / "x.json")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0 and "--repeats must be at least 1, got 0" in result.stderr


def test_kernel_bound_copies_keep_values_sizes_and_strides(monkeypatch) -> None:
    """benchmarks/kernel_bound.py replays each call on copies laid out as the original: transposed, sliced with
    gaps, expanded (stride 0) and offset views keep their strides and values."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from kernel_bound import _copy

    base = torch.arange(60.0).view(6, 10)
    for view in (base.t(), base[1:5, 2:9:3], torch.arange(4.0).view(4, 1).expand(4, 7), base[3:], base):
        copy = _copy(view)
        assert copy.stride() == view.stride() and copy.shape == view.shape
        assert torch.equal(copy, view) and copy.untyped_storage().data_ptr() != view.untyped_storage().data_ptr()


def test_kernel_bound_records_each_distinct_product_once_with_its_count(monkeypatch) -> None:
    """The recorder keeps one call per operator, shapes, strides and arguments, counts repeats, leaves ops without
    FLOPs out, and its replay counts the FLOPs of every repeat."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from kernel_bound import record_kernels, replay

    a, b = torch.randn(8, 5), torch.randn(5, 3)

    def work() -> None:
        for _ in range(3):
            a @ b
        a.t().contiguous().t() @ b  # the same product on a left factor laid out column-major: a call of its own
        torch.relu(a)

    calls = record_kernels(work)
    assert [c["count"] for c in calls] == [3, 1] and all(str(c["func"]) == "aten.mm.default" for c in calls)
    assert calls[1]["args"][0].stride() == (1, 8)
    timed = replay(calls[0], repeats=2)
    assert timed["flops"] == 3 * 2 * 8 * 5 * 3 and timed["calls_per_update"] == 3 and timed["seconds"] > 0
    assert timed["kind"] == "matmul" and timed["shapes"] == [[8, 5], [5, 3]]


@pytest.mark.slow
@pytest.mark.parametrize("follower", ["head", "default"])
def test_kernel_bound_replays_every_product_of_each_update(tmp_path: Path, follower: str) -> None:
    """benchmarks/kernel_bound.py: per model, the replayed kernels carry exactly the FLOPs the update counts, the
    ceiling is their FLOPs over their time and the best peak, and the time outside them is the remainder; with
    either follower."""
    out = tmp_path / "kernel_bound.json"
    subprocess.run(["python", "benchmarks/kernel_bound.py", "--tiny", "--batch-size", "4", "--steps", "1",
                    "--warmup", "1", "--repeats", "1", "--gemm-size", "256", "--follower", follower,
                    "--out", str(out)], cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=600)
    data = json.loads(out.read_text())
    assert set(data["models"]) == {"follower", "speaker", "msvae"} and data["follower"] == follower
    assert len(data["gemm_peak_flops_per_s_samples"]) == 4
    for r in data["models"].values():
        update, kernels = r["update"], r["kernels"]
        assert kernels["flops"] == update["flops_fwd_bwd"] > 0
        assert kernels["flops"] == sum(v["flops"] for v in kernels["by_kind"].values())
        assert kernels["seconds"] == pytest.approx(sum(v["seconds"] for v in kernels["by_kind"].values()))
        assert kernels["calls_per_update"] >= kernels["distinct_calls"] >= len(kernels["top_calls"]) > 0
        assert kernels["ceiling_fraction_of_best_gemm_peak"] == pytest.approx(
            kernels["flops"] / kernels["seconds"] / data["best_gemm_peak_flops_per_s"])
        assert r["seconds_outside_kernels"] == pytest.approx(update["seconds_per_update"] - kernels["seconds"])
        times = [t["seconds"] for t in kernels["top_calls"]]
        assert times == sorted(times, reverse=True)
    assert data["models"]["msvae"]["kernels"]["by_kind"]["convolution"]["flops"] > 0


def test_film_norm_closed_form_equals_the_plain_film_in_value_and_gradient(tmp_path: Path, monkeypatch) -> None:
    """benchmarks/film_norm.py's trial, one autograd function with a closed-form backward, computes the encoder's
    FiLM (``_modulate``) and its gradients to every input (float64, numerical gradients too); the script times both
    and reports their largest relative difference in float32."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from film_norm import ClosedFormFiLMNorm

    from msvae_hf.models.modules import _modulate

    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(1, 6).double()
    with torch.no_grad():
        norm.weight.normal_(), norm.bias.normal_()
    maps = (torch.randn(5, 6, 3, 3, dtype=torch.float64) * 2 + 1).requires_grad_()
    film = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    leaves = (maps, film, norm.weight, norm.bias)
    closed = ClosedFormFiLMNorm.apply(maps, film, norm.weight, norm.bias, norm.eps)
    plain = _modulate(maps, film, norm)
    torch.testing.assert_close(closed, plain)
    grad = torch.randn_like(plain)
    for a, b in zip(torch.autograd.grad(closed, leaves, grad), torch.autograd.grad(plain, leaves, grad)):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda *x: ClosedFormFiLMNorm.apply(*x, norm.eps), leaves)
    out = tmp_path / "film_norm.json"
    subprocess.run(["python", "benchmarks/film_norm.py", "--frames", "16", "--repeats", "1", "--out", str(out)],
                   cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_text())
    assert data["map"] == [16, 64, 7, 7] and data["max_relative_difference"] < 1e-4
    ms = data["film_norm_ms"]
    assert data["closed_form_speedup"] == pytest.approx(ms["plain"] / ms["closed_form"])


@pytest.mark.slow
def test_objective_gradients_from_the_baselines_under_each_reduction(baseline_runs, tiny_demos, tmp_path) -> None:
    """benchmarks/objective_gradients.py on MS-VAE built from the baselines (App. D): under "mean" the likelihoods
    shrink by the sequence lengths, D' does not change, and the alpha sweep scales D''s norm linearly."""
    out = {}
    for reduction in ("sum", "mean"):
        out[reduction] = tmp_path / f"{reduction}.json"
        subprocess.run(["python", "benchmarks/objective_gradients.py",
                        "--init-follower", str(baseline_runs["follower"] / "best"),
                        "--init-speaker", str(baseline_runs["speaker"] / "best"),
                        "--loss-reduction", reduction, "--demos", str(tiny_demos), "--num-paired", "40",
                        "--batch-size", "8", "--step", "0", "--alphas", "1", "10", "--out", str(out[reduction])],
                       cwd=ROOT, check=True, capture_output=True, timeout=600)
    summed, mean = (json.loads(out[r].read_text()) for r in ("sum", "mean"))
    assert (summed["loss_reduction"], mean["loss_reduction"]) == ("sum", "mean")
    assert mean["grad_norm_d_per_unit_alpha"] == pytest.approx(summed["grad_norm_d_per_unit_alpha"], rel=1e-5)
    assert mean["grad_norm_j_bar"] < summed["grad_norm_j_bar"]
    assert mean["grad_norm_gamma_v"] < summed["grad_norm_gamma_v"]
    sweep = summed["alpha_sweep"]
    assert sweep[1]["grad_norm_alpha_d"] == pytest.approx(10 * sweep[0]["grad_norm_alpha_d"])
    assert summed["alpha_matching_j_bar"] * summed["grad_norm_d_per_unit_alpha"] == pytest.approx(
        summed["grad_norm_j_bar"])


@pytest.mark.slow
def test_gpu_update_benchmark_runs_on_the_cpu(tmp_path: Path) -> None:
    """benchmarks/gpu_update.py with tiny models on the CPU (uncaptured): every layout measured, none failed, and
    benchmarks/gpu_summary.py renders its table."""
    demos = tmp_path / "demos"
    subprocess.run(["python", "scripts/make_demos.py", "--level", "BossLocal", "--paired", "16", "--unpaired", "16",
                    "--valid", "4", "--test", "4", "--seed", "0", "--out", str(demos)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    out = tmp_path / "gpu_update.json"
    subprocess.run(["python", "benchmarks/gpu_update.py", "--demos", str(demos), "--device", "cpu", "--tiny",
                    "--runs", "1", "2", "--updates", "2", "--eager-updates", "1", "--batches", "2", "--batch-size",
                    "4", "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=600,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "MSVAE_SKIP_DEMO_CHECKSUMS": "1"})
    data = json.loads(out.read_text())
    assert [c["runs"] for c in data["captured"]] == [1, 2]
    assert all("failed" not in c and c["updates_per_s"] > 0 for c in [*data["captured"], data["static_eager"]])
    assert max(data["parity"].values()) < 1e-4
    table = subprocess.run(["python", "benchmarks/gpu_summary.py", str(tmp_path)], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout
    assert "| CapturedUpdate, R = 2 |" in table


@pytest.mark.slow
def test_train_processes_runs_seeds_side_by_side_and_adds_their_rates(tiny_demos: Path, tmp_path: Path) -> None:
    """benchmarks/train_processes.py: two tiny train.py runs at once (seeds 0 and 1), each rate from its
    results.json, their sum the machine's; a run that fails is reported with its log, not summed;
    benchmarks/gpu_summary.py gives the row."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({"model_type": "msvae", "demos": str(tiny_demos), **TINY_TRAIN,
                                  "model": tiny_model("msvae")}))
    out = tmp_path / "train_processes.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(["python", "benchmarks/train_processes.py", "--config", str(config), "--processes", "2",
                    "--timeout", "500", "--out", str(out), "--", "--max-updates", "2", "--eval-every", "2"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600, env=env)
    data = json.loads(out.read_text())
    assert [r["seed"] for r in data["runs"]] == [0, 1] and data["finished"] == 2
    assert all(r["updates"] == 2 and r["updates_per_s"] > 0 for r in data["runs"])
    assert data["updates_per_s"] == pytest.approx(sum(r["updates_per_s"] for r in data["runs"]))
    assert data["updates_per_s_span"] == pytest.approx(4 / data["span_s"])  # 2 + 2 updates over the whole span
    assert data["train_flags"] == ["--max-updates", "2", "--eval-every", "2"]
    table = subprocess.run(["python", "benchmarks/gpu_summary.py", str(tmp_path)], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout
    assert "| 2 x scripts/train.py --max-updates 2 --eval-every 2 at once |" in table
    subprocess.run(["python", "benchmarks/train_processes.py", "--config", str(config), "--processes", "1",
                    "--out", str(out), "--", "--level", "BossLokal"], cwd=ROOT, check=True, capture_output=True,
                   timeout=600, env=env)
    failed = json.loads(out.read_text())
    assert failed["finished"] == 0 and failed["updates_per_s"] is None
    assert "unknown level 'BossLokal'" in " ".join(failed["runs"][0]["log_tail"])  # the trainer's own refusal


@pytest.mark.slow
def test_follower_variants_times_every_variant_against_head_prev(tmp_path: Path) -> None:
    out = tmp_path / "follower_variants.json"
    subprocess.run(["python", "benchmarks/follower_variants.py", "--tiny", "--batch-size", "4", "--rounds", "1",
                    "--steps", "1", "--out", str(out)], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   check=True, capture_output=True, timeout=600)
    data = json.loads(out.read_text())
    for name in ("follower", "msvae"):
        variants = data["models"][name]
        assert set(variants) == {"head_prev", "head", "film_prev", "film", "film_recurrent", "film_both",
                                 "film2"}
        assert variants["head_prev"]["ratio_to_head_prev"] == 1.0
        # FiLM adds parameters, dropping a_{t-1} removes its embedding
        assert variants["film"]["parameters"] > variants["head"]["parameters"] < variants["head_prev"]["parameters"]


def test_cli_parsers_holds_the_package_parser_to_every_promise(tmp_path: Path) -> None:
    """benchmarks/cli_parsers.py: the training scripts' parser passes each case of the command line's contract (a
    candidate parser that is not installed is recorded as such, one that is with its cases)."""
    out = tmp_path / "cli.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cli_parsers.py"), "--out", str(out)], check=True,
                   capture_output=True, cwd=ROOT)
    result = json.loads(out.read_text())
    ours = result["parsers"]["ours"]
    assert ours["passed"] == ours["of"] == len(result["cases"]) == 13 and ours["help_shows_field_docs"] is True
    for name in ("tyro", "jsonargparse", "draccus"):
        other = result["parsers"][name]
        assert other == {"installed": False} or set(other["cases"]) == set(result["cases"])


def test_rescoring_rounds_times_three_labellings_whose_labels_agree(baseline_runs, tiny_demos, tmp_path) -> None:
    """benchmarks/rescoring_rounds.py: the round that reads kept candidates writes the labels of the one that
    speaks them, and each round's seconds come with their ratio to the speaking one."""
    out = tmp_path / "rounds.json"
    subprocess.run(["python", "benchmarks/rescoring_rounds.py", "--speaker", str(baseline_runs["speaker"] / "best"),
                    "--rescore-with", str(baseline_runs["follower"] / "best"), "--demos", str(tiny_demos),
                    "--num-unpaired", "20", "--batch-size", "24", "--lam", "0.3", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["read_labels_equal_spoken"] is True and report["trajectories"] == 20
    assert set(report["seconds"]) == {"spoken", "spoken_and_kept", "read", "collating"}
    assert report["ratio_to_spoken"] == pytest.approx(
        {name: value / report["seconds"]["spoken"] for name, value in report["seconds"].items()})
