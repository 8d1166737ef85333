"""Training seeds as one stack gives each run what ``train()`` gives it alone, and a stack resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, TINY_TRAIN, train_tiny
from model_helpers import key_bias_rows
from safetensors.torch import load_file

from msvae_hf.stacked import StackedMSVAE
from msvae_hf.train_config import load_config
from msvae_hf.training_stacked import check_stack, train_stacked

SEEDS = (0, 3)
OPTIONS = {"gamma": 0.7, "alpha": 2.0}


def configs(demos: Path, root: Path, **overrides) -> list:
    values = {"model_type": "msvae", "demos": str(demos), **TINY_TRAIN, **overrides}
    values.update({f"model.{k}": v for k, v in {**TINY_MODEL, **OPTIONS}.items()})
    return [load_config(None, {**values, "seed": s, "output_dir": str(root / f"seed{s}")}) for s in SEEDS]


def test_each_run_of_a_stack_is_its_run_alone(tiny_demos: Path, tmp_path: Path) -> None:
    """Same validation history, same best/ weights (within 1e-6, key biases apart) and test SR per seed."""
    stacked = train_stacked(configs(tiny_demos, tmp_path / "stack"), tmp_path / "stack" / "shared", device="cpu")
    for seed, result in zip(SEEDS, stacked):
        alone = train_tiny("msvae", tmp_path / f"alone{seed}", tiny_demos, seed=seed, model=OPTIONS)
        assert result["stacked"]["seeds"] == list(SEEDS) and result["seed"] == seed
        assert [h["step"] for h in result["history"]] == [h["step"] for h in alone["history"]]
        for ours, theirs in zip(result["history"], alone["history"]):
            assert ours["valid/success_rate"] == theirs["valid/success_rate"]
            assert ours["valid/bleu"] == pytest.approx(theirs["valid/bleu"], abs=1e-9)
        assert result["best"]["step"] == alone["best"]["step"]
        ours = load_file(tmp_path / "stack" / f"seed{seed}" / "best" / "model.safetensors")
        theirs = load_file(tmp_path / f"alone{seed}" / "best" / "model.safetensors")
        assert ours.keys() == theirs.keys()
        diff = torch.cat([(ours[k] - theirs[k])[~key_bias_rows(k, theirs[k])] for k in theirs])
        norm = torch.cat([theirs[k][~key_bias_rows(k, theirs[k])] for k in theirs])
        assert float(diff.norm() / norm.norm()) < 1e-6
        assert result["test"]["success_rate"] == alone["test"]["success_rate"]
        assert (tmp_path / "stack" / f"seed{seed}" / "train_config.json").is_file()
        assert list((tmp_path / "stack" / f"seed{seed}" / "tb").glob("events.out.tfevents.*"))


def test_a_stopped_stack_resumes_exactly(tiny_demos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped at its third update (after the checkpoint of update 2), the stack resumes to what it gives
    uninterrupted; a resume with another config is refused naming the field."""
    whole = train_stacked(configs(tiny_demos, tmp_path / "a"), tmp_path / "a" / "shared", device="cpu")
    forward, calls = StackedMSVAE.forward, []

    def stop_at_third(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(StackedMSVAE, "forward", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        train_stacked(configs(tiny_demos, tmp_path / "b"), tmp_path / "b" / "shared", device="cpu")
    monkeypatch.setattr(StackedMSVAE, "forward", forward)
    with pytest.raises(ValueError, match=r"learning_rate: 0\.001 there, 0\.5 here"):
        train_stacked(configs(tiny_demos, tmp_path / "b", resume=True, learning_rate=0.5), tmp_path / "b" / "shared",
                      device="cpu")
    resumed = train_stacked(configs(tiny_demos, tmp_path / "b", resume=True), tmp_path / "b" / "shared",
                            device="cpu")
    for seed, ours, theirs in zip(SEEDS, resumed, whole):
        assert [h for h in ours["history"]] == [h for h in theirs["history"]]
        a = load_file(tmp_path / "a" / f"seed{seed}" / "best" / "model.safetensors")
        b = load_file(tmp_path / "b" / f"seed{seed}" / "best" / "model.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a)
    a = torch.load(next((tmp_path / "a" / "shared" / "checkpoints").iterdir()) / "stack.pt", weights_only=True)
    b = torch.load(next((tmp_path / "b" / "shared" / "checkpoints").iterdir()) / "stack.pt", weights_only=True)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    state = json.loads(next((tmp_path / "b" / "shared" / "checkpoints").iterdir()).joinpath(
        "train_state.json").read_text())
    assert state["step"] == TINY_TRAIN["max_updates"] and state["seeds"] == list(SEEDS)


def test_bad_stacks_are_refused(tiny_demos: Path, tmp_path: Path) -> None:
    cfgs = configs(tiny_demos, tmp_path)
    with pytest.raises(ValueError, match=r"differs from run 0's in \['learning_rate'\]"):
        check_stack([cfgs[0], load_config(None, {**cfgs[1].__dict__, "learning_rate": 0.5})])
    with pytest.raises(ValueError, match="own seed"):
        check_stack([cfgs[0], load_config(None, {**cfgs[0].__dict__, "output_dir": str(tmp_path / "x")})])
    with pytest.raises(ValueError, match="trains MS-VAE runs"):
        check_stack([load_config(None, {**c.__dict__, "model_type": "follower"}) for c in cfgs])
    with pytest.raises(ValueError, match="fp32"):
        check_stack([load_config(None, {**c.__dict__, "mixed_precision": "bf16"}) for c in cfgs])
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train_stacked([load_config(None, {**c.__dict__, "resume": True}) for c in cfgs], tmp_path / "none")
    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "results.json").write_text("{}")
    with pytest.raises(FileExistsError, match="seed0 is not empty"):
        train_stacked(cfgs, tmp_path / "shared")
    assert (tmp_path / "seed0" / "results.json").read_text() == "{}"


def test_the_script_trains_a_stack(tiny_demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "train_stacked.py"
    spec = importlib.util.spec_from_file_location("train_stacked_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    flags = ["--demos", str(tiny_demos), "--max-updates", "2", "--checkpoint-every", "2", "--eval-every", "2",
             "--batch-size", "8", "--eval-episodes", "4", "--eval-batch-size", "4", "--bleu-examples", "8",
             "--test-episodes", "4", "--threads", "1", "--device", "cpu",
             *[a for k, v in TINY_MODEL.items() for a in (f"--model.{k}", str(v))]]
    outs = [str(tmp_path / "s1"), str(tmp_path / "s2")]
    script.main(["--seeds", "1", "2", "--output-dirs", *outs, "--stack-dir", str(tmp_path / "stack"), *flags])
    assert all((Path(o) / "results.json").is_file() for o in outs)
    assert "stack_dir" in capsys.readouterr().out
    assert (Path(outs[0]) / "command.txt").read_text().startswith("python scripts/train_stacked.py --seeds 1 2")
    with pytest.raises(SystemExit):
        script.main(["--seeds", "1", "2", "--output-dirs", outs[0], "--stack-dir", str(tmp_path / "x"), *flags])
    assert "one folder per seed: 2 seeds, 1 folders" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
