"""Pushes to the Hugging Face Hub: a folder (:func:`push_folder_to_hub`) and a finished run's best checkpoint with
its card (:func:`push_run`). Every Hub call runs inside :func:`hub_request`, which turns a refusal or a failed
connection into one line saying what to do. ``push_folder_to_hub`` takes an injectable `HfApi` so tests can record
its calls instead of reaching the network.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.repocard import RepoCard
from huggingface_hub.utils import validate_repo_id
from safetensors import safe_open

from ..utils.run_folder import BEST_FOLDERS
from .cards import render_run_card, run_kind, stage_shown_extras


class HubRequestError(OSError):
    """The Hub refused a request or could not be reached: one line saying what to do (nothing local changed); the
    Hub's own error is its ``__cause__``. An OSError, as huggingface_hub's HTTP errors are."""


def _network_error(err: BaseException) -> bool:
    """Whether ``err`` is a failure to reach the Hub (refused or reset connection, timeout), whichever HTTP client
    huggingface_hub uses (httpx, requests)."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    return any(c.__module__.split(".")[0] in ("httpx", "httpx2", "requests", "urllib3")
               and c.__name__ in ("TransportError", "RequestError", "ConnectionError", "Timeout")
               for c in type(err).__mro__)


@contextlib.contextmanager
def hub_request(what: str, repo_id: str) -> Iterator[None]:
    """Run Hub calls that ``what`` (e.g. "upload to") ``repo_id``: an HTTP error or a failed connection becomes one
    :class:`HubRequestError` line that says what to do (log in, retry later, check the connection)."""
    try:
        yield
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status == 401:
            advice = ("not logged in, or the token is invalid: log in with `hf auth login` (or set HF_TOKEN to a "
                      "token with write access) and push again")
        elif status == 403:
            advice = (f"the token may not write to {repo_id.split('/')[0]}: use a token with write access to it, "
                      "or push to a repo of your own")
        elif status is not None and status >= 500:
            advice = "a failure on the Hub's side: push again later"
        else:
            advice = " ".join(str(err).split())[:300]
        raise HubRequestError(f"the Hub refused to {what} {repo_id} ({status or 'no status'}): {advice}; nothing "
                              "here was changed") from err
    except OfflineModeIsEnabled as err:
        raise HubRequestError(f"cannot {what} {repo_id}: HF_HUB_OFFLINE is set; unset it to reach the Hub, then push "
                              "again; nothing here was changed") from err
    except Exception as err:
        if not _network_error(err):
            raise
        detail = " ".join(str(err).split())[:200] or type(err).__name__
        raise HubRequestError(f"cannot reach the Hub to {what} {repo_id} ({type(err).__name__}: {detail}): check the "
                              "connection (and HF_ENDPOINT) and push again; nothing here was changed") from err


def push_folder_to_hub(
    folder: str | Path,
    repo_id: str,
    card: RepoCard | str | None = None,
    api: HfApi | None = None,
    private: bool | None = False,
    commit_message: str = "Upload MS-VAE checkpoint",
    repo_type: str = "model",
    commit_description: str | None = None,
    token: bool | str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
) -> Any:
    """Create `repo_id` (if needed) and upload `folder`, writing `card` as its README.md if it has none.

    The Hub arguments go where transformers' ``push_to_hub`` sends them: ``token`` to every call (only when
    given), a ``revision`` branch created first (unless it names a PR), ``revision`` and ``create_pr`` to the
    upload. Returns what `api.upload_folder` returns (a `CommitInfo` for the real `HfApi`).
    """
    folder = Path(folder)
    readme = folder / "README.md"
    if not readme.is_file():
        if card is None:
            raise ValueError(f"{folder} has no README.md: pass a card (e.g. render_model_card)")
        readme.write_text(str(card), encoding="utf-8")
    api = api if api is not None else HfApi()
    auth: dict[str, Any] = {} if token is None else {"token": token}
    with hub_request("create", repo_id):
        url = api.create_repo(repo_id=repo_id, repo_type=repo_type, private=private, exist_ok=True, **auth)
    repo_id = getattr(url, "repo_id", repo_id)  # "name" -> "user/name", as transformers does
    if revision is not None and not revision.startswith("refs/pr"):
        with hub_request(f"create the branch {revision} of", repo_id):
            try:
                api.create_branch(repo_id=repo_id, branch=revision, repo_type=repo_type, exist_ok=True, **auth)
            except HfHubHTTPError as err:  # a PR to a repo we cannot write to: the branch must exist already
                if not (create_pr and err.response.status_code == 403):
                    raise
    with hub_request("upload to", repo_id):
        return api.upload_folder(
            repo_id=repo_id, folder_path=str(folder), repo_type=repo_type, commit_message=commit_message,
            commit_description=commit_description, revision=revision, create_pr=create_pr, **auth,
        )


