"""pyproject.toml's ``--dist loadgroup`` sends an ``xdist_group``'s tests to one worker (the slow
tests, one at a time; a module whose fixture starts processes, once). A pytest release can stop
that silently (pytest 9.2: https://github.com/pytest-dev/pytest-xdist/issues/1386), so it is
checked here on generated tests, with the installed pytest and xdist."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

GENERATED = textwrap.dedent(
    """
    import time

    import pytest

    @pytest.mark.xdist_group("together")
    @pytest.mark.parametrize("i", range(6))
    def test_grouped(i):
        time.sleep(0.05)

    @pytest.mark.parametrize("i", range(6))
    def test_free(i):
        time.sleep(0.05)
    """
)


def _workers(folder: Path, dist: str) -> dict[str, set[str]]:
    """Each generated test function -> the xdist workers that ran its cases."""
    (folder / "test_generated.py").write_text(GENERATED)
    options = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-o", "addopts="]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", dist, "-v", *options, str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"\[(gw\d+)\] .*PASSED .*::(test_\w+)\[", line)
        if match:
            found.setdefault(match.group(2), set()).add(match.group(1))
    return found


def test_a_groups_tests_run_on_one_worker(tmp_path: Path) -> None:
    """With pytest 9.2 the six cases ran on both workers (checked by hand: the negative control
    needs another pytest installed, and a "--dist load" run only shows the parsing works)."""
    assert len(_workers(tmp_path, "loadgroup")["test_grouped"]) == 1
