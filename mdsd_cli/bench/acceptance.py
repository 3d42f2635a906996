"""The α* and acceptance-rate figures of ``mdsd bench``: one pair, a batch of pairs, the LP, peak memory.

``iid``, ``greedy``, ``wor``: α* of one pair at V (the chain), ``rates``: the exact rates of
``rrs``, ``kseq``, ``nss`` and ``greedy``, each against one ``numpy.argsort`` of p/q timed in the
same run (ABAB); ``batch``: α* of a batch of pairs against as many argsorts in one call;
``rrsw``: Monte Carlo draft tuples per second; ``lp``: the chain against the primal LP at the
largest size the LP solves in under a minute, speed and agreement; ``memory``: the peak memory
of α* for a batch at V against the inputs' size. The targets are in :mod:`mdsd_cli.bench`.
"""

from __future__ import annotations

import time

import numpy as np

from .common import bench_row, paired, peak_allocated, random_pairs, timed


def _against_argsort(config, figure, fn, n, target_ratio, label, p, q) -> dict:
    """One single-pair row: ``fn`` against one argsort of p/q (ABAB), with the peak memory of one call."""
    base, stats = paired(lambda: np.argsort(p / q), fn, config.repeats)
    ratio = stats[0] / base[0]
    return bench_row(figure, n, config.vocab, 1, stats, "numpy.argsort", base, target=f"<= {label}",
                     ratio=ratio, passed=ratio <= target_ratio, peak=peak_allocated(fn))


def _single_pair(config):
    P1, Q1 = random_pairs(1, config.vocab, config.seed)
    return P1[0], Q1[0]


def iid_rows(config) -> list[dict]:
    """α* of one pair, iid drafts, n = 4 (target <= 2x the argsort)."""
    from ..bounds import optimal_acceptance

    p, q = _single_pair(config)
    return [_against_argsort(config, "alpha* iid chain", lambda: optimal_acceptance(p, q, 4), 4, 2.0, "2x", p, q)]


def greedy_rows(config) -> list[dict]:
    """α* of one pair, greedy drafts (target <= 1x the argsort)."""
    from ..bounds import optimal_acceptance

    p, q = _single_pair(config)
    return [_against_argsort(config, "alpha* greedy", lambda: optimal_acceptance(p, q, 4, sampler="greedy"), 4,
                             1.0, "1x", p, q)]


def wor_rows(config) -> list[dict]:
    """α* of one pair, drafts without replacement, n = 8 (target <= 150x the argsort)."""
    from ..bounds import optimal_acceptance

    p, q = _single_pair(config)
    return [_against_argsort(config, "alpha* wor chain", lambda: optimal_acceptance(p, q, 8, sampler="wor"), 8,
                             150.0, "150x", p, q)]


def rate_rows(config) -> list[dict]:
    """Exact rates of rrs, kseq, nss and greedy at n = 8 (target <= 3x the argsort each)."""
    from ..verifiers import VERIFIERS, exact_rate

    p, q = _single_pair(config)
    return [_against_argsort(config, f"exact rate {name}", lambda name=name: exact_rate(VERIFIERS[name](p, q, 8)), 8,
                             3.0, "3x", p, q)
            for name in ("rrs", "kseq", "nss", "greedy")]


def batch_rows(config) -> list[dict]:
    """α* iid of a batch of pairs against as many argsorts in one call (target <= 2x)."""
    from ..bounds import optimal_acceptance

    N, Vb = config.batch_pairs, config.batch_vocab
    P, Q = random_pairs(N, Vb, config.seed + 1)
    base, stats = paired(lambda: np.argsort(P / Q, axis=1), lambda: optimal_acceptance(P, Q, 4), config.repeats)
    ratio = stats[0] / base[0]
    return [bench_row("alpha* iid chain, batch", 4, Vb, N, stats, f"{N} argsorts", base, target="<= 2x",
                      ratio=ratio, passed=ratio <= 2.0)]


def rrsw_rows(config) -> list[dict]:
    """Monte Carlo estimation of rrsw's rate: draft tuples per second (target >= 1e5)."""
    from ..verifiers import VERIFIERS, monte_carlo_rate

    Pm, Qm = random_pairs(1, config.mc_vocab, config.seed + 2)
    v = VERIFIERS["rrsw"](Pm[0], Qm[0], 4)
    rng = np.random.default_rng(config.seed)
    monte_carlo_rate(v, 5_000, rng)
    samples = config.mc_samples
    stats = timed(lambda: monte_carlo_rate(v, samples, rng), max(1, config.repeats // 2))
    throughput = samples / stats[0]
    return [bench_row("rrsw monte-carlo", 4, config.mc_vocab, 1, stats, "-", None,
                      target=">= 1e5 tuples/s", ratio=throughput, passed=throughput >= 1e5,
                      note=f"{throughput:,.0f} draft tuples/s")]


def lp_rows(config) -> list[dict]:
    """The chain against the primal LP (one run): >= 1e4x faster, values within 1e-6."""
    from ..bounds import optimal_acceptance, solve_optimal_acceptance

    Pl, Ql = random_pairs(1, config.lp_vocab, config.seed + 3)
    n = config.lp_drafts
    t0 = time.perf_counter()
    lp = solve_optimal_acceptance(Pl[0], Ql[0], n, solver="primal-lp")
    lp_seconds = time.perf_counter() - t0
    stats = timed(lambda: optimal_acceptance(Pl[0], Ql[0], n), config.repeats)
    chain = optimal_acceptance(Pl[0], Ql[0], n)
    speedup = lp_seconds / stats[0]
    diff = abs(lp.value - chain)
    return [bench_row("chain vs primal-lp", n, config.lp_vocab, 1, stats, "primal-lp (1 run)",
                      (lp_seconds, lp_seconds, lp_seconds), target=">= 1e4x faster, |diff| <= 1e-6",
                      ratio=speedup, passed=speedup >= 1e4 and diff <= 1e-6,
                      note=f"|alpha_lp - alpha_chain| = {diff:.1e}; LP {lp_seconds:.1f} s")]


def memory_rows(config) -> list[dict]:
    """Peak memory of α* iid for a batch of pairs at V, against the inputs' size (target <= 3x)."""
    from ..bounds import optimal_acceptance

    N, V = config.memory_pairs, config.vocab
    P, Q = random_pairs(N, V, config.seed + 4)
    inputs = P.nbytes + Q.nbytes
    t0 = time.perf_counter()
    peak = peak_allocated(lambda: optimal_acceptance(P, Q, 4))
    seconds = time.perf_counter() - t0
    ratio = (inputs + peak) / inputs
    return [bench_row("peak memory, alpha* iid batch", 4, V, N, (seconds, seconds, seconds),
                      "input arrays", None, target="<= 3x", ratio=ratio, passed=ratio <= 3.0, peak=peak,
                      note=f"inputs {inputs / 2**30:.2f} GiB + peak {peak / 2**30:.2f} GiB")]


__all__ = ["batch_rows", "greedy_rows", "iid_rows", "lp_rows", "memory_rows", "rate_rows", "rrsw_rows", "wor_rows"]
