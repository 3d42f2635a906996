"""Sweeps: grids of α* and verifier cells, resumable, on local processes or a Dask cluster.

A sweep is a grid over datasets x temperatures x n x (draft samplers for α*,
with one or several solvers; verifiers for acceptance rates). Each grid point
is a **cell**: all pairs of one dataset at one temperature and n, for one
sampler/solver or verifier. A cell is keyed by a hash of its configuration and
written as soon as it finishes to ``cells/<key>.parquet`` (atomically), so a
rerun skips finished cells and an interrupted sweep loses nothing finished.

At the end the cells are combined into

* ``pairs.parquet`` / ``pairs.csv``: one row per (cell, pair): the value
  (α* or acceptance), its standard error (Monte Carlo; 0 when exact), α* of
  the verifier's draft law and the gap;
* ``summary.csv`` / ``summary.parquet``: one row per cell: mean, standard
  deviation, 95% interval (Student t) over pairs, mean gap, pairs, status;
* ``timings.csv``: wall seconds per cell (total, median and max per pair) —
  kept apart so that the tables above are byte-identical whatever machine,
  executor or ``--jobs`` produced them;
* ``manifest.json``: the full config, package versions, git commit, seeds,
  per-cell timings, host.

Every random stream is seeded from the sweep seed, the cell key and the pair
index, so results do not depend on the executor or the order of cells. The
sweep file and its grid of cells: :mod:`mdsd_cli.sweep_config`.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from .errors import InputError, MdsdError, OutputError, SizeLimitError, option
from .sweep_config import (
    CELL_VERSION,
    FIGURES,
    Cell,
    DataSpec,
    SweepConfig,
    read_toml,
    sampler_defined_for,
)

# --- computing cells ---------------------------------------------------------------------

@lru_cache(maxsize=8)
def _base_pairs(spec: DataSpec):
    from .datasets import load_data
    from .distributions import dirichlet_pairs, zipf_pairs

    params = dict(spec.params)
    if spec.source == "synthetic":
        family = params.pop("family")
        V, N, seed = params.pop("vocab"), params.pop("pairs"), params.pop("seed")
        fn = zipf_pairs if family == "zipf" else dirichlet_pairs
        batch = fn(N, V, seed=seed, **params)
    else:
        batch = load_data(params["ref"])
    if spec.pairs is not None and spec.pairs < batch.num_pairs:
        batch = batch.select(slice(0, spec.pairs))
    return batch


def cell_pairs(cell: Cell):
    """The pairs of a cell's dataset at its temperature."""
    base = _base_pairs(cell.dataset)
    return base if cell.temperature == 1.0 else base.at_temperature(cell.temperature)


@dataclass
class CellResult:
    key: str
    cell: Cell
    values: np.ndarray
    stderr: np.ndarray
    alpha_star: np.ndarray
    seconds: np.ndarray
    status: str = "ok"
    message: str = ""
    vocab: int = 0


@cache
def _warm_up(kind: str, name: str, method: str, sampler: str) -> None:
    """Solve a 3-token problem once per process, so that one-off costs (numba
    compilation or cache loading, solver imports) stay out of the timings."""
    from .bounds import solve_optimal_acceptance
    from .verifiers import VERIFIERS, exact_rate

    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    n = 2
    try:
        if kind == "bound":
            solve_optimal_acceptance(p, q, n, sampler=name, solver=method)
        else:
            exact_rate(VERIFIERS[name](np.array(p), np.array(q), n, sampler))
    except MdsdError:
        pass


