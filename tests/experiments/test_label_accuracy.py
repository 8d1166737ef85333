"""experiments/label_accuracy.py: saved pseudo-labels scored against the true missions, and written into their
record where asked; the tables of the labels and of the pairs curve read those records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import label_accuracy
import pytest
from conftest import tree_digest
from result_tables.pairs_curve import (
    p_episodes,
    table_kept_labels,
    table_kept_verdict,
    table_label_accuracy,
    table_labels_by_goal_count,
    table_pairs_curve,
    table_pairs_verdict,
    table_reading_history,
    table_speaker_choice,
    table_teacher_verdict,
)
from transformers import AutoModel

from msvae_hf.data.pseudo_labels import RECORD_FILE, label_unpaired


@pytest.fixture(scope="module")
def labels(baseline_runs, tiny_demos, tmp_path_factory):
    out = tmp_path_factory.mktemp("labels") / "speaker"
    speaker = AutoModel.from_pretrained(baseline_runs["speaker"] / "best")
    label_unpaired(speaker, tiny_demos, out, num_unpaired=30, progress=False, speaker_path="runs/x/speaker/best")
    return out


def test_scores_saved_labels_as_the_labelling_did(labels, capsys):
    label_accuracy.main([str(labels)])
    printed = json.loads(capsys.readouterr().out)
    recorded = json.loads((labels / RECORD_FILE).read_text())["label_accuracy"]
    assert printed.pop("folder") == str(labels) and printed["labels"] == 30
    assert {**printed, "seconds": 0} == {**recorded, "seconds": 0}


def test_record_writes_the_scores_into_a_record_without_them(labels, tmp_path, capsys):
    import shutil

    copy = tmp_path / "labels"
    shutil.copytree(labels, copy)
    record = json.loads((copy / RECORD_FILE).read_text())
    del record["label_accuracy"]
    (copy / RECORD_FILE).write_text(json.dumps(record))
    before = {k: v for k, v in tree_digest(copy).items() if k != RECORD_FILE}
    label_accuracy.main([str(copy), "--record"])
    after = json.loads((copy / RECORD_FILE).read_text())
    assert after["label_accuracy"]["labels"] == 30 and {**after, "label_accuracy": None} == {
        **record, "label_accuracy": None}
    assert after["label_accuracy"]["scored_at"]  # the scoring's commit, beside the labelling's
    assert {k: v for k, v in tree_digest(copy).items() if k != RECORD_FILE} == before  # the labels untouched


def test_a_missing_folder_is_one_line_before_anything_is_written(labels, tmp_path):
    before = tree_digest(labels)
    with pytest.raises(SystemExit, match=r"error: no pseudo-labels at .*nowhere"):
        label_accuracy.main([str(labels), str(tmp_path / "nowhere"), "--record"])
    assert tree_digest(labels) == before


def test_the_table_by_goal_count_reads_each_records_breakdown(labels, tmp_path):
    """One row a number of goals in the true missions, in the record's order; a level with no breakdown on record is
    one line naming the command that scores one."""
    root = tmp_path / "results"
    (root / "bosslocal" / "labels").mkdir(parents=True)
    with pytest.raises(SystemExit, match="label_accuracy.py LABELS --record"):
        table_labels_by_goal_count("bosslocal", root)
    record = json.loads((labels / RECORD_FILE).read_text())
    (root / "bosslocal" / "labels" / "speaker.json").write_text(json.dumps(record))
    by_count = record["label_accuracy"]["by_goal_count"]
    rows = table_labels_by_goal_count("bosslocal", root)[2:]
    assert [row.split(" | ")[1] for row in rows] == list(by_count)
    first = by_count[next(iter(by_count))]
    assert rows[0] == (f"| speaker | {next(iter(by_count))} | {first['labels']:,} | {first['mean_steps']:.1f} | "
                       f"{100 * first['share']:.1f} | {100 * first['demonstrated']:.1f} | "
                       f"{100 * first['carried_out']:.1f} | {100 * first['same_mission']:.1f} | "
                       f"{100 * first['same_goal_count']:.1f} | {100 * first['object_type']:.1f} | "
                       f"{100 * first['colour']:.1f} |")


def test_the_tables_read_the_records(labels, tmp_path):
    root = tmp_path / "results"
    (root / "gotoseqlocal" / "labels").mkdir(parents=True)
    record = json.loads((labels / RECORD_FILE).read_text())
    (root / "gotoseqlocal" / "labels" / "speaker.json").write_text(json.dumps(record))
    accuracy = record["label_accuracy"]
    row = table_label_accuracy("gotoseqlocal", root)[2]
    assert row.startswith("| speaker | runs/x/speaker/best | 30 | ")
    assert f"| {100 * accuracy['same_mission']:.1f} |" in row
    runs = root / "gotoseqlocal" / "runs"
    runs.mkdir()
    for seed, (own, other, same) in enumerate(((0.9, 0.4, 0.8), (0.8, 0.4, 0.6))):
        name = "follower_film2_m10k" + (f"_seed{seed}" if seed else "")
        test = {"success_rate": own, "success_rate_other_mission": other, "success_rate_same_room": same,
                "spl": 0.5, "mean_steps": 10.0, "bot_mean_steps": 9.0}
        (runs / f"{name}.json").write_text(json.dumps({"test": test}))
    lines = table_pairs_curve("gotoseqlocal", root)
    assert len(lines) == 3
    assert lines[2].startswith("| supervised follower | 10,000 | 85.0 +- 7.1 (n = 2) | 40.0 +- 0.0 (n = 2) | "
                               "45.0 +- 7.1 (n = 2) | 70.0 +- 14.1 (n = 2) |")
    # a speaker-follower's labels: their record in results/<level>/labels, scored again there, over the run's copy
    # where both hold the same labels; seeds that learned from one labelling count it once
    run = {"test": test, "config": {"pseudo_labels": "data/pseudo_labels/gotoseqlocal/speaker"},
           "pseudo_labels": {"label_accuracy": {"same_mission": 0.5}, "sha256": record["sha256"]}}
    for name in ("speaker_follower_sup_film2_m10k", "speaker_follower_cells_film2_m10k"):
        (runs / f"{name}.json").write_text(json.dumps(run))
    (runs / "speaker_follower_cells_film2_m10k_seed1.json").write_text(json.dumps(run))
    table = table_pairs_curve("gotoseqlocal", root)
    labelled = f"| {100 * accuracy['same_mission']:.1f} (n = 1) | {100 * accuracy['demonstrated']:.1f} (n = 1) |"
    assert table[3].endswith(labelled) and table[4].endswith(labelled)
    assert table[4].startswith("| speaker-follower on the labels of the speaker reading the front cells | 10,000 | "
                               "80.0 +- 0.0 (n = 2) |")
    other = {**run, "pseudo_labels": {**run["pseudo_labels"], "sha256": {"data-00000-of-00001.arrow": "0" * 64}}}
    (runs / "speaker_follower_sup_film2_m10k.json").write_text(json.dumps(other))
    assert table_pairs_curve("gotoseqlocal", root)[3].endswith("| 50.0 (n = 1) | - |")
    (root / "gotoseqlocal" / "labels" / "speaker.json").unlink()
    assert table_pairs_curve("gotoseqlocal", root)[4].endswith("| 50.0 (n = 1) | - |")


def test_routes_join_the_curve_and_the_history_gives_reading_by_update(tmp_path):
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    test = {"success_rate": 0.8, "success_rate_other_mission": 0.7, "success_rate_same_room": 0.75, "spl": 0.5,
            "mean_steps": 10.0, "bot_mean_steps": 9.0}
    history = [{"step": 200, "valid/success_rate": 0.6, "valid/success_rate_other_mission": 0.55},
               {"step": 400, "valid/success_rate": 0.7}]
    (runs / "msvae_film2_m10k_gamma1.json").write_text(json.dumps({"test": test, "history": history}))
    lines = table_pairs_curve("gotoseqlocal", tmp_path)
    assert lines[2].startswith("| MS-VAE full, gamma = 1 | 10,000 | 80.0 (n = 1) | 70.0 (n = 1) | 10.0 (n = 1) |")
    history_lines = table_reading_history("gotoseqlocal", "msvae_film2_m10k_gamma1", tmp_path)
    # update 200: 60 % SR, 55 told another; update 400 has no told-another value; none later
    assert history_lines[2] == "| msvae_film2_m10k_gamma1 | +5.0 (60.0) | - | - | - | - | - | - |"
    with pytest.raises(SystemExit, match="no record msvae_film2_m1k.json"):
        table_reading_history("gotoseqlocal", "msvae_film2_m1k", tmp_path)


def test_the_verdict_tests_each_row_against_the_supervised_follower_on_m_and_3m(tmp_path):
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    for name, own, other in (("follower_film2_m1k", 0.5, 0.4), ("follower_film2_m1k_seed1", 0.6, 0.4),
                             ("follower_film2_m3k", 0.7, 0.4), ("msvae_film2_m1k_gamma1", 0.7, 0.45)):
        test = {"success_rate": own, "success_rate_other_mission": other, "episodes": 1000}
        (runs / f"{name}.json").write_text(json.dumps({"test": test}))
    # a seed still without its test, and a row measured before SR told another mission was: left out, not a crash
    (runs / "msvae_film2_m1k_gamma1_seed1.json").write_text(json.dumps({"test": None}))
    (runs / "msvae_paired_film2_m1k.json").write_text(json.dumps({"test": {"success_rate": 0.5, "episodes": 1000}}))
    lines = table_pairs_verdict("gotoseqlocal", tmp_path)
    assert len(lines) == 4  # the header, the rule and the route against M and 3M; the supervised rows are the yardstick
    # over seeds: 25 against (10, 20), pooled squares 50 on 1 degree of freedom: t = 10 / sqrt(75), Cauchy's tail
    t = 10 / math.sqrt(75)
    p_seeds = 0.5 - math.atan(t) / math.pi
    # over the test episodes: variances 10 (0.7 0.3 + 0.45 0.55) and the mean of 10 (0.25 + 0.24), 10 (0.24 + 0.24)
    # over two seeds
    z = 10 / math.sqrt(4.575 + 4.85 / 2)
    p_episodes = 0.5 * math.erfc(z / math.sqrt(2))
    assert lines[2] == ("| MS-VAE full, gamma = 1 | 1,000 | 25.0 (n = 1) | 1,000 pairs | 15.0 +- 7.1 (n = 2) | "
                        f"+10.0 | {p_seeds:.2g} [{2 * p_seeds:.2g}] | {p_seeds:.2g} | {p_episodes:.2g} |")
    # one seed against one: no spread to test by over seeds, the episodes' alone
    z = -5 / math.sqrt(4.575 + 10 * (0.21 + 0.24))
    assert lines[3] == ("| MS-VAE full, gamma = 1 | 1,000 | 25.0 (n = 1) | 3,000 pairs | 30.0 (n = 1) | -5.0 | - | "
                        f"- | {0.5 * math.erfc(z / math.sqrt(2)):.2g} |")
    assert "| p, seeds | p, seeds, x 1 tests |" in lines[0]  # one test with a p over seeds: counted once


def test_the_verdict_multiplies_each_p_over_seeds_by_the_tests_it_holds(tmp_path):
    """Bonferroni over the table: two tests with a p over seeds, each p doubled (capped at 1)."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    for name, own in (("follower_film2_m1k", 0.5), ("follower_film2_m1k_seed1", 0.6), ("follower_film2_m3k", 0.7),
                      ("follower_film2_m3k_seed1", 0.8), ("msvae_film2_m1k_gamma1", 0.7),
                      ("msvae_film2_m1k_gamma1_seed1", 0.75)):
        other = 0.45 if name.startswith("msvae") else 0.4
        test = {"success_rate": own, "success_rate_other_mission": other, "episodes": 1000}
        (runs / f"{name}.json").write_text(json.dumps({"test": test}))
    lines = table_pairs_verdict("gotoseqlocal", tmp_path)
    assert "| p, seeds, x 2 tests |" in lines[0]
    # reading 25 and 30 against 10 and 20 (M) and 30 and 40 (3M); pooled variance 31.25 on 2 degrees of freedom
    for line, difference in zip(lines[2:], (12.5, -7.5), strict=True):
        t = difference / math.sqrt(31.25)
        one = 0.5 * (1 - t / math.sqrt(t * t + 2))  # Student's t with 2 degrees of freedom, upper tail
        assert line.split(" | ")[6:8] == [f"{one:.2g} [{2 * min(one, 1 - one):.2g}]",
                                          f"{2 * one:.2g}" if 2 * one < 0.99 else "> 0.99"]


