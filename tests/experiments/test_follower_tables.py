"""The follower's tables (experiments/result_tables/follower.py): the ablation's mean and sd over seeds with the
gap between SR and SR told another mission, and Table 1's two followers at equal updates."""

from __future__ import annotations

import json
from pathlib import Path

from result_tables.follower import table_follower_ablation, table_follower_scale


def _record(path: Path, sr: float, other: float, history: list[dict] | None = None, updates: int = 1200,
            config: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    test = {"success_rate": sr, "success_rate_other_mission": other, "spl": sr / 2, "mean_steps": 50.0,
            "bot_mean_steps": 9.0}
    path.write_text(json.dumps({"test": test, "updates": updates, "history": history or [], "config": config or {}}))


def test_ablation_table_reads_every_seed_and_the_benchmark(tmp_path: Path) -> None:
    folder = tmp_path / "gotoseqlocal" / "follower_ablation"
    _record(folder / "film_seed0.json", 0.8, 0.4)
    _record(folder / "film_seed1.json", 0.6, 0.4)
    _record(folder / "head_prev_seed0.json", 0.5, 0.5)
    bench = tmp_path / "benchmarks" / "follower_variants.json"
    bench.parent.mkdir(parents=True)
    bench.write_text(json.dumps({"models": {"follower": {"film": {"seconds_per_update": 0.5,
                                                                  "ratio_to_head_prev": 1.25}}}}))
    lines = table_follower_ablation("gotoseqlocal", tmp_path)
    film = next(line for line in lines if line.startswith("| film |"))
    # SR 70 +- 14.1 over two seeds, told another 40 +- 0, the gap 30 +- 14.1; the benchmark's speed
    assert "| 70.0 ± 14.1 | 40.0 ± 0.0 |" in film and "| 30.0 ± 14.1 | 0.500 (1.25) | 2 |" in film
    head = next(line for line in lines if line.startswith("| head_prev |"))
    assert "| 50.0 | 50.0 |" in head and "| 0.0 | - | 1 |" in head
    assert not any(line.startswith("| head |") for line in lines)  # no records, no row


def test_scale_table_reads_each_runs_settings_and_compares_at_equal_updates(tmp_path: Path) -> None:
    history = [{"step": s, "valid/success_rate": s / 10000, "valid/action_accuracy": 0.9,
                "valid/action_accuracy_other_instruction": 0.6} for s in (1000, 2000, 3000, 4000)]
    runs = tmp_path / "gotoseqlocal" / "runs"
    film = {"model": {"follower_conditioning": "film", "previous_action_input": False}}
    _record(runs / "follower_m100k_attention_film.json", 0.9, 0.3, history, 4000, film)
    _record(runs / "follower_m100k_attention.json", 0.57, 0.5, [{"step": 1000, "valid/success_rate": 0.54}], 10000)
    _record(runs / "follower_m100k_attention_film_lr1e4.json", 0.8, 0.5, history, 2000,
            {**film, "learning_rate": 1e-4, "init_from": "runs/gotoseqlocal/follower_m100k_attention_film_10k/best"})
    lines = table_follower_scale("gotoseqlocal", tmp_path)
    assert lines[2].startswith("| head | head | yes | 128 | 10000 at 0.001 | 57.0 |")
    assert "| 54.0 | - | - | - |" in lines[2]
    assert lines[3].startswith("| film | film | no | 128 | 4000 at 0.001 | 90.0 | 30.0 |")
    assert "| 10.0 | 20.0 | 40.0 | - | 0.900 / 0.600 |" in lines[3]
    # a run started from another's weights: its recipe names the start, and its updates are not matched
    assert lines[4].startswith("| film_lr1e4 | film | no | 128 | 2000 at 0.0001, from "
                               "follower_m100k_attention_film_10k | 80.0 | 50.0 |")
    assert "| - | - | - | - | 0.900 / 0.600 |" in lines[4]
