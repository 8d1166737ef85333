"""Shared test fixtures: a tiny BossLocal demonstration dataset and tiny training configs.

The dataset (40 paired, 80 unpaired, 16 valid, 16 test bot episodes) is built once per test session
(about 1 s) and must be treated as read-only by the tests that use it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import msvae_hf  # noqa: E402,F401  (registers the levels and the Auto classes)

TINY_LEVEL = "BabyAI-BossLocal-v0"
TINY_COUNTS = {"paired": 40, "unpaired": 80, "valid": 16, "test": 16}

#: Model config overrides that make every model type small enough for a few CPU updates in a test (the prior's
#: and the sliced-Wasserstein sizes are MS-VAE's only: :func:`tiny_model` gives each model type its own).
TINY_MODEL: dict[str, Any] = {
    "hidden_size": 32, "word_embed_dim": 32, "decoder_ffn_dim": 64, "decoder_layers": 1, "decoder_heads": 2,
    "latent_dim": 32, "prior_hidden_size": 32, "obs_channels": 16, "obs_embed_dim": 8, "action_embed_dim": 8,
    "swd_projections": 8,
}

#: TrainConfig fields for a run of a few updates with a handful of evaluation episodes.
TINY_TRAIN: dict[str, Any] = {
    "batch_size": 8, "max_updates": 4, "eval_every": 2, "eval_episodes": 4, "eval_batch_size": 4,
    "bleu_examples": 8, "test_episodes": 4, "log_every": 1, "checkpoint_every": 2, "keep_checkpoints": 1,
    "learning_rate": 1e-3, "threads": 1, "validate_reading": False,  # the test's evaluation reads; validation: SR
}


def tiny_model(model_type: str = "msvae") -> dict[str, Any]:
    """:data:`TINY_MODEL`'s keys that ``model_type``'s config class has."""
    from msvae_hf.models.configuration_msvae import MODEL_TYPE_CONFIGS

    fields = {f.name for f in dataclasses.fields(MODEL_TYPE_CONFIGS[model_type])}
    return {key: value for key, value in TINY_MODEL.items() if key in fields}


def tiny_cli_args(model: dict[str, Any] | None = None, model_type: str = "msvae") -> list[str]:
    """``--model.KEY VALUE`` flags of :func:`tiny_model` (plus ``model``) for ``scripts/train.py``."""
    args: list[str] = []
    for key, value in {**tiny_model(model_type), **(model or {})}.items():
        args += [f"--model.{key}", str(value)]
    return args


@pytest.fixture(scope="session")
def tiny_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved DatasetDict (splits paired/unpaired/valid/test) of tiny BossLocal bot demonstrations."""
    from msvae_hf.data.demos import make_demos

    out = tmp_path_factory.mktemp("demos") / "bosslocal"
    make_demos(TINY_LEVEL, TINY_COUNTS, out, command="tests/conftest.py tiny_demos")
    return out


def train_tiny(model_type: str, output_dir: str | Path, demos: str | Path, **overrides: Any) -> dict[str, Any]:
    """``msvae_hf.training.loop.train`` on a tiny config in this process (fp32, CPU); returns results.json."""
    from msvae_hf.training.loop import train
    from msvae_hf.training.train_config import load_config

    model = {**tiny_model(model_type), **overrides.pop("model", {})}
    values = {"model_type": model_type, "output_dir": str(output_dir), "demos": str(demos), **TINY_TRAIN, **overrides}
    values.update({f"model.{k}": v for k, v in model.items()})
    return train(load_config(None, values))


@pytest.fixture(scope="session")
def baseline_runs(tiny_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Finished tiny follower and speaker runs ({"follower": dir, "speaker": dir}); copy before changing them."""
    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for model_type in ("follower", "speaker"):
        runs[model_type] = root / model_type
        train_tiny(model_type, runs[model_type], tiny_demos)
    return runs


@pytest.fixture(scope="module")
def models(baseline_runs: dict[str, Path]) -> tuple[Any, Any]:
    """The tiny baseline speaker and follower, loaded in eval mode (a module's own copies: tests may move them)."""
    from msvae_hf.models.modeling_baselines import FollowerModel, SpeakerModel

    speaker = SpeakerModel.from_pretrained(baseline_runs["speaker"] / "best").eval()
    follower = FollowerModel.from_pretrained(baseline_runs["follower"] / "best").eval()
    return speaker, follower


@pytest.fixture(scope="session")
def tok():
    """The package's tokenizer (BabyAI's closed grammar); it holds no state a test could change."""
    from msvae_hf.models.tokenization_msvae import MSVAETokenizer

    return MSVAETokenizer.from_grammar()


@pytest.fixture
def mean_z(monkeypatch: pytest.MonkeyPatch) -> None:
    """z = posterior mean instead of a reparameterised sample, so MS-VAE's forward() is deterministic."""
    import msvae_hf.models.modeling_msvae as modeling_msvae

    monkeypatch.setattr(modeling_msvae, "reparameterize", lambda mean, logvar: mean)


REPO = Path(__file__).resolve().parents[1]


def load_script(name: str) -> Any:
    """Import ``scripts/<name>.py`` as a module (to call its ``main(argv)`` in-process)."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-1 of every file below ``root``: equal digests mean nothing was written, deleted or changed."""
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def as_array4d(split: Any) -> Any:
    """``split`` stored in the nested-list format: observations Array4D [T, 7, 7, 3], taken from replaying each
    episode (not from the codes)."""
    from datasets import Array4D, Dataset

    from msvae_hf.data.demos import replay_episode

    features = split.features.copy()
    features["observations"] = Array4D((None, 7, 7, 3), "uint8")
    rows = [{**row, "observations": replay_episode(row["level"], row["seed"], row["actions"]).observations}
            for row in split]
    return Dataset.from_list(rows, features=features)
