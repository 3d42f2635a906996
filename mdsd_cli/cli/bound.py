"""``mdsd bound`` and ``mdsd generate``."""

from __future__ import annotations

import time

import typer

from ..bounds import MAX_LP_VARIABLES, check_problem_size, solve_optimal_acceptance
from ..bounds.chain import chain_solve
from ..errors import InputError
from ..io import build_manifest, check_output_path, save_pairs
from ..samplers import get_sampler, sampler_names
from .console import emit_table, info, show_progress, warn
from .data import PairOptions, resolve_pairs, warn_few_tokens, with_pair_options
from .options import (
    ConcentrationOpt,
    DraftsOpt,
    ExponentOpt,
    FamilyChoice,
    FormatOpt,
    LPSolverOpt,
    MaxLPOpt,
    NoiseOpt,
    NoTimingOpt,
    OutOpt,
    ProgressOpt,
    QuietOpt,
    SamplerOpt,
    SeedOpt,
    SolverOpt,
    SummaryOpt,
    SyntheticOpt,
    SyntheticPairsOpt,
    VocabOpt,
)

#: Rows handed to the batched chain solver at once (per-pair time is the batch time / rows).
CHAIN_BATCH = 64


def _expand_samplers(choices, drafts) -> list[tuple[str, int]]:
    names = [str(getattr(c, "value", c)) for c in (choices or [])] or ["iid"]
    explicit = [x for x in names if x != "all"]
    if "all" in names:
        names = sampler_names()
    ordered = list(dict.fromkeys(names))
    combos = []
    for name in dict.fromkeys(get_sampler(x).name for x in ordered):  # canonical: wor:temperature=1 is wor
        sampler = get_sampler(name)
        if name.startswith("hybrid"):
            for n in drafts:
                sampler.check_n(n)  # m must be below every n asked for
        skipped = []
        for n in drafts:
            if sampler.fixed_n is not None and n != sampler.fixed_n:
                if name in explicit:
                    sampler.check_n(n)  # raises with a clear message
                skipped.append(n)  # 'all' skips hub for n != 2, and says so
                continue
            combos.append((name, n))
        if skipped:
            warn(f"skipping sampler {name} at n={', '.join(map(str, skipped))}: {name} drafts are defined for "
                 f"n = {sampler.fixed_n} only")
    if not combos:
        raise InputError("no (sampler, n) combination to compute; hub needs -n 2")
    return combos


