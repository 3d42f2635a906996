"""Optimal verifiers: reach α* at full vocabulary, not just compute it.

The construction (for ``iid`` drafts; see ``README`` for the derivation):

1. **Where acceptance is forced.** With ``A*`` the largest minimising prefix of
   the chain (tokens by decreasing ``p/q``), every optimal coupling accepts a
   draft in ``A*`` whenever the drafts hit ``A*``, and accepts each token off
   ``A*`` with its full target mass ``p``.
2. **Candidate law.** Pick one draft ``Z`` with law ``t``, then run single-draft
   speculative sampling of ``Z`` against ``p`` (accept with ``min(1, p/t)``,
   else draw from ``(p - t)_+``). This reaches ``sum_y min(p, t)``, which is α*
   whenever ``t <= p`` on ``A*`` and ``t >= p`` off it. For iid drafts
   ``t = min(p, lambda q)`` on ``A*`` and ``t = max(p, kappa q)`` off it are
   bases of the coverage polymatroid (tight exactly at the chain prefixes where
   the cumulative target meets ``P(X hits A_k)``).
3. **Selection rule.** Blocks between consecutive tight prefixes are served in
   chain order (a draft in an earlier block always wins); inside the first hit
   block, ``Z`` is a Luce choice: each draft instance gets an exponential key
   ``E / w_x`` and the smallest key wins. Its law is

   .. math:: c(y) = n q_y w_y \\int_0^\\infty e^{-w_y s} M(s)^{n-1} ds, \\qquad
             M(s) = o + \\sum_{z \\in B} q_z e^{-w_z s},

   with ``o`` the draft mass after the block. The weights solve
   ``c(y) = t(y)`` — a fixed point on the function ``M``, accelerated with
   Anderson mixing. Losslessness never depends on convergence: the
   speculative step uses the exact ``c`` of the final weights.

``optimal-wor`` uses the same design with the ``wor`` chain and hit function:
exact by enumeration of the draft sets for any ``n`` (small V), and at full
vocabulary for ``n <= 2``, where the Luce law of a pair has the closed form of
:class:`_PairBlock`. For ``n >= 3`` at full vocabulary the law needs a second
time variable and leave-one-out products over the vocabulary; it is refused.

Per step: block lookup, ``n`` exponential keys, one coin, and at most one
draw from a precomputed residual CDF — ``O(n + log V)``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._jit import compiled
from .._wor_kernel import default_step
from ..samplers import ratio_order
from .base import PreparedVerifier, drafted_mass

#: ``exact_rate`` is reported when the rate is known to within this (else None).
RATE_TOLERANCE = 1e-9
#: Relative gap under which a chain prefix counts as tight (block boundary).
TIGHT = 1e-12
#: Weights span at most 1/WEIGHT_FLOOR within a block (anchored at the largest
#: or the smallest, see :func:`solve_block`).
WEIGHT_FLOOR = 1e-14


# --- quadrature kernels ------------------------------------------------------------------

#: Below this value of ``w s`` the exponential is a 4-term series (error < 1e-18).
SERIES = 1e-4


def _block_M(qb, w, s, o):  # pragma: no cover - compiled by numba
    # M(s_j) = o + sum_y q_y e^{-w_y s_j}. Tokens sorted by weight: those with
    # w s_j < SERIES enter through prefix moments of q w^k, those with
    # w s_j > 745 not at all, and only the window in between needs exponentials.
    G = s.shape[0]
    V = qb.shape[0]
    order = np.argsort(w)
    ws = w[order]
    qs = qb[order]
    S0 = np.zeros(V + 1)
    S1 = np.zeros(V + 1)
    S2 = np.zeros(V + 1)
    S3 = np.zeros(V + 1)
    for i in range(V):
        S0[i + 1] = S0[i] + qs[i]
        S1[i + 1] = S1[i] + qs[i] * ws[i]
        S2[i + 1] = S2[i] + qs[i] * ws[i] ** 2
        S3[i + 1] = S3[i] + qs[i] * ws[i] ** 3
    M = np.empty(G)
    for j in range(G):
        sj = s[j]
        lo = np.searchsorted(ws, SERIES / sj)
        hi = np.searchsorted(ws, 745.0 / sj, side="right")
        total = o + S0[lo] - sj * S1[lo] + 0.5 * sj * sj * S2[lo] - sj * sj * sj / 6.0 * S3[lo]
        for i in range(lo, hi):
            total += qs[i] * math.exp(-ws[i] * sj)
        M[j] = total
    return M


def _block_F(w, s, Mn, h, left, n):  # pragma: no cover - compiled by numba
    # F(w_y) = n w_y int e^{-w_y s} M(s)^{n-1} ds and dF/dlog w, trapezoid in
    # log s. Grid points with w s < SERIES enter through prefix moments of
    # s^(1+k) M^(n-1); points with w s > 745 contribute nothing.
    V = w.shape[0]
    G = s.shape[0]
    B = np.zeros((5, G + 1))
    for j in range(G):
        base = s[j] * Mn[j]
        sk = 1.0
        for k in range(5):
            B[k, j + 1] = B[k, j] + base * sk
            sk *= s[j]
    log_s0 = math.log(s[0])
    F = np.empty(V)
    dF = np.empty(V)
    for y in range(V):
        wy = w[y]
        j0 = int(math.ceil((math.log(SERIES / wy) - log_s0) / h))
        j0 = min(max(j0, 0), G)
        while j0 > 0 and wy * s[j0 - 1] >= SERIES:  # guard the rounding of the index
            j0 -= 1
        while j0 < G and wy * s[j0] < SERIES:
            j0 += 1
        # series part: sum s Mn e^{-w s} = B0 - w B1 + w^2/2 B2 - w^3/6 B3 + w^4/24 B4
        w2 = wy * wy
        a = B[0, j0] - wy * B[1, j0] + 0.5 * w2 * B[2, j0] - w2 * wy / 6.0 * B[3, j0] + w2 * w2 / 24.0 * B[4, j0]
        # sum s Mn e^{-w s} (w s) = w B1 - w^2 B2 + w^3/2 B3 - w^4/6 B4
        b = wy * B[1, j0] - w2 * B[2, j0] + 0.5 * w2 * wy * B[3, j0] - w2 * w2 / 6.0 * B[4, j0]
        for j in range(j0, G):
            x = wy * s[j]
            if x > 745.0:
                break
            e = s[j] * math.exp(-x) * Mn[j]
            a += e
            b += e * x
        a = h * a + left
        b = h * b
        F[y] = n * wy * a
        dF[y] = n * wy * (a - b)  # d F / d log w
    return F, dF


def _kernels():
    return compiled(_block_M), compiled(_block_F)


class _Block:
    """One priority block: tokens, draft masses, target ratios, outside mass."""

    def __init__(self, tokens, q, t, o, n):
        self.tokens = tokens
        self.q = q[tokens]
        self.rho = t[tokens] / self.q
        self.o = float(o)
        self.n = n
        self.h = default_step(max(n, 1))

    def grid(self, w):
        lo = 1e-8 / w.max()
        hi = 60.0 / max(w.min(), 1e-300)
        G = int(math.ceil(math.log(hi / lo) / self.h)) + 1
        return np.exp(math.log(lo) + self.h * np.arange(G))

    def evaluate(self, w):
        """``(F, dF/dlog w, M, grid)`` for the block's own weights."""
        kM, kF = _kernels()
        s = self.grid(w)
        M = (kM or _block_M)(self.q, w, s, self.o)
        Mn = M ** (self.n - 1)
        M0 = self.o + self.q.sum()
        left = s[0] * self.h / math.expm1(self.h) * M0 ** (self.n - 1)
        F, dF = (kF or _block_F)(w, s, Mn, self.h, left, self.n)
        return F, dF, s, Mn, left

    def invert(self, w, s, Mn, left, *, max_steps=12, tol=1e-14):
        """Solve ``F_M(w) = rho`` per token for fixed ``M``: safeguarded Newton in
        ``log w`` from the given weights, on the tokens not yet converged."""
        kF = _kernels()[1] or _block_F
        x = np.log(w)
        lo = np.full(w.size, math.log(WEIGHT_FLOOR) - 5.0)
        hi = np.full(w.size, -math.log(WEIGHT_FLOOR) + 5.0)
        target = np.log(self.rho)
        active = np.arange(w.size)
        for _ in range(max_steps):
            F, dF = kF(np.exp(x[active]), s, Mn, self.h, left, self.n)
            f = np.log(np.maximum(F, 1e-300)) - target[active]
            lo[active] = np.where(f < 0, x[active], lo[active])
            hi[active] = np.where(f > 0, x[active], hi[active])
            slope = dF / np.maximum(F, 1e-300)
            step = np.where(slope > 1e-12, -f / np.maximum(slope, 1e-12), 0.0)
            new = x[active] + step
            # strict: a converged token's zero step sits on its bracket end
            bad = (new < lo[active]) | (new > hi[active]) | ~np.isfinite(new)
            new = np.where(bad, 0.5 * (lo[active] + hi[active]), new)
            done = np.abs(f) <= 4e-16
            new = np.where(done, x[active], new)
            moved = np.abs(new - x[active])
            x[active] = new
            active = active[(moved > tol) & ~done]
            if active.size == 0:
                break
        return np.exp(x)


