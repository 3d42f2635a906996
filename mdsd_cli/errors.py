"""Exception types raised by the :mod:`mdsd_cli` library.

Every error a user can cause derives from :class:`MdsdError`; its message is one
line that says what is wrong and how to fix it. The command-line interface turns
these into ``Error: <message>`` on stderr with exit code 1.

A message that names the option fixing the problem names it twice, with
:func:`option`: ``str(error)`` reads the Python keyword (``renormalize=True``),
and :meth:`MdsdError.cli_message` the command-line flag (``--renormalize``), so
that neither audience reads the other's spelling.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re

_OPTION = re.compile(r"\x00([^\x01]*)\x01([^\x02]*)\x02")


def option(flag: str, keyword: str) -> str:
    """An option named in an error message: ``flag`` on the command line, ``keyword`` in Python.

    >>> str(InputError(f"pass {option('--renormalize', 'renormalize=True')} to rescale"))
    'pass renormalize=True to rescale'
    """
    return f"\x00{flag}\x01{keyword}\x02"


#: The way out of most size limits, as error messages name it.
USE_CHAIN = option("--solver chain", "solver='chain'")


def count_text(count: int) -> str:
    """A count for a message: ``1,234,567``, or ``more than 10^450`` past 30 digits (Python refuses to print
    integers of more than 4,300 digits, and nobody reads 450)."""
    if count < 10**30:
        return f"{count:,}"
    return f"more than 10^{int((count.bit_length() - 1) * 0.30102999566398)}"


def check_integer(value, name: str, minimum: int) -> int:
    """``value`` as an int, or an :class:`InputError` naming ``name``: an integer (not a bool, not a float such as
    2.7 that would be cut to 2, not a string) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def check_positive(value, name: str, *, zero: bool = False) -> float:
    """``value`` as a float, or an :class:`InputError` naming ``name``: a finite real number (not a bool, not a
    string) above 0, or at least 0 with ``zero``."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
        and (value >= 0 if zero else value > 0)
    if not ok:
        raise InputError(f"{name} must be {'>= 0' if zero else '> 0'}, got {value!r}")
    return float(value)


def did_you_mean(name, choices) -> str:
    """``"; did you mean 'wor'?"`` when ``name`` is close to one of ``choices``, else ``""``."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_choice(kind: str, name, choices) -> InputError:
    """The error for an unknown name: ``unknown sampler 'wro'; choose one of: ...; did you mean 'wor'?``."""
    choices = [str(c) for c in choices]
    return InputError(f"unknown {kind} {name!r}; choose one of: {', '.join(choices)}{did_you_mean(name, choices)}")


class MdsdError(Exception):
    """Base class of every error the library raises on purpose."""

    def __init__(self, message="", *args):
        self._template = str(message)
        super().__init__(_OPTION.sub(r"\2", self._template), *args)

    def cli_message(self) -> str:
        """The message as the command line shows it: options named by their flags."""
        return _OPTION.sub(r"\1", self._template)


class InputError(MdsdError, ValueError):
    """Invalid distributions or parameters (NaN, negative entries, bad shapes, n < 1...)."""


class DataFileError(MdsdError):
    """A data file is missing, unreadable, or lacks the expected arrays or columns."""


class OutputError(MdsdError):
    """An output path cannot be written (missing directory, read-only file...)."""


class SizeLimitError(MdsdError):
    """A problem is too large for the requested method; the message names the way out."""


class SolverError(MdsdError):
    """A numerical solver did not return a proven optimum."""


class CallableError(MdsdError):
    """A function to audit cannot be loaded: missing file, module or attribute, a syntax error, not callable."""
