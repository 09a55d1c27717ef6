"""conftest's ``extra`` marker: a test needing an optional extra (``uv sync --extra tinker``)
is skipped with the install line where the extra is missing, and fails instead under
scripts/test.sh, which syncs the extras and exports RLVR_REQUIRE_EXTRAS (CI runs it)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from conftest import REQUIRED_EXTRAS_ENV, missing_extra, pytest_runtest_setup
from test_ensure_uv import _fake_uv_env

ROOT = Path(__file__).resolve().parents[1]
ABSENT = "rlvr_no_such_module"  # a module no environment has
LINE = f"needs the tinker extra ({ABSENT} is not installed): uv sync --extra tinker"


def test_an_installed_module_is_not_missing() -> None:
    assert missing_extra("tinker", "json", "tinker") is None


def test_a_missing_module_skips_unless_its_extra_is_required() -> None:
    assert missing_extra("tinker", ABSENT, "") == (False, LINE)
    assert missing_extra("tinker", ABSENT, "gpu,tinker") == (True, LINE)
    assert missing_extra("tinker", ABSENT, "gpu") == (False, LINE)


def _item(*markers: pytest.MarkDecorator) -> object:
    marks = [m.mark for m in markers]
    return types.SimpleNamespace(
        iter_markers=lambda name: [m for m in marks if m.name == name],
        get_closest_marker=lambda name: next((m for m in marks if m.name == name), None),
    )


def test_the_hook_skips_then_fails_where_the_extra_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    item = _item(pytest.mark.extra("tinker", ABSENT))
    monkeypatch.delenv(REQUIRED_EXTRAS_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"uv sync --extra tinker$"):
        pytest_runtest_setup(item)  # type: ignore[arg-type]
    monkeypatch.setenv(REQUIRED_EXTRAS_ENV, "tinker")
    with pytest.raises(pytest.fail.Exception, match=r"uv sync --extra tinker$"):
        pytest_runtest_setup(item)  # type: ignore[arg-type]
    pytest_runtest_setup(_item(pytest.mark.extra("tinker", "json")))  # present: runs


def test_test_sh_requires_the_extras_it_synced(tmp_path: Path) -> None:
    """scripts/test.sh syncs --extra tinker and exports RLVR_REQUIRE_EXTRAS=tinker to pytest."""
    import subprocess

    env = _fake_uv_env(tmp_path, f'echo "$* | ${REQUIRED_EXTRAS_ENV}" >> {tmp_path / "seen"}')
    env.pop(REQUIRED_EXTRAS_ENV, None)
    done = subprocess.run(["bash", "scripts/test.sh", "-m", "not slow"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = (tmp_path / "seen").read_text().splitlines()
    assert "sync --locked --inexact --extra tinker --quiet | " in seen
    assert "run pytest --durations=30 -m not slow | tinker" in seen
