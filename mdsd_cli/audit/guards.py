"""Guards around someone else's code while the audit calls it: it may not end the process, hang, or
swallow Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import threading


class ProcessExit(BaseException):
    """``os._exit(code)`` or ``os.abort()`` called by the audited function: turned into an exception so that
    the function's death is its case's failure, not the end of the audit with exit code 0 and no report."""


@contextlib.contextmanager
def no_process_exit():
    """While the audited function runs, ``os._exit`` and ``os.abort`` raise :class:`ProcessExit` instead."""
    saved_exit, saved_abort = os._exit, os.abort

    def _exit(code=0):
        raise ProcessExit(f"called os._exit({code!r}), which would end the audit itself")

    def _abort():
        raise ProcessExit("called os.abort(), which would end the audit itself")

    os._exit, os.abort = _exit, _abort
    try:
        yield
    finally:
        os._exit, os.abort = saved_exit, saved_abort


class CallTimeout(BaseException):
    """A call of the audited function did not return within the audit's ``timeout`` (a ``BaseException``,
    like :class:`ProcessExit`, so that the function's own ``except Exception`` cannot swallow it)."""


@contextlib.contextmanager
def deadline(timeout: float | None, progress):
    """While the audited function runs: a call that does not return within ``timeout`` seconds raises
    :class:`CallTimeout` (after between ``timeout`` and twice that).

    A ``SIGALRM`` interval timer ticks every ``timeout`` seconds and raises when ``progress()`` (the calls
    made) has not moved since the last tick: no system call per call. It interrupts Python code and blocking
    system calls (``time.sleep``, reads); native code that never returns to the interpreter cannot be
    interrupted this way. Only in the main thread of a platform with ``SIGALRM``; elsewhere no deadline.
    """
    if (timeout is None or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return
    last = [progress()]

    def tick(signum, frame):
        now = progress()
        if now == last[0]:
            raise CallTimeout(f"did not return within {timeout:g} s")
        last[0] = now

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, timeout, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Interrupt:
    """SIGINT during an audit: the audit stops after the round in progress and reports what it found.

    A first Ctrl-C while the function is called (or a second one at any time) interrupts at once; a
    first one while the harness does its bookkeeping only asks it to stop after that round, so that no
    case is left half-counted. Only in the main thread; elsewhere SIGINT keeps its usual meaning.
    """

    def __init__(self):
        self.requested = False
        self.in_calls = False
        self.previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False

    def _handler(self, signum, frame):
        again, self.requested = self.requested, True
        if self.in_calls or again:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def calls(self):
        self.in_calls = True
        try:
            yield
        finally:
            self.in_calls = False


@contextlib.contextmanager
def loading_deadline(timeout: float | None, what: str):
    """Loading (importing) the function to audit must finish within ``timeout`` seconds, else
    :class:`~mdsd_cli.errors.InputError` naming it (see :func:`deadline` for what can be interrupted)."""
    from ..errors import InputError

    try:
        with deadline(timeout, lambda: None):
            yield
    except CallTimeout:
        raise InputError(f"loading {what} did not finish within {timeout:g} s (--timeout); does importing it "
                         "wait for something? Raise --timeout, or 0 for no limit") from None


__all__ = ["CallTimeout", "Interrupt", "ProcessExit", "deadline", "loading_deadline", "no_process_exit"]
