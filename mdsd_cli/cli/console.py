"""Console helpers: stderr for humans, stdout for data, one progress style, one output dispatcher."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as Progress_

from ..errors import InputError
from .interrupt import check as check_interrupt


def err_console() -> Console:
    """A console on stderr (created per call so tests capturing stderr see it)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def info(message: str, *, quiet: bool = False) -> None:
    """A status line on stderr, unless quiet."""
    if not quiet:
        err_console().print(message, markup=False)


@contextlib.contextmanager
def status(message: str, *, quiet: bool = False):
    """A transient spinner with ``message`` on stderr while the block runs, in a terminal only: logs and pipes
    get nothing, so a failure inside the block stays a one-line error."""
    console = err_console()
    if quiet or not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def warn(message: str) -> None:
    """A warning on stderr (always shown)."""
    err_console().print(f"Warning: {message}", markup=False)


#: Seconds between two lines of ``--progress log`` (environment: MDSD_PROGRESS_INTERVAL).
LOG_INTERVAL = 5.0


def _log_interval() -> float:
    try:
        return max(float(os.environ.get("MDSD_PROGRESS_INTERVAL", LOG_INTERVAL)), 0.01)
    except ValueError:
        return LOG_INTERVAL


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """What a command advances: ``advance(k)`` (or calling it) and ``set_total(n)`` when known late."""

    def __init__(self, total: int):
        self.total = int(total)
        self.done = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, k: int = 1) -> None:
        self.advance(k)

    def advance(self, k: int = 1) -> None:
        with self._lock:
            self.done += int(k)
        check_interrupt()  # a Ctrl-C deferred out of a ctypes callback (see .interrupt)

    def set_total(self, total: int) -> None:
        with self._lock:
            self.total = int(total)

    def line(self, description: str) -> str:
        """``verify: 120/512 (23%), 4.1/s, elapsed 0:29, eta 1:35``."""
        with self._lock:
            done, total = self.done, self.total
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        pct = f" ({100 * done / total:.0f}%)" if total else ""
        eta = _duration((total - done) / rate) if rate > 0 and total >= done else "?"
        return (f"{description}: {done:,}/{total:,}{pct}, {rate:.3g}/s, elapsed {_duration(elapsed)}, "
                f"eta {eta}")


@contextlib.contextmanager
def show_progress(description: str, total: int, *, mode="auto", quiet: bool = False):
    """Progress of a long-running command on stderr, in one of four modes.

    ``bar``: a Rich bar; ``log``: a line every few seconds (:data:`LOG_INTERVAL`) with the
    count, rate and ETA, and a last line when the run printed any, for log files and
    pipelines; ``auto``: the bar on a terminal, else log; ``none`` (or ``quiet``): nothing.
    Yields a :class:`Progress`. Nothing is written to stdout.
    """
    mode = getattr(mode, "value", mode) or "auto"
    console = err_console()
    if quiet or mode == "none":
        yield Progress(total)
        return
    if mode == "auto":
        mode = "bar" if console.is_terminal else "log"
    if mode == "log":
        yield from _logged(Progress(total), description, console)
        return
    bar = Progress_(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TaskProgressColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
        console=Console(stderr=True, highlight=False, force_terminal=True), transient=True,
        redirect_stdout=False, redirect_stderr=False,
    )
    with bar:
        task = bar.add_task(description, total=total)

        class _Bar(Progress):
            def advance(self, k: int = 1) -> None:
                super().advance(k)
                bar.advance(task, k)

            def set_total(self, n: int) -> None:
                super().set_total(n)
                bar.update(task, total=n)

        yield _Bar(total)


def _logged(handle: Progress, description: str, console):
    interval = _log_interval()
    stop = threading.Event()
    printed = []

    def tick():
        while not stop.wait(interval):
            console.print(handle.line(description), markup=False)
            printed.append(True)

    ticker = threading.Thread(target=tick, name="mdsd-progress", daemon=True)
    ticker.start()
    try:
        yield handle
    finally:
        stop.set()
        ticker.join()
        if printed:
            console.print(handle.line(description), markup=False)


def emit_table(df, *, out=None, fmt: str | None = None, manifest: dict | None = None, quiet: bool = False,
               also=None, wrote: tuple[str, ...] = ()) -> None:
    """Write a result table to ``out`` (atomically) or to stdout.

    stdout formats: csv (default), json (one record per line), table (aligned text).
    ``also``: an :class:`~mdsd_cli.io.OutputSet` of the run's other files, written with ``out``
    as one set (its manifest is then the set's); ``wrote`` says what they hold, one line each.
    """
    from ..io import OutputSet

    fmt = fmt.value if hasattr(fmt, "value") else fmt
    outputs = also if also is not None else OutputSet(manifest)
    summary = None
    if out is not None:
        if fmt in ("json", "table"):
            raise InputError(f"--format {fmt} writes to stdout only; use csv or parquet with --out")
        summary = outputs.table(df, out, fmt=fmt)
    for kind, path, _ in outputs.items:
        if kind == "csv" and path.suffix.lower() != ".csv" and not (fmt and path == summary):
            warn(f"{path} is written as CSV (its name ends in {path.suffix or 'no extension'}; name it .csv, "
                 f"or .parquet for Parquet)")
    outputs.write()
    for line in wrote:
        info(line, quiet=quiet)
    if out is not None:
        info(f"wrote {len(df)} row{'' if len(df) == 1 else 's'} to {out}", quiet=quiet)
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
