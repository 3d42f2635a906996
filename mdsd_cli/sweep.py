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
index, so results do not depend on the executor or the order of cells.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from .errors import InputError, MdsdError, OutputError, SizeLimitError, did_you_mean, option

#: Bumped when cell computations change meaning, so old cell files are not reused.
CELL_VERSION = 1
FIGURES = ("samplers", "verifier-gap", "num-drafts", "scaling", "none")


# --- configuration ------------------------------------------------------------------------

def read_toml(path, *, missing: type[MdsdError] = InputError) -> dict:
    """The contents of the experiment file ``path`` (TOML): of a sweep, and of ``mdsd design`` and
    ``mdsd decode`` configs; a missing file raises ``missing``, invalid TOML an :class:`InputError`."""
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    path = Path(path)
    if not path.exists():
        raise missing(f"config file {path} not found")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not valid TOML ({exc})") from None


@dataclass(frozen=True)
class DataSpec:
    """One dataset of a sweep: a built-in name, a path, or a synthetic family."""

    name: str
    source: str  # "builtin", "path" or "synthetic"
    params: tuple = ()  # sorted (key, value) pairs
    pairs: int | None = None  # first N pairs only

    def as_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "params": dict(self.params), "pairs": self.pairs}

    @classmethod
    def from_dict(cls, d: dict) -> DataSpec:
        return cls(d["name"], d["source"], tuple(sorted(d["params"].items())), d.get("pairs"))


