"""experiments/collect_results.py's tables (experiments/result_tables/): App. D's statistics over seeds, the paper's
tables, and documents whose marked tables are re-rendered from results/ (the committed documents among them)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from result_tables.benchmarks import (
    table_attention_layout,
    table_demo_dataset,
    table_demo_generation,
    table_demo_storage,
    table_gemm_peaks,
    table_kernel_bound,
    table_resume,
    table_rollout_ratios,
    table_smoke,
    table_train_step_compare,
    table_train_step_log,
    table_train_step_peak,
    table_train_step_profile,
)
from result_tables.markdown import MARK, TABLES, refresh
from result_tables.paper import (
    independent_rows,
    table_claims_film2,
    table_claims_film2_b256,
    table_headline_film2,
    table_headline_film2_b256,
    table_paper,
    table_tests,
    table_tests_own,
)
from result_tables.readings import table_readings
from result_tables.records import (
    load_records,
    p_greater,
    p_greater_paired,
    records_trained_again,
    records_with_curves,
)
from result_tables.runs import (
    quarter_means,
    table_budget,
    table_flatness,
    table_reruns,
    table_runs,
    table_seeds,
    table_seeds_again,
    table_selection,
    table_speed,
    validated_alike,
)
from result_tables.scale import table_architectures, table_unpaired
from result_tables.studies import table_gradient_sweep, table_probe_data, table_rescoring, table_validation

REPO = Path(__file__).resolve().parents[2]


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


def student_p_paired(differences: list[float]) -> float:
    """One-sided p of a mean difference above 0 over three seeds, by the t distribution's closed form for df = 2:
    CDF(t) = 1/2 + t / (2 sqrt(2 + t^2))."""
    assert len(differences) == 3
    mean = sum(differences) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / 2)
    t = mean / (sd / math.sqrt(3))
    return 0.5 - t / (2 * math.sqrt(2 + t * t))


def record(run: str, model_type: str, sr: float | None = None, bleu: float | None = None,
           bleu_of_best: float | None = None, speaker_checkpoint: bool = True) -> dict:
    """A run record as experiments/reproduce.py writes it (the fields the tables read)."""
    out = {"run": run, "model_type": model_type, "updates": 10, "wall_time_s": 60.0, "best": {"step": 10},
           "test": None if sr is None else {"success_rate": sr, "mean_steps": 20 - 10 * sr, "mean_reward": 0.5},
           "test_bleu": bleu, "paper_protocol_valid_sr": sr,
           "machine": {"device": "cpu", "cpus": 2, "torch_threads": 1}}
    if model_type == "msvae":
        out["best_speaker"] = {"step": 8} if speaker_checkpoint else None
        out["test_bleu_of_best"] = bleu_of_best if speaker_checkpoint else None
        if not speaker_checkpoint:  # a run without best_speaker/: test_bleu is of best/
            out["test_bleu"] = bleu_of_best
    return out


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A results/ folder with three seeds of the follower and of MS-VAE paired only / full on one level."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    rows = {
        "follower": [record("follower", "follower", 0.50), record("follower_seed1", "follower", 0.52),
                     record("follower_seed2", "follower", 0.54)],
        "speaker": [record("speaker", "speaker", bleu=30.0)],
        "msvae_paired": [record(f"msvae_paired{s}", "msvae", sr, b, b - 1) for s, sr, b in
                         (("", 0.50, 24.0), ("_seed1", 0.52, 25.5), ("_seed2", 0.53, 24.5))],
        "msvae": [record("msvae", "msvae", 0.66, bleu_of_best=18.0, speaker_checkpoint=False),
                  record("msvae_seed1", "msvae", 0.63, 21.0, 20.0), record("msvae_seed2", "msvae", 0.65, 20.0, 19.0)],
    }
    for records in rows.values():
        for r in records:
            (runs / f"{r['run']}.json").write_text(json.dumps(r))
    (tmp_path / "gotoseqlocal" / "floor.json").write_text(json.dumps(
        {"random_3_actions": {"success_rate": 0.1, "mean_steps": 60.0, "mean_reward": 0.05}}))
    return tmp_path


def test_p_greater_matches_the_closed_form():
    a, b = [66.0, 63.0, 65.0], [50.0, 52.0, 53.0]
    one, two = p_greater(a, b)
    assert one == pytest.approx(student_p_greater(a, b), rel=1e-9) and two == pytest.approx(2 * one, rel=1e-9)
    assert p_greater([1.0], b) == (None, None)  # one seed: no test
    assert p_greater([1.0, 1.0], [1.0, 1.0]) == (None, None)  # no spread: no p


def test_p_greater_paired_matches_the_closed_form():
    """Seed by seed: the one-sample t-test of the differences; seeds only one side holds are left out."""
    xs, ys = {0: 66.0, 1: 63.0, 2: 65.0, 3: 90.0}, {0: 50.0, 1: 52.0, 2: 53.0, 5: 10.0}
    one, two = p_greater_paired(xs, ys)
    assert one == pytest.approx(student_p_paired([16.0, 11.0, 12.0]), rel=1e-9)
    assert two == pytest.approx(2 * one, rel=1e-9)
    assert p_greater_paired(ys, xs)[0] == pytest.approx(1 - one, rel=1e-9)  # the other direction
    assert p_greater_paired({0: 1.0, 1: 2.0}, {0: 0.0, 2: 1.0}) == (None, None)  # one seed in common: no test
    assert p_greater_paired({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0}) == (None, None)  # equal differences: no p


def test_seed_table(root):
    lines = table_seeds("gotoseqlocal", "msvae_paired,msvae", root)
    assert lines[0] == "| method | test SR (%) | test mean steps | test BLEU-4 | test BLEU-4 of best/ (MS-VAE) |"
    paired, full = lines[2], lines[3]
    # mean steps (20 - 10 SR in the fixture): 15.0, 14.8, 14.7 and 13.4, 13.7, 13.5, beside SR without a p-value
    assert paired.startswith("| MS-VAE, paired only | 51.7 +- 1.5 (n = 3) | 14.8 +- 0.2 (n = 3) | "
                             "24.67 +- 0.76 (n = 3) |")
    assert "| 13.5 +- 0.2 (n = 3) |" in full
    p = student_p_greater([66.0, 63.0, 65.0], [50.0, 52.0, 53.0])
    assert f"| 64.7 +- 1.5 (n = 3), p = {p:.2g} [" in full
    # the seed-0 run without best_speaker/ has no speaker-checkpoint BLEU, but a BLEU of best/
    assert "| 20.50 +- 0.71 (n = 2), p = " in full and "19.00 +- 1.00 (n = 3), p = " in full


def test_paper_and_tests_tables(root):
    paper = table_paper("gotoseqlocal", root)
    # the fixture's records give the App. D protocol the test SR's value: the two columns agree
    # mean steps: 20 - 10 SR in the fixture
    assert paper[2] == ("| supervised (follower; speaker) | 52.0 +- 2.0 (n = 3) | 14.8 +- 0.2 (n = 3) | "
                        "52.0 +- 2.0 (n = 3) | 55.0 | 30.00 (n = 1) | 10.43 |")
    assert paper[3].startswith("| MS-VAE, paired only | 51.7 +- 1.5 (n = 3) | 14.8 +- 0.2 (n = 3) | "
                               "51.7 +- 1.5 (n = 3) | 51.0 |")
    assert paper[4] == "| MS-VAE + V | - | - | - | 68.3 | - | 10.86 |"  # a row without runs
    tests = {line.split(" | ")[0] + " | " + line.split(" | ")[1]: line
             for line in table_tests("gotoseqlocal", root)[2:]}
    full_vs_paired = tests["| MS-VAE full > MS-VAE paired only | test SR (%)"]
    p = student_p_greater([66.0, 63.0, 65.0], [50.0, 52.0, 53.0])
    assert f"| 64.67 vs 51.67 (n = 3, 3) | {p:.2g} [" in full_vs_paired and full_vs_paired.endswith("| 71.7 vs 51 |")
    assert tests["| MS-VAE full > supervised | test BLEU-4"].endswith(
        "| 20.50 vs 30.00 (n = 2, 1) | - | 11.73 vs 10.43 |")  # one speaker seed: no test


def test_film2_tables_give_what_reading_adds_and_test_the_claims_on_it(tmp_path):
    """The FiLM rows' headline: SR, SR told another mission, their difference, SPL, steps beside the bot's; the
    claims table tests "V raises SR by reading" on that difference, with no paper number for it."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    cases = {"msvae_paired_film2": ((0.60, 0.50), (0.62, 0.55), (0.58, 0.50)),
             "msvae_v_film2": ((0.80, 0.50), (0.84, 0.52), (0.82, 0.46))}
    for row, seeds in cases.items():
        for seed, (own, other) in enumerate(seeds):
            run = row + (f"_seed{seed}" if seed else "")
            r = record(run, "msvae", own, 20.0, 20.0)
            r["test"].update(success_rate_other_mission=other, spl=own / 2, bot_mean_steps=9.0)
            (runs / f"{run}.json").write_text(json.dumps(r))
    headline = table_headline_film2("gotoseqlocal", root=tmp_path)
    # + V: SR 82 +- 2, told another 49.3, by reading 30, 32, 36 -> 32.7 +- 3.1; SPL 0.41; steps 20 - 10 SR = 11.8
    assert headline[4] == ("| MS-VAE + V | 82.0 +- 2.0 (n = 3) | 49.3 +- 3.1 (n = 3) | 32.7 +- 3.1 (n = 3) | "
                           "0.410 +- 0.010 (n = 3) | 11.8 (9.0) | 82.0 +- 2.0 (n = 3) | 68.3 | 20.00 +- 0.00 (n = 3) "
                           "| 10.86 |")
    assert headline[2].startswith("| supervised follower / speaker | - | - | - |")  # a row without runs
    claims = {tuple(line.split(" | ")[:2]): line for line in table_claims_film2("gotoseqlocal", root=tmp_path)[2:]}
    reading = claims[("| V raises SR by reading (+ V > paired only)", "test SR minus SR told another mission (points)")]
    p = student_p_greater([30.0, 32.0, 36.0], [10.0, 7.0, 8.0])
    paired = student_p_paired([20.0, 25.0, 28.0])  # seed k of + V against seed k of paired only
    assert reading.endswith(f"| 32.67 vs 8.33 (n = 3, 3) | {p:.2g} [{2 * p:.2g}] | {paired:.2g} [{2 * paired:.2g}] "
                            "| - |")
    assert claims[("| V raises SR (+ V > paired only)", "test SR (%)")].endswith("| 68.3 vs 51 |")


