"""rlvr/common/signals.py: SIGTERM as Ctrl-C, and signals held over a swap then delivered."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from rlvr.common.signals import (
    interrupt_behind,
    interrupt_signal,
    signals_deferred,
    sigterm_as_interrupt,
)


def test_sigterm_becomes_an_interrupt_and_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_signal_inside_the_block_is_delivered_after_it() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("swap finished")  # the block runs to its end first
    assert done == ["swap finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_sent_while_another_thread_runs_is_still_held() -> None:
    # The case a thread signal mask gets wrong: the process-directed signal may land on any
    # thread; Python runs handlers in the main thread, which here only records it.
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    done = []
    try:
        with pytest.raises(KeyboardInterrupt), signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("swap finished")
    finally:
        stop.set()
        worker.join()
    assert done == ["swap finished"]


def test_negative_control_without_the_guard_the_block_is_cut_short() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        done.append("swap finished")
    assert done == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_become_interrupts_that_know_their_signal(signum: int) -> None:
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt) as raised, sigterm_as_interrupt():
        os.kill(os.getpid(), signum)
    assert interrupt_signal(raised.value) == signum
    assert signal.getsignal(signum) == before
    assert interrupt_signal(KeyboardInterrupt()) == signal.SIGINT  # Ctrl-C's own


def test_interrupt_behind_finds_ctrl_c_under_the_errors_raised_while_handling_it() -> None:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            try:
                raise RuntimeError("cleanup failed")
            except RuntimeError as inner:
                raise ValueError("and again") from inner
    except ValueError as exc:
        error = exc
    assert isinstance(interrupt_behind(error), KeyboardInterrupt)
    plain = RuntimeError("no interrupt")
    plain.__context__ = ValueError("loop")
    plain.__context__.__context__ = plain  # a cycle ends the walk
    assert interrupt_behind(plain) is None
