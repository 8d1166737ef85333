"""experiments/collect_results.py: App. D's statistics over seeds, the paper's tables, and documents whose
marked tables are re-rendered from results/ (the committed documents among them)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import collect_results
import pytest

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


def record(run: str, model_type: str, sr: float | None = None, bleu: float | None = None,
           bleu_of_best: float | None = None, speaker_checkpoint: bool = True) -> dict:
    """A run record as experiments/reproduce.py writes it (the fields the tables read)."""
    out = {"run": run, "model_type": model_type, "updates": 10, "wall_time_s": 60.0, "best": {"step": 10},
           "test": None if sr is None else {"success_rate": sr, "mean_steps": 9.0, "mean_reward": 0.5},
           "test_bleu": bleu, "paper_protocol_valid_sr": sr,
           "machine": {"device": "cpu", "cpus": 2, "torch_threads": 1}}
    if model_type == "msvae":
        out["best_speaker"] = {"step": 8} if speaker_checkpoint else None
        out["test_bleu_of_best"] = bleu_of_best if speaker_checkpoint else None
        if not speaker_checkpoint:  # a run made before best_speaker/: test_bleu is of best/
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
    one, two = collect_results.p_greater(a, b)
    assert one == pytest.approx(student_p_greater(a, b), rel=1e-9) and two == pytest.approx(2 * one, rel=1e-9)
    assert collect_results.p_greater([1.0], b) == (None, None)  # one seed: no test
    assert collect_results.p_greater([1.0, 1.0], [1.0, 1.0]) == (None, None)  # no spread: no p


def test_seed_table(root):
    lines = collect_results.table_seeds("gotoseqlocal", "msvae_paired,msvae", root)
    assert lines[0] == "| method | test SR (%) | test BLEU-4 | test BLEU-4 of best/ (MS-VAE) |"
    paired, full = lines[2], lines[3]
    assert paired.startswith("| MS-VAE, paired only | 51.7 +- 1.5 (n = 3) | 24.67 +- 0.76 (n = 3) |")
    p = student_p_greater([66.0, 63.0, 65.0], [50.0, 52.0, 53.0])
    assert f"| 64.7 +- 1.5 (n = 3), p = {p:.2g} [" in full
    # the seed-0 run without best_speaker/ has no speaker-checkpoint BLEU, but a BLEU of best/
    assert "| 20.50 +- 0.71 (n = 2), p = " in full and "19.00 +- 1.00 (n = 3), p = " in full


def test_paper_and_tests_tables(root):
    paper = collect_results.table_paper("gotoseqlocal", root)
    assert paper[2] == "| supervised (follower; speaker) | 52.0 +- 2.0 (n = 3) | 55.0 | 30.00 (n = 1) | 10.43 |"
    assert paper[3].startswith("| MS-VAE, paired only | 51.7 +- 1.5 (n = 3) | 51.0 |")
    assert paper[4] == "| MS-VAE + V | - | 68.3 | - | 10.86 |"  # no runs yet
    tests = {line.split(" | ")[0] + " | " + line.split(" | ")[1]: line
             for line in collect_results.table_tests("gotoseqlocal", root)[2:]}
    full_vs_paired = tests["| MS-VAE full > MS-VAE paired only | test SR (%)"]
    p = student_p_greater([66.0, 63.0, 65.0], [50.0, 52.0, 53.0])
    assert f"| 64.67 vs 51.67 (n = 3, 3) | {p:.2g} [" in full_vs_paired and full_vs_paired.endswith("| 71.7 vs 51 |")
    assert tests["| MS-VAE full > supervised | test BLEU-4"].endswith(
        "| 20.50 vs 30.00 (n = 2, 1) | - | 11.73 vs 10.43 |")  # one speaker seed: no test


def test_runs_table_lists_seeds_and_the_floor(root):
    lines = collect_results.table_runs("gotoseqlocal", "follower,msvae", root)
    assert [line.split(" | ")[1] for line in lines[2:8]] == ["0", "1", "2", "0", "1", "2"]
    assert "best valid SR (update 10)" in lines[5] and "best valid BLEU (update 8)" in lines[6]
    assert lines[-1].startswith("| floor: random 3 actions | - | 0.100 |")


def test_a_document_is_refreshed_and_checked(root, tmp_path):
    doc = tmp_path / "doc.md"
    mark = "<!-- table: python experiments/collect_results.py gotoseqlocal --table seeds:follower,msvae -->\n"
    doc.write_text(f"# Title\n\n{mark}| stale |\n<!-- end table -->\n\nProse after.\n")
    text, changed = collect_results.refresh(doc, root)
    assert changed == ["gotoseqlocal seeds:follower,msvae"]
    assert text.startswith(f"# Title\n\n{mark}| method |") and text.endswith("<!-- end table -->\n\nProse after.\n")
    doc.write_text(text)
    assert collect_results.refresh(doc, root) == (text, [])
    doc.write_text(mark.replace("seeds:", "nonsense:") + "<!-- end table -->\n")
    with pytest.raises(SystemExit, match="unknown table 'nonsense'"):
        collect_results.refresh(doc, root)


def test_committed_documents_match_the_committed_results(monkeypatch):
    """Every marked table of README.md and docs/results/*.md is what its command renders from results/ today."""
    monkeypatch.chdir(REPO)
    documents = [REPO / "README.md", *sorted((REPO / "docs" / "results").glob("*.md"))]
    assert len(documents) > 1, "no results documents"
    for document in documents:
        text, changed = collect_results.refresh(document)
        assert not changed, f"{document.name}: re-run python experiments/collect_results.py ... --write {document}"
        assert collect_results.MARK.search(text), f"{document.name} has no generated table"
