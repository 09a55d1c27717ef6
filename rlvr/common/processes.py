"""Bounded child processes: a hard timeout, their own process group, memory sampling, and
clean-up of only the Ray processes a run started (found by a marker in their command line,
such as the run's own Ray temp dir). Never ``pkill -f`` or ``ray stop``: other Ray instances on
the machine are not ours."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# The project's own Ray CLI, beside this interpreter, not whatever `ray` PATH finds first: its
# version must match the cluster's (every node runs this project's environment).
RAY_CLI = str(Path(sys.executable).parent / "ray")


def processes_with(markers: Sequence[str]) -> list[psutil.Process]:
    """Live processes whose command line contains any of ``markers``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if any(marker in cmdline for marker in markers):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def started_processes(records: Sequence[tuple[int, float]]) -> list[psutil.Process]:
    """Live processes among ``(pid, seen_at)`` records: the same pid, started before it was seen
    (a recycled pid is someone else's process)."""
    alive = []
    for pid, seen_at in records:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= seen_at + 1:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def _ours(markers: Sequence[str], records: Sequence[tuple[int, float]]) -> list[psutil.Process]:
    found = {p.pid: p for p in processes_with(markers)} if markers else {}
    found.update({p.pid: p for p in started_processes(records)})
    return list(found.values())


def stop(markers: Sequence[str], grace_s: float = 20.0) -> int:
    """Stop Ray daemons this run started itself (``ray start``): SIGTERM, then SIGKILL."""
    procs = processes_with(markers)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    return len(procs)


def reap(
    markers: Sequence[str], grace_s: float = 60.0, records: Sequence[tuple[int, float]] = ()
) -> list[int]:
    """Wait up to ``grace_s`` for the marked processes (and the recorded ones, e.g. Ray workers,
    whose command line Ray rewrites) to exit; kill and return the stragglers."""
    deadline = time.monotonic() + grace_s
    while _ours(markers, records) and time.monotonic() < deadline:
        time.sleep(1)
    leftovers = _ours(markers, records)
    for proc in leftovers:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    return [proc.pid for proc in leftovers]


class MemorySampler:
    """Peak of the summed resident memory of a process tree plus marked processes (Ray daemons
    started outside the tree; RSS counts shared pages once per process, so this overstates), and
    the peak rise of the machine's memory in use over its value at the start."""

    def __init__(self, root_pid: int, markers: Sequence[str] = (), every_s: float = 1.0) -> None:
        self.root_pid, self.markers, self.every_s = root_pid, list(markers), every_s
        self.peak_bytes = 0
        self._baseline = self._machine_in_use()
        self.peak_machine_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _machine_in_use() -> int:
        memory = psutil.virtual_memory()
        return int(memory.total - memory.available)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak_bytes = max(self.peak_bytes, self._sample())
            rise = self._machine_in_use() - self._baseline
            self.peak_machine_bytes = max(self.peak_machine_bytes, rise)

    def _sample(self) -> int:
        procs: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.root_pid)
            procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
        except psutil.NoSuchProcess:
            pass
        procs.update({p.pid: p for p in processes_with(self.markers)} if self.markers else {})
        total = 0
        for proc in procs.values():
            try:
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total


@dataclass
class Finished:
    returncode: int  # 124 when the timeout killed it
    output: str
    seconds: float
    peak_bytes: int
    peak_machine_bytes: int

    @property
    def summary(self) -> str:
        return (
            f"exit {self.returncode}, peak memory: machine +{self.peak_machine_bytes / 2**30:.1f}"
            f" GiB, summed RSS {self.peak_bytes / 2**30:.1f} GiB"
        )


def run_bounded(
    cmd: Sequence[str],
    env: dict[str, str],
    timeout_s: float,
    cwd: Path,
    log_path: Path | None = None,
    markers: Sequence[str] = (),
) -> Finished:
    """Run ``cmd`` in its own process group; on timeout kill the whole group (exit code 124).
    Output goes to ``log_path`` (or a pipe) and is returned."""
    start = time.monotonic()
    log_path = log_path or Path(os.devnull)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        with MemorySampler(proc.pid, markers) as sampler:
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                returncode = 124
            except BaseException:  # Ctrl-C: the child's own session never sees it
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
    output = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
    return Finished(
        returncode,
        output,
        time.monotonic() - start,
        sampler.peak_bytes,
        sampler.peak_machine_bytes,
    )
