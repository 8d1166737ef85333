"""training: end-to-end runs of every model type, MS-VAE from baselines, 2-process data parallelism,
kill-and-resume bit-identity, deterministic evaluation, bf16, clear errors that overwrite nothing, curves."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TINY_MODEL, TINY_TRAIN, tiny_cli_args, train_tiny
from datasets import DatasetDict
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

from msvae_hf.data.sampler import StepSampler
from msvae_hf.models.configuration_msvae import FollowerConfig, MSVAEConfig
from msvae_hf.models.modeling_baselines import FollowerModel, SpeakerModel
from msvae_hf.models.modeling_msvae import MSVAEModel
from msvae_hf.training.train_config import load_config
from msvae_hf.utils.run_folder import checkpoint_dirs
from msvae_hf.utils.runtime import adam, add_threads_flag, set_threads

REPO = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO / "scripts" / "train.py"
MODEL_CLASSES = {"follower": FollowerModel, "speaker": SpeakerModel, "msvae": MSVAEModel}


def tb_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """Every TensorBoard scalar of a run: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(run_dir.glob("tb/**/events.out.tfevents.*"), key=lambda p: p.stat().st_mtime):
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            scalars.setdefault(tag, {}).update({int(e.step): float(e.value) for e in acc.Scalars(tag)})
    return scalars


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha1 of every file under ``root`` (empty if it does not exist)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def check_run(run_dir: Path, model_type: str) -> dict[str, Any]:
    """The files every finished run must hold; returns results.json."""
    results = json.loads((run_dir / "results.json").read_text())
    assert results["model_type"] == model_type and results["updates"] == TINY_TRAIN["max_updates"]
    assert [h["step"] for h in results["history"]] == [2, 4]
    if model_type != "speaker":  # validate_reading false: validation on the own missions, the test on all three
        assert all("valid/success_rate" in h and "valid/success_rate_other_mission" not in h
                   and "valid/success_rate_same_room" not in h for h in results["history"])
        assert {"success_rate_other_mission", "success_rate_same_room"} <= set(results["test"])
    best = run_dir / "best"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (best / name).is_file(), name
    model = AutoModel.from_pretrained(best)
    assert type(model) is MODEL_CLASSES[model_type]
    assert model.config.hidden_size == TINY_MODEL["hidden_size"]
    tokenizer = AutoTokenizer.from_pretrained(best)
    assert tokenizer.decode(tokenizer("go to the red ball")["input_ids"], skip_special_tokens=True) == \
        "go to the red ball"
    assert list((run_dir / "tb").rglob("events.out.tfevents.*"))
    # keep_checkpoints=1 with a checkpoint every 2 of 4 updates: only the last survives, no temporaries
    assert [p.name for p in checkpoint_dirs(run_dir)] == ["step-0000004"]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-0000004"]
    saved = json.loads((run_dir / "train_config.json").read_text())
    assert saved["model_type"] == model_type and saved["model"]["hidden_size"] == TINY_MODEL["hidden_size"]
    return results


# ---------------------------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("model_type", ["follower", "speaker"])
def test_baseline_runs(baseline_runs, model_type):
    results = check_run(baseline_runs[model_type], model_type)
    if model_type == "follower":
        assert results["test"]["episodes"] == TINY_TRAIN["test_episodes"]
        assert 0 <= results["test"]["success_rate"] <= 1 and "paper_protocol_valid_sr" in results
        assert "test_bleu" not in results
    else:
        assert 0 <= results["test_bleu"] <= 100 and len(results["test_examples"]) == 5
        assert "test" not in results and all("valid/bleu" in h for h in results["history"])
        assert results["best"]["score"] == max(h["valid/bleu"] for h in results["history"])
    scalars = tb_scalars(baseline_runs[model_type])
    assert sorted(scalars["train/loss"]) == [1, 2, 3, 4]


def test_speaker_chosen_on_its_labels_replayed(tiny_demos, tmp_path):
    """speaker_metric demonstrated: every validation logs BLEU and the labels' replays, best/ holds the first
    checkpoint with the most valid trajectories that demonstrate their label, and those labels, spoken again by
    best/ and replayed one by one through the level's verifier and bot, give that share."""
    import gymnasium as gym
    from datasets import load_from_disk

    from msvae_hf.envs.missions import carries_out, demonstrates
    from msvae_hf.evaluation.evaluate import describe_dataset
    from msvae_hf.hub.cards import render_run_card

    run = tmp_path / "speaker"
    results = train_tiny("speaker", run, tiny_demos, speaker_metric="demonstrated", max_updates=6, bleu_examples=6)
    history = results["history"]
    assert all(0 <= h["valid/demonstrated"] <= h["valid/carried_out"] <= 1 and "valid/bleu" in h for h in history)
    best = max(h["valid/demonstrated"] for h in history)
    assert results["best"] == {"step": next(h["step"] for h in history if h["valid/demonstrated"] == best),
                               "score": best}
    valid = load_from_disk(str(tiny_demos))["valid"].select(range(6))
    labels = describe_dataset(AutoModel.from_pretrained(run / "best"), valid)
    env = gym.make(valid[0]["level"])
    rows = list(zip(valid["seed"], valid["actions"], labels, strict=True))
    assert sum(demonstrates(env, *row) for row in rows) / 6 == best
    carried = [h["valid/carried_out"] for h in history if h["step"] == results["best"]["step"]]
    assert carried == [sum(carries_out(env, *row) for row in rows) / 6]
    card = str(render_run_card(run, "someone/tiny"))  # the card names what chose the pushed weights
    assert "best checkpoint by the share of validation trajectories that demonstrate their label" in card


