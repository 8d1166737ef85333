"""The command line: installed entry points beside the scripts, help from TrainConfig's field docs, bool flags
both ways (issue 31, "command line")."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, load_script

from msvae_hf.training.train_config import TrainConfig, load_config, train_arg_parser

#: script name -> entry point name (setup.py's console_scripts).
TOOLS = {name: "msvae-" + name.replace("_", "-")
         for name in ("train", "make_demos", "evaluate", "label_unpaired", "keep_confident", "push_to_hub")}


def entry_point(name: str) -> importlib.metadata.EntryPoint:
    """The installed console script ``name`` (a clear failure when the package was installed without it)."""
    found = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == name]
    assert found, f"no console script {name}: run `pip install -e .`"
    return found[0]


def executable(name: str) -> str:
    """The installed console script's file: in this interpreter's scripts folder, else on PATH."""
    path = Path(sysconfig.get_path("scripts")) / name
    found = str(path) if path.is_file() else shutil.which(name)
    assert found, f"console script {name} is not installed: run `pip install -e .`"
    return found


def test_entry_points_are_installed_and_run() -> None:
    for script, name in TOOLS.items():
        assert entry_point(name).value == f"msvae_hf.cli.{script}:main"
    done = subprocess.run([executable("msvae-train"), "--help"], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: msvae-train ")
    assert "keep freed host memory for reuse" in " ".join(done.stdout.split())  # retain_freed_memory's doc
    assert "--no-retain-freed-memory" in done.stdout


def config_says(tmp_path: Path, **values: object) -> str:
    """A config file setting ``values`` (JSON, which YAML reads)."""
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(values))
    return str(path)


def parsed(argv: list[str]) -> TrainConfig:
    """The TrainConfig that ``scripts/train.py argv`` trains with."""
    config, overrides = load_script("train").parse_args(argv)
    return load_config(config, overrides)


def test_bool_flags_override_the_config_both_ways(tmp_path: Path) -> None:
    on = config_says(tmp_path, retain_freed_memory=True, resume=True)
    assert parsed(["--config", on, "--no-retain-freed-memory"]).retain_freed_memory is False
    cfg = parsed(["--config", on])  # no flag: the file's value
    assert cfg.retain_freed_memory is True and cfg.resume is True
    assert parsed(["--config", on, "--no-resume"]).resume is False
    off = config_says(tmp_path, retain_freed_memory=False)
    assert parsed(["--config", off, "--retain-freed-memory"]).retain_freed_memory is True
    assert parsed(["--config", off]).retain_freed_memory is False
    assert parsed([]).retain_freed_memory is True  # no file, no flag: TrainConfig's default


def test_a_flag_given_null_sets_its_field_to_none_and_one_not_given_keeps_the_files(tmp_path: Path) -> None:
    """``--num-paired null`` trains on every pair even where the config file names M; no flag keeps the file's M."""
    some = config_says(tmp_path, num_paired=1000, seed=3)
    assert parsed(["--config", some, "--num-paired", "null"]).num_paired is None
    assert parsed(["--config", some]).num_paired == 1000 and parsed(["--config", some]).seed == 3
    assert parsed(["--config", some, "--num-paired", "20"]).num_paired == 20
    given = config_says(tmp_path, init_from="runs/x/best", mixed_precision="bf16")  # text fields alike
    assert parsed(["--config", given, "--init-from", "null"]).init_from is None
    assert parsed(["--config", given, "--mixed-precision", "no"]).mixed_precision == "no"  # as typed, not YAML's


@pytest.mark.parametrize("flag", ["--num-paired", "--init-from"])
def test_an_empty_flag_value_is_refused_not_read_as_none(flag: str, capsys: pytest.CaptureFixture) -> None:
    """``--num-paired "$M"`` with M unset would train on every pair; it is the parser's error instead."""
    with pytest.raises(SystemExit):
        parsed([flag, ""])
    assert "an empty value: give one, or null for none" in capsys.readouterr().err


def test_a_misspelt_flag_is_refused_even_where_it_begins_a_real_one(capsys: pytest.CaptureFixture) -> None:
    """argparse would read `--max-update 5` as `--max-updates 5` (prefix matching); the training scripts refuse it,
    naming it (benchmarks/cli_parsers.py's `misspelt_flag` case)."""
    with pytest.raises(SystemExit):
        parsed(["--max-update", "5"])
    assert "--max-update" in capsys.readouterr().err
    assert parsed(["--max-updates", "5"]).max_updates == 5


def test_every_field_flag_has_help() -> None:
    from msvae_hf.training.train_config import field_docs

    actions = {action.dest: action for action in train_arg_parser()._actions}
    docs = field_docs()
    assert {f.name for f in dataclasses.fields(TrainConfig)} - {"model_type"} <= set(docs) | {"model"}  # all documented
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":  # --model.KEY VALUE, read by parse_train_args
            continue
        action = actions[f.name]
        assert action.help and action.help.strip(), f.name
        text = action.help % {}  # as argparse shows it (%% -> %)
        assert (docs.get(f.name) or f.type) in text and "default" in text, (f.name, text)
        if f.type == "bool":
            flag = "--" + f.name.replace("_", "-")
            assert set(action.option_strings) == {flag, flag.replace("--", "--no-", 1)}, action.option_strings
    assert "Adam" in actions["learning_rate"].help and "0.001" in actions["learning_rate"].help


def help_output(main: object, argv0: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``argv0 --help`` through ``main()`` reading sys.argv, as the script and the console script call it; the
    program name in the usage replaced by PROG and whitespace collapsed (argparse wraps it by the name's length)."""
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 0
    text, usage = out.getvalue(), f"usage: {Path(argv0).name} "
    assert text.startswith(usage), text[:80]
    return " ".join(("usage: PROG " + text[len(usage):]).split())


@pytest.mark.parametrize("script", sorted(TOOLS))
def test_script_and_entry_point_parse_the_same(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    shim, installed = load_script(script).main, entry_point(TOOLS[script]).load()
    assert shim is installed
    by_script = help_output(shim, str(REPO / "scripts" / f"{script}.py"), monkeypatch)
    assert by_script == help_output(installed, TOOLS[script], monkeypatch)
    assert "--help" in by_script


def test_entry_point_records_the_command_as_typed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from msvae_hf.cli.invocation import entry_point_command
    from msvae_hf.data.demos import regenerate_command

    monkeypatch.setattr(sys, "argv", ["/venv/bin/msvae-train", "--config", "a b.yaml"])
    assert entry_point_command(None) == "msvae-train --config 'a b.yaml'"
    assert entry_point_command(["--config", "x.yaml"]) is None  # main(argv) called in-process
    monkeypatch.setattr(sys, "argv", ["scripts/train.py", "--config", "x.yaml"])
    assert entry_point_command(None) is None
    command = "msvae-make-demos --level BossLocal --paired 2 --out data/x"
    (tmp_path / "stats.json").write_text(json.dumps({"command": command}))
    assert regenerate_command(tmp_path) == f"{command} --overwrite"
