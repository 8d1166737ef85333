"""What the trainer guarantees (docs/design.md): a non-finite update stops the run before anything of it is
saved, a resume refuses a changed config, one trainer per folder, every field checked before anything is
written, and a full disk leaves no partial checkpoint. Each failure is one line naming what is wrong."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY_MODEL, TINY_TRAIN, tiny_cli_args, train_tiny
from safetensors.torch import load_file

import msvae_hf.utils.run_folder as run_folder
from msvae_hf import FollowerModel
from msvae_hf.training.train_config import load_config
from msvae_hf.utils.run_folder import (
    NonFiniteError,
    RunFolderBusy,
    RunLock,
    check_finite_update,
    checkpoint_dirs,
    nonfinite_terms,
)


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


def _finite_folder(folder: Path) -> bool:
    files = list(folder.rglob("*.safetensors"))
    assert files
    return all(torch.isfinite(t).all() for f in files for t in load_file(f).values())


# ------------------------------------------------------------------------------------------------ non-finite
def test_a_diverging_run_stops_before_saving_anything(tiny_demos: Path, tmp_path: Path) -> None:
    """learning_rate 1e9: the first update blows the weights up, the next loss or gradient is not finite; the run
    stops there, naming the update, with no checkpoint and no best/ written."""
    out = tmp_path / "run"
    with pytest.raises(NonFiniteError, match=r"^update \d+: the (loss|gradient norm) is ") as info:
        train_tiny("follower", out, tiny_demos, learning_rate=1e9, checkpoint_every=4, eval_every=4)
    _one_line(info.value)
    assert not checkpoint_dirs(out) and not (out / "best").exists() and not (out / "results.json").exists()


def test_the_last_good_checkpoints_are_kept(tiny_demos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """A loss that turns NaN at update 4 (checkpoints every update, one kept): the run stops naming update 4 and
    the term, and the checkpoint of update 3 and best/ stay, finite; nothing is pruned past them."""
    forward, calls = FollowerModel.forward, []

    def nan_from_fourth(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        if self.training:
            calls.append(1)
            if len(calls) >= 4:
                output.loss = output.loss * float("nan")
        return output

    monkeypatch.setattr(FollowerModel, "forward", nan_from_fourth)
    out = tmp_path / "run"
    with pytest.raises(NonFiniteError, match=r"^update 4: the loss is not finite \(non-finite: loss\)") as info:
        train_tiny("follower", out, tiny_demos, max_updates=6, checkpoint_every=1, eval_every=1)
    _one_line(info.value)
    assert [p.name for p in checkpoint_dirs(out)] == ["step-0000003"]
    assert _finite_folder(checkpoint_dirs(out)[0]) and _finite_folder(out / "best")


def test_non_finite_names_the_term_and_the_parameter() -> None:
    terms = {"loss": torch.tensor(float("inf")), "j_bar": torch.tensor(1.0), "v": torch.tensor(float("nan")),
             "d": None}
    assert nonfinite_terms(terms) == ["loss", "v"]
    with pytest.raises(NonFiniteError, match=r"^update 7: the loss is not finite \(non-finite: loss, v\)"):
        check_finite_update(7, nonfinite_terms(terms))
    layer = torch.nn.Linear(2, 2)
    layer.weight.grad, layer.bias.grad = torch.zeros(2, 2), torch.tensor([0.0, float("nan")])
    with pytest.raises(NonFiniteError, match=r"^update 3: the gradient norm is nan \(first at bias\)"):
        check_finite_update(3, [], layer.named_parameters())
    layer.bias.grad = torch.tensor([3.0, 4.0])
    assert check_finite_update(3, [], layer.named_parameters()) == pytest.approx(5.0)
    layer.weight.grad = torch.full((2, 2), 1e20)  # every gradient finite, their norm overflows float32
    with pytest.raises(NonFiniteError, match=r"the gradient norm is inf \(every gradient is finite, their norm"):
        check_finite_update(3, [], layer.named_parameters())


# ------------------------------------------------------------------------------------------------ resume
def test_resume_refuses_a_changed_config(tiny_demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    train_tiny("follower", out, tiny_demos)
    saved = (out / "train_config.json").read_bytes()
    with pytest.raises(ValueError, match=r"learning_rate: 0\.001 there, 1000000000\.0 here") as info:
        train_tiny("follower", out, tiny_demos, learning_rate=1e9, resume=True)
    assert "--continue-from" in _one_line(info.value)
    assert (out / "train_config.json").read_bytes() == saved
    # what resume may change (threads, evaluation workers, the finished run it continued) it may
    train_tiny("follower", out, tiny_demos, resume=True, threads=2, continue_from=str(tmp_path / "elsewhere"))


def test_resume_and_continue_read_a_named_level_as_the_demonstrations_level(tiny_demos: Path, tmp_path: Path) -> None:
    """A run that left its level to the demonstrations (level: None, as per-level config files did) resumes and
    continues under commands that name that level (configs/*.yaml with --level), and not under another level."""
    out = tmp_path / "run"
    train_tiny("follower", out, tiny_demos)
    with pytest.raises(ValueError, match=r"level: 'BabyAI-BossLocal-v0' there, 'BabyAI-GoToSeqLocal-v0' here"):
        train_tiny("follower", out, tiny_demos, level="GoToSeqLocal", resume=True)
    train_tiny("follower", out, tiny_demos, level="BossLocal", resume=True)
    longer = train_tiny("follower", tmp_path / "longer", tiny_demos, level="BabyAI-BossLocal-v0",
                        continue_from=str(out), max_updates=2 * TINY_TRAIN["max_updates"])
    assert longer["updates"] == 2 * TINY_TRAIN["max_updates"]


# ------------------------------------------------------------------------------------------------ one trainer
def test_a_held_folder_is_refused_naming_its_holder(tiny_demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    lock = RunLock(out, command="python scripts/train.py --config other.yaml")
    try:
        with pytest.raises(RunFolderBusy, match=rf"^{out} is in use by pid {os.getpid()} .*other\.yaml"):
            train_tiny("follower", out, tiny_demos)
        assert [p.name for p in out.iterdir()] == [".lock"]
    finally:
        lock.release()
    train_tiny("follower", out, tiny_demos)  # the lock file alone does not make the folder "not empty"
    assert (out / "results.json").is_file()


def test_a_second_process_is_refused_at_once(tmp_path: Path) -> None:
    """The lock is the kernel's: a second process (not only a second open file) is refused while the first holds
    it, and takes it once the first lets go."""
    lock = RunLock(tmp_path / "run")
    code = ("import sys; from msvae_hf.utils.run_folder import RunLock, RunFolderBusy\n"
            "try:\n    RunLock(sys.argv[1]).release()\nexcept RunFolderBusy as e:\n    sys.exit(str(e))\n")
    held = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True)
    assert held.returncode == 1 and f"in use by pid {os.getpid()}" in held.stderr
    lock.release()
    free = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True)
    assert free.returncode == 0, free.stderr


def test_a_killed_trainer_leaves_no_lock_behind_its_forked_workers(tmp_path: Path) -> None:
    """A trainer that forked a worker (as the evaluation pool does) and died: the worker lives on, the folder is
    free (forked children drop their copies of the lock's descriptor)."""
    code = ("import os, sys, time; from msvae_hf.utils.run_folder import RunLock\n"
            "RunLock(sys.argv[1])\n"
            "child = os.fork()\n"
            "if child == 0:\n    null = os.open(os.devnull, os.O_RDWR)\n    os.dup2(null, 1)\n    os.dup2(null, 2)\n"
            "    time.sleep(60)\n    os._exit(0)\n"
            "print(child, flush=True)\nos._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=60)
    worker = int(done.stdout.split()[0])
    try:
        os.kill(worker, 0)  # the worker is alive
        RunLock(tmp_path / "run").release()
    finally:
        os.kill(worker, 9)


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("field, value, message", [
    ("level", "BossLokal", "unknown level 'BossLokal'"),
    ("eval_episodes", 0, "eval_episodes must be positive, got 0"),
    ("batch_size", 8.5, "batch_size must be an integer, got 8.5"),
    ("batch_size", "abc", "batch_size must be an integer, got 'abc'"),
    ("learning_rate", "abc", "learning_rate must be a number, got 'abc'"),
    ("unpaired_batch_size", 0, "unpaired_batch_size must be positive, got 0 (leave it unset for the default)"),
    ("max_grad_norm", -1.0, "max_grad_norm must be positive"),
    ("resume", "yes", "resume must be true or false, got 'yes'"),
])
def test_bad_fields_are_refused_before_anything_is_written(tiny_demos: Path, tmp_path: Path, field: str,
                                                           value: object, message: str) -> None:
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        train_tiny("msvae", out, tiny_demos, **{field: value})
    _one_line(info.value)
    assert not out.exists()


def test_train_script_says_one_line_and_writes_nothing(tiny_demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "scripts/train.py", "--model-type", "follower", "--demos", str(tiny_demos),
            "--output-dir", str(out), "--level", "BossLokal", *tiny_cli_args(model_type="follower")]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("error: unknown level 'BossLokal'") and not out.exists()
    assert TINY_MODEL and load_config(None, TINY_TRAIN).batch_size == TINY_TRAIN["batch_size"]


# ------------------------------------------------------------------------------------------------ disk full
def test_a_full_disk_leaves_no_partial_checkpoint(tiny_demos: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The second checkpoint's write fails with ENOSPC half-way: one line naming the folder, the partial
    folder removed, the first checkpoint intact; resuming after space is freed finishes the run."""
    from accelerate import Accelerator

    save_state, calls = Accelerator.save_state, []

    def full_on_second(self, output_dir=None, **kwargs):
        calls.append(output_dir)
        if len(calls) == 2:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            (Path(output_dir) / "model.safetensors").write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        return save_state(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", full_on_second)
    out = tmp_path / "run"
    with pytest.raises(OSError, match=r"^\[Errno 28\] no space left on device writing .*\.tmp-step-0000004") as info:
        train_tiny("follower", out, tiny_demos)
    _one_line(info.value)
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-0000002"]
    assert json.loads((checkpoint_dirs(out)[0] / "train_state.json").read_text())["step"] == 2
    monkeypatch.setattr(Accelerator, "save_state", save_state)
    assert train_tiny("follower", out, tiny_demos, resume=True)["updates"] == TINY_TRAIN["max_updates"]


def test_a_full_disk_is_named_when_torch_drops_the_errno(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's zip writer on a full disk raises a RuntimeError without errno ("unexpected pos"): with the disk
    (nearly) full that is a full disk, named; with space left the error goes on as it was."""
    target = tmp_path / ".tmp-step-0000002"

    def fail() -> None:
        with run_folder.writing(target):
            target.mkdir()
            (target / "model.safetensors").write_bytes(b"\0" * 10)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1408 vs 1300")

    monkeypatch.setattr(run_folder.shutil, "disk_usage", lambda p: shutil_usage(free=1024))
    with pytest.raises(OSError, match=rf"^\[Errno 28\] no space left on device writing {target}"):
        fail()
    assert not target.exists()
    monkeypatch.setattr(run_folder.shutil, "disk_usage", lambda p: shutil_usage(free=10 * 2**30))
    with pytest.raises(RuntimeError, match="unexpected pos"):
        fail()
    assert not target.exists()


def shutil_usage(free: int):
    """A shutil.disk_usage result with ``free`` bytes free."""
    import shutil

    return shutil._ntuple_diskusage(2**40, 2**40 - free, free)


def test_a_start_that_failed_before_its_first_checkpoint_can_start_again(tiny_demos: Path, tmp_path: Path) -> None:
    """Data the model cannot take fails in the first batch; the folder it leaves (config, command, logs, no
    checkpoint) is neither refused as "not empty" nor resumable: the next start begins there afresh."""
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"actions must be in \[0, num_actions=2\)"):
        train_tiny("follower", out, tiny_demos, model={"num_actions": 2})
    assert (out / "train_config.json").is_file() and not checkpoint_dirs(out)
    results = train_tiny("follower", out, tiny_demos)
    assert results["updates"] == TINY_TRAIN["max_updates"] and (out / "results.json").is_file()
    with pytest.raises(FileExistsError, match="is not empty: pass --resume"):  # a finished run is kept
        train_tiny("follower", out, tiny_demos)


def test_a_run_folder_made_under_the_head_default_resumes_only_as_the_head_follower(tmp_path: Path) -> None:
    """A train_config.json that names no follower was written when the model's default was the head follower with
    a_{t-1}: read as resume reads it (train_config.with_follower, then run_folder.config_differences), a command
    naming that follower matches it, one left to the FiLM default differs in the model's fields (refused, not
    torch's missing-keys error at load); a config written now names the follower it trains."""
    import dataclasses

    from msvae_hf.models.configuration_msvae import HEAD_FOLLOWER
    from msvae_hf.training.train_config import TrainConfig, with_follower
    from msvae_hf.utils.run_folder import config_differences

    old = dataclasses.asdict(TrainConfig(model_type="follower", level="BossLocal"))
    saved = with_follower(json.loads(json.dumps(old)), saved=True)
    assert not config_differences(saved, with_follower({**old, "model": dict(HEAD_FOLLOWER)}, saved=False), ())
    differ = config_differences(saved, with_follower(old, saved=False), ())
    assert len(differ) == 1 and differ[0].startswith("model: {'follower_conditioning': 'head'")
    written = with_follower(old, saved=False)
    assert written["model"] == {"follower_conditioning": "film", "previous_action_input": False, "film_layers": 2}
    assert not config_differences(with_follower(written, saved=True), with_follower(old, saved=False), ())
    # a FiLM run's folder written before film_layers was a choice modulated one map: it resumes as that follower
    film = {**old, "model": {"follower_conditioning": "film", "previous_action_input": False}}
    one, two = ({**film, "model": {**film["model"], "film_layers": n}} for n in (1, 2))
    assert not config_differences(with_follower(film, saved=True), with_follower(one, saved=False), ())
    differ = config_differences(with_follower(film, saved=True), with_follower(two, saved=False), ())
    assert len(differ) == 1 and "'film_layers': 1" in differ[0]
    # film_layers is no part of a head follower: a head run's folder resumes whatever the default layers
    head = {**old, "model": {**HEAD_FOLLOWER, "film_layers": 2}}
    assert not config_differences(saved, with_follower(head, saved=False), ())
