"""scripts/stages.sh, as quickstart.sh and launch_sft.sh use it: a stage (here a Python process
standing in for torchrun or a launcher, which writes its PID and then waits) is stopped within
seconds by SIGINT to the script's process group (a terminal's Ctrl-C), SIGTERM or SIGHUP to the
script; the script prints one line and exits 128 + the signal. A foreground command instead
runs to its end before bash runs any trap (the negative control)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from run_watch import start_and_read_pids

ROOT = Path(__file__).resolve().parents[1]
CHILD = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
SCRIPT = """
source scripts/stages.sh
stop_on_signals demo
STOP_NOTE="outputs in /out"
{run} "$PYTHON" -c "$CHILD" "$PID_FILE" > /dev/null
echo "after the stage"
"""


def _start(tmp_path: Path, run: str) -> tuple[subprocess.Popen[str], int]:
    pid_file = tmp_path / "pid"
    env = {**os.environ, "PYTHON": sys.executable, "CHILD": CHILD, "PID_FILE": str(pid_file)}
    script, (child,) = start_and_read_pids(["bash", "-c", SCRIPT.format(run=run)], pid_file, 1, env)
    return script, child


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, False)],
    ids=["ctrl-c", "SIGTERM", "SIGHUP"],
)
def test_a_signal_stops_the_stage_at_once(tmp_path: Path, signum: int, to_group: bool) -> None:
    script, child = _start(tmp_path, "stage")
    start = time.monotonic()
    (os.killpg if to_group else os.kill)(script.pid, signum)
    stdout, stderr = script.communicate(timeout=30)
    assert time.monotonic() - start < 10
    assert script.returncode == 128 + signum
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    name = signal.Signals(signum).name
    assert stderr.strip() == f"demo: {name}: stopped the running stage; outputs in /out"
    assert "after the stage" not in stdout


def test_negative_control_a_foreground_command_holds_the_trap_back(tmp_path: Path) -> None:
    script, child = _start(tmp_path, "")
    os.kill(script.pid, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        script.communicate(timeout=3)  # bash waits for its foreground child first
    os.kill(child, signal.SIGKILL)
    script.communicate(timeout=30)
    assert script.returncode == 128 + signal.SIGTERM


def test_a_signal_before_the_stage_is_recorded_still_stops_it(tmp_path: Path) -> None:
    """The race CI hit once: the signal lands after `&` started the stage but before
    `STAGE_PID=$!` ran. The script must still stop the stage and exit at once; before the fix
    the stage lived on, holding the script's stderr open (communicate timed out)."""
    script = """
source scripts/stages.sh
stop_on_signals demo
STAGE_BEFORE="${!:-}"; STAGE_STARTING=1
"$PYTHON" -c "$CHILD" "$PID_FILE" > /dev/null &
kill -HUP $$
STAGE_PID=$!
wait
"""
    pid_file = tmp_path / "pid"
    env = {**os.environ, "PYTHON": sys.executable, "CHILD": CHILD, "PID_FILE": str(pid_file)}
    start = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert time.monotonic() - start < 10
    assert done.returncode == 128 + signal.SIGHUP
    assert done.stderr.strip() == "demo: SIGHUP: stopped the running stage"


TIMED = """
source scripts/stages.sh
STAGE_TIMES="$TIMES"
stage "$PYTHON" -c "import time; time.sleep(0.3)" --output "/runs/eval_sft/"
stage bash -c 'exit 3' scripts/fake.sh || echo "failed with $?"
unset STAGE_TIMES
stage "$PYTHON" -m json.tool /dev/null --output /runs/untimed || true
"""


def test_each_stage_records_its_wall_seconds_and_status(tmp_path: Path) -> None:
    """A stage that ends appends {"stage", "seconds", "status"}, a failed one too (its exit
    status); without STAGE_TIMES nothing is written (the third stage)."""
    times = tmp_path / "stage_times.jsonl"
    env = {**os.environ, "PYTHON": sys.executable, "TIMES": str(times)}
    done = subprocess.run(
        ["bash", "-c", TIMED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "failed with 3", done.stderr
    lines = [json.loads(line) for line in times.read_text().splitlines()]
    python = Path(sys.executable).name
    assert [(line["stage"], line["status"]) for line in lines] == [
        (f"{python} eval_sft", 0),  # no script: the command's name, and its --output folder
        ("fake", 3),
    ]
    assert 0.3 <= lines[0]["seconds"] < 10 and lines[1]["seconds"] < lines[0]["seconds"]


def test_a_stage_stopped_by_a_signal_records_no_time(tmp_path: Path) -> None:
    times = tmp_path / "stage_times.jsonl"
    pid_file = tmp_path / "pid"
    env = {**os.environ, "PYTHON": sys.executable, "CHILD": CHILD, "PID_FILE": str(pid_file)}
    script = SCRIPT.format(run=f"STAGE_TIMES={times}; stage")
    started, _ = start_and_read_pids(["bash", "-c", script], pid_file, 1, env)
    os.kill(started.pid, signal.SIGTERM)
    started.communicate(timeout=30)
    assert started.returncode == 128 + signal.SIGTERM and not times.exists()
