"""conftest.run_bounded, which every Ray e2e test launches through: one retry when Ray's worker
failed to register with its raylet, and none for any other failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import RAY_START_FAILURE, run_bounded


def _fails_once(tmp_path: Path, message: str) -> list[str]:
    """A command that prints ``message`` and exits 1 the first time, then exits 0."""
    marker = tmp_path / "ran"
    script = (
        f'if [ -e {marker} ]; then echo second; else touch {marker}; echo "{message}"; exit 1; fi'
    )
    return ["bash", "-c", script]


def test_a_ray_start_failure_is_run_again(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="ran it again"):
        output = run_bounded(_fails_once(tmp_path, RAY_START_FAILURE), dict(os.environ), 30)
    assert "second" in output


def test_negative_control_any_other_failure_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="some other error"):
        run_bounded(_fails_once(tmp_path, "some other error"), dict(os.environ), 30)
