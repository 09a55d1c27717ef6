"""Shared fixtures: the offline tiny tokenizer is built once per session."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from rlvr.common import processes
from rlvr.train.rehearsal_checks import wandb_records

__all__ = ["run_bounded", "wandb_records"]

ROOT = Path(__file__).resolve().parents[1]


def run_bounded(
    cmd: list[str], env: dict[str, str], timeout_s: float, ray_tmp: str | None = None
) -> str:
    """Run ``cmd`` from the repo root in its own process group with a hard timeout, and
    require exit 0. With ``ray_tmp`` (the run's own Ray temp dir), no process of that Ray
    instance may remain afterwards; stragglers, and only they, are killed."""
    with tempfile.TemporaryDirectory() as folder:
        done = processes.run_bounded(cmd, env, timeout_s, ROOT, Path(folder) / "output.log")
    if done.returncode == 124:
        pytest.fail(f"{cmd[:3]} exceeded {timeout_s} s:\n{done.output[-4000:]}")
    if ray_tmp is not None:
        leftovers = processes.reap([ray_tmp])
        assert not leftovers, f"Ray processes left behind: {leftovers}"
    assert done.returncode == 0, done.output[-6000:]
    return done.output


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rlvr.models.tiny import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The offline tiny random model (rlvr/models/tiny.py), built once per session."""
    from rlvr.models.tiny import build_model

    return build_model(tmp_path_factory.mktemp("models") / "tiny")
