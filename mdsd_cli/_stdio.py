"""File-descriptor guards: keep native libraries and audited code from writing to stdout."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def silence_stdout_fd():
    """Discard anything native code writes to file descriptor 1 meanwhile.

    Solvers such as HiGHS print a banner from C code straight to fd 1, which
    would corrupt data piped from stdout; solver status is checked separately,
    so the chatter is dropped. Python-level ``sys.stdout`` is flushed first.
    """
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError):  # pragma: no cover - closed or replaced stdout
        pass
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no fd 1 at all
        yield
        return
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(sink, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(sink)


@contextlib.contextmanager
def stdout_fd_to_stderr():
    """Send what anything writes to file descriptor 1 meanwhile to stderr (fd 2).

    ``contextlib.redirect_stdout`` moves Python's ``sys.stdout`` only: ``os.write(1, ...)``, C
    extensions and subprocesses write to the descriptor itself. Around someone else's code (the
    function ``mdsd audit`` calls), this keeps stdout for the table; nothing is lost.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError):  # pragma: no cover - closed or replaced stream
            pass
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no fd 1 at all
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        try:
            sys.stdout.flush()
        except (AttributeError, ValueError):  # pragma: no cover
            pass
        os.dup2(saved, 1)
        os.close(saved)