def run_cell(cell: Cell) -> CellResult:
    """Compute one cell (in any process); a size refusal is a result, not an error."""
    from .bounds import solve_optimal_acceptance
    from .bounds.chain import chain_solve
    from .verifiers import VERIFIERS, can_be_exact, exact_rate, monte_carlo_rate

    pairs = cell_pairs(cell)
    _warm_up(cell.kind, cell.name, cell.method, cell.sampler)
    N = pairs.num_pairs
    empty = np.zeros(0)
    values, stderr, seconds = np.zeros(N), np.zeros(N), np.zeros(N)
    try:
        if cell.kind == "bound":
            if cell.method == "chain":
                t0 = time.perf_counter()
                values, _, _ = chain_solve(pairs.target, pairs.draft, cell.n, sampler=cell.name, want_sets=False)
                seconds[:] = (time.perf_counter() - t0) / N
            else:
                from .bounds import check_problem_size

                check_problem_size(pairs.draft, cell.n, sampler=cell.name, solver=cell.method,
                                   max_lp_variables=cell.max_lp_variables)
                for i in range(N):
                    t0 = time.perf_counter()
                    values[i] = solve_optimal_acceptance(pairs.target[i], pairs.draft[i], cell.n, sampler=cell.name,
                                                         solver=cell.method,
                                                         max_lp_variables=cell.max_lp_variables).value
                    seconds[i] = time.perf_counter() - t0
            alpha = values.copy()
        else:
            cls = VERIFIERS[cell.name]
            if cls.name == "otm":
                cls = type("OTM", (cls,), {"max_lp_variables": cell.max_lp_variables})
            alpha, _, _ = chain_solve(pairs.target, pairs.draft, cell.n, sampler=cell.sampler, want_sets=False)
            for i in range(N):
                t0 = time.perf_counter()
                v = cls.unchecked(pairs.target[i], pairs.draft[i], cell.n, cell.sampler)
                if cell.method == "exact" or (cell.method == "auto" and can_be_exact(v)):
                    values[i] = exact_rate(v)
                else:
                    rng = np.random.default_rng([cell.seed, int(cell.key[:12], 16), i])
                    values[i], stderr[i] = monte_carlo_rate(v, cell.samples, rng)
                seconds[i] = time.perf_counter() - t0
    except SizeLimitError as exc:
        return CellResult(cell.key, cell, empty, empty, empty, empty, status="refused", message=str(exc),
                          vocab=pairs.vocab_size)
    return CellResult(cell.key, cell, values, stderr, np.asarray(alpha, dtype=float), seconds,
                      vocab=pairs.vocab_size)


# --- storing cells -------------------------------------------------------------------------

def _cell_path(out: Path, key: str) -> Path:
    return out / "cells" / f"{key}.parquet"


def write_cell(out: Path, result: CellResult) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .io import PARQUET_WRITE, atomic_path

    table = pa.table({"pair": np.arange(result.values.size, dtype=np.int64), "value": result.values,
                      "stderr": result.stderr, "alpha_star": result.alpha_star, "seconds": result.seconds})
    meta = {"cell": result.cell.as_dict(), "key": result.key, "status": result.status, "message": result.message,
            "vocab": result.vocab}
    table = table.replace_schema_metadata({b"mdsd_cell": json.dumps(meta).encode()})
    with atomic_path(_cell_path(out, result.key)) as tmp:
        pq.write_table(table, tmp, **PARQUET_WRITE)


def read_cell(out: Path, key: str):
    import pyarrow.parquet as pq

    from .io import PARQUET_READ

    table = pq.read_table(_cell_path(out, key), **PARQUET_READ)
    meta = json.loads(table.schema.metadata[b"mdsd_cell"])
    return table.to_pandas(), meta


def finished_cells(out: Path, cells: list[Cell]) -> set[str]:
    """Keys of the cells already stored (an unreadable cell file counts as not done)."""
    done = set()
    for c in cells:
        path = _cell_path(out, c.key)
        if path.exists():
            try:
                read_cell(out, c.key)
                done.add(c.key)
            except Exception:  # noqa: BLE001 - a damaged file is recomputed
                path.unlink(missing_ok=True)
    return done


# --- running -----------------------------------------------------------------------------

