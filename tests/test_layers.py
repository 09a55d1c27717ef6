"""The architecture in rlvr/__init__.py, enforced: each sub-package imports only the layers
below it (lazy imports inside functions included), no two modules import each other (directly or
through others), and rewards/ imports no rlvr at all."""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Sequence
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


def _imported_names(path: Path) -> list[str]:
    """Every absolute module name a file imports, anywhere in it (``from a import b`` gives both
    ``a`` and ``a.b``: b may be a module)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _rlvr_imports(path: Path) -> set[str]:
    """The rlvr sub-packages a module imports, anywhere in it."""
    parts = (name.split(".") for name in _imported_names(path))
    return {p[1] for p in parts if p[0] == "rlvr" and len(p) > 1 and p[1] in LAYERS}


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


#: Every folder of the house's Python: packages (dotted names under the folder's own name) and
#: folders of scripts, whose bare imports reach the files beside them (python puts a script's
#: folder first on sys.path; pytest does the same for tests/).
PACKAGES = ("rlvr", "rewards")
SCRIPT_FOLDERS = ("benchmarks", "scripts", "tests")


def module_graph(packages: Sequence[Path], script_folders: Sequence[Path]) -> dict[str, set[str]]:
    """Which module imports which (lazy imports included). A package's ``__init__`` stands for
    the package, and a module importing its own package (for ``from rlvr.x import y``) is no
    edge; a script is named ``folder/stem``, and its bare ``import stem`` is the file beside it
    when there is one."""
    modules: dict[str, Path] = {}
    for root in packages:
        for path in root.rglob("*.py"):
            parts = (root.name, *path.relative_to(root).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for folder in script_folders:
        modules.update({f"{folder.name}/{path.stem}": path for path in folder.glob("*.py")})
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imported_names(path):
            beside = f"{path.parent.name}/{imported.split('.')[0]}"
            if "/" in name and beside in modules:
                imported = beside
            while imported and imported not in modules:  # rlvr.a.b.func -> rlvr.a.b
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(f"{imported}."):
                targets.add(imported)
        graph[name] = targets
    return graph


def module_cycle(
    packages: Sequence[Path], script_folders: Sequence[Path] = ()
) -> tuple[str, ...] | None:
    """A cycle in the graph of which module imports which, or None."""
    try:
        graphlib.TopologicalSorter(module_graph(packages, script_folders)).prepare()
    except graphlib.CycleError as exc:
        return tuple(exc.args[1])
    return None


def test_no_two_modules_import_each_other() -> None:
    """rlvr/, rewards/, and the scripts of benchmarks/, scripts/ and tests/, in one graph."""
    cycle = module_cycle([ROOT / p for p in PACKAGES], [ROOT / f for f in SCRIPT_FOLDERS])
    assert cycle is None


def test_an_import_cycle_is_caught(tmp_path: Path) -> None:
    """Negative control: a lazy import back closes a circle through a third module."""
    package = tmp_path / "rlvr"
    (package / "report").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "report" / "__init__.py").write_text("")
    (package / "report" / "bands.py").write_text("from rlvr.report.throughput import lines\n")
    (package / "report" / "throughput.py").write_text("from rlvr.report import plan\n")
    (package / "report" / "plan.py").write_text("def f():\n    from rlvr.report.bands import x\n")
    assert module_cycle([package]) is not None
    (package / "report" / "plan.py").write_text("def f():\n    from rlvr.common import x\n")
    assert module_cycle([package]) is None


def test_a_cycle_between_two_scripts_is_caught(tmp_path: Path) -> None:
    """Negative control: the shape benchmarks/ had (bench_grpo_vs_trl imported bench_train_cpu
    at its top, which imported it back inside a function); a same-named module in another
    folder is not the one beside it: no circle."""
    scripts, other = tmp_path / "benchmarks", tmp_path / "scripts"
    scripts.mkdir()
    other.mkdir()
    (scripts / "bench_a.py").write_text("import bench_b as b\nimport rlvr.common\n")
    (scripts / "bench_b.py").write_text("def main():\n    from bench_a import DATA\n")
    assert module_cycle([], [scripts, other]) is not None
    (scripts / "bench_b.py").write_text("def main():\n    from helper import DATA\n")
    (other / "helper.py").write_text("import bench_b\n")  # the bench_b beside it, in scripts/
    (other / "bench_b.py").write_text("")
    assert module_cycle([], [scripts, other]) is None