def _anderson(fixed_map, x0, *, depth=6, tol=1e-13, max_iter=300, clip=None):
    """Safeguarded Anderson-accelerated fixed point ``x = fixed_map(x)``.

    Returns ``(x, iterations, residual)``. Extrapolated points are clipped to
    ``clip = (lo, hi)``; when the residual grows the history is dropped and a
    plain step is taken.
    """
    x = x0
    X, R = [], []
    best = math.inf
    res = math.inf
    for it in range(1, max_iter + 1):
        gx = fixed_map(x)
        r = gx - x
        res = float(np.max(np.abs(r)))
        if not np.isfinite(res):
            raise FloatingPointError("fixed-point iteration produced non-finite values")
        if res < tol:
            return gx, it, res
        if res > 2.0 * best:  # extrapolation went astray: restart from the plain step
            X, R = [], []
        best = min(best, res)
        X.append(gx)
        R.append(r)
        if len(R) > depth:
            X.pop(0)
            R.pop(0)
        x = gx
        if len(R) > 1:
            dR = np.stack([R[i + 1] - R[i] for i in range(len(R) - 1)], axis=1)
            dX = np.stack([X[i + 1] - X[i] for i in range(len(X) - 1)], axis=1)
            try:
                gamma, *_ = np.linalg.lstsq(dR, r, rcond=None)
                cand = gx - dX @ gamma
                if np.all(np.isfinite(cand)):
                    x = cand
            except np.linalg.LinAlgError:
                X, R = [gx], [r]
        if clip is not None:
            x = np.clip(x, *clip)
    return x, max_iter, res


