"""Whether a name given for data or a model is a Hub repo id or a local path: one rule for the loaders
(``load_demos``) and the cards (``msvae_hf.hub.cards``), so that a card names a Hub dataset exactly where the loader
would have fetched one."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.utils import validate_repo_id


def is_hub_repo_id(name: str, here: str | Path = ".") -> bool:
    """Whether ``name`` reads as a Hub repo id ("user/name") from the folder ``here``: one slash, a valid id, and
    no local path (not starting with ``.``, ``/`` or ``~``, and its first folder absent under ``here``, so a local
    folder always wins)."""
    if name.count("/") != 1 or name.startswith((".", "/", "~")) or (Path(here) / name.split("/", 1)[0]).exists():
        return False
    try:
        validate_repo_id(name)
    except ValueError:
        return False
    return True
