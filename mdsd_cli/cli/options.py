"""Option types shared by the commands, declared once.

Choice options take plain strings and are checked by :func:`choice`, so that a
mistyped name gets one line with the choices and a "did you mean" hint (the
commands receive the ``str`` Enum member, as with an Enum-typed option).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..errors import did_you_mean


def choice(enum_cls: type[Enum]):
    """A Typer callback turning the given string (or list of them) into members of ``enum_cls``."""
    names = [str(m.value) for m in enum_cls]

    def convert(value):
        if value is None or isinstance(value, enum_cls):
            return value
        try:
            return enum_cls(value)
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(names)}{did_you_mean(value, names)}") from None

    def callback(value):
        return [convert(v) for v in value] if isinstance(value, (list, tuple)) else convert(value)

    return callback


def metavar(enum_cls: type[Enum]) -> str:
    """``iid|wor|greedy|hub|all``: the choices, for the help text."""
    return "|".join(str(m.value) for m in enum_cls)


DATA_PANEL = "Data"
SYNTHETIC_PANEL = "Synthetic data"
COMPUTE_PANEL = "Computation"
OUTPUT_PANEL = "Output"


class SamplerChoice(str, Enum):
    iid = "iid"
    wor = "wor"
    greedy = "greedy"
    hub = "hub"
    topk = "topk"
    all = "all"


class SolverChoice(str, Enum):
    chain = "chain"
    primal_lp = "primal-lp"
    dual_lp = "dual-lp"
    subsets = "subsets"


class LPSolverChoice(str, Enum):
    highs = "highs"
    clarabel = "clarabel"


class FamilyChoice(str, Enum):
    zipf = "zipf"
    dirichlet = "dirichlet"


class FormatChoice(str, Enum):
    csv = "csv"
    parquet = "parquet"
    json = "json"
    table = "table"


DataOpt = Annotated[Path | None, typer.Option(
    "--data", "-d", help="Pairs: a built-in dataset (pydoc-ngram, zipf, dirichlet; see mdsd datasets), a file "
    "(.npz or .parquet, probabilities or logits) or a dump directory from mdsd dump.",
    rich_help_panel=DATA_PANEL)]
RenormalizeOpt = Annotated[bool, typer.Option(
    "--renormalize", help="Rescale rows that do not sum to 1 (within the rounding of their dtype: 1e-6 for "
    "float64) instead of refusing them.",
    rich_help_panel=DATA_PANEL)]
TemperatureOpt = Annotated[list[float] | None, typer.Option(
    "--temperature", "-t", min=0.0, help="Temperature(s) applied to the pairs (0 = greedy one-hot). "
    "Repeat for several. (default: 1)", rich_help_panel=DATA_PANEL)]

SyntheticOpt = Annotated[str | None, typer.Option(
    "--synthetic", help="Generate pairs instead of reading --data.", rich_help_panel=SYNTHETIC_PANEL,
    callback=choice(FamilyChoice), metavar=metavar(FamilyChoice))]


def pairs_option(synthetic_default: int):
    """``--pairs N``: the first N pairs of --data (default all), or N synthetic pairs."""
    return Annotated[int | None, typer.Option(
        "--pairs", min=1, help=f"Number of pairs: the first N of --data (default: all), or N --synthetic pairs "
        f"(default: {synthetic_default}).", rich_help_panel=DATA_PANEL)]


PairsOpt = pairs_option(4)
SyntheticPairsOpt = Annotated[int, typer.Option("--pairs", min=1, help="Number of synthetic pairs.",
                                                rich_help_panel=SYNTHETIC_PANEL)]
PairRangeOpt = Annotated[str | None, typer.Option(
    "--pair-range", metavar="A:B", help="Only pairs A to B-1 (of --data, or of the --synthetic family), e.g. to "
    "split a large dataset into shards; the pair column keeps their index.", rich_help_panel=DATA_PANEL)]
VocabOpt = Annotated[int, typer.Option("--vocab", "-V", min=1, help="Vocabulary size V.",
                                       rich_help_panel=SYNTHETIC_PANEL)]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Random seed.", rich_help_panel=SYNTHETIC_PANEL)]
ConcentrationOpt = Annotated[float, typer.Option(
    "--concentration", help="Dirichlet concentration (dirichlet family).",
    rich_help_panel=SYNTHETIC_PANEL)]
ExponentOpt = Annotated[float, typer.Option(
    "--exponent", help="Zipf exponent of the target logits (zipf family).",
    rich_help_panel=SYNTHETIC_PANEL)]
NoiseOpt = Annotated[float, typer.Option(
    "--noise", min=0.0, help="Std of the Gaussian noise added to the draft logits (zipf family).",
    rich_help_panel=SYNTHETIC_PANEL)]


def executor_options(panel: str, *, executor_help: str):
    """``--executor``, ``--scheduler`` and ``--timeout``, in the help panel ``panel``: where the tasks run, local
    processes or a Dask cluster (defaults to give them: ``"local"``, ``None``, ``10.0``).

    Returns their three option types; the executor's name is checked by :func:`mdsd_cli.sweep.check_executor`.
    """
    return (
        Annotated[str, typer.Option("--executor", help=executor_help, rich_help_panel=panel)],
        Annotated[str | None, typer.Option("--scheduler", help="Dask scheduler address (tcp://host:8786).",
                                           rich_help_panel=panel)],
        Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the Dask scheduler.",
                                      rich_help_panel=panel)],
    )


def sampler_specs(value):
    """A Typer callback checking draft sampler specs (``wor``, ``wor:temperature=0.8``, ``hybrid:m=2``, ``all``)."""
    from ..errors import MdsdError
    from ..samplers import get_sampler

    for v in value if isinstance(value, (list, tuple)) else [value]:
        if v is None or v == "all":
            continue
        try:
            get_sampler(v)
        except MdsdError as e:
            raise typer.BadParameter(e.cli_message()) from None
    return value


SAMPLER_SPEC_HELP = ("iid, wor, greedy, hub, topk, or a parametric law: base:temperature=τ, base:top_k=k, "
                     "base:top_p=π (drafts from the transformed q), hybrid:m=k (top k tokens + n-k drawn "
                     "without replacement)")
SamplerOpt = Annotated[list[str] | None, typer.Option(
    "--sampler", "-s", help=f"Draft sampler(s): {SAMPLER_SPEC_HELP}; repeat, or 'all' for the four plain ones. "
    "(default: iid)", rich_help_panel=COMPUTE_PANEL, callback=sampler_specs, metavar="SPEC")]
DraftsOpt = Annotated[list[int] | None, typer.Option(
    "--drafts", "-n", min=1, help="Number(s) of drafts; repeat for several. (default: 2)",
    rich_help_panel=COMPUTE_PANEL)]
SolverOpt = Annotated[list[str] | None, typer.Option(
    "--solver", help="Solver(s) for α*: chain (exact, fast), primal-lp, dual-lp, subsets (V <= 20). "
    "(default: chain)", rich_help_panel=COMPUTE_PANEL, callback=choice(SolverChoice), metavar=metavar(SolverChoice))]
LPSolverOpt = Annotated[str, typer.Option(
    "--lp-solver", help="LP back-end for primal-lp/dual-lp.", rich_help_panel=COMPUTE_PANEL,
    callback=choice(LPSolverChoice), metavar=metavar(LPSolverChoice))]
MaxLPOpt = Annotated[int, typer.Option(
    "--max-lp-variables", min=1, help="Refuse LPs with more variables than this.",
    rich_help_panel=COMPUTE_PANEL)]

OutOpt = Annotated[Path | None, typer.Option(
    "--out", "-o", help="Write the table to this file (.csv or .parquet) instead of stdout.",
    rich_help_panel=OUTPUT_PANEL, dir_okay=False)]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", "-f", help="Table format (default: from --out's extension, else csv). "
    "'table' is aligned text for reading; parquet needs --out.", rich_help_panel=OUTPUT_PANEL,
    callback=choice(FormatChoice), metavar=metavar(FormatChoice))]
SummaryOpt = Annotated[bool, typer.Option(
    "--summary", help="One row per group instead of one per pair: pairs, mean, std and the 95% interval of the "
    "mean (Student t over the pairs); an aligned table on stdout unless -f or --out.", rich_help_panel=OUTPUT_PANEL)]
NoTimingOpt = Annotated[bool, typer.Option(
    "--no-timing", help="Leave out the seconds column, so that the same command and --seed give "
    "byte-identical tables.", rich_help_panel=OUTPUT_PANEL)]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress or summary on stderr (warnings and errors still show).",
    rich_help_panel=OUTPUT_PANEL)]


class ProgressChoice(str, Enum):
    auto = "auto"
    bar = "bar"
    log = "log"
    none = "none"


ProgressOpt = Annotated[str, typer.Option(
    "--progress", help="Progress on stderr: bar (a live bar), log (a line every few seconds with count, rate and "
    "ETA, for log files; MDSD_PROGRESS_INTERVAL sets the seconds), none, or auto (bar on a terminal, else log). "
    "-q means none.", rich_help_panel=OUTPUT_PANEL, callback=choice(ProgressChoice), metavar=metavar(ProgressChoice))]

VERIFY_PANEL = "Verifiers"


class MethodChoice(str, Enum):
    exact = "exact"
    monte_carlo = "monte-carlo"
    auto = "auto"


class TestChoice(str, Enum):
    chi2 = "chi2"
    g = "g"


def _registered_verifiers(values):
    from ..verifiers import VERIFIERS

    names = [*VERIFIERS, "all"]
    for v in values or []:
        if v not in names:
            raise typer.BadParameter(f"{v!r} is not one of {', '.join(names)}{did_you_mean(v, names)}")
    return values


VerifierOpt = Annotated[list[str] | None, typer.Option(
    "--verifier", "-v", help="Verifier(s): nss, rrs, rrsw, kseq, hub, greedy, otm, optimal-iid, optimal-wor, topk, "
    "or 'all'. Repeat for several. (default: all)", callback=_registered_verifiers, rich_help_panel=VERIFY_PANEL,
    metavar="NAME")]
MethodOpt = Annotated[str, typer.Option(
    "--method", help="exact (closed form, or enumeration of draft tuples for small V), monte-carlo "
    "(mean ± standard error over sampled tuples), or auto (exact when possible).", rich_help_panel=VERIFY_PANEL,
    callback=choice(MethodChoice), metavar=metavar(MethodChoice))]
SamplesOpt = Annotated[int, typer.Option(
    "--samples", min=2, help="Draft tuples per Monte Carlo estimate.", rich_help_panel=VERIFY_PANEL)]
VerifySamplerOpt = Annotated[str | None, typer.Option(
    "--draft-law", help="Draft law (a sampler spec, e.g. iid:temperature=0.8): nss and otm take any; the others "
    "take their own law with any temperature, top_k or top_p, and verify against that transformed q. "
    "(default: each verifier's own)", rich_help_panel=VERIFY_PANEL, callback=sampler_specs, metavar="SPEC")]