def _hermite_inverse(xs, fs, dfs, targets):
    """Invert an increasing function tabulated at ``xs`` (values ``fs``, slopes ``dfs``)
    at ``targets``: cubic Hermite in ``f``, i.e. with slopes ``1/df``."""
    k = np.clip(np.searchsorted(fs, targets) - 1, 0, xs.size - 2)
    f0, f1 = fs[k], fs[k + 1]
    x0, x1 = xs[k], xs[k + 1]
    d0, d1 = 1.0 / np.maximum(dfs[k], 1e-300), 1.0 / np.maximum(dfs[k + 1], 1e-300)
    hstep = f1 - f0
    u = np.clip((targets - f0) / np.where(hstep > 0, hstep, 1.0), 0.0, 1.0)
    h00, h10 = 2 * u**3 - 3 * u**2 + 1, u**3 - 2 * u**2 + u
    h01, h11 = -2 * u**3 + 3 * u**2, u**3 - u**2
    return h00 * x0 + h10 * hstep * d0 + h01 * x1 + h11 * hstep * d1


def solve_block(block: _Block, *, tol=1e-13, max_iter=200):
    """Luce weights with ``c = t`` on one block; returns ``(w, c, info)``.

    Every weight is ``F_M^{-1}(rho_y)`` for one function ``M``, so the fixed point
    lives on ``M / M(0)`` over the quadrature grid (a few hundred numbers, whatever
    V is): Anderson mixing on it, with ``F_M^{-1}`` from a cubic Hermite table of
    ``log F`` against ``log w``; then exact Newton polishing per token.
    """
    kM, kF = _kernels()
    kM, kF = kM or _block_M, kF or _block_F
    if block.n == 1 or np.allclose(block.rho, block.rho[0], rtol=1e-15, atol=0):
        w = np.ones(block.q.size)  # n = 1 or a single target ratio: equal weights are exact
        F, _, _, _, _ = block.evaluate(w)
        return w, F * block.q, {"iterations": 0, "residual": 0.0}
    log_rho = np.log(block.rho)
    # Weights are defined up to scale. With draft mass after the block (o > 0)
    # anchor the largest weight at 1; without it the first tokens can sit near
    # the top of F's range and need huge weights, so anchor the smallest at 1.
    span = -math.log(WEIGHT_FLOOR)
    top = block.o > 0
    table_x = np.linspace(-span - 1.0, 1.0, 1600) if top else np.linspace(-1.0, span + 1.0, 1600)
    w_lo, w_hi = (WEIGHT_FLOOR, 1.0) if top else (1.0, 1.0 / WEIGHT_FLOOR)
    s = block.grid(np.array([w_lo, w_hi]))
    M0 = block.o + block.q.sum()
    left = s[0] * block.h / math.expm1(block.h) * M0 ** (block.n - 1)

    def anchored(x):
        x = x - (x.max() if top else x.min())
        return np.clip(np.exp(x), w_lo, w_hi)

    def weights_for(m, exact):
        Mn = (np.maximum(m, 0.0) * M0) ** (block.n - 1)
        F, dF = kF(np.exp(table_x), s, Mn, block.h, left, block.n)
        x = _hermite_inverse(table_x, np.log(np.maximum(F, 1e-300)), dF / np.maximum(F, 1e-300), log_rho)
        w = anchored(x)
        if exact:
            w = anchored(np.log(block.invert(w, s, Mn, left)))
        return w

    def scaled_M(w):  # M / M(0), in [0, 1]: absolute errors where M is tiny do not matter
        return kM(block.q, w, s, block.o) / M0

    def fixed_map(m, exact=False):
        return scaled_M(weights_for(m, exact))

    # F is close to linear in w for small weights: w proportional to the target
    # ratio is a far better start than equal weights (~10x fewer iterations)
    m = scaled_M(anchored(log_rho))
    m, it1, res1 = _anderson(lambda x: fixed_map(x), m, tol=1e-11, max_iter=max_iter, clip=(0.0, 1.0))
    m, it2, res2 = _anderson(lambda x: fixed_map(x, exact=True), m, tol=tol, max_iter=30, clip=(0.0, 1.0))
    w = weights_for(m, exact=True)
    F, _, _, _, _ = block.evaluate(w)  # the exact law of these weights (on their own grid)
    return w, F * block.q, {"iterations": it1 + it2, "residual": res2}


def chain_targets(p: np.ndarray, q: np.ndarray, n: int, sampler):
    """The chain, the largest minimising prefix ``K``, the targets and the tight cuts.

    ``t = min(p, lambda q)`` on ``A* = chain[:K]`` (summing to ``P(X hits A*)``) and
    ``t = max(p, kappa q)`` after it (summing to ``P(X misses A*)``); the cuts are
    the chain prefixes where the cumulative target meets ``P(X hits A_k)``.
    """
    V = p.size
    order = ratio_order(p, q)
    H = sampler.hit_probability_chain(q, n, order)
    P = np.concatenate(([0.0], np.cumsum(p[order])))
    g = H - P
    K = int(np.flatnonzero(g <= g.min() + 1e-13)[-1])  # the largest minimising prefix
    star, tail = order[:K], order[K:]
    t = np.zeros(V)
    if K:
        t[star] = _capped(p[star], q[star], float(H[K]))
    if K < V:
        t[tail] = _floored(p[tail], q[tail], float(1.0 - H[K]))
    T = np.concatenate(([0.0], np.cumsum(t[order])))
    tight = np.abs(T - H) <= TIGHT * np.maximum(1.0, H)
    tight[[0, K, V]] = True
    return order, K, t, np.flatnonzero(tight)


