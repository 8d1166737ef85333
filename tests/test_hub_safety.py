"""push_to_hub refuses a diverged run (NaN / inf weights) and uploads no local absolute path, without touching the
run folder: a tiny fake run (save_pretrained weights, results.json, train_config.json and command.txt naming
absolute paths) pushed through a fake HfApi that records the calls and the uploaded files."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY_LEVEL, load_script, tree_digest
from hub_helpers import FakeHfApi
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file

import msvae_hf
from msvae_hf.hub.push import push_run
from msvae_hf.models.configuration_msvae import FOLLOWER_FIELDS

DATASET = "someone/bosslocal-demos"
#: An absolute path of another machine, sharing nothing with the test's folders but "/".
FOREIGN = "/scratch/alice/runs/bosslocal/msvae_2000"


def _save_tiny_msvae(folder: Path) -> None:
    tok = msvae_hf.MSVAETokenizer.from_grammar()
    config = msvae_hf.MSVAEConfig(vocab_size=len(tok), hidden_size=16, latent_dim=16, obs_channels=8,
                                  decoder_ffn_dim=16, word_embed_dim=16, prior_hidden_size=16, obs_embed_dim=8,
                                  action_embed_dim=8, decoder_layers=1, decoder_heads=2)
    msvae_hf.MSVAEModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)


@pytest.fixture(params=["absolute output_dir in a repository", "relative output_dir"])
def fake_run(request, tmp_path: Path) -> Path:
    """A finished MS-VAE run at REPO/runs/bosslocal/msvae (REPO = tmp_path/msvae-hf) whose train_config.json and
    command.txt name absolute paths: demos REPO/data/bosslocal_100k (with stats.json), the init_* / pseudo_labels
    folders in REPO, one folder beside REPO and one of another machine (``FOREIGN``)."""
    repo = tmp_path / "msvae-hf"
    run = repo / "runs" / "bosslocal" / "msvae"
    demos = repo / "data" / "bosslocal_100k"
    demos.mkdir(parents=True)
    (demos / "stats.json").write_text(json.dumps({
        "level": TINY_LEVEL, "dataset_seed": 0, "splits": {"test": {"episodes": 16, "mean_steps": 9.5}},
        "command": shlex.join(["python", str(repo / "scripts" / "make_demos.py"), "--out", str(demos)])}))
    for name in ("best", "best_speaker"):
        _save_tiny_msvae(run / name)
    (run / "results.json").write_text(json.dumps({
        "model_type": "msvae", "level": TINY_LEVEL, "updates": 4, "best": {"step": 4},
        "test": {"success_rate": 0.25, "episodes": 4, "mean_steps": 10.0}, "paper_protocol_valid_sr": 0.5,
        "test_bleu": 12.5, "test_bleu_of_best": 11.0}))
    absolute_output_dir = request.param.startswith("absolute")
    if absolute_output_dir:
        (repo / "pyproject.toml").write_text("[project]\nname = 'msvae-hf'\n")
    config = {  # every path field set (push_run does not validate the combination)
        "model_type": "msvae", "demos": str(demos), "output_dir": str(run) if absolute_output_dir else
        "runs/bosslocal/msvae", "init_follower": str(repo / "runs/bosslocal/follower/best"),
        "init_speaker": str(repo / "runs/bosslocal/speaker/best"), "init_from": str(tmp_path / "elsewhere/model"),
        "pseudo_labels": str(repo / "data/pseudo_labels/bosslocal/msvae"), "continue_from": FOREIGN,
        "eval_episodes": 4, "bleu_examples": 8, "model": {"hidden_size": 16}}
    (run / "train_config.json").write_text(json.dumps(config, indent=2))
    lines = [shlex.join(["python", "scripts/train.py", "--model-type", "msvae", "--demos", str(demos),
                         "--output-dir", config["output_dir"], "--init-follower", config["init_follower"]]),
             shlex.join(["python", str(repo / "scripts/train.py"), "--config", str(repo / "configs/msvae.yaml"),
                         f"--continue-from={FOREIGN}", "--resume"])]
    (run / "command.txt").write_text("\n".join(lines) + "\n")
    return run


def _diverge(folder: Path, names: list[str]) -> None:
    """Make the tensors ``names`` of ``folder/model.safetensors`` NaN (the first) and inf (the others)."""
    weights = load_file(folder / "model.safetensors")
    for i, name in enumerate(names):
        weights[name] = torch.full_like(weights[name], float("nan") if i == 0 else float("inf"))
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def _absolute_paths(text: str) -> list[str]:
    """Words of ``text`` that start with the filesystem root (after a space, quote, `=`, `(` or `[`)."""
    return re.findall(r"(?:^|[\s\"'`=(\[])(" + re.escape(os.sep) + r"[\w.-][^\s\"'`]*)", text)


@pytest.mark.parametrize("folder", ["best", "best_speaker"])
@pytest.mark.parametrize("how", ["push_run", "script", "script --dry-run"])
def test_non_finite_weights_are_refused(fake_run, tmp_path, folder, how):
    """A diverged best/ or best_speaker/ is refused in one line naming the folder, the first non-finite tensor
    and how many: no call reaches the API and nothing is staged (the dry run's folder is not even made)."""
    names = sorted(load_file(fake_run / folder / "model.safetensors"))[3:5]
    _diverge(fake_run / folder, names)
    before = tree_digest(fake_run)
    api, stage = FakeHfApi(), tmp_path / "stage"
    if how == "push_run":
        with pytest.raises(ValueError) as raised:
            push_run(fake_run, "someone/x", api=api, staging_dir=stage)
        message = str(raised.value)
    else:
        argv = ["--run", str(fake_run), "--repo", "someone/x"] + (["--dry-run", str(stage)] if "dry" in how else [])
        with pytest.raises(SystemExit) as raised:
            load_script("push_to_hub").main(argv, api=api)
        message = str(raised.value.code)
    assert "\n" not in message and str(fake_run / folder) in message, message
    assert f"first {names[0]} " in message and "2 of " in message and "non-finite" in message, message
    assert api.calls == [] and not stage.exists()
    assert tree_digest(fake_run) == before


@pytest.mark.parametrize("dataset", [None, DATASET])
def test_uploaded_files_name_no_absolute_path(fake_run, tmp_path, dataset):
    """The uploaded card, train_config.json and command.txt name the run's paths relative to the folder it was
    trained from (``data/bosslocal_100k``), never an absolute path; ``dataset`` (a Hub id) is the card's
    model-index dataset and the pushed ``demos``."""
    api = FakeHfApi()
    argv = ["--run", str(fake_run), "--repo", "someone/msvae"] + (["--dataset", dataset] if dataset else [])
    assert load_script("push_to_hub").main(argv, api=api) is api.commits[-1]
    for name in ("README.md", "train_config.json", "command.txt", "results.json"):
        text = api.files[name].decode()
        assert str(tmp_path) not in text and _absolute_paths(text) == [], (name, _absolute_paths(text))
    config = json.loads(api.files["train_config.json"])
    assert config["demos"] == (dataset or "data/bosslocal_100k")
    assert config["output_dir"] == "runs/bosslocal/msvae"
    assert config["init_follower"] == "runs/bosslocal/follower/best"
    assert config["init_speaker"] == "runs/bosslocal/speaker/best"
    assert config["pseudo_labels"] == "data/pseudo_labels/bosslocal/msvae"
    assert config["init_from"] == "../elsewhere/model" and config["continue_from"] == "<local>/msvae_2000"
    # a file naming no follower field: the pushed one names the follower the weights hold (best/config.json)
    held = json.loads((fake_run / "best" / "config.json").read_text())
    assert config["model"] == {"hidden_size": 16, **{name: held[name] for name in FOLLOWER_FIELDS}}
    assert config["eval_episodes"] == 4
    assert api.files["command.txt"].decode() == (
        "python scripts/train.py --model-type msvae --demos data/bosslocal_100k --output-dir runs/bosslocal/msvae "
        "--init-follower runs/bosslocal/follower/best\n"
        "python scripts/train.py --config configs/msvae.yaml '--continue-from=<local>/msvae_2000' --resume\n")
    readme = api.files["README.md"].decode()
    card = ModelCard(readme)
    shown = dataset or "data/bosslocal_100k"
    hub = [dataset] if dataset else None  # a local folder names no Hub dataset in the metadata, only in the text
    assert card.data.datasets == hub
    bleu = [r.dataset_type for r in card.data.eval_results if r.metric_type == "bleu"]  # model-index
    assert bleu == ([dataset] if dataset else [r.dataset_name for r in card.data.eval_results][:1])
    assert f"Trained on `{shown}`" in readme
    assert "python scripts/make_demos.py --out data/bosslocal_100k" in readme
    assert "--demos data/bosslocal_100k --output-dir runs/bosslocal/msvae" in readme


def test_run_folder_is_unchanged(fake_run, tmp_path):
    """Pushing (and a dry run) rewrites only the staged copies: the run folder stays byte-identical, absolute
    paths and all, while the staged train_config.json and command.txt differ from it."""
    before = tree_digest(fake_run)
    stage = tmp_path / "stage"
    load_script("push_to_hub").main(["--run", str(fake_run), "--repo", "someone/x", "--dry-run", str(stage),
                                     "--dataset", DATASET])
    api = FakeHfApi()
    push_run(fake_run, "someone/x", api=api)
    assert tree_digest(fake_run) == before
    assert str(tmp_path) in (fake_run / "train_config.json").read_text()
    for name in ("train_config.json", "command.txt"):
        assert (stage / name).read_bytes() != (fake_run / name).read_bytes()
        assert api.files[name] != (fake_run / name).read_bytes()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (stage / name).read_bytes() == api.files[name] == (fake_run / "best" / name).read_bytes()


def test_dataset_must_be_a_hub_id(fake_run):
    """``--dataset`` names a Hub dataset (user/name): a local path is refused before anything is uploaded."""
    api = FakeHfApi()
    with pytest.raises(SystemExit, match="error: dataset .* is not a Hub dataset id"):
        load_script("push_to_hub").main(["--run", str(fake_run), "--repo", "someone/x", "--dataset",
                                         str(fake_run.parent / "data")], api=api)
    assert api.calls == []


@pytest.mark.parametrize("demos, made, from_hub, hub", [
    ("data/bosslocal_100k", "data/bosslocal_100k", None, False),  # the local folder, under the training folder
    ("data/bosslocal_100k", "data", None, False),  # its folder gone, data/ there: the loader read a local path
    ("someone/bosslocal-demos", None, None, True),  # a Hub id: no such folder where it trained
    ("data/bosslocal_100k", None, False, False),  # results.json says how the trainer read it
    ("someone/bosslocal-demos", None, False, False),
])
def test_a_card_names_a_hub_dataset_where_the_loader_read_one(fake_run: Path, demos: str, made: str | None,
                                                              from_hub: bool | None, hub: bool) -> None:
    """A run's ``demos`` as recorded (relative to the folder it trained from) is a Hub dataset in its card's
    metadata exactly where ``load_demos`` would have fetched one there (msvae_hf.hub.repo_ids.is_hub_repo_id), or as
    results.json records it (``demos_from_hub``); never by the pusher's working directory."""
    from msvae_hf.hub.cards import render_run_card

    root = fake_run.parents[2]  # the folder it trained from (the "msvae-hf" repository)
    shutil.rmtree(root / "data")
    if made:
        (root / made).mkdir(parents=True)
    config = json.loads((fake_run / "train_config.json").read_text())
    (fake_run / "train_config.json").write_text(json.dumps({**config, "demos": demos}))
    if from_hub is not None:
        results = json.loads((fake_run / "results.json").read_text())
        (fake_run / "results.json").write_text(json.dumps({**results, "demos_from_hub": from_hub}))
    card = render_run_card(fake_run, repo_id="someone/msvae")
    assert card.data.datasets == ([demos] if hub else None)
    bleu = [r.dataset_type for r in card.data.eval_results if r.metric_type == "bleu"]
    assert bleu == [demos if hub else TINY_LEVEL]