@dataclass(frozen=True)
class Cell:
    """One unit of work: a dataset at one temperature and n, for one method."""

    dataset: DataSpec
    temperature: float
    n: int
    kind: str  # "bound" or "verify"
    name: str  # sampler (bound) or verifier (verify)
    method: str  # solver (bound) or exact/monte-carlo/auto (verify)
    sampler: str  # draft law
    seed: int
    samples: int = 0
    max_lp_variables: int = 0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["dataset"] = self.dataset.as_dict()
        return d

    @property
    def key(self) -> str:
        text = json.dumps({"v": CELL_VERSION, **self.as_dict()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


_KEYS = {
    "name": str, "description": str, "seed": int, "figure": str, "datasets": list, "temperatures": list,
    "drafts": list, "samplers": list, "solvers": list, "verifiers": list, "method": str, "samples": int,
    "max_lp_variables": int, "lp_solver": str,
}
_DATASET_KEYS = {"name": str, "builtin": str, "path": str, "synthetic": str, "pairs": int, "vocab": (int, list),
                 "seed": int, "noise": (int, float), "exponent": (int, float), "concentration": (int, float)}


@dataclass
class SweepConfig:
    """A sweep's grid; see the TOML files in ``experiments/`` for examples."""

    name: str
    datasets: list[DataSpec]
    temperatures: list[float] = field(default_factory=lambda: [1.0])
    drafts: list[int] = field(default_factory=lambda: [2])
    samplers: list[str] = field(default_factory=list)
    solvers: list[str] = field(default_factory=lambda: ["chain"])
    verifiers: list[str] = field(default_factory=list)
    method: str = "auto"
    samples: int = 20_000
    seed: int = 0
    max_lp_variables: int = 2_000_000
    figure: str = "none"
    description: str = ""

    # -- reading -------------------------------------------------------------------------
    @classmethod
    def from_toml(cls, path) -> SweepConfig:
        return cls.from_dict(read_toml(path), where=str(Path(path)))

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "config") -> SweepConfig:
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_KEYS))}")
        for key, value in data.items():
            _check_type(where, key, value, _KEYS[key])
        if "datasets" not in data or not data["datasets"]:
            raise InputError(f"{where}: 'datasets' is missing or empty; add at least one [[datasets]] entry")
        config = cls(
            name=data.get("name", Path(where).stem), description=data.get("description", ""),
            datasets=[spec for i, d in enumerate(data["datasets"]) for spec in _dataset_specs(d, f"{where}: datasets[{i}]")],
            temperatures=[float(_number(where, "temperatures", t)) for t in data.get("temperatures", [1.0])],
            drafts=[_integer(where, "drafts", n) for n in data.get("drafts", [2])],
            samplers=[_string(where, "samplers", s) for s in data.get("samplers", [])],
            solvers=[_string(where, "solvers", s) for s in data.get("solvers", ["chain"])],
            verifiers=[_string(where, "verifiers", s) for s in data.get("verifiers", [])],
            method=data.get("method", "auto"), samples=data.get("samples", 20_000), seed=data.get("seed", 0),
            max_lp_variables=data.get("max_lp_variables", 2_000_000), figure=data.get("figure", "none"),
        )
        config.validate(where)
        return config

    def validate(self, where: str = "config") -> None:
        """Check every name and range now, before any work starts."""
        from .bounds import SOLVERS
        from .samplers import get_sampler
        from .verifiers import VERIFIERS

        if not self.samplers and not self.verifiers:
            raise InputError(f"{where}: empty grid: give 'samplers' (for α*) and/or 'verifiers'")
        for name in self.samplers:
            try:
                get_sampler(name)
            except InputError as e:
                raise InputError(f"{where}: {e}") from None
        for kind, names, known in (("solver", self.solvers, SOLVERS), ("verifier", self.verifiers, VERIFIERS)):
            for name in names:
                if name not in known:
                    raise InputError(f"{where}: unknown {kind} {name!r}; choose from {', '.join(known)}"
                                     f"{did_you_mean(name, known)}")
        if not self.temperatures or any(not (t >= 0 and math.isfinite(t)) for t in self.temperatures):
            raise InputError(f"{where}: temperatures must be a non-empty list of numbers >= 0")
        if not self.drafts or any(n < 1 for n in self.drafts):
            raise InputError(f"{where}: drafts must be a non-empty list of integers >= 1")
        if self.method not in ("exact", "monte-carlo", "auto"):
            raise InputError(f"{where}: method must be exact, monte-carlo or auto, not {self.method!r}")
        if self.samples < 2:
            raise InputError(f"{where}: samples must be >= 2")
        if self.seed < 0:
            raise InputError(f"{where}: seed must be an integer >= 0, got {self.seed}")
        if self.max_lp_variables < 1:
            raise InputError(f"{where}: max_lp_variables must be >= 1, got {self.max_lp_variables}")
        if self.figure not in FIGURES:
            raise InputError(f"{where}: figure must be one of {', '.join(FIGURES)}")
        for spec in self.datasets:
            _check_dataset_exists(spec, where)
        if not self.cells():
            raise InputError(f"{where}: the grid has no cells (hub needs n = 2)")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["datasets"] = [s.as_dict() for s in self.datasets]
        return d

    # -- the grid ------------------------------------------------------------------------
    def cells(self) -> list[Cell]:
        from .verifiers import VERIFIERS

        out: list[Cell] = []
        for spec in self.datasets:
            for T in self.temperatures:
                for n in self.drafts:
                    for s in self.samplers:
                        if not sampler_defined_for(s, n):
                            continue
                        for solver in self.solvers:
                            out.append(Cell(spec, float(T), int(n), "bound", s, solver, s, self.seed,
                                            max_lp_variables=self.max_lp_variables))
                    for v in self.verifiers:
                        cls = VERIFIERS[v]
                        if cls.fixed_n is not None and n != cls.fixed_n:
                            continue
                        out.append(Cell(spec, float(T), int(n), "verify", v, self.method, cls.default_sampler,
                                        self.seed, samples=self.samples, max_lp_variables=self.max_lp_variables))
        return out


def sampler_defined_for(spec: str, n: int) -> bool:
    """Whether draft sampler ``spec`` is defined for ``n`` drafts (``hub``: n = 2; ``hybrid:m=k``: n > k)."""
    from .samplers import get_sampler

    try:
        get_sampler(spec).check_n(n)
    except InputError:
        return False
    return True