def priority_blocks(order, K, cuts, q):
    """The runs of the chain between consecutive tight cuts (tokens with ``q > 0``).

    Returns ``[(tokens, end), ...]`` in priority order (``end`` is the chain position
    after the block) and the index of the first block after ``A* = chain[:K]``.
    """
    blocks, first_tail = [], None
    for a, b in zip(cuts[:-1], cuts[1:]):
        tokens = order[a:b]
        tokens = tokens[q[tokens] > 0]
        if tokens.size == 0:
            continue
        if a >= K and first_tail is None:
            first_tail = len(blocks)
        blocks.append((tokens, int(b)))
    return blocks, first_tail


def _solve_blocks(blocks, first_tail, V, K, t, method, solve):
    """Run ``solve(tokens, end) -> (w, c, info)`` on every block; assemble the plan."""
    weights, c = np.zeros(V), np.zeros(V)
    info = {"K": K, "blocks": len(blocks), "iterations": 0, "residual": 0.0, "first_tail_block": first_tail,
            "method": method}
    for tokens, end in blocks:
        w, cb, binfo = solve(tokens, end)
        weights[tokens], c[tokens] = w, cb
        info["iterations"] = max(info["iterations"], binfo["iterations"])
        info["residual"] = max(info["residual"], binfo["residual"])
    return [tokens for tokens, _ in blocks], weights, c, t, info


def iid_plan(p: np.ndarray, q: np.ndarray, n: int):
    """Blocks, Luce weights and the exact candidate law of the optimal iid verifier."""
    from ..samplers import SAMPLERS

    V = p.size
    order, K, t, cuts = chain_targets(p, q, n, SAMPLERS["iid"])
    # draft mass after each chain position, summed from the end: exactly 0 after the last token
    after = np.concatenate((np.cumsum(q[order][::-1])[::-1], [0.0]))
    blocks, first_tail = priority_blocks(order, K, cuts, q)
    return _solve_blocks(blocks, first_tail, V, K, t, "quadrature",
                         lambda tokens, end: solve_block(_Block(tokens, q, t, after[end], n)))


def _capped(p, q, total):
    """``min(p, lam q)`` summing to ``total``; ``p``, ``q`` in decreasing ``p/q`` order.

    The capped tokens are a prefix ``[:k]``, so ``lam = (total - p[k:].sum()) / q[:k].sum()``
    exactly; ``t = q / q[:k].sum() * (...)`` never overflows, even for ``q`` near the
    float64 floor (where ``lam`` itself would).
    """
    if total >= p.sum():
        return p.copy()
    if total >= p[q > 0].sum():  # never for a minimising A* (it carries at least P(X hits A*))
        return np.where(q > 0, p, 0.0)
    pre_q = np.cumsum(q)  # q[:k+1].sum()
    suf_p = np.concatenate((np.cumsum(p[::-1])[::-1][1:], [0.0]))  # p[k+1:].sum()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lam = (total - suf_p) / pre_q
        nxt = np.concatenate((np.where(q[1:] > 0, p[1:] / q[1:], np.inf), [-np.inf]))
    ok = np.flatnonzero((pre_q > 0) & (lam >= nxt))  # the next token is not capped
    k = int(ok[0]) + 1 if ok.size else p.size
    t = p.copy()
    t[:k] = q[:k] / pre_q[k - 1] * (total - suf_p[k - 1])
    return np.minimum(t, p)


def _floored(p, q, total):
    """``max(p, kappa q)`` summing to ``total``; ``p``, ``q`` in decreasing ``p/q`` order.

    The floored tokens are a suffix ``[j:]``, so ``kappa = (total - p[:j].sum()) / q[j:].sum()``.
    """
    if total <= p.sum():
        return p.copy()
    pre_p = np.concatenate(([0.0], np.cumsum(p)))[:-1]  # p[:j].sum()
    suf_q = np.cumsum(q[::-1])[::-1]  # q[j:].sum()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        kappa = (total - pre_p) / suf_q
        prev = np.concatenate(([np.inf], np.where(q[:-1] > 0, p[:-1] / q[:-1], np.inf)))
    ok = np.flatnonzero((suf_q > 0) & (kappa <= prev))  # the previous token is not floored
    j = int(ok[-1]) if ok.size else 0
    t = p.copy()
    t[j:] = np.maximum(p[j:], q[j:] / suf_q[j] * (total - pre_p[j]))
    return t


