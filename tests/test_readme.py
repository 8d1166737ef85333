"""The commands of README.md and docs/ run as written: every script exists, every flag is one its --help lists,
every config a command names loads (with its overrides), and the Python example uses names that exist."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import load_script

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SPAN = re.compile(r"`((?:python|accelerate\s+launch|bash)\s[^`]+)`")  # a span may wrap at any space


def commands() -> list[tuple[str, str]]:
    """(document, command) for every ``python ...``, ``accelerate launch ...`` or ``bash ...`` in a code span or
    a bash block of the documents (comments and shell continuations removed)."""
    found = []
    for doc in DOCUMENTS:
        text = doc.read_text()
        blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
        lines = [line.split(" #")[0].strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        spans = [" ".join(span.split()) for span in SPAN.findall(re.sub(r"```.*?```", "", text, flags=re.DOTALL))]
        for command in [*lines, *spans]:
            if command.startswith(("python ", "accelerate launch ", "bash ")) and re.search(
                    r"\.(py|sh)\b|^python -m ", command):  # a command, not prose naming a tool
                found.append((doc.relative_to(REPO).as_posix(), command))
    return found


@cache
def help_text(script: str) -> str:
    """``script --help``: in this process where the script imports here (fast), else in a subprocess."""
    path = REPO / script
    spec = importlib.util.spec_from_file_location(f"doc_command_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    out, argv = io.StringIO(), sys.argv
    try:
        spec.loader.exec_module(module)
        sys.argv = [str(path), "--help"]
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            module.main()
        return out.getvalue()
    except ImportError:
        result = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, f"{script} --help failed: {result.stderr[-2000:]}"
        return result.stdout
    finally:
        sys.argv = argv


def script_and_args(command: str) -> tuple[str, list[str]]:
    words = shlex.split(command)
    if words[:2] == ["accelerate", "launch"]:
        words = words[2:]
        while words and words[0].startswith("--"):  # accelerate's own options
            words = words[1:] if "=" in words[0] or words[0] in ("--cpu",) else words[2:]
        return words[0], words[1:]
    return words[1], words[2:]


COMMANDS = commands()


def test_documents_have_commands():
    assert any(cmd.startswith("bash scripts/quickstart.sh") for _, cmd in COMMANDS)
    assert any(cmd.startswith("bash scripts/run_tests.sh") for _, cmd in COMMANDS)
    assert any("scripts/train.py" in cmd for _, cmd in COMMANDS)


@pytest.mark.parametrize(("document", "command"), COMMANDS, ids=[f"{d}: {c[:60]}" for d, c in COMMANDS])
def test_command_runs_as_written(document, command):
    if command.startswith("python -m "):
        module = shlex.split(command)[2]
        assert importlib.util.find_spec(module) is not None, f"{document}: no module {module}"
        return
    script, args = script_and_args(command)
    assert (REPO / script).is_file(), f"{document}: {script} does not exist"
    if command.startswith("bash "):
        return
    if script == "scripts/train.py":  # the whole command line must make a valid TrainConfig
        from msvae_hf.training.train_config import load_config

        path, overrides = load_script("train").parse_args(args)
        cfg = load_config(path, overrides)
        assert cfg.model_type in ("follower", "speaker", "msvae")
        return
    text = help_text(script)
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        assert re.search(rf"(^|[\s\[,]){re.escape(flag)}\b", text), f"{document}: {script} has no flag {flag}"


def test_readme_python_example_names_exist():
    """Every ``from msvae_hf... import X`` and attribute the README's example calls exists."""
    code = re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL).group(1)
    for module, names in re.findall(r"from (msvae_hf[\w.]*) import ([\w, ]+)", code):
        imported = importlib.import_module(module)
        for name in names.split(","):
            assert hasattr(imported, name.strip()), f"{module} has no {name.strip()}"
    from msvae_hf.models.modeling_msvae import MSVAEModel

    for method in ("generate", "policy", "from_baselines", "from_pretrained"):
        assert hasattr(MSVAEModel, method)


@pytest.mark.parametrize("command", [
    "python scripts/evaluate.py --model x --levle BossLocal",
    "python scripts/train.py --config configs/msvae.yaml --level BossLocal --model.gama 1",
    "python scripts/train.py --config configs/nowhere.yaml",
    "bash scripts/nothing.sh",
])
def test_a_wrong_command_is_caught(command):
    with pytest.raises((AssertionError, ValueError, FileNotFoundError, SystemExit)):
        test_command_runs_as_written("README.md", command)
