"""File-descriptor guard: keep native libraries from writing to stdout."""

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