def solve_enumerated(members: np.ndarray, prob: np.ndarray, block_of: np.ndarray, tokens: np.ndarray,
                     t: np.ndarray, V: int, *, tol=1e-14, max_iter=100):
    """Luce weights on one block from the exact law of the draft set (any sampler, small V).

    ``members``/``prob`` is the set law; the sets whose first hit block is this
    one choose among their tokens in the block. Newton on ``log w`` (the
    Jacobian ``sum_S P(S) (diag(pi) - pi pi^T)`` is exact), minimum-norm steps
    for the scale direction, backtracking on ``|c - t|``.
    """
    big = np.iinfo(np.int64).max
    b = int(block_of[tokens[0]])
    blk = np.where(members >= 0, block_of[np.maximum(members, 0)], big)
    mine = blk.min(axis=1) == b
    S = np.where(blk[mine] == b, members[mine], -1)
    P = prob[mine]
    local = np.full(V, -1)
    local[tokens] = np.arange(tokens.size)
    L = np.where(S >= 0, local[np.maximum(S, 0)], -1)
    target = t[tokens]

    def law(x):
        w = np.where(L >= 0, np.exp(x[np.maximum(L, 0)]), 0.0)
        pi = w / w.sum(axis=1, keepdims=True)
        c = np.zeros(tokens.size)
        np.add.at(c, L[L >= 0], (pi * P[:, None])[L >= 0])
        return c, pi

    x = np.log(np.maximum(target / np.maximum(
        np.bincount(L[L >= 0], weights=np.broadcast_to(P[:, None], L.shape)[L >= 0], minlength=tokens.size),
        1e-300), 1e-300))
    x -= x.max()
    c, pi = law(x)
    iterations = 0
    while iterations < max_iter:
        r = c - target
        if np.abs(r).max() <= tol:
            break
        iterations += 1
        J = np.zeros((tokens.size, tokens.size))
        k = L.shape[1]
        for i in range(k):
            for j in range(k):
                ok = (L[:, i] >= 0) & (L[:, j] >= 0)
                val = P[ok] * pi[ok, i] * ((i == j) - pi[ok, j])
                np.add.at(J, (L[ok, i], L[ok, j]), val)
        step, *_ = np.linalg.lstsq(J, -r, rcond=None)
        lam = 1.0
        while lam > 1e-6:
            xn = np.clip(x + lam * step, -60.0, 60.0)
            cn, pin = law(xn)
            if np.abs(cn - target).max() < np.abs(r).max():
                break
            lam *= 0.5
        x, c, pi = xn - xn.max(), cn, pin
    w = np.maximum(np.exp(x), 1e-300)
    return w, c, {"iterations": iterations, "residual": float(np.abs(c - target).max())}


class _LuceVerifier(PreparedVerifier):
    """Shared machinery: priority blocks, Luce choice of a candidate, speculative sampling."""

    def plan(self):  # -> (blocks, weights, candidate law, target, info)
        raise NotImplementedError

    def setup(self):
        t0 = time.perf_counter()
        blocks, w, c, self.target, self.info = self.plan()
        self.setup_seconds = time.perf_counter() - t0
        self.weights = w
        self.candidate = c
        self.block = np.full(self.V, np.iinfo(np.int64).max, dtype=np.int64)
        for i, tokens in enumerate(blocks):
            self.block[tokens] = i
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self.accept = np.where(c > 0, np.minimum(1.0, self.p / c), 0.0)
        left = np.maximum(self.p - np.minimum(self.p, c), 0.0)
        self.residual = left / left.sum() if left.sum() > 0 else self.p.copy()
        self.residual_cdf = np.cumsum(self.residual)  # once: a step then costs O(n + log V)

    def choice(self, drafts) -> np.ndarray:
        """``P(Z = x_i | X)`` for every draft instance ``[M, n]`` (Luce in the first hit block)."""
        drafts = np.atleast_2d(drafts)
        blk = self.block[drafts]
        first = blk.min(axis=1, keepdims=True)
        w = np.where(blk == first, self.weights[drafts], 0.0)
        return w / w.sum(axis=1, keepdims=True)

    def output_law(self, drafts):
        drafts = np.asarray(drafts)
        z = self.choice(drafts)[0]
        out = np.zeros(self.V)
        np.add.at(out, drafts, z * self.accept[drafts])
        return out + (1.0 - out.sum()) * self.residual

    def acceptance(self, drafts):
        drafts = np.atleast_2d(drafts)
        z = self.choice(drafts)
        taken = (z * self.accept[drafts]).sum(axis=1)
        return taken + (1.0 - taken) * drafted_mass(self.residual, drafts)

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        M = drafts.shape[0]
        blk = self.block[drafts]
        keys = rng.standard_exponential(drafts.shape) / np.maximum(self.weights[drafts], 1e-300)
        keys = np.where(blk == blk.min(axis=1, keepdims=True), keys, np.inf)
        z = drafts[np.arange(M), np.argmin(keys, axis=1)]
        cdf = self.residual_cdf
        out = np.minimum(np.searchsorted(cdf, rng.random(M) * cdf[-1], side="right"), self.V - 1)
        keep = rng.random(M) < self.accept[z]
        out[keep] = z[keep]
        return out

    def exact_rate(self):
        # Candidates in A* are always accepted (c <= p there) and a rejected tail
        # candidate's residual lies in A*, which the drafts missed; so
        # P(Y in X) = sum min(p, c) + (residual left on tail tokens that lands on a
        # draft), a lower bound within that residual mass of the rate.
        first_tail = self.info.get("first_tail_block")
        if first_tail is not None:
            in_tail = (self.block >= first_tail) & (self.block < np.iinfo(np.int64).max)
            if np.maximum(self.p - self.candidate, 0.0)[in_tail].sum() > RATE_TOLERANCE:
                return None  # not converged to that precision: enumerate or estimate instead
        return float(np.minimum(self.p, self.candidate).sum())


