"""Bounded runs and clean-up that touches only our own processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rlvr.common.processes import processes_with, reap, run_bounded, started_processes, stop


def _sleeper(marker: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])


def test_stop_ends_only_the_marked_processes() -> None:
    ours, other = uuid.uuid4().hex, uuid.uuid4().hex
    mine, theirs = _sleeper(ours), _sleeper(other)
    try:
        assert [p.pid for p in processes_with([ours])] == [mine.pid]
        assert stop([ours], grace_s=5) == 1
        assert mine.wait(timeout=10) is not None
        assert theirs.poll() is None  # a process without our marker is left alone
    finally:
        theirs.kill()
        theirs.wait()


def test_reap_kills_recorded_processes_but_not_a_recycled_pid() -> None:
    worker = _sleeper(uuid.uuid4().hex)
    seen_at = time.time()
    assert [p.pid for p in started_processes([(worker.pid, seen_at)])] == [worker.pid]
    # seen before it started: the pid must belong to someone else now
    assert started_processes([(worker.pid, seen_at - 3600)]) == []
    assert reap([], grace_s=0, records=[(worker.pid, seen_at)]) == [worker.pid]
    assert worker.wait(timeout=10) is not None


def test_run_bounded_kills_the_whole_group_on_timeout(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    script = f"{sys.executable} -c 'import time; time.sleep(60)' {marker} & wait"
    done = run_bounded(["bash", "-c", script], dict(os.environ), 2, tmp_path, tmp_path / "log")
    assert done.returncode == 124 and done.seconds < 30
    time.sleep(0.5)
    assert processes_with([marker]) == []  # the grandchild went with its group
