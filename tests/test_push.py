"""push_to_hub: a finished run's best/ goes to the Hub with a model card (metrics, config, exact command),
through a fake HfApi that records the calls and the folder's contents at upload time."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import TINY_LEVEL, TINY_TRAIN, load_script, tiny_cli_args, tree_digest
from hub_helpers import FakeHfApi
from huggingface_hub import ModelCard

from msvae_hf.hub.cards import render_run_card
from msvae_hf.hub.push import push_run
from msvae_hf.models.configuration_msvae import FOLLOWER_FIELDS
from msvae_hf.training.train_config import load_config


@pytest.fixture(scope="module")
def msvae_run(tiny_demos, tmp_path_factory) -> tuple[Path, list[str]]:
    """A tiny MS-VAE run started through scripts/train.py (so command.txt is recorded) and its argv."""
    run = tmp_path_factory.mktemp("push") / "msvae"
    argv = ["--model-type", "msvae", "--demos", str(tiny_demos), "--output-dir", str(run)]
    for key in ("batch_size", "max_updates", "eval_every", "eval_episodes", "eval_batch_size", "bleu_examples",
                "test_episodes", "checkpoint_every", "threads"):
        argv += ["--" + key.replace("_", "-"), str(TINY_TRAIN[key])]
    argv += tiny_cli_args({"gamma": 1.0})
    load_script("train").main(argv)
    return run, argv


def test_push_run(msvae_run):
    run, argv = msvae_run
    before = tree_digest(run)
    api = FakeHfApi()
    assert load_script("push_to_hub").main(["--run", str(run), "--repo", "someone/msvae-tiny", "--private"],
                                           api=api) is api.commits[-1]
    assert api.names == ["create_repo", "upload_folder"]
    assert api.calls[0][1] == {"repo_id": "someone/msvae-tiny", "repo_type": "model", "private": True,
                               "exist_ok": True}
    assert api.calls[1][1]["repo_id"] == "someone/msvae-tiny" and "msvae" in api.calls[1][1]["commit_message"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "README.md",
                 "results.json", "train_config.json", "command.txt"):
        assert name in api.files, name
    assert api.files["model.safetensors"] == (run / "best" / "model.safetensors").read_bytes()
    results = json.loads((run / "results.json").read_text())
    readme = api.files["README.md"].decode()
    card = ModelCard(readme)
    assert card.data.metrics == ["success_rate", "bleu"] and "msvae" in card.data.tags
    assert {r.metric_type for r in card.data.eval_results} == {  # model-index metadata
        "success_rate", "bleu", "success_rate_other_mission", "reading", "success_rate_same_room", "spl"}
    demos = json.loads((run / "train_config.json").read_text())["demos"]
    assert card.data.datasets is None  # a local folder is no Hub dataset: the text names it, relative to where
    assert os.path.relpath(demos, run.parent) in str(card)  # the run was trained
    assert f"| success_rate | {results['test']['success_rate']:.4g} |" in readme
    # the card's BLEU is the pushed weights' (best/); the run's best_speaker/ BLEU is listed beside it
    assert f"| bleu | {results['test_bleu_of_best']:.4g} |" in readme
    assert f"best_speaker/ checkpoint (best by validation BLEU) | {results['test_bleu']:.4g} |" in readme
    assert f"{TINY_TRAIN['test_episodes']} greedy episodes of BabyAI-BossLocal-v0" in readme
    assert f"| paper-protocol valid SR (max of 5-eval moving average) | {results['paper_protocol_valid_sr']:.4g}" \
        in readme
    command = (run / "command.txt").read_text().strip()
    assert command.startswith("python scripts/train.py --model-type msvae") and " ".join(argv[-4:]) in command
    shown = command.replace(demos, os.path.relpath(demos, run.parent)).replace(str(run), run.name)
    assert f"```bash\n{shown}\n```" in readme and str(run) not in readme
    assert '"swd_projections": 8' in readme and '"max_updates": 4' in readme  # training + model config
    assert "## Demonstrations" in readme and "| unpaired | 80 |" in readme
    assert tree_digest(run) == before  # the run directory is untouched (no README.md written into best/)


def test_dry_run_and_fallback_command(msvae_run, tmp_path):
    run = tmp_path / "old_run"
    shutil.copytree(msvae_run[0], run)
    (run / "command.txt").unlink()  # a run trained before command.txt existed
    stage = tmp_path / "stage"
    load_script("push_to_hub").main(["--run", str(run), "--repo", "someone/x", "--dry-run", str(stage),
                                     "--dataset", "someone/bosslocal-demos"])
    readme = (stage / "README.md").read_text()
    assert "python scripts/train.py --config train_config.json" in readme and (stage / "train_config.json").exists()
    assert ModelCard(readme).data.datasets == ["someone/bosslocal-demos"]
    assert (stage / "model.safetensors").is_file()


@pytest.mark.parametrize("held", [None, {"follower_conditioning": "head", "previous_action_input": True},
                                  {"follower_conditioning": "film", "previous_action_input": False}],
                         ids=["default", "head", "film-one-map"])
def test_fallback_config_builds_the_follower_the_weights_hold(msvae_run, tmp_path, held):
    """A run whose train_config.json names no follower field (saved before it did; no command.txt) is pushed with
    a train_config.json naming the follower its weights hold (best/config.json, a config.json without film_layers
    read as one map, one without any follower field as the head follower): the card's ``--config
    train_config.json`` builds that one, not the default."""
    run = tmp_path / "old_run"
    shutil.copytree(msvae_run[0], run)
    (run / "command.txt").unlink()
    config = json.loads((run / "train_config.json").read_text())
    for name in FOLLOWER_FIELDS:
        config["model"].pop(name, None)
    (run / "train_config.json").write_text(json.dumps(config))
    model_config = json.loads((run / "best" / "config.json").read_text())
    if held is not None:
        for name in FOLLOWER_FIELDS:
            model_config.pop(name, None)
        if held["follower_conditioning"] != "head":
            model_config.update(held)
        (run / "best" / "config.json").write_text(json.dumps(model_config))
    stage = tmp_path / "stage"
    load_script("push_to_hub").main(["--run", str(run), "--repo", "someone/x", "--dry-run", str(stage)])
    pushed = load_config(str(stage / "train_config.json")).model
    if held is None:  # the run's own: FiLM on both maps, no a_{t-1}
        held = {name: model_config[name] for name in FOLLOWER_FIELDS}
        assert held == {"follower_conditioning": "film", "previous_action_input": False, "film_layers": 2}
    elif held["follower_conditioning"] == "film":
        held = {**held, "film_layers": 1}
    assert {name: pushed[name] for name in FOLLOWER_FIELDS if name in pushed} == held


@pytest.mark.parametrize("kind", ["follower", "speaker", "msvae"])
def test_card_metrics_are_model_index_metadata(kind, baseline_runs, msvae_run):
    """The card's metadata parses back (huggingface_hub) to one EvalResult per metric of the pushed weights,
    with results.json's value and its protocol: SR for followers, BLEU for speakers, both for MS-VAE."""
    run = msvae_run[0] if kind == "msvae" else baseline_runs[kind]
    results = json.loads((run / "results.json").read_text())
    demos = json.loads((run / "train_config.json").read_text())["demos"]
    card = ModelCard(str(render_run_card(run, "someone/tiny")))
    found = {(r.metric_type, r.dataset_split): r for r in card.data.eval_results}
    expected = {}
    if kind != "speaker":
        expected[("success_rate", "test")] = results["test"]["success_rate"]
        expected[("success_rate", "validation")] = results["paper_protocol_valid_sr"]
        for key in ("success_rate_other_mission", "reading", "success_rate_same_room", "spl"):  # whether it reads
            expected[(key, "test")] = results["test"][key]
    if kind != "follower":
        expected[("bleu", "test")] = results.get("test_bleu_of_best", results["test_bleu"])  # best/'s BLEU
    assert {key: r.metric_value for key, r in found.items()} == expected
    assert card.data.model_name == "tiny"
    chosen_by = "validation BLEU" if kind == "speaker" else "validation SR"
    for (metric, _), result in found.items():
        if metric != "bleu":
            assert result.task_type == "reinforcement-learning"
            assert result.dataset_type == result.dataset_name == TINY_LEVEL
        else:
            # a local demos folder names no Hub dataset: the level stands for it (the card's text names the folder)
            assert result.task_type == "text-generation" and result.dataset_type == TINY_LEVEL
            assert os.path.relpath(demos, run.parent) in str(card)
            assert result.dataset_name == f"{TINY_LEVEL} bot demonstrations"
            assert result.metric_name == f"test BLEU-4 (sacrebleu corpus BLEU), greedy decoding, " \
                f"{TINY_TRAIN['bleu_examples']} pairs of the test split, best checkpoint by {chosen_by}"
    if kind != "speaker":
        test_sr = found[("success_rate", "test")].metric_name
        assert test_sr == f"test success rate, {TINY_TRAIN['test_episodes']} greedy episodes of {TINY_LEVEL}, " \
            f"seeds 1000000000..{10**9 + TINY_TRAIN['test_episodes'] - 1}, best checkpoint by validation SR"
        valid_sr = found[("success_rate", "validation")].metric_name
        assert "5-evaluation moving average (App. D)" in valid_sr and "seeds from 1500000000" in valid_sr
        assert found[("success_rate_same_room", "test")].metric_name == (
            f"success rate told, and judged by, another mission of the same room; {test_sr}")