# ---------------------------------------------------------------------------------------------- runs
#: What ``push_run`` needs in a run directory (an ``output_dir`` of scripts/train.py).
RUN_FILES = ("results.json", "train_config.json", "best/config.json", "best/model.safetensors")
#: Copied beside the weights so the Hub repo records how the model was trained and scored.
RUN_EXTRAS = ("results.json", "train_config.json", "command.txt")


def check_finite_weights(folder: str | Path) -> None:
    """Raise ``ValueError`` (one line: the folder, its first non-finite tensor, how many) when a tensor of
    ``folder``'s ``*.safetensors`` holds NaN or inf, as a diverged run's weights do. Reads one tensor at a time."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    bad: list[str] = []
    total = 0
    for path in files:
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                total += 1
                tensor = weights.get_tensor(name)
                if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
                    bad.append(name if len(files) == 1 else f"{path.name}:{name}")
    if bad:
        raise ValueError(f"{folder} holds non-finite weights: {len(bad)} of {total} tensors have NaN or inf, "
                         f"first {bad[0]} (the run diverged); nothing pushed")


def push_run(
    run_dir: str | Path,
    repo_id: str,
    api: HfApi | None = None,
    private: bool = False,
    dataset: str | None = None,
    staging_dir: str | Path | None = None,
    base_models: Sequence[str] = (),
) -> Any:
    """Push ``run_dir/best`` (weights, config, tokenizer) with its model card, results.json, train_config.json
    and command.txt to the Hub model repo ``repo_id``.

    The run directory is never modified: the files are staged in ``staging_dir`` (a temporary folder if None;
    a given one must be empty or absent and is kept, e.g. for a dry run with a fake ``api``), and the staged
    card, train_config.json, command.txt and results.json show absolute paths relative to the folder the run
    was trained from (``dataset``, a Hub dataset id, replaces ``demos``; ``base_models``, the Hub ids of the
    checkpoints it was initialised from, go into the card's ``base_model``). A run without ``best/`` or
    ``results.json``, or one of whose chosen models (``best/``, ``best_speaker/``, ``best_<metric>/``) holds a NaN or
    inf weight, is an error before anything is staged or uploaded.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run directory at {run_dir}")
    missing = [name for name in RUN_FILES if not (run_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{run_dir} is not a finished run: missing {', '.join(missing)} "
                                "(train it to the end with scripts/train.py first)")
    if dataset is not None:
        try:
            validate_repo_id(dataset)
        except ValueError as err:  # HFValidationError
            raise ValueError(f"dataset {dataset!r} is not a Hub dataset id (user/name): {err}") from None
    for name in BEST_FOLDERS:  # every folder a run keeps a model in (run_folder.selections)
        if (run_dir / name).is_dir():
            check_finite_weights(run_dir / name)
    card = render_run_card(run_dir, repo_id, dataset, base_models)
    with tempfile.TemporaryDirectory(prefix="msvae-push-") as tmp:
        stage = Path(staging_dir) if staging_dir is not None else Path(tmp) / "repo"
        if stage.exists() and any(stage.iterdir()):
            raise FileExistsError(f"staging folder {stage} is not empty")
        stage.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(run_dir / "best", stage, dirs_exist_ok=True)
        (stage / "README.md").unlink(missing_ok=True)
        for name in RUN_EXTRAS:
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, stage / name)
        stage_shown_extras(run_dir, stage, dataset)
        kind = run_kind(json.loads((run_dir / "train_config.json").read_text(encoding="utf-8")))
        return push_folder_to_hub(stage, repo_id, card=card, api=api, private=private,
                                  commit_message=f"Upload {kind} trained in {run_dir.name}")


__all__ = ["push_folder_to_hub", "check_finite_weights", "push_run", "HubRequestError", "hub_request"]
