"""What every figure of ``mdsd bench`` shares: the sizes, the inputs, the timing and the row.

:class:`BenchConfig` holds the sizes (the issue's targets by default, :meth:`BenchConfig.quick` for a
smoke run); :func:`random_pairs` makes the LM-like (p, q) pairs most figures time; :func:`timed` and
:func:`paired` (ABAB against a baseline) give ``(median, min, max)`` seconds, :func:`peak_allocated`
the peak bytes of one call; :func:`bench_row` builds one row of the table, the same columns for every
figure; :func:`machine_description` says where the numbers were measured.
"""

from __future__ import annotations

import gc
import os
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


def bench_row(figure, n, vocab, pairs, stats, baseline, base_stats, *, target, ratio, passed, peak=None, note=""):
    """One row of the table: ``stats`` and ``base_stats`` are ``(median, min, max)`` seconds (``base_stats``
    None where there is no timed baseline), ``peak`` bytes or None."""
    median, lo, hi = stats
    return {
        "figure": figure, "n": n, "vocab": vocab, "pairs": pairs,
        "median_s": median, "min_s": lo, "max_s": hi,
        "baseline": baseline, "baseline_s": base_stats[0] if base_stats else float("nan"),
        "ratio": ratio, "target": target, "status": "pass" if passed else "short",
        "peak_mib": (peak / 2**20) if peak is not None else float("nan"), "note": note,
    }


def machine_description() -> str:
    """One line about where the numbers were measured."""
    from .._jit import numba_enabled

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
            f"numba kernels {'on' if numba_enabled() else 'off'}")
