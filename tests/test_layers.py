"""The architecture in rlvr/__init__.py, enforced: each sub-package imports only the layers
below it (lazy imports inside functions included), and rewards/ imports no rlvr at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    "common",
    "data",
    "tasks",
    "models",
    "config",
    "cpu",
    "report",
    "planning",
    "tinker",
    "preflight",
    "train",
    "rehearsal",
    "evaluation",
    "sweep",
]


def _rlvr_imports(path: Path) -> set[str]:
    """The rlvr sub-packages a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "rlvr" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


def upward_imports(package_root: Path) -> list[str]:
    problems = []
    for layer in LAYERS:
        for module in sorted((package_root / layer).rglob("*.py")):
            for imported in _rlvr_imports(module):
                if LAYERS.index(imported) > LAYERS.index(layer):
                    problems.append(f"{module.relative_to(package_root)} imports rlvr.{imported}")
    return problems


def test_every_module_belongs_to_a_layer() -> None:
    flat = [p.name for p in (ROOT / "rlvr").glob("*.py") if p.name != "__init__.py"]
    assert flat == []
    packages = {p.name for p in (ROOT / "rlvr").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS)


def test_imports_only_go_downward() -> None:
    assert upward_imports(ROOT / "rlvr") == []


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """Negative control: a data module importing the eval layer is reported."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    (tmp_path / "data" / "bad.py").write_text("def f():\n    from rlvr.evaluation import runs\n")
    assert upward_imports(tmp_path) == ["data/bad.py imports rlvr.evaluation"]


@pytest.mark.parametrize("path", sorted((ROOT / "rewards").glob("*.py")), ids=lambda p: p.name)
def test_rewards_import_no_rlvr(path: Path) -> None:
    assert not any(
        isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            (getattr(node, "module", None) or alias.name).startswith("rlvr") for alias in node.names
        )
        for node in ast.walk(ast.parse(path.read_text()))
    )
