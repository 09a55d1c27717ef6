"""Shared fixtures: the offline tiny tokenizer is built once per session."""

from __future__ import annotations

import psutil
import pytest


def ray_processes(marker: str) -> list[psutil.Process]:
    """Processes whose command line names ``marker`` (a run's own Ray temp dir)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rlvr.tiny_model import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The offline tiny random model (rlvr/tiny_model.py), built once per session."""
    from rlvr.tiny_model import build_model

    return build_model(tmp_path_factory.mktemp("models") / "tiny")
