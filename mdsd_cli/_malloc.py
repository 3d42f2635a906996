"""Allocator tuning for vector-heavy processes (opt-in; the CLI turns it on).

Each numpy temporary of a full-vocabulary vector is about 1 MB. By default
glibc hands such blocks back to the operating system when they are freed
(``mmap``/heap trimming), and the next temporary faults its pages in again:
~300 page faults per vector, which on a virtual machine costs more than the
arithmetic (2.7 ms instead of 0.8 ms for ``cumsum(p[order])`` at V = 152,064).
Raising the mmap and trim thresholds keeps freed blocks for reuse.

This is a process-wide setting, so the library never does it on import;
:func:`tune_allocator` is called by the ``mdsd`` entry point and the benchmarks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

_tuned: bool | None = None


def tune_allocator(threshold: int = 256 * 2**20) -> bool:
    """Keep up to ``threshold`` bytes of freed memory for reuse (glibc only).

    Returns whether the setting took effect (False on other platforms).
    """
    global _tuned
    if _tuned is not None:
        return _tuned
    _tuned = False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, threshold) == 1 and mallopt(M_TRIM_THRESHOLD, 2 * threshold) == 1
    _tuned = bool(ok)
    return _tuned
