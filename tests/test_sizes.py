"""The size limits of the style guide, enforced on the shipped code (rlvr/, scripts/,
benchmarks/, rewards/): no module over 400 lines, no function over 60. Tests are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("rlvr", "scripts", "benchmarks", "rewards")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def oversized(root: Path) -> list[str]:
    """Every module and function under ``root`` over its limit, as 'path[:line] name: N lines'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(root.parent)
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_shipped_code_is_within_the_size_limits() -> None:
    problems = [p for folder in SHIPPED for p in oversized(ROOT / folder)]
    assert problems == [], "\n".join(problems)


def test_the_check_finds_an_oversized_module_and_function(tmp_path: Path) -> None:
    """Negative control: a 401-line module holding a 61-line function."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    module = tmp_path / "pkg" / "big.py"
    module.parent.mkdir()
    module.write_text("def long():\n" + body + "\n" + "\n" * (400 - 61) + "# end\n")
    assert oversized(tmp_path / "pkg") == ["pkg/big.py: 401 lines", "pkg/big.py:1 long: 61 lines"]
