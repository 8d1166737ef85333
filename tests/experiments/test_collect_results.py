"""experiments/collect_results.py: App. D's statistics over seeds (mean, sd, one-sided Student t-test)."""

from __future__ import annotations

import math

import collect_results
import pytest


def run_row(sr: float, bleu_best: float, bleu_speaker: float | None) -> dict:
    """A collect_results row: bleu_speaker None stands for a run made before best_speaker/ existed."""
    if bleu_speaker is None:
        return {"test": {"success_rate": sr}, "test_bleu": bleu_best, "test_bleu_of_best": None, "best_speaker": None}
    return {"test": {"success_rate": sr}, "test_bleu": bleu_speaker, "test_bleu_of_best": bleu_best,
            "best_speaker": {"step": 1, "score": 0.0}}


def student_p_greater(a: list[float], b: list[float]) -> float:
    """One-sided p of mean(a) > mean(b), pooled variance, by the t distribution's closed form for df = 4."""
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    pooled = (sum((x - ma) ** 2 for x in a) + sum((x - mb) ** 2 for x in b)) / (na + nb - 2)
    t = (ma - mb) / math.sqrt(pooled * (1 / na + 1 / nb))
    assert na + nb - 2 == 4
    # Student t with 4 degrees of freedom: CDF(t) = 1/2 + 3/8 u (1 - u^2 / 12), u = t / sqrt(1 + t^2 / 4)
    u = t / math.sqrt(1 + t * t / 4)
    return 0.5 - 3 / 8 * u * (1 - u * u / 12)


def test_seed_statistics_match_closed_form():
    names = list(collect_results.SEED_GROUPS.values())
    paired = [(0.50, 23.0, 24.0), (0.52, 24.0, 25.5), (0.53, 22.0, 24.5)]
    full = [(0.66, 18.0, None), (0.63, 20.0, 21.0), (0.65, 19.0, 20.0)]
    rows = {name: run_row(*v) for name, v in zip(names[0], paired)}
    rows.update({name: run_row(*v) for name, v in zip(names[1], full)})
    stats = collect_results.seed_statistics(rows)
    method_paired, method_full, method_gamma1 = list(collect_results.SEED_GROUPS)[:3]
    sr = stats[method_full]["test SR"]
    mean = (0.66 + 0.63 + 0.65) / 3
    assert sr["n"] == 3 and sr["mean"] == pytest.approx(mean)
    assert sr["sd"] == pytest.approx(math.sqrt(((0.66 - mean) ** 2 + (0.63 - mean) ** 2 + (0.65 - mean) ** 2) / 2))
    assert sr["p_greater_than_paired_only"] == pytest.approx(student_p_greater([0.66, 0.63, 0.65], [0.50, 0.52, 0.53]))
    bleu = stats[method_full]["test BLEU of best/"]
    assert bleu["values"] == [18.0, 20.0, 19.0]  # the run without best_speaker/ counts with its best/ BLEU
    expected = student_p_greater([18.0, 20.0, 19.0], [23.0, 24.0, 22.0])
    assert bleu["p_greater_than_paired_only"] == pytest.approx(expected)
    assert bleu["p_greater_than_paired_only"] > 0.99 and bleu["p_two_sided"] < 0.05  # lower, not higher
    assert stats[method_full]["test BLEU of best_speaker/"]["values"] == [21.0, 20.0]
    assert "p_greater_than_paired_only" not in stats[method_paired]["test SR"]  # the reference itself
    assert stats[method_gamma1]["test SR"]["n"] == 0  # no runs: reported as missing, not as zeros


def test_grid_runs_group_by_config_with_reference_first(tmp_path):
    for name in ("msvae_gamma1_seed0", "msvae_paired_seed1", "msvae_paired_seed0", "msvae_gamma1_seed1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text("{}")
    (tmp_path / "msvae_gamma1_seed2").mkdir()  # stopped early: no results.json, left out
    labels, groups = collect_results.grid_runs(tmp_path)
    assert list(groups) == ["msvae_paired", "msvae_gamma1"]
    assert groups == {"msvae_paired": ["msvae_paired_seed0", "msvae_paired_seed1"],
                      "msvae_gamma1": ["msvae_gamma1_seed0", "msvae_gamma1_seed1"]}
    assert labels["msvae_gamma1_seed1"] == ("msvae_gamma1, seed 1", True, True)
    assert labels["msvae_paired_seed0"][1:] == (False, False)
    rows = {name: run_row(0.5 + 0.1 * ("gamma1" in name), 20.0, 21.0 + int(name[-1])) for name in labels}
    stats = collect_results.seed_statistics(rows, groups)
    assert stats["msvae_gamma1"]["test SR"]["mean"] == pytest.approx(0.6)
    assert "p_greater_than_paired_only" in stats["msvae_gamma1"]["test BLEU of best_speaker/"]


def test_grid_runs_without_reference_is_an_error(tmp_path):
    (tmp_path / "msvae_gamma1_seed0").mkdir()
    (tmp_path / "msvae_gamma1_seed0" / "results.json").write_text("{}")
    with pytest.raises(SystemExit, match="msvae_paired"):
        collect_results.grid_runs(tmp_path)


def test_speaker_seed_table_has_only_the_bleu_column():
    """Speaker runs have no SR and no best_speaker/: their table shows BLEU of best/ (best by valid BLEU)."""
    speaker_row = lambda bleu: {"test": None, "test_bleu": bleu, "test_bleu_of_best": None, "best_speaker": None}
    names = list(collect_results.SPEAKER_SEED_GROUPS.values())
    rows = {name: speaker_row(24.0 + i + 2.0 * g) for g, group in enumerate(names) for i, name in enumerate(group)}
    stats = collect_results.seed_statistics(rows, collect_results.SPEAKER_SEED_GROUPS)
    lines = collect_results.seed_lines(stats, "speaker, paired only")
    assert lines[3] == "| method | test BLEU of best/ |"
    reference, second = list(collect_results.SPEAKER_SEED_GROUPS)[:2]
    assert lines[5].startswith(f"| {reference} | 25 +- 1 (n = 3) |")
    p = student_p_greater([26.0, 27.0, 28.0], [24.0, 25.0, 26.0])
    assert f"| {second} | 27 +- 1 (n = 3), p = {p:.2g}" in lines[6]
    empty = collect_results.seed_statistics({}, collect_results.SPEAKER_SEED_GROUPS)
    assert collect_results.seed_lines(empty, "x") == []
