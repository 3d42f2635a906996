"""Where a command's pairs come from: a file (--data) or a synthetic family; which of them (--pairs,
--pair-range); and the warnings about what the options do not apply to.

The options that choose the pairs are declared once, as the fields of :class:`PairOptions`;
:func:`with_pair_options` gives them to every command that reads pairs (bound, verify, design).
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass, fields

import numpy as np

from ..distributions import PairBatch, dirichlet_pairs, zipf_pairs
from ..errors import InputError
from .console import warn
from .options import (
    ConcentrationOpt,
    DataOpt,
    ExponentOpt,
    NoiseOpt,
    PairRangeOpt,
    PairsOpt,
    RenormalizeOpt,
    SeedOpt,
    SyntheticOpt,
    TemperatureOpt,
    VocabOpt,
)

#: Options that describe --synthetic pairs, so do nothing with --data.
SYNTHETIC_ONLY = ("vocab", "concentration", "exponent", "noise")


def given(ctx, *names: str) -> list[str]:
    """Those of ``names`` (parameters of the command of ``ctx``, a ``typer.Context``) given on the command line."""
    if ctx is None:
        return []
    out = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append(name)
    return out


def warn_ignored(ctx, names, reason: str) -> None:
    """Warn (stderr) about options given on the command line that do nothing here."""
    flags = [f"--{n.replace('_', '-')}" for n in given(ctx, *names)]
    if flags:
        warn(f"{', '.join(flags)} {'does' if len(flags) == 1 else 'do'} nothing {reason}; ignored")


def parse_pair_range(text: str | None) -> tuple[int | None, int | None] | None:
    """``"A:B"`` (B exclusive; either side may be left out) as ``(A, B)``."""
    if text is None:
        return None
    start, sep, stop = text.partition(":")
    try:
        if not sep:
            raise ValueError
        a = int(start) if start.strip() else None
        b = int(stop) if stop.strip() else None
    except ValueError:
        raise InputError(f"--pair-range takes A:B (pairs A to B-1, e.g. 0:16), got {text!r}") from None
    if (a is not None and a < 0) or (b is not None and b < 0) or (a is not None and b is not None and b <= a):
        raise InputError(f"--pair-range {text}: need 0 <= A < B")
    return a, b


def resolve_pairs(*, data, synthetic, pairs: int | None, vocab: int, seed: int, concentration: float,
                  exponent: float, noise: float, renormalize: bool, pair_range: str | None = None,
                  default_pairs: int = 4, seed_is_synthetic: bool = True, ctx=None) -> PairBatch:
    """Pairs at temperature 1 from ``--data`` or ``--synthetic`` (exactly one), cut to ``--pairs N``
    (the first N) or ``--pair-range A:B``; the kept pairs keep their original index in the ``pair`` column."""
    if data is not None and synthetic is not None:
        raise InputError("give either --data FILE or --synthetic FAMILY, not both")
    if pairs is not None and pair_range is not None:
        raise InputError("give either --pairs N (the first N pairs) or --pair-range A:B, not both")
    span = parse_pair_range(pair_range)
    if data is not None:
        from ..datasets import load_data

        warn_ignored(ctx, SYNTHETIC_ONLY + (("seed",) if seed_is_synthetic else ()), "with --data (they describe "
                     "--synthetic pairs)")
        batch = load_data(data, renormalize=renormalize)
        if batch.metadata.get("complete") is False:
            from ..datasets.dumps import dump_status

            warn(f"{data}: " + dump_status(data, manifest=batch.metadata,
                                          stored=np.unique(batch.labels["prompt_id"])).note)
        total = batch.num_pairs
        if pairs is not None and pairs > total:
            warn(f"--pairs {pairs}: {data} holds {total} pairs; using all {total}")
        start, stop = (0, pairs) if pairs is not None else span if span is not None else (None, None)
        return _cut(batch, start, stop, str(data))
    if synthetic is None:
        raise InputError("no pairs given: pass --data (a file, a dump directory or a built-in dataset such as "
                         "pydoc-ngram) or --synthetic zipf|dirichlet")
    warn_ignored(ctx, ("renormalize",), "with --synthetic (synthetic pairs are exact distributions)")
    family = synthetic.value if hasattr(synthetic, "value") else str(synthetic)
    start, stop = span if span is not None else (None, None)
    if span is not None and stop is None:
        raise InputError("--pair-range with --synthetic needs an end (A:B)")
    count = stop if span is not None else (pairs if pairs is not None else default_pairs)
    if family == "dirichlet":
        batch = dirichlet_pairs(count, vocab, concentration=concentration, seed=seed)
    else:
        batch = zipf_pairs(count, vocab, exponent=exponent, noise=noise, seed=seed)
    return _cut(batch, start, stop, family)


def _cut(batch: PairBatch, start, stop, what: str) -> PairBatch:
    if start is None and stop is None:
        return batch
    total = batch.num_pairs
    start = start or 0
    if start >= total:
        raise InputError(f"--pair-range starts at pair {start} but {what} holds {total} pairs (0..{total - 1})")
    if stop is not None and stop > total:
        warn(f"--pair-range {start}:{stop}: {what} holds {total} pairs; using {start}:{total}")
    stop = total if stop is None else min(stop, total)
    if start == 0 and stop == total:
        return batch
    from dataclasses import replace

    labels = batch.labels if "pair" in batch.labels else {**batch.labels, "pair": np.arange(total)}
    return replace(batch, labels=labels).select(slice(start, stop))


def warn_few_tokens(batch: PairBatch, temperature: float, combos) -> None:
    """Warn when ``n`` exceeds the tokens a draft distribution can draft (and say what is drafted instead).

    ``combos`` are ``(sampler, n)``; ``wor``/``greedy``/``hub`` then draft the whole support (fewer than
    n drafts), ``iid`` repeats tokens (at most that many distinct drafts).
    """
    support = np.count_nonzero(batch.draft > 0, axis=1)
    by_n: dict[int, list[str]] = {}
    for sampler, n in combos:
        by_n.setdefault(n, []).append(sampler)
    for n, samplers in sorted(by_n.items()):
        short = support < n
        if not short.any():
            continue
        low, high = int(support[short].min()), int(support[short].max())
        tokens = f"{low}" if low == high else f"{low} to {high}"
        where = f"all {batch.num_pairs} pairs" if short.all() else f"{int(short.sum())} of {batch.num_pairs} pairs"
        at = f" at T = {temperature:g}" if temperature != 1.0 else ""
        kinds = []
        whole = [s for s in dict.fromkeys(samplers) if s != "iid"]
        if whole:
            kinds.append(f"{'/'.join(whole)} draft{'s' if len(whole) == 1 else ''} all of them (effective n = {tokens})")
        if "iid" in samplers:
            kinds.append(f"iid drafts repeat tokens (at most {tokens} distinct)")
        noun = "token" if high == 1 else "tokens"
        warn(f"n = {n} exceeds the {tokens} {noun} of positive draft mass in {where}{at}: {'; '.join(kinds)}")


def synthetic_config(*, synthetic, pairs, vocab, seed, concentration, exponent, noise) -> dict:
    """The synthetic spec as plain data for manifests."""
    if synthetic is None:
        return {}
    family = synthetic.value if hasattr(synthetic, "value") else str(synthetic)
    spec = {"family": family, "pairs": pairs, "vocab": vocab, "seed": seed}
    if family == "dirichlet":
        spec["concentration"] = concentration
    else:
        spec.update(exponent=exponent, noise=noise)
    return spec


@dataclass(frozen=True)
class PairOptions:
    """The options choosing the (p, q) pairs of a command, in the order of its help text.

    A new data option is one more field here (an option type of :mod:`.options` and its default), read by
    :func:`resolve_pairs` under the same name; :func:`with_pair_options` puts it on every command.
    """

    data: DataOpt = None
    synthetic: SyntheticOpt = None
    pairs: PairsOpt = None
    pair_range: PairRangeOpt = None
    vocab: VocabOpt = 1000
    seed: SeedOpt = 0
    concentration: ConcentrationOpt = 1.0
    exponent: ExponentOpt = 1.0
    noise: NoiseOpt = 1.0
    temperature: TemperatureOpt = None
    renormalize: RenormalizeOpt = False

    def load(self, ctx=None, *, seed_is_synthetic: bool = True) -> PairBatch:
        """The pairs at temperature 1 (see :func:`resolve_pairs`); ``ctx`` names the options given for nothing."""
        chosen = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "temperature"}
        return resolve_pairs(**chosen, seed_is_synthetic=seed_is_synthetic, ctx=ctx)

    @property
    def temperatures(self) -> list[float]:
        """The distinct temperatures asked for, in order (default: 1)."""
        return list(dict.fromkeys(self.temperature or [1.0]))

    def manifest(self, num_pairs: int) -> dict:
        """Where the pairs came from, as plain data for the manifest (``num_pairs``: how many were read)."""
        return {
            "data": str(self.data) if self.data else None,
            "synthetic": synthetic_config(synthetic=self.synthetic, pairs=num_pairs, vocab=self.vocab, seed=self.seed,
                                          concentration=self.concentration, exponent=self.exponent, noise=self.noise),
            "pairs": self.pairs, "pair_range": self.pair_range,
        }


def with_pair_options(command):
    """Give a Typer ``command`` the options of :class:`PairOptions` in place of its parameter typed ``PairOptions``.

    Typer has no option groups: the fields become parameters of the command's signature where that parameter
    stands (so they show in ``--help`` in that place, with their own names and defaults), and the command
    receives them as one :class:`PairOptions`.
    """
    signature = inspect.signature(command, eval_str=True)
    params = list(signature.parameters.values())
    [at] = [i for i, param in enumerate(params) if param.annotation is PairOptions]
    name = params[at].name
    hints = typing.get_type_hints(PairOptions, include_extras=True)
    group = [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default,
                               annotation=hints[f.name]) for f in fields(PairOptions)]
    params[at:at + 1] = group

    @functools.wraps(command)
    def run(*args, **kwargs):
        options = PairOptions(**{f.name: kwargs.pop(f.name, f.default) for f in fields(PairOptions)})
        return command(*args, **kwargs, **{name: options})

    run.__signature__ = signature.replace(parameters=params)
    run.__annotations__ = {param.name: param.annotation for param in params}
    return run
