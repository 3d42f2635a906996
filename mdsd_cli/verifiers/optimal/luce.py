"""Luce choice of the candidate: the optimal ``wor`` verifier's selection rule.

Inside the first priority block the drafts hit, each draft gets an exponential key
``E / w_x`` and the smallest key wins. The weights ``w`` are solved so that the
chosen draft's law is the candidate law ``t`` of :mod:`~mdsd_cli.verifiers.optimal.candidate`:

* exactly, by Newton on the enumerated law of the draft set, for any sampler
  when the draft sets can be listed (:func:`solve_enumerated`);
* at full vocabulary for pairs drawn without replacement (n = 2), where the
  Luce law has a closed form in two sums over the block, evaluated by quadrature
  on a log-time grid and solved as a fixed point on those sums
  (:class:`_PairBlock`, :func:`wor_pair_plan`).

Losslessness never depends on convergence: the speculative step uses the exact
law of the final weights.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np

from ..._jit import compiled
from ..._wor_kernel import default_step
from ..base import PreparedVerifier, drafted_mass
from .candidate import priority_blocks

#: ``exact_rate`` is reported when the rate is known to within this (else None).
RATE_TOLERANCE = 1e-9
#: Weights span at most 1/WEIGHT_FLOOR within a block (anchored at the largest
#: or the smallest).
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


def _anderson(fixed_map, x0, *, depth=6, tol=1e-13, max_iter=300, clip=None):
    """Safeguarded Anderson-accelerated fixed point ``x = fixed_map(x)``.

    Returns ``(x, iterations, residual)``. Extrapolated points are clipped to
    ``clip = (lo, hi)``; when the residual grows the history is dropped and a
    plain step is taken.
    """
    x = x0
    X, R = [], []
    best, best_x = math.inf, x0
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
        if res < best:
            best, best_x = res, gx
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
    # not converged: the map's own rounding noise (its inner Newton solves) can keep the residual
    # above tol and make the extrapolation jump; hand back the best point seen, not the last
    return best_x, max_iter, best


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


class LuceVerifier(PreparedVerifier):
    """Shared machinery: priority blocks, Luce choice of a candidate, speculative sampling."""

    def plan(self):  # -> (blocks, or the block index of every token; weights, candidate law, target, info)
        raise NotImplementedError

    def setup(self):
        t0 = time.perf_counter()
        blocks, w, c, self.target, self.info = self.plan()
        self.setup_seconds = time.perf_counter() - t0
        if w is not None:  # None: no Luce weights in this plan (all ones, built if asked for)
            self.weights = w
        self.candidate = c
        if isinstance(blocks, np.ndarray):  # already the block index of every token
            self.block = blocks
        else:
            self.block = np.full(self.V, np.iinfo(np.int64).max, dtype=np.int64)
            for i, tokens in enumerate(blocks):
                self.block[tokens] = i

    @functools.cached_property
    def weights(self) -> np.ndarray:
        """The Luce weights of a plan that has none (ones)."""
        return np.ones(self.V)

    # the acceptance and the residual are built on first use: a tree verifier sets up many per-node
    # verifiers for their candidate law and choice alone
    @functools.cached_property
    def accept(self) -> np.ndarray:
        """``min(1, p / c)`` per token (0 where the candidate law ``c`` is)."""
        c = self.candidate
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(c > 0, np.minimum(1.0, self.p / c), 0.0)

    @functools.cached_property
    def residual(self) -> np.ndarray:
        """``(p - c)_+`` normalised (``p`` if it is empty)."""
        left = np.maximum(self.p - np.minimum(self.p, self.candidate), 0.0)
        return left / left.sum() if left.sum() > 0 else self.p.copy()

    @functools.cached_property
    def residual_cdf(self) -> np.ndarray:
        """The residual's cumulative sums (once: a step then costs ``O(n + log V)``)."""
        return np.cumsum(self.residual)

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

    def closed_moves(self, split):
        """``min(p, c)`` when :meth:`exact_rate` is exact (drafts without replacement never repeat, so
        the count split is that at count 1); no closed position split."""
        if split == "position" or self.exact_rate() is None:
            return None
        m = np.minimum(self.p, self.candidate)
        if split == "token":
            return m[None, :]
        out = np.zeros((self.num_drafts, self.V))
        out[0] = m
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
    if residual >= tol:  # not converged: the weights of the best sums seen, not of the last map
        fixed_map(m, exact=True)
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