class OptimalIID(_LuceVerifier):
    """Reaches α*_iid: block priority + Luce choice of a candidate, then speculative sampling."""

    name = "optimal-iid"
    description = "optimal verifier for iid drafts (Luce choice in priority blocks + speculative sampling); reaches α*"
    default_sampler = "iid"
    samplers = ("iid",)

    def plan(self):
        return iid_plan(self.p, self.q, self.n)


#: Largest number of draft sets the exact (enumerated) optimal-wor plan handles.
MAX_WOR_SETS = 20_000


class OptimalWOR(_LuceVerifier):
    """Reaches α*_wor: the same design as ``optimal-iid`` for drafts without replacement.

    Full vocabulary for n <= 2 (the Luce law of a pair has a closed form); any n
    when the draft sets can be enumerated (at most ``MAX_WOR_SETS``).
    """

    name = "optimal-wor"
    description = "optimal verifier for wor drafts (Luce choice in priority blocks + speculative sampling); reaches α*"
    default_sampler = "wor"
    samplers = ("wor",)

    @classmethod
    def check_size(cls, q, n, sampler):
        from ..errors import SizeLimitError

        for row in np.atleast_2d(np.asarray(q)):
            m = int(np.count_nonzero(row > 0))
            k = min(n, m)
            if k >= 3 and math.comb(m, k) > MAX_WOR_SETS:
                raise SizeLimitError(
                    f"optimal-wor at n = {n} needs the {math.comb(m, k):,} draft sets enumerated at V={row.size} "
                    f"(limit {MAX_WOR_SETS:,}); at full vocabulary it is exact for n <= 2 only. Use optimal-iid "
                    "(iid drafts), otm, or rrsw"
                )

    def plan(self):
        from ..errors import SizeLimitError

        p, q, n, V = self.p, self.q, self.n, self.V
        k = self.num_drafts
        order, K, t, cuts = chain_targets(p, q, n, self.draft_sampler)
        if k <= 1:  # one draft (or a one-token support): speculative sampling on it
            c = q.copy()
            blocks = [order[q[order] > 0]]
            return blocks, np.ones(V), c, t, {"K": K, "blocks": 1, "iterations": 0, "residual": 0.0,
                                             "first_tail_block": None, "method": "single draft"}
        sets = math.comb(int(np.count_nonzero(q > 0)), k)
        if sets <= MAX_WOR_SETS:
            return self._enumerated(order, K, t, cuts, q, n)
        if k == 2:
            return wor_pair_plan(p, q, order, K, t, cuts)
        raise SizeLimitError(
            f"optimal-wor at n = {n} needs the {sets:,} draft sets enumerated at V={V} (limit {MAX_WOR_SETS:,}); "
            "at full vocabulary it is exact for n <= 2 only. Use optimal-iid (iid drafts), otm, or rrsw"
        )

    def _enumerated(self, order, K, t, cuts, q, n):
        law = self.draft_sampler.set_law(q, n)
        blocks, first_tail = priority_blocks(order, K, cuts, q)
        block_of = np.full(self.V, np.iinfo(np.int64).max, dtype=np.int64)
        for i, (tokens, _) in enumerate(blocks):
            block_of[tokens] = i
        return _solve_blocks(blocks, first_tail, self.V, K, t, "enumerated",
                             lambda tokens, end: solve_enumerated(law.members, law.prob, block_of, tokens, t, self.V))