def test_follower_chosen_on_its_reading(tiny_demos, tmp_path):
    """follower_metric reading, end to end: every validation logs SR, SR told another mission and their difference,
    the record's best is the first validation with the most reading, best/ loads and gives that reading again on the
    validation seeds, the test reports reading, and the card names what chose the weights (which checkpoint the
    metric keeps: test_keep_best_by_the_follower_metric, where SR and reading choose apart)."""
    from msvae_hf.envs.seeds import VALID_SEED_START
    from msvae_hf.evaluation.evaluate import evaluate_follower
    from msvae_hf.hub.cards import render_run_card

    run = tmp_path / "follower"
    results = train_tiny("follower", run, tiny_demos, follower_metric="reading", validate_reading=True,
                         max_updates=6, eval_every=1, eval_episodes=8, eval_batch_size=8, learning_rate=1e-2)
    history = results["history"]
    assert all(h["valid/reading"] == h["valid/success_rate"] - h["valid/success_rate_other_mission"]
               for h in history)
    best = max(h["valid/reading"] for h in history)
    assert results["best"] == {"step": next(h["step"] for h in history if h["valid/reading"] == best), "score": best}
    summary, _ = evaluate_follower(AutoModel.from_pretrained(run / "best"), results["level"], 8, VALID_SEED_START, 8)
    assert summary["reading"] == best
    assert results["test"]["reading"] == results["test"]["success_rate"] - results["test"]["success_rate_other_mission"]
    card = str(render_run_card(run, "someone/tiny"))  # the card names what chose the pushed weights
    assert "best checkpoint by validation SR by reading (SR minus SR told another episode's mission)" in card