def _check_type(where, key, value, expected):
    if isinstance(value, bool) and expected is not bool:
        raise InputError(f"{where}: '{key}' must be {getattr(expected, '__name__', expected)}, not a boolean")
    if expected is float:
        expected = (int, float)
    if not isinstance(value, expected):
        names = "/".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
        raise InputError(f"{where}: '{key}' must be {names}, got {type(value).__name__} {value!r}")


def _number(where, key, x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise InputError(f"{where}: every entry of '{key}' must be a number, got {x!r}")
    return x


def _integer(where, key, x):
    if isinstance(x, bool) or not isinstance(x, int):
        raise InputError(f"{where}: every entry of '{key}' must be an integer, got {x!r}")
    return x


def _string(where, key, x):
    if not isinstance(x, str):
        raise InputError(f"{where}: every entry of '{key}' must be a string, got {x!r}")
    return x


def _dataset_specs(d, where) -> list[DataSpec]:
    if not isinstance(d, dict):
        raise InputError(f"{where} must be a table with a name and one of builtin/path/synthetic")
    unknown = sorted(set(d) - set(_DATASET_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_DATASET_KEYS))}")
    for key, value in d.items():
        _check_type(where, key, value, _DATASET_KEYS[key])
    kinds = [k for k in ("builtin", "path", "synthetic") if k in d]
    if len(kinds) > 1:
        raise InputError(f"{where}: give one of builtin, path or synthetic, not {', '.join(kinds)}")
    pairs = d.get("pairs")
    if pairs is not None and pairs < 1:
        raise InputError(f"{where}: pairs must be >= 1")
    if not kinds:  # a bare name is a built-in dataset
        d = {**d, "builtin": d.get("name", "")}
        kinds = ["builtin"]
    kind = kinds[0]
    if kind == "synthetic":
        if d["synthetic"] not in ("zipf", "dirichlet"):
            raise InputError(f"{where}: synthetic must be zipf or dirichlet, not {d['synthetic']!r}")
        if pairs is None:
            raise InputError(f"{where}: a synthetic dataset needs 'pairs'")
        if d.get("seed", 0) < 0:
            raise InputError(f"{where}: seed must be an integer >= 0, got {d['seed']}")
        vocabs = d.get("vocab", 1000)
        vocabs = vocabs if isinstance(vocabs, list) else [vocabs]
        if not vocabs or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vocabs):
            raise InputError(f"{where}: vocab must be an integer >= 1 or a list of them")
        specs = []
        for V in vocabs:
            params = {"family": d["synthetic"], "vocab": V, "pairs": pairs, "seed": d.get("seed", 0)}
            for k in ("noise", "exponent", "concentration"):
                if k in d:
                    params[k] = float(d[k])
            base = d.get("name", d["synthetic"])
            name = f"{base}-V{V}" if len(vocabs) > 1 else base
            specs.append(DataSpec(name, "synthetic", tuple(sorted(params.items())), None))
        return specs
    extra = sorted(set(d) & {"vocab", "seed", "noise", "exponent", "concentration"})
    if extra:
        raise InputError(f"{where}: {', '.join(extra)} only apply to synthetic datasets")
    target = d[kind]
    return [DataSpec(d.get("name", target), kind, (("ref", target),), pairs)]


def _check_dataset_exists(spec: DataSpec, where: str) -> None:
    from .datasets import BUILTIN

    params = dict(spec.params)
    if spec.source == "builtin" and params["ref"] not in BUILTIN:
        raise InputError(f"{where}: unknown built-in dataset {params['ref']!r}; choose from {', '.join(BUILTIN)} "
                         "or give path = ...")
    if spec.source == "path" and not Path(params["ref"]).exists():
        raise InputError(f"{where}: dataset path {params['ref']} not found")


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
                v = cls(pairs.target[i], pairs.draft[i], cell.n, cell.sampler)
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
