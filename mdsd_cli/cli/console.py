"""Console helpers: stderr for humans, stdout for data, one progress style, one output dispatcher."""

from __future__ import annotations

import contextlib
import io
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..errors import InputError
from ..io import write_table


def err_console() -> Console:
    """A console on stderr (created per call so tests capturing stderr see it)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def info(message: str, *, quiet: bool = False) -> None:
    """A status line on stderr, unless quiet."""
    if not quiet:
        err_console().print(message, markup=False)


def warn(message: str) -> None:
    """A warning on stderr (always shown)."""
    err_console().print(f"Warning: {message}", markup=False)


@contextlib.contextmanager
def progress_bar(description: str, total: int, *, quiet: bool = False):
    """A Rich progress bar on stderr; a no-op when quiet or stderr is not a terminal.

    Yields a function ``advance(k=1)``. Nothing is written to stdout while it is live.
    """
    console = err_console()
    if quiet or not console.is_terminal:
        yield lambda k=1: None
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TaskProgressColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
        console=console, transient=True, redirect_stdout=False, redirect_stderr=False,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda k=1: progress.advance(task, k)


def emit_table(df, *, out=None, fmt: str | None = None, manifest: dict | None = None,
               quiet: bool = False) -> None:
    """Write a result table to ``out`` (atomically) or to stdout.

    stdout formats: csv (default), json (one record per line), table (aligned text).
    """
    fmt = fmt.value if hasattr(fmt, "value") else fmt
    if out is not None:
        if fmt in ("json", "table"):
            raise InputError(f"--format {fmt} writes to stdout only; use csv or parquet with --out")
        path = write_table(df, out, fmt=fmt, manifest=manifest)
        info(f"wrote {len(df)} rows to {path}", quiet=quiet)
        return
    if fmt == "parquet":
        raise InputError("--format parquet needs --out FILE.parquet (binary data is not written to stdout)")
    buf = io.StringIO()
    if fmt == "json":
        df.to_json(buf, orient="records", lines=True, double_precision=15)
    elif fmt == "table":
        buf.write(df.to_string(index=False, float_format=lambda x: f"{x:.6f}") + "\n")
    else:
        df.to_csv(buf, index=False, float_format="%.12g")
    sys.stdout.write(buf.getvalue())
    sys.stdout.flush()
