"""docs/design.md stays true: every `file:name` it cites exists, and the package's imports follow its floors."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
REFERENCE = re.compile(r"`((?:msvae_hf|tests)/[\w/]+\.py):([\w.]+)`")
FILE = re.compile(r"`((?:msvae_hf|tests)/[\w/]+\.py)`")
FLOOR = re.compile(r"^floor (\d+)\s+(.+)$", re.MULTILINE)


def defined_names(path: Path) -> set[str]:
    """Module-level functions, classes and assignments of a file, and ``Class.member`` for each class member."""
    names: set[str] = set()

    def assigned(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        return []

    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names.update(assigned(node))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(f"{node.name}.{item.name}")
                names.update(f"{node.name}.{name}" for name in assigned(item))
    return names


def relative_imports(path: Path) -> set[str]:
    """The package files that ``path`` imports relatively, at the top or inside a function (repository paths)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.ImportFrom) and node.level):
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            base = base.joinpath(*node.module.split("."))
        if base.with_suffix(".py").is_file():
            targets = [base.with_suffix(".py")]
        else:  # `from .package import module`
            targets = [base / f"{alias.name}.py" for alias in node.names]
        found.update(t.relative_to(REPO).as_posix() for t in targets if t.is_file())
    return found


def test_every_cited_function_exists() -> None:
    references = REFERENCE.findall(DOC)
    assert len(references) > 60
    missing = [f"{file}:{name}" for file, name in references
               if not (REPO / file).is_file() or name not in defined_names(REPO / file)]
    assert not missing, missing
    files = FILE.findall(DOC)
    assert [file for file in files if not (REPO / file).is_file()] == []


def test_every_equation_is_mapped() -> None:
    table = DOC.split("## Paper to code", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ")[0].strip("| ") for line in table.splitlines() if line.startswith("| ")]
    for section in [*(f"Eq. {n}" for n in range(1, 9)), "Eq. 9 (App. A)", "Eq. 10", "Sec. 2.2", "Sec. 3.2",
                    "App. A", "App. B", "App. C", "App. D"]:
        assert section in rows, section


def test_imports_follow_the_floors() -> None:
    floors = {path: int(n) for n, paths in FLOOR.findall(DOC) for path in paths.split()}
    modules = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "msvae_hf").rglob("*.py")
                     if p.name != "__init__.py")
    assert sorted(floors) == modules  # every module on exactly one floor
    upward = [f"{path} (floor {floor}) imports {target} (floor {floors[target]})"
              for path, floor in floors.items() for target in relative_imports(REPO / path)
              if floors[target] >= floor]
    assert not upward, upward


def test_cites_nothing_outside_the_repository() -> None:
    assert "shared/" not in DOC and "/work/" not in DOC and "http" not in DOC


#: What msvae_hf/training/loop.py is imported for: the loop and its steps, never a utility (those live in runtime.py,
#: run_folder.py, train_config.py, data/sampler.py).
TRAINING_EXPORTS = {"train", "build_model", "load_training_data"}


def test_training_is_imported_for_the_loop_only() -> None:
    imported: dict[str, set[str]] = {}
    for folder in ("msvae_hf", "scripts", "experiments", "benchmarks", "tests"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                package = path.parents[node.level - 1] if isinstance(node, ast.ImportFrom) and node.level else None
                if isinstance(node, ast.ImportFrom) and (node.module == "msvae_hf.training.loop" or (
                        node.module == "training" and package == REPO / "msvae_hf")):
                    imported.setdefault(path.relative_to(REPO).as_posix(), set()).update(a.name for a in node.names)
    assert imported  # the scripts do import it
    stray = {path: sorted(names - TRAINING_EXPORTS) for path, names in imported.items() if names - TRAINING_EXPORTS}
    assert not stray, f"utilities imported from msvae_hf/training/loop.py: {stray}"
