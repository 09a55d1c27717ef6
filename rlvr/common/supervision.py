"""Run a command so that stopping it stops everything it started, and nothing else.

A training run is a process tree that does not stay a tree: verl's driver starts Ray, whose
raylet starts agents and workers, and when the driver dies they are re-parented to PID 1 (Ray's
dashboard and runtime-env agents were seen alive a minute after the driver was killed). So the
supervisor here:

- makes itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): orphans of the
  run are re-parented to it, not to PID 1, and stay findable as its descendants;
- also records every descendant it sees (pid, start time) and takes ``markers`` (the run's own
  Ray temp dir, which every Ray daemon's command line names), for where the subreaper is absent;
- turns SIGINT, SIGTERM and SIGHUP into a stop: SIGTERM to all of the run's processes, SIGKILL
  after a grace period, one line saying so, and the exit code 128 + the signal's number;
- after the command ends by itself (or is killed), stops what it left behind.

Processes are found by ancestry, records and markers, never by name (``pkill -f`` would stop
other users' runs).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from rlvr.common.processes import processes_with, started_processes
from rlvr.common.signals import STOP_SIGNALS

#: Set by a parent that wants its child to stop when it dies, even by SIGKILL: its own PID.
STOP_WITH_PARENT_ENV = "RLVR_STOP_WITH_PARENT"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0)) == 0


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (Linux 3.4+); False elsewhere."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def stop_with_parent() -> None:
    """When ``RLVR_STOP_WITH_PARENT`` names this process's parent, ask the kernel for SIGTERM
    when that parent dies (a sweep killed with SIGKILL cannot stop its point itself); exit at
    once when it is already gone. Set only by parents that want it: a run started from a shell
    with ``nohup`` must outlive the shell."""
    wanted = os.environ.pop(STOP_WITH_PARENT_ENV, "")
    if not wanted.isdigit():
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(wanted):  # it died before the request was in place
        raise SystemExit(128 + signal.SIGTERM)


@dataclass(frozen=True)
class Supervised:
    returncode: int  # the command's, or 128 + the signal that stopped the run
    stop_signal: int | None  # the signal this process received, when it stopped the run
    leftovers: int  # processes stopped after the command itself had ended


@contextlib.contextmanager
def stop_requests() -> Iterator[list[int]]:
    """Record SIGINT/SIGTERM/SIGHUP instead of dying from them (main thread only); restored
    after the block."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {
        signum: signal.signal(signum, lambda received_signum, _: received.append(received_signum))
        for signum in (signal.SIGINT, *STOP_SIGNALS)
    }
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class RunProcesses:
    """Every process of one run: descendants of this process (a subreaper keeps orphans among
    them), the ones recorded while the run went on, and the ones whose command line holds a
    marker."""

    def __init__(self, markers: Sequence[str]) -> None:
        self.markers = [marker for marker in markers if marker]
        for marker in self.markers:  # "-c" once matched every `bash -c` on the machine
            if not (os.path.isabs(marker) and len(marker) > 8):
                raise ValueError(f"marker {marker!r}: must be a run's own absolute path")
        self.records: dict[int, float] = {}
        self.started = time.time()
        # A sweep or a test that passed the marker on its command line (a Ray temp dir
        # override) is this run's parent, not part of it: it once got SIGKILLed here.
        self.ancestors = {proc.pid for proc in psutil.Process().parents()}

    def record(self) -> None:
        for proc in self._descendants():
            with contextlib.suppress(psutil.Error):
                self.records.setdefault(proc.pid, proc.create_time())

    def alive(self) -> list[psutil.Process]:
        found = {proc.pid: proc for proc in self._descendants()}
        found.update({p.pid: p for p in started_processes(list(self.records.items()))})
        if self.markers:
            found.update({p.pid: p for p in processes_with(self.markers) if self._newer(p)})
        found.pop(os.getpid(), None)
        return [proc for proc in found.values() if _running(proc)]

    def _newer(self, proc: psutil.Process) -> bool:
        """Started with this run (not before it), and not one of this process's ancestors."""
        try:
            return proc.pid not in self.ancestors and proc.create_time() >= self.started - 1
        except psutil.Error:
            return False

    @staticmethod
    def _descendants() -> list[psutil.Process]:
        try:
            return psutil.Process().children(recursive=True)
        except psutil.Error:
            return []

    def stop(self, grace_s: float) -> int:
        """SIGTERM every process of the run, SIGKILL the ones still there after ``grace_s``
        (and any started meanwhile); returns how many there were."""
        procs = {proc.pid: proc for proc in self.alive()}
        for proc in procs.values():
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        stragglers = _wait_gone(list(procs.values()), grace_s) + self.alive()
        for proc in stragglers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _wait_gone(stragglers, 5.0)
        return len(set(procs) | {proc.pid for proc in stragglers})


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until none of ``procs`` runs (zombies count as gone, and the ones that are this
    process's children, orphans included, are reaped); returns the ones still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap: a subreaper inherits zombies
                pass
        running = [proc for proc in procs if _running(proc)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _copy_output(source: IO[bytes], log: IO[bytes], quiet: threading.Event) -> None:
    """The command's output to this process's stdout and to the log, as ``tee`` would; a closed
    stdout (``| head``) does not stop the log. Once ``quiet`` is set (the run is being stopped)
    only the log gets it: the dying processes' tracebacks would bury the line that says why."""
    stdout: IO[bytes] | None = sys.stdout.buffer
    for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]
        log.write(chunk)
        log.flush()
        if stdout is not None and not quiet.is_set():
            try:
                stdout.write(chunk)
                stdout.flush()
            except (BrokenPipeError, ValueError, OSError):
                stdout = None


def run_supervised(
    command: Sequence[str],
    log_path: Path,
    markers: Sequence[str] = (),
    env: dict[str, str] | None = None,
    grace_s: float = 10.0,
    name: str = "run",
    settle_s: float = 5.0,
    driver: str = "verl's driver",
    quiet_on_stop: bool = True,
) -> Supervised:
    """Run ``command`` (output teed to ``log_path``) in its own session, so that a terminal's
    Ctrl-C reaches this process only; stop all of the run's processes on a stop signal, and
    what the command left behind once it ends (after ``settle_s`` for it to go by itself).
    Prints one line for either; ``driver`` names the command in them. ``quiet_on_stop``: once
    stopping, the command's output goes to the log alone (verl's dying Ray workers' tracebacks
    would bury the line that says why); off, the console also gets its last words."""
    become_subreaper()
    run = RunProcesses(markers)
    env = {**(os.environ if env is None else env), STOP_WITH_PARENT_ENV: str(os.getpid())}
    with stop_requests() as received, log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None
        quiet = threading.Event()
        copier = threading.Thread(target=_copy_output, args=(proc.stdout, log, quiet), daemon=True)
        copier.start()
        while proc.poll() is None and not received:
            run.record()
            time.sleep(0.5)
        if received:
            signum = received[0]
            if quiet_on_stop:
                quiet.set()
            count = run.stop(grace_s)
            proc.wait()
            copier.join(timeout=5)
            print(
                f"{name}: {signal.Signals(signum).name}: stopped the run's {count} process(es)"
                f" ({driver} and what it started); exit {128 + signum}",
                file=sys.stderr,
                flush=True,
            )
            return Supervised(128 + signum, signum, 0)
        # Ray's daemons end on their own after a clean exit: give them a moment, then stop the
        # rest (they also hold the output pipe open, which the copier waits on).
        left = run.stop(grace_s=5.0) if _wait_gone(run.alive(), settle_s) else 0
        copier.join(timeout=30)
    returncode = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if proc.returncode < 0:
        died = signal.Signals(-proc.returncode).name
        print(f"{name}: {driver} was killed by {died}", file=sys.stderr, flush=True)
    if left:
        print(f"{name}: stopped {left} process(es) the driver left behind", file=sys.stderr)
    return Supervised(returncode, None, left)