def test_the_kept_rows_are_set_beside_the_second_round_paired_by_seed_and_kept_off_the_curve(tmp_path):
    """The students on a share of the second round's labels are tested against the second round's student of the same
    seed (its seed 0 the one-teacher row's run), and are in neither the curve's table nor its verdict."""
    runs = tmp_path / "bosslocal" / "runs"
    runs.mkdir(parents=True)
    second, kept = "speaker_follower_cells_rescored", "speaker_follower_cells_rescored_top30_film2_m1k"
    for name, own, other in ((f"{second}_film2_m1k", 0.70, 0.35), (f"{second}_own_film2_m1k_seed1", 0.80, 0.40),
                             (f"{second}_own_film2_m1k_seed2", 0.75, 0.40), (kept, 0.60, 0.20),
                             (f"{kept}_seed1", 0.65, 0.30), (f"{kept}_seed2", 0.62, 0.30),
                             ("follower_film2_m1k", 0.4, 0.3), ("follower_film2_m1k_seed1", 0.4, 0.35)):
        test = {"success_rate": own, "success_rate_other_mission": other, "episodes": 1000, "mean_steps": 50.0,
                "bot_mean_steps": 12.0}
        (runs / f"{name}.json").write_text(json.dumps({"run": name, "test": test}))
    lines = table_kept_verdict("bosslocal", tmp_path)
    assert len(lines) == 3
    # reading: (40, 35, 32) against (35, 40, 35), differences (5, -5, -3); SR: (60, 65, 62) against (70, 80, 75)
    reading = statistics_t([5.0, -5.0, -3.0])
    sr = statistics_t([-10.0, -15.0, -13.0])
    assert lines[2] == ("| speaker-follower on the 30 % of the second round's labels the rescoring was surest of, each "
                        "seed its own teacher's chain | 1,000 | 35.7 +- 4.0 (n = 3) | 36.7 +- 2.9 (n = 3) | -1.0 | "
                        f"{reading[0]:.2g} [{reading[1]:.2g}] | 62.3 +- 2.5 (n = 3) | 75.0 +- 5.0 (n = 3) | -12.7 | "
                        f"{sr[0]:.2g} [{sr[1]:.2g}] |")
    control = "speaker_follower_cells_rescored_first30k_film2_m1k"  # seed 0 alone, on the first 30 of the labels
    (runs / f"{control}.json").write_text(json.dumps({
        "run": control, "config": {"pseudo_labels": "data/pseudo_labels/bosslocal/x_rescored", "num_unpaired": 30},
        "pseudo_labels": {"label_accuracy": {"same_mission": 0.1, "demonstrated": 0.3}},
        "test": {"success_rate": 0.72, "success_rate_other_mission": 0.40, "mean_steps": 50.0,
                 "bot_mean_steps": 12.0}}))
    assert table_kept_verdict("bosslocal", tmp_path)[3].endswith(
        "| 32.0 (n = 1) | 35.0 (n = 1) | -3.0 | - | 72.0 (n = 1) | 70.0 (n = 1) | +2.0 | - |")  # against seed 0 only
    assert table_kept_labels("bosslocal", tmp_path)[4].endswith("| - | - |")  # its labels' first 30 are not on record
    (runs / f"{control}.json").unlink()
    labels = table_kept_labels("bosslocal", tmp_path)
    assert [line.split(" | ")[0] for line in labels[2:]] == [
        "| speaker-follower on the front-cell speaker's labels rescored by the follower of its first labels, each seed "
        "its own teacher's", "| speaker-follower on the 30 % of the second round's labels the rescoring was surest of, "
        "each seed its own teacher's chain"]
    assert not any("30 %" in line for line in table_pairs_curve("bosslocal", tmp_path) + table_pairs_verdict(
        "bosslocal", tmp_path))


