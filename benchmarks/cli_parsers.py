"""Which command-line parser can read the training scripts' command line: the package's own and three maintained ones.

    pip install tyro jsonargparse draccus   # the candidates; one that is missing is reported as such
    python benchmarks/cli_parsers.py [--out results/benchmarks/cli_parsers.json]

The command line is a contract that README, the configs, the studies' commands (`experiments/cells.py`) and every
recorded `command.txt` rely on. Each case below is one of its promises, a command line and the TrainConfig fields it
must give (or an error it must raise); each parser is driven the way its documentation shows for a dataclass with a
config file (tyro: the file's values as the default instance; jsonargparse: `ActionConfigFile` and
`add_class_arguments`; draccus: `draccus.parse` with `config_path`), and a case passes where the fields come out equal.
No case is bent towards a parser, and no parser is patched: where one fails, the record says what it gave instead.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import io
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import write_report

from msvae_hf.training.train_config import TrainConfig, load_config, parse_train_args, train_arg_parser

#: The config file of the cases (CONFIG_PATH), and one whose `base:` names it (CHILD_PATH).
CONFIG = "model_type: msvae\nmax_updates: 500\noutput_dir: runs/{level}/msvae\nmodel:\n  alpha: 0.5\n  gamma: 1\n"
CHILD = "base: config.yaml\nbatch_size: 64\nmodel:\n  gamma: 0\n"

#: (name, what it promises, argv with CONFIG_PATH for the file, expected fields or "error").
CASES: list[tuple[str, str, list[str], dict[str, Any] | str]] = [
    ("dashed_flag", "a field's flag is spelt with dashes, as README's commands do",
     ["--max-updates", "200"], {"max_updates": 200}),
    ("file_value_kept", "a config file's value holds where no flag is given",
     ["--config", "CONFIG_PATH", "--level", "BossLocal"], {"max_updates": 500}),
    ("flag_over_file", "a flag overrides the file's value, wherever it stands on the line",
     ["--max-updates", "100", "--config", "CONFIG_PATH", "--level", "BossLocal"], {"max_updates": 100}),
    ("base_chain", "a config file's `base:` names another whose values it overrides, the model's key by key",
     ["--config", "CHILD_PATH", "--level", "BossLocal"],
     {"batch_size": 64, "max_updates": 500, "model": {"alpha": 0.5, "gamma": 0}}),
    ("level_placeholder", "`{level}` in a file's text value stands for the level's folder",
     ["--config", "CONFIG_PATH", "--level", "GoToSeqLocal"], {"output_dir": "runs/gotoseqlocal/msvae"}),
    ("model_key_number", "`--model.KEY VALUE` reaches the model config, any of its fields, the value as YAML",
     ["--model.gamma", "0"], {"model": {"gamma": 0}}),
    ("model_key_text_and_bool", "the same for text and booleans (the studies' follower flags)",
     ["--model.follower_conditioning", "film", "--model.previous_action_input", "false"],
     {"model": {"follower_conditioning": "film", "previous_action_input": False}}),
    ("model_key_over_file", "`--model.KEY` overrides that key of the file's model mapping and keeps the others",
     ["--config", "CONFIG_PATH", "--level", "BossLocal", "--model.gamma", "0"],
     {"model": {"alpha": 0.5, "gamma": 0}}),
    ("no_flag", "a boolean is `--resume` / `--no-resume`",
     ["--resume"], {"resume": True}),
    ("no_flag_off", "and off with `--no-`",
     ["--no-validate-reading"], {"validate_reading": False}),
    ("text_stays_text", "a text field takes the text as typed (`--mixed-precision no` is not YAML's false)",
     ["--mixed-precision", "no"], {"mixed_precision": "no"}),
    ("yaml_value", "a value is read as YAML (`--num-paired 1e3` is not a valid int, `--num-paired 1000` is)",
     ["--num-paired", "1000"], {"num_paired": 1000}),
    ("misspelt_flag", "a misspelt flag is an error, also where it is the start of a real one",
     ["--max-update", "5"], "error"),
]


def _write_configs(folder: Path) -> dict[str, str]:
    (folder / "config.yaml").write_text(CONFIG)
    (folder / "child.yaml").write_text(CHILD)
    return {"CONFIG_PATH": str(folder / "config.yaml"), "CHILD_PATH": str(folder / "child.yaml")}


def ours(argv: list[str]) -> dict[str, Any]:
    """The package's parser (msvae_hf.training.train_config), as scripts/train.py runs it."""
    args, overrides = parse_train_args(train_arg_parser(), argv)
    return dataclasses.asdict(load_config(args.config, overrides))


