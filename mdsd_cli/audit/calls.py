"""The audited function's calls: the inputs it receives, the seed of each tuple's generator, reading what it
returns (a token, or ``(token, accepted_index)``), and replaying a tuple's calls as the audit made them."""

from __future__ import annotations

import operator

import numpy as np

from ..errors import InputError
from .cases import AuditCase
from .guards import CallTimeout

DTYPES = ("float64", "float32", "float16")


def case_inputs(case: AuditCase, dtype: str = "float64"):
    """``(p, q)`` as the function receives them (read-only, in ``dtype``) and as the audit tests
    them (float64, renormalised after the rounding to ``dtype``)."""
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; choose {', '.join(DTYPES)}")
    given = []
    tested = []
    for x in (case.p, case.q):
        seen = np.array(x, dtype=dtype)
        seen.flags.writeable = False
        given.append(seen)
        exact = seen.astype(np.float64)
        total = exact.sum()
        if not total > 0:
            raise InputError(f"case {case.name}: a distribution rounds to all zeros in {dtype}")
        tested.append(exact / total)
    return given[0], given[1], tested[0], tested[1]


def tuple_seed(seed: int, case: int, member: int) -> int:
    """The seed of the generator the calls on tuple ``member`` (its index in the enumerated draft law)
    of case ``case`` receive: ``numpy.random.default_rng`` hashes it, so consecutive seeds give
    unrelated streams."""
    base = int(np.random.SeedSequence([seed, case]).generate_state(1, np.uint32)[0])
    return (base + member) % 2**32


def replay(fn, case: AuditCase, drafts, *, seed: int, calls: int, dtype: str = "float64") -> np.ndarray:
    """Call ``fn`` ``calls`` times on ``drafts`` of ``case`` with ``numpy.random.default_rng(seed)``, as the
    audit did, and count its output tokens (``[V]``): the counts the audit reported for that tuple."""
    seen_p, seen_q, p, _ = case_inputs(case, dtype)
    row = np.array(drafts, dtype=np.int64)
    row.flags.writeable = False
    rng = np.random.default_rng(seed)
    tokens = [fn(seen_p, seen_q, row, rng) for _ in range(int(calls))]
    parsed, _ = parse_results(tokens, p.size)
    return np.bincount(parsed, minlength=p.size)


class BadOutput(Exception):
    """The function returned something that is not a token (or an inconsistent index)."""


def _token(x) -> int:
    if isinstance(x, (bool, np.bool_)):
        raise BadOutput(f"returned {x!r}, a bool, not a token id (an integer)")
    try:
        return operator.index(x)
    except TypeError:
        pass
    if isinstance(x, np.ndarray) and x.size == 1 or hasattr(x, "numel") and x.numel() == 1:
        return _token(x.item())
    raise BadOutput(f"returned {x!r}, not a token id (an integer)")


def _integers(values: list) -> np.ndarray | None:
    """``values`` as an int64 array if they are all integers, else None."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):
        return None
    return arr.astype(np.int64) if arr.ndim == 1 and arr.dtype.kind in "iu" else None


def parse_results(results: list, V: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Tokens ``[b]`` and accepted indices ``[b]`` (-1 for none; None if the function gives no index)."""
    tokens = indices = None
    if results and isinstance(results[0], tuple) and all(type(r) is tuple and len(r) == 2 for r in results):
        tokens = _integers([r[0] for r in results])
        indices = _integers([-1 if r[1] is None else r[1] for r in results])
        if tokens is None or indices is None:
            tokens = indices = None
    elif results and not isinstance(results[0], (tuple, list)):
        tokens = _integers(results)
    if tokens is None:  # the slow way, naming the first value that is not a token
        tokens = np.empty(len(results), dtype=np.int64)
        indices = np.full(len(results), -1, dtype=np.int64)
        given = False
        for i, r in enumerate(results):
            if isinstance(r, (tuple, list)):
                if len(r) != 2:
                    raise BadOutput(f"returned a {type(r).__name__} of length {len(r)}; return token or "
                                    "(token, accepted_index)")
                tokens[i] = _token(r[0])
                if r[1] is not None:
                    indices[i] = _token(r[1])
                given = True
            else:
                tokens[i] = _token(r)
        indices = indices if given else None
    bad = (tokens < 0) | (tokens >= V)
    if bad.any():
        raise BadOutput(f"returned token {int(tokens[np.argmax(bad)])}, outside 0..{V - 1}")
    return tokens, indices


def check_indices(drafted: np.ndarray, tokens: np.ndarray, indices: np.ndarray) -> None:
    """Each accepted index the function gave names a draft equal to its output token."""
    k = drafted.shape[1]
    given = indices >= 0
    if (indices[given] >= k).any():
        i = int(np.flatnonzero(given & (indices >= k))[0])
        raise BadOutput(f"returned accepted index {int(indices[i])} for {k} drafts")
    rows = np.flatnonzero(given)
    wrong = drafted[rows, indices[rows]] != tokens[rows]
    if wrong.any():
        i = int(rows[np.argmax(wrong)])
        raise BadOutput(f"returned token {int(tokens[i])} with accepted index {int(indices[i])}, but draft "
                        f"{int(indices[i])} of {tuple(drafted[i].tolist())} is {int(drafted[i, indices[i]])}")


def describe_failure(exc: BaseException) -> str:
    """What the function did instead of returning: ``raised ValueError: ...`` or ``did not return within ...``."""
    if isinstance(exc, CallTimeout):
        return f"{exc} (--timeout)"
    return f"raised {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


__all__ = ["DTYPES", "BadOutput", "case_inputs", "check_indices", "describe_failure", "parse_results", "replay",
           "tuple_seed"]
