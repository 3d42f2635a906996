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
(:func:`default_step` keeps it below 1e-13 up to n = 16). Below ``t_lo`` the integrand is ``W t`` to
within ``O(t^2)`` and the rule's infinite left tail is summed in closed form;
``t_hi`` is chosen so that ``(W_k + m_k) t_hi >= 45`` for every prefix, where
``m_k`` is the ``n``-th largest rate in ``B_k`` (then the integrand is below
1e-17). When ``t_hi`` would pass :data:`T_MAX` (rates near the float64 floor,
down to denormals), the rates are multiplied by a power of two ``2^e`` and the
grid divided by it: the integral depends on rate x time only, and the scaling
is exact, so such chains are as accurate as any other (the grid just has more
points). Sweeping ``k`` from ``V`` down to 0 moves one token at a time into
``B`` and updates the Poisson-binomial pmf (truncated below ``n``) on the
whole grid: ``O(V n G)`` work for a grid of ``G = ln(t_hi / t_lo) / h`` points.

Two implementations with the same arithmetic: a numba kernel (default) and a
pure-numpy one (a Python loop over tokens, vectorised over the grid), used
when numba is unavailable or ``MDSD_DISABLE_NUMBA=1``.
"""

from __future__ import annotations

import math

import numpy as np

from ._jit import compiled, numba_enabled  # noqa: F401 (re-exported)


def default_step(n: int) -> float:
    """Trapezoid step in log-time for ``n`` drafts.

    The error decays like ``exp(-c / h)`` with ``c`` shrinking as ``n`` grows
    (measured at V = 50,000 against ``h = 0.12``: below 1e-13 for n <= 16 with
    this rule; ``h = 0.3`` would leave 1e-9 at n = 8 and 4e-7 at n = 16).
    """
    return max(0.27 - 0.007 * n, 0.08)

#: Left end of the grid; below it the integrand is ``W t`` and summed exactly.
T_LO = 1e-8
#: Largest grid end used as is; beyond it the rates are rescaled (see :func:`scaled_grid`).
T_MAX = 1e300
#: Below this value of ``q t`` the survival ``1 - e^{-qt}`` uses a 4-term series.
SERIES_CUTOFF = 1e-3


def _smallest_scale(qs: np.ndarray, n_eff: int) -> float | None:
    """``min_k (W_k + m_k)`` over the prefixes that matter, or None if none does."""
    V = qs.size
    W = np.concatenate(([0.0], np.cumsum(qs)))
    pos = qs > 0
    # m_k: the n_eff-th largest positive rate in the suffix qs[k:]. Only prefixes
    # with W_k > 0 and at least n_eff positive rates in B_k matter.
    count_suffix = np.cumsum(pos[::-1])[::-1]  # positives in qs[k:]
    valid = np.flatnonzero((W[:V] > 0) & (count_suffix >= n_eff))
    if valid.size == 0:
        return None
    if n_eff == 1:
        m = np.maximum.accumulate(qs[::-1])[::-1]
    else:
        m = (compiled(_suffix_kth_largest) or _suffix_kth_largest)(qs, n_eff)
    return float(np.min(W[valid] + m[valid]))


def grid_end(qs: np.ndarray, n_eff: int) -> float:
    """``t_hi`` for a chain ``qs``: ``45 / min_k (W_k + m_k)`` over prefixes that matter,
    capped at :data:`T_MAX` (:func:`scaled_grid` rescales instead of capping)."""
    best = _smallest_scale(qs, n_eff)
    if best is None:
        return T_LO * 10.0
    with np.errstate(over="ignore"):
        return float(min(max(45.0 / best, T_LO * 10.0), T_MAX))


def scaled_grid(qs: np.ndarray, n_eff: int, h: float, t_lo: float):
    """``(rates, t, t_lo)``: the trapezoid grid ``t_lo .. t_hi`` for the chain ``qs``.

    If ``t_hi`` would exceed :data:`T_MAX`, the rates are multiplied by ``2^e``
    (exact, denormals included) and ``t`` and ``t_lo`` divided by it, ``e``
    centring the grid's exponent range on 1: ``P(X hits A)`` depends on
    rate x time only, so nothing is lost.
    """
    best = _smallest_scale(qs, n_eff)
    if best is None:
        return qs, _grid(T_LO * 10.0, h, t_lo), t_lo
    if 45.0 / T_MAX <= best:  # the grid fits: the same t_hi as grid_end
        return qs, _grid(min(max(45.0 / best, T_LO * 10.0), T_MAX), h, t_lo), t_lo
    log_hi = math.log(45.0) - math.log(best)  # finite even when best is denormal
    e = int(round((log_hi + math.log(t_lo)) / (2.0 * math.log(2.0))))
    scaled_lo = math.ldexp(t_lo, -e)
    return np.ldexp(qs, e), _grid(math.exp(log_hi - e * math.log(2.0)), h, scaled_lo), scaled_lo


def _suffix_kth_largest(qs, k):
    # Keep the k largest values seen so far, scanning from the end (ascending
    # buffer; top[0] is the k-th largest). Compiled by numba when available.
    V = qs.shape[0]
    out = np.zeros(V)
    top = np.zeros(k)
    for i in range(V - 1, -1, -1):
        x = qs[i]
        if x > top[0]:
            j = 1
            while j < k and top[j] < x:
                top[j - 1] = top[j]
                j += 1
            top[j - 1] = x
        out[i] = top[0]
    return out


def _grid(t_hi: float, h: float, t_lo: float) -> np.ndarray:
    ratio = t_hi / t_lo
    span = math.log(ratio) if math.isfinite(ratio) else math.log(t_hi) - math.log(t_lo)
    G = int(math.ceil(span / h)) + 1
    return np.exp(math.log(t_lo) + h * np.arange(G))


def wor_hit_chain_numpy(qs: np.ndarray, n: int, *, h: float | None = None, t_lo: float = T_LO) -> np.ndarray:
    """Pure-numpy reference: ``H[k] = P(X hits {chain[0..k-1]})`` for ``k = 0..V``.

    ``qs`` is the draft distribution listed in chain order.
    """
    qs = np.ascontiguousarray(qs, dtype=np.float64)
    V = qs.size
    n_eff = min(int(n), int(np.count_nonzero(qs > 0)))
    h = default_step(n_eff) if h is None else float(h)
    qs, t, t_lo = scaled_grid(qs, n_eff, h, t_lo)
    W = np.concatenate(([0.0], np.cumsum(qs)))
    pmf = np.zeros((n_eff, t.size))
    pmf[0] = 1.0
    less = np.ones(t.size)  # P[N_B(t) < n_eff]
    left = t_lo * h / math.expm1(h)
    H = np.empty(V + 1)
    H[V] = 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # q t = inf past the grid's useful end: s = 1, c = 0
        _numpy_sweep(qs, n_eff, t, h, left, W, pmf, less, H)
    return np.clip(H, 0.0, 1.0)


def _numpy_sweep(qs, n_eff, t, h, left, W, pmf, less, H):
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
            H[k] = Wk * (h * f.sum() + left)


def _wor_hit_chain_loops(qs, n_eff, t, h, left, cutoff):  # pragma: no cover - compiled
    V = qs.shape[0]
    G = t.shape[0]
    log_t0 = math.log(t[0])
    W = np.empty(V + 1)
    W[0] = 0.0
    for i in range(V):
        W[i + 1] = W[i] + qs[i]
    pmf = np.zeros((n_eff, G))
    for j in range(G):
        pmf[0, j] = 1.0
    less = np.ones(G)
    s = np.empty(G)
    c = np.empty(G)
    H = np.empty(V + 1)
    H[V] = 1.0
    count = 0
    for k in range(V - 1, -1, -1):
        qk = qs[k]
        if qk > 0:
            count += 1
            # grid points with qk * t_j < cutoff use the series
            js = int(math.ceil((math.log(cutoff / qk) - log_t0) / h))
            js = min(max(js, 0), G)
            for j in range(js):
                y = qk * t[j]
                sj = y * (1.0 - y * (0.5 - y * (1.0 / 6.0 - y / 24.0)))
                s[j] = sj
                c[j] = 1.0 - sj
            for j in range(js, G):
                y = qk * t[j]
                if y < cutoff:  # guard against rounding in js
                    sj = y * (1.0 - y * (0.5 - y * (1.0 / 6.0 - y / 24.0)))
                    s[j] = sj
                    c[j] = 1.0 - sj
                else:
                    s[j] = -math.expm1(-y)
                    c[j] = math.exp(-y)
            top = pmf[n_eff - 1]
            for j in range(G):
                less[j] -= s[j] * top[j]
            for r in range(n_eff - 1, 0, -1):
                row = pmf[r]
                below = pmf[r - 1]
                for j in range(G):
                    row[j] = row[j] * c[j] + below[j] * s[j]
            row0 = pmf[0]
            for j in range(G):
                row0[j] *= c[j]
        Wk = W[k]
        if Wk <= 0.0:
            H[k] = 0.0
        elif qk == 0.0:
            H[k] = H[k + 1]
        elif count < n_eff:
            H[k] = 1.0
        else:
            acc = 0.0
            for j in range(G):
                x = Wk * t[j]
                if x > 745.0:
                    break
                lj = less[j]
                if lj > 0.0:
                    acc += t[j] * math.exp(-x) * lj
            v = Wk * (h * acc + left)
            H[k] = min(max(v, 0.0), 1.0)
    return H


def pair_hit_chain(qs: np.ndarray) -> np.ndarray:
    """``H[k]`` for a pair without replacement in closed form (``qs`` normalised, at least two
    positive). The pair misses the prefix iff both draws lie in the suffix ``k..``: with
    ``r = q / (1 - q)``, ``S`` and ``R`` the suffix masses of ``q`` and ``r``,
    ``M_k = sum_{y >= k} r_y (S_k - q_y)``, and ``M_k = M_{k+1} + r_k S_{k+1} + q_k R_{k+1}``: a sum
    of non-negative terms, so no cancellation whatever the masses (a token above 1/2 included: its
    ``1 - q`` is the mass of the others, summed). Returns None where that mass is below 1e-100 (``r``
    near overflow; the quadrature then rescales the rates instead)."""
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
    terms = r * S[1:] + qs * R[1:]
    M = np.concatenate((np.cumsum(terms[::-1])[::-1], [0.0]))
    H = np.clip(1.0 - M, 0.0, 1.0)
    H[np.concatenate(([0.0], np.cumsum(qs))) <= 0.0] = 0.0  # a prefix without draft mass is never hit (not ~1e-14)
    return H


def wor_hit_chain(qs: np.ndarray, n: int, *, h: float | None = None, t_lo: float = T_LO) -> np.ndarray:
    """``H[k] = P(X hits {chain[0..k-1]})`` for ``k = 0..V`` (``wor`` drafts), exact to ~1e-12.

    Uses the numba kernel when available, else :func:`wor_hit_chain_numpy`.
    """
    qs = np.ascontiguousarray(qs, dtype=np.float64)
    if min(int(n), int(np.count_nonzero(qs > 0))) == 2:
        pair = pair_hit_chain(qs / qs.sum())
        if pair is not None:
            return pair
    kernel = compiled(_wor_hit_chain_loops)
    if kernel is None:
        return wor_hit_chain_numpy(qs, n, h=h, t_lo=t_lo)
    qs = np.ascontiguousarray(qs, dtype=np.float64)
    n_eff = min(int(n), int(np.count_nonzero(qs > 0)))
    h = default_step(n_eff) if h is None else float(h)
    qs, t, t_lo = scaled_grid(qs, n_eff, h, t_lo)
    return kernel(qs, n_eff, t, h, t_lo * h / math.expm1(h), SERIES_CUTOFF)