@with_pair_options
def bound(
    ctx: typer.Context,
    source: PairOptions,
    sampler: SamplerOpt = None,
    drafts: DraftsOpt = None,
    solver: SolverOpt = None,
    lp_solver: LPSolverOpt = "highs",
    max_lp_variables: MaxLPOpt = MAX_LP_VARIABLES,
    out: OutOpt = None,
    fmt: FormatOpt = None,
    no_timing: NoTimingOpt = False,
    summary: SummaryOpt = False,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Optimal acceptance rate α* for every pair, sampler, n and solver.

    One row per (pair, temperature, sampler, n, solver): α*, the size of the
    minimising token set (for chain: the minimising prefix) and the wall time per
    pair. CSV on stdout unless --out is given. --summary gives one row per
    (temperature, sampler, n, solver) instead: mean, std and 95% interval over pairs.
    """
    if out is not None:
        check_output_path(out)
    base = source.load(ctx)
    temps = source.temperatures
    combos = _expand_samplers(sampler, list(dict.fromkeys(drafts or [2])))
    solvers = list(dict.fromkeys(s.value for s in (solver or [])) or ["chain"])
    for name, n in combos:
        for sv in solvers:
            check_problem_size(base.draft, n, sampler=name, solver=sv, max_lp_variables=max_lp_variables)

    _warm_up(combos, solvers, lp_solver.value)
    rows = []
    total = base.num_pairs * len(temps) * len(combos) * len(solvers)
    label_names = list(base.labels)
    with show_progress("α*", total, mode=progress, quiet=quiet) as advance:
        for T in temps:
            batch = base if T == 1.0 else base.at_temperature(T)
            warn_few_tokens(batch, T, combos)
            for name, n in combos:
                for sv in solvers:
                    for i, value, size, seconds in _solve_all(batch, n, name, sv, lp_solver.value,
                                                             max_lp_variables, advance):
                        row = {"pair": i}
                        row.update({k: batch.labels[k][i] for k in label_names})
                        row.update(temperature=T, sampler=name, n=n, solver=sv, alpha_star=value,
                                   set_size=size, seconds=seconds)
                        rows.append(row)
    import pandas as pd

    df = pd.DataFrame(rows)
    if no_timing:
        df = df.drop(columns="seconds")
    if summary:
        from ..summary import summarize

        df = summarize(df, "alpha_star", ["temperature", "sampler", "n", "solver"])
        fmt = fmt or ("table" if out is None else None)
    config = {
        **source.manifest(base.num_pairs),
        "temperatures": temps, "samplers": sorted({c[0] for c in combos}),
        "drafts": sorted({c[1] for c in combos}), "solvers": solvers, "lp_solver": lp_solver.value,
        "renormalize": source.renormalize, "summary": summary,
    }
    emit_table(df, out=out, fmt=fmt, manifest=build_manifest("bound", config), quiet=quiet)


def _warm_up(combos, solvers, lp_solver) -> None:
    """Solve a 3-token problem per (sampler, solver) so that one-off costs (numba
    compilation or cache loading, CVXPY import) stay out of the per-pair times."""
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    for name, n in dict.fromkeys((name, n if get_sampler(name).fixed_n is None else 2) for name, n in combos):
        for sv in solvers:
            solve_optimal_acceptance(p, q, n, sampler=name, solver=sv, lp_solver=lp_solver)


def _solve_all(batch, n, sampler, solver, lp_solver, max_lp_variables, advance):
    P, Q = batch.target, batch.draft
    N = P.shape[0]
    if solver == "chain":
        for start in range(0, N, CHAIN_BATCH):
            rows = slice(start, min(start + CHAIN_BATCH, N))
            t0 = time.perf_counter()
            values, sizes, _ = chain_solve(P[rows], Q[rows], n, sampler=sampler, want_sets=False)
            per_pair = (time.perf_counter() - t0) / values.size
            for j in range(values.size):
                yield start + j, float(values[j]), int(sizes[j]), per_pair
            advance(values.size)
        return
    for i in range(N):
        t0 = time.perf_counter()
        res = solve_optimal_acceptance(P[i], Q[i], n, sampler=sampler, solver=solver, lp_solver=lp_solver,
                                       max_lp_variables=max_lp_variables)
        seconds = time.perf_counter() - t0
        advance()
        yield i, res.value, res.set_size, seconds


def generate(
    out: OutOpt = None,
    synthetic: SyntheticOpt = "zipf",
    pairs: SyntheticPairsOpt = 16,
    vocab: VocabOpt = 32000,
    seed: SeedOpt = 0,
    concentration: ConcentrationOpt = 1.0,
    exponent: ExponentOpt = 1.0,
    noise: NoiseOpt = 1.0,
    quiet: QuietOpt = False,
) -> None:
    """Write synthetic target/draft pairs to a file (.npz or .parquet).

    zipf pairs are saved as logits (any temperature can be applied when reading);
    dirichlet pairs as probabilities.
    """
    if out is None:
        raise InputError("give --out FILE.npz or --out FILE.parquet")
    check_output_path(out)
    if synthetic is None:
        synthetic = FamilyChoice.zipf
    batch = resolve_pairs(data=None, synthetic=synthetic, pairs=pairs, vocab=vocab, seed=seed,
                          concentration=concentration, exponent=exponent, noise=noise, renormalize=False)
    path = save_pairs(batch, out)
    kind = "logits" if batch.target_logits is not None else "probabilities"
    info(f"wrote {batch.num_pairs} pairs (V={batch.vocab_size}, {kind}) to {path}", quiet=quiet)


__all__ = ["bound", "generate"]