def statistics_t(differences: list[float]) -> tuple[float, float]:
    """One- and two-sided p of a paired t-test that the differences' mean is above 0, from scipy."""
    from scipy.stats import ttest_1samp

    return (float(ttest_1samp(differences, 0.0, alternative="greater").pvalue),
            float(ttest_1samp(differences, 0.0).pvalue))


def test_the_plot_has_a_point_a_row_and_refuses_no_runs(tmp_path):
    import plot_pairs_curve

    root = tmp_path / "results"
    with pytest.raises(SystemExit, match="no run of the pairs curve"):
        plot_pairs_curve.plot("gotoseqlocal", tmp_path / "none.png", root)
    runs = root / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    for name, sr in (("follower_film2_m1k", 0.5), ("follower_film2_m10k", 0.8), ("msvae_film2_m1k", 0.7)):
        test = {"success_rate": sr, "success_rate_other_mission": 0.45, "success_rate_same_room": sr - 0.05}
        (runs / f"{name}.json").write_text(json.dumps({"test": test}))
    out = tmp_path / "curve.png"
    plot_pairs_curve.plot("gotoseqlocal", out, root)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_key_gives_each_method_its_seeds():
    import plot_pairs_curve

    assert plot_pairs_curve.key_label("MS-VAE full", [(1000, [1.0, 2.0]), (10_000, [3.0, 4.0])]) == (
        "MS-VAE full (n = 2)")
    assert plot_pairs_curve.key_label("supervised follower", [(1000, [1.0, 2.0, 3.0]), (100_000, [4.0])]) == (
        "supervised follower (n = 3, 1 at 100,000)")
    assert plot_pairs_curve.key_label("x", [(1000, [1.0]), (3000, [1.0, 2.0]), (10_000, [1.0, 2.0])]) == (
        "x (n = 2, 1 at 1,000)")
    assert plot_pairs_curve.key_label("x", [(1000, [1.0]), (3000, [1.0, 2.0])]) == "x (n = 1, 2 at 3,000)"  # a tie


