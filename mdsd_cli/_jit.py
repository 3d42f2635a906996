"""Optional numba compilation of the hot loops.

Every compiled function also runs as plain Python/numpy, which is the fallback
when numba is missing or ``MDSD_DISABLE_NUMBA=1``; tests check both agree.
"""

from __future__ import annotations

import os

_cache: dict = {}


_importable: list = []


def numba_enabled() -> bool:
    """Whether compiled kernels are in use (numba importable and not disabled)."""
    if os.environ.get("MDSD_DISABLE_NUMBA", "") not in ("", "0"):
        return False
    if not _importable:  # the import is tried once (this runs once per verified pair)
        try:
            import numba  # noqa: F401
        except ImportError:  # pragma: no cover - numba is a dependency
            _importable.append(False)
        else:
            _importable.append(True)
    return _importable[0]


def compiled(fn):
    """The numba-compiled version of ``fn`` (cached on disk), or None when disabled."""
    if not numba_enabled():
        return None
    if fn not in _cache:
        import numba

        _cache[fn] = numba.njit(cache=True, nogil=True)(fn)
    return _cache[fn]


def kernel(fn=None, *, vector: bool = False, inline: bool = False):
    """Decorator of a module's compiled kernels: ``numba.njit(cache=True, nogil=True)``
    when numba is enabled at import, else ``fn`` itself (plain Python).

    ``@kernel(vector=True)``: also numpy's error model (a division by zero gives inf or nan instead of
    a check on every division, which keeps the compiler from vectorising the loop): for loops whose
    divisors are known positive. The floats are the same. ``inline=True``: compiled into its compiled
    callers (no call, no reference counts on its array arguments: ~60 ns a call with ten arrays)."""
    if fn is None:
        return lambda f: kernel(f, vector=vector, inline=inline)
    if not numba_enabled():
        return fn
    import numba

    options = {"error_model": "numpy"} if vector else {}
    if inline:
        options["inline"] = "always"
    return numba.njit(cache=True, nogil=True, **options)(fn)
