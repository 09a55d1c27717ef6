"""What verl's ray.init would do (rlvr/preflight/ray_cluster.py): pre-flight refuses a silent join
of a recorded cluster and an address nothing answers at; each refusal with a passing control."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.config.compose import compose
from rlvr.preflight.ray_cluster import ray_plan


@pytest.fixture
def listening() -> Iterator[str]:
    """An address where something accepts connections, as a live Ray GCS would."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _dead_address() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"127.0.0.1:{port}"


def test_ray_plan(tmp_path: Path, listening: str) -> None:
    config = compose("countdown_qwen3_4b")
    env = {"RAY_TMPDIR": str(tmp_path)}
    plan, problem = ray_plan(config, env)
    assert problem is None and "starting a local Ray" in plan  # control: nothing recorded
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray/ray_current_cluster").write_text(listening)
    _, problem = ray_plan(config, env)
    assert problem is not None and f"is running at {listening}" in problem
    assert "RAY_ADDRESS=auto" in problem and "_temp_dir" in problem
    plan, problem = ray_plan(config, {**env, "RAY_ADDRESS": "auto"})
    assert problem is None and f"joining the Ray cluster at {listening}" in plan
    own = compose("countdown_qwen3_4b", [f"+ray_kwargs.ray_init._temp_dir={tmp_path / 'own'}"])
    assert ray_plan(own, env)[1] is None  # its own temp dir: its own Ray
    (tmp_path / "ray/ray_current_cluster").write_text(_dead_address())
    _, problem = ray_plan(config, env)
    assert problem is not None and "nothing answers" in problem


def test_ray_address_that_cannot_be_joined(tmp_path: Path, listening: str) -> None:
    config = compose("countdown_qwen3_4b")
    env = {"RAY_TMPDIR": str(tmp_path)}
    _, problem = ray_plan(config, {**env, "RAY_ADDRESS": "auto"})
    assert problem is not None and "RAY_ADDRESS=auto: no Ray cluster answers" in problem
    dead = _dead_address()
    _, problem = ray_plan(config, {**env, "RAY_ADDRESS": dead})
    assert problem is not None and f"no Ray cluster answers at {dead}" in problem
    assert ray_plan(config, {**env, "RAY_ADDRESS": listening})[1] is None  # control
    cpu = compose("countdown_cpu")  # sets ray_init.num_gpus: Ray refuses it when joining
    _, problem = ray_plan(cpu, {**env, "RAY_ADDRESS": listening})
    assert problem is not None and "num_cpus, num_gpus" in problem