def test_speaker_follower_kind(baseline_runs, tmp_path):
    run = tmp_path / "sf"
    shutil.copytree(baseline_runs["follower"], run)
    config = json.loads((run / "train_config.json").read_text())
    (run / "train_config.json").write_text(json.dumps({**config, "pseudo_labels": "data/pseudo"}))
    card = render_run_card(run, "someone/sf")
    assert "speaker-follower" in card.data.tags and card.data.metrics == ["success_rate"]
    assert "| bleu |" not in str(card)


@pytest.mark.parametrize("missing", ["best", "results.json", "run"])
def test_incomplete_run_uploads_nothing(msvae_run, tmp_path, missing, capsys):
    run = tmp_path / "run"
    if missing != "run":
        shutil.copytree(msvae_run[0], run)
        target = run / missing
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    api = FakeHfApi()
    with pytest.raises(FileNotFoundError, match=missing if missing != "run" else "no run directory"):
        push_run(run, "someone/x", api=api)
    assert api.calls == []
    with pytest.raises(SystemExit, match="error: "):
        load_script("push_to_hub").main(["--run", str(run), "--repo", "someone/x"], api=api)
    assert api.calls == []


def test_model_push_to_hub_uploads_weights_tokenizer_and_card() -> None:
    """`model.push_to_hub` (HF-native call) uploads config, safetensors, tokenizer and our rendered card."""
    import msvae_hf

    tok = msvae_hf.MSVAETokenizer.from_grammar()
    model = msvae_hf.FollowerModel(msvae_hf.FollowerConfig(vocab_size=len(tok), hidden_size=32, latent_dim=32,
                                                          obs_channels=8, decoder_ffn_dim=32))
    model.tokenizer = tok
    api = FakeHfApi()
    model.push_to_hub("user/follower", metrics={"success_rate": 0.5}, training_command="python scripts/train.py x",
                      dataset="user/demos", api=api)
    assert api.names == ["create_repo", "upload_folder"]
    assert api.calls[1][1]["repo_id"] == "user/follower"
    uploaded = api.top_level_text()
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(uploaded)
    assert "python scripts/train.py x" in uploaded["README.md"] and "0.5" in uploaded["README.md"]
