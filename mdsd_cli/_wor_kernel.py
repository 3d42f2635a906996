"""P(X hits A_k) along a chain for drafts sampled without replacement (``wor``).

Drafts without replacement are the first ``n`` tokens to ring among independent
exponential clocks with rates ``q_i``. For a prefix ``A`` of the chain with mass
``W = q(A)`` and complement ``B``, the drafts hit ``A`` exactly when the first
``A``-clock rings before the ``n``-th ``B``-clock:

.. math::

    P(X \\text{ hits } A) = \\int_0^\\infty W e^{-Wt}\\, P[N_B(t) < n]\\, dt,

with ``N_B(t)`` Poisson-binomial with success probabilities ``1 - e^{-q_i t}``.
We substitute ``t = e^u`` and use the trapezoid rule on a uniform grid in ``u``
(step ``h``), whose error decays like ``exp(-c / h)`` for this smooth integrand
(:func:`default_step` keeps it below 1e-13 up to n = 16; the step used is ``ln 2 / m``
for the smallest ``m`` that does not exceed it, so that every ``m``-th point doubles
the time, :func:`_grid`). Below ``t_lo`` the
integrand is ``W t e^{-W t}`` to within ``W t P[N_B(t) >= n] <= W t^{n+1} / n!``,
and the rule's infinite left tail of ``W t e^{-W t}`` is summed in closed form (a
series in ``W t_lo``); :func:`left_end` puts ``t_lo`` where what it leaves out
integrates to below 1e-16 (1.4e-8 at n = 1, 2.2e-4 at n = 3, 1e-3 from n = 4:
a grid ~40% shorter than a fixed 1e-8). ``t_hi`` is chosen so that
``(W_k + m_k) t_hi >= 45`` for every prefix, where ``m_k`` is the ``n``-th
largest rate in ``B_k`` (then the integrand is below 1e-17). When ``t_hi`` would
pass :data:`T_MAX` (rates near the float64 floor, down to denormals), the rates
are multiplied by a power of two ``2^e`` and the grid divided by it: the
integral depends on rate x time only, and the scaling is exact, so such chains
are as accurate as any other (the grid just has more points). Sweeping ``k``
from ``V`` down to 0 moves one token at a time into ``B`` and updates the
Poisson-binomial pmf (truncated below ``n``) at every grid point: ``O(V n G)``
work for a grid of ``G = ln(t_hi / t_lo) / h`` points.

Two implementations on the same grid: a numba kernel (default) and a pure-numpy
one (a Python loop over tokens, vectorised over the grid), used when numba is
unavailable or ``MDSD_DISABLE_NUMBA=1``; they agree to ~1e-15. The kernel spends
``m`` exponentials a token instead of ``G``: ``e^{-q t}`` at a point is the square
of its value an octave earlier (:func:`~mdsd_cli._wor_loops._fill` keeps that to relative precision),
and the prefix weight ``e^{-W_k t}`` is carried down the chain by dividing by
each token's ``e^{-q t}`` (recomputed every 64 drafted tokens); at n = 3 and 4 the pmf's rows are
updated in one vectorised loop (n = 4, V = 2,380: ~0.4-0.5 ms, ~5x one exponential per token and
point). A run of tokens of one mass along the chain (an n-gram draft's tied tokens) joins at once
from ``n`` moments over the grid (:func:`~mdsd_cli._wor_loops._join_run`; ``pydoc-ngram`` rows, n = 4:
~0.22 -> ~0.07 ms along the chain that groups tied ratios by mass). The compiled loops
live in :mod:`mdsd_cli._wor_loops`, imported on first use (``mdsd --help`` never
loads numba).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._jit import numba_enabled

#: Most drafts without replacement the quadrature takes below the support's size: checked against the
#: hypergeometric law (uniform q) to 1e-13 up to here (7e-14 at n = 128, V = 400 and 2,000); past it the fixed
#: step and the runs' moments lose digits (3e-11 at n = 140 of 150; whole percents at n = 360 of 400). At or
#: above the support every token is drafted, which needs no quadrature.
MAX_WOR_DRAFTS = 128


def check_wor_drafts(n: int, support: int) -> None:
    """Raise :class:`~mdsd_cli.errors.SizeLimitError` where ``n`` drafts without replacement from ``support``
    tokens of positive mass are past what the quadrature computes to its precision (:data:`MAX_WOR_DRAFTS`)."""
    if MAX_WOR_DRAFTS < n < support:
        from .errors import SizeLimitError

        raise SizeLimitError(f"wor hit probabilities for n = {n:,} drafts from {support:,} tokens of positive draft "
                             f"mass are computed to 1e-13 only up to n = {MAX_WOR_DRAFTS} (or n at least the "
                             f"support, where every token is drafted); use at most {MAX_WOR_DRAFTS} wor drafts")


def default_step(n: int) -> float:
    """Trapezoid step in log-time for ``n`` drafts.

    The error decays like ``exp(-c / h)`` with ``c`` shrinking as ``n`` grows
    (measured at V = 50,000 against ``h = 0.12``: below 1e-13 for n <= 16 with
    this rule; ``h = 0.3`` would leave 1e-9 at n = 8 and 4e-7 at n = 16).
    """
    return max(0.27 - 0.007 * n, 0.08)

#: Left end of the grid at n = 1 (see :func:`left_end`); below it the integrand is summed in closed form.
T_LO = 1e-8
#: What the closed-form left tail may leave out: ``W t_lo^{n+1} / (n + 1)!``, at most this.
LEFT_TAIL = 1e-16
#: Terms of the left tail's series in ``W t_lo`` (``t_lo <= 1e-3``: the next term is below 1e-22).
LEFT_TERMS = 6


def left_end(n_eff: int, total: float) -> float:
    """``t_lo`` for ``n_eff`` drafts from rates summing to ``total``: below it ``P[N_B(t) >= n]`` is
    at most ``(total t)^n / n!``, and the integral it leaves out ``W t_lo^{n+1} / (n + 1)!`` (rates
    in units of ``total``) stays below :data:`LEFT_TAIL`; capped at 1e-3 (times ``1 / total``)."""
    return left_unit(n_eff) / total if total > 0.0 else T_LO


def left_unit(n_eff: int) -> float:
    """:func:`left_end` in units of ``1 / total`` (through ``lgamma`` where ``(n + 1)!`` passes the floats: the
    cap holds from n = 4 on)."""
    if n_eff + 1 > 170:
        return min(math.exp((math.log(LEFT_TAIL) + math.lgamma(n_eff + 2)) / (n_eff + 1)), 1e-3)
    return min((LEFT_TAIL * math.factorial(n_eff + 1)) ** (1.0 / (n_eff + 1)), 1e-3)


@functools.lru_cache(maxsize=64)
def grid_offsets(m: int) -> np.ndarray:
    """``e^{h i}`` for ``i < m``, ``h = ln 2 / m``: one octave of the grid's points over its first (:func:`_grid`)."""
    out = np.exp(math.log(2.0) / m * np.arange(m))
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=64)
def left_tail_terms(h: float) -> np.ndarray:
    """``d_m`` with the trapezoid rule's left tail ``sum_{i >= 1} h t_lo e^{-ih} exp(-W t_lo e^{-ih})``
    equal to ``t_lo sum_m d_m (-W t_lo)^m``: ``d_m = h e^{-(m+1)h} / (1 - e^{-(m+1)h}) / m!``."""
    m = np.arange(LEFT_TERMS)
    d = np.array([h / math.expm1((k + 1) * h) / math.factorial(k) for k in m])
    d.flags.writeable = False  # cached: one array per step
    return d


