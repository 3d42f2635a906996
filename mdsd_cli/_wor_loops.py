"""The compiled loops of :mod:`mdsd_cli._wor_kernel` (numba when enabled; plain Python with
``MDSD_DISABLE_NUMBA=1``): the hit chain's sweep on the doubling grid, its exponentials by doubling,
and a pair's hit chain in closed form. Imported on first use, so that ``mdsd --help`` never pays for
numba."""

from __future__ import annotations

import math

import numpy as np

from ._jit import kernel


@kernel
def _fill(a, t, m, G, S, C):  # pragma: no cover - compiled
    """``S[j] = 1 - e^{-a t_j}`` and ``C[j] = e^{-a t_j}`` for ``j < G``: the first ``m`` points directly
    (``expm1`` below ln 2, to relative precision), then by doubling the time, ``C' = C^2``, kept
    accurate by squaring whichever of the two is below 1/2: ``S' = S (2 - S)`` while ``S < 1/2`` (its
    relative error grows by a few ulp a step; ``C = 1 - S`` is then above 1/2), ``C' = C^2`` after it
    (the relative error doubles, but ``C`` falls doubly exponentially: its absolute error stays below
    an ulp). Values below 1e-300 are set to 0 (no denormal arithmetic); below 1e-290, ``1 - e^{-a t}``
    is ``a t`` itself (doubling a denormal would keep its few bits)."""
    first = min(m, G)
    for i in range(first):
        y = a * t[i]
        if y < 0.6931471805599453:
            s = -math.expm1(-y)
            S[i] = s
            C[i] = 1.0 - s
        else:
            c = math.exp(-y)
            if c < 1e-300:
                c = 0.0
            C[i] = c
            S[i] = 1.0 - c
    for j in range(m, G):
        sp = S[j - m]
        if sp < 1e-290:  # a denormal seed keeps few bits: take the product itself (1 - e^{-y} = y here)
            S[j] = a * t[j]
            C[j] = 1.0
        elif sp < 0.5:
            sn = sp * (2.0 - sp)
            S[j] = sn
            C[j] = 1.0 - sn
        else:
            cp = C[j - m]
            cn = cp * cp
            if cn < 1e-300:
                cn = 0.0
            C[j] = cn
            S[j] = 1.0 - cn


@kernel
def _wor_hit_chain_loops(qs, n_eff, t, m, h, t_lo, d):  # pragma: no cover - compiled
    # Down the chain (tokens V-1 .. 0 join B): every grid point's pmf of N_B(t) below n_eff and
    # P[N_B(t) < n_eff], with the token's e^{-q t} by doubling (_fill, m exponentials a token). The
    # weight e^{-W_k t} of the prefix is carried down as well, divided by the token's e^{-q t} at each
    # step (recomputed every 64 drafted tokens), on the points with W_k t <= 50 only (beyond, the terms are
    # below e^{-50}; a point entering that range gets its own exponential).
    V = qs.shape[0]
    G = t.shape[0]
    W = np.empty(V + 1)
    W[0] = 0.0
    for i in range(V):
        W[i + 1] = W[i] + qs[i]
    pmf = np.zeros((n_eff, G))
    for j in range(G):
        pmf[0, j] = 1.0
    less = np.ones(G)
    S = np.empty(G)
    C = np.empty(G)
    tmp = np.empty(G)
    E = np.zeros(G)
    H = np.empty(V + 1)
    H[V] = 1.0
    count = 0
    M = d.shape[0]
    top = n_eff - 1
    G2 = 0  # E[j] = e^{-W t_j} for j < G2, W the mass of the current prefix
    since = 0  # drafted tokens since E was last computed directly
    for k in range(V - 1, -1, -1):
        qk = qs[k]
        Wk = W[k]
        if qk > 0.0:
            count += 1
            _fill(qk, t, m, G, S, C)
            # rows indexed in place, the row below through a buffer: loops the compiler vectorises
            for j in range(G):
                less[j] = less[j] - S[j] * pmf[top, j]
            for r in range(top, 0, -1):
                for j in range(G):
                    tmp[j] = pmf[r - 1, j] * S[j]
                for j in range(G):
                    pmf[r, j] = pmf[r, j] * C[j] + tmp[j]
            for j in range(G):
                pmf[0, j] = pmf[0, j] * C[j]
            since += 1
            if since >= 64:  # recomputed every 64 drafted tokens, whatever zeros lie between them
                G2 = 0
                since = 0
            else:
                for j in range(G2):
                    E[j] = E[j] / C[j]
        if Wk <= 0.0:
            H[k] = 0.0
            continue
        if G2 == 0:
            n2 = G
            while n2 > 0 and Wk * t[n2 - 1] > 50.0:
                n2 -= 1
            for j in range(n2):
                E[j] = math.exp(-Wk * t[j])
            G2 = n2
        else:
            while G2 < G and Wk * t[G2] <= 50.0:
                E[G2] = math.exp(-Wk * t[G2])
                G2 += 1
        if qk == 0.0:
            H[k] = H[k + 1]
        elif count < n_eff:
            H[k] = 1.0
        else:
            acc = 0.0
            for j in range(G2):
                lj = less[j]
                if lj > 0.0:
                    acc += t[j] * E[j] * lj
            x0 = Wk * t_lo
            tail = d[M - 1]
            for i in range(M - 2, -1, -1):
                tail = d[i] - x0 * tail
            v = Wk * (h * acc + t_lo * tail)
            H[k] = min(max(v, 0.0), 1.0)
    return H


@kernel
def _pair_loops(qs, H):  # pragma: no cover - compiled
    """:func:`~mdsd_cli._wor_kernel.pair_hit_chain` in two passes (the same sums in the same order); False
    where a dominant token's ``1 - q`` is below 1e-100."""
    V = qs.shape[0]
    S = np.empty(V + 1)
    S[V] = 0.0
    for k in range(V - 1, -1, -1):
        S[k] = S[k + 1] + qs[k]
    r = np.empty(V)
    above = 0.0
    for k in range(V):
        rest = 1.0 - qs[k]
        if qs[k] > 0.5:
            rest = above + S[k + 1]
            if rest < 1e-100:
                return False
        r[k] = qs[k] / rest
        above += qs[k]
    R = np.empty(V + 1)  # suffix sums of r
    R[V] = 0.0
    for k in range(V - 1, -1, -1):
        R[k] = R[k + 1] + r[k]
    W = 0.0
    for k in range(V):
        H[k] = min(W * (1.0 + R[k]), 1.0)
        W += qs[k]
    H[V] = 1.0
    return True
