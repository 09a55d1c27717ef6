"""Stopping a real run (verl + Ray on CPU, the tiny model) leaves no process of it, however it
is stopped: a signal to the launcher, SIGKILL to the launcher or to verl's driver, a signal to a
sweep. Each row waits until training has logged a step, then stops the run and lists what of it
is still alive (tests/run_watch.py). Before the supervisor (rlvr/train/launch.py): the driver
trained on after the launcher's SIGTERM, and Ray's agents outlived a killed driver.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from conftest import countdown_workdir, cpu_launch
from run_watch import Watched

pytestmark = [pytest.mark.slow, pytest.mark.no_cuda]
START_TIMEOUT_S = 600  # Ray start, model load and the first step, on 2 busy cores
ENDLESS = ["trainer.total_training_steps=500", "trainer.save_freq=500", "trainer.test_freq=500"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return countdown_workdir(tmp_path_factory, "stop", train_size=64, test_size=8)


def _logged_a_step(metrics: Path) -> bool:
    return metrics.is_file() and '"step": 1' in metrics.read_text()


@pytest.mark.parametrize(
    ("target", "signum"),
    [
        ("launcher", signal.SIGTERM),  # `kill PID`, a scheduler's preemption
        ("launcher", signal.SIGKILL),  # nothing to catch it: the driver asked the kernel
        ("driver", signal.SIGKILL),  # an OOM kill of verl's driver
    ],
    ids=["launcher-SIGTERM", "launcher-SIGKILL", "driver-SIGKILL"],
)
def test_a_stopped_run_leaves_no_process(
    workdir: Path, tmp_path: Path, target: str, signum: int
) -> None:
    name = f"stop_{target}_{signum}"
    cmd, env = cpu_launch(workdir, name)
    run = Watched([*cmd, *ENDLESS], env, tmp_path / "launch.log")
    metrics = workdir / "checkpoints" / name / "metrics.jsonl"
    run.wait_for(lambda: _logged_a_step(metrics), START_TIMEOUT_S, "step 1 in metrics.jsonl")
    run.signal(signum, None if target == "launcher" else run.pid_of("rlvr.train.main"))
    code, seconds = run.ended(timeout_s=60)
    left = run.left(within_s=15)
    assert left == [], f"left behind: {left}\n{run.output()[-3000:]}"
    if signum == signal.SIGKILL and target == "launcher":
        assert code == -signal.SIGKILL
        return
    expected = 128 + signum
    assert (code, seconds < 30) == (expected, True), run.output()[-3000:]
    last = run.output().strip().splitlines()[-1]
    if target == "launcher":
        assert last.startswith(f"train: {signal.Signals(signum).name}: stopped the run's")
    else:
        assert "the driver left behind" in run.output()


def test_a_signalled_sweep_stops_its_point_and_records_it(workdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweeps"
    cmd = [sys.executable, "scripts/sweep.py", "--experiment", "countdown_cpu", "--name", "s",
           "--grid", "actor_rollout_ref.actor.optim.lr=1e-5,2e-5", "--out", str(out),
           f"paths.data={workdir}/data", f"actor_rollout_ref.model.path={workdir}/models/tiny",
           *ENDLESS]  # fmt: skip
    _, env = cpu_launch(workdir, "unused")
    run = Watched(cmd, env, tmp_path / "sweep.log")
    metrics = out / "s/runs/lr1e-5/metrics.jsonl"
    run.wait_for(lambda: _logged_a_step(metrics), START_TIMEOUT_S, "the point's step 1")
    run.signal(signal.SIGTERM)
    code, seconds = run.ended(timeout_s=90)
    left = run.left(within_s=15)
    assert left == [], f"left behind: {left}\n{run.output()[-3000:]}"
    assert code == 128 + signal.SIGTERM and seconds < 60, run.output()[-3000:]
    status = json.loads((metrics.parent / "status.json").read_text())
    assert status["reason"].startswith("interrupted (SIGTERM)")
    assert not (out / "s/runs/lr2e-5").exists()  # the sweep stopped, not just the point
    assert run.output().strip().splitlines()[-1].startswith("sweep: SIGTERM: stopped")
