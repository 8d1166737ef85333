"""Bad inputs stop with one clear line: evaluate.py's --model, a truncated safetensors file, and the policies'
reset/act protocol. Tiny models (tests/test_model.py's ``build``), saved to tmp_path; no rollout runs."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import REPO, load_script
from model_helpers import build
from safetensors import SafetensorError
from transformers import AutoModel

from msvae_hf.evaluation.rollout import BotPolicy, RandomPolicy
from msvae_hf.models.tokenization_msvae import MSVAETokenizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny saved models {"speaker", "follower", "msvae"} with their tokenizer (read-only)."""
    root = tmp_path_factory.mktemp("saved")
    tok = MSVAETokenizer.from_grammar()
    folders = {}
    for name, kind in (("speaker", "speaker"), ("follower", "follower-attention"), ("msvae", "msvae")):
        model = build(kind, tok)
        model.tokenizer = tok
        model.save_pretrained(root / name)
        folders[name] = root / name
    return folders


@pytest.fixture(scope="module")
def evaluate() -> Any:
    return load_script("evaluate")


def evaluate_error(evaluate: Any, capsys: pytest.CaptureFixture[str], model: str | Path) -> str:
    """Run ``evaluate.py --model model`` in-process; assert exit code 2 and one stderr line, and return it."""
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--model", str(model), "--episodes", "1", "--batch-size", "1"])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("evaluate.py: error: ")
    return lines[0]


def truncate(folder: Path, keep: float) -> Path:
    """Cut ``folder/model.safetensors`` to ``keep`` of its bytes; return the file."""
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    return weights


