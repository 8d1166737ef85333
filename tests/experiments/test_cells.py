"""experiments/cells.py: every level's cells hang together (configs exist and load, needs exist and come first,
every run has a row and a label) without running any of them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from cells import (
    BOSSLOCAL_CURVE_ROWS,
    BOSSLOCAL_ROWS,
    BOSSLOCAL_THREE_SEEDS,
    LEVELS,
    QUESTIONS,
    Cell,
    demos_dir,
    level_cells,
    level_rows,
    row_config,
    row_label,
    run_row,
)
from conftest import load_script
from follower_ablation import SEEDS
from follower_ablation import command as ablation_command
from result_tables.follower import VARIANTS

from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER
from msvae_hf.training.train_config import TrainConfig, load_config

REPO = Path(__file__).resolve().parents[2]
SEED_CHOICES = (None, (0,), (0, 1, 2, 3))  # each row's own seeds; seed 0 only; more seeds than the study ran
CASES = [(level, seeds) for level in LEVELS for seeds in SEED_CHOICES]


def train_config(cell) -> TrainConfig:
    """The TrainConfig a training cell's command gives (as scripts/train.py reads it), from the repository root."""
    config, overrides = load_script("train").parse_args(list(cell.command[2:]))
    return load_config(str(REPO / config), overrides)


