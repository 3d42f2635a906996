"""``mdsd bench``: every performance target as a ratio to a baseline measured in the same run.

Each figure is repeated, alternating with its baseline (ABAB, so drifting
load on a shared machine hits both); the median and the range are reported, with the
peak memory numpy allocated during one extra run (``tracemalloc``, inputs
excluded). Targets (issue "Performance"), V = 152,064 unless stated:

===============================================  ==============================  ==========
figure                                           baseline (same run)             target
===============================================  ==============================  ==========
α* iid, chain, one pair, n = 4                   one numpy.argsort of length V   <= 2x
α* greedy, one pair                              one numpy.argsort               <= 1x
α* wor, one pair, n = 8                          one numpy.argsort               <= 150x
α* iid, 1,024 pairs at V = 32,000                1,024 argsorts (one call)        <= 2x
exact rate of rrs, kseq, nss, greedy, n = 8      one numpy.argsort               <= 3x each
rrsw Monte Carlo, V = 32,000, n = 4              --                              >= 1e5 tuples/s
chain vs primal-lp at the largest LP < 60 s      the LP's time                   >= 1e4x faster, |diff| <= 1e-6
peak memory, α* iid for 1,024 pairs at V         the input arrays' size          <= 3x
optimal-iid (n = 2, 4, 8), optimal-wor (n = 2,  one numpy.argsort of a row     <= 5x (iid),
4, 8): set-up + one step per pair, at V, for a                                   <= 10/20/50x (wor)
batch
at V = 32,000 and on pydoc-ngram; see
:mod:`mdsd_cli.bench_optimal`
decode overhead, 4x3 tree, V = 2,380 and V:      one numpy.argsort               <= 3x per node
rrs, kseq (per tree node), optimal-iid (per                                      (optimal-iid:
verified node); see :mod:`mdsd_cli.bench_decode`                                 <= 5x per node)
torch verification on the CPU (--verify-on       numpy's walk, same run           <= 1x per
device), 4x3 tree, V = 2,380 and V: rrs, kseq,                                   verified node
rrsw; with CUDA also per node on the GPU (vs
torch.argsort there) and the verifying share of
a step on the tiny HF pair; see
:mod:`mdsd_cli.bench_decode`
mdsd audit's harness, battery at n = 3, with a   the same calls in a plain loop  <= 0.2
numpy RRS; with a trivial callable, calls/s;                                     >= 5e5 calls/s
see :mod:`mdsd_cli.bench_audit`
===============================================  ==============================  ==========
"""

from __future__ import annotations

import gc
import platform
import statistics
import time
import tracemalloc
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BenchConfig:
    """Sizes of the benchmark; the defaults are the issue's targets."""

    vocab: int = 152_064
    batch_vocab: int = 32_000
    batch_pairs: int = 1024
    mc_vocab: int = 32_000
    mc_samples: int = 200_000
    lp_vocab: int = 1000
    lp_drafts: int = 2
    memory_pairs: int = 1024
    optimal_batch: int = 64
    decode_vocab: int = 2380
    decode_prompts: int = 2
    decode_tokens: int = 24
    decode_optimal_tokens: int = 24
    repeats: int = 5
    seed: int = 0

    @classmethod
    def quick(cls) -> BenchConfig:
        """Small sizes for a smoke run (seconds, not minutes)."""
        return cls(vocab=20_000, batch_vocab=4_000, batch_pairs=64, mc_vocab=4_000, mc_samples=20_000,
                   lp_vocab=60, lp_drafts=2, memory_pairs=16, optimal_batch=8, decode_prompts=1, decode_tokens=8,
                   decode_optimal_tokens=3, repeats=3)


FIGURES = ("iid", "greedy", "wor", "batch", "rates", "rrsw", "lp", "memory", "optimal", "decode", "expected",
           "audit", "device")


def random_pairs(num_pairs: int, vocab: int, seed: int, *, spread: float = 2.0, noise: float = 1.0):
    """Softmax of Gaussian logits and a noisy copy: cheap LM-like pairs at any size."""
    rng = np.random.default_rng(seed)
    P = np.empty((num_pairs, vocab))
    Q = np.empty((num_pairs, vocab))
    for i in range(num_pairs):  # row by row keeps the temporaries small
        logits = spread * rng.standard_normal(vocab)
        for out, x in ((P, logits), (Q, logits + noise * rng.standard_normal(vocab))):
            e = np.exp(x - x.max())
            out[i] = e / e.sum()
    return P, Q


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) wall seconds over ``repeats`` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def paired(baseline, fn, repeats: int):
    """Time ``baseline`` and ``fn`` alternately (ABAB...), so that drifting load on
    a shared machine hits both; returns their ``(median, min, max)``."""
    baseline()
    fn()
    a, b = [], []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        baseline()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return ((statistics.median(a), min(a), max(a)), (statistics.median(b), min(b), max(b)))


