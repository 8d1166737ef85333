"""experiments/probe_goal_steps.py: speakers' goal-step read-outs scored on a split, written as one JSON; a split
the demonstrations lack, or a speaker without a read-out, is one line before anything is written."""

from __future__ import annotations

import json

import probe_goal_steps
import pytest
import torch
from conftest import tiny_model

from msvae_hf import SpeakerConfig, SpeakerModel
from msvae_hf.data.demos import load_demos
from msvae_hf.evaluation.evaluate import goal_step_accuracy


@pytest.fixture(scope="module")
def speakers(tmp_path_factory):
    from msvae_hf.models.tokenization_msvae import MSVAETokenizer

    tok = MSVAETokenizer.from_grammar()
    folders = {}
    for weight in (1.0, 0.0):
        torch.manual_seed(0)
        model = SpeakerModel(SpeakerConfig(**tiny_model("speaker"), goal_steps_weight=weight))
        model.tokenizer = tok
        folders[weight] = tmp_path_factory.mktemp("speaker") / "best"
        model.save_pretrained(folders[weight])
        tok.save_pretrained(folders[weight])
    return folders


def test_writes_each_models_scores(speakers, tiny_demos, tmp_path, capsys):
    out = tmp_path / "probe" / "goal_steps.json"
    report = probe_goal_steps.main(["--demos", str(tiny_demos), "--split", "valid", "--model",
                                    f"a={speakers[1.0]}", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    expected = goal_step_accuracy(SpeakerModel.from_pretrained(speakers[1.0]), load_demos(tiny_demos)["valid"])
    assert report["models"]["a"] == {"path": str(speakers[1.0]), **expected}
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["model"] == "a"


@pytest.mark.parametrize("flags, problem", [(["--split", "nowhere"], "has no split 'nowhere'"),
                                            ([], "no goal-step read-out")])
def test_bad_input_is_one_line_before_anything_is_written(speakers, tiny_demos, tmp_path, flags, problem):
    out = tmp_path / "goal_steps.json"
    model = speakers[1.0] if flags else speakers[0.0]
    with pytest.raises(SystemExit, match=problem):
        probe_goal_steps.main(["--demos", str(tiny_demos), "--model", str(model), "--out", str(out), *flags])
    assert not out.exists()