@pytest.mark.parametrize("path", sorted((REPO / "configs").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_config_loads_for_either_level_and_names_its_run_folder(path: Path) -> None:
    for folder, level in LEVELS.items():
        cfg = load_config(str(path), {"level": level})
        assert "{level}" not in "".join(str(v) for v in dataclasses.asdict(cfg).values())
        if path.name != "base.yaml":
            assert cfg.output_dir == f"runs/{folder}/{path.stem}"
    assert len(list((REPO / "configs").rglob("*.yaml"))) < 50  # one file per method, the rows' settings as flags


def test_a_config_that_names_the_level_needs_one() -> None:
    with pytest.raises(ValueError, match=r"\{level\} in demos, output_dir, .*msvae.yaml.*--level BossLocal"):
        load_config(str(REPO / "configs" / "msvae.yaml"))
    with pytest.raises(ValueError, match="unknown level 'bosslocal'"):
        load_config(str(REPO / "configs" / "msvae.yaml"), {"level": "bosslocal"})


def resolved_cells() -> dict[str, dict]:
    """Every training cell of both studies and of the follower ablation, and every row kept but not run: the
    fields of its TrainConfig off their defaults (threads aside), by ``<level>/<cell>``."""
    defaults = TrainConfig.defaults()

    def slim(cfg: TrainConfig) -> dict:
        return {k: v for k, v in dataclasses.asdict(cfg).items() if k != "threads" and v != defaults[k]}

    out = {}
    for level in LEVELS:
        out |= {f"{level}/{cell.name}": slim(train_config(cell)) for cell in level_cells(level) if cell.run_dir}
        out |= {f"{level}/{row}/seed0": slim(row_config(level, row))
                for row, spec in level_rows(level).items() if not spec.seeds}
        for variant in VARIANTS:
            for seed in SEEDS:
                config, overrides = load_script("train").parse_args(ablation_command(level, variant, seed, 1)[2:])
                out[f"{level}/follower_ablation/{variant}_seed{seed}"] = slim(load_config(str(REPO / config),
                                                                                          overrides))
    return out


def test_every_cell_resolves_to_the_settings_it_was_run_with() -> None:
    """tests/experiments/data/study_configs.json holds each cell's settings as the per-level config files
    (configs/<level>/<row>.yaml, a file per row) gave them; the method files and the rows' flags give the same,
    the evaluation level now named (before: None, the demonstrations' level, the same level), the follower's
    conditioning named where the row left it to the model's default (HEAD_FOLLOWER's, which the default is no
    longer), and a FiLM follower's one modulated map (film_layers 1, the only one before it was a choice)."""
    recorded = json.loads((Path(__file__).parent / "data" / "study_configs.json").read_text())
    now = resolved_cells()
    assert set(recorded) <= set(now)
    for name, settings in recorded.items():
        expected = {"level": LEVELS[name.split("/")[0]], **settings}
        # the model's defaults then, HEAD_FOLLOWER, now named by the rows (the ablation names its variants)
        expected["model"] = {**HEAD_FOLLOWER, **settings.get("model", {})}
        if expected["model"]["follower_conditioning"] != "head":
            expected["model"].setdefault("film_layers", 1)
        assert now[name] == expected, name


@pytest.mark.parametrize(("level", "seeds"), CASES)
def test_needs_exist_and_come_first(level: str, seeds: tuple[int, ...] | None) -> None:
    cells = level_cells(level, seeds)
    names = [c.name for c in cells]
    assert len(names) == len(set(names))
    seen: set[str] = set()
    for cell in cells:  # each need listed before the cell: the needs exist and hold no cycle
        assert set(cell.needs) <= seen, (cell.name, sorted(set(cell.needs) - seen))
        assert cell.question in QUESTIONS
        assert set(cell.after) <= set(names), (cell.name, cell.after)
        seen.add(cell.name)


@pytest.mark.parametrize(("level", "seeds"), CASES)
def test_training_cells_read_existing_configs_and_write_their_run_folder(level: str, seeds) -> None:
    cells = level_cells(level, seeds)
    outputs = {c.name: c.output for c in cells}
    for cell in cells:
        if "--config" in cell.command:
            assert (REPO / cell.command[cell.command.index("--config") + 1]).is_file(), cell.name
        if cell.run_dir is None:
            continue
        cfg = train_config(cell)
        assert Path(cfg.output_dir) == cell.run_dir and cell.output == cell.run_dir / "results.json"
        made = [outputs[n].parent for n in cell.needs]  # the folders the cells it needs write
        for path in (cfg.init_follower, cfg.init_speaker, cfg.init_from, cfg.pseudo_labels):
            if path is not None:
                assert any(Path(path) == folder or folder in Path(path).parents for folder in made), (cell.name, path)
        if cfg.continue_from is not None:  # the run it continues, made by the cell it runs after
            assert [Path(cfg.continue_from)] == [outputs[n].parent for n in cell.after], cell.name
        assert Path(cfg.demos) in made


@pytest.mark.parametrize("level", LEVELS)
def test_every_run_has_its_row_and_a_label(level: str) -> None:
    for cell in level_cells(level):
        if cell.run_dir is not None:
            row, seed = run_row(cell.run_dir.name)
            assert cell.name == f"{row}/seed{seed}"
            assert row_label(level, row)
    assert all(row_label(level, row) for row in level_rows(level))  # also the rows the study keeps but does not run
    with pytest.raises(KeyError):
        row_label(level, "no_such_row")


def test_bosslocal_rows_keep_their_seeds_and_budgets() -> None:
    """The study as run: its seeds per row, the runs stopped early at their budgets, seed k from its own
    pre-training, the students of every seed reading the seed-0 teacher's labels."""
    cells = {c.name: c for c in level_cells("bosslocal")}
    for row, spec in BOSSLOCAL_ROWS.items():
        assert {n for n in cells if n.startswith(f"{row}/seed")} == {f"{row}/seed{k}" for k in spec.seeds}
    assert train_config(cells["msvae_gamma10/seed0"]).max_updates == 400
    assert train_config(cells["msvae_fixeddec/seed0"]).max_updates == 1000
    front = train_config(cells["speaker_front_selftrain/seed3"])
    assert front.init_from == "runs/bosslocal/speaker_init_front_unpaired_seed3" and front.seed == 3
    assert front.pseudo_labels == "data/pseudo_labels/bosslocal/speaker_front"
    assert cells["labels/speaker_front"].needs == ("speaker_front_unpaired/seed0",)
    assert "--num-unpaired" in cells["labels/speaker_front"].command


def test_bosslocals_pairs_curve_runs_gotoseqlocals_rows_on_its_own_demonstrations() -> None:
    """BossLocal's curve rows are GoToSeqLocal's, one seed each (three for the supervised follower at each M, the
    front-cell speaker on 1,000 pairs and its student on 1,000 and 10,000 pairs), on data/bosslocal_curve (made there
    as the demos_curve cell), the front-cell route's students reading BossLocal's own seed-0 speaker's labels, and at
    M = 1,000 also, as seeds 1 and 2 of the own-teacher row, each its own seed's speaker's labels; the second round
    rescores each seed's speaker's candidates with that seed's first student (seed 0's the one-teacher row's), the
    third with its second round's."""
    cells = {c.name: c for c in level_cells("bosslocal")}
    assert cells["demos_curve"].command[cells["demos_curve"].command.index("--level") + 1] == "BossLocal"
    assert set(BOSSLOCAL_THREE_SEEDS) == {"follower_film2_m1k", "follower_film2_m3k", "follower_film2_m10k",
                                          "follower_film2_m100k", "speaker_cells_film2_m1k",
                                          "speaker_follower_cells_film2_m1k", "speaker_follower_cells_film2_m10k",
                                          "follower_film2_m3k_u10k", "speaker_follower_cells_rescored_top30_film2_m1k",
                                          "speaker_goals_film2_m1k", "speaker_follower_goals_film2_m1k",
                                          "speaker_cells_demo_film2_m1k", "speaker_follower_cells_demo_film2_m1k",
                                          "speaker_cells_parts_film2_m1k", "speaker_follower_cells_parts_film2_m1k",
                                          "speaker_follower_cells_parts_rescored_film2_m1k"}
    own, rescored = "speaker_follower_cells_own_film2_m1k", "speaker_follower_cells_rescored_own_film2_m1k"
    third = "speaker_follower_cells_rescored2_own_film2_m1k"
    for row in BOSSLOCAL_CURVE_ROWS:
        seeds = ((0, 1, 2) if row in BOSSLOCAL_THREE_SEEDS else (1, 2) if row.startswith((own, rescored, third))
                 else (0,))
        assert {n for n in cells if n.startswith(f"{row}/seed")} == {f"{row}/seed{k}" for k in seeds}
        config = train_config(cells[f"{row}/seed{seeds[0]}"])
        demos = "demos_parts_m1k" if row == "speaker_cells_parts_film2_m1k" else "demos_curve"  # the pairs and parts
        assert config.demos == str(demos_dir("bosslocal", demos))
        assert config.max_updates == (10_000 if row.endswith("_u10k") else 4000)
        assert demos in cells[f"{row}/seed{seeds[0]}"].needs
    # the budget rows continue each seed's 4000-update run, on the same pairs and labels, to 10,000 updates
    for row, seed in (("follower_film2_m3k", 0), ("follower_film2_m3k", 2), (own, 1), (own, 2),
                      ("speaker_follower_cells_film2_m1k", 0)):
        budget, base = cells[f"{row}_u10k/seed{seed}"], cells[f"{row}/seed{seed}"]
        config, before = train_config(budget), train_config(base)
        assert config.continue_from == str(base.run_dir) and budget.after == (base.name,)
        assert (config.seed, config.num_paired, config.pseudo_labels) == (
            before.seed, before.num_paired, before.pseudo_labels)
    assert "speaker_follower_cells_own_film2_m1k_u10k/seed0" not in cells  # its seed 0 is the one-teacher row's
    for seed in (1, 2):
        for m in ("m1k", "m10k"):
            assert f"labels/speaker_cells_film2_{m}" in cells[f"speaker_follower_cells_film2_{m}/seed{seed}"].needs
            assert train_config(cells[f"speaker_follower_cells_film2_{m}/seed{seed}"]).pseudo_labels == (
                f"data/pseudo_labels/bosslocal/speaker_cells_film2_{m}")
    student = train_config(cells["speaker_follower_cells_film2_m10k/seed0"])
    assert student.pseudo_labels == "data/pseudo_labels/bosslocal/speaker_cells_film2_m10k"
    assert student.num_paired == 10_000
    assert set(cells["labels/speaker_cells_film2_m10k"].needs) == {"speaker_cells_film2_m10k/seed0", "demos_curve"}
    # the front-cell speaker chosen on its labels: the front-cell run's training, another choice of best/
    for seed in (0, 1, 2):
        chosen, front = (train_config(cells[f"{row}/seed{seed}"])
                         for row in ("speaker_cells_demo_film2_m1k", "speaker_cells_film2_m1k"))
        assert (chosen.speaker_metric, front.speaker_metric) == ("demonstrated", "bleu")
        assert dataclasses.replace(chosen, speaker_metric="bleu", output_dir=front.output_dir) == front
        tag = "" if seed == 0 else f"_seed{seed}"
        student = cells[f"speaker_follower_cells_demo_film2_m1k/seed{seed}"]
        assert f"labels/speaker_cells_demo_film2_m1k{tag}" in student.needs
        assert train_config(student).pseudo_labels == f"data/pseudo_labels/bosslocal/speaker_cells_demo_film2_m1k{tag}"
    # the chosen speaker taught also on its pairs' parts: all of the parts folder's pairs, made from the curve's
    # first 1,000; its student learns from the curve's 1,000 pairs and its labels of the curve's unpaired trajectories
    parts, chosen = (train_config(cells[f"{row}/seed0"])
                     for row in ("speaker_cells_parts_film2_m1k", "speaker_cells_demo_film2_m1k"))
    assert (parts.demos, parts.num_paired) == ("data/bosslocal_parts_m1k", None)
    assert dataclasses.replace(parts, demos=chosen.demos, num_paired=1000, output_dir=chosen.output_dir) == chosen
    assert cells["demos_parts_m1k"].command == (
        "python", "experiments/paired_parts.py", "--demos", "data/bosslocal_curve", "--num-paired", "1000", "--out",
        "data/bosslocal_parts_m1k")
    assert cells["demos_parts_m1k"].needs == ("demos_curve",)
    student = cells["speaker_follower_cells_parts_film2_m1k/seed0"]
    assert set(student.needs) == {"demos_curve", "labels/speaker_cells_parts_film2_m1k"}
    assert (train_config(student).demos, train_config(student).num_paired) == ("data/bosslocal_curve", 1000)
    assert cells["labels/speaker_cells_parts_film2_m1k"].command[
        cells["labels/speaker_cells_parts_film2_m1k"].command.index("--demos") + 1] == "data/bosslocal_curve"
    # the goal-steps speaker's students: each seed on its own seed's speaker's labels
    for seed in (0, 1, 2):
        suffix = f"_seed{seed}" if seed else ""
        assert train_config(cells[f"speaker_follower_goals_film2_m1k/seed{seed}"]).pseudo_labels == (
            f"data/pseudo_labels/bosslocal/speaker_goals_film2_m1k{suffix}")
        assert train_config(cells[f"speaker_goals_film2_m1k/seed{seed}"]).model["goal_steps_weight"] == 1
    for seed in (1, 2):
        student = train_config(cells[f"{own}/seed{seed}"])
        assert student.seed == seed and student.num_paired == 1000
        assert student.pseudo_labels == f"data/pseudo_labels/bosslocal/speaker_cells_film2_m1k_seed{seed}"
        assert f"labels/speaker_cells_film2_m1k_seed{seed}" in cells[f"{own}/seed{seed}"].needs
        assert set(cells[f"labels/speaker_cells_film2_m1k_seed{seed}"].needs) == {f"speaker_cells_film2_m1k/seed{seed}",
                                                                                 "demos_curve"}
        labels = cells[f"labels/speaker_cells_film2_m1k_seed{seed}_rescored"]
        assert labels.command[labels.command.index("--rescore-with") + 1] == f"runs/bosslocal/{own}_seed{seed}/best"
        assert set(labels.needs) == {f"speaker_cells_film2_m1k/seed{seed}", f"{own}/seed{seed}", "demos_curve"}
        second = train_config(cells[f"{rescored}/seed{seed}"])
        assert (second.seed, second.num_paired, second.max_updates) == (seed, 1000, 4000)
        assert second.pseudo_labels == f"data/pseudo_labels/bosslocal/speaker_cells_film2_m1k_seed{seed}_rescored"
        labels = cells[f"labels/speaker_cells_film2_m1k_seed{seed}_rescored2"]  # the third round: the second's student
        assert labels.command[labels.command.index("--speaker") + 1] == \
            f"runs/bosslocal/speaker_cells_film2_m1k_seed{seed}/best"
        assert labels.command[labels.command.index("--rescore-with") + 1] == \
            f"runs/bosslocal/{rescored}_seed{seed}/best"
        student = train_config(cells[f"{third}/seed{seed}"])
        assert (student.seed, student.num_paired, student.max_updates) == (seed, 1000, 4000)
        assert student.pseudo_labels == f"data/pseudo_labels/bosslocal/speaker_cells_film2_m1k_seed{seed}_rescored2"
    # the second round's seed 0: seed 0's speaker's candidates rescored by the one-teacher row's seed-0 student
    assert level_rows("bosslocal")[rescored].seed0 == "speaker_follower_cells_rescored_film2_m1k"
    assert_rescores(cells["labels/speaker_cells_film2_m1k_rescored"], "speaker_cells_film2_m1k",
                    "speaker_follower_cells_film2_m1k", 0, level="bosslocal")
    second = train_config(cells["speaker_follower_cells_rescored_film2_m1k/seed0"])
    assert (second.seed, second.num_paired, second.max_updates) == (0, 1000, 4000)
    assert second.pseudo_labels == "data/pseudo_labels/bosslocal/speaker_cells_film2_m1k_rescored"
    # the third round's seed 0: the same candidates rescored by the second round's seed-0 student
    assert level_rows("bosslocal")[third].seed0 == "speaker_follower_cells_rescored2_film2_m1k"
    labels = cells["labels/speaker_cells_film2_m1k_rescored2"]
    assert labels.command[labels.command.index("--speaker") + 1] == "runs/bosslocal/speaker_cells_film2_m1k/best"
    assert labels.command[labels.command.index("--rescore-with") + 1] == \
        "runs/bosslocal/speaker_follower_cells_rescored_film2_m1k/best"
    student = train_config(cells["speaker_follower_cells_rescored2_film2_m1k/seed0"])
    assert (student.seed, student.num_paired, student.pseudo_labels) == (
        0, 1000, "data/pseudo_labels/bosslocal/speaker_cells_film2_m1k_rescored2")


def assert_rescores(labels: Cell, speaker: str, rescorer: str, seed: int, level: str = "gotoseqlocal") -> None:
    """``labels`` (a labelling cell of ``level``) is seed ``seed``'s run of the row ``speaker`` labelling the curve's
    unpaired trajectories, its candidates rescored by seed ``seed``'s run of the row ``rescorer`` and kept for the
    next round (label_unpaired.py ``--candidates-cache``), made after both."""
    command, tag = labels.command, f"_seed{seed}" if seed else ""
    assert command[command.index("--speaker") + 1] == f"runs/{level}/{speaker}{tag}/best"
    assert command[command.index("--rescore-with") + 1] == f"runs/{level}/{rescorer}{tag}/best"
    assert command[command.index("--candidates-cache") + 1] == f"data/candidates/{level}"
    assert command[command.index("--demos") + 1] == f"data/{level}_curve"
    assert set(labels.needs) == {f"{speaker}/seed{seed}", f"{rescorer}/seed{seed}", "demos_curve"}


def test_the_rescored_round_reads_labels_the_first_rounds_follower_chose() -> None:
    """The second round's labels: the front-cell speaker's candidates rescored by the follower trained on its first
    labels, made after both; the second round's students read them, on the same M pairs."""
    cells = {c.name: c for c in level_cells("gotoseqlocal")}
    for tag, m, seeds in (("m1k", 1000, {0, 1, 2}), ("m10k", 10_000, {0})):
        labels = cells[f"labels/speaker_cells_film2_{tag}_rescored"]
        assert_rescores(labels, f"speaker_cells_film2_{tag}", f"speaker_follower_cells_film2_{tag}", 0)
        row = f"speaker_follower_cells_rescored_film2_{tag}"
        assert {int(n.rsplit("seed", 1)[1]) for n in cells if n.startswith(f"{row}/seed")} == seeds
        student = train_config(cells[f"{row}/seed0"])
        assert student.pseudo_labels == f"data/pseudo_labels/gotoseqlocal/speaker_cells_film2_{tag}_rescored"
        assert student.num_paired == m and student.max_updates == 4000
        assert labels.name in cells[f"{row}/seed0"].needs


_PARTS = "speaker_follower_cells_parts_film2_m1k"
_PARTS_SECOND = "speaker_follower_cells_parts_rescored_film2_m1k"


@pytest.mark.parametrize(("level", "row", "rescorer", "rescored"), [
    ("gotoseqlocal", _PARTS_SECOND, _PARTS, "rescored"),
    ("bosslocal", _PARTS_SECOND, _PARTS, "rescored"),
    ("gotoseqlocal", "speaker_follower_cells_parts_rescored2_film2_m1k", _PARTS_SECOND, "rescored2"),
])
def test_each_round_of_the_parts_route_rescores_each_seeds_candidates_with_that_seeds_last_student(
        level: str, row: str, rescorer: str, rescored: str) -> None:
    """The parts route's second round (both levels) and third round (GoToSeqLocal): seed k's parts speaker's
    candidates of the curve's unpaired trajectories, read from the cache the first rescoring kept, rescored by seed
    k's student of the round before into labels of their own (``_<rescored>``), made after both; seed k's student
    reads them on the same 1,000 pairs."""
    cells = {c.name: c for c in level_cells(level)}
    assert {n for n in cells if n.startswith(f"{row}/")} == {f"{row}/seed{k}" for k in (0, 1, 2)}
    for seed in (0, 1, 2):
        tag = f"_seed{seed}" if seed else ""
        labels = cells[f"labels/speaker_cells_parts_film2_m1k{tag}_{rescored}"]
        assert_rescores(labels, "speaker_cells_parts_film2_m1k", rescorer, seed, level)
        out = f"data/pseudo_labels/{level}/speaker_cells_parts_film2_m1k{tag}_{rescored}"
        assert labels.command[labels.command.index("--out") + 1] == out
        student = train_config(cells[f"{row}/seed{seed}"])
        assert student.pseudo_labels == out
        assert (student.seed, student.num_paired, student.max_updates) == (seed, 1000, 4000)
        assert labels.name in cells[f"{row}/seed{seed}"].needs


def test_the_parts_routes_third_round_is_gotoseqlocals_only() -> None:
    """BossLocal defines neither the parts route's third round nor its labels."""
    assert not [c.name for c in level_cells("bosslocal") if "parts" in c.name and "rescored2" in c.name]


@pytest.mark.parametrize("seeds", SEED_CHOICES)
def test_both_rounds_on_each_seeds_own_teacher_share_seed_0_and_rescore_with_seed_ks_follower(seeds) -> None:
    """The front-cell route's rows with each seed on its own teacher: seed k's speaker labels D_u, seed k's
    first-round follower rescores that speaker's candidates, and seed k's student reads them; seed 0 is the
    one-teacher rows' seed 0 (the same commands), never trained again."""
    cells = {c.name: c for c in level_cells("gotoseqlocal", seeds)}
    first, second = "speaker_follower_cells_own_film2_m1k", "speaker_follower_cells_rescored_own_film2_m1k"
    assert f"{first}/seed0" not in cells and f"{second}/seed0" not in cells
    for seed in (1, 2) if seeds is None else [k for k in seeds if k]:
        speaker = f"speaker_cells_film2_m1k_seed{seed}"
        assert train_config(cells[f"{first}/seed{seed}"]).pseudo_labels == f"data/pseudo_labels/gotoseqlocal/{speaker}"
        labels = cells[f"labels/{speaker}_rescored"]
        command = " ".join(labels.command)
        assert f"--speaker runs/gotoseqlocal/{speaker}/best" in command
        assert f"--rescore-with runs/gotoseqlocal/{first}_seed{seed}/best" in command
        assert set(labels.needs) == {f"speaker_cells_film2_m1k/seed{seed}", f"{first}/seed{seed}", "demos_curve"}
        student = cells[f"{second}/seed{seed}"]
        assert train_config(student).pseudo_labels == f"data/pseudo_labels/gotoseqlocal/{speaker}_rescored"
        assert labels.name in student.needs
    # seed 0's commands are those of the one-teacher rows, whose records the tables take as these rows' seed 0
    rows = level_rows("gotoseqlocal")
    assert rows[first].seed0 == "speaker_follower_cells_film2_m1k"
    assert rows[second].seed0 == "speaker_follower_cells_rescored_film2_m1k"
    assert train_config(cells["speaker_follower_cells_rescored_film2_m1k/seed0"]).pseudo_labels == \
        "data/pseudo_labels/gotoseqlocal/speaker_cells_film2_m1k_rescored"


def test_the_third_round_rescores_with_the_second_rounds_student() -> None:
    """The third round at M = 1,000: the same speaker's candidates rescored by the second round's seed-0 student,
    made after it; the three seeds of its student read them."""
    cells = {c.name: c for c in level_cells("gotoseqlocal")}
    labels = cells["labels/speaker_cells_film2_m1k_rescored2"]
    command = " ".join(labels.command)
    assert "--speaker runs/gotoseqlocal/speaker_cells_film2_m1k/best" in command
    assert "--rescore-with runs/gotoseqlocal/speaker_follower_cells_rescored_film2_m1k/best" in command
    assert set(labels.needs) == {"speaker_cells_film2_m1k/seed0", "speaker_follower_cells_rescored_film2_m1k/seed0",
                                 "demos_curve"}
    for seed in (0, 1, 2):
        student = cells[f"speaker_follower_cells_rescored2_film2_m1k/seed{seed}"]
        config = train_config(student)
        assert config.pseudo_labels == "data/pseudo_labels/gotoseqlocal/speaker_cells_film2_m1k_rescored2"
        assert config.num_paired == 1000 and config.max_updates == 4000 and labels.name in student.needs


@pytest.mark.parametrize("seeds", SEED_CHOICES)
def test_the_third_round_on_each_seeds_own_chain_rescores_with_seed_ks_second_round_student(seeds) -> None:
    """The third round with each seed on its own teacher's chain: seed k's speaker's candidates rescored by seed k's
    second-round student (own teacher) into labels beside the second round's, not over them; seed 0 is the
    one-teacher third round's."""
    cells = {c.name: c for c in level_cells("gotoseqlocal", seeds)}
    second, third = "speaker_follower_cells_rescored_own_film2_m1k", "speaker_follower_cells_rescored2_own_film2_m1k"
    assert f"{third}/seed0" not in cells
    for seed in (1, 2) if seeds is None else [k for k in seeds if k]:
        speaker = f"speaker_cells_film2_m1k_seed{seed}"
        labels = cells[f"labels/{speaker}_rescored2"]
        command = " ".join(labels.command)
        assert f"--speaker runs/gotoseqlocal/{speaker}/best" in command
        assert f"--rescore-with runs/gotoseqlocal/{second}_seed{seed}/best" in command
        assert set(labels.needs) == {f"speaker_cells_film2_m1k/seed{seed}", f"{second}/seed{seed}", "demos_curve"}
        assert f"--rescore-with runs/gotoseqlocal/speaker_follower_cells_own_film2_m1k_seed{seed}/best" in \
            " ".join(cells[f"labels/{speaker}_rescored"].command)  # the second round's labels, kept apart
        student = cells[f"{third}/seed{seed}"]
        assert train_config(student).pseudo_labels == f"data/pseudo_labels/gotoseqlocal/{speaker}_rescored2"
        assert labels.name in student.needs
    assert level_rows("gotoseqlocal")[third].seed0 == "speaker_follower_cells_rescored2_film2_m1k"


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_the_kept_labels_are_each_seeds_second_round_labels_cut_to_the_share_its_rescoring_was_surest_of(level):
    """Seed k of the kept row reads ``<seed k's second-round labels>_top30``, which a keep_confident cell writes from
    those labels (made by seed k's speaker rescored by its first student, seed 0's the one-teacher row's) after
    them; the second round's labels themselves stay as they are, read by the second round's students."""
    cells = {c.name: c for c in level_cells(level)}
    row = "speaker_follower_cells_rescored_top30_film2_m1k"
    for seed in (0, 1, 2):
        speaker = "speaker_cells_film2_m1k" + (f"_seed{seed}" if seed else "")
        first = "speaker_follower_cells_film2_m1k" if seed == 0 else f"speaker_follower_cells_own_film2_m1k_seed{seed}"
        source, kept = f"labels/{speaker}_rescored", f"labels/{speaker}_rescored_top30"
        assert f"--rescore-with runs/{level}/{first}/best" in " ".join(cells[source].command)
        keep = cells[kept]
        assert keep.command == ("python", "scripts/keep_confident.py", "--labels", f"data/pseudo_labels/{level}/"
                                f"{speaker}_rescored", "--fraction", "0.3", "--out",
                                f"data/pseudo_labels/{level}/{speaker}_rescored_top30", "--threads", "1")
        assert keep.needs == (source,) and str(keep.output).endswith("pseudo_labels.json")
        student = cells[f"{row}/seed{seed}"]
        config = train_config(student)
        assert config.pseudo_labels == f"data/pseudo_labels/{level}/{speaker}_rescored_top30"
        assert config.num_paired == 1000 and config.max_updates == 4000 and config.seed == seed
        assert kept in student.needs and source not in student.needs
    control = cells["speaker_follower_cells_rescored_first30k_film2_m1k/seed0"]
    config = train_config(control)  # as many of seed 0's second-round labels, drawn blind
    assert config.pseudo_labels == f"data/pseudo_labels/{level}/speaker_cells_film2_m1k_rescored"
    assert config.num_unpaired == 30_000 and config.num_paired == 1000 and config.max_updates == 4000


def test_a_rescored_suffix_or_a_rescorer_without_what_it_needs_is_refused() -> None:
    """``Row.rescored`` names rescored labels and ``Row.rescorer`` rescores a teacher: either alone is an error."""
    from cells import Row

    with pytest.raises(ValueError, match="rescored='rescored2' names rescored labels; name the rescorer"):
        Row("r", "pairs_curve", teacher="t", rescored="rescored2")
    with pytest.raises(ValueError, match="a rescorer rescores a teacher's candidates; name the teacher"):
        Row("r", "pairs_curve", rescorer="f")
    for keep in (0.0, 1.0):
        with pytest.raises(ValueError, match=f"keep={keep} keeps a share in \\(0, 1\\) of a teacher's labels"):
            Row("r", "pairs_curve", teacher="t", keep=keep)
    with pytest.raises(ValueError, match="keeps a share .* name the teacher"):
        Row("r", "pairs_curve", keep=0.3)


def test_two_labellers_of_one_labels_folder_are_refused(monkeypatch) -> None:
    """A row whose teacher's labels another labeller already makes otherwise (another rescorer) is refused, not
    left to overwrite them."""
    import cells as cells_module

    rows = dict(level_rows("gotoseqlocal"))
    rows["clash"] = dataclasses.replace(rows["speaker_follower_cells_rescored_own_film2_m1k"],
                                        rescorer="speaker_follower_cells_rescored_own_film2_m1k", seeds=(1,))
    monkeypatch.setattr(cells_module, "level_rows", lambda level: rows)
    with pytest.raises(ValueError, match="labels/speaker_cells_film2_m1k_seed1_rescored would be made by two"):
        level_cells("gotoseqlocal")


def test_msvae_from_the_front_cell_speaker_starts_from_it_and_the_supervised_follower() -> None:
    cells = {c.name: c for c in level_cells("gotoseqlocal")}
    for tag, m in (("m1k", 1000), ("m10k", 10_000)):
        cell = cells[f"msvae_cells_film2_{tag}/seed0"]
        command = cell.command
        assert command[command.index("--init-speaker") + 1] == f"runs/gotoseqlocal/speaker_cells_film2_{tag}/best"
        assert command[command.index("--init-follower") + 1] == f"runs/gotoseqlocal/follower_film2_{tag}/best"
        assert {f"speaker_cells_film2_{tag}/seed0", f"follower_film2_{tag}/seed0"} <= set(cell.needs)
        config = train_config(cell)
        assert config.model["gamma"] == 1 and config.num_paired == m and config.model_type == "msvae"


@pytest.mark.parametrize("row", ["msvae_cells_film2_m10k", "msvae_paired_cells_film2_m10k"])
def test_the_front_cell_msvae_on_10000_pairs_continues_each_seed_to_8000_updates(row: str) -> None:
    """The 8000-update row is each seed's 4000-update run continued: the same config and starts but the budget."""
    cells = {c.name: c for c in level_cells("gotoseqlocal")}
    for seed in (0, 1, 2):
        budget, base = cells[f"{row}_u8k/seed{seed}"], cells[f"{row}/seed{seed}"]
        config, before = train_config(budget), train_config(base)
        assert config.continue_from == str(base.run_dir) and base.name in budget.after
        assert (config.max_updates, before.max_updates) == (8000, 4000)
        assert dataclasses.replace(config, max_updates=4000, continue_from=None, output_dir=before.output_dir) == before


@pytest.mark.parametrize("tag", ["m1k", "m3k", "m10k"])
def test_the_follower_chosen_on_reading_trains_as_the_curves_follower(tag: str) -> None:
    """Each seed of the supervised follower chosen on validation reading is the curve's run of that seed but the
    metric that keeps best/: the same training, so the two records' tests compare two checkpoints of one run."""
    cells = {c.name: c for c in level_cells("gotoseqlocal")}
    base = train_config(cells[f"follower_film2_{tag}/seed0"])
    for seed in (0, 1, 2):
        chosen = train_config(cells[f"follower_film2_{tag}_byreading/seed{seed}"])
        assert (chosen.follower_metric, base.follower_metric, chosen.seed) == ("reading", "sr", seed)
        assert level_rows("gotoseqlocal")[f"follower_film2_{tag}_byreading"].chosen_again == f"follower_film2_{tag}"
        assert dataclasses.replace(chosen, follower_metric="sr", seed=0, output_dir=base.output_dir) == base


def test_gotoseqlocal_compares_the_teachers_of_table_3_after_they_are_trained() -> None:
    """The comparison of GoToSeqLocal's teachers reads four runs and comes after each of their cells."""
    cells = level_cells("gotoseqlocal")
    names = [c.name for c in cells]
    compare = cells[names.index("compare_speakers/gotoseqlocal_speakers_front")]
    assert set(compare.needs) == {"speaker/seed0", "speaker_front_unpaired/seed0", "speaker_front_selftrain/seed0",
                                  "msvae_own/seed0"}
    assert all(names.index(need) < names.index(compare.name) for need in compare.needs)
    assert compare.output == Path("results/gotoseqlocal/speakers_front_test.json")


def test_seeds_asked_for_replace_the_studys() -> None:
    """With seeds, every run row uses exactly those (and seed 0); a comparison of other seeds is left out."""
    names = {c.name for c in level_cells("bosslocal", (0,))}
    assert "msvae_k16/seed0" in names and not any(n.endswith(("/seed1", "/seed2")) for n in names)
    assert "compare_speakers/bosslocal_speakers" not in names and "probes" in names
    assert "msvae_paired_trajbeta/seed0" not in names  # a config kept, not run
    more = {c.name for c in level_cells("gotoseqlocal", (3,))}
    assert {"msvae/seed0", "msvae/seed3"} <= more and "msvae/seed1" not in more


def test_unknown_level() -> None:
    with pytest.raises(ValueError, match="unknown level"):
        level_cells("bosslocl")


def test_config_fields_are_train_config_fields() -> None:
    """The rows' overrides are flag-value pairs: train.py flags of TrainConfig fields or of the model config's."""
    flags = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(TrainConfig)}
    for level in LEVELS:
        for row, spec in level_rows(level).items():
            names = set(spec.overrides[::2])
            assert len(spec.overrides) % 2 == 0 and all(n.startswith("--") for n in names), row
            assert {n for n in names if not n.startswith("--model.")} <= flags, row


@pytest.mark.parametrize("level", ["bosslocal", "gotoseqlocal"])
@pytest.mark.parametrize(("suffix", "baselines"), [("_own", ("follower", "speaker")),
                                                   ("_film2", ("follower_film2", "speaker_film2"))])
def test_independent_rows_start_each_seed_from_its_own_baselines(level: str, suffix: str, baselines) -> None:
    cells = {c.name: c for c in level_cells(level)}
    follower, speaker = baselines
    for row in (f"msvae_paired{suffix}", f"msvae_v{suffix}", f"msvae{suffix}"):
        for seed in (0, 1, 2):
            cell = cells[f"{row}/seed{seed}"]
            tail = "" if seed == 0 else f"_seed{seed}"
            command = " ".join(cell.command)
            assert f"--init-follower runs/{level}/{follower}{tail}/best" in command
            assert f"--init-speaker runs/{level}/{speaker}{tail}/best" in command
            assert {f"{follower}/seed{seed}", f"{speaker}/seed{seed}"} <= set(cell.needs)
    assert "--init-follower" not in " ".join(cells["msvae/seed1"].command)  # the shared-start rows stay as they are


@pytest.mark.parametrize("level", ["bosslocal", "gotoseqlocal"])
@pytest.mark.parametrize(("suffix", "teachers"), [("_own", ("speaker", "msvae_own")),
                                                  ("_film2", ("speaker_film2", "msvae_film2"))])
def test_independent_speaker_followers_read_their_own_teachers_labels(level: str, suffix: str, teachers) -> None:
    """Seed k of a speaker-follower row with a teacher reads labels of D_u made by the teacher's seed-k run; the
    shared-teacher rows keep reading seed 0's."""
    cells = {c.name: c for c in level_cells(level)}
    for row, teacher in zip((f"speaker_follower{suffix}", f"msvae_speaker_follower{suffix}"), teachers):
        for seed in (0, 1, 2):
            taught = teacher if seed == 0 else f"{teacher}_seed{seed}"
            cell = cells[f"{row}/seed{seed}"]
            assert train_config(cell).pseudo_labels == f"data/pseudo_labels/{level}/{taught}"
            assert f"labels/{taught}" in cell.needs
            labels = cells[f"labels/{taught}"]
            assert f"--speaker runs/{level}/{taught}/best" in " ".join(labels.command)
            assert labels.needs == (f"{teacher}/seed{seed}",)
    assert train_config(cells["speaker_follower/seed2"]).pseudo_labels == f"data/pseudo_labels/{level}/speaker"
    assert train_config(cells["msvae_speaker_follower/seed1"]).pseudo_labels == f"data/pseudo_labels/{level}/msvae"
