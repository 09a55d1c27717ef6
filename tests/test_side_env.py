"""rlvr/common/side_env.py: an environment beside the project's, built once, rebuilt when half
built, and reaching the project's torch without installing one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rlvr.common import side_env


def test_the_path_follows_the_pins_and_the_override(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("RLVR_X_ENV", raising=False)
    first = side_env.side_env_dir("x-1", b"a==1\n", "RLVR_X_ENV")
    assert first.parent == tmp_path / "rlvr-recipes" and first.name.startswith("x-1-")
    assert side_env.side_env_dir("x-1", b"a==2\n", "RLVR_X_ENV") != first  # new pins, new env
    monkeypatch.setenv("RLVR_X_ENV", str(tmp_path / "mine"))
    assert side_env.side_env_dir("x-1", b"a==1\n", "RLVR_X_ENV") == tmp_path / "mine"


def test_built_once_rebuilt_when_half_built_and_reaches_the_projects_torch(tmp_path: Path) -> None:
    venv = tmp_path / "env"
    python = side_env.ensure_side_env(venv, [], "nothing==0")  # uv venv alone: no download
    assert side_env.is_built(venv)
    code = "import torch, sys; print(torch.__file__, sys.prefix)"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    where = done.stdout.split()
    assert where[1] == str(venv) and not where[0].startswith(str(venv))  # the project's torch
    planted = venv / "planted"
    planted.write_text("")
    side_env.ensure_side_env(venv, [], "nothing==0")
    assert planted.exists()  # built: left alone
    (venv / side_env.READY_MARKER).unlink()  # half built (the marker is written last)
    side_env.ensure_side_env(venv, [], "nothing==0")
    assert not planted.exists() and side_env.is_built(venv)  # built again from scratch


def test_a_failed_install_leaves_it_unbuilt(tmp_path: Path) -> None:
    venv = tmp_path / "env"
    with pytest.raises(subprocess.CalledProcessError):
        side_env.ensure_side_env(venv, [["--offline", "no-such-package-rlvr==9.9.9"]], "x")
    assert not side_env.is_built(venv)
