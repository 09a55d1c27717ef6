"""Test helper: start a command (a launcher, a sweep, the quickstart) in a session of its own,
remember every process it ever starts, signal it the way a user or a machine would, and list
what of it is still alive afterwards.

A process counts as the run's when it descended from the command while it was watched, or when
its command line names the run's Ray temp dir (given as ``markers``, or any ``/tmp/rlvr-ray-``
dir made after the start: the launcher's own). Leftovers are killed after being listed, so one
failing test never leaks into the next.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
OWN_RAY_PREFIX = "/tmp/rlvr-ray-"


class Watched:
    def __init__(
        self, cmd: Sequence[str], env: dict[str, str], log: Path, markers: Sequence[str] = ()
    ) -> None:
        self.started = time.time()
        self.markers = [*markers, OWN_RAY_PREFIX]
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                list(cmd), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.seen: dict[int, tuple[float, str]] = {}

    def _look(self) -> None:
        try:
            tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]
        except psutil.Error:
            tree = []
        for proc in tree + [p for p in psutil.process_iter() if self._marked(p)]:
            try:
                self.seen.setdefault(proc.pid, (proc.create_time(), " ".join(proc.cmdline())))
            except psutil.Error:
                continue

    def _marked(self, proc: psutil.Process) -> bool:
        try:
            if proc.create_time() < self.started:
                return False
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            return False
        return any(marker in cmdline for marker in self.markers)

    def wait_for(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Watch until ``ready()``; fail when the command ends first or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            self._look()
            if self.proc.poll() is not None:
                raise AssertionError(f"ended (exit {self.proc.returncode}) before {what}")
            if time.monotonic() > deadline:
                self.kill_all()
                raise AssertionError(f"no {what} within {timeout_s} s")
            time.sleep(0.5)
        self._look()

    def pid_of(self, fragment: str) -> int:
        return next(pid for pid, (_, cmd) in self.seen.items() if fragment in cmd)

    def signal(self, signum: int, pid: int | None = None) -> None:
        os.kill(self.proc.pid if pid is None else pid, signum)

    def signal_group(self, signum: int) -> None:
        """What a terminal's Ctrl-C does: the signal to the whole foreground process group."""
        os.killpg(self.proc.pid, signum)

    def ended(self, timeout_s: float) -> tuple[int | None, float]:
        """The command's exit code (None: still running after ``timeout_s``) and seconds."""
        start = time.monotonic()
        try:
            return self.proc.wait(timeout=timeout_s), time.monotonic() - start
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - start

    def left(self, within_s: float = 10.0) -> list[str]:
        """The run's processes still running after ``within_s``; they are then killed."""
        deadline = time.monotonic() + within_s
        while True:
            alive = self._alive()
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for proc, _ in alive:
            proc.kill()
        return [f"{proc.pid}: {cmd[:160]}" for proc, cmd in alive]

    def _alive(self) -> list[tuple[psutil.Process, str]]:
        found = []
        for pid, (created, cmd) in self.seen.items():
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) < 1 and proc.status() != "zombie":
                    found.append((proc, cmd))
            except psutil.Error:
                continue
        found += [(p, " ".join(p.cmdline())) for p in psutil.process_iter() if self._marked(p)]
        return list({proc.pid: (proc, cmd) for proc, cmd in found}.values())

    def kill_all(self) -> None:
        self._look()
        for proc, _ in self._alive():
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_and_read_pids(
    cmd: Sequence[str], pid_file: Path, count: int, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], list[int]]:
    """Start ``cmd`` in a session of its own (stdout, stderr piped) and wait until it has
    written ``count`` PIDs to ``pid_file``; fail if it ends first or takes over 60 s."""
    proc = subprocess.Popen(
        list(cmd), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and len(pid_file.read_text().split()) == count):
        assert time.monotonic() < deadline and proc.poll() is None, "no PIDs written"
        time.sleep(0.05)
    return proc, [int(pid) for pid in pid_file.read_text().split()]
