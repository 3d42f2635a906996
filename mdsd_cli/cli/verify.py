"""``mdsd verify`` and ``mdsd check-lossless``."""

from __future__ import annotations

import math
import time

import numpy as np
import typer

from ..bounds.chain import chain_solve
from ..errors import InputError, SizeLimitError
from ..io import build_manifest, check_output_path
from ..samplers import get_sampler
from ..verifiers import (
    VERIFIERS,
    can_be_exact,
    exact_rate,
    get_verifier,
    monte_carlo_rate,
    output_distribution,
    sampled_output_test,
)
from ..verifiers.estimation import MAX_ENUMERATION
from .console import emit_table, info, show_progress, warn
from .data import PairOptions, resolve_pairs, warn_few_tokens, warn_ignored, with_pair_options
from .options import (
    DataOpt,
    DraftsOpt,
    FormatOpt,
    MethodChoice,
    MethodOpt,
    NoTimingOpt,
    OutOpt,
    ProgressOpt,
    QuietOpt,
    SamplesOpt,
    SeedOpt,
    SummaryOpt,
    SyntheticOpt,
    TestChoice,
    VerifierOpt,
    VerifySamplerOpt,
    VocabOpt,
    choice,
    metavar,
    pairs_option,
)


def _expand_verifiers(names, drafts, draft_law):
    chosen = list(dict.fromkeys(names or ["all"]))
    explicit = [x for x in chosen if x != "all"]
    if "all" in chosen:
        chosen = list(VERIFIERS)
    combos = []
    skipped: dict[str, list[int]] = {}
    for name in dict.fromkeys(chosen):
        cls = get_verifier(name)
        fits = draft_law and (cls.samplers is None or get_sampler(draft_law).kind in cls.samplers)
        sampler = get_sampler(draft_law).name if fits else cls.default_sampler
        if draft_law and not fits and name in explicit:
            raise InputError(f"verifier {name} is lossless for {'/'.join(cls.samplers)} drafts only (with any "
                             f"temperature, top_k or top_p), not {draft_law!r}")
        for n in drafts:
            if cls.fixed_n is not None and n != cls.fixed_n:
                if name in explicit:
                    raise InputError(f"verifier {name} is defined for n = {cls.fixed_n} only, got n = {n}")
                skipped.setdefault(name, []).append(n)
                continue
            combos.append((name, sampler, n))
    for name, ns in skipped.items():  # 'all' skips hub at n != 2, and says so
        warn(f"skipping {name} at n={', '.join(map(str, ns))}: {name} is defined for "
             f"n = {VERIFIERS[name].fixed_n} only")
    if not combos:
        raise InputError("no (verifier, n) combination to compute; hub needs -n 2")
    return combos, explicit


#: Draft tuples sampled in all, from which verify says up front where the time will go.
SLOW_MONTE_CARLO = 5_000_000


def _note_monte_carlo(runnable, base, method, samples: int, temperatures: int, quiet: bool) -> None:
    """Say up front which verifiers will be estimated by Monte Carlo when that is most of a long run."""
    from ..verifiers.base import PreparedVerifier

    slow = []
    for name, sampler, n in runnable:
        cls = VERIFIERS[name]
        sampled = method == MethodChoice.monte_carlo or (
            method == MethodChoice.auto and cls.exact_rate is PreparedVerifier.exact_rate
            and get_sampler(sampler).estimate_tuples(base.draft[0], n) > MAX_ENUMERATION)
        if sampled:
            slow.append(f"{name} at n={n}")
    tuples = len(slow) * base.num_pairs * temperatures * samples
    if slow and tuples >= SLOW_MONTE_CARLO:
        info(f"{', '.join(slow)}: no closed form at V={base.vocab_size:,}, so Monte Carlo over {samples:,} draft "
             f"tuples for each of {base.num_pairs * temperatures:,} pairs ({tuples:,} tuples, the slow part; "
             "--samples sets it, --pairs N takes fewer pairs)", quiet=quiet)


def _rng(seed: int, *keys: int) -> np.random.Generator:
    # one stream per cell, independent of the order cells are computed in
    return np.random.default_rng([seed, *keys])