class _PairBlock:
    r"""A priority block for pairs drawn without replacement (n = 2).

    With ``P({y, z}) = q_y q_z (1/(1 - q_y) + 1/(1 - q_z))`` and the partner of
    ``y`` winning only inside the block (later blocks always lose), the law of
    the Luce choice is

    .. math::

        c(y) = q_y\Big[\frac{L_1}{1-q_y} + L_2\Big] - \frac{q_y^2}{1-q_y}
             + q_y w_y \int_0^\infty e^{-w_y s}
               \Big[\frac{M_1(s)}{1-q_y} + M_2(s)\Big] ds,

    ``M_1 = sum_B q e^{-ws}``, ``M_2 = sum_B q/(1-q) e^{-ws}``, ``L_1``, ``L_2`` the
    same sums over later blocks. Since ``2 w int e^{-ws} M ds`` is the iid kernel
    at n = 2, the quadrature is shared.
    """

    def __init__(self, tokens, q, t, L1, L2, rest):
        self.later = L1
        self.tokens = tokens
        self.q = q[tokens]
        self.rest = rest[tokens]  # the draft mass of every other token, 1 - q (summed for a dominant token)
        self.r = self.q / self.rest
        self.base = self.q * (L1 / self.rest + L2) - self.q * self.r
        self.target = t[tokens]
        self.h = default_step(2)
        # A token with q > 1/2 has r = q / (1 - q) >> 1: its own pair would be added
        # inside M and subtracted in base, cancelling catastrophically. Its law is
        # computed from the sums over the other tokens of the block instead.
        dom = np.flatnonzero(self.q > 0.5)
        self.dom = int(dom[0]) if dom.size else None
        self.others = np.arange(self.q.size)
        if self.dom is not None:
            self.base[self.dom] = self.q[self.dom] * (L1 / self.rest[self.dom] + L2)
            self.others = np.delete(self.others, self.dom)
        # the sums over the others are kept divided by their value at s = 0, so that
        # tiny masses (1e-300 next to a dominant token) keep full precision
        self.Q1 = float(self.q[self.others].sum()) or 1.0
        self.Q2 = float(self.r[self.others].sum()) or 1.0

    def grid(self, w_lo, w_hi):
        lo = 1e-8 / w_hi
        hi = 60.0 / w_lo
        G = int(math.ceil(math.log(hi / lo) / self.h)) + 1
        return np.exp(math.log(lo) + self.h * np.arange(G))

    def sums(self, w, s):
        """``M_1 / Q_1``, ``M_2 / Q_2`` on grid ``s``: the sums over the block tokens other than
        the dominant one, divided by their values at s = 0 (in [0, 1])."""
        kM = _kernels()[0] or _block_M
        o = self.others
        return kM(self.q[o] / self.Q1, w[o], s, 0.0), kM(self.r[o] / self.Q2, w[o], s, 0.0)

    def with_dominant(self, wy, wd, idx):
        """The pair ``{y, d}`` in closed form: its mass ``q_y (q_d/(1-q_y) + r_d)`` times the
        share ``a = w_y/(w_y+w_d)`` of y, and the slope of that in ``log w_y``."""
        d = self.dom
        q, rest = self.q[idx], self.rest[idx]
        mass = q * self.q[d] / rest + (q / self.rest[d]) * self.q[d]  # q_y r_d, with q_y <= rest_d
        a = wy / (wy + wd)
        return mass * a, mass * a * (1.0 - a)

    def kernels(self, w, s, m1, m2):
        """``F_1 / Q_1``, ``F_2 / Q_2`` (``F = 2 w int e^{-ws} M ds``) and their slopes in ``log w``."""
        kF = _kernels()[1] or _block_F
        # int_0^{s_0} of M / M(0), which is 1 there (M = 0 without other tokens)
        left = s[0] * self.h / math.expm1(self.h) if self.others.size else 0.0
        return (*kF(w, s, m1, self.h, left, 2), *kF(w, s, m2, self.h, left, 2))

    def law(self, w, s, m1, m2, idx=None):
        """``c`` and ``dc/dlog w`` of the block tokens ``idx`` (default: all), given the scaled
        sums ``m1``, ``m2`` over the tokens other than the dominant one (see :meth:`sums`)."""
        if idx is None and self.dom is not None:
            c, dc = np.empty(self.q.size), np.empty(self.q.size)
            c[self.others], dc[self.others] = self.law(w, s, m1, m2, self.others)
            c[[self.dom]], dc[[self.dom]] = self.dominant_law(w[[self.dom]], s, m1, m2)
            return c, dc
        idx = self.others if idx is None else idx
        F1, d1, F2, d2 = self.kernels(w[idx], s, m1, m2)
        c, dc = self.combine(idx, F1, d1, F2, d2)
        if self.dom is not None:
            extra, slope = self.with_dominant(w[idx], w[self.dom], idx)
            c, dc = c + extra, dc + slope
        return c, dc

    def combine(self, idx, F1, d1, F2, d2):
        """``c = base + q/2 (F_1/(1-q) + F_2)`` and its slope, from the scaled kernels."""
        a1 = 0.5 * self.q[idx] * (self.Q1 / self.rest[idx])
        a2 = 0.5 * self.q[idx] * self.Q2
        return self.base[idx] + a1 * F1 + a2 * F2, a1 * d1 + a2 * d2

    def dominant_law(self, wd, s, m1, m2):
        """``c`` and ``dc/dlog w`` of the dominant token, given the scaled sums over the others."""
        return self.combine(np.array([self.dom]), *self.kernels(wd, s, m1, m2))


def _hermite_eval(xs, fs, dfs, x):
    """Cubic Hermite interpolant (values ``fs``, slopes ``dfs`` at uniform ``xs``) and its slope at ``x``."""
    step = xs[1] - xs[0]
    k = np.clip(((x - xs[0]) / step).astype(np.int64), 0, xs.size - 2)
    u = (x - xs[k]) / step
    f0, f1, d0, d1 = fs[k], fs[k + 1], dfs[k] * step, dfs[k + 1] * step
    h00, h10, h01, h11 = 2 * u**3 - 3 * u**2 + 1, u**3 - 2 * u**2 + u, -2 * u**3 + 3 * u**2, u**3 - u**2
    value = h00 * f0 + h10 * d0 + h01 * f1 + h11 * d1
    slope = ((6 * u**2 - 6 * u) * f0 + (3 * u**2 - 4 * u + 1) * d0 + (-6 * u**2 + 6 * u) * f1
             + (3 * u**2 - 2 * u) * d1) / step
    return value, slope


