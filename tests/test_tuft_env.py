"""rlvr/tinker/tuft_env.py and scripts/tuft_env.py: the one builder of TuFT's CPU test-mode
environment, which the Tinker tests start its server from."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import tuft_server
from script_loading import load_file_module

from rlvr.tinker import tuft_env

ROOT = Path(__file__).resolve().parents[1]


def test_the_tests_start_tuft_from_the_one_builder() -> None:
    assert tuft_server.ensure_env is tuft_env.ensure_env


def test_the_environment_is_named_by_its_pins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("RLVR_TUFT_ENV", raising=False)
    named = tuft_env.env_dir()
    assert named.name.startswith("tuft-0.2.2-") and named.parent.name == "rlvr-recipes"
    pins = tmp_path / "pins.txt"
    pins.write_bytes(tuft_env.REQUIREMENTS.read_bytes() + b"one-more==1\n")
    monkeypatch.setattr(tuft_env, "REQUIREMENTS", pins)
    assert tuft_env.env_dir() != named  # other pins, another environment
    monkeypatch.setenv("RLVR_TUFT_ENV", str(tmp_path / "mine"))
    assert tuft_env.env_dir() == tmp_path / "mine"


def test_a_failed_build_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail() -> Path:
        raise subprocess.CalledProcessError(2, ["uv", "pip", "install"])

    monkeypatch.setattr(tuft_env, "ensure_env", fail)
    assert load_file_module("tuft_env_script", ROOT / "scripts/tuft_env.py").main([]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("tuft_env: cannot build tuft==0.2.2's environment: Command ")