def test_the_plot_sets_side_by_side_only_the_methods_at_the_same_m():
    import plot_pairs_curve

    rows = [("a", 1000, "a1", []), ("a", 100_000, "a100", []), ("b", 1000, "b1", []), ("c", 1000, "c1", [])]
    shift = plot_pairs_curve.shifts(rows)
    step = 10 ** plot_pairs_curve.DODGE
    assert shift["a", 100_000] == 1.0  # alone at its M
    assert shift["b", 1000] == 1.0  # the middle of three
    assert shift["a", 1000] == pytest.approx(1 / step) and shift["c", 1000] == pytest.approx(step)


def test_chance_labels_each_trajectory_with_the_next_ones_mission(tiny_demos, tmp_path):
    from msvae_hf.data.demos import load_demos
    from msvae_hf.envs.missions import regenerate_missions, replay_labels, score_labels

    out = tmp_path / "chance.json"
    label_accuracy.main(["--chance", str(tiny_demos), "--num-unpaired", "20", "--out", str(out)])
    record = json.loads(out.read_text())
    unpaired = load_demos(tiny_demos)["unpaired"].select(range(20))
    truth = regenerate_missions(unpaired[0]["level"], unpaired["seed"])
    assert record["num_labelled"] == 20
    others = truth[1:] + truth[:1]  # the next one's mission
    counts = replay_labels(unpaired[0]["level"], unpaired["seed"], unpaired["actions"], others)
    accuracy = record["label_accuracy"]
    by_count = accuracy.pop("by_goal_count")
    assert accuracy == {**score_labels(others, truth), **{k: n / 20 for k, n in counts.items()}}
    # every trajectory under the number of goals of its own mission, counted here by its parts
    parts = [1 + m.count(", then ") + m.count(" after you ") + m.count(" and ") for m in truth]
    assert {n: scores["labels"] for n, scores in by_count.items()} == {
        str(n): parts.count(n) for n in sorted(set(parts))}
    assert record["label_accuracy"]["in_grammar"] == 1.0 and record["label_accuracy"]["same_mission"] < 1.0