def _split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """(--config's value, the rest): for the parsers that take the file's values as their defaults."""
    if "--config" not in argv:
        return None, argv
    i = argv.index("--config")
    return argv[i + 1], argv[:i] + argv[i + 2:]


def with_tyro(argv: list[str]) -> dict[str, Any]:
    """tyro: the file's values (read as YAML, its documented route) as the default instance."""
    import tyro
    import yaml

    path, rest = _split_config(argv)
    default = TrainConfig(**(yaml.safe_load(Path(path).read_text()) if path else {}))
    return dataclasses.asdict(tyro.cli(TrainConfig, args=rest, default=default))


def with_jsonargparse(argv: list[str]) -> dict[str, Any]:
    """jsonargparse: `--config` as an ActionConfigFile, the fields by add_class_arguments."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_class_arguments(TrainConfig, nested_key=None, as_group=False)
    namespace = parser.parse_args(argv)
    values = namespace.as_dict()
    values.pop("config", None)
    return dataclasses.asdict(TrainConfig(**values))


def with_draccus(argv: list[str]) -> dict[str, Any]:
    """draccus: draccus.parse with the file as config_path."""
    import draccus

    path, rest = _split_config(argv)
    return dataclasses.asdict(draccus.parse(TrainConfig, config_path=path, args=rest))


PARSERS: dict[str, Callable[[list[str]], dict[str, Any]]] = {
    "ours": ours, "tyro": with_tyro, "jsonargparse": with_jsonargparse, "draccus": with_draccus,
}


def run_case(parse: Callable[[list[str]], dict[str, Any]], argv: list[str],
             expected: dict[str, Any] | str) -> dict[str, Any]:
    """One case: passed, and what the parser gave (the fields that differ, or its error's first line)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            got = parse(argv)
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (every parser fails in its own way; record it)
        detail = (str(exc) if not isinstance(exc, SystemExit) else err.getvalue()).strip().splitlines()
        return {"passed": expected == "error", "gave": f"{type(exc).__name__}: {detail[-1] if detail else ''}"[:300]}
    if expected == "error":
        return {"passed": False, "gave": "no error"}
    wrong = {key: got.get(key) for key, value in expected.items() if got.get(key) != value}
    return {"passed": not wrong, **({"gave": wrong} if wrong else {})}


def field_help_shown(name: str) -> bool | None:
    """Whether a parser's --help shows a field's documentation (``option(doc=...)``), tried on --max-updates."""
    doc = next(f.metadata["doc"] for f in dataclasses.fields(TrainConfig) if f.name == "max_updates")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            PARSERS[name](["--help"])
    except (Exception, SystemExit):  # noqa: BLE001
        pass
    return " ".join(doc.split()[:4]) in " ".join(out.getvalue().split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/benchmarks/cli_parsers.json")
    args = parser.parse_args()
    result: dict[str, Any] = {"cases": {name: promise for name, promise, _, _ in CASES}, "parsers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        paths = _write_configs(Path(tmp))
        for name, parse in PARSERS.items():
            try:
                version = importlib.metadata.version(name) if name != "ours" else "-"
            except importlib.metadata.PackageNotFoundError:  # not installed
                result["parsers"][name] = {"installed": False}
                continue
            cases = {case: run_case(parse, [paths.get(a, a) for a in argv], expected)
                     for case, _, argv, expected in CASES}
            result["parsers"][name] = {"version": version, "passed": sum(c["passed"] for c in cases.values()),
                                       "of": len(cases), "help_shows_field_docs": field_help_shown(name),
                                       "cases": cases}
    write_report(result, args.out)


if __name__ == "__main__":
    main()