def peak_allocated(fn) -> int:
    """Peak bytes numpy/Python allocated during one call of ``fn`` (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return max(tracemalloc.get_traced_memory()[1] - base, 0)
    finally:
        tracemalloc.stop()


def _row(figure, n, vocab, pairs, stats, baseline, base_stats, *, target, ratio, passed, peak=None, note=""):
    median, lo, hi = stats
    return {
        "figure": figure, "n": n, "vocab": vocab, "pairs": pairs,
        "median_s": median, "min_s": lo, "max_s": hi,
        "baseline": baseline, "baseline_s": base_stats[0] if base_stats else float("nan"),
        "ratio": ratio, "target": target, "status": "pass" if passed else "short",
        "peak_mib": (peak / 2**20) if peak is not None else float("nan"), "note": note,
    }


def run_benchmarks(config: BenchConfig = BenchConfig(), *, figures=FIGURES, progress=None) -> list[dict]:
    """Measure the selected figures; returns one record per row of the table."""
    from .bounds import optimal_acceptance, solve_optimal_acceptance
    from .verifiers import VERIFIERS, exact_rate, monte_carlo_rate

    advance = progress or (lambda: None)
    R = config.repeats
    rows: list[dict] = []
    V = config.vocab
    P1, Q1 = random_pairs(1, V, config.seed)
    p, q = P1[0], Q1[0]
    argsort = lambda: np.argsort(p / q)  # noqa: E731

    def single(figure, fn, n, target_ratio, label):
        base, stats = paired(argsort, fn, R)
        ratio = stats[0] / base[0]
        rows.append(_row(figure, n, V, 1, stats, "numpy.argsort", base, target=f"<= {label}",
                         ratio=ratio, passed=ratio <= target_ratio, peak=peak_allocated(fn)))

    if "iid" in figures:
        single("alpha* iid chain", lambda: optimal_acceptance(p, q, 4), 4, 2.0, "2x")
        advance()
    if "greedy" in figures:
        single("alpha* greedy", lambda: optimal_acceptance(p, q, 4, sampler="greedy"), 4, 1.0, "1x")
        advance()
    if "wor" in figures:
        single("alpha* wor chain", lambda: optimal_acceptance(p, q, 8, sampler="wor"), 8, 150.0, "150x")
        advance()
    if "rates" in figures:
        for name in ("rrs", "kseq", "nss", "greedy"):
            single(f"exact rate {name}", lambda name=name: exact_rate(VERIFIERS[name](p, q, 8)), 8, 3.0, "3x")
        advance()
    if "batch" in figures:
        N, Vb = config.batch_pairs, config.batch_vocab
        P, Q = random_pairs(N, Vb, config.seed + 1)
        base, stats = paired(lambda: np.argsort(P / Q, axis=1), lambda: optimal_acceptance(P, Q, 4), R)
        ratio = stats[0] / base[0]
        rows.append(_row("alpha* iid chain, batch", 4, Vb, N, stats, f"{N} argsorts", base, target="<= 2x",
                         ratio=ratio, passed=ratio <= 2.0))
        del P, Q
        advance()
    if "rrsw" in figures:
        Pm, Qm = random_pairs(1, config.mc_vocab, config.seed + 2)
        v = VERIFIERS["rrsw"](Pm[0], Qm[0], 4)
        rng = np.random.default_rng(config.seed)
        monte_carlo_rate(v, 5_000, rng)
        samples = config.mc_samples
        stats = timed(lambda: monte_carlo_rate(v, samples, rng), max(1, R // 2))
        throughput = samples / stats[0]
        rows.append(_row("rrsw monte-carlo", 4, config.mc_vocab, 1, stats, "-", None,
                         target=">= 1e5 tuples/s", ratio=throughput, passed=throughput >= 1e5,
                         note=f"{throughput:,.0f} draft tuples/s"))
        advance()
    if "decode" in figures:
        from .bench_decode import decode_overhead_rows

        rows += decode_overhead_rows(config, timed, _row)
        advance()
    if "device" in figures:
        from .bench_decode import device_rows

        rows += device_rows(config, timed, _row)
        advance()
    if "expected" in figures:
        from .bench_decode import expected_rows

        rows += expected_rows(config, timed, _row)
        advance()
    if "lp" in figures:
        Pl, Ql = random_pairs(1, config.lp_vocab, config.seed + 3)
        n = config.lp_drafts
        t0 = time.perf_counter()
        lp = solve_optimal_acceptance(Pl[0], Ql[0], n, solver="primal-lp")
        lp_seconds = time.perf_counter() - t0
        stats = timed(lambda: optimal_acceptance(Pl[0], Ql[0], n), R)
        chain = optimal_acceptance(Pl[0], Ql[0], n)
        speedup = lp_seconds / stats[0]
        diff = abs(lp.value - chain)
        rows.append(_row("chain vs primal-lp", n, config.lp_vocab, 1, stats, "primal-lp (1 run)",
                         (lp_seconds, lp_seconds, lp_seconds), target=">= 1e4x faster, |diff| <= 1e-6",
                         ratio=speedup, passed=speedup >= 1e4 and diff <= 1e-6,
                         note=f"|alpha_lp - alpha_chain| = {diff:.1e}; LP {lp_seconds:.1f} s"))
        advance()
    if "memory" in figures:
        N = config.memory_pairs
        P, Q = random_pairs(N, V, config.seed + 4)
        inputs = P.nbytes + Q.nbytes
        t0 = time.perf_counter()
        peak = peak_allocated(lambda: optimal_acceptance(P, Q, 4))
        seconds = time.perf_counter() - t0
        ratio = (inputs + peak) / inputs
        rows.append(_row("peak memory, alpha* iid batch", 4, V, N, (seconds, seconds, seconds),
                         "input arrays", None, target="<= 3x", ratio=ratio, passed=ratio <= 3.0, peak=peak,
                         note=f"inputs {inputs / 2**30:.2f} GiB + peak {peak / 2**30:.2f} GiB"))
        del P, Q
        advance()
    if "optimal" in figures:
        from .bench_optimal import optimal_rows

        rows += optimal_rows(config, _row, vocab_pairs=1, repeats=R)
        advance()
    if "audit" in figures:
        from .bench_audit import audit_overhead_rows

        rows += audit_overhead_rows(config, _row)
        advance()
    return rows


def machine_description() -> str:
    """One line about where the numbers were measured."""
    from ._jit import numba_enabled

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
            f"numba kernels {'on' if numba_enabled() else 'off'}")