def _left_tail(x0: np.ndarray | float, d: np.ndarray):
    """``sum_m d_m (-x0)^m`` by Horner (``x0 = W t_lo``)."""
    acc = float(d[-1])
    for m in range(d.size - 2, -1, -1):
        acc = d[m] - x0 * acc
    return acc
#: Largest grid end used as is; beyond it the rates are rescaled (see :func:`scaled_grid`).
T_MAX = 1e300
#: Below this value of ``q t`` the survival ``1 - e^{-qt}`` uses a 4-term series.
SERIES_CUTOFF = 1e-3


def _smallest_scale(qs: np.ndarray, n_eff: int) -> float | None:
    """``min_k (W_k + m_k)`` over the prefixes that matter, or None if none does (one pass,
    :func:`~mdsd_cli._wor_loops._smallest_scale_loop`)."""
    from ._wor_loops import _smallest_scale_loop

    best = _smallest_scale_loop(qs, n_eff)
    return None if best < 0.0 else float(best)


def grid_end(qs: np.ndarray, n_eff: int, t_lo: float = T_LO) -> float:
    """``t_hi`` for a chain ``qs``: ``45 / min_k (W_k + m_k)`` over prefixes that matter (at least
    ``10 t_lo``), capped at :data:`T_MAX` (:func:`scaled_grid` rescales instead of capping)."""
    best = _smallest_scale(qs, n_eff)
    if best is None:
        return t_lo * 10.0
    with np.errstate(over="ignore"):
        return float(min(max(45.0 / best, t_lo * 10.0), T_MAX))


