"""experiments/pretrain_speaker.py: a pre-trained speaker that training starts from."""

from __future__ import annotations

import json

import pretrain_speaker
import pytest
from conftest import TINY_COUNTS, TINY_MODEL, tiny_model, train_tiny

from msvae_hf.models.modeling_baselines import SpeakerModel


def test_script_saves_a_speaker_that_training_starts_from(tiny_demos, tmp_path):
    out, config = tmp_path / "init", tmp_path / "tiny.json"
    config.write_text(json.dumps({"model": tiny_model("speaker")}))
    pretrain_speaker.main(["--demos", str(tiny_demos), "--split", "unpaired", "--updates", "3",
                                          "--batch-size", "8", "--config", str(config), "--out", str(out)])
    info = json.loads((out / "pretraining.json").read_text())
    assert info["trajectories"] == TINY_COUNTS["unpaired"] and info["updates"] == 3
    saved = SpeakerModel.from_pretrained(out)
    results = train_tiny("speaker", tmp_path / "run", tiny_demos, init_from=str(out), max_updates=1, eval_every=1,
                         checkpoint_every=1)
    assert results["test_bleu"] is not None
    assert saved.config.hidden_size == TINY_MODEL["hidden_size"]
    trained = SpeakerModel.from_pretrained(tmp_path / "run" / "best").config.to_dict()
    assert {k: v for k, v in saved.config.to_dict().items() if k != "_name_or_path"} == {
        k: v for k, v in trained.items() if k != "_name_or_path"}
    with pytest.raises(SystemExit, match="not empty"):
        pretrain_speaker.main(["--demos", str(tiny_demos), "--out", str(out)])