def test_claims_paired_by_seed_only_where_seed_k_of_both_rows_descends_from_the_seed_k_baselines(tmp_path):
    """The speaker-follower trains from scratch: its seed k and the follower's are independent draws, so that claim
    has no paired test; the MS-VAE-speaker-follower's teacher and the speaker-follower's both descend from the
    seed-k speaker, so that one has. A seed one row lacks is left out of the pairs, and the cell says how many."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    cases = {"follower_film2": (0.50, 0.52, 0.54), "speaker_follower_film2": (0.56, 0.60, 0.57),
             "msvae_speaker_follower_film2": (0.70, 0.75, 0.71, 0.99)}
    for row, rates in cases.items():
        for seed, sr in enumerate(rates):
            run = row + (f"_seed{seed}" if seed else "")
            (runs / f"{run}.json").write_text(json.dumps(record(run, "follower", sr)))
    claims = {tuple(line.split(" | ")[:2]): line.split(" | ") for line in
              table_claims_film2("gotoseqlocal", root=tmp_path)[2:]}
    sf = claims[("| speaker-follower > follower", "test SR (%)")]
    assert sf[3] != "-" and sf[4] == "-"
    msvae_sf = claims[("| MS-VAE-speaker-follower > speaker-follower", "test SR (%)")]
    paired = student_p_paired([14.0, 15.0, 14.0])  # seeds 0-2; seed 3 has no speaker-follower
    assert msvae_sf[2] == "78.75 vs 57.67 (n = 4, 3)" and msvae_sf[4] == f"{paired:.2g} [{2 * paired:.2g}] (n = 3)"
    assert "paired by seed" not in table_claims_film2_b256("gotoseqlocal", root=tmp_path)[0]


def test_paper_batch_tables_hold_the_rows_they_have_and_the_claims_between_them(tmp_path):
    """The rows at the paper's batch of pairs are a follower and MS-VAE full: their tables list those two methods
    alone, the follower without a speaker's BLEU, and test only the claims between them (no BLEU claim: no
    supervised speaker); the FiLM rows at 128 on the same level are not read."""
    runs = tmp_path / "bosslocal" / "runs"
    runs.mkdir(parents=True)
    for row, model_type, srs in (("follower_film2_b256_u2000", "follower", (0.35, 0.37, 0.36)),
                                 ("msvae_film2_b256_u2000", "msvae", (0.62, 0.64, 0.66)),
                                 ("follower_film2", "follower", (0.99, 0.99, 0.99))):
        for seed, sr in enumerate(srs):
            run = row + (f"_seed{seed}" if seed else "")
            r = record(run, model_type, sr, 20.0 if model_type == "msvae" else None, 20.0)
            r["test"].update(success_rate_other_mission=sr - 0.05, spl=sr / 2, bot_mean_steps=12.0)
            (runs / f"{run}.json").write_text(json.dumps(r))
    headline = table_headline_film2_b256("bosslocal", root=tmp_path)
    assert [line.split(" | ")[0] for line in headline[2:]] == ["| supervised follower / speaker", "| MS-VAE full"]
    assert headline[2].startswith("| supervised follower / speaker | 36.0 +- 1.0 (n = 3) |")
    assert headline[2].endswith("| 45.8 | - | - |") and headline[3].endswith("| 20.00 +- 0.00 (n = 3) | 7.42 |")
    claims = [line.split(" | ")[:2] for line in table_claims_film2_b256("bosslocal", root=tmp_path)[2:]]
    metrics = ("test SR (%)", "valid SR, App. D protocol (%)", "test SR minus SR told another mission (points)")
    assert claims == [["| MS-VAE full > supervised", metric] for metric in metrics]


def test_tests_tables_test_each_success_rate_claim_on_the_papers_protocol_too(root):
    runs = root / "gotoseqlocal" / "runs"
    app_d = {"msvae": 0.70, "msvae_seed1": 0.72, "msvae_seed2": 0.71,
             "msvae_paired": 0.55, "msvae_paired_seed1": 0.50, "msvae_paired_seed2": 0.56}
    for run, value in app_d.items():
        r = json.loads((runs / f"{run}.json").read_text())
        (runs / f"{run}.json").write_text(json.dumps({**r, "paper_protocol_valid_sr": value}))
    lines = table_tests("gotoseqlocal", root)[2:]
    claims = [line.split(" | ")[:2] for line in lines]
    at = claims.index(["| MS-VAE full > MS-VAE paired only", "test SR (%)"])
    assert claims[at + 1] == ["| MS-VAE full > MS-VAE paired only", "valid SR, App. D protocol (%)"]
    p = student_p_greater([70.0, 72.0, 71.0], [55.0, 50.0, 56.0])
    assert lines[at + 1].endswith(f"| 71.00 vs 53.67 (n = 3, 3) | {p:.2g} [{2 * p:.2g}] | 71.7 vs 51 |")
    # BLEU claims have no App. D line; every SR claim has one
    assert sum(metric == "valid SR, App. D protocol (%)" for _, metric in claims) == \
        sum(metric == "test SR (%)" for _, metric in claims) == 6
    own = table_tests_own("gotoseqlocal", root)
    assert len(own) == len(lines) + 2


def test_independent_rows_read_the_baselines_each_seed_started_from(root):
    """Seed k of an independent row is compared with the baselines its MS-VAE runs started from, trained at
    their commit: the record in ``reruns/`` at that commit, not the shared-start record or one at another commit."""
    runs, reruns = root / "gotoseqlocal" / "runs", root / "gotoseqlocal" / "reruns"
    reruns.mkdir()
    for seed, (follower, speaker, paired, full) in enumerate(((0.40, 28.0, 0.45, 0.80), (0.42, 29.0, 0.47, 0.85))):
        suffix = "" if seed == 0 else f"_seed{seed}"
        for name, model_type, sr, bleu in (("follower", "follower", follower, None),
                                           ("speaker", "speaker", None, speaker)):
            again = record(name + suffix, model_type, sr, bleu)
            (reruns / f"{name}{suffix}_abc.json").write_text(json.dumps({**again, "commit": "abc"}))
            (reruns / f"{name}{suffix}_old.json").write_text(json.dumps({**again, "commit": "old", "test": {
                "success_rate": 0.99, "mean_steps": 1.0}}))
        start = (f"--init-follower runs/gotoseqlocal/follower{suffix}/best "
                 f"--init-speaker runs/gotoseqlocal/speaker{suffix}/best")
        for row, sr in (("msvae_paired_own", paired), ("msvae_own", full)):
            own = record(row + suffix, "msvae", sr, 25.0 + seed, 24.0)
            own.update(commit="abc", command=[f"python scripts/train.py --config c.yaml {start} --seed {seed}"])
            (runs / f"{row}{suffix}.json").write_text(json.dumps(own))
    rows = independent_rows("gotoseqlocal", root)
    assert [rows["follower"], rows["speaker"]] == [
        [json.loads((reruns / f"{name}{s}_abc.json").read_text()) for s in ("", "_seed1")]
        for name in ("follower", "speaker")]
    assert [r["run"] for r in rows["msvae"]] == ["msvae_own", "msvae_own_seed1"] and rows["msvae_v"] == []
    claims = {line.split(" | ")[0] + " | " + line.split(" | ")[1]: line
              for line in table_tests_own("gotoseqlocal", root)[2:]}
    full_vs_supervised = claims["| MS-VAE full > supervised | test SR (%)"].split(" | ")
    assert full_vs_supervised[2] == "64.67 vs 52.00 (n = 3, 3)"  # the shared-start rows, beside
    one, two = p_greater([80.0, 85.0], [40.0, 42.0])
    assert full_vs_supervised[4:6] == ["82.50 vs 41.00 (n = 2, 2)", f"{one:.2g} [{two:.2g}]"]
    # paired by seed: differences 40 and 43 (seed k against seed k; crossed they would be 38 and 45), df = 1, where
    # the t distribution's CDF is 1/2 + atan(t) / pi
    t = 41.5 / (math.sqrt(4.5) / math.sqrt(2))
    paired = 0.5 - math.atan(t) / math.pi
    assert full_vs_supervised[6] == f"{paired:.2g} [{2 * paired:.2g}]"
    assert claims["| + V > MS-VAE paired only | test SR (%)"].split(" | ")[4:6] == ["-", "-"]  # no runs: no claim


def test_runs_table_lists_seeds_and_the_floor(root):
    lines = table_runs("gotoseqlocal", "follower,msvae", root)
    assert [line.split(" | ")[1] for line in lines[2:8]] == ["0", "1", "2", "0", "1", "2"]
    assert "best valid SR (update 10)" in lines[5] and "best valid BLEU (update 8)" in lines[6]
    assert lines[-1].startswith("| floor: random 3 actions | - | 0.100 |")


def test_speed_table_rates_training_apart_from_validation(root):
    runs = root / "gotoseqlocal" / "runs"
    timed = {**record("msvae_seed1", "msvae", 0.63, 21.0, 20.0), "updates": 2000, "wall_time_s": 190.0,
             "validation_time_s": 110.0, "config": {"cuda_graphs": True},
             "machine": {"device": "NVIDIA H100 80GB HBM3", "cpus": 16, "torch_threads": 1}}
    (runs / "msvae_seed1.json").write_text(json.dumps(timed))
    lines = table_speed("gotoseqlocal", "msvae", root)
    assert lines[3] == "| MS-VAE full (+ V + D') | 1 | NVIDIA H100 80GB HBM3, 1 thr. | yes | 2000 | 190 | 110 | 25.0 |"
    assert lines[2].endswith("| 2-core CPU, 1 thr. | no | 10 | 60 | - | - |")  # validation not timed: no rate


def test_a_document_is_refreshed_and_checked(root, tmp_path):
    doc = tmp_path / "doc.md"
    mark = "<!-- table: python experiments/collect_results.py gotoseqlocal --table seeds:follower,msvae -->\n"
    doc.write_text(f"# Title\n\n{mark}| stale |\n<!-- end table -->\n\nProse after.\n")
    text, changed = refresh(doc, root)
    assert changed == ["gotoseqlocal seeds:follower,msvae"]
    assert text.startswith(f"# Title\n\n{mark}| method |") and text.endswith("<!-- end table -->\n\nProse after.\n")
    doc.write_text(text)
    assert refresh(doc, root) == (text, [])
    doc.write_text(mark.replace("seeds:", "nonsense:") + "<!-- end table -->\n")
    with pytest.raises(SystemExit, match="unknown table 'nonsense'"):
        refresh(doc, root)
    doc.write_text(mark.replace("seeds:follower,msvae", "pairs_curve:m1k") + "<!-- end table -->\n")
    with pytest.raises(SystemExit, match="table 'pairs_curve' takes no argument; got 'pairs_curve:m1k'"):
        refresh(doc, root)


def test_committed_documents_match_the_committed_results(monkeypatch):
    """Every marked table of README.md and docs/results/*.md is what its command renders from the committed results/."""
    monkeypatch.chdir(REPO)
    documents = [REPO / "README.md", *sorted((REPO / "docs" / "results").glob("*.md"))]
    assert len(documents) > 1, "no results documents"
    for document in documents:
        text, changed = refresh(document)
        assert not changed, f"{document.name}: re-run python experiments/collect_results.py ... --write {document}"
        assert MARK.search(text), f"{document.name} has no generated table"


def test_rescoring_and_probe_data_tables(tmp_path):
    level = tmp_path / "bosslocal"
    level.mkdir()
    system = {"lam": 0.2, "test_bleu_greedy": 24.0, "test_bleu_beam": 24.5, "test_bleu_rescored": 25.0,
              "p_rescored_vs_greedy": 0.05, "test_bleu_by_lam": {"0.0": 25.5, "0.2": 25.0, "1.0": 24.5}}
    (level / "rescore.json").write_text(json.dumps(
        {"valid_split": "valid", "test_split": "test", "systems": {"paired only#1": system, "baseline": system}}))
    lines = table_rescoring("bosslocal", "rescore", tmp_path)
    assert lines[2] == "| paired only, seed 1 | 0.2 | 24.00 | 24.50 | 25.00 | 0.050 | 0 | 25.50 |"
    assert lines[3].startswith("| baseline | 0.2 |")
    probe = {"accuracy": 0.4, "majority": 0.35, "test_examples": 20}
    (level / "probes.json").write_text(json.dumps({"examples": 300, "models": {
        "speaker": {"path": "x", "examples_facing_an_object": 100, "type": probe, "colour": probe}}}))
    assert table_probe_data("bosslocal", "probes", tmp_path)[2] == "| speaker | 300 | 100 | 20 |"


def test_validation_table_gives_each_row_its_seeds_maxima(tmp_path):
    level = tmp_path / "bosslocal"
    level.mkdir()
    (level / "valid.md").write_text(
        "<!-- python experiments/validation_table.py --upto 1000 a b c -->\n"
        "| run | valid BLEU per evaluation | max BLEU | valid SR per evaluation | max SR |\n"
        "| --- | --- | --- | --- | --- |\n"
        "| msvae_seed1 | 18.0 16.1 | 18.0 | 0.450 0.625 | 0.625 |\n"
        "| msvae | 16.9 16.6 | 16.9 | 0.510 0.550 | 0.550 |\n"
        "| msvae_paired | 24.2 22.7 | 24.2 | 0.535 0.480 | 0.535 |\n")
    lines = table_validation("bosslocal", "valid", tmp_path)
    assert lines[0] == ("| runs | seeds | max valid BLEU, updates <= 1000 | mean | max valid SR, updates <= 1000 "
                        "| mean |")
    assert lines[2] == "| MS-VAE full (+ V + D') | 0, 1 | 16.9 / 18.0 | 17.4 | 0.550 / 0.625 | 0.588 |"
    assert lines[3] == "| MS-VAE, paired only | 0 | 24.2 | 24.2 | 0.535 | 0.535 |"


def test_committed_validation_table_holds_the_maxima_of_the_committed_logs():
    """results/bosslocal/gpu_grid/validation_upto1000.md's own-encoder rows are what valid_logs/ hold."""
    import validation_table

    grid = REPO / "results" / "bosslocal" / "gpu_grid"
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in
            (grid / "validation_upto1000.md").read_text().splitlines() if line.startswith("| msvae")}
    logs = sorted((grid / "valid_logs").glob("*.txt"))
    assert logs
    for log in logs:
        curves = validation_table.read_text(log)
        bleu = max(v for s, v in curves["valid/bleu"].items() if s <= 1000)
        sr = max(v for s, v in curves["valid/success_rate"].items() if s <= 1000)
        assert (float(rows[log.stem][2]), float(rows[log.stem][4].rstrip(" |"))) == (round(bleu, 1), round(sr, 3))


def train_step_json(precision: str, seconds: tuple[float, float, float]) -> dict:
    models = {m: {"seconds_per_update": s, "flops_fwd_bwd": 1e9} for m, s in zip(("follower", "speaker", "msvae"),
                                                                              seconds)}
    return {"device": "cuda", "device_name": "GPU", "torch_threads": 4, "mixed_precision": precision,
            "models": models, "ratio_msvae_over_follower": seconds[2] / seconds[0]}


def test_train_step_tables_compare_benchmarks_and_match_log_lines_to_their_json(tmp_path):
    gpu = tmp_path / "benchmarks" / "gpu"
    gpu.mkdir(parents=True)
    (tmp_path / "benchmarks" / "cpu.json").write_text(json.dumps(train_step_json("no", (0.3, 0.4, 1.2))))
    (gpu / "train_step_fp32.json").write_text(json.dumps(train_step_json("no", (0.01, 0.02, 0.04))))
    lines = table_train_step_compare("benchmarks", "cpu,gpu/train_step_fp32", tmp_path)
    assert lines[2] == "| cpu.json | GPU, 4 thread(s), fp32 | 300.0 | 400.0 | 1200.0 | 4.00 |"
    assert lines[3] == ("| gpu/train_step_fp32.json | GPU, 4 thread(s), fp32 | 10.0 (30.00x) | 20.0 (20.00x) "
                        "| 40.0 (30.00x) | 4.00 |")
    (gpu / "log.txt").write_text(  # gpu_check.sh greps the seconds and the ratio out of each benchmark's JSON
        'torch 2.x\n      "seconds_per_update": 0.015,\n      "seconds_per_update": 0.02,\n'
        '      "seconds_per_update": 0.045,\n  "ratio_msvae_over_follower": 3.0,\n'
        '      "seconds_per_update": 0.01,\n      "seconds_per_update": 0.02,\n'
        '      "seconds_per_update": 0.04,\n  "ratio_msvae_over_follower": 4.0,\n')
    lines = table_train_step_log("benchmarks", "gpu/log", tmp_path)
    assert lines[2] == "| log.txt | 1 of 2 | bf16 autocast (log only) | 15.0 | 20.0 | 45.0 | 3.00 |"
    assert lines[3] == "| log.txt | 2 of 2 | fp32 (= train_step_fp32.json) | 10.0 | 20.0 | 40.0 | 4.00 |"


def test_train_step_peak_table_gives_each_runs_peaks_and_msvae_fraction(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    old, new = train_step_json("no", (0.3, 0.4, 1.0)), train_step_json("no", (0.3, 0.4, 0.8))
    old.update(commit="abcdef0123", gemm_peak_flops_per_s_before_after=[1.5e9, 2e9])
    old["models"]["msvae"]["fraction_of_gemm_peak"] = 0.5
    new.update(gemm_peak_flops_per_s=1.25e9)  # an older JSON: one peak, no commit
    new["models"]["msvae"]["fraction_of_gemm_peak"] = 1.0
    for name, data in (("old", old), ("new", new)):
        (tmp_path / "benchmarks" / f"{name}.json").write_text(json.dumps(data))
    lines = table_train_step_peak("benchmarks", "old,new", tmp_path)
    assert lines[2:] == ["| old.json | abcdef0 | 1.5 / 2.0 | 1.0000 | 1.0 | 0.50 |",
                         "| new.json | - | 1.2 | 0.8000 | 1.0 | 1.00 |"]


def switch_json(settings: tuple[str, str], with_best: bool) -> dict:
    """attention_layout.py's JSON for one model: the first setting at 0.5 s, the second at 0.4 s."""
    a, b = settings
    r = {name: {"seconds_per_update": t, "flops_fwd_bwd": 2e9, "fraction_of_gemm_peak": 2e9 / t / 10e9,
                "fraction_of_best_gemm_peak": 2e9 / t / 20e9} for name, t in ((a, 0.5), (b, 0.4))}
    data = {"models": {"msvae": {**r, f"{a}_over_{b}": 1.25}}, "commit": "1234567abc",
            "gemm_peak_flops_per_s_samples": [9e9, 10e9]}
    if with_best:  # a JSON that timed oneDNN's matmul too, and names its switch's settings
        data |= {"settings": list(settings), "best_gemm_peak_flops_per_s": 20e9,
                 "onednn_gemm_peak_flops_per_s_samples": [19e9, 20e9]}
    return data


def test_switch_tables_name_the_settings_and_give_both_peaks(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    for name, settings, best in (("old", ("padded", "grouped"), False), ("new", ("f_linear", "onednn"), True)):
        data = switch_json(settings, best)
        if not best:
            del data["models"]["msvae"]["padded"]["fraction_of_best_gemm_peak"]  # a record with one peak only
        (tmp_path / "benchmarks" / f"{name}.json").write_text(json.dumps(data))
    old = table_attention_layout("benchmarks", "old", tmp_path)
    assert old[0].startswith("| benchmark | model | padded s / update | grouped s / update | padded / grouped |")
    assert old[0].endswith("| fraction of GEMM peak (padded, grouped) |")
    assert old[2] == "| old.json | msvae | 0.5000 | 0.4000 | 1.25x | 2.0, 2.0 | 0.40, 0.50 |"
    new = table_attention_layout("benchmarks", "new", tmp_path)
    assert new[0].endswith("| fraction of best GEMM peak (f_linear, onednn) |")
    assert new[2] == "| new.json | msvae | 0.5000 | 0.4000 | 1.25x | 2.0, 2.0 | 0.20, 0.25 |"
    peaks = table_gemm_peaks("benchmarks", "new", tmp_path)
    assert peaks[2:] == ["| new.json | 1234567 | 9.0 / 10.0 | 19.0 / 20.0 | msvae | 0.4000 | 0.50 | 0.25 |"]


def test_kernel_bound_table_puts_each_update_beside_its_kernels(tmp_path):
    kinds = {"convolution": {"fraction_of_best_gemm_peak": 0.8}, "matmul": {"fraction_of_best_gemm_peak": 0.65},
             "attention": {"fraction_of_best_gemm_peak": None}}
    data = {"torch_threads": 1, "best_gemm_peak_flops_per_s": 200e9, "models": {"msvae": {
        "update": {"seconds_per_update": 0.5, "fraction_of_best_gemm_peak": 0.55},
        "kernels": {"seconds": 0.375, "ceiling_fraction_of_best_gemm_peak": 0.7333, "by_kind": kinds},
        "seconds_outside_kernels": 0.125}}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "kb.json").write_text(json.dumps(data))
    lines = table_kernel_bound("benchmarks", "kb", tmp_path)
    assert "best GEMM peak 200 GFLOP/s" in lines[0]
    assert lines[2:] == ["| msvae | 0.5000 (0.55) | 0.3750 (0.73) | 0.80 | 0.65 | - | 0.1250 |"]
    assert TABLES["kernel_bound"] is table_kernel_bound


def test_train_step_profile_table_sums_the_kinds_and_rates_each(tmp_path):
    data = train_step_json("no", (0.3, 0.4, 1.2))
    data["gemm_peak_flops_per_s"] = 100e9
    data["msvae_profile"] = {"steps": 3, "total_ms_per_update": 1000.0,
                             "ms_per_update": {"convolution": 500.0, "matmul": 250.0, "attention": 100.0,
                                               "other": 150.0},
                             "flops_per_update": {"convolution": 60e9, "matmul": 20e9, "attention": 1e9, "other": 0}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "cpu.json").write_text(json.dumps(data))
    lines = table_train_step_profile("benchmarks", "cpu", tmp_path)
    assert lines[2:] == ["| convolution | 500.0 | 0.50 | 60.0 | 0.74 | 120.0 (1.20) |",
                         "| matmul | 250.0 | 0.25 | 20.0 | 0.25 | 80.0 (0.80) |",
                         "| attention | 100.0 | 0.10 | 1.0 | 0.01 | 10.0 (0.10) |",
                         "| other | 150.0 | 0.15 | 0.0 | 0.00 | 0.0 (0.00) |",
                         "| all | 1000.0 | 1.00 | 81.0 | 1.00 | 81.0 (0.81) |"]


def test_demo_generation_table_shows_cpu_seconds_where_recorded(tmp_path):
    data = {"level": "BabyAI-BossLocal-v0", "demos_per_s_1proc": 100.0, "demos_per_s_2proc": 170.0,
            "speedup_2_vs_1": 1.7, "bytes_per_demo": 665.0,
            "iteration": {"batch_size": 256, "rows_iterated": 1000, "rows_per_s": 5000.0, "peak_anon_mb": 400.0,
                          "peak_file_mb": 700.0}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "old.json").write_text(json.dumps(data))
    (tmp_path / "benchmarks" / "new.json").write_text(json.dumps(
        {**data, "cpu_seconds_1proc": 200.0, "cpu_seconds_2proc": 210.0, "cpu_busy_2proc": 0.89}))
    old = table_demo_generation("benchmarks", "old", tmp_path)
    new = table_demo_generation("benchmarks", "new", tmp_path)
    assert new[4] == "| CPU seconds, 1 / 2 processes (cores kept busy by 2) | 200.0 / 210.0 (0.89) |"
    assert new[:4] + new[5:] == old  # a benchmark without CPU seconds renders the same rows, less that one


def test_demo_generation_table_lists_each_round_of_a_repeated_timing(tmp_path):
    data = {"level": "BabyAI-BossLocal-v0", "demos_per_s_1proc": 100.0, "demos_per_s_2proc": 180.0,
            "speedup_2_vs_1": 1.8, "bytes_per_demo": 665.0, "repeats": 3, "speedup_per_round": [1.75, 1.8, 1.912],
            "iteration": {"batch_size": 256, "rows_iterated": 1000, "rows_per_s": 5000.0, "peak_anon_mb": 400.0,
                          "peak_file_mb": 700.0}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "rounds.json").write_text(json.dumps(data))
    once = {k: v for k, v in data.items() if k not in ("repeats", "speedup_per_round")}
    (tmp_path / "benchmarks" / "once.json").write_text(json.dumps(once))
    rounds = table_demo_generation("benchmarks", "rounds", tmp_path)
    assert rounds[4] == ("| 2 processes against 1, round by round (order alternating; median above) | "
                         "1.75x, 1.80x, 1.91x |")
    assert rounds[:4] + rounds[5:] == table_demo_generation("benchmarks", "once", tmp_path)


def test_demo_dataset_table_gives_a_rate_only_for_a_generation_from_the_start(tmp_path):
    """A set generated in one go shows its rate; one that went on from chunks only its time; a set measured
    where it lay, no generation rows."""
    generation = {"wall_seconds": 5400.0, "cpu_seconds": 10260.0, "cores_busy": 0.95, "chunks_at_start": 0,
                  "demos_per_s": 185.5}
    data = {"level": "BabyAI-BossLocal-v0", "splits": {"paired": {"rows": 1000}, "unpaired": {"rows": 1000000}},
            "demos": 1001000, "bytes_on_disk": 6.7e8, "bytes_per_demo": 669.3, "generation": generation,
            "iteration": {"batch_size": 256, "rows_iterated": 1000000, "rows_per_s": 20000.0, "peak_anon_mb": 440.0,
                          "peak_file_mb": 780.0}}
    resumed = {**generation, "chunks_at_start": 7}
    del resumed["demos_per_s"]
    for name, gen in (("whole", generation), ("resumed", resumed), ("measured", None)):
        (tmp_path / "benchmarks").mkdir(exist_ok=True)
        (tmp_path / "benchmarks" / f"{name}.json").write_text(json.dumps({**data, "generation": gen}))
    whole, resumed_rows, measured = (table_demo_dataset("benchmarks", name, tmp_path)
                                     for name in ("whole", "resumed", "measured"))
    assert whole[2] == "| demonstrations (BabyAI-BossLocal-v0): paired 1000, unpaired 1000000 | 1001000 |"
    assert whole[3:5] == ["| generation: wall time, 186 demos/s | 1.50 h |",
                          "| generation: CPU time (cores kept busy) | 2.85 h (0.95) |"]
    assert resumed_rows[3] == "| generation: wall time (went on from chunks) | 1.50 h |"
    assert measured == whole[:3] + whole[5:] and whole[5] == "| on disk: all splits (bytes per demo) | 0.67 GB (669) |"


def test_gpu_check_tables(tmp_path):
    gpu = tmp_path / "benchmarks" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "smoke_msvae_launch-bf16.json").write_text(json.dumps(
        {"model_type": "msvae", "updates": 30, "wall_time_s": 13.7, "best": {"step": 30},
         "test": {"success_rate": 0.03125, "episodes": 64}, "test_bleu": 12.5}))
    (gpu / "smoke_speaker_no.json").write_text(json.dumps(
        {"model_type": "speaker", "updates": 30, "wall_time_s": 9.0, "best": {"step": 15}, "test_bleu": 7.5}))
    lines = table_smoke("benchmarks", "gpu", tmp_path)
    assert lines[2] == "| msvae | bf16 (bf16 autocast), under accelerate launch | 30 | 13.7 | 30 | 0.031 (64) | 12.50 |"
    assert lines[3] == "| speaker | no (fp32) | 30 | 9.0 | 15 | - | 7.50 |"
    (gpu / "resume.json").write_text(json.dumps(
        {"uninterrupted_vs_resumed": {"bit_identical": False, "max_abs_diff": 1.1920928955078125e-07}}))
    assert table_resume("benchmarks", "gpu/resume", tmp_path)[2] == \
        "| uninterrupted vs resumed | no | 1.2e-07 |"
    (gpu / "rollout.json").write_text(json.dumps(
        {"ratios": {"batched_over_one_at_a_time_steps_per_s": 3.86}, "targets": {"batched_over_one_at_a_time": 10.0}}))
    assert table_rollout_ratios("benchmarks", "gpu/rollout", tmp_path)[2:] == [
        "| batched / one at a time steps/s | 3.86 |"]


def test_demo_storage_table(tmp_path):
    entry = {"nested_lists": {"unpaired": {"bytes": 4000, "episodes": 2, "bytes_per_demo": 2000.0}},
             "cell_codes": {"unpaired": {"bytes": 1000, "episodes": 2, "bytes_per_demo": 500.0}}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "storage.json").write_text(json.dumps({"levels": {"bosslocal": entry}}))
    assert table_demo_storage("benchmarks", "storage", tmp_path)[2] == \
        "| BossLocal | unpaired | 2 | 2000 | 500 | 4.0x |"


def test_flatness_compares_the_last_quarter_with_a_standard_error(tmp_path):
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    for run, end in (("msvae", 0.81), ("msvae_seed1", 0.95)):
        history = [{"step": s, "valid/success_rate": v} for s, v in ((500, 0.5), (1500, 0.8), (2000, end))]
        record = {"run": run, "history": history, "config": {"eval_episodes": 100}}
        (runs / f"{run}.json").write_text(json.dumps(record))
    (runs / "msvae_seed2.json").write_text(json.dumps({"run": "msvae_seed2"}))  # no curve recorded: left out
    lines = table_flatness("gotoseqlocal", "msvae", tmp_path)
    se = math.sqrt(0.81 * 0.19 / 100)
    assert lines[2] == ("| MS-VAE full (+ V + D') | 0 | 0.800 (update 1500) | 0.810 (update 2000) | +0.010 | "
                        f"{se:.3f} | yes | - | - |")  # one evaluation in each quarter: no means
    assert lines[3].endswith("| +0.150 | 0.022 | no | - | - |") and len(lines) == 4
    points = ((1200, 0.5), (1400, 0.5), (1600, 0.6), (1800, 0.6), (2000, 0.6))  # means 0.6 against 0.5
    record = {"run": "msvae_seed2", "history": [{"step": s, "valid/success_rate": v} for s, v in points],
              "config": {"eval_episodes": 100}}
    (runs / "msvae_seed2.json").write_text(json.dumps(record))
    se = math.sqrt(0.56 * 0.44 / 100 * (1 / 3 + 1 / 2))
    assert table_flatness("gotoseqlocal", "msvae", tmp_path)[4].endswith(
        f"| +0.000 | 0.049 | yes | +0.100 ({se:.3f}) | no |")


def test_reruns_sit_beside_their_first_record_and_stay_out_of_the_tables(root):
    """A run trained again is listed against its first record; the tables over seeds still read the first."""
    again = {**record("follower", "follower", 0.47), "commit": "0123456789"}
    (root / "gotoseqlocal" / "reruns").mkdir()
    (root / "gotoseqlocal" / "reruns" / "follower_0123456.json").write_text(json.dumps(again))
    lines = table_reruns("gotoseqlocal", root)
    assert lines[2].split(" | ")[1:7] == ["0", "0.500", "0.470", "-", "-", "0123456"]
    dirty = {**again, "commit": "0123456789-dirty"}  # trained from a working tree with uncommitted changes
    (root / "gotoseqlocal" / "reruns" / "follower_0123456.json").write_text(json.dumps(dirty))
    assert table_reruns("gotoseqlocal", root)[2].split(" | ")[6] == "0123456 (dirty)"
    seeds = table_seeds("gotoseqlocal", "follower", root)
    assert "52.0 +- 2.0 (n = 3)" in seeds[2]
    seeds_again = table_seeds_again("gotoseqlocal", "follower", root)  # seed 0: 0.47, not 0.50
    assert "51.0 +- 3.6 (n = 3)" in seeds_again[2]


def test_flatness_reads_a_run_without_a_curve_from_its_run_trained_again(tmp_path):
    runs, reruns = tmp_path / "bosslocal" / "runs", tmp_path / "bosslocal" / "reruns"
    runs.mkdir(parents=True)
    reruns.mkdir()
    (runs / "msvae.json").write_text(json.dumps({"run": "msvae"}))  # a record without a curve
    history = [{"step": s, "valid/success_rate": v} for s, v in ((1500, 0.6), (2000, 0.5))]
    again = {"run": "msvae", "history": history, "config": {"eval_episodes": 100}}
    (reruns / "msvae_abcdef1.json").write_text(json.dumps(again))
    lines = table_flatness("bosslocal", "msvae", tmp_path)
    assert lines[2].startswith("| MS-VAE full (+ V + D') | 0 (again) | 0.600 (update 1500) | 0.500 (update 2000) |")
    assert load_records("bosslocal", tmp_path)["msvae"] == {"run": "msvae"}  # the record as it was


def test_budget_table_sets_each_continued_run_beside_the_record_it_continued(tmp_path):
    """Seed 0 continued its first record; seed 1 its run trained again (the first record's curve differs)."""
    runs, reruns = tmp_path / "bosslocal" / "runs", tmp_path / "bosslocal" / "reruns"
    runs.mkdir(parents=True)
    reruns.mkdir()

    def curve(*points: tuple[int, float]) -> list[dict]:
        return [{"step": s, "valid/success_rate": v} for s, v in points]

    short = {0: curve((1000, 0.5), (1500, 0.6), (2000, 0.62)), 1: curve((1000, 0.4), (1500, 0.5), (2000, 0.6))}
    for seed, suffix in ((0, ""), (1, "_seed1")):
        longer = short[seed] + curve((3000, 0.66), (4000, 0.7))
        for folder, name, history, updates, test in (
                (runs, f"msvae{suffix}", short[seed], 2000, 0.6), (runs, f"msvae_4000{suffix}", longer, 4000, 0.7)):
            rec = {"run": name, "history": history, "updates": updates, "test": {"success_rate": test},
                   "best": {"step": max(h["step"] for h in history), "score": history[-1]["valid/success_rate"]},
                   "config": {"eval_episodes": 100}}
            (folder / f"{name}.json").write_text(json.dumps(rec))
    first_seed1 = json.loads((runs / "msvae_seed1.json").read_text())
    (reruns / "msvae_seed1_abcdef1.json").write_text(json.dumps(first_seed1))  # the run the folder held
    (runs / "msvae_seed1.json").write_text(json.dumps({**first_seed1, "history": curve((2000, 0.3)),
                                                       "test": {"success_rate": 0.3}}))
    lines = table_budget("bosslocal", "msvae_4000", tmp_path)
    se = math.sqrt(0.7 * 0.3 / 100)
    # seed 0 at 4000: last quarter (3000, 4000] = 0.7 (one evaluation), too few for the quarters' means
    assert lines[2:4] == [
        "| MS-VAE full (+ V + D') | 0 | 2000 | 0.600 | 0.620 (update 2000) | +0.020 (0.049) | - | its `runs/` record |",
        f"| MS-VAE full (+ V + D'), 4000 updates | 0 | 4000 | 0.700 | 0.700 (update 4000) | +0.040 ({se:.3f}) | - "
        "| - |"]
    assert lines[4].startswith("| MS-VAE full (+ V + D') | 1 | 2000 | 0.600 |")
    assert lines[4].endswith("| its run trained again |") and len(lines) == 6


def test_a_continued_run_logging_more_metrics_is_matched_on_those_both_logged(tmp_path):
    """The continued run validates with a metric its first record did not log: the metrics both logged decide, and a
    run whose shared metric differs at one update is not the one continued."""
    runs = tmp_path / "bosslocal" / "runs"
    runs.mkdir(parents=True)
    first = [{"step": s, "valid/success_rate": v} for s, v in ((1000, 0.5), (2000, 0.6))]
    longer = [{**h, "valid/success_rate_other_mission": 0.4} for h in first]
    longer.append({"step": 4000, "valid/success_rate": 0.7, "valid/success_rate_other_mission": 0.45})
    for name, history in (("msvae", first), ("msvae_4000", longer)):
        rec = {"run": name, "history": history, "test": {"success_rate": history[-1]["valid/success_rate"]},
               "best": {"step": history[-1]["step"], "score": history[-1]["valid/success_rate"]},
               "config": {"eval_episodes": 100}}
        (runs / f"{name}.json").write_text(json.dumps(rec))
    assert table_budget("bosslocal", "msvae_4000", tmp_path)[2].endswith("| its `runs/` record |")
    other = [first[0], {**first[1], "valid/success_rate": 0.61}]
    (runs / "msvae.json").write_text(json.dumps({**json.loads((runs / "msvae.json").read_text()), "history": other}))
    lines = table_budget("bosslocal", "msvae_4000", tmp_path)
    assert len(lines) == 3 and lines[2].startswith("| MS-VAE full (+ V + D'), 4000 updates | 0 |")  # alone


def test_histories_validated_alike_agree_on_a_metric_both_logged_at_every_update():
    """Equal length, one metric besides the update shared at each, every shared one equal; extra metrics ignored."""
    sr = [{"step": 1, "valid/success_rate": 0.5}, {"step": 2, "valid/success_rate": 0.6}]
    more = [{**h, "valid/reading": 0.1} for h in sr]
    assert validated_alike(sr, more) and validated_alike(more, sr)
    assert not validated_alike(sr, [sr[0], {**sr[1], "valid/success_rate": 0.61}])
    assert not validated_alike(sr, sr[:1]) and not validated_alike([], [])
    bleu = [{"step": h["step"], "valid/bleu": 30.0} for h in sr]  # the same updates, nothing else in common
    assert not validated_alike(sr, bleu)
    assert not validated_alike(sr, [sr[0], bleu[1]])


def test_selection_sets_the_checkpoint_chosen_on_reading_beside_the_one_chosen_on_sr(tmp_path):
    """Each seed's two checkpoints of one training: updates, validation and test readings side by side, the record
    that trained alike (in runs/ or of a run trained again; none where neither did), and the paired t-test of the
    test readings over every seed."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    history = [{"step": 200, "valid/success_rate": 0.6, "valid/success_rate_other_mission": 0.5},
               {"step": 400, "valid/success_rate": 0.7, "valid/success_rate_other_mission": 0.65}]
    differences = {0: 0.02, 1: 0.05, 2: -0.01}
    for seed, gain in differences.items():
        suffix = f"_seed{seed}" if seed else ""
        base = {"run": f"follower_film2_m1k{suffix}", "history": history, "best": {"step": 400, "score": 0.7},
                "test": {"success_rate": 0.6, "success_rate_other_mission": 0.5, "success_rate_same_room": 0.55}}
        again = [{**h, "valid/reading": h["valid/success_rate"] - h["valid/success_rate_other_mission"]}
                 for h in history]
        if seed == 1:  # the runs/ record trained on another machine; its run trained again is this training
            reruns = runs.parent / "reruns"
            reruns.mkdir(exist_ok=True)
            (reruns / f"{base['run']}_abcdef1.json").write_text(json.dumps({**base, "commit": "abcdef1"}))
            base = {**base, "history": [{**h, "valid/success_rate": 0.5} for h in history]}
        if seed == 2:  # another training: its validation differs
            again[1]["valid/success_rate"] = 0.71
        chosen = {"run": f"follower_film2_m1k_byreading{suffix}", "history": again, "best": {"step": 200},
                  "test": {"success_rate": 0.62, "success_rate_other_mission": 0.52 - gain,
                           "success_rate_same_room": 0.6}}
        for r in (base, chosen):
            (runs / f"{r['run']}.json").write_text(json.dumps(r))
    lines = table_selection("gotoseqlocal", "follower_film2_m1k_byreading", tmp_path)
    label = "supervised follower, M = 1,000 pairs, chosen on validation reading"
    assert lines[2] == (f"| {label} | 0 | its `runs/` record | 400 (5.0) | 200 (10.0) | 60.0 / 62.0 (+2.0) | "
                        "10.0 / 12.0 (+2.0) | 55.0 / 60.0 (+5.0) |")
    assert lines[3].startswith(f"| {label} | 1 | its run trained again at abcdef1 | 400 (5.0) |")
    assert lines[4] == f"| {label} | 2 | - | - | 200 (10.0) | - | - | - |"
    # seed 2 trained otherwise: the test counts seeds 0 and 1, gains 2 and 5 points (mean 3.5, sd 2.12), t with one
    # degree of freedom (Cauchy): one-sided p = 1/2 - atan(t) / pi
    one = 0.5 - math.atan(3.5 / (math.sqrt(4.5) / math.sqrt(2))) / math.pi
    assert lines[5] == ("| every seed of one training | | | | | | 3.5 +- 2.1 (n = 2) more by reading; paired one-sided "
                        f"p = {one:.2g}, two-sided {2 * one:.2g} | |")


def test_selection_reads_both_choices_from_one_record_that_kept_both(tmp_path):
    """A row whose runs kept both follower choices (``--also-select``): each record is compared with itself, seed by
    seed, whichever choice is its best/ (seed 1 chose best/ on reading and also kept SR's), with the paired t-test;
    a record that kept one choice is a row of ``-``."""
    runs = tmp_path / "gotoseqlocal" / "runs"
    runs.mkdir(parents=True)
    history = [{"step": 200, "valid/success_rate": 0.6, "valid/success_rate_other_mission": 0.45},
               {"step": 400, "valid/success_rate": 0.7, "valid/success_rate_other_mission": 0.65}]
    by_sr = ({"step": 400, "score": 0.7}, {"success_rate": 0.6, "success_rate_other_mission": 0.5,
                                          "success_rate_same_room": 0.55})
    for seed, gain in {0: 0.02, 1: 0.04}.items():
        by_reading = ({"step": 200, "score": 0.15}, {**by_sr[1], "success_rate_other_mission": 0.5 - gain})
        best, also, metric = (by_sr, by_reading, "reading") if seed == 0 else (by_reading, by_sr, "sr")
        record = {"run": "follower_film2_m1k" + (f"_seed{seed}" if seed else ""), "history": history,
                  "best": best[0], "test": best[1],
                  "also_selected": {"metric": metric, "folder": f"best_{metric}", "best": also[0], "test": also[1]}}
        (runs / f"{record['run']}.json").write_text(json.dumps(record))
    (runs / "follower_film2_m1k_seed2.json").write_text(json.dumps(
        {"run": "follower_film2_m1k_seed2", "history": history, "best": by_sr[0], "test": by_sr[1]}))
    lines = table_selection("gotoseqlocal", "follower_film2_m1k", tmp_path)
    label = "supervised follower, M = 1,000 pairs"
    assert lines[2] == (f"| {label} | 0 | itself (`best_reading/`) | 400 (5.0) | 200 (15.0) | 60.0 / 60.0 (+0.0) | "
                        "10.0 / 12.0 (+2.0) | 55.0 / 55.0 (+0.0) |")
    assert lines[3] == (f"| {label} | 1 | itself (`best_sr/`) | 400 (5.0) | 200 (15.0) | 60.0 / 60.0 (+0.0) | "
                        "10.0 / 14.0 (+4.0) | 55.0 / 55.0 (+0.0) |")
    assert lines[4] == f"| {label} | 2 | - | 400 (5.0) | - | - | - | - |"
    one = 0.5 - math.atan(3.0 / (math.sqrt(2.0) / math.sqrt(2))) / math.pi  # gains 2 and 4: mean 3, sd 1.41
    assert lines[5] == ("| every seed of one training | | | | | | 3.0 +- 1.4 (n = 2) more by reading; paired one-sided "
                        f"p = {one:.2g}, two-sided {2 * one:.2g} | |")


def test_quarter_means_set_the_last_quarter_against_the_one_before():
    history = [{"step": s, "valid/success_rate": v} for s, v in
               ((1000, 0.1), (1200, 0.4), (1400, 0.5), (1600, 0.6), (1800, 0.5), (2000, 0.7))]
    last, before, se = quarter_means({"history": history, "config": {"eval_episodes": 100}})
    p = (0.6 + 0.5 + 0.7 + 0.4 + 0.5) / 5  # (1500, 2000] and (1000, 1500]; update 1000 is in neither
    assert (last, before) == pytest.approx((0.6, 0.45))
    assert se == pytest.approx(math.sqrt(p * (1 - p) / 100 * (1 / 3 + 1 / 2)))
    assert quarter_means({"history": history[-2:], "config": {"eval_episodes": 100}}) is None


def test_a_run_trained_again_twice_gives_its_last_rerun_to_curves_and_tables(tmp_path):
    """records_with_curves and records_trained_again pick the same run trained again: the last in name order."""
    (tmp_path / "lvl" / "runs").mkdir(parents=True)
    (tmp_path / "lvl" / "reruns").mkdir()
    (tmp_path / "lvl" / "runs" / "follower.json").write_text(json.dumps({"run": "follower", "commit": "first"}))
    (tmp_path / "lvl" / "runs" / "speaker.json").write_text(json.dumps({"run": "speaker", "history": [{"step": 1}]}))
    for commit in ("7a79ba2", "606f9bc"):
        (tmp_path / "lvl" / "reruns" / f"follower_{commit}.json").write_text(
            json.dumps({"run": "follower", "commit": commit, "history": [{"step": 1}]}))
    curves = records_with_curves("lvl", tmp_path)
    assert curves["follower"]["commit"] == "7a79ba2" and curves["follower"]["trained_again"]
    assert records_trained_again("lvl", tmp_path)["follower"]["commit"] == "7a79ba2"
    assert "trained_again" not in curves["speaker"]  # a record with its own curve keeps it


def test_readings_table_reads_each_statement_under_each_reduction(root: Path):
    """Seed 0 of each row for App. D's statements (gamma: gains over paired only, "minor" where gamma = 1 gains
    under a third of gamma = 100's), the mean over seeds for Table 2's; "-" where a row is missing."""
    runs = root / "gotoseqlocal" / "runs"
    extra = [record("msvae_gamma1", "msvae", 0.52, 22.0), record("msvae_gamma1_seed1", "msvae", 0.90, 40.0),
             record("mean_msvae_paired", "msvae", 0.40, 20.0), record("mean_msvae", "msvae", 0.70, 25.0),
             record("mean_msvae_gamma1", "msvae", 0.58, 21.0), record("mean_msvae_beta1", "msvae", 0.30, 10.0)]
    for r in extra:
        (runs / f"{r['run']}.json").write_text(json.dumps(r))
    lines = table_readings("gotoseqlocal", root)
    cells = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[2:] for line in lines[2:]}
    gamma_sr = cells["App. D: gamma = 1 changes little, gamma = 100 helps (gain over paired only)"]
    # sum: gains of msvae (66) and msvae_gamma1 seed 0 (52) over msvae_paired seed 0 (50): +16 vs +2, minor
    assert gamma_sr[0] == "+16.0 vs +2.0 (1, 1): yes"
    # mean: +30 vs +18: gamma = 1 gains more than a third of gamma = 100's
    assert gamma_sr[1].rstrip(" |") == "+30.0 vs +18.0 (1, 1): no"
    beta = cells["App. D: beta = 1 collapses the posterior, the follower degrades (beta = 0.1 > beta = 1)"]
    assert beta[0] == "-" and beta[1].rstrip(" |") == "70.0 vs 30.0 (1, 1): yes"
    v_sr = cells["Table 2: D' adds to SR (full > + V)"]
    assert v_sr[0] == "-" and v_sr[1].rstrip(" |") == "-"  # no + V row under either reading
    assert "the same for the speaker" in " ".join(cells)
    # the seed-0 BLEU of msvae has no best_speaker/ (its BLEU is of best/): no speaker number under "sum"
    assert cells["App. D: the same for the speaker"][0] == "-"
    assert not any("trained again" in line for line in lines)
    # ... until its run trained again (reruns/) gives one: 21 - 24 against msvae_gamma1's 22 - 24, named below
    (root / "gotoseqlocal" / "reruns").mkdir()
    (root / "gotoseqlocal" / "reruns" / "msvae_abc.json").write_text(json.dumps(record("msvae", "msvae", 0.6, 21.0,
                                                                                        20.0)))
    lines = table_readings("gotoseqlocal", root)
    cells = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[2:] for line in lines[2:] if line.startswith("|")}
    assert cells["App. D: the same for the speaker"][0] == "-3.00 vs -2.00 (1, 1): no"
    assert cells["App. D: beta = 1 collapses the posterior, the follower degrades (beta = 0.1 > beta = 1)"][0] == "-"
    assert lines[-1].startswith("Seed 0 of `msvae` in the BLEU comparisons")


def test_gradient_sweep_gives_alpha_d_against_j_bar(root: Path):
    """alpha D''s norm is linear in alpha: each file's ratios follow from its per-unit norms, with or without a sweep
    of its own; the alpha where D' pulls as hard as J-bar is their quotient."""
    level = root / "gotoseqlocal"
    (level / "a.json").write_text(json.dumps({"model": "runs/x/best", "gamma": 100.0, "grad_norm_gamma_v": 50.0,
                                              "grad_norm_j_bar": 2.0, "grad_norm_d_per_unit_alpha": 0.5}))
    (level / "b.json").write_text(json.dumps({"model": {"init_follower": "f"}, "loss_reduction": "mean",
                                              "grad_norm_gamma_v": 5.0, "grad_norm_j_bar": 1.0,
                                              "grad_norm_d_per_unit_alpha": 0.01,
                                              "alpha_sweep": [{"alpha": 0.05}, {"alpha": 10.0}]}))
    lines = table_gradient_sweep("gotoseqlocal", "a,b", root)
    assert lines[0].endswith("| alpha D' / J-bar at 0.05 | alpha D' / J-bar at 10 |")
    assert lines[2] == "| runs/x/best | sum | 50 | 2 | 0.5 | 4 | 0.0125 | 2.5 |"
    assert lines[3] == "| MS-VAE from the baselines (App. D) | mean | 5 | 1 | 0.01 | 100 | 0.0005 | 0.1 |"


def test_unpaired_table_gives_each_point_its_n_and_epochs_and_the_plot_draws_it(root: Path, tmp_path: Path):
    """N from each curve row's config (paired only: 0; the full row: all of D_u), epochs = updates over the
    sampler's whole batches per epoch (2000 / (N // 128): 2000 / 7, 2000 / 78, 2000 / 781), the metrics over
    seeds; the plot is written from the same numbers."""
    lines = table_unpaired("gotoseqlocal", root)
    assert [line.split(" | ")[:2] for line in lines[2:6]] == [
        ["| 0 (MS-VAE, paired only)", "-"], ["| 1,000 (MS-VAE full, N = 1k unpaired trajectories)", "286"],
        ["| 10,000 (MS-VAE full, N = 10k unpaired trajectories)", "25.6"],
        ["| 100,000 (MS-VAE full (+ V + D'))", "2.56"]]
    # (66 + 63 + 65) / 3, its mean steps (20 - 10 SR in the fixture) beside it
    assert "| 64.7 +- 1.5 (n = 3) | 13.5 +- 0.2 (n = 3) |" in lines[5] and lines[3].endswith("| - | - | - |")
    assert lines[6].startswith("| supervised follower / speaker (paired only) | - | 52.0 +- 2.0 (n = 3) | "
                               "14.8 +- 0.2 (n = 3) | 30.00")
    from plot_unpaired import plot

    plot("gotoseqlocal", tmp_path / "curve.png", root)
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty"
    (empty / "gotoseqlocal" / "runs").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no run of the curve's rows with N > 0"):
        plot("gotoseqlocal", tmp_path / "none.png", empty)


def test_architectures_table_sets_each_follower_beside_table_1(root: Path):
    runs = root / "gotoseqlocal" / "runs"
    (runs / "follower_m100k_attention.json").write_text(json.dumps(record("follower_m100k_attention", "follower",
                                                                          0.97)))
    lines = table_architectures("gotoseqlocal", root)
    assert lines[2] == "| follower, seq2seq, M = 100k pairs | - | - | - | 99.3 |"
    assert lines[3] == "| follower, w/ attention, M = 100k pairs | 97.0 (n = 1) | 10.3 (n = 1) | 97.0 (n = 1) | 99.8 |"