def scaled_grid(qs: np.ndarray, n_eff: int, m: int, t_lo: float):
    """``(rates, t, t_lo)``: the trapezoid grid ``t_lo .. t_hi`` for the chain ``qs`` (:func:`_grid`,
    ``m`` points an octave).

    If ``t_hi`` would exceed :data:`T_MAX`, the rates are multiplied by ``2^e``
    (exact, denormals included) and ``t`` and ``t_lo`` divided by it, ``e``
    centring the grid's exponent range on 1: ``P(X hits A)`` depends on
    rate x time only, so nothing is lost.
    """
    best = _smallest_scale(qs, n_eff)
    if best is None:
        return qs, _grid(t_lo * 10.0, m, t_lo), t_lo
    if 45.0 / T_MAX <= best:  # the grid fits: the same t_hi as grid_end
        return qs, _grid(min(max(45.0 / best, t_lo * 10.0), T_MAX), m, t_lo), t_lo
    log_hi = math.log(45.0) - math.log(best)  # finite even when best is denormal
    e = int(round((log_hi + math.log(t_lo)) / (2.0 * math.log(2.0))))
    scaled_lo = math.ldexp(t_lo, -e)
    return np.ldexp(qs, e), _grid(max(math.exp(log_hi - e * math.log(2.0)), scaled_lo * 10.0), m, scaled_lo), scaled_lo


