"""rlvr/common/supervision.py, on real processes shaped like a training run's: a "driver" that
starts a daemon in a session of its own (as Ray's raylet starts its agents), which survives the
driver unless someone stops it. Each row is a way a run is stopped or dies; after it, no process
of the run may be left. (Before the supervisor, train.sh's SIGTERM left the driver
running, and a killed driver left Ray's agents alive: every row but the last failed.)"""

from __future__ import annotations

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

# The driver: a daemon in its own session (double fork: re-parented away from the driver),
# whose command line names the run's marker; then the driver records both PIDs and waits.
DRIVER = """
import os, subprocess, sys, time
daemon = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]], start_new_session=True
)
open(sys.argv[2], "w").write(f"{os.getpid()} {daemon.pid}")
if sys.argv[3] == "exit":
    sys.exit(3)
time.sleep(300)
"""
SUPERVISOR = """
import sys
from pathlib import Path
from rlvr.common.supervision import run_supervised
marker = sys.argv[4]  # argv: -c, python, -c, DRIVER, marker, ...
log = Path(marker + ".log")
done = run_supervised(sys.argv[1:], log, markers=[marker], name="t", settle_s=0.5)
sys.exit(done.returncode)
"""


def _start(tmp_path: Path, ending: str) -> tuple[subprocess.Popen[str], list[int]]:
    marker, pids = str(tmp_path / "run-marker"), tmp_path / "pids"
    driver = [sys.executable, "-c", DRIVER, marker, str(pids), ending]
    return start_and_read_pids([sys.executable, "-c", SUPERVISOR, *driver], pids, 2)


def _left(pids: list[int], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and _running(pid)]
        if not alive or time.monotonic() > deadline:
            for pid in alive:  # never leave them to the next test
                psutil.Process(pid).kill()
            return alive
        time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_every_process_of_the_run(tmp_path: Path, signum: int) -> None:
    supervisor, pids = _start(tmp_path, "wait")
    supervisor.send_signal(signum)
    _, stderr = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 128 + signum
    assert _left(pids) == []
    name = signal.Signals(signum).name
    assert stderr.strip().splitlines()[-1].startswith(f"t: {name}: stopped the run's 2 process")


def test_what_a_killed_driver_leaves_behind_is_stopped(tmp_path: Path) -> None:
    supervisor, (driver, daemon) = _start(tmp_path, "wait")
    os.kill(driver, signal.SIGKILL)
    _, stderr = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 128 + signal.SIGKILL
    assert _left([driver, daemon]) == []
    assert "t: verl's driver was killed by SIGKILL" in stderr
    assert "t: stopped 1 process(es) the driver left behind" in stderr


def test_a_driver_that_exits_keeps_its_exit_code_and_leaves_nothing(tmp_path: Path) -> None:
    supervisor, pids = _start(tmp_path, "exit")
    _, stderr = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 3
    assert _left(pids) == []
    assert "stopped 1 process(es) the driver left behind" in stderr


@pytest.mark.parametrize("asks", [True, False], ids=["asks", "negative-control"])
def test_a_child_that_asks_stops_when_its_parent_is_killed(tmp_path: Path, asks: bool) -> None:
    """``stop_with_parent``: what a sweep killed with SIGKILL relies on. The control, a child
    that does not ask, outlives its parent."""
    pid_file = tmp_path / "pid"
    ask = "from rlvr.common.supervision import stop_with_parent; stop_with_parent(); " * asks
    child = f"import os, time; {ask}open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
    child += "time.sleep(300)"
    parent_code = (
        "import os, subprocess, sys, time; "
        "env = {**os.environ, 'RLVR_STOP_WITH_PARENT': str(os.getpid())}; "
        f"c = subprocess.Popen([sys.executable, '-c', {child!r}], env=env); time.sleep(300)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT)
    while not (pid_file.exists() and pid_file.read_text()):  # written once it has asked
        time.sleep(0.1)
    parent.kill()
    parent.wait()
    left = _left([int(pid_file.read_text())], within_s=5 if asks else 1)
    assert (left == []) == asks


def test_a_parent_that_names_the_marker_is_not_part_of_the_run(tmp_path: Path) -> None:
    """A sweep passes the run's Ray temp dir on its own command line (an override), so the
    marker matches it too; it is the run's parent and must outlive the clean-up. (The first
    version stopped it with SIGKILL: the sweep e2e died after its first point.)"""
    marker, pids = str(tmp_path / "run-marker"), tmp_path / "pids"
    driver = [sys.executable, "-c", DRIVER, marker, str(pids), "exit"]
    # the parent: a shell whose own argv names the marker, waiting on the supervisor
    parent = subprocess.run(
        ["bash", "-c", '"$@"; echo "parent alive after exit $?"', "sweep",
         sys.executable, "-c", SUPERVISOR, *driver],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert marker in " ".join(driver)  # the parent's command line holds the marker
    assert parent.returncode == 0 and "parent alive after exit 3" in parent.stdout, parent.stderr
    assert _left([int(pid) for pid in pids.read_text().split()]) == []


# A command that says where it stopped when SIGTERMed (as the Tinker loop does), and a
# supervisor that names it and lets (or not) its last words reach the console.
LAST_WORDS = """
import signal, sys, time
def stop(*_):
    print("child: stopped; resume from step 2", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1], "w").write("ready")
time.sleep(300)
"""
NAMED_SUPERVISOR = """
import sys
from pathlib import Path
from rlvr.common.supervision import run_supervised
done = run_supervised(sys.argv[3:], Path(sys.argv[1]), name="t", settle_s=0.5,
                      driver="the loop", quiet_on_stop=sys.argv[2] == "quiet")
sys.exit(done.returncode)
"""


@pytest.mark.parametrize("quiet", [False, True], ids=["last-words", "negative-control-quiet"])
def test_a_stopped_commands_last_words_reach_the_console_unless_quiet(
    tmp_path: Path, quiet: bool
) -> None:
    log, ready = tmp_path / "run.log", tmp_path / "ready"
    child = [sys.executable, "-c", LAST_WORDS, str(ready)]
    supervisor = subprocess.Popen(
        [sys.executable, "-c", NAMED_SUPERVISOR, str(log), "quiet" if quiet else "loud", *child],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    supervisor.send_signal(signal.SIGINT)
    out, err = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 130
    assert ("child: stopped; resume from step 2" in out) is not quiet
    assert "child: stopped; resume from step 2" in log.read_text()  # the log has it either way
    assert err.strip().splitlines()[-1] == (
        "t: SIGINT: stopped the run's 1 process(es) (the loop and what it started); exit 130"
    )
