"""File-descriptor guards: keep native libraries and audited code from writing to stdout."""

from __future__ import annotations

import contextlib
import os
import sys


def _flush(*streams) -> None:
    for stream in streams:
        try:
            stream.flush()
        except (AttributeError, ValueError):  # pragma: no cover - closed or replaced stream
            pass


@contextlib.contextmanager
def _fd1_to(target: int):
    """Point file descriptor 1 at ``target`` meanwhile; Python's own buffers are flushed either side."""
    _flush(sys.stdout, sys.stderr)
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no fd 1 at all
        yield
        return
    try:
        os.dup2(target, 1)
        yield
    finally:
        _flush(sys.stdout)
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def silence_stdout_fd():
    """Discard anything native code writes to file descriptor 1 meanwhile.

    Solvers such as HiGHS print a banner from C code straight to fd 1, which
    would corrupt data piped from stdout; solver status is checked separately,
    so the chatter is dropped. Python-level ``sys.stdout`` is flushed first.
    """
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        with _fd1_to(sink):
            yield
    finally:
        os.close(sink)


@contextlib.contextmanager
def stdout_fd_to_stderr():
    """Send what anything writes to file descriptor 1 meanwhile to stderr (fd 2).

    ``contextlib.redirect_stdout`` moves Python's ``sys.stdout`` only: ``os.write(1, ...)``, C
    extensions and subprocesses write to the descriptor itself. Around someone else's code (the
    function ``mdsd audit`` calls), this keeps stdout for the table; nothing is lost.
    """
    with _fd1_to(2):
        yield