@dataclass
class SweepSummary:
    out: Path
    cells: int
    computed: int
    reused: int
    refused: int
    seconds: float


#: Where the tasks of a sweep (or of ``mdsd decode --expected``) run: local processes or a Dask cluster.
EXECUTORS = ("local", "dask")


def check_executor(executor: str) -> None:
    """Refuse an executor other than those of :data:`EXECUTORS`."""
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; choose local or dask")


def _connect_dask(scheduler: str | None, timeout: float):
    try:
        from dask.distributed import Client
    except ImportError:  # pragma: no cover - dask is a dependency
        raise MdsdError("the dask executor needs dask[distributed]: pip install 'dask[distributed]'") from None
    if not scheduler:
        raise InputError(option("--executor dask", "executor='dask'") + " needs "
                         f"{option('--scheduler ADDRESS', 'scheduler=ADDRESS')} (for example tcp://10.0.0.5:8786)")
    try:
        _probe_scheduler(scheduler, timeout)
        return Client(scheduler, timeout=f"{timeout}s")
    except (OSError, TimeoutError) as exc:
        raise MdsdError(f"cannot reach the Dask scheduler at {scheduler} within {timeout:g} s "
                        f"({str(exc).splitlines()[0] if str(exc) else 'no answer'}); "
                        "check the address and that the scheduler is running") from None
    except Exception as exc:  # noqa: BLE001 - a malformed address or something else answering on that port
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MdsdError(f"cannot connect to a Dask scheduler at {scheduler} ({type(exc).__name__}: {detail}); "
                        "give its address as tcp://HOST:PORT and check that the scheduler is running") from None


def _probe_scheduler(address: str, timeout: float) -> None:
    """Ask ``address`` for its identity within ``timeout`` seconds (raises TimeoutError or OSError).

    ``Client(address, timeout=...)`` can wait forever on a server that accepts the
    connection but never completes the handshake; this probe cannot.
    """
    import asyncio

    from distributed.comm import connect

    async def probe():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded():
        return await asyncio.wait_for(probe(), timeout)

    asyncio.run(bounded())


def run_sweep(config: SweepConfig, out, *, jobs: int = 1, executor: str = "local", scheduler: str | None = None,
              timeout: float = 10.0, progress=None, client=None) -> SweepSummary:
    """Run every unfinished cell of ``config`` into ``out``; then write the combined tables.

    ``progress(done, total)`` is called after each cell. ``client`` may be an
    existing ``dask.distributed.Client`` (else one is made for ``scheduler``).
    """
    out = Path(out)
    check_executor(executor)
    own = executor == "dask" and client is None
    if own:  # before creating anything: an unreachable scheduler leaves no directory behind
        client = _connect_dask(scheduler, timeout)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "cells").mkdir(exist_ok=True)
    except OSError as exc:
        if own:
            client.close()
        raise OutputError(f"cannot create the sweep directory {out}: {exc.strerror or exc}") from None
    cells = config.cells()
    done = finished_cells(out, cells)
    todo = [c for c in cells if c.key not in done]
    progress = progress or (lambda done, total: None)
    started = time.perf_counter()
    progress(len(done), len(cells))
    count = len(done)
    if executor == "dask":
        try:
            from dask.distributed import as_completed

            futures = [client.submit(run_cell, c, pure=False) for c in todo]
            for future in as_completed(futures):
                write_cell(out, future.result())
                count += 1
                progress(count, len(cells))
        finally:
            if own:
                client.close()
    elif executor == "local" and jobs > 1 and len(todo) > 1:
        import concurrent.futures as cf
        import multiprocessing

        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(run_cell, c) for c in todo]
            try:
                for future in cf.as_completed(futures):
                    write_cell(out, future.result())
                    count += 1
                    progress(count, len(cells))
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    else:
        for c in todo:
            write_cell(out, run_cell(c))
            count += 1
            progress(count, len(cells))
    seconds = time.perf_counter() - started
    refused = finalize(config, out, seconds=seconds, executor=executor, jobs=jobs)
    return SweepSummary(out, len(cells), len(todo), len(done), refused, seconds)