def test_compare_pairs_two_labellings_by_trajectory(labels, tmp_path, capsys):
    """Against the true missions (each a demonstration of itself), a labelling's differing labels count on the true
    side exactly where they are not demonstrations: b_only = labels that differ - those of them that demonstrate."""
    from datasets import load_from_disk
    from scipy.stats import binomtest

    from msvae_hf.data.demos import write_checksums
    from msvae_hf.data.pseudo_labels import true_missions

    rows = load_from_disk(str(labels))
    truth = true_missions(rows)
    right = tmp_path / "truth"
    rows.remove_columns("instruction").add_column("instruction", truth).save_to_disk(str(right))
    write_checksums(right)
    out = tmp_path / "compared" / "a_b.json"
    label_accuracy.main(["--compare", str(labels), str(right), "--out", str(out)])
    record = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == record
    same = sum(label == mission for label, mission in zip(rows["instruction"], truth, strict=True))
    assert record["labelled"] == len(truth) and record["labels_differ"] == len(truth) - same
    scores = json.loads((labels / RECORD_FILE).read_text())["label_accuracy"]
    for test in ("demonstrated", "carried_out"):
        count = round(scores[test] * len(truth))
        assert record[test]["a_only"] == 0
        assert record[test]["b_only"] == record["labels_differ"] - (count - same)
        assert record[test]["p_mcnemar_exact"] == pytest.approx(binomtest(0, record[test]["b_only"]).pvalue)
    assert record["sha256"] == {"a": json.loads((labels / RECORD_FILE).read_text())["sha256"], "b": None}
    label_accuracy.main(["--compare", str(labels), str(labels)])  # the same labels: nothing differs
    itself = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert itself["labels_differ"] == 0 and itself["demonstrated"] == {"a_only": 0, "b_only": 0, "p_mcnemar_exact": 1.0}


def test_compare_refuses_labellings_of_different_trajectories(labels, tmp_path):
    from datasets import load_from_disk

    from msvae_hf.data.demos import write_checksums

    other = tmp_path / "other"
    load_from_disk(str(labels)).select(range(10)).save_to_disk(str(other))
    write_checksums(other)
    with pytest.raises(SystemExit, match="label different trajectories") as err:
        label_accuracy.main(["--compare", str(labels), str(other), "--out", str(tmp_path / "x.json")])
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x.json").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="is a file"):  # an --out that cannot be written: before any replay
        label_accuracy.main(["--compare", str(labels), str(labels), "--out", str(tmp_path / "file" / "x.json")])


def test_the_episodes_p_keeps_its_far_tail():
    # 20 points apart with a standard error of 1 point: z = 20, whose tail 1 - Phi(z) rounds to 0 as a difference
    p = p_episodes([(30.0, 1.0)], [(10.0, 0.0)])
    assert p == pytest.approx(0.5 * math.erfc(20 / math.sqrt(2)), rel=1e-9)
    assert 0 < p < 1e-80


def test_a_row_that_shares_its_seed_0_shows_it_beside_its_own_seeds(tmp_path):
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    for name, own in (("speaker_follower_cells_rescored_film2_m1k", 0.7),
                      ("speaker_follower_cells_rescored_own_film2_m1k_seed1", 0.8)):
        test = {"success_rate": own, "success_rate_other_mission": 0.5, "episodes": 1000, "mean_steps": 50.0,
                "bot_mean_steps": 9.0}
        (runs / f"{name}.json").write_text(json.dumps({"test": test}))
    lines = table_pairs_curve("gotoseqlocal", tmp_path)
    shared = [line for line in lines if "each seed its own teacher's" in line]
    assert len(shared) == 1  # SR 70 and 80: seed 0 of the one-teacher row and this row's seed 1
    assert "| 1,000 | 75.0 +- 7.1 (n = 2) | 50.0 +- 0.0 (n = 2) | 25.0 +- 7.1 (n = 2) |" in shared[0]
    one = [line for line in lines if line.startswith("| speaker-follower on the front-cell speaker's labels rescored "
                                                     "by the follower of its first labels | ")]
    assert "| 70.0 (n = 1) |" in one[0]  # the one-teacher row keeps its own seeds only
    verdict = [line for line in table_pairs_verdict("gotoseqlocal", tmp_path) if "each seed its own" in line]
    assert verdict == []  # no supervised follower to test against: no row, not a crash
    (runs / "follower_film2_m1k.json").write_text(json.dumps({"test": {
        "success_rate": 0.6, "success_rate_other_mission": 0.5, "episodes": 1000}}))
    verdict = [line for line in table_pairs_verdict("gotoseqlocal", tmp_path) if "each seed its own" in line]
    assert verdict[0].split(" | ")[2:4] == ["25.0 +- 7.1 (n = 2)", "1,000 pairs"]


