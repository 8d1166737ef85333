"""A Hub user's path (issue 31), offline: a Hub cache laid out by hand under a temporary ``HF_HUB_CACHE`` with
``HF_HUB_OFFLINE=1`` (in a subprocess, as a user runs it), and a fake ``HfApi`` (hub_helpers) that records each call
and what is uploaded, written to a local folder where a test reads the pushed repo."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import TINY_COUNTS
from hub_helpers import FakeHfApi
from transformers import AutoModel

import msvae_hf
from msvae_hf.data.demos import demo_features, push_demos_to_hub
from msvae_hf.models.tokenization_msvae import MSVAETokenizer

REPO_ID = "user/msvae-bosslocal"
DATASET_ID = "user/bosslocal-demos"
SHA = {"main": "a" * 40, "v1": "b" * 40}


def tiny_follower(tokenizer: MSVAETokenizer | None = None) -> msvae_hf.FollowerModel:
    tokenizer = tokenizer or MSVAETokenizer.from_grammar()
    config = msvae_hf.FollowerConfig(vocab_size=len(tokenizer), hidden_size=32, latent_dim=32, obs_channels=8,
                                     decoder_ffn_dim=32)
    model = msvae_hf.FollowerModel(config)
    model.tokenizer = tokenizer
    return model


def hub_cache(cache: Path, repo_type: str, repo_id: str, revisions: dict[str, Path]) -> Path:
    """Lay out ``cache`` as huggingface_hub does: ``refs/<revision>`` holds a commit, ``snapshots/<commit>/`` the
    files of the folder given for that revision."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    for revision, folder in revisions.items():
        shutil.copytree(folder, repo / "snapshots" / SHA[revision])
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text(SHA[revision])
    return cache