def _grid(t_hi: float, m: int, t_lo: float) -> np.ndarray:
    """``t_j = t_lo 2^(j / m)`` from ``t_lo`` to at least ``t_hi``: each point is exactly twice the one
    ``m`` before it (``ldexp`` of the first ``m``), so ``e^{-q t}`` there is the square of the value
    ``m`` points before (see :func:`~mdsd_cli._wor_loops._fill`)."""
    ratio = t_hi / t_lo
    span = math.log(ratio) if math.isfinite(ratio) else math.log(t_hi) - math.log(t_lo)
    h = math.log(2.0) / m
    G = int(math.ceil(span / h)) + 1
    j = np.arange(G)
    return np.ldexp(t_lo * grid_offsets(m)[j % m], j // m)


def grid_step(h: float) -> tuple[int, float]:
    """``(m, ln 2 / m)``: the smallest ``m`` whose step ``ln 2 / m`` is at most ``h``."""
    m = max(1, math.ceil(math.log(2.0) / h - 1e-12))
    return m, math.log(2.0) / m


def _grid_for(qs: np.ndarray, n: int, h: float | None, t_lo: float | None):
    """``(rates, n_eff, m, h, t, t_lo)``: the grid both implementations use (step ``h = ln 2 / m``, at most
    ``h`` if given, else :func:`default_step`)."""
    support = int(np.count_nonzero(qs > 0))
    check_wor_drafts(int(n), support)
    n_eff = min(int(n), support)
    m, h = grid_step(default_step(n_eff) if h is None else float(h))
    if numba_enabled():  # the same steps in one compiled call (the total summed in order)
        from ._wor_loops import _grid_loops

        rates, t, t_lo = _grid_loops(qs, n_eff, m, left_unit(max(n_eff, 1)), -1.0 if t_lo is None else float(t_lo),
                                     grid_offsets(m))
        return rates, n_eff, m, h, t, t_lo
    total = float(qs.sum())
    if total > 0.0 and not 1e-150 < total < 1e150:  # an exact power of two: P(X hits A) depends on rate x time
        shift = -math.frexp(total)[1]
        qs = np.ldexp(qs, shift)
        total = float(qs.sum())
        if t_lo is not None:
            t_lo = math.ldexp(t_lo, -shift)
    if t_lo is None:
        t_lo = left_end(max(n_eff, 1), total)
    qs, t, t_lo = scaled_grid(qs, n_eff, m, t_lo)
    return qs, n_eff, m, h, t, t_lo


def wor_hit_chain_numpy(qs: np.ndarray, n: int, *, h: float | None = None, t_lo: float | None = None) -> np.ndarray:
    """Pure-numpy reference: ``H[k] = P(X hits {chain[0..k-1]})`` for ``k = 0..V``.

    ``qs`` is the draft distribution listed in chain order.
    """
    qs = np.ascontiguousarray(qs, dtype=np.float64)
    V = qs.size
    qs, n_eff, _, h, t, t_lo = _grid_for(qs, n, h, t_lo)
    W = np.concatenate(([0.0], np.cumsum(qs)))
    pmf = np.zeros((max(n_eff, 1), t.size))
    pmf[0] = 1.0
    less = np.ones(t.size)  # P[N_B(t) < n_eff]
    H = np.empty(V + 1)
    H[V] = 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # q t = inf past the grid's useful end: s = 1, c = 0
        _numpy_sweep(qs, n_eff, t, h, t_lo, left_tail_terms(h), W, pmf, less, H)
    return np.clip(H, 0.0, 1.0)


def _numpy_sweep(qs, n_eff, t, h, t_lo, d, W, pmf, less, H):
    count = 0
    for k in range(qs.size - 1, -1, -1):
        qk = qs[k]
        if qk > 0:
            count += 1
            y = qk * t
            small = y < SERIES_CUTOFF
            s = np.where(small, y * (1.0 - y * (0.5 - y * (1.0 / 6.0 - y / 24.0))), -np.expm1(-y))
            c = np.where(small, 1.0 - s, np.exp(-y))
            less -= s * pmf[n_eff - 1]
            if n_eff > 1:
                pmf[1:] = pmf[1:] * c + pmf[:-1] * s
            pmf[0] *= c
        Wk = W[k]
        if Wk <= 0:
            H[k] = 0.0
        elif qk == 0:
            H[k] = H[k + 1]
        elif count < n_eff:
            H[k] = 1.0
        else:
            x = Wk * t
            f = t * np.exp(-x) * np.maximum(less, 0.0)
            H[k] = Wk * (h * f.sum() + t_lo * _left_tail(Wk * t_lo, d))


def pair_hit_chain(qs: np.ndarray) -> np.ndarray:
    """``H[k]`` for a pair without replacement in closed form (``qs`` normalised, at least two
    positive). The pair hits the prefix ``A`` (mass ``W``) iff its first draw is in it, or its first
    draw is some ``y`` after it and its second is in it: ``H = W + sum_{y >= k} q_y W / (1 - q_y)
    = W (1 + R_k)`` with ``r = q / (1 - q)`` and ``R`` its suffix sums. Sums and products of
    non-negative terms only, so no cancellation whatever the masses: a prefix of mass 1e-5 keeps its
    relative precision (``1 - P(both draws after it)`` lost seven digits there), and a token above 1/2
    gets its ``1 - q`` as the mass of the others, summed. Returns None where that mass is below 1e-100
    (``r`` near overflow; the quadrature then rescales the rates instead). Compiled
    (:func:`~mdsd_cli._wor_loops._pair_loops`) when numba is on."""
    if numba_enabled():
        from ._wor_loops import _pair_loops

        H = np.empty(qs.size + 1)
        return H if _pair_loops(np.ascontiguousarray(qs, dtype=np.float64), H) else None
    S = np.concatenate((np.cumsum(qs[::-1])[::-1], [0.0]))
    rest = 1.0 - qs
    big = np.flatnonzero(qs > 0.5)
    if big.size:
        above = np.concatenate(([0.0], np.cumsum(qs)))[big]
        rest[big] = above + S[big + 1]  # the masses above it and below it
        if rest[big].min() < 1e-100:
            return None
    r = qs / rest
    R = np.concatenate((np.cumsum(r[::-1])[::-1], [0.0]))
    W = np.concatenate(([0.0], np.cumsum(qs)))
    H = np.minimum(W * (1.0 + R), 1.0)
    H[-1] = 1.0
    return H


def wor_hit_chain(qs: np.ndarray, n: int, *, h: float | None = None, t_lo: float | None = None) -> np.ndarray:
    """``H[k] = P(X hits {chain[0..k-1]})`` for ``k = 0..V`` (``wor`` drafts), exact to ~1e-12.

    Pairs in closed form (:func:`pair_hit_chain`); else the quadrature, by the numba kernel when
    available, else :func:`wor_hit_chain_numpy` (``t_lo``: the grid's left end, :func:`left_end` by
    default).
    """
    qs = np.ascontiguousarray(qs, dtype=np.float64)
    if min(int(n), int(np.count_nonzero(qs > 0))) == 2:
        pair = pair_hit_chain(qs / qs.sum())
        if pair is not None:
            return pair
    if not numba_enabled() or not (qs > 0).any():
        return wor_hit_chain_numpy(qs, n, h=h, t_lo=t_lo)
    from ._wor_loops import _wor_hit_chain_loops

    rates, n_eff, m, h, t, t_lo = _grid_for(qs, n, h, t_lo)
    return _wor_hit_chain_loops(rates, n_eff, t, m, h, t_lo, left_tail_terms(h))
