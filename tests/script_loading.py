"""Running and importing the repository's scripts from tests: one copy of the boilerplate."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_file_module(name: str, path: Path) -> ModuleType:
    """A script or benchmark (not a package module) imported by path, for in-process tests."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered first, as importlib's recipe does: dataclasses look their module up there
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_quickstart(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``bash scripts/quickstart.sh ARGS`` from the repository root, output captured."""
    return subprocess.run(
        ["bash", "scripts/quickstart.sh", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
