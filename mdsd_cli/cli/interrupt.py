"""Ctrl-C that is not lost inside compiled code's callbacks.

Python raises ``KeyboardInterrupt`` at the next bytecode after SIGINT. When that bytecode runs
inside a callback that C code made through ctypes (llvmlite calls one when numba loads a cached
kernel), the exception cannot cross the C frames: Python prints "Exception ignored on calling
ctypes callback function" and the run goes on, as if Ctrl-C had never been pressed. The handler
installed here defers the interrupt when it lands in such a callback, and :func:`check` (called
by every progress update, in the main thread) raises it at the next safe point.
"""

from __future__ import annotations

import signal
import threading

#: Source files whose functions C code calls back through ctypes (an exception raised there is lost).
CALLBACK_MODULES = ("/llvmlite/",)

_pending = threading.Event()


def _in_callback(frame) -> bool:
    while frame is not None:
        if any(part in frame.f_code.co_filename.replace("\\", "/") for part in CALLBACK_MODULES):
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum, frame):
    if _in_callback(frame):
        _pending.set()  # raised by check() at the next progress update
        return
    raise KeyboardInterrupt


def install() -> None:
    """Use the deferring handler for SIGINT (main thread only; a SIGINT the parent ignores stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def check() -> None:
    """Raise a deferred Ctrl-C (main thread only)."""
    if _pending.is_set() and threading.current_thread() is threading.main_thread():
        _pending.clear()
        raise KeyboardInterrupt


__all__ = ["check", "install"]
