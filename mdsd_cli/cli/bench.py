"""``mdsd bench``."""

from __future__ import annotations

from dataclasses import replace

import typer

from ..bench import FIGURES, BenchConfig, machine_description, run_benchmarks
from .console import emit_table, info, show_progress
from .options import FormatOpt, OutOpt, ProgressOpt, QuietOpt


def bench(
    quick: bool = typer.Option(False, "--quick", help="Small sizes (a smoke run in seconds)."),
    only: list[str] | None = typer.Option(None, "--only", help=f"Run only these figures: {', '.join(FIGURES)}."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Timed runs per figure (median and range)."),
    vocab: int | None = typer.Option(None, "--vocab", min=2, help="V of the single-pair figures (default 152064)."),
    lp_vocab: int | None = typer.Option(None, "--lp-vocab", min=2, help="V of the primal-lp comparison (default 1000)."),
    lp_drafts: int | None = typer.Option(None, "--lp-drafts", min=1, help="n of the primal-lp comparison (default 2)."),
    memory_pairs: int | None = typer.Option(None, "--memory-pairs", min=1,
                                            help="Pairs of the peak-memory figure (default 1024)."),
    out: OutOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Measure every performance target against a baseline timed in the same run.

    One row per figure: median, min and max seconds, the baseline, the ratio,
    the target and pass/short, and the peak memory allocated. The machine is
    described on stderr. Timings are ratios because machines are shared and
    noisy; the targets are those of the performance issue.
    """
    unknown = [f for f in (only or []) if f not in FIGURES]
    if unknown:
        raise typer.BadParameter(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}",
                                 param_hint="--only")
    config = BenchConfig.quick() if quick else BenchConfig()
    overrides = {k: v for k, v in dict(vocab=vocab, lp_vocab=lp_vocab, lp_drafts=lp_drafts,
                                       memory_pairs=memory_pairs).items() if v is not None}
    config = replace(config, repeats=repeats, **overrides)
    figures = tuple(only) if only else FIGURES
    info(f"# {machine_description()}", quiet=quiet)
    with show_progress("bench", len(figures), mode=progress, quiet=quiet) as advance:
        rows = run_benchmarks(config, figures=figures, progress=advance)
    import pandas as pd

    emit_table(pd.DataFrame(rows), out=out, fmt=fmt, quiet=quiet,
               manifest={"command": "bench", "config": config.__dict__, "machine": machine_description()})