def test_a_budget_row_is_tested_against_the_supervised_follower_at_the_curves_budget_and_at_its_own(tmp_path):
    runs = tmp_path / "bosslocal" / "runs"
    runs.mkdir(parents=True)
    for name, own in (("follower_film2_m1k", 0.5), ("follower_film2_m3k", 0.6), ("follower_film2_m3k_u10k", 0.65),
                      ("speaker_follower_cells_film2_m1k_u10k", 0.8),  # the own-teacher budget row's seed 0
                      ("speaker_follower_cells_own_film2_m1k_u10k_seed1", 0.9)):
        test = {"success_rate": own, "success_rate_other_mission": 0.4, "episodes": 1000}
        (runs / f"{name}.json").write_text(json.dumps({"test": test}))
    own = "speaker-follower on the labels of the speaker reading the front cells, each seed its own teacher's"
    budget = [line.split(" | ")[:5] for line in table_pairs_verdict("bosslocal", tmp_path)
              if line.startswith(f"| {own}, 10,000 updates | ")]
    assert [cells[2:5] for cells in budget] == [  # seeds 0 and 1 read 40 and 50 points
        ["45.0 +- 7.1 (n = 2)", "1,000 pairs", "10.0 (n = 1)"], ["45.0 +- 7.1 (n = 2)", "3,000 pairs", "20.0 (n = 1)"],
        ["45.0 +- 7.1 (n = 2)", "3,000 pairs, 10,000 updates", "25.0 (n = 1)"]]
    supervised = [line.split(" | ")[3] for line in table_pairs_verdict("bosslocal", tmp_path)
                  if line.startswith("| supervised follower, 10,000 updates | 3,000 |")]
    assert supervised == ["3,000 pairs"]  # against the curve's budget only: never against itself
    # the one-teacher budget row, defined on BossLocal for seed 0 alone as the own-teacher row's seed 0, is shown in
    # that row only (at 4000 updates, with seeds of its own, it is a row: the test above)
    one = "| speaker-follower on the labels of the speaker reading the front cells, 10,000 updates | "
    assert not [line for line in table_pairs_verdict("bosslocal", tmp_path) if line.startswith(one)]
    # the second round's seed-0 row, defined on BossLocal for seed 0 alone: without its record the own-chain row keeps
    # its own seeds; with it, that row holds it as seed 0 and no row of its own shows it
    (runs / "speaker_follower_cells_rescored_own_film2_m1k_seed1.json").write_text(json.dumps({"test": test}))
    rescored = [line for line in table_pairs_verdict("bosslocal", tmp_path) if "rescored" in line]
    assert {line.split(" | ")[2] for line in rescored} == {"50.0 (n = 1)"}
    test = {"success_rate": 0.7, "success_rate_other_mission": 0.4, "episodes": 1000}
    (runs / "speaker_follower_cells_rescored_film2_m1k.json").write_text(json.dumps({"test": test}))
    rescored = [line for line in table_pairs_verdict("bosslocal", tmp_path) if "rescored" in line]
    assert rescored and all("each seed its own teacher's | " in line for line in rescored)
    assert {line.split(" | ")[2] for line in rescored} == {"40.0 +- 14.1 (n = 2)"}


def test_by_confidence_scores_the_share_of_labels_their_labelling_was_surest_of(baseline_runs, tiny_demos, tmp_path,
                                                                                capsys):
    """Each share's accuracy is that of the labels the speaker scored highest (greedy labels: log p_S), among the
    first N; the whole share is the labels' own accuracy; a share outside (0, 1] is one line, nothing written."""
    from datasets import load_from_disk

    from msvae_hf.data.pseudo_labels import label_accuracy as accuracy_of
    from msvae_hf.extensions.pragmatics import label_scores

    speaker_dir = baseline_runs["speaker"] / "best"
    speaker = AutoModel.from_pretrained(speaker_dir)
    labels = tmp_path / "greedy"
    label_unpaired(speaker, tiny_demos, labels, progress=False, speaker_path=str(speaker_dir))
    out = tmp_path / "by" / "greedy.json"
    label_accuracy.main(["--by-confidence", str(labels), "--num-unpaired", "30", "--shares", "0.5", "1",
                         "--out", str(out)])
    record = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == record
    rows = load_from_disk(str(labels)).select(range(30))
    scores = label_scores(speaker, rows).tolist()
    top = sorted(sorted(range(30), key=lambda i: (-scores[i], i))[:15])
    assert record["labelled"] == 30 and record["lam"] == 1.0 and record["wall_time_s"] > 0
    assert record["sha256"] == json.loads((labels / RECORD_FILE).read_text())["sha256"]
    for share, kept in (("0.5", top), ("1", list(range(30)))):
        got = record["by_share"][share]
        assert {k: v for k, v in got.items() if k not in ("seconds", "threshold", "mean_steps")} == \
            {k: v for k, v in accuracy_of(rows.select(kept)).items() if k != "seconds"}
        assert got["mean_steps"] == pytest.approx(sum(len(rows[i]["actions"]) for i in kept) / len(kept))
        assert got["threshold"] == pytest.approx(min(scores[i] for i in kept), abs=1e-4)
    with pytest.raises(SystemExit, match=r"--shares must lie in \(0, 1\], got 1.5"):
        label_accuracy.main(["--by-confidence", str(labels), "--shares", "1.5", "--out", str(tmp_path / "no.json")])
    with pytest.raises(SystemExit, match=r"num_unpaired \(--num-unpaired\) must be at least 1, got 0"):
        label_accuracy.main(["--by-confidence", str(labels), "--num-unpaired", "0", "--out", str(tmp_path / "no.json")])
    with pytest.raises(SystemExit):
        label_accuracy.main([str(labels), "--shares", "0.5"])  # --shares goes with --by-confidence
    assert not (tmp_path / "no.json").exists()


