"""hub: model cards (and the demonstrations' dataset card) from the templates in model_cards/, and pushes through a
fake HfApi that records calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hub_helpers import FakeHfApi
from huggingface_hub import ModelCard

from msvae_hf.data.demos import render_dataset_card
from msvae_hf.hub.card_templates import template_path
from msvae_hf.hub.cards import render_model_card
from msvae_hf.hub.push import push_folder_to_hub
from msvae_hf.models.configuration_msvae import MSVAEConfig

COMMAND = "python scripts/train.py --level BabyAI-GoToSeqLocal-v0 --paired 1000 --unpaired 10000 --seed 0"
METRICS = {"success_rate": 0.6543, "bleu": 41.27, "mean_steps": 14.2, "episodes": 1000}
DATASET = "someone/babyai-gotoseqlocal-demos"


@pytest.fixture()
def card() -> ModelCard:
    return render_model_card(MSVAEConfig(num_latent_tokens=16).to_dict(), METRICS, COMMAND, DATASET, "msvae")


def test_model_card_content(card):
    text = str(card)
    assert text.startswith("---\n")
    assert card.data.library_name == "transformers"
    assert card.data.datasets == [DATASET]
    assert card.data.metrics == ["success_rate", "bleu"]
    assert {"msvae", "babyai"} <= set(card.data.tags)
    assert "Akuzawa" in text and "IJCAI 2022" in text
    assert "Multimodal Sequential Generative Models for" in text
    assert COMMAND in text and DATASET in text
    assert "| success_rate | 0.6543 |" in text and "| bleu | 41.27 |" in text and "| episodes | 1000 |" in text
    assert "moving average" in text and "sacrebleu" in text and "## Limitations" in text
    config_json = text.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(config_json)["num_latent_tokens"] == 16
    reparsed = ModelCard(text)  # the metadata block parses back
    assert reparsed.data.datasets == [DATASET]


@pytest.mark.parametrize("kind", ["follower", "speaker", "speaker-follower"])
def test_model_kinds(kind):
    card = render_model_card({"hidden_size": 128}, {"bleu": 30.0}, COMMAND, DATASET, kind)
    assert kind in card.data.tags
    assert card.data.metrics == ["bleu"]


def test_card_metadata_license_pipeline_tag_base_models_and_only_a_hub_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    card = render_model_card({}, {"success_rate": 0.5}, COMMAND, DATASET, "msvae",
                             base_models=["someone/follower-bosslocal", "someone/speaker-bosslocal"])
    reparsed = ModelCard(str(card)).data
    assert reparsed.license == "apache-2.0" and reparsed.pipeline_tag == "reinforcement-learning"
    assert reparsed.base_model == ["someone/follower-bosslocal", "someone/speaker-bosslocal"]
    # "data/bosslocal_100k" reads as a Hub id until its folder data/ is here (load_demos' rule); hub_dataset decides
    def datasets(hub_dataset: bool | None) -> list[str] | None:
        card = render_model_card({}, {"bleu": 30.0}, COMMAND, "data/bosslocal_100k", "speaker", hub_dataset=hub_dataset)
        assert card.data.pipeline_tag == "text-generation" and card.data.base_model is None
        assert "data/bosslocal_100k" in str(card)  # named in the text either way
        return card.data.datasets

    assert datasets(None) == ["data/bosslocal_100k"] and datasets(False) is None
    (tmp_path / "data").mkdir()
    assert datasets(None) is None and datasets(True) == ["data/bosslocal_100k"]
    with pytest.raises(ValueError, match="not/a/valid/id"):
        render_model_card({}, {}, COMMAND, DATASET, "msvae", base_models=["not/a/valid/id"])


def test_unknown_model_kind():
    with pytest.raises(ValueError, match="'vae'"):
        render_model_card({}, {}, COMMAND, DATASET, "vae")


def test_push_writes_card_and_uploads(card, tmp_path):
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    api = FakeHfApi()
    out = push_folder_to_hub(tmp_path, "someone/msvae-gotoseqlocal", card=card, api=api, private=True)
    assert out is api.commits[-1]
    assert api.names == ["create_repo", "upload_folder"]
    create, upload = api.calls[0][1], api.calls[1][1]
    assert create == {"repo_id": "someone/msvae-gotoseqlocal", "repo_type": "model", "private": True, "exist_ok": True}
    assert upload["repo_id"] == "someone/msvae-gotoseqlocal" and Path(upload["folder_path"]) == tmp_path
    uploaded = api.top_level_text()
    assert set(uploaded) == {"README.md", "config.json"}
    assert COMMAND in uploaded["README.md"] and "| bleu | 41.27 |" in uploaded["README.md"]


def test_push_keeps_existing_readme_and_needs_a_card(tmp_path):
    (tmp_path / "README.md").write_text("hand-written", encoding="utf-8")
    api = FakeHfApi()
    push_folder_to_hub(tmp_path, "someone/x", api=api)
    assert api.top_level_text()["README.md"] == "hand-written"
    with pytest.raises(ValueError, match="no README.md"):
        push_folder_to_hub(tmp_path / "missing", "someone/y", api=FakeHfApi())


def test_dataset_card(tmp_path):
    stats = {"paired": {"episodes": 1000, "mean_steps": 8.851, "mean_words": 10.5}, "unpaired": {"episodes": 9000},
             "valid": {"episodes": 0}}
    card = render_dataset_card("BabyAI-GoToSeqLocal-v0", stats, {"paired/step_limit": 3}, "make")
    text = str(card)
    assert text.startswith("---\n") and card.data.pretty_name == "BabyAI-GoToSeqLocal-v0 bot demonstrations"
    assert "| paired | 1000 | 8.85 | 10.50 |" in text and "| unpaired | 9000 | - | - |" in text
    assert "| valid | 0 |" in text and "{'paired/step_limit': 3}" in text and "below 1000000000" in text
    assert "BabyAI-GoToSeqLocal-v0" in text and "```bash\nmake\n```" in text
    assert card.data.license == "apache-2.0" and card.data.size_categories == ["10K<n<100K"]
    api = FakeHfApi()
    push_folder_to_hub(tmp_path, DATASET, card=card, api=api, repo_type="dataset")
    assert api.calls[0][1]["repo_type"] == "dataset" and api.calls[1][1]["repo_type"] == "dataset"


def test_templates_exist():
    for name in ("model_card.md", "dataset_card.md"):
        assert template_path(name).read_text(encoding="utf-8").startswith("---\n{{ card_data }}")
    with pytest.raises(FileNotFoundError):
        template_path("nope.md")
