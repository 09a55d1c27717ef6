"""Interrupts that leave outputs whole: SIGTERM as Ctrl-C, and signals held over a swap."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt like Ctrl-C, so clean-up code runs (Python's default
    SIGTERM action ends the process without any); the previous handler comes back after."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
