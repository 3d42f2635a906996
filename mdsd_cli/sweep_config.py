"""A sweep's configuration: the experiment file (TOML), its datasets, and the grid of cells it spans.

:class:`SweepConfig` reads and checks a sweep file before any work starts (every name, range and dataset
path); :meth:`SweepConfig.cells` lists its grid, one :class:`Cell` per dataset x temperature x n x
(sampler and solver, or verifier), each keyed by a hash of its configuration. :func:`read_toml` also
reads the configs of ``mdsd design`` and ``mdsd decode``. Running the cells: :mod:`mdsd_cli.sweep`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import InputError, MdsdError, did_you_mean

#: Bumped when cell computations change meaning, so old cell files are not reused.
CELL_VERSION = 1
FIGURES = ("samplers", "verifier-gap", "num-drafts", "scaling", "none")


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


__all__ = ["CELL_VERSION", "FIGURES", "Cell", "DataSpec", "SweepConfig", "read_toml", "sampler_defined_for"]
