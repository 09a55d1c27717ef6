"""The sweep runner (rlvr/sweep/runner.py) with a stand-in launcher: it keeps going past a
failed point, records why, skips finished points on a rerun, and stops a point on timeout or
Ctrl-C (its Ray job too). The real 2x2 GRPO sweep on CPU is in tests/test_sweep_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.report.metrics_log import read_steps
from rlvr.sweep.folder import load_sweep
from rlvr.sweep.grid import SweepError, SweepSpec, parse_grid
from rlvr.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = """#!/usr/bin/env bash
# Stands in for train.sh: writes verl-style JSON lines to paths.metrics (one step, then
# fails for lr=5e-4; two steps otherwise).
echo "$@" >> "$RLVR_LOG_DIR/calls.txt"
for arg in "$@"; do [[ $arg == paths.metrics=* ]] && metrics="${arg#paths.metrics=}"; done
echo '{"step": 1, "data": {"critic/score/mean": 0.2, "actor/pg_loss": 0.1}}' >> "$metrics"
case "$*" in
  *optim.lr=5e-4*) echo "ValueError: loss is nan, giving up" >&2; exit 3 ;;
esac
echo '{"step": 2, "data": {"critic/score/mean": 0.4, "actor/pg_loss": 0.1}}' >> "$metrics"
echo "step:2 - critic/score/mean:0.4"
"""


def _stand_in(tmp_path: Path) -> Path:
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(STAND_IN)
    launcher.chmod(launcher.stat().st_mode | stat.S_IEXEC)
    return launcher


def test_runner_keeps_going_records_failures_and_skips_finished(tmp_path: Path) -> None:
    launcher, sweep_dir = _stand_in(tmp_path), tmp_path / "sweep"
    spec = SweepSpec("demo", "countdown_cpu", parse_grid(["rollout_n=2,4", "lr=1e-5,5e-4"]))
    lines: list[str] = []
    statuses = run_sweep(spec, sweep_dir, launcher=launcher, echo=lines.append)
    assert [s.state for s in statuses] == ["finished", "failed", "finished", "failed"]
    failed = json.loads((sweep_dir / "runs/rollout_n2_lr5e-4/status.json").read_text())
    assert failed["returncode"] == 3
    assert failed["reason"] == "exit 3: ValueError: loss is nan, giving up"
    assert any("FAILED" in line for line in lines)

    # rerun: finished points are skipped, failed ones are tried again
    lines.clear()
    run_sweep(spec, sweep_dir, launcher=launcher, echo=lines.append)
    assert sum("skipped" in line for line in lines) == 2
    calls = (sweep_dir / "runs/rollout_n2_lr1e-5/calls.txt").read_text().splitlines()
    assert len(calls) == 1
    assert len((sweep_dir / "runs/rollout_n2_lr5e-4/calls.txt").read_text().splitlines()) == 2
    # without checkpoints a retry starts over: the failed attempt's steps are not kept
    retried = (sweep_dir / "runs/rollout_n2_lr5e-4/metrics.jsonl").read_text().splitlines()
    assert len(retried) == 1
    assert [r.step for r in read_steps(sweep_dir / "runs/rollout_n2_lr1e-5/metrics.jsonl")] == [
        1,
        2,
    ]

    # a new value on an existing axis adds points; a different experiment is refused
    wider = SweepSpec("demo", "countdown_cpu", parse_grid(["rollout_n=8", "lr=1e-5"]))
    run_sweep(wider, sweep_dir, launcher=launcher, echo=lines.append)
    record, rows = load_sweep(sweep_dir)
    assert record["grid"]["rollout_n"] == ["2", "4", "8"]
    assert len(rows) == 6 and [r.state for r in rows].count("pending") == 1
    other = SweepSpec("demo", "gsm8k_qwen2_5_3b", parse_grid(["lr=1e-5"]))
    with pytest.raises(SweepError, match="different sweep"):
        run_sweep(other, sweep_dir, launcher=launcher)


def test_a_run_without_steps_is_not_finished(tmp_path: Path) -> None:
    launcher = tmp_path / "quiet.sh"
    launcher.write_text("#!/usr/bin/env bash\necho nothing logged\n")
    spec = SweepSpec("quiet", "countdown_cpu", parse_grid(["lr=1e-5"]))
    (status,) = run_sweep(spec, tmp_path / "s", launcher=launcher, echo=lambda _: None)
    assert (
        status.state == "failed" and status.reason == "exit 0 but no training step in metrics.jsonl"
    )


def test_timeout_stops_the_point(tmp_path: Path) -> None:
    launcher = tmp_path / "slow.sh"
    launcher.write_text("#!/usr/bin/env bash\nsleep 60\n")
    spec = SweepSpec("slow", "countdown_cpu", parse_grid(["lr=1e-5"]))
    (status,) = run_sweep(spec, tmp_path / "s", launcher=launcher, timeout_s=1, echo=lambda _: None)
    assert status.state == "failed" and status.reason == "timed out" and status.seconds < 30


def test_a_timed_out_ray_job_is_stopped_on_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --ray_address, a timeout must also `ray job stop` the job (a stand-in `ray` CLI)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_ray = bin_dir / "ray"
    fake_ray.write_text(
        f'#!/usr/bin/env bash\necho "$@" >> {tmp_path}/ray_calls.txt\n'
        '[[ "$2" == submit ]] && sleep 60\nexit 0\n'
    )
    fake_ray.chmod(0o755)
    monkeypatch.setattr("rlvr.sweep.runner.RAY_CLI", str(fake_ray))
    spec = SweepSpec("remote", "countdown_cpu", parse_grid(["lr=1e-5"]))
    (status,) = run_sweep(
        spec, tmp_path / "s", ray_address="http://head:8265", timeout_s=1, echo=lambda _: None
    )
    assert status.reason == "timed out"
    submit, stop = (tmp_path / "ray_calls.txt").read_text().splitlines()
    submission = next(a for a in submit.split() if a.startswith("--submission-id="))
    assert submission.startswith("--submission-id=remote__lr1e-5__")
    assert stop == f"job stop --address=http://head:8265 {submission.split('=', 1)[1]}"


# SIGTERM in the fast tier; SIGINT and SIGHUP (the same path, 6 s each) in the slow one
STOP_SIGNALS = [
    pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, id="SIGTERM"),
    pytest.param(signal.SIGHUP, id="SIGHUP", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_stop_signal_stops_the_running_point_and_records_it(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The launcher runs in its own session, out of reach of the terminal's Ctrl-C: the sweep
    (scripts/sweep.py, as a user runs it) must stop it itself, say so in one line, exit 128 +
    the signal, and record the point as interrupted. Python's default SIGTERM/SIGHUP action
    (before: exit 143 with the point still running) fails every assertion here."""
    launcher = tmp_path / "long.sh"
    launcher.write_text(
        '#!/usr/bin/env bash\necho "$$ $RLVR_STOP_WITH_PARENT" > "$RLVR_LOG_DIR/pid"\nsleep 300\n'
    )
    code = (
        "import functools, runpy, sys; from pathlib import Path; import rlvr.sweep.runner as r; "
        f"r.run_sweep = functools.partial(r.run_sweep, launcher=Path({str(launcher)!r})); "
        "sys.argv = ['sweep.py', '--experiment', 'countdown_cpu', '--grid', 'lr=1e-5', "
        f"'--name', 'c', '--out', {str(tmp_path / 's')!r}]; "
        f"runpy.run_path({str(ROOT / 'scripts/sweep.py')!r}, run_name='__main__')"
    )
    sweep = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / "s/c/runs/lr1e-5/pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and sweep.poll() is None
        time.sleep(0.2)
    launcher_pid, parent = map(int, pid_file.read_text().split())
    assert parent == sweep.pid  # the launcher asks to be stopped when the sweep dies
    sweep.send_signal(signum)
    _, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == 128 + signum, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [
        f"sweep: {signum.name}: stopped the running point (recorded as interrupted);"
        " rerun the same command to resume"
    ]
    with pytest.raises(ProcessLookupError):
        os.kill(launcher_pid, 0)
    status = json.loads((tmp_path / "s/c/runs/lr1e-5/status.json").read_text())
    assert status["state"] == "failed"
    assert status["reason"].startswith(f"interrupted ({signum.name})")
