"""Model and dataset cards, and pushes to the Hugging Face Hub.

Cards are Jinja templates (`model_cards/model_card.md`, `model_cards/dataset_card.md`) rendered with
`huggingface_hub.ModelCard.from_template` / `DatasetCard.from_template`. `push_folder_to_hub` takes an
injectable `HfApi` so tests can record its calls instead of reaching the network. Cards are never
validated here (`ModelCard.validate` calls the Hub).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import DatasetCard, DatasetCardData, HfApi, ModelCard, ModelCardData
from huggingface_hub.repocard import RepoCard

PAPER_TITLE = "Multimodal Sequential Generative Models for Semi-Supervised Language Instruction Following"

#: model_kind -> (card title, what the checkpoint is).
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "msvae": ("MS-VAE", "The multimodal sequential VAE, holding both its follower and its speaker."),
    "follower": ("Follower", "A follower: a BabyAI instruction and egocentric observations -> actions."),
    "speaker": ("Speaker", "A speaker: a BabyAI trajectory (observations and actions) -> an instruction."),
    "speaker-follower": (
        "Speaker-follower",
        "A follower trained on paired demonstrations plus unpaired trajectories labelled by a speaker.",
    ),
}


def template_path(name: str) -> Path:
    """A card template: the copy shipped inside the installed package, else the repository's `model_cards/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "model_cards" / name, here.parent / "model_cards" / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"card template {name!r} not found in msvae_hf/model_cards/ or model_cards/")


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render_model_card(
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    training_command: str,
    dataset: str,
    model_kind: str,
    repo_id: str = "<repo_id>",
    tags: Sequence[str] = (),
) -> ModelCard:
    """The model card of an MS-VAE, follower or speaker checkpoint (`model_kind`, see `MODEL_KINDS`)."""
    if model_kind not in MODEL_KINDS:
        raise ValueError(f"model_kind must be one of {sorted(MODEL_KINDS)}, got {model_kind!r}")
    card_data = ModelCardData(
        library_name="transformers",
        tags=list(dict.fromkeys(["msvae", "babyai", "minigrid", "instruction-following", model_kind, *tags])),
        datasets=[dataset],
        metrics=[name for name in ("success_rate", "bleu") if name in metrics] or None,
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path("model_card.md")),
        title=f"{MODEL_KINDS[model_kind][0]} for BabyAI (msvae-hf)",
        model_description=MODEL_KINDS[model_kind][1],
        repo_id=repo_id,
        dataset_id=dataset,
        training_command=training_command,
        config_json=json.dumps(dict(config), indent=2, sort_keys=True, default=str),
        results={name: _format(value) for name, value in metrics.items()},
    )


def render_dataset_card(
    dataset: str, levels: Sequence[str], splits: Mapping[str, int], generation_command: str
) -> DatasetCard:
    """The dataset card of a demonstration DatasetDict (`splits`: split name -> number of episodes)."""
    card_data = DatasetCardData(
        tags=["babyai", "minigrid", "imitation-learning", "instruction-following"],
        task_categories=["reinforcement-learning"],
        pretty_name=dataset,
    )
    return DatasetCard.from_template(
        card_data,
        template_path=str(template_path("dataset_card.md")),
        title=f"BabyAI demonstrations: {dataset}",
        levels=list(levels),
        splits=dict(splits),
        generation_command=generation_command,
    )


def push_folder_to_hub(
    folder: str | Path,
    repo_id: str,
    card: RepoCard | str | None = None,
    api: HfApi | None = None,
    private: bool = False,
    commit_message: str = "Upload MS-VAE checkpoint",
    repo_type: str = "model",
) -> Any:
    """Create `repo_id` (if needed) and upload `folder`, writing `card` as its README.md if it has none.

    Returns what `api.upload_folder` returns (a `CommitInfo` for the real `HfApi`).
    """
    folder = Path(folder)
    readme = folder / "README.md"
    if not readme.is_file():
        if card is None:
            raise ValueError(f"{folder} has no README.md: pass a card (render_model_card / render_dataset_card)")
        readme.write_text(str(card), encoding="utf-8")
    api = api if api is not None else HfApi()
    api.create_repo(repo_id=repo_id, repo_type=repo_type, private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id, folder_path=str(folder), repo_type=repo_type, commit_message=commit_message
    )


__all__ = ["MODEL_KINDS", "render_model_card", "render_dataset_card", "push_folder_to_hub", "template_path"]
