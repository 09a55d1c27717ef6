"""Interrupts that leave outputs whole: SIGTERM and SIGHUP as Ctrl-C, and signals held over a
swap."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # beside SIGINT, which Python turns into Ctrl-C


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C raises KeyboardInterrupt; knows which it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupt_signal(exc: KeyboardInterrupt) -> int:
    """The signal behind an interrupt: SIGINT for Ctrl-C's own KeyboardInterrupt."""
    return exc.signum if isinstance(exc, Interrupted) else signal.SIGINT


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The interrupt that ``exc`` was raised while handling, if any. Ctrl-C can land inside a
    library's clean-up and come out as that library's error: torch's ``vmap`` (transformers builds
    attention masks with it) fails an internal assert on its layer stack when an interrupt cuts
    its exit short, and the RuntimeError carries the KeyboardInterrupt as its context."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return link
        seen.add(id(link))
        link = link.__cause__ if link.__cause__ is not None else link.__context__
    return None


def quiet_finalizers() -> None:
    """No more "Exception ignored in ..." tracebacks from this process: after an interrupt, code
    it cut short complains again from its finalizers (torch's half-run ``vmap`` generators), and
    those say nothing a user can act on."""
    sys.unraisablehook = lambda unraisable: None


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal) raise ``Interrupted``, a KeyboardInterrupt, so
    clean-up code runs (Python's default action for both ends the process without any); the
    previous handlers come back after."""

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread
        return
    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back until the block ends, then delivered: between a swap's two
    renames the destination does not exist, and a signal there must not end the process.

    Python-level handlers that only record the signal, not a thread signal mask: a signal sent
    to the process goes to any thread that does not block it (pyarrow and tqdm start threads).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread, where the signals are handled
        return
    pending: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: pending.append(signum))
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            signal.raise_signal(pending[0])  # now handled as it would have been
