"""The power of ``mdsd audit``: which loss of losslessness it detects, with how many calls, in how long.

Two tables, printed as Markdown:

1. **The broken verifiers** of :mod:`mdsd_cli.audit.examples` (the 0.999 shortcut, RRS skipping
   repeats, K-SEQ with the plain residual, n independent tests, RRS without replacement against
   ``q``), each audited on the battery with ``--fail-fast`` and a budget of 10^6 calls: the case
   caught, the calls made until then, the wall time and the tuple named; and the wall time of a
   full 10^6-call audit of the correct ``rrs`` (nothing to catch: every call is made).
2. **Calls until detection against the output's total variation to p**, on one generic case
   (:data:`POWER_P`, :data:`POWER_Q`: V = 8, iid drafts, n = 3), alone at alpha = 0.01, for two bugs
   of exactly known TV built on the correct ``rrs``:

   * ``spread``: with probability ``eps``, on every tuple, the output is replaced by the token
     ``p`` favours (``TV = eps (1 - max p)``): mass moved to where ``p`` is large, the hardest
     direction to see (the 0.999 shortcut's kind);
   * ``local``: on the one tuple ``(t, t, t)``, ``t`` the token ``q`` favours, the draft is accepted
     outright with probability ``eps`` (``TV = eps P(t, t, t) (1 - P(Y = t | t, t, t))``, the
     conditional law of rrs being mdsd's exact one): a bug that lives in one tuple, as real ones do;

   each with the audit's stratified design and with plain Monte Carlo of the draft law (the same
   test on one stratum, ``stratified=False``): median and range over seeds of the calls made when
   the test rejected, ``> budget`` when it did not.

Usage: python benchmarks/audit_power.py [--seeds 5] [--budget 1000000] [--only broken|power]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from mdsd_cli.audit import audit_verifier, make_case
from mdsd_cli.audit import examples as ex
from mdsd_cli.verifiers import prepare_verifier

BROKEN = [
    ("accept_confident_top", ex.accept_confident_top, "iid", 3),
    ("rrs_skipping_repeats", ex.rrs_skipping_repeats, "iid", 3),
    ("kseq_plain_residual", ex.kseq_plain_residual, "iid", 3),
    ("independent_tests", ex.independent_tests, "iid", 2),
    ("rrsw_against_q", ex.rrsw_against_q, "wor", 3),
]


def broken_table(budget: int) -> None:
    print("| function | sampler, n | caught on | calls until caught | seconds | tuple named |")
    print("|---|---|---|---|---|---|")
    for name, fn, sampler, n in BROKEN:
        t0 = time.perf_counter()
        report = audit_verifier(fn, sampler=sampler, n=n, budget=budget, seed=0, fail_fast=True)
        seconds = time.perf_counter() - t0
        if report.lossy:
            c = report.lossy[0]
            tuple_ = str(c.evidence[0].drafts) if c.evidence else "-"
            print(f"| `{name}` | {sampler}, {n} | `{c.case.name}` (TV {c.tv:.2g}) | {report.calls:,} | "
                  f"{seconds:.1f} | {tuple_} |", flush=True)
        else:
            print(f"| `{name}` | {sampler}, {n} | not caught | {report.calls:,} | {seconds:.1f} | - |", flush=True)
    t0 = time.perf_counter()
    report = audit_verifier(ex.rrs, sampler="iid", n=3, budget=budget, seed=0)
    seconds = time.perf_counter() - t0
    print(f"| `rrs` (correct) | iid, 3 | {'passes' if report.passed else 'FALSE ALARM'} | {report.calls:,} | "
          f"{seconds:.1f} | - |", flush=True)


#: The power case: V = 8, iid drafts, n = 3; the draft law over-weights token 0, which p under-weights.
POWER_P = np.array([0.10, 0.30, 0.20, 0.12, 0.10, 0.08, 0.06, 0.04])
POWER_Q = np.array([0.40, 0.15, 0.12, 0.10, 0.08, 0.06, 0.05, 0.04])


def power_table(budget: int, seeds: int) -> None:
    case = make_case("power", POWER_P, POWER_Q)
    p, q, n = case.p, case.q, 3
    top, t = int(np.argmax(p)), int(np.argmax(q))
    local_tuple = np.array([t] * n)
    conditional = prepare_verifier("rrs", p, q, n).output_law(local_tuple)
    stake = float(q[t] ** n * (1.0 - conditional[t]))
    spread_unit = float(1.0 - p[top])

    def spread(eps):
        def fn(p_, q_, drafts, rng):
            if rng.random() < eps:
                return top
            return ex.rrs(p_, q_, drafts, rng)
        return fn

    def local(eps):
        def fn(p_, q_, drafts, rng):
            if drafts[0] == t and (drafts == t).all() and rng.random() < eps:
                return t
            return ex.rrs(p_, q_, drafts, rng)
        return fn

    print(f"power case: V = {p.size}, n = {n}; the local tuple {tuple(local_tuple.tolist())} has P = "
          f"{q[t] ** n:.4f} and rrs outputs {t} there with probability {conditional[t]:.4f}; TV reachable: "
          f"spread <= {spread_unit:.3f}, local <= {stake:.4f}", file=sys.stderr)
    print("| bug | TV to p | stratified: calls until detected (median, range) | plain Monte Carlo |")
    print("|---|---|---|---|")
    for bug, unit, make in (("spread", spread_unit, spread), ("local", stake, local)):
        for tv in (0.03, 0.01, 0.003, 0.001):
            if tv > unit:
                continue
            eps = tv / unit
            cells = []
            for stratified in (True, False):
                found = []
                for seed in range(seeds):
                    report = audit_verifier(make(eps), sampler="iid", n=n, cases=[case], budget=budget, seed=seed,
                                            alpha=0.01, stratified=stratified)
                    found.append(report.calls if report.lossy else None)
                cells.append(_summary(found, budget))
            print(f"| {bug} | {tv:g} | {cells[0]} | {cells[1]} |", flush=True)


def _summary(found: list, budget: int) -> str:
    caught = sorted(c for c in found if c is not None)
    missed = len(found) - len(caught)
    if not caught:
        return f"> {budget:,} (0 of {len(found)})"
    values = caught + [float("inf")] * missed
    median = statistics.median(values)
    text = f"{median:,.0f}" if np.isfinite(median) else f"> {budget:,}"
    hi = f"{caught[-1]:,}" if not missed else f"> {budget:,}"
    return f"{text} ({caught[0]:,}–{hi}; {len(caught)} of {len(found)} caught)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("broken", "power"))
    args = ap.parse_args()
    if args.only != "power":
        broken_table(args.budget)
        print()
    if args.only != "broken":
        power_table(args.budget, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