def test_both_choices_from_one_training(tiny_demos, tmp_path):
    """also_select reading beside follower_metric sr: the run trains and validates as the run chosen on reading
    does, its best/ is the first validation with the most SR, its best_reading/ holds the very weights of the
    reading-chosen run's best/, and also_selected's test is that run's test; the card names both."""
    from msvae_hf.hub.cards import render_run_card

    flags = {"validate_reading": True, "max_updates": 6, "eval_every": 1, "eval_episodes": 8, "eval_batch_size": 8,
             "learning_rate": 1e-2}
    both = train_tiny("follower", tmp_path / "both", tiny_demos, also_select="reading", **flags)
    by_reading = train_tiny("follower", tmp_path / "reading", tiny_demos, follower_metric="reading", **flags)
    history = both["history"]
    assert history == by_reading["history"]
    most = max(h["valid/success_rate"] for h in history)
    assert both["best"] == {"step": next(h["step"] for h in history if h["valid/success_rate"] == most),
                            "score": most}
    also = both["also_selected"]
    assert (also["metric"], also["folder"], also["best"]) == ("reading", "best_reading", by_reading["best"])
    weights = [load_file(run / "model.safetensors") for run in (tmp_path / "both/best_reading",
                                                                tmp_path / "reading/best")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert also["test"] == by_reading["test"]
    card = str(render_run_card(tmp_path / "both", "someone/tiny"))  # the card describes best/, and names the other
    assert "best checkpoint by validation SR" in card
    assert (f"test success_rate of the run's best_reading/ checkpoint (best by validation SR by reading (SR minus SR "
            f"told another episode's mission), update {also['best']['step']})") in card


def test_the_also_selected_checkpoint_is_tested_on_its_own_where_it_differs(tiny_demos, tmp_path, monkeypatch):
    """Validations scripted so that SR chooses update 2 and reading update 3: best/ and best_reading/ hold different
    weights, and also_selected's test is best_reading/'s own on the test seeds best/ took; a run continued from it
    to worse validations keeps both choices, best_reading/'s weights the same."""
    from msvae_hf.envs.seeds import TEST_SEED_START
    from msvae_hf.evaluation.evaluate import evaluate_follower

    # update: (SR, SR told another mission)
    scripted = {1: (0.6, 0.5), 2: (0.8, 0.75), 3: (0.7, 0.55), 4: (0.7, 0.6), 5: (0.5, 0.45), 6: (0.5, 0.45)}
    calls = iter(sorted(scripted))

    def validate(*args: Any) -> dict[str, float]:
        sr, other = scripted[next(calls)]
        return {"valid/success_rate": sr, "valid/success_rate_other_mission": other, "valid/reading": sr - other}

    monkeypatch.setattr("msvae_hf.training.loop.validate", validate)
    run = tmp_path / "follower"
    results = train_tiny("follower", run, tiny_demos, also_select="reading", validate_reading=True, max_updates=4,
                         eval_every=1)
    also = results["also_selected"]
    assert results["best"] == {"step": 2, "score": 0.8} and also["best"] == {"step": 3, "score": 0.7 - 0.55}
    weights = [load_file(run / folder / "model.safetensors") for folder in ("best", "best_reading")]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    summary, _ = evaluate_follower(AutoModel.from_pretrained(run / "best_reading"), results["level"],
                                   TINY_TRAIN["test_episodes"], TEST_SEED_START, TINY_TRAIN["eval_batch_size"])
    assert also["test"] == summary
    more = train_tiny("follower", tmp_path / "more", tiny_demos, also_select="reading", validate_reading=True,
                      max_updates=6, eval_every=1, continue_from=str(run))
    assert (more["best"], more["also_selected"]["best"]) == (results["best"], also["best"])
    kept = load_file(tmp_path / "more" / "best_reading" / "model.safetensors")
    assert all(torch.equal(kept[k], weights[1][k]) for k in weights[1])


class _StepModel:
    """Stands in for a model in :func:`keep_best`: ``save_pretrained`` writes the step it was trained to."""

    def __init__(self, step: int) -> None:
        self.step = step

    def save_pretrained(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "step.txt").write_text(str(self.step))


@pytest.mark.parametrize(("model_type", "follower_metric", "chosen"),
                         [("follower", "sr", 2), ("follower", "reading", 3), ("msvae", "reading", 3)])
def test_keep_best_by_the_follower_metric(tmp_path, model_type, follower_metric, chosen):
    """best/ keeps the first validation with the most SR (sr) or the most SR minus SR told another mission
    (reading), and best_<other>/ the other's choice (also_select); MS-VAE's best_speaker/ is chosen by BLEU
    either way."""
    from msvae_hf.utils.run_folder import keep_best, selections

    also = "sr" if follower_metric == "reading" else "reading"
    chosen_by = selections(model_type, "bleu", follower_metric, also_select=also)
    state: dict[str, Any] = {"history": [], "best": None, "best_speaker": None}
    validations = [(0.6, 0.5, 20.0), (0.8, 0.75, 30.0), (0.7, 0.55, 25.0), (0.7, 0.55, 10.0)]  # SR, other, BLEU
    for step, (sr, other, bleu) in enumerate(validations, start=1):
        metrics = {"valid/success_rate": sr, "valid/success_rate_other_mission": other, "valid/reading": sr - other}
        if model_type == "msvae":
            metrics["valid/bleu"] = bleu
        keep_best(state, metrics, step, _StepModel(step), str(tmp_path), chosen_by)
    assert state["best"]["step"] == chosen and (tmp_path / "best" / "step.txt").read_text() == str(chosen)
    assert state[f"best_{also}"]["step"] == 5 - chosen  # SR chooses update 2, reading update 3
    assert (tmp_path / f"best_{also}" / "step.txt").read_text() == str(5 - chosen)
    if model_type == "msvae":
        assert state["best_speaker"]["step"] == 2 and (tmp_path / "best_speaker" / "step.txt").read_text() == "2"


def test_msvae_with_unpaired_from_baselines(baseline_runs, tiny_demos, tmp_path):
    run = tmp_path / "msvae"
    trained = {}  # each baseline's best/ beside a record of another commit and machine than this run's
    for role in ("follower", "speaker"):
        shutil.copytree(baseline_runs[role] / "best", tmp_path / role / "best")
        trained[role] = {"commit": f"{role[0]}" * 40, "machine": {"cpu": f"the {role}'s CPU", "cpus": 64}}
        (tmp_path / role / "results.json").write_text(json.dumps(trained[role]))
    follower, speaker = (tmp_path / role / "best" for role in ("follower", "speaker"))
    train_tiny("msvae", run, tiny_demos, init_follower=str(follower), init_speaker=str(speaker),
               unpaired_batch_size=4, model={"gamma": 1.0})
    results = check_run(run, "msvae")
    assert "test_bleu" in results and results["test"]["episodes"] == TINY_TRAIN["test_episodes"]
    # one checkpoint per role: best/ by validation SR (follower), best_speaker/ by validation BLEU (speaker)
    assert results["best"]["score"] == max(h["valid/success_rate"] for h in results["history"])
    assert results["best_speaker"]["score"] == max(h["valid/bleu"] for h in results["history"])
    assert (run / "best_speaker" / "model.safetensors").is_file() and "test_bleu_of_best" in results
    if results["best_speaker"]["step"] == results["best"]["step"]:
        assert results["test_bleu"] == results["test_bleu_of_best"]
    scalars = tb_scalars(run)
    assert {"train/v", "train/a_1_unpaired", "train/domain_distance"} <= set(scalars)  # the unpaired batch ran
    assert all(math.isfinite(v) for v in scalars["train/loss"].values())
    # MS-VAE started from the baselines: its speaker side's config came from them
    assert AutoModel.from_pretrained(run / "best").config.hidden_size == TINY_MODEL["hidden_size"]
    # and its record names them: the weights by hash, the run that trained them by its record's commit and machine
    assert results["initialised_from"] == {role: {
        "path": str(folder), "sha256": hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest(),
        **trained[role]} for role, folder in (("follower", follower), ("speaker", speaker))}
    assert "initialised_from" not in json.loads((baseline_runs["follower"] / "results.json").read_text())  # afresh


def test_weights_source_names_a_folder_without_a_record_and_a_hub_ids_cached_revision(baseline_runs, tmp_path,
                                                                                        monkeypatch):
    """A saved model with no results.json beside it is named by path and hash; a Hub id by the revision and hash
    of the snapshot in the local Hub cache; a Hub id not in the cache by its path alone."""
    import huggingface_hub

    from msvae_hf.utils.run_folder import weights_source

    best = baseline_runs["follower"] / "best"
    digest = hashlib.sha256((best / "model.safetensors").read_bytes()).hexdigest()
    shutil.copytree(best, tmp_path / "loose")
    assert weights_source(str(tmp_path / "loose")) == {"path": str(tmp_path / "loose"), "sha256": digest}
    repo = tmp_path / "hub" / "models--someone--follower"
    shutil.copytree(best, repo / "snapshots" / ("c" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert weights_source("someone/follower") == {"path": "someone/follower", "revision": "c" * 40, "sha256": digest}
    assert weights_source("someone/absent") == {"path": "someone/absent"}


def test_domain_distance_alone_draws_the_unpaired_batch(tiny_demos, tmp_path):
    """gamma = 0 with alpha > 0 (D' without V) still draws an unpaired batch, and the loss holds alpha D'."""
    run = tmp_path / "msvae_d_only"
    alpha = 2.0
    train_tiny("msvae", run, tiny_demos, unpaired_batch_size=4, model={"gamma": 0.0, "alpha": alpha})
    scalars = tb_scalars(run)
    assert "train/domain_distance" in scalars
    for step, loss in scalars["train/loss"].items():
        d, j_bar = scalars["train/domain_distance"][step], scalars["train/j_bar"][step]
        assert d > 0
        assert loss == pytest.approx(-j_bar + alpha * d, rel=1e-5, abs=1e-5)


def test_msvae_init_copies_baseline_weights(baseline_runs, tiny_demos):
    from msvae_hf.models.tokenization_msvae import MSVAETokenizer
    from msvae_hf.training.loop import build_model

    follower, speaker = (baseline_runs[k] / "best" for k in ("follower", "speaker"))
    cfg = load_config(None, {"model_type": "msvae", "demos": str(tiny_demos), "init_follower": str(follower),
                             "init_speaker": str(speaker)})
    model = build_model(cfg, MSVAETokenizer.from_grammar())
    f, s = FollowerModel.from_pretrained(follower), SpeakerModel.from_pretrained(speaker)
    for name, source in (("instruction_encoder", f), ("action_decoder", f), ("trajectory_encoder", s),
                         ("instruction_decoder", s)):
        for key, value in getattr(source, name).state_dict().items():
            assert torch.equal(getattr(model, name).state_dict()[key], value), f"{name}.{key}"


def test_init_from_a_saved_model(baseline_runs, tiny_demos, tmp_path):
    """init_from starts from another run's saved weights, with `model` overrides on its config; a saved
    model of another type, a folder without one, or init_from next to init_follower are errors."""
    from msvae_hf.models.tokenization_msvae import MSVAETokenizer
    from msvae_hf.training.loop import build_model

    tokenizer = MSVAETokenizer.from_grammar()
    follower = baseline_runs["follower"] / "best"
    cfg = load_config(None, {"model_type": "msvae", "demos": str(tiny_demos), "init_follower": str(follower),
                             **{f"model.{k}": v for k, v in TINY_MODEL.items()}})
    source = build_model(cfg, tokenizer)
    source.save_pretrained(tmp_path / "saved")
    cfg = load_config(None, {"model_type": "msvae", "demos": str(tiny_demos), "init_from": str(tmp_path / "saved"),
                             "model.gamma": 0.0, "model.alpha": 0.0})
    model = build_model(cfg, tokenizer)
    assert (model.config.gamma, model.config.alpha) == (0.0, 0.0) and source.config.gamma == 100.0
    assert model.config.hidden_size == TINY_MODEL["hidden_size"]  # the saved config, not the defaults
    saved = source.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())

    with pytest.raises(ValueError, match="holds a 'msvae_follower' model, not 'msvae'"):
        build_model(load_config(None, {"model_type": "msvae", "init_from": str(follower)}), tokenizer)
    # weights saved with a FiLM on one map train under a command that names it, not the default's two maps
    tiny = {k: v for k, v in TINY_MODEL.items() if k in FollowerConfig.__dataclass_fields__}
    one_map = FollowerModel(FollowerConfig(**tiny, vocab_size=len(tokenizer), film_layers=1))
    one_map.save_pretrained(tmp_path / "one_map")
    follower_cfg = {"model_type": "follower", "init_from": str(tmp_path / "one_map")}
    with pytest.raises(ValueError, match=r"film_layers=1, where this run names film_layers=2: name its follower "
                                         r"\(--model.film_layers 1\)"):
        build_model(load_config(None, follower_cfg), tokenizer)
    assert build_model(load_config(None, {**follower_cfg, "model.film_layers": 1}), tokenizer).config.film_layers == 1
    with pytest.raises(FileNotFoundError, match="no saved model"):
        build_model(load_config(None, {"model_type": "msvae", "init_from": str(tmp_path / "nope")}), tokenizer)
    with pytest.raises(ValueError, match="leave init_follower"):
        load_config(None, {"model_type": "msvae", "init_from": str(follower), "init_follower": str(follower)})


# ---------------------------------------------------------------------------------------------- 2 processes
def _two_process_worker(demos: str, run_dir: str) -> None:
    """One rank of a 2-process run: train, then save this rank's final parameters to rank{r}.safetensors."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # the forked child inherits the parent's state
    captured: dict[str, torch.Tensor] = {}
    prepared: list[Any] = []
    end_training, prepare = Accelerator.end_training, Accelerator.prepare

    def record(self: Accelerator, *args: Any, **kwargs: Any) -> Any:
        result = prepare(self, *args, **kwargs)
        prepared.append(result[0])
        return result

    def capture(self: Accelerator) -> None:
        assert isinstance(prepared[0], torch.nn.parallel.DistributedDataParallel), type(prepared[0])
        model = self.unwrap_model(prepared[0])
        captured.update({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()})
        end_training(self)

    Accelerator.end_training, Accelerator.prepare = capture, record
    try:
        train_tiny("msvae", run_dir, demos, batch_size=4, max_updates=3, eval_every=3, checkpoint_every=3,
                   eval_episodes=2, test_episodes=2, model={"gamma": 1.0})
        rank = AcceleratorState().process_index
        world = AcceleratorState().num_processes
        assert world == 2, world
        save_file(captured, os.path.join(run_dir, f"rank{rank}.safetensors"))
    finally:
        Accelerator.end_training, Accelerator.prepare = end_training, prepare
        AcceleratorState._reset_state(reset_partial_state=True)


def test_two_processes_keep_parameters_identical(tiny_demos, tmp_path):
    from accelerate import debug_launcher
    from accelerate.state import AcceleratorState

    run = tmp_path / "ddp"
    debug_launcher(_two_process_worker, args=(str(tiny_demos), str(run)), num_processes=2)
    AcceleratorState._reset_state(reset_partial_state=True)
    rank0, rank1 = load_file(run / "rank0.safetensors"), load_file(run / "rank1.safetensors")
    assert rank0.keys() == rank1.keys() and rank0
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    saved = load_file(run / "checkpoints" / "step-0000003" / "model.safetensors")
    assert all(torch.equal(saved[k], rank0[k]) for k in saved)
    results = json.loads((run / "results.json").read_text())
    assert results["updates"] == 3


def test_data_shards_across_processes(tiny_demos):
    from msvae_hf.data.demos import load_demos

    paired = load_demos(tiny_demos)["paired"]
    one = StepSampler(paired, 8, 1, seed=3, stream=0)
    two = StepSampler(paired, 4, 2, seed=3, stream=0)
    for step in range(6):
        ranks = [two.indices(step, r) for r in (0, 1)]
        assert not set(ranks[0]) & set(ranks[1])
        assert two.indices(step, 0).tolist() == two.indices(step, 0).tolist()  # pure function of the step
    assert one.per_epoch == two.per_epoch == 5


# ---------------------------------------------------------------------------------------------- resume
def train_command(demos: Path, out: Path, *extra: str) -> list[str]:
    """``python scripts/train.py`` for 8 tiny MS-VAE updates with a checkpoint every 2."""
    return [sys.executable, str(TRAIN_SCRIPT), "--model-type", "msvae", "--demos", str(demos), "--output-dir",
            str(out), "--max-updates", "8", "--checkpoint-every", "2", "--keep-checkpoints", "10",
            "--batch-size", "8", "--unpaired-batch-size", "4", "--eval-every", "4", "--eval-episodes", "4",
            "--eval-batch-size", "4", "--bleu-examples", "4", "--test-episodes", "2", "--log-every", "1",
            "--threads", "1", "--seed", "7", *tiny_cli_args({"gamma": 1.0, "dropout": 0.1}), *extra]


def flat_gru(seed: int) -> tuple[torch.nn.GRU, torch.Tensor]:
    """A GRU whose weights are views into one flat buffer, as cuDNN keeps them on a GPU."""
    torch.manual_seed(seed)
    gru = torch.nn.GRU(3, 4)
    flat = torch.zeros(sum(p.numel() for p in gru.parameters()))
    offset = 0
    for param in gru.parameters():  # what flatten_parameters() does on CUDA
        flat[offset:offset + param.numel()] = param.detach().flatten()
        param.data = flat[offset:offset + param.numel()].view_as(param)
        offset += param.numel()
    return gru, flat


def test_checkpoint_keeps_flat_rnn_weights(tmp_path):
    """accelerate's safetensors writer drops views of one buffer ("Removed shared tensor"); the pre-save hook
    ``own_storage`` gives each its own storage, so the checkpoint holds every weight."""
    from accelerate.utils import save

    from msvae_hf.utils.run_folder import own_storage

    gru, _ = flat_gru(0)
    save(gru.state_dict(), tmp_path / "dropped.safetensors", safe_serialization=True)
    assert set(load_file(tmp_path / "dropped.safetensors")) < set(gru.state_dict())  # what goes wrong without it
    weights = [gru.state_dict()]
    own_storage([gru], weights, str(tmp_path))
    save(weights[0], tmp_path / "model.safetensors", safe_serialization=True)
    saved = load_file(tmp_path / "model.safetensors")
    assert saved.keys() == gru.state_dict().keys()
    assert all(torch.equal(saved[k], v) for k, v in gru.state_dict().items())


def test_accelerate_checkpoint_round_trip_with_flat_rnn_weights(tmp_path):
    """accelerate's own save_state / load_state with the hooks train() registers: a GRU whose weights are
    views of one buffer (as on a GPU) is saved whole and loaded back exactly, in place."""
    from accelerate import Accelerator

    from msvae_hf.utils.run_folder import register_checkpoint_hooks

    gru, _ = flat_gru(0)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(gru)
    register_checkpoint_hooks(accelerator)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    accelerator.save_state(str(tmp_path / "ckpt"))
    assert load_file(tmp_path / "ckpt" / "model.safetensors").keys() == expected.keys()  # nothing dropped
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    accelerator.load_state(str(tmp_path / "ckpt"))
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())


def test_checkpoint_weights_load_into_flat_rnn_buffers(tmp_path):
    """On a GPU, cuDNN keeps a GRU's weights as views into one flat buffer, which safetensors' ``load_model``
    (accelerate's default) refuses; the pre-load hook ``load_model_weights`` loads them exactly."""
    import safetensors.torch

    from msvae_hf.utils.run_folder import load_model_weights

    torch.manual_seed(0)
    source = torch.nn.GRU(3, 4)
    save_file(source.state_dict(), tmp_path / "model.safetensors")
    target, flat = flat_gru(1)
    with pytest.raises(RuntimeError, match="covering the entire storage"):
        safetensors.torch.load_model(target, tmp_path / "model.safetensors")
    models = [target]
    load_model_weights(models, str(tmp_path))
    assert models == []  # accelerate will not load it a second time
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))
    assert target.weight_ih_l0.data_ptr() == flat.data_ptr()  # loaded in place, still one buffer


@pytest.fixture(scope="module")
def finished_runs(tiny_demos, tmp_path_factory):
    """``finished_runs(updates)``: (the demonstrations, a finished run of ``updates`` tiny updates), trained once for
    the module: the tests that read it only check that it is left as it was."""
    runs: dict[str, Path] = {}

    def get(updates: str) -> tuple[Path, Path]:
        if updates not in runs:
            run = tmp_path_factory.mktemp("finished") / "short"
            subprocess.run(train_command(tiny_demos, run, "--max-updates", updates), check=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}, capture_output=True,
                           timeout=300)
            runs[updates] = run  # kept once finished: a failed run fails the test that asked, not the later ones
        return tiny_demos, runs[updates]

    return get