def test_the_teacher_verdict_pairs_each_student_with_the_front_cell_student_of_its_seed(tmp_path):
    """Each other teacher's students against the front-cell students of the same seed (seed 0 the one-teacher row's
    run): a row of three seeds gets scipy's paired t, a row of one seed its difference and no p."""
    runs = tmp_path / "bosslocal" / "runs"
    runs.mkdir(parents=True)
    for name, own, other in (("speaker_follower_cells_film2_m1k", 0.70, 0.40),
                             ("speaker_follower_cells_own_film2_m1k_seed1", 0.68, 0.36),
                             ("speaker_follower_cells_own_film2_m1k_seed2", 0.71, 0.40),
                             ("speaker_follower_goals_film2_m1k", 0.76, 0.44),
                             ("speaker_follower_goals_film2_m1k_seed1", 0.72, 0.40),
                             ("speaker_follower_goals_film2_m1k_seed2", 0.77, 0.43),
                             ("speaker_follower_cells_demo_film2_m1k", 0.705, 0.434)):
        test = {"success_rate": own, "success_rate_other_mission": other, "episodes": 1000, "mean_steps": 50.0,
                "bot_mean_steps": 12.0}
        (runs / f"{name}.json").write_text(json.dumps({"run": name, "test": test}))
    lines = table_teacher_verdict("bosslocal", tmp_path)
    assert len(lines) == 4 and "the front-cell teacher's" in lines[0]
    # reading: (32, 32, 34) against (30, 32, 31); SR: (76, 72, 77) against (70, 68, 71)
    reading, sr = statistics_t([2.0, 0.0, 3.0]), statistics_t([6.0, 4.0, 6.0])
    assert lines[2].endswith(f"| 1,000 | 32.7 +- 1.2 (n = 3) | 31.0 +- 1.0 (n = 3) | +1.7 | "
                             f"{reading[0]:.2g} [{reading[1]:.2g}] | 75.0 +- 2.6 (n = 3) | 69.7 +- 1.5 (n = 3) | "
                             f"+5.3 | {sr[0]:.2g} [{sr[1]:.2g}] |")
    assert lines[2].startswith("| speaker-follower on the labels of the front-cell speaker taught the goal steps")
    assert lines[3].endswith("| 27.1 (n = 1) | 30.0 (n = 1) | -2.9 | - | 70.5 (n = 1) | 70.0 (n = 1) | +0.5 | - |")


def _speaker_record(runs: Path, name: str, best: int, bleu: list[float], demonstrated: list[float],
                    test_bleu: float) -> None:
    """A speaker run's record: a validation every 150 updates with BLEU and valid labels demonstrated."""
    history = [{"step": 150 * (i + 1), "valid/bleu": b, "valid/demonstrated": d}
               for i, (b, d) in enumerate(zip(bleu, demonstrated, strict=True))]
    (runs / f"{name}.json").write_text(json.dumps({"run": name, "best": {"step": best}, "history": history,
                                                   "test_bleu": test_bleu}))


def test_the_speaker_choice_reads_each_seeds_histories_and_labels_and_pairs_the_gain_by_seed(tmp_path):
    """Seed 0: the same training (BLEU histories equal), both label records, its validation read at each chosen
    update. Seed 1: the histories differ, so its validation cells are left blank and the flag says no. Seed 2: the
    chosen run has no label record, so its labels are '-' and the seed leaves the paired gain."""
    runs, labels = tmp_path / "bosslocal" / "runs", tmp_path / "bosslocal" / "labels"
    runs.mkdir(parents=True)
    labels.mkdir()
    bleu, chosen = "speaker_cells_film2_m1k", "speaker_cells_demo_film2_m1k"
    for seed, suffix in enumerate(("", "_seed1", "_seed2")):
        _speaker_record(runs, bleu + suffix, 150, [40.0, 38.0], [0.20, 0.30], 39.0)
        _speaker_record(runs, chosen + suffix, 300, [40.0, 38.0 - (seed == 1)], [0.20, 0.30], 37.5)
        for name, demonstrated in ((bleu + suffix, 0.19 + 0.01 * seed), (chosen + suffix, 0.23 + 0.02 * seed)):
            if not (seed == 2 and name.startswith(chosen)):
                (labels / f"{name}.json").write_text(json.dumps(
                    {"label_accuracy": {"demonstrated": demonstrated, "same_mission": 0.08}}))
    lines = table_speaker_choice("bosslocal", tmp_path)
    assert len(lines) == 2 + 6 + 1
    assert lines[2:4] == [
        f"| {bleu} | 0 | validation BLEU | 150 | 40.00 | 20.0 | yes | 39.00 | 19.0 | 8.0 |",
        f"| {chosen} | 0 | valid labels demonstrated | 300 | 38.00 | 30.0 | yes | 37.50 | 23.0 | 8.0 |"]
    assert lines[4:6] == [f"| {bleu} | 1 | validation BLEU | 150 | - | - | no | 39.00 | 20.0 | 8.0 |",
                          f"| {chosen} | 1 | valid labels demonstrated | 300 | - | - | no | 37.50 | 25.0 | 8.0 |"]
    assert lines[7] == f"| {chosen} | 2 | valid labels demonstrated | 300 | 38.00 | 30.0 | yes | 37.50 | - | - |"
    gain = statistics_t([4.0, 5.0])  # seeds 0 and 1: 23 - 19 and 25 - 20 points
    assert lines[8] == (f"| {chosen} against {bleu} | 2 seeds | | | | | | | +4.5, p = {gain[0]:.2g} [{gain[1]:.2g}] "
                        "(paired by seed) | |")