def run_as_user(code: str, tmp_path: Path, cache: Path) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter, offline against ``cache``; its last printed line is JSON."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"),
           "XDG_CACHE_HOME": str(tmp_path / "xdg"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture()
def model_cache(tmp_path: Path) -> Path:
    """A Hub cache holding REPO_ID: ``main`` as saved, ``v1`` with a tokenizer that allows unknown words."""
    model = tiny_follower()
    model.save_pretrained(tmp_path / "main")
    tiny_follower(MSVAETokenizer.from_grammar(allow_unknown=True)).save_pretrained(tmp_path / "v1")
    return hub_cache(tmp_path / "hub", "model", REPO_ID, {"main": tmp_path / "main", "v1": tmp_path / "v1"})


# ---------------------------------------------------------------------------------------------- row 1
def test_hub_id_attaches_tokenizer_through_hub_arguments(model_cache: Path, monkeypatch) -> None:
    """From a Hub id the tokenizer comes with the model, read with the caller's revision, token, cache_dir and
    local_files_only (a spy on MSVAETokenizer.from_pretrained records what reached it)."""
    seen: list[dict[str, Any]] = []
    load = MSVAETokenizer.from_pretrained.__func__

    def spy(cls, *args: Any, **kwargs: Any) -> MSVAETokenizer:
        seen.append(kwargs)
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(MSVAETokenizer, "from_pretrained", classmethod(spy))
    main = AutoModel.from_pretrained(REPO_ID, cache_dir=model_cache, local_files_only=True)
    assert isinstance(main.tokenizer, MSVAETokenizer) and main.tokenizer.allow_unknown is False
    v1 = AutoModel.from_pretrained(REPO_ID, cache_dir=model_cache, local_files_only=True, revision="v1",
                                   token="hf_fake")
    assert isinstance(v1.tokenizer, MSVAETokenizer) and v1.tokenizer.allow_unknown is True
    asked = {"cache_dir": model_cache, "local_files_only": True, "revision": "v1", "token": "hf_fake"}
    assert {name: seen[-1].get(name) for name in asked} == asked
    # Whatever else transformers' AutoModel hands on (newer releases pass its defaults along) stays at the default.
    defaults = {"force_download": False, "proxies": None, "subfolder": ""}
    extra = {name: value for name, value in seen[-1].items() if name not in asked}
    assert extra == {name: defaults.get(name, "<not a Hub default>") for name in extra}
    assert seen[-1]["revision"].resolved == SHA["v1"]  # the commit the weights came from (transformers resolves it)


def test_hub_id_offline_as_a_user(model_cache: Path, tmp_path: Path) -> None:
    """``HF_HUB_OFFLINE=1``: AutoModel from the id has its tokenizer (a policy can read an instruction), and
    AutoTokenizer gives the package's tokenizer, which refuses an unknown word instead of mapping it to <unk>."""
    report = run_as_user(f"""
        import json
        import msvae_hf
        from transformers import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained({REPO_ID!r})
        model.policy().reset(["go to the red ball"])
        tokenizer = AutoTokenizer.from_pretrained({REPO_ID!r})
        try:
            tokenizer("go to the zebra")
            unknown = "accepted"
        except ValueError as err:
            unknown = str(err)
        print(json.dumps({{"model": type(model.tokenizer).__name__, "auto": type(tokenizer).__name__,
                          "vocab": tokenizer.get_vocab() == msvae_hf.MSVAETokenizer.from_grammar().get_vocab(),
                          "unknown": unknown}}))
    """, tmp_path, model_cache)
    assert report["model"] == report["auto"] == "MSVAETokenizer" and report["vocab"]
    assert "'zebra'" in report["unknown"]


# ---------------------------------------------------------------------------------------------- row 2
def test_without_the_import_the_card_says_what_to_do(model_cache: Path, tmp_path: Path) -> None:
    """A process that never imports msvae_hf cannot load the model (with or without trust_remote_code: no code
    travels with the weights); the pushed card says to `pip install msvae-hf` and `import msvae_hf` first."""
    report = run_as_user(f"""
        import json, sys
        from transformers import AutoModel

        errors = []
        for kwargs in ({{}}, {{"trust_remote_code": True}}):
            try:
                AutoModel.from_pretrained({REPO_ID!r}, **kwargs)
                errors.append("loaded")
            except ValueError as err:
                errors.append(str(err))
        print(json.dumps({{"errors": errors, "imported": "msvae_hf" in sys.modules}}))
    """, tmp_path, model_cache)
    assert not report["imported"]
    for error in report["errors"]:
        assert "model type `msvae_follower`" in error and "does not recognize this architecture" in error
    api = FakeHfApi()
    tiny_follower().push_to_hub(REPO_ID, api=api)
    card = api.text("README.md")
    usage = card[card.index("## Usage"):card.index("## Training data")]
    assert "pip install msvae-hf" in usage and "does not recognize this architecture" in usage
    assert usage.index("import msvae_hf") < usage.index(f'AutoModel.from_pretrained("{REPO_ID}")')


# ---------------------------------------------------------------------------------------------- row 3
@pytest.fixture()
def pushed_demos(tiny_demos: Path, tmp_path: Path) -> Path:
    """What push_demos_to_hub uploads of the tiny demonstrations, as a local folder. The copy pushed has an old
    card without ``configs:``."""
    local = tmp_path / "local"
    shutil.copytree(tiny_demos, local)
    (local / "README.md").write_text("---\npretty_name: old card\n---\n\n# old card\n")
    api = FakeHfApi()
    assert push_demos_to_hub(local, DATASET_ID, api=api) is api.commits[-1]
    assert api.calls[-1][1]["folder_path"] == str(local)
    return api.write_upload(tmp_path / "pushed")


def test_load_dataset_gives_every_split(pushed_demos: Path, tmp_path: Path) -> None:
    """datasets.load_dataset of the pushed folder gives paired, unpaired, valid and test with their rows and
    features (unpaired's instruction is None: one config has one set of columns), and the card's decoding
    transform, run as written, gives [T, 7, 7, 3] frames."""
    from datasets import load_dataset

    demos = load_dataset(str(pushed_demos), cache_dir=str(tmp_path / "datasets_cache"))
    assert {name: len(split) for name, split in demos.items()} == TINY_COUNTS
    for split in demos.values():
        assert split.features == demo_features(True)
    assert set(demos["unpaired"]["instruction"]) == {None}
    assert all(demos["paired"]["instruction"])
    card = (pushed_demos / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", card, re.DOTALL).group(1)
    code = code.replace('load_dataset("<user>/<dataset>")',
                        f"load_dataset({str(pushed_demos)!r}, cache_dir={str(tmp_path / 'datasets_cache')!r})")
    scope: dict[str, Any] = {}
    exec(compile(code, "dataset_card.md", "exec"), scope)  # noqa: S102 (the card's own example)
    frames = scope["paired"][0]["observations"]
    assert frames.shape == (len(scope["paired"][0]["actions"]), 7, 7, 3) and frames.dtype.name == "uint8"


def test_load_demos_and_train_config_take_a_hub_id(pushed_demos: Path, tmp_path: Path) -> None:
    """load_demos (and so TrainConfig.demos) reads a Hub dataset id from the offline cache, split features as
    written (unpaired without instruction); an id the cache lacks is one line naming it."""
    cache = hub_cache(tmp_path / "hub", "dataset", DATASET_ID, {"main": pushed_demos})
    report = run_as_user(f"""
        import json
        from msvae_hf.data.demos import load_demos
        from msvae_hf.training.train_config import load_config
        from msvae_hf.training.loop import load_training_data

        demos = load_demos({DATASET_ID!r})
        paired, unpaired, valid, test, level = load_training_data(
            load_config(None, {{"model_type": "msvae", "demos": {DATASET_ID!r}}}))
        try:
            load_demos("user/absent")
            absent = "loaded"
        except FileNotFoundError as err:
            absent = str(err)
        print(json.dumps({{"rows": {{name: len(split) for name, split in demos.items()}},
                          "unpaired": demos["unpaired"].column_names, "training": [len(paired), len(unpaired)],
                          "absent": absent}}))
    """, tmp_path, cache)
    assert report["rows"] == TINY_COUNTS and "instruction" not in report["unpaired"]
    assert report["training"] == [TINY_COUNTS["paired"], TINY_COUNTS["unpaired"]]
    assert report["absent"].startswith("no demonstrations at user/absent") and "\n" not in report["absent"]


# ---------------------------------------------------------------------------------------------- row 4
def test_push_to_hub_forwards_transformers_arguments(tmp_path: Path) -> None:
    """token, revision, create_pr, private, commit_description and tags reach the Hub calls as in transformers (the
    revision branch created first); a bare name resolves to the user's namespace; a misspelt argument is an error."""
    api = FakeHfApi()
    out = tiny_follower().push_to_hub("msvae-bosslocal", token="hf_fake", create_pr=True, revision="dev",
                                      private=True, commit_description="why", tags=["mine"], api=api)
    assert out is api.commits[-1]
    assert api.names == ["create_repo", "create_branch", "upload_folder"]
    create, branch, upload = (kwargs for _, kwargs in api.calls)
    assert create["token"] == "hf_fake" and create["private"] is True
    assert branch == {"repo_id": "someone/msvae-bosslocal", "branch": "dev", "repo_type": "model", "exist_ok": True,
                      "token": "hf_fake"}
    assert {key: upload[key] for key in ("repo_id", "revision", "create_pr", "token", "commit_description")} == {
        "repo_id": "someone/msvae-bosslocal", "revision": "dev", "create_pr": True, "token": "hf_fake",
        "commit_description": "why"}
    assert "- mine" in api.text("README.md")
    with pytest.raises(TypeError, match="revison"):
        tiny_follower().push_to_hub("user/x", revison="dev", api=FakeHfApi())