def test_kill_and_resume_is_bit_identical(finished_runs, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    tiny_demos, full = finished_runs("8")
    broken = tmp_path / "broken"

    proc = subprocess.Popen(train_command(tiny_demos, broken), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    target = broken / "checkpoints" / "step-0000004" / "train_state.json"
    deadline = time.time() + 240
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (broken / "results.json").exists()
    killed_at = checkpoint_dirs(broken)[-1].name
    assert "step-0000004" <= killed_at < "step-0000008"

    resumed = subprocess.run(train_command(tiny_demos, broken, "--resume"), env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    for name in ("model.safetensors",):
        a = load_file(full / "checkpoints" / "step-0000008" / name)
        b = load_file(broken / "checkpoints" / "step-0000008" / name)
        assert a.keys() == b.keys()
        different = [k for k in a if not torch.equal(a[k], b[k])]
        assert not different, f"resumed from {killed_at}: {len(different)} tensors differ, e.g. {different[:3]}"
    opt_a = torch.load(full / "checkpoints" / "step-0000008" / "optimizer.bin", weights_only=True)
    opt_b = torch.load(broken / "checkpoints" / "step-0000008" / "optimizer.bin", weights_only=True)
    for k, state in opt_a["state"].items():
        assert all(torch.equal(state[n], opt_b["state"][k][n]) for n in state)
    hist_a = json.loads((full / "results.json").read_text())
    hist_b = json.loads((broken / "results.json").read_text())
    assert hist_a["history"] == hist_b["history"] and hist_a["test"] == hist_b["test"]
    assert hist_a["test_bleu"] == hist_b["test_bleu"]
    assert tree_digest(full / "best") == tree_digest(broken / "best")
    commands = (broken / "command.txt").read_text().splitlines()  # the start and the resume, for the card
    assert len(commands) == 2 and commands[0].startswith("python ") and "scripts/train.py" in commands[0]
    assert "--max-updates 8" in commands[0] and commands[1].endswith("--resume")
    # the commit of each start: the first is the run's commit, whatever the code is at the final evaluation
    assert len(hist_b["training_commits"]) == 2 and hist_b["commit"] == hist_b["training_commits"][0]
    assert hist_a["training_commits"] == [hist_a["commit"]]


def test_continued_run_equals_one_longer_run(finished_runs, tmp_path):
    """A finished run of 4 updates continued to 8 (--continue-from) is the run of 8: same weights, optimizer
    state, curve, best models and test results; the finished run is left byte for byte."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    (tiny_demos, full), (_, short) = finished_runs("8"), finished_runs("4")
    longer = tmp_path / "longer"
    before = tree_digest(short)
    done = subprocess.run(train_command(tiny_demos, longer, "--continue-from", str(short), "--keep-checkpoints", "3"),
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert tree_digest(short) == before

    step = full / "checkpoints" / "step-0000008"
    a, b = load_file(step / "model.safetensors"), load_file(longer / "checkpoints" / step.name / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    opt_a = torch.load(step / "optimizer.bin", weights_only=True)
    opt_b = torch.load(longer / "checkpoints" / step.name / "optimizer.bin", weights_only=True)
    assert all(torch.equal(s[n], opt_b["state"][k][n]) for k, s in opt_a["state"].items() for n in s)
    ra, rb = (json.loads((run / "results.json").read_text()) for run in (full, longer))
    assert ra["history"] == rb["history"] and [h["step"] for h in rb["history"]] == [4, 8]
    assert all({"valid/success_rate_other_mission", "valid/success_rate_same_room"} <= set(h)
               for h in rb["history"])  # validate_reading's default
    for key in ("test", "test_bleu", "best", "best_speaker", "updates"):
        assert ra[key] == rb[key], key
    assert tree_digest(full / "best") == tree_digest(longer / "best")
    assert len(rb["training_commits"]) == 2  # the finished run's start and the continuation
    commands = (longer / "command.txt").read_text().splitlines()
    assert "--max-updates 4" in commands[0] and f"--continue-from {short}" in commands[1]
    assert [p.name for p in checkpoint_dirs(longer)] == ["step-0000004", "step-0000006", "step-0000008"]


@pytest.mark.parametrize(("finished", "flags", "message"), [
    ("4", ("--learning-rate", "0.01"), "learning_rate: 0.001 there, 0.01 here"),
    ("4", ("--seed", "8"), "seed: 7 there, 8 here"),
    ("4", ("--max-updates", "4"), "max_updates must be more"),
    ("6", (), "stopped at update 6, off the validation schedule"),  # validated at 4 and 6; a run of 8 at 4 and 8
])
def test_continue_from_refuses_another_run(finished_runs, tmp_path, finished, flags, message):
    """A continuation that would not be the finished run made longer stops before writing anything."""
    tiny_demos, short = finished_runs(finished)
    before = tree_digest(short)
    script = load_train_script()
    out = tmp_path / "longer"
    argv = train_command(tiny_demos, out, "--continue-from", str(short), *flags)[2:]
    with pytest.raises(SystemExit, match=message):
        script.main(argv)
    assert tree_digest(short) == before and not out.exists()


def test_a_continued_run_names_the_commits_of_the_run_it_continued(finished_runs, tmp_path):
    """A checkpoint without its commits: the finished run's results.json gives them."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    tiny_demos, finished = finished_runs("4")
    short, longer = tmp_path / "short", tmp_path / "longer"
    shutil.copytree(finished, short)  # changed below: the module's finished run stays as it was
    state_file = checkpoint_dirs(short)[-1] / "train_state.json"
    state = json.loads(state_file.read_text())
    del state["commits"]
    state_file.write_text(json.dumps(state))
    (state_file.parent / "checksums.json").unlink()  # a checkpoint of that format has no digests either
    results = json.loads((short / "results.json").read_text())
    (short / "results.json").write_text(json.dumps({**results, "commit": "0123abc", "training_commits": None}))
    subprocess.run(train_command(tiny_demos, longer, "--continue-from", str(short)), check=True, env=env,
                   capture_output=True, timeout=300)
    record = json.loads((longer / "results.json").read_text())
    assert record["commit"] == "0123abc" and record["training_commits"][0] == "0123abc"
    assert len(record["training_commits"]) == 2


def test_continue_from_needs_a_finished_run(tiny_demos, tmp_path):
    script = load_train_script()
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    with pytest.raises(SystemExit, match="is not a finished run"):
        script.main(train_command(tiny_demos, tmp_path / "out", "--continue-from", str(unfinished))[2:])
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- evaluation, bf16
def test_evaluation_is_deterministic(baseline_runs):
    from msvae_hf.envs.seeds import VALID_SEED_START
    from msvae_hf.evaluation.evaluate import evaluate_follower

    model = FollowerModel.from_pretrained(baseline_runs["follower"] / "best")
    level = "BabyAI-BossLocal-v0"
    a_summary, a = evaluate_follower(model, level, 6, VALID_SEED_START, batch_size=4)
    torch.manual_seed(123)  # the global RNG must not matter (greedy actions)
    b_summary, b = evaluate_follower(model, level, 6, VALID_SEED_START, batch_size=3)
    assert a_summary == b_summary
    assert [(r.seed, r.instruction, list(r.actions), r.success) for r in a] == \
        [(r.seed, r.instruction, list(r.actions), r.success) for r in b]
    assert len({r.seed for r in a}) == 6


def test_bf16_mixed_precision(tiny_demos, tmp_path):
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        train_tiny("msvae", tmp_path / "bf16", tiny_demos, mixed_precision="bf16", max_updates=2, eval_every=2,
                   checkpoint_every=2, model={"gamma": 1.0})
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    losses = tb_scalars(tmp_path / "bf16")["train/loss"]
    assert sorted(losses) == [1, 2] and all(math.isfinite(v) for v in losses.values())
    assert json.loads((tmp_path / "bf16" / "train_config.json").read_text())["mixed_precision"] == "bf16"
    weights = load_file(tmp_path / "bf16" / "best" / "model.safetensors")
    assert all(v.dtype == torch.float32 for v in weights.values())  # autocast, fp32 master weights


# ---------------------------------------------------------------------------------------------- bad inputs
def load_train_script() -> Any:
    spec = importlib.util.spec_from_file_location("train_script", TRAIN_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_dataset(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="no demonstrations at"):
        train_tiny("follower", out, tmp_path / "nope")
    assert tree_digest(out) == {}


def test_dataset_without_paired_split(tiny_demos, tmp_path):
    from msvae_hf.data.demos import load_demos

    demos = tmp_path / "unpaired_only"
    DatasetDict({"unpaired": load_demos(tiny_demos)["unpaired"]}).save_to_disk(str(demos))
    with pytest.raises(ValueError, match="no 'paired' split"):
        train_tiny("msvae", tmp_path / "run", demos)
    assert tree_digest(tmp_path / "run") == {}


def test_unknown_config_keys(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("model_type: follower\nlearning_rte: 0.1\n")
    with pytest.raises(ValueError, match="learning_rte"):
        load_config(str(config))
    with pytest.raises(ValueError, match="unknown model config key.*hiden_size"):
        load_config(None, {"model.hiden_size": 8})
    # MS-VAE's prior and weights are no baseline's: a follower names the config class whose fields it takes
    with pytest.raises(ValueError, match=r"unknown model config key\(s\): \['gamma'\] \(a follower takes the fields "
                                         r"of FollowerConfig\)"):
        load_config(None, {"model_type": "follower", "model.gamma": 0})
    assert load_config(None, {"model_type": "msvae", "model.gamma": 0}).model == {"gamma": 0}
    script = load_train_script()
    for argv, name in ((["--config", str(config)], "learning_rte"), (["--learning-rte", "1"], "--learning-rte"),
                       (["--model.hiden_size", "8"], "hiden_size"), (["--model.hidden_size"], "--model.hidden_size")):
        with pytest.raises(SystemExit) as exc:
            script.main([*argv, "--output-dir", str(tmp_path / "run")])
        assert exc.value.code != 0
        assert name in str(exc.value.code) + capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_config_base_chain(tmp_path):
    """``base:`` is read relative to the file; later files and the command line win, ``model`` key by key; an
    unknown key anywhere in the chain, a missing base or a cycle is an error naming it."""
    level = tmp_path / "level"
    level.mkdir()
    (level / "base.yaml").write_text("demos: data/x\nbatch_size: 64\nmax_updates: 100\nmodel:\n  gamma: 5.0\n")
    (level / "msvae.yaml").write_text("base: base.yaml\nmodel_type: msvae\nmax_updates: 200\n"
                                      "model:\n  alpha: 2.0\n")
    (level / "ablation.yaml").write_text("base: msvae.yaml\nmodel:\n  gamma: 0.0\n")
    cfg = load_config(str(level / "ablation.yaml"), {"model.beta": 0.5, "batch_size": 32})
    assert (cfg.model_type, cfg.demos, cfg.max_updates, cfg.batch_size) == ("msvae", "data/x", 200, 32)
    assert cfg.model == {"gamma": 0.0, "alpha": 2.0, "beta": 0.5}
    (level / "typo.yaml").write_text("base: base.yaml\nmax_update: 3\n")
    with pytest.raises(ValueError, match="max_update"):
        load_config(str(level / "typo.yaml"))
    (level / "orphan.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        load_config(str(level / "orphan.yaml"))
    (level / "a.yaml").write_text("base: b.yaml\n")
    (level / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ValueError, match="its own base"):
        load_config(str(level / "a.yaml"))


def test_command_line_values_keep_their_type(tmp_path):
    """`--mixed-precision no` is the string "no" (YAML alone reads it as False), also in a YAML file."""
    script = load_train_script()
    path, overrides = script.parse_args(["--mixed-precision", "no", "--output-dir", "007", "--max-updates", "12",
                                         "--model.gamma", "1e-2"])
    assert overrides == {"mixed_precision": "no", "output_dir": "007", "max_updates": 12, "model.gamma": 0.01}
    cfg = load_config(path, overrides)
    assert (cfg.mixed_precision, cfg.output_dir, cfg.max_updates, cfg.model) == ("no", "007", 12, {"gamma": 0.01})
    config = tmp_path / "run.yaml"
    config.write_text("mixed_precision: no\nlearning_rate: 3e-4\noutput_dir: 2024\nmodel:\n  gamma: 1E+2\n  beta: .1\n")
    cfg = load_config(str(config))
    assert (cfg.mixed_precision, cfg.learning_rate, cfg.model) == ("no", 3e-4, {"gamma": 100.0, "beta": 0.1})
    assert cfg.output_dir == "2024"  # a number where a path belongs is taken as text
    from msvae_hf.training.train_config import parse_yaml

    assert [parse_yaml(t) for t in ("1e-3", ".5e1", "-2E+2", "1_0e1", "-e5", ".e5", "1e", "e3")] == [
        1e-3, 5.0, -200.0, 100.0, "-e5", ".e5", "1e", "e3"]  # no digit before the e: a string, not a crash
    with pytest.raises(ValueError, match="mixed_precision must be no, bf16 or fp16, got 'fp8'"):
        load_config(None, {"mixed_precision": "fp8"})
    with pytest.raises(ValueError, match=r"speaker_metric must be one of \['bleu', 'demonstrated'\], got 'meteor'"):
        load_config(None, {"speaker_metric": "meteor"})
    with pytest.raises(ValueError, match=r"follower_metric must be one of \['reading', 'sr'\], got 'spl'"):
        load_config(None, {"follower_metric": "spl"})
    with pytest.raises(ValueError, match="follower_metric reading needs validate_reading: true"):
        load_config(None, {"follower_metric": "reading", "validate_reading": False})
    with pytest.raises(ValueError, match=r"also_select must be one of \['reading', 'sr'\] or null, got 'spl'"):
        load_config(None, {"also_select": "spl"})
    with pytest.raises(ValueError, match="also_select 'sr' is follower_metric too: best/ already keeps it"):
        load_config(None, {"also_select": "sr"})
    with pytest.raises(ValueError, match="also_select chooses a follower checkpoint; a speaker run has none"):
        load_config(None, {"model_type": "speaker", "also_select": "reading"})
    with pytest.raises(ValueError, match="also_select reading needs validate_reading: true"):
        load_config(None, {"also_select": "reading", "validate_reading": False})


def test_resume_with_another_model_type(baseline_runs, tiny_demos, tmp_path):
    run = tmp_path / "speaker"
    shutil.copytree(baseline_runs["speaker"], run)
    before = tree_digest(run)
    with pytest.raises(ValueError, match="model_type: 'speaker' there, 'msvae' here"):
        train_tiny("msvae", run, tiny_demos, resume=True)
    assert tree_digest(run) == before


@pytest.mark.parametrize("content", ["finished run without checkpoints", "empty", "missing"])
def test_resume_with_nothing_to_resume(baseline_runs, tiny_demos, tmp_path, content):
    """--resume where no checkpoint exists stops and writes nothing: a finished run copied without its
    checkpoints (as a GPU machine returns them) keeps its best/ and results.json byte for byte."""
    run = tmp_path / "out"
    if content == "finished run without checkpoints":
        shutil.copytree(baseline_runs["follower"], run)
        shutil.rmtree(run / "checkpoints")
    elif content == "empty":
        run.mkdir()
    before = tree_digest(run)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train_tiny("follower", run, tiny_demos, resume=True)
    assert tree_digest(run) == before and run.exists() == (content != "missing")


@pytest.mark.parametrize("content", ["run", "file"])
def test_new_run_in_non_empty_dir(baseline_runs, tiny_demos, tmp_path, content):
    run = tmp_path / "out"
    if content == "run":
        shutil.copytree(baseline_runs["follower"], run)
    else:
        run.mkdir()
        (run / "notes.txt").write_text("keep me")
    before = tree_digest(run)
    with pytest.raises(FileExistsError, match="--resume"):
        train_tiny("follower", run, tiny_demos)
    assert tree_digest(run) == before


def test_threads_flag_takes_a_positive_count_and_names_itself_otherwise(capsys) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="script")
    add_threads_flag(parser)
    assert parser.parse_args([]).threads is None and parser.parse_args(["--threads", "2"]).threads == 2
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--threads", bad])
        assert "--threads" in capsys.readouterr().err
    before = torch.get_num_threads()
    try:
        set_threads(None)
        assert torch.get_num_threads() == before
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)



def test_adam_steps_as_the_per_parameter_loop() -> None:
    """``runtime.adam`` (the foreach implementation) moves every parameter bit for bit as the CPU's default
    per-parameter Adam does, over steps with the same gradients."""
    torch.manual_seed(0)
    ours = MSVAEModel(MSVAEConfig(vocab_size=40, **TINY_MODEL))
    reference = MSVAEModel(MSVAEConfig(vocab_size=40, **TINY_MODEL))
    reference.load_state_dict(ours.state_dict())
    start = [p.detach().clone() for p in ours.parameters()]
    optimizers = adam(ours.parameters(), 1e-3), torch.optim.Adam(reference.parameters(), lr=1e-3, foreach=False)
    for _ in range(5):
        for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
            a.grad = torch.randn_like(a)
            b.grad = a.grad.clone()
        for optimizer in optimizers:
            optimizer.step()
    for a, b, before in zip(ours.parameters(), reference.parameters(), start, strict=True):
        assert torch.equal(a, b) and not torch.equal(a, before)


def test_resume_skips_a_damaged_checkpoint_and_refuses_when_none_is_intact(finished_runs, tmp_path):
    """Every checkpoint lists its files' digests: a resume whose newest checkpoint lost its random states, or had a
    bit of its optimizer state flipped, resumes from the newest intact one (warned, and the run is the uninterrupted
    one); with none intact it is refused, naming the file, and nothing is written."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    tiny_demos, full = finished_runs("8")
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)  # as if killed after the checkpoint of update 6
    (cut / "results.json").unlink()
    shutil.rmtree(cut / "checkpoints" / "step-0000008")
    steps = {p.name: p for p in checkpoint_dirs(cut)}
    (steps["step-0000006"] / "random_states_0.pkl").unlink()
    optimizer = steps["step-0000004"] / "optimizer.bin"
    data = bytearray(optimizer.read_bytes())
    data[len(data) // 2] ^= 1
    optimizer.write_bytes(bytes(data))
    resumed = subprocess.run(train_command(tiny_demos, cut, "--resume"), env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "random_states_0.pkl is missing" in resumed.stderr and "optimizer.bin is damaged" in resumed.stderr
    assert "resuming from" in resumed.stderr and "step-0000002" in resumed.stderr
    a = load_file(full / "checkpoints" / "step-0000008" / "model.safetensors")
    b = load_file(cut / "checkpoints" / "step-0000008" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)

    for folder in checkpoint_dirs(cut):
        (folder / "model.safetensors").write_bytes(b"\0" * 16)
    (cut / "results.json").unlink()
    before = {k: v for k, v in tree_digest(cut).items() if k != ".lock"}  # the lock is taken and let go
    refused = subprocess.run(train_command(tiny_demos, cut, "--resume"), env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode != 0 and "no intact checkpoint to resume" in refused.stderr
    assert "model.safetensors is damaged" in refused.stderr and "Traceback" not in refused.stderr
    assert {k: v for k, v in tree_digest(cut).items() if k != ".lock"} == before
