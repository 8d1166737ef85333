"""metrics: BLEU against sacrebleu, the local evaluate module offline, episode summaries, smoothed_max."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import sacrebleu

from msvae_hf.evaluation.metrics import (
    BLEU_METRIC_SCRIPT,
    bleu,
    compare_bleu,
    instruction_parts,
    instruction_parts_match,
    reference_streams,
    smoothed_max,
    summarize_episodes,
)

PREDICTIONS = [
    "go to the red ball, then pick up a key",
    "open the door",
    "put the blue box next to a door after you go to the grey ball on your left",
]
REFERENCES = [
    "go to the red ball, then pick up the key",
    "open a door",
    "put the blue box next to a door after you go to the grey ball",
]


def test_bleu_equals_sacrebleu_corpus_bleu():
    expected = sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES]).score
    assert 0 < expected < 100
    assert bleu(PREDICTIONS, REFERENCES) == pytest.approx(expected)
    assert bleu(PREDICTIONS, [[r] for r in REFERENCES]) == pytest.approx(expected)


def test_compare_bleu_paired_bootstrap():
    """Scores equal bleu(); a system identical to the baseline gets its score and interval, one much worse on
    every sentence differs significantly (p < 0.05); the same call gives the same numbers; bad input raises."""
    refs = [f"go to the {c} {t}" for c in ("red", "blue", "grey", "green", "purple") for t in ("ball", "box", "key")]
    good = list(refs)
    good[::3] = [r.replace("go to the", "go to a") for r in refs[::3]]
    bad = [r.replace("go to", "pick up") if i % 2 else r.rsplit(" ", 1)[0] + " door" for i, r in enumerate(refs)]
    systems = {"baseline": good, "same": list(good), "worse": bad}
    out = compare_bleu(systems, refs, num_samples=200)
    assert list(out) == ["baseline", "same", "worse"]
    for name, predictions in systems.items():
        assert out[name]["bleu"] == pytest.approx(bleu(predictions, refs))
    assert out["baseline"]["p_value"] is None
    assert (out["same"]["bleu"], out["same"]["ci"]) == (out["baseline"]["bleu"], out["baseline"]["ci"])
    assert out["worse"]["p_value"] < 0.05 and out["worse"]["ci"] > 0
    assert compare_bleu(systems, refs, num_samples=200) == out
    with pytest.raises(ValueError, match="at least two"):
        compare_bleu({"baseline": good}, refs)
    with pytest.raises(ValueError, match="'worse' has 14 predictions"):
        compare_bleu({"baseline": good, "worse": bad[:-1]}, refs)


def test_bleu_multiple_and_uneven_references():
    extra = ["go to a box", "open the door", "go to the grey ball"]
    two = [[r, e] for r, e in zip(REFERENCES, extra, strict=True)]
    expected = sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES, extra]).score
    assert bleu(PREDICTIONS, two) == pytest.approx(expected)
    uneven = [[REFERENCES[0]], [REFERENCES[1], "open the door"], [REFERENCES[2]]]
    assert bleu(PREDICTIONS, uneven) > bleu(PREDICTIONS, REFERENCES)


def test_bleu_identical_is_100_and_bad_inputs_raise():
    assert bleu(PREDICTIONS, PREDICTIONS) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="2 predictions but 3 references"):
        bleu(PREDICTIONS[:2], REFERENCES)
    with pytest.raises(ValueError, match="at least one reference"):
        bleu(PREDICTIONS[:1], [[]])


def test_local_evaluate_metric_loads_offline_and_agrees():
    code = (
        "import json, sys; from msvae_hf.evaluation.metrics import load_bleu_metric; m = load_bleu_metric(); "
        "p, r = json.loads(sys.argv[1]); print(json.dumps(m.compute(predictions=p, references=r)))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])
    payload = json.dumps([PREDICTIONS, REFERENCES])
    proc = subprocess.run(
        [sys.executable, "-c", code, payload], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["bleu"] == pytest.approx(
        bleu(PREDICTIONS, REFERENCES)
    )
    assert BLEU_METRIC_SCRIPT.is_file()


def test_the_metric_scripts_copy_of_reference_streams_is_the_packages():
    """bleu.py loads without the package, so it holds a copy of `reference_streams`: the same source."""
    tree = ast.parse(BLEU_METRIC_SCRIPT.read_text(encoding="utf-8"))
    copy = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "reference_streams")
    assert ast.get_source_segment(BLEU_METRIC_SCRIPT.read_text(encoding="utf-8"), copy) == inspect.getsource(
        reference_streams).rstrip("\n")


def test_instruction_parts_hand_cases():
    """Actions and objects are read in order; everything else (articles, locations, connectives) is ignored."""
    assert instruction_parts("pick up a red ball, then go to the box on your left") == (
        ("pick", "go"), ("red", "ball", "box"))
    assert instruction_parts("put the object next to a grey key after you open the door") == (
        ("put", "open"), ("object", "grey", "key", "door"))
    refs = ["go to the red ball", "pick up a box and open the blue door", "go to a key"]
    preds = ["go to a red ball in front of you",  # both right (article and location ignored)
             "pick up a box and open the red door",  # actions right, objects wrong
             "pick up a key"]  # objects right, actions wrong
    assert instruction_parts_match(preds, refs) == pytest.approx({"actions": 2 / 3, "objects": 2 / 3, "both": 1 / 3})
    with pytest.raises(ValueError, match="as many predictions as references"):
        instruction_parts_match(preds[:2], refs)


def test_summarize_episodes():
    results = [
        SimpleNamespace(success=True, steps=10, reward=0.9),
        SimpleNamespace(success=False, steps=128, reward=0.0),
        SimpleNamespace(success=True, steps=20, reward=0.8),
        SimpleNamespace(success=True, steps=6, reward=0.95),
    ]
    summary = summarize_episodes(results)
    assert summary == {
        "success_rate": pytest.approx(0.75),
        "mean_steps": pytest.approx(41.0),
        "mean_reward": pytest.approx(0.6625),
        "episodes": 4,
    }
    with pytest.raises(ValueError):
        summarize_episodes([])


def test_smoothed_max_hand_case():
    # windows of 5: [.1 .2 .3 .4 .5]=.30, [.2 .3 .4 .5 .9]=.46, [.3 .4 .5 .9 .2]=.46, [.4 .5 .9 .2 .8]=.56
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.9, 0.2, 0.8]
    assert smoothed_max(values) == pytest.approx(0.56)
    assert smoothed_max(values, window=1) == pytest.approx(0.9)
    assert smoothed_max([0.2, 0.4]) == pytest.approx(0.3)  # shorter than a window: the mean
    with pytest.raises(ValueError):
        smoothed_max([])