def _solve_pair_block(block: _PairBlock, *, tol=1e-11):
    """Luce weights with ``c = t`` on one pair block; returns ``(w, c, info)``.

    The fixed point is on the sums ``M_1``, ``M_2`` over the block's tokens other
    than a dominant one (q > 1/2), scaled to [0, 1]; the dominant token's weight is
    solved inside the map from those sums, then every other weight from a table of
    the full sums (as for iid).
    """
    if block.q.size == 1:
        # one token (at low temperature most blocks are): no choice to make, its law is
        # fixed. (Equal target ratios do not mean equal weights: without replacement the
        # pair law is not a product, so the Luce choice is not proportional to q.)
        w = np.ones(1)
        s_w = block.grid(1.0, 1.0)
        c, _ = block.law(w, s_w, *block.sums(w, s_w))
        return w, c, {"iterations": 0, "residual": 0.0}
    span = -math.log(WEIGHT_FLOOR)
    top = block.later > 0  # as for iid: anchor the largest weight when later drafts can win
    w_lo, w_hi = (WEIGHT_FLOOR, 1.0) if top else (1.0, 1.0 / WEIGHT_FLOOR)
    table_x = np.linspace(-span - 1.0, 1.0, 1600) if top else np.linspace(-1.0, span + 1.0, 1600)
    s = block.grid(w_lo, w_hi)
    o, d = block.others, block.dom

    def anchored(x):
        x = x - (x.max() if top else x.min())
        return np.clip(np.exp(x), w_lo, w_hi)

    def newton(x, value_and_slope, target, max_steps=40):
        # safeguarded per-token Newton in log w on c(x) = t
        lo = np.full(x.size, table_x[0] - 5.0)
        hi = np.full(x.size, table_x[-1] + 5.0)
        active = np.arange(x.size)
        for _ in range(max_steps):
            c, dc = value_and_slope(x[active], active)
            f = c - target[active]
            lo[active] = np.where(f < 0, x[active], lo[active])
            hi[active] = np.where(f > 0, x[active], hi[active])
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # huge steps are bisected below
                step = np.where(dc > 1e-300, -f / np.maximum(dc, 1e-300), 0.0)
            new = x[active] + step
            bad = (new < lo[active]) | (new > hi[active]) | ~np.isfinite(new)
            new = np.where(bad, 0.5 * (lo[active] + hi[active]), new)
            done = np.abs(f) <= 1e-15 * np.maximum(target[active], 1e-300)
            new = np.where(done, x[active], new)
            moved = np.abs(new - x[active])
            x[active] = new
            active = active[(moved > 1e-14) & ~done]
            if active.size == 0:
                break
        return x

    def weights_for(m, x0, exact):
        x = x0.copy()
        m1, m2 = m[: s.size], m[s.size:]  # scaled sums over the others
        if d is not None:  # the dominant token first, from the others' sums
            x[[d]] = newton(x[[d]], lambda xd, _: block.dominant_law(np.exp(xd), s, m1, m2), block.target[[d]])
        F1, d1, F2, d2 = block.kernels(np.exp(table_x), s, m1, m2)

        def from_table(xs, idx):
            f1, g1 = _hermite_eval(table_x, F1, d1, xs)
            f2, g2 = _hermite_eval(table_x, F2, d2, xs)
            c, dc = block.combine(o[idx], f1, g1, f2, g2)
            if d is not None:  # its pair with the dominant token, in closed form
                extra, slope = block.with_dominant(np.exp(xs), np.exp(x[d]), o[idx])
                c, dc = c + extra, dc + slope
            return c, dc

        xo = newton(x[o], from_table, block.target[o])
        if exact:
            def from_quadrature(xs, idx):
                w = np.exp(x)
                w[o[idx]] = np.exp(xs)
                return block.law(w, s, m1, m2, o[idx])

            xo = newton(xo, from_quadrature, block.target[o], max_steps=12)
        x[o] = xo
        return anchored(x)

    def others_sums(w):
        return np.concatenate(block.sums(w, s))

    state = {"x": np.log(anchored(np.log(block.target / block.q)))}

    def fixed_map(m, exact=False):
        w = weights_for(m, state["x"], exact)
        state["x"] = np.log(w)
        return others_sums(w)

    m0 = others_sums(np.exp(state["x"]))
    m, it1, _ = _anderson(fixed_map, m0, tol=1e-11, max_iter=200, clip=(0.0, 1.0))
    # tokens pinned at the weight floor keep the exact phase from going much below
    # 1e-11 here; alpha* is then met to ~1e-11 (small V is solved exactly by enumeration)
    m, it2, residual = _anderson(lambda x: fixed_map(x, exact=True), m, tol=tol, max_iter=10, clip=(0.0, 1.0))
    w = np.exp(state["x"])
    s_w = block.grid(w.min(), w.max())
    c, _ = block.law(w, s_w, *block.sums(w, s_w))
    return w, c, {"iterations": it1 + it2, "residual": residual}


def _rest_mass(q):
    """``sum_{j != y} q_j`` per token: ``1 - q`` except for a token with ``q > 1/2``,
    whose rest is summed (``1 - q`` would be all rounding error when q is near 1)."""
    rest = 1.0 - q
    for d in np.flatnonzero(q > 0.5):
        rest[d] = q[:d].sum() + q[d + 1:].sum()
    return rest


def wor_pair_plan(p, q, order, K, t, cuts):
    """Optimal wor verifier at n = 2, full vocabulary (see :class:`_PairBlock`)."""
    rest = _rest_mass(q)
    r = np.where(rest > 0.0, q / np.maximum(rest, 1e-300), 0.0)
    Lq = np.concatenate((np.cumsum(q[order][::-1])[::-1], [0.0]))  # mass from chain position k on
    Lr = np.concatenate((np.cumsum(r[order][::-1])[::-1], [0.0]))
    blocks, first_tail = priority_blocks(order, K, cuts, q)
    return _solve_blocks(blocks, first_tail, p.size, K, t, "pair formula",
                         lambda tokens, end: _solve_pair_block(_PairBlock(tokens, q, t, Lq[end], Lr[end], rest)))
