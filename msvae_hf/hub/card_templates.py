"""Where the Jinja templates of the model and dataset cards are found (the repository's ``model_cards/``).

Rendered with ``huggingface_hub.ModelCard.from_template`` (``msvae_hf.hub.cards``) and ``DatasetCard.from_template``
(``msvae_hf.data.demos``). An installed package carries its own copy as ``msvae_hf/model_cards/`` (setup.py).
"""

from __future__ import annotations

from pathlib import Path


def template_path(name: str) -> Path:
    """A card template: the copy shipped inside the installed package, else the repository's `model_cards/`."""
    package = Path(__file__).resolve().parents[1]  # msvae_hf/
    for candidate in (package / "model_cards" / name, package.parent / "model_cards" / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"card template {name!r} not found in msvae_hf/model_cards/ or model_cards/")


__all__ = ["template_path"]
