"""Exception types raised by the :mod:`mdsd_cli` library.

Every error a user can cause derives from :class:`MdsdError`; its message is one
line that says what is wrong and how to fix it. The command-line interface turns
these into ``Error: <message>`` on stderr with exit code 1.
"""

from __future__ import annotations


class MdsdError(Exception):
    """Base class of every error the library raises on purpose."""


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