# ---------------------------------------------------------------------------------------------- evaluate.py --model
def test_evaluate_refuses_a_speaker_and_names_the_bleu_function(
    saved: dict[str, Path], evaluate: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    line = evaluate_error(evaluate, capsys, saved["speaker"])
    assert f"{saved['speaker']} is a speaker" in line
    assert "evaluate.py rolls out followers and MS-VAE" in line
    assert "msvae_hf.evaluation.evaluate.evaluate_speaker" in line


def test_evaluate_on_a_run_folder_points_to_best(
    saved: dict[str, Path], evaluate: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000002").mkdir(parents=True)
    shutil.copytree(saved["msvae"], run / "best")
    assert evaluate_error(evaluate, capsys, run) == f"evaluate.py: error: no model in {run}: did you mean {run}/best?"
    shutil.copytree(saved["msvae"], run / "best_speaker")
    line = evaluate_error(evaluate, capsys, run)
    assert line == f"evaluate.py: error: no model in {run}: did you mean {run}/best or {run}/best_speaker?"
    step = run / "checkpoints" / "step-000002"
    (step / "train_state.json").write_text("{}")
    for checkpoint in (step, run / "checkpoints"):
        assert evaluate_error(evaluate, capsys, checkpoint) == (
            f"evaluate.py: error: {checkpoint} is a training checkpoint (the state --resume reads), not a model: the "
            f"run's model is {run}/best")


@pytest.mark.parametrize("where", ["absolute", "./relative", "word", "deep/relative/path"])
def test_evaluate_on_a_missing_path_says_no_model_there(
    where: str, evaluate: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model = str(tmp_path / "nope") if where == "absolute" else where
    for auto in (evaluate.AutoConfig, evaluate.AutoModel):
        monkeypatch.setattr(auto, "from_pretrained", pytest.fail)  # never asks the Hub
    assert evaluate_error(evaluate, capsys, model) == f"evaluate.py: error: no model at {model}"


def test_a_mistyped_folder_beside_its_parent_is_not_asked_of_the_hub(
    evaluate: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """"runs/typo" has a Hub id's shape, but runs/ is here: the folder was mistyped, and the Hub is never asked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for auto in (evaluate.AutoConfig, evaluate.AutoModel):
        monkeypatch.setattr(auto, "from_pretrained", pytest.fail)
    assert evaluate_error(evaluate, capsys, "runs/typo") == (
        "evaluate.py: error: no model at runs/typo (the folder runs is here, and holds no typo)")


def test_evaluate_tries_the_hub_only_for_a_user_name_id(
    evaluate: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    retries = logging.getLogger("huggingface_hub.utils._http")  # where huggingface_hub logs its retries
    warned: list[bool] = []

    def offline(name: str, *args: Any, **kwargs: Any) -> None:
        asked.append(name)
        warned.append(retries.isEnabledFor(logging.WARNING))
        raise OSError("We couldn't connect to 'https://huggingface.co'.\nCheck your internet connection.")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(evaluate.AutoConfig, "from_pretrained", offline)
    line = evaluate_error(evaluate, capsys, "someone/some-model")
    assert asked == ["someone/some-model"]
    assert warned == [False] and retries.isEnabledFor(logging.WARNING)  # quiet while asking the Hub, then as it was
    assert line.startswith("evaluate.py: error: no model at someone/some-model: not a local folder, and from the Hub")


def test_evaluate_script_error_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    done = subprocess.run([sys.executable, "scripts/evaluate.py", "--model", str(missing)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"evaluate.py: error: no model at {missing}"]


# ---------------------------------------------------------------------------------------------- truncated weights
@pytest.mark.parametrize("keep", [0.0, 0.5])
def test_truncated_safetensors_is_named_as_incomplete(saved: dict[str, Path], tmp_path: Path, keep: float) -> None:
    folder = tmp_path / "follower"
    shutil.copytree(saved["follower"], folder)
    weights = truncate(folder, keep)
    with pytest.raises(OSError, match="incomplete or corrupt") as err:
        AutoModel.from_pretrained(folder)
    assert str(err.value).startswith(f"{weights} is incomplete or corrupt (")
    assert str(err.value).endswith(": save or download it again")
    assert isinstance(err.value.__cause__, SafetensorError)


def test_evaluate_on_truncated_weights_names_the_file(
    saved: dict[str, Path], evaluate: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "msvae"
    shutil.copytree(saved["msvae"], folder)
    weights = truncate(folder, 0.5)
    line = evaluate_error(evaluate, capsys, folder)
    assert line.startswith(f"evaluate.py: error: {weights} is incomplete or corrupt (")


# ---------------------------------------------------------------------------------------------- policies
@pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
def test_follower_policy_refuses_a_blank_instruction(saved: dict[str, Path], blank: str) -> None:
    policy = AutoModel.from_pretrained(saved["follower"]).policy()
    with pytest.raises(ValueError, match="^instruction 2 is empty"):
        policy.reset(["go to the red ball", "open the door", blank])


@pytest.mark.parametrize(
    ("instructions", "reason"),
    [
        ("go to the red ball", "got one string"),
        ([], "no instructions"),
        (["go to the red ball", None], "instruction 1 is a NoneType"),
    ],
)
def test_follower_policy_refuses_a_bad_instruction_list(saved: dict[str, Path], instructions: Any, reason: str) -> None:
    policy = AutoModel.from_pretrained(saved["follower"]).policy()
    with pytest.raises(ValueError, match=reason):
        policy.reset(instructions)


@pytest.mark.parametrize("which", ["follower", "msvae", "random", "bot"])
def test_act_before_reset_is_a_clear_error(saved: dict[str, Path], which: str) -> None:
    if which in ("follower", "msvae"):
        policy = AutoModel.from_pretrained(saved[which]).policy()
    else:
        policy = RandomPolicy() if which == "random" else BotPolicy()
    observations, directions = np.zeros((2, 7, 7, 3), dtype=np.uint8), np.zeros(2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^act\(\) before reset\(\): call reset\(instructions\) first$"):
        policy.act(observations, directions, np.arange(2))


@pytest.mark.parametrize(("observations", "env_ids", "reason"), [
    (np.zeros((2, 7, 7, 3), dtype=np.float32), np.arange(2), "integer codes .* got float32"),
    (np.zeros((2, 7, 7, 3), dtype=np.uint8), np.array([-1, 0]), r"env_ids must be positions .* \[0, 2\)"),
    (np.zeros((1, 7, 7, 3), dtype=np.uint8), np.array([2]), r"\[0, 2\), got \[2\]"),
])
def test_follower_policy_refuses_normalised_frames_and_unknown_env_ids(saved: dict[str, Path], observations,
                                                                      env_ids, reason: str) -> None:
    policy = AutoModel.from_pretrained(saved["follower"]).policy()
    policy.reset(["go to the red ball", "go to a box"])
    with pytest.raises(ValueError, match=reason):
        policy.act(observations, np.zeros(len(env_ids), dtype=np.int64), env_ids)


def test_follower_policy_names_lengths_that_disagree(saved: dict[str, Path]) -> None:
    policy = AutoModel.from_pretrained(saved["follower"]).policy()
    policy.reset(["go to the red ball", "go to a box"])
    with pytest.raises(ValueError, match=re.escape("needs observations [n, 7, 7, 3], directions [n] and env_ids [n], "
                                                   "got shapes (3, 7, 7, 3), (3,) and (2,)")):
        policy.act(np.zeros((3, 7, 7, 3), dtype=np.uint8), np.zeros(3, dtype=np.int64), np.arange(2))
    with pytest.raises(ValueError, match=re.escape("got shapes (2, 7, 7, 3), () and (2,)")):
        policy.act(np.zeros((2, 7, 7, 3), dtype=np.uint8), np.int64(0), np.arange(2))


def test_a_tokenizer_with_swapped_word_ids_is_refused(tmp_path: Path) -> None:
    """tokenizer.json edited after saving (red <-> blue): the model would follow the wrong colour; the vocabulary's
    digest saved with the weights refuses it, naming the fix."""
    tok = MSVAETokenizer.from_grammar()
    model = build("follower-attention", tok)
    model.tokenizer = tok
    model.save_pretrained(tmp_path)
    assert AutoModel.from_pretrained(tmp_path).tokenizer.get_vocab() == tok.get_vocab()
    spec = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["red"], vocab["blue"] = vocab["blue"], vocab["red"]
    spec["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda item: item[1]))  # as the library writes it
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="maps its words to other ids than the model was saved with.*tokenizer.json"):
        AutoModel.from_pretrained(tmp_path)


@pytest.mark.parametrize(("extra", "reason"), [
    (["--episodes", "0"], "--episodes must be at least 1, got 0"),
    (["--seed-start", "-5"], "--seed-start must be >= 0, got -5"),
    (["--json", "."], "--json . is a folder: give the path of the JSON file to write"),
    (["--render", "2", "--out", "README.md/gifs"], "--out README.md/gifs (for --render): README.md is a file, so "
                                                   "README.md/gifs cannot be a folder"),
    (["--json", "README.md/x.json"], "--json README.md/x.json: README.md is a file, so README.md cannot be a folder"),
])
def test_evaluate_checks_its_arguments_before_any_work(saved: dict[str, Path], extra: list[str], reason: str,
                                                       capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("a file\n")
    with pytest.raises(SystemExit) as exit_:
        load_script("evaluate").main(["--model", str(saved["follower"]), "--level", "GoToLocal", *extra])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"evaluate.py: error: {reason}"]


def test_generate_and_forward_name_bad_decoding_arguments_directions_and_empty_trajectories(tok) -> None:
    from model_helpers import real_batch

    model = build("msvae", tok)
    batch = real_batch(tok)
    traj = {k: batch[k] for k in ("observations", "directions", "actions", "trajectory_mask")}
    with pytest.raises(ValueError, match="num_beams must be a positive integer, got 0"):
        model.generate(**traj, num_beams=0)
    directions = traj["directions"].clone()
    directions[0, 0] = 9
    with pytest.raises(ValueError, match=r"directions must be in \[0, num_directions=4\), got range \[0, 9\]"):
        model.generate(**{**traj, "directions": directions}, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"directions must be in \[0, num_directions=4\)"):
        model(**{**batch, "directions": directions})
    with pytest.raises(ValueError, match="trajectory 0 has no real step"):
        model.generate(**{**traj, "trajectory_mask": torch.zeros_like(traj["trajectory_mask"])})
    policy = model.policy(tok)
    policy.reset(["go to the red ball"])
    with pytest.raises(ValueError, match="directions must be in"):
        policy.act(np.zeros((1, 7, 7, 3), dtype=np.uint8), np.array([9]), np.array([0]))


def test_a_vector_env_that_never_resets_is_refused_with_the_fix() -> None:
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from msvae_hf.evaluation.rollout import rollout

    envs = gym.make_vec("BabyAI-GoToLocal-v0", num_envs=2, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED})
    with pytest.raises(ValueError, match="autoreset_mode DISABLED cannot be stepped past an episode's end.*NEXT_STEP"):
        rollout(RandomPolicy(), envs, [1, 2, 3])


def test_a_model_folder_given_as_demonstrations_is_named_as_a_model(saved: dict[str, Path]) -> None:
    from msvae_hf.data.demos import load_demos

    with pytest.raises(ValueError) as err:
        load_demos(saved["msvae"])
    message = str(err.value)
    assert message.startswith(f"{saved['msvae']} holds a saved model (config.json), not a dataset (demonstrations are "
                              "written by scripts/make_demos.py)")
    assert "Directory" not in message and "\n" not in message  # none of datasets' own wording
