"""Shared fixtures: the offline tiny tokenizer is built once per session."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


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


def run_bounded(
    cmd: list[str], env: dict[str, str], timeout_s: float, ray_tmp: str | None = None
) -> str:
    """Run ``cmd`` from the repo root in its own process group with a hard timeout, and
    require exit 0. With ``ray_tmp`` (the run's own Ray temp dir), no process of that Ray
    instance may remain afterwards; stragglers, and only they, are killed."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{cmd[:3]} exceeded {timeout_s} s:\n{output[-4000:]}")
    if ray_tmp is not None:
        deadline = time.monotonic() + 60
        while ray_processes(ray_tmp) and time.monotonic() < deadline:
            time.sleep(1)
        leftovers = ray_processes(ray_tmp)
        for leftover in leftovers:
            leftover.kill()
        assert not leftovers, f"Ray processes left behind: {[p.pid for p in leftovers]}"
    assert proc.returncode == 0, output[-6000:]
    return output


def wandb_records(run_file: Path) -> Iterator[tuple[str, Any]]:
    """(record type, record) for every record of an offline wandb run file."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    store = datastore.DataStore()
    store.open_for_scan(str(run_file))
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        yield record.WhichOneof("record_type"), record


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from rlvr.tiny_model import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The offline tiny random model (rlvr/tiny_model.py), built once per session."""
    from rlvr.tiny_model import build_model

    return build_model(tmp_path_factory.mktemp("models") / "tiny")