def test_one_start_sets_each_run_beside_its_start_on_the_seeds_both_hold(tmp_path, monkeypatch):
    """A comparison of ONE_START reads the named records (runs/ or reruns/), keeps the seeds both sides hold, tests
    the episodes' noise as the verdict does and pairs by seed from two seeds; a missing record, a record without SR
    told another mission and sides that share no seed are each one line naming it."""
    import result_tables.pairs_curve as pairs_curve

    level = tmp_path / "gotoseqlocal"
    for folder, name, own, other in (("runs", "a", 0.70, 0.50), ("runs", "a_seed1", 0.66, 0.50),
                                     ("reruns", "b_x", 0.60, 0.50), ("reruns", "b_seed1_x", 0.55, 0.45),
                                     ("reruns", "b_seed2_x", 0.50, 0.40)):
        (level / folder).mkdir(parents=True, exist_ok=True)
        test = {"success_rate": own, "success_rate_other_mission": other, "episodes": 1000}
        (level / folder / f"{name}.json").write_text(json.dumps({"test": test}))
    ours, theirs = {0: "runs/a", 1: "runs/a_seed1"}, {0: "reruns/b_x", 1: "reruns/b_seed1_x", 2: "reruns/b_seed2_x"}
    monkeypatch.setitem(pairs_curve.ONE_START, "gotoseqlocal", (
        (1000, "A", ours, "its start", theirs), (10_000, "A", {0: "runs/a"}, "B", {0: "reruns/b_x"}),
        (1000, "B", {0: "reruns/b_x"}, "A", {0: "runs/a"})))
    lines = pairs_curve.table_one_start("gotoseqlocal", tmp_path)
    # seeds 0 and 1: reading (20, 16) against (10, 10); SR (70, 66) against (60, 55). Over the episodes: each side's
    # mean variance of a run (SR and SR told another as proportions) over its two runs, the differences' normal tail
    ours_var = 100**2 * ((0.7 * 0.3 + 0.5 * 0.5) + (0.66 * 0.34 + 0.5 * 0.5)) / 2 / 1000 / 2
    theirs_var = 100**2 * ((0.6 * 0.4 + 0.5 * 0.5) + (0.55 * 0.45 + 0.45 * 0.55)) / 2 / 1000 / 2
    one = 0.5 * math.erfc(8.0 / math.sqrt(2 * (ours_var + theirs_var)))
    paired = statistics_t([10.0, 6.0])
    assert lines[2] == ("| A (`runs/a`, `runs/a_seed1`) | 1,000 | its start | 0, 1 | 18.0 +- 2.8 (n = 2) | 10.0 +- 0.0 "
                        f"(n = 2) | +8.0 | {one:.2g} [{2 * one:.2g}] | {paired[0]:.2g} [{paired[1]:.2g}] | +10.5 |")
    variance = 100**2 * (0.7 * 0.3 + 0.5 * 0.5 + 0.6 * 0.4 + 0.5 * 0.5) / 1000  # one seed: no pairing
    single = 0.5 * math.erfc(10.0 / math.sqrt(2 * variance))
    assert lines[3].endswith(f"| 10,000 | B | 0 | 20.0 (n = 1) | 10.0 (n = 1) | +10.0 | {single:.2g} "
                             f"[{2 * single:.2g}] | - | +10.0 |")
    # the other way round: the one-sided p is the far side, the two-sided twice the near one
    assert lines[4].endswith(f"| -10.0 | > 0.99 [{2 * single:.2g}] | - | -10.0 |")
    for entry, problem in (((1000, "A", {0: "runs/gone"}, "B", {0: "reruns/b_x"}), "no .*gotoseqlocal/runs/gone.json"),
                           ((1000, "A", {1: "runs/a_seed1"}, "B", {0: "reruns/b_x"}), "'A' and 'B' share no seed")):
        monkeypatch.setitem(pairs_curve.ONE_START, "gotoseqlocal", (entry,))
        with pytest.raises(SystemExit, match=problem):
            pairs_curve.table_one_start("gotoseqlocal", tmp_path)
    (level / "runs" / "speaker.json").write_text(json.dumps({"test_bleu": 30.0}))
    monkeypatch.setitem(pairs_curve.ONE_START, "gotoseqlocal", ((1000, "A", {0: "runs/speaker"}, "B", {0: "runs/a"}),))
    with pytest.raises(SystemExit, match="runs/speaker holds no test SR told another mission"):
        pairs_curve.table_one_start("gotoseqlocal", tmp_path)