@with_pair_options
def verify(
    ctx: typer.Context,
    source: PairOptions,
    verifier: VerifierOpt = None,
    drafts: DraftsOpt = None,
    method: MethodOpt = "auto",
    samples: SamplesOpt = 100_000,
    draft_law: VerifySamplerOpt = None,
    out: OutOpt = None,
    fmt: FormatOpt = None,
    no_timing: NoTimingOpt = False,
    summary: SummaryOpt = False,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Acceptance rate of each verifier against α* of its draft law.

    One row per (pair, temperature, verifier, n): the acceptance rate P(Y in X)
    (exact, or Monte Carlo mean with its standard error), α* of the verifier's
    draft law, the gap α* - rate, and the wall time. Monte Carlo streams are
    seeded per cell from --seed. --summary gives one row per (temperature,
    verifier, n) instead: mean, std and 95% interval over pairs, mean α* and gap.
    """
    if out is not None:
        check_output_path(out)
    base = source.load(ctx, seed_is_synthetic=False)  # --seed also seeds the Monte Carlo streams
    law = draft_law
    if law == "all":
        raise InputError("--draft-law takes one sampler, not 'all'")
    combos, explicit = _expand_verifiers(verifier, list(dict.fromkeys(drafts or [2])), law)
    temps = source.temperatures
    names = list(VERIFIERS)

    # refuse what cannot finish before doing any work
    runnable = []
    for name, sampler, n in combos:
        try:
            VERIFIERS[name].check_size(base.draft, n, sampler)
        except SizeLimitError as exc:
            if name in explicit:
                raise
            warn(f"skipping {name} at n={n}: {exc}")
            continue
        if name == "otm":
            import cvxpy  # noqa: F401  (import before timing, not inside the first pair)
        runnable.append((name, sampler, n))
    if not runnable:
        raise InputError("nothing left to compute after skipping verifiers too large for this vocabulary")
    _note_monte_carlo(runnable, base, method, samples, len(temps), quiet)

    rows = []
    total = base.num_pairs * len(temps) * len(runnable)
    with show_progress("verify", total, mode=progress, quiet=quiet) as advance:
        for ti, T in enumerate(temps):
            batch = base if T == 1.0 else base.at_temperature(T)
            warn_few_tokens(batch, T, [(sampler, n) for _, sampler, n in runnable])
            bound_cache: dict = {}
            for name, sampler, n in runnable:
                key = (sampler, n)
                if key not in bound_cache:
                    bound_cache[key] = chain_solve(batch.target, batch.draft, n, sampler=sampler,
                                                   want_sets=False)[0]
                for i in range(batch.num_pairs):
                    t0 = time.perf_counter()
                    v = VERIFIERS[name].unchecked(batch.target[i], batch.draft[i], n, sampler)
                    use_exact = method == MethodChoice.exact or (
                        method == MethodChoice.auto and can_be_exact(v))
                    if use_exact:
                        rate, se, how = exact_rate(v), 0.0, "exact"
                    else:
                        # keyed by the pair's own index, so a --pair-range shard draws what the full run does
                        pair_index = int(batch.labels["pair"][i]) if "pair" in batch.labels else i
                        rng = _rng(source.seed, pair_index, ti, names.index(name), n)
                        (rate, se), how = monte_carlo_rate(v, samples, rng), "monte-carlo"
                    seconds = time.perf_counter() - t0
                    alpha = float(bound_cache[key][i])
                    row = {"pair": i}
                    row.update({k: batch.labels[k][i] for k in batch.labels})
                    row.update(temperature=T, verifier=name, sampler=sampler, n=n, method=how,
                               acceptance=rate, stderr=se, alpha_star=alpha, gap=alpha - rate,
                               seconds=seconds)
                    rows.append(row)
                    advance()
    import pandas as pd

    df = pd.DataFrame(rows)
    if no_timing:
        df = df.drop(columns="seconds")
    if summary:
        from ..summary import summarize

        df = summarize(df, "acceptance", ["temperature", "verifier", "sampler", "n", "method"],
                       means=("stderr", "alpha_star", "gap"))
        fmt = fmt or ("table" if out is None else None)
    config = {
        **source.manifest(base.num_pairs),
        "temperatures": temps, "verifiers": sorted({c[0] for c in runnable}),
        "drafts": sorted({c[2] for c in runnable}), "method": method.value, "samples": samples,
        "seed": source.seed, "summary": summary,
    }
    emit_table(df, out=out, fmt=fmt, manifest=build_manifest("verify", config), quiet=quiet)


def _random_cases(count: int, vocab_max: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Small random pairs (V from 2 to vocab_max), some with zeros in q."""
    rng = np.random.default_rng([seed, 7])
    cases = []
    for _ in range(count):
        V = int(rng.integers(2, vocab_max + 1))
        conc = rng.choice([0.3, 1.0, 3.0])
        p = rng.dirichlet(np.full(V, conc))
        q = rng.dirichlet(np.full(V, rng.choice([0.3, 1.0, 3.0])))
        if rng.random() < 0.3:
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        cases.append((p, q))
    return cases


def check_lossless(
    ctx: typer.Context,
    verifier: VerifierOpt = None,
    drafts: DraftsOpt = None,
    cases: int = typer.Option(10, "--cases", min=1, help="Random small cases (ignored with --data/--synthetic)."),
    vocab_max: int = typer.Option(6, "--vocab-max", min=2, max=12, help="Largest V of the random cases."),
    trials: int = typer.Option(50_000, "--trials", min=100, help="Sampled (drafts, output) pairs per check."),
    alpha: float = typer.Option(0.01, "--alpha", min=0.0, max=1.0,
                                help="Family-wise significance level (Bonferroni over all checks)."),
    test: str = typer.Option("chi2", "--test", help="Pearson chi-square or G-test.", callback=choice(TestChoice),
                             metavar=metavar(TestChoice)),
    seed: SeedOpt = 0,
    data: DataOpt = None,
    synthetic: SyntheticOpt = None,
    pairs: pairs_option(2) = None,
    vocab: VocabOpt = 1000,
    temperature: float = typer.Option(1.0, "--temperature", "-t", min=0.0, help="Temperature for --data/--synthetic."),
    draft_law: VerifySamplerOpt = None,
    out: OutOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Check that verifiers are lossless: their output token is distributed as p.

    For every (case, verifier, n): a statistical test (chi-square or G) of the
    sampled output counts against p over --trials draws, and, where the draft
    tuples can be enumerated, the exact output law sum_x P(x) P(Y=. | x) against
    p (tolerance 1e-10; otm 1e-6, its LP tolerance). Exits with code 1 if any
    check fails. Cases are random small pairs unless --data or --synthetic is given.
    """
    if out is not None:
        check_output_path(out)
    law = draft_law
    combos, _ = _expand_verifiers(verifier, list(dict.fromkeys(drafts or [1, 2, 3])), law)
    if data is not None or synthetic is not None:
        warn_ignored(ctx, ("cases", "vocab_max"), "with --data or --synthetic (they describe the random small cases)")
        batch = resolve_pairs(data=data, synthetic=synthetic, pairs=pairs, vocab=vocab, seed=seed,
                              concentration=1.0, exponent=1.0, noise=1.0, renormalize=False, default_pairs=2,
                              seed_is_synthetic=False, ctx=ctx)
        batch = batch if temperature == 1.0 else batch.at_temperature(temperature)
        pair_list = [(batch.target[i], batch.draft[i]) for i in range(batch.num_pairs)]
    else:
        warn_ignored(ctx, ("pairs", "vocab", "temperature"), "without --data or --synthetic (random small cases: "
                     "--cases and --vocab-max set them)")
        pair_list = _random_cases(cases, vocab_max, seed)
    checks = len(pair_list) * len(combos)
    threshold = alpha / checks
    names = list(VERIFIERS)
    rows, failures = [], []
    with show_progress("lossless", checks, mode=progress, quiet=quiet) as advance:
        for ci, (p, q) in enumerate(pair_list):
            for name, sampler, n in combos:
                try:
                    v = VERIFIERS[name].unchecked(p, q, n, sampler)
                except SizeLimitError as exc:
                    warn(f"case {ci}: skipping {name} at n={n}: {exc}")
                    advance()
                    continue
                tol = 1e-6 if name == "otm" else 1e-10
                exact_error = math.nan
                if v.draft_sampler.estimate_tuples(v.q, v.n) <= MAX_ENUMERATION:
                    exact_error = float(np.abs(output_distribution(v) - v.p).max())
                result = sampled_output_test(v, trials, _rng(seed, ci, names.index(name), n, 1), test=test.value)
                exact_ok = math.isnan(exact_error) or exact_error <= tol
                passed = exact_ok and result.impossible == 0 and result.pvalue >= threshold
                rows.append({"case": ci, "vocab": v.V, "verifier": name, "sampler": sampler, "n": n,
                             "exact_error": exact_error, "statistic": result.statistic, "dof": result.dof,
                             "pvalue": result.pvalue, "impossible": result.impossible, "passed": passed})
                if not passed:
                    failures.append(f"{name} n={n} case {ci}")
                advance()
    import pandas as pd

    df = pd.DataFrame(rows)
    if not df.empty:
        df["exact_error"] = df["exact_error"].astype("Float64").mask(df["exact_error"].isna())
    config = {"verifiers": sorted({c[0] for c in combos}), "drafts": sorted({c[2] for c in combos}),
              "cases": len(pair_list), "trials": trials, "alpha": alpha, "test": test.value, "seed": seed}
    emit_table(df, out=out, fmt=fmt, manifest=build_manifest("check-lossless", config), quiet=quiet)
    if failures:
        info(f"FAILED {len(failures)} of {len(rows)} checks (family-wise alpha {alpha:g}): "
             + ", ".join(failures[:10]) + (" ..." if len(failures) > 10 else ""))
        raise typer.Exit(1)
    info(f"all {len(rows)} checks passed (family-wise alpha {alpha:g}, per-check p >= {threshold:.2g})",
         quiet=quiet)


__all__ = ["check_lossless", "verify"]
