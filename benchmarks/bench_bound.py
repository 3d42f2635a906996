"""Benchmark of the chain solver at full vocabulary (V = 152,064), ratios measured in one run.

Prints, for one pair of perturbed-Zipf distributions:
* chain for iid (n = 4) and greedy (n = 4) as a ratio to one numpy.argsort of a
  length-V vector (target <= 3x);
* wor for n = 2, 4, 8, 16 in seconds (target <= 2 s per pair at n = 8);
* agreement of the wor hit probabilities with an independent exact method at
  V = 16 (the subset dynamic programme of the brute-force solver), and with a
  4x finer quadrature at full V.

Usage: python benchmarks/bench_bound.py [--vocab V] [--repeats R]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import numpy as np

from mdsd_cli import optimal_acceptance, zipf_pairs
from mdsd_cli._wor_kernel import numba_enabled, wor_hit_chain
from mdsd_cli.bounds.subsets import _wor_set_law, _zeta
from mdsd_cli.samplers import ratio_order


def timed(fn, repeats):
    fn()  # warm-up (JIT compilation, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=152_064)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    V, R = args.vocab, args.repeats
    pair = zipf_pairs(1, V, seed=0)
    p, q = pair.target[0], pair.draft[0]
    print(f"# machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"numba kernels: {'on' if numba_enabled() else 'off'}; V = {V:,}; median of {R} runs")

    base, _, _ = timed(lambda: np.argsort(p / q), R)
    rows = [("numpy.argsort(p / q)", "-", base, 1.0, "baseline")]
    for sampler, n, target in (("iid", 4, 3.0), ("greedy", 4, 3.0)):
        med, lo, hi = timed(lambda n=n, sampler=sampler: optimal_acceptance(p, q, n, sampler=sampler), R)
        rows.append((f"alpha* {sampler} chain", n, med, med / base, "pass" if med / base <= target else "short"))
    for n in (2, 4, 8, 16):
        med, lo, hi = timed(lambda n=n: optimal_acceptance(p, q, n, sampler="wor"), max(3, R // 2))
        verdict = ("pass" if med <= 2.0 else "short") if n == 8 else "-"
        rows.append(("alpha* wor chain", n, med, med / base, verdict))

    print(f"{'figure':28s} {'n':>3s} {'median s':>10s} {'x argsort':>10s}  target")
    for name, n, sec, ratio, verdict in rows:
        tgt = {"iid": "<= 3x", "greedy": "<= 3x"}.get(name.split()[1] if " " in name else "", "")
        if name.startswith("alpha* wor") and n == 8:
            tgt = "<= 2 s"
        print(f"{name:28s} {n!s:>3s} {sec:10.4f} {ratio:10.2f}  {tgt:7s} {verdict}")

    # agreement with an independent exact method at small V
    rng = np.random.default_rng(1)
    worst_small = 0.0
    for n in (2, 4, 8):
        for _ in range(3):
            Vs = 16
            logits = rng.normal(0, 2.5, Vs)
            qs = np.exp(logits - logits.max())
            qs /= qs.sum()
            order = rng.permutation(Vs)
            H = wor_hit_chain(qs[order], n)
            all_in = _zeta(_wor_set_law(qs, n, Vs), Vs)
            full = (1 << Vs) - 1
            masks = np.cumsum([0] + [1 << int(i) for i in order])
            worst_small = max(worst_small, float(np.abs(H - (1.0 - all_in[full ^ masks])).max()))
    order = ratio_order(p, q)
    worst_fine = max(float(np.abs(wor_hit_chain(q[order], n) - wor_hit_chain(q[order], n, h=0.06)).max())
                     for n in (2, 8, 16))
    print(f"wor agreement: max |H - subset DP| at V=16, n in (2,4,8): {worst_small:.1e}; "
          f"max |H - H(h=0.06)| at V={V:,}, n in (2,8,16): {worst_fine:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
