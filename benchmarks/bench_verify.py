"""Benchmark of the verifiers at V = 32,000 (one perturbed-Zipf pair), measured in one run.

Prints the time of the exact acceptance rate of rrs, kseq, nss and greedy (target:
milliseconds), the hub and otm-free closed forms, and the Monte Carlo throughput
of rrsw in draft tuples per second (target >= 1e4), each with a numpy.argsort of
a length-V vector as the in-run baseline.

Usage: python benchmarks/bench_verify.py [--vocab V] [--drafts N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from mdsd_cli import zipf_pairs
from mdsd_cli.verifiers import VERIFIERS, exact_rate, monte_carlo_rate


def timed(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=32_000)
    ap.add_argument("--drafts", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--samples", type=int, default=200_000)
    args = ap.parse_args()
    pair = zipf_pairs(1, args.vocab, seed=0)
    p, q = pair.target[0], pair.draft[0]
    n = args.drafts
    base = timed(lambda: np.argsort(p / q), args.repeats)
    print(f"# V = {args.vocab:,}, n = {n}; median of {args.repeats} runs; baseline numpy.argsort {base * 1e3:.2f} ms")
    print(f"{'figure':34s} {'median ms':>10s} {'x argsort':>10s}  rate")
    for name in ("rrs", "kseq", "nss", "greedy", "hub"):
        m = 2 if name == "hub" else n
        fn = lambda name=name, m=m: exact_rate(VERIFIERS[name](p, q, m))  # noqa: E731
        sec = timed(fn, args.repeats)
        print(f"{'exact rate ' + name + f' (n={m})':34s} {sec * 1e3:10.2f} {sec / base:10.2f}  {fn():.6f}")
    v = VERIFIERS["rrsw"](p, q, n)
    rng = np.random.default_rng(0)
    monte_carlo_rate(v, 10_000, rng)  # warm-up
    t0 = time.perf_counter()
    mean, se = monte_carlo_rate(v, args.samples, rng)
    sec = time.perf_counter() - t0
    rate = args.samples / sec
    print(f"{'rrsw Monte Carlo (n=' + str(n) + ')':34s} {sec * 1e3:10.1f} {'':>10s}  {mean:.6f} ± {se:.6f}")
    print(f"rrsw throughput: {rate:,.0f} draft tuples/s (target >= 10,000: {'pass' if rate >= 1e4 else 'short'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