def finalize(config: SweepConfig, out: Path, *, seconds: float = 0.0, executor: str = "local", jobs: int = 1) -> int:
    """Combine the stored cells into the pair, summary and timing tables and the manifest."""
    import pandas as pd

    from .io import atomic_path, build_manifest
    from .summary import mean_interval

    pair_frames, summary_rows, timing_frames, cell_times = [], [], [], {}
    refused = 0
    for c in config.cells():
        df, meta = read_cell(out, c.key)
        ident = {"dataset": c.dataset.name, "vocab": meta["vocab"], "temperature": c.temperature, "n": c.n,
                 "kind": c.kind, "name": c.name, "sampler": c.sampler, "method": c.method}
        if meta["status"] == "refused":
            refused += 1
        if len(df):
            frame = df.drop(columns="seconds").assign(**ident)
            frame["gap"] = frame["alpha_star"] - frame["value"]
            pair_frames.append(frame)
            seconds_per_pair = df["seconds"].to_numpy()
            timing_frames.append({"cell": c.key, **ident, "pairs": int(seconds_per_pair.size),
                                  "seconds_total": float(seconds_per_pair.sum()),
                                  "seconds_median": float(np.median(seconds_per_pair)),
                                  "seconds_max": float(seconds_per_pair.max())})
        values = df["value"].to_numpy()
        mean, sd, lo, hi = mean_interval(values)
        gaps = (df["alpha_star"] - df["value"]).to_numpy()
        summary_rows.append({**ident, "status": meta["status"], "pairs": int(values.size), "mean": mean, "std": sd,
                             "ci95_low": lo, "ci95_high": hi, "alpha_star_mean": float(df["alpha_star"].mean())
                             if len(df) else math.nan, "gap_mean": float(gaps.mean()) if len(df) else math.nan,
                             "stderr_mean": float(df["stderr"].mean()) if len(df) else math.nan,
                             "note": meta["message"]})
        cell_times[c.key] = float(df["seconds"].sum()) if len(df) else 0.0
    columns = ["dataset", "vocab", "temperature", "n", "kind", "name", "sampler", "method", "pair", "value", "stderr",
               "alpha_star", "gap"]
    pairs = pd.concat(pair_frames, ignore_index=True)[columns] if pair_frames else pd.DataFrame(columns=columns)
    summary = pd.DataFrame(summary_rows)
    timings = pd.DataFrame(timing_frames)
    manifest = build_manifest("sweep", config.as_dict(), seeds={"sweep": config.seed,
                              "streams": "numpy default_rng([seed, cell key, pair])"},
                              cells={"total": len(summary_rows), "refused": refused},
                              timings={"wall_seconds": round(seconds, 3), "executor": executor, "jobs": jobs,
                                       "cell_seconds": cell_times})
    # Every table is written to its temporary file first and all are renamed together at
    # the end: a failure while writing (disk full) leaves the previous tables as they were.
    with contextlib.ExitStack() as stack:
        def target(name):
            return stack.enter_context(atomic_path(out / name))

        for name, frame in (("pairs", pairs), ("summary", summary)):
            frame.to_parquet(target(f"{name}.parquet"), index=False)
            frame.to_csv(target(f"{name}.csv"), index=False, float_format="%.12g")
        timings.to_csv(target("timings.csv"), index=False, float_format="%.6g")
        target("manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return refused


__all__ = ["CELL_VERSION", "EXECUTORS", "FIGURES", "Cell", "CellResult", "DataSpec", "SweepConfig", "SweepSummary",
           "cell_pairs", "check_executor", "finalize", "finished_cells", "read_cell", "read_toml", "run_cell",
           "run_sweep", "sampler_defined_for", "write_cell"]
