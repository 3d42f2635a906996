"""``mdsd sweep`` and ``mdsd plot``."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .console import err_console, info, warn
from .options import ProgressOpt, QuietOpt, executor_options

GRID_PANEL = "Grid (override the config)"
RUN_PANEL = "Execution"

ExecutorOpt, SchedulerOpt, TimeoutOpt = executor_options(RUN_PANEL, executor_help="local (processes) or dask.")


def sweep(
    config: Path | None = typer.Argument(None, help="Sweep config (TOML), e.g. experiments/draft-samplers.toml.",
                                         dir_okay=False),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (default results/<name>).",
                                    rich_help_panel=RUN_PANEL),
    data: list[str] | None = typer.Option(None, "--data", "-d", help="Dataset(s): built-in name or path.",
                                          rich_help_panel=GRID_PANEL),
    temperature: list[float] | None = typer.Option(None, "--temperature", "-t", min=0.0, rich_help_panel=GRID_PANEL,
                                                   help="Temperature(s)."),
    drafts: list[int] | None = typer.Option(None, "--drafts", "-n", min=1, help="Number(s) of drafts.",
                                            rich_help_panel=GRID_PANEL),
    sampler: list[str] | None = typer.Option(None, "--sampler", "-s", help="Draft sampler(s) for α*.",
                                             rich_help_panel=GRID_PANEL),
    solver: list[str] | None = typer.Option(None, "--solver", help="Solver(s) for α*.", rich_help_panel=GRID_PANEL),
    verifier: list[str] | None = typer.Option(None, "--verifier", "-v", help="Verifier(s).", rich_help_panel=GRID_PANEL),
    samples: int | None = typer.Option(None, "--samples", min=2, help="Monte Carlo draft tuples per pair.",
                                       rich_help_panel=GRID_PANEL),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Sweep seed.", rich_help_panel=GRID_PANEL),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Local worker processes.", rich_help_panel=RUN_PANEL),
    executor: ExecutorOpt = "local",
    scheduler: SchedulerOpt = None,
    timeout: TimeoutOpt = 10.0,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Run a grid of α* and verifier cells; resumable, on local processes or Dask.

    The grid comes from a TOML config and/or the options (which override the
    config's lists). Each finished cell is stored at once under OUT/cells/, so a
    rerun skips it; Ctrl-C keeps every finished cell. At the end OUT holds
    pairs.{parquet,csv} (one row per pair), summary.{csv,parquet} (mean, std,
    95% interval per cell), timings.csv and manifest.json.
    """
    from ..sweep import SweepConfig, check_executor, run_sweep
    from .console import show_progress

    raw: dict = {}
    if config is not None:
        cfg = SweepConfig.from_toml(config)
        raw = cfg.as_dict()
        raw["datasets"] = [_spec_to_toml(s) for s in cfg.datasets]
    overrides = {"temperatures": temperature, "drafts": drafts, "samplers": sampler, "solvers": solver,
                 "verifiers": verifier, "samples": samples, "seed": seed}
    for key, value in overrides.items():
        if value:
            raw[key] = list(value) if isinstance(value, list) else value
    if data:
        raw["datasets"] = [{"name": d} if not Path(d).exists() else {"name": Path(d).name, "path": d} for d in data]
    if not raw:
        raise InputError("give a sweep config (TOML) or at least --data and --sampler/--verifier")
    raw.setdefault("name", "sweep")
    cfg = SweepConfig.from_dict(raw, where=str(config) if config else "options")
    _warn_incomplete_dumps(cfg)
    _warn_skipped(cfg)
    target = out or Path("results") / cfg.name
    if target.exists() and not target.is_dir():
        raise InputError(f"--out {target} is a file; a sweep writes a directory")
    check_executor(executor)
    total = len(cfg.cells())
    with show_progress("cells", total, mode=progress, quiet=quiet) as advance:
        last = {"done": 0}

        def on_cell(done, total):
            advance(done - last["done"])
            last["done"] = done

        try:
            summary = run_sweep(cfg, target, jobs=jobs, executor=executor, scheduler=scheduler, timeout=timeout,
                                progress=on_cell)
        except KeyboardInterrupt:
            err_console().print(f"Interrupted: finished cells are kept in {target / 'cells'}; rerun the same "
                                "command to resume.", markup=False)
            raise typer.Exit(130) from None
    info(f"{summary.cells} cells ({summary.computed} computed, {summary.reused} reused, {summary.refused} refused "
         f"as too large) in {summary.seconds:.1f} s -> {summary.out}/summary.csv", quiet=quiet)


def _warn_incomplete_dumps(cfg) -> None:
    from ..datasets.dumps import dump_status, is_dump

    for spec in cfg.datasets:
        ref = dict(spec.params).get("ref")
        if spec.source == "path" and is_dump(ref):
            note = dump_status(ref).note
            if note:
                warn(f"dataset {spec.name} ({ref}): {note}")


def _warn_skipped(cfg) -> None:
    """Say which (sampler or verifier, n) the grid leaves out: those defined for one n only (hub)."""
    from ..sweep import sampler_defined_for
    from ..verifiers import VERIFIERS

    for name in cfg.samplers:
        left_out = [n for n in cfg.drafts if not sampler_defined_for(name, n)]
        if left_out:
            warn(f"skipping sampler {name} at n={', '.join(map(str, left_out))}: it is not defined there "
                 "(hub: n = 2 only; hybrid:m=k: n > k)")
    for name in cfg.verifiers:
        fixed = VERIFIERS[name].fixed_n
        left_out = [n for n in cfg.drafts if fixed is not None and n != fixed]
        if left_out:
            warn(f"skipping verifier {name} at n={', '.join(map(str, left_out))}: it is defined for n = {fixed} only")


def _spec_to_toml(spec) -> dict:
    params = dict(spec.params)
    if spec.source == "synthetic":
        d = {"name": spec.name, "synthetic": params.pop("family"), **params}
        return d
    d = {"name": spec.name, spec.source: params["ref"]}
    if spec.pairs is not None:
        d["pairs"] = spec.pairs
    return d


def plot(
    results: Path = typer.Argument(..., help="A sweep output directory (with summary.csv and manifest.json).",
                                   file_okay=False),
    out: Path | None = typer.Option(None, "--out", "-o", help="Figure directory, created if missing (default: the "
                                    "results directory).", file_okay=False),
    figure: str | None = typer.Option(None, "--figure", help="samplers, verifier-gap, num-drafts or scaling "
                                      "(default: from the sweep's config)."),
    quiet: QuietOpt = False,
) -> None:
    """Turn a sweep's tables into PNG and SVG figures (matplotlib)."""
    from ..plots import plot_results

    written = plot_results(results, out or results, figure=figure)
    for path in written:
        info(f"wrote {path}", quiet=quiet)
