"""Compiled kernels of the nested-chord construction for drafts without replacement
(:mod:`~mdsd_cli.verifiers.optimal.chords`): the split of one segment of a priority block, and
the segment rule's choice probabilities over the drafted set.

Imported on first use (numba when enabled; plain Python with ``MDSD_DISABLE_NUMBA=1``).
"""

from __future__ import annotations

import numpy as np

from ..._jit import kernel as _jit
from ._candidate_kernels import _compensated_add

#: Relative tightness at or below which a segment is not split (its chord is the target).
FLAT = 1e-12
#: Gaps ``H - chord_H`` below this are rounding (the hit curve is accurate to ~1e-13): no split
#: there, so noise is never divided by noise (the law then misses ``t`` by at most about this).
GAP_FLOOR = 1e-13


@_jit
def _prefix2(x):
    """Prefix sums of ``x`` in double-double: ``hi[k] + lo[k] = sum(x[:k])`` to ~1e-32 relative, so
    that the mass of a segment far down a block, ``(hi[b] - hi[a]) + (lo[b] - lo[a])``, keeps its
    digits however small it is next to what lies above it."""
    m = x.shape[0]
    hi = np.zeros(m + 1)
    lo = np.zeros(m + 1)
    s, c = 0.0, 0.0
    for k in range(m):
        s, c = _compensated_add(s, c, x[k])
        hi[k + 1] = s
        lo[k + 1] = c
    return hi, lo


@_jit
def _mass(hi, lo, a, b):
    return (hi[b] - hi[a]) + (lo[b] - lo[a])


@_jit
def _split(T, H, Q, a, b):
    """``(rho, c)``: the largest relative tightness ``(T - chord_T) / (H - chord_H)`` over the
    boundaries strictly inside ``[a, b]`` and the boundary where it is reached (ties go to
    the one nearest the middle); ``(0, -1)`` if there is none. ``T``, ``H``, ``Q`` are the
    block's cumulative target, hit probability and draft mass at its boundaries."""
    dq = Q[b] - Q[a]
    best = 0.0
    at = -1
    if b - a <= 1 or dq <= 0.0:
        return best, at
    mid = 0.5 * (a + b)
    dT = T[b] - T[a]
    dH = H[b] - H[a]
    for x in range(a + 1, b):
        w = (Q[x] - Q[a]) / dq
        gH = (H[x] - H[a]) - w * dH
        if gH <= GAP_FLOOR:
            continue
        r = ((T[x] - T[a]) - w * dT) / gH
        if r > best * (1.0 + 1e-12):
            best, at = r, x
        elif r >= best * (1.0 - 1e-12) and at >= 0 and abs(x - mid) < abs(at - mid):
            at = x
            best = max(best, r)
    return best, at


@_jit
def _segment_rule(qS, inG, m0, base, slope):
    """Choice probabilities over the drafted set ``S`` (masses ``qS``; ``inG`` marks the
    drafts in the segment; ``m0`` the draft mass outside ``S``) are ``base + kappa * slope``:
    the first drafted token of the segment, corrected by ``kappa`` times the swap of that
    token with the last draft, averaged over the orders of ``S`` (a recursion over the
    ``2^n`` subsets of ``S``, by size).

    Every order's probability has the factor ``prod q_S``, which is left out (it cancels and
    underflows for tokens near the float64 floor); each size of subset is rescaled by its
    largest value, and the rescalings cancel too, so remaining masses near the floor do not
    overflow."""
    n = qS.shape[0]
    full = (1 << n) - 1
    N = 1 << n
    gmask = 0
    for i in range(n):
        if inG[i]:
            gmask |= 1 << i
    rem = np.empty(N)
    size = np.zeros(N, np.int64)
    for U in range(N):
        s = m0
        for i in range(n):
            if (U >> i) & 1:
                size[U] += 1
            else:
                s += qS[i]
        rem[U] = s
    by_size = np.argsort(size, kind="mergesort")
    alpha = np.zeros(N)
    aF = np.zeros((N, n))
    alpha[0] = 1.0
    last_scale = 1.0  # the rescaling of the largest size (cancels in a / PS, applied to b and c)
    k = 0
    while k < N:
        level = size[by_size[k]]
        j = k
        while j < N and size[by_size[j]] == level:
            U = by_size[j]
            au = alpha[U]
            if au != 0.0:
                for w in range(n):
                    if (U >> w) & 1:
                        continue
                    f = 1.0 / rem[U]
                    V = U | (1 << w)
                    alpha[V] += au * f
                    if inG[w] and (U & gmask) == 0:
                        aF[V, w] += au * f
                    for z in range(n):
                        aF[V, z] += aF[U, z] * f
            j += 1
        # rescale the next size by its largest entry
        top = 0.0
        j2 = j
        while j2 < N and size[by_size[j2]] == level + 1:
            top = max(top, alpha[by_size[j2]])
            j2 += 1
        if top > 0.0:
            for i in range(j, j2):
                V = by_size[i]
                alpha[V] /= top
                for z in range(n):
                    aF[V, z] /= top
            if level + 1 == n:
                last_scale = 1.0 / top
        k = j
    PS = alpha[full]
    for z in range(n):
        base[z] = 0.0
        slope[z] = 0.0
        if not inG[z]:
            continue
        a = aF[full, z]
        b = 0.0
        for g in range(n):
            if g != z and inG[g]:
                Ug = full ^ (1 << g)
                b += aF[Ug, z] / rem[Ug]
        c = 0.0
        Uz = full ^ (1 << z)
        if Uz & gmask:
            c = alpha[Uz] / rem[Uz]
        base[z] = a / PS
        slope[z] = (b - c) * last_scale / PS


@_jit
def _walk(nrho, nc, nl, nr, j, u):
    """The node whose segment the rule uses for block position ``j`` and uniform ``u``."""
    i = 0
    while nc[i] >= 0 and u < nrho[i]:
        i = nl[i] if j < nc[i] else nr[i]
    return i


@_jit
def _path_groups(na, nb, nrho, nc, nl, nr, Qh, Ql, above0, where, j, masks, weights, wkappa, klo, khi):
    """The levels of ``U`` along block position ``j``'s path, grouped into runs of equal
    membership of the drafts (block positions ``where``; -1 outside the block) in the
    segment: per run its bit mask, total weight, weight times ``kappa`` and the range of
    ``kappa``. Returns the number of runs."""
    runs = -1
    ceiling = 1.0
    i = 0
    last = -1
    while True:
        a, b = na[i], nb[i]
        rho = nrho[i] if nc[i] >= 0 else 0.0
        w = ceiling - rho
        if w > 0.0:
            mask = 0
            for k in range(where.shape[0]):
                if where[k] >= a and where[k] < b:
                    mask |= 1 << k
            kappa = (above0 + Qh[a]) / _mass(Qh, Ql, a, b)
            if mask != last:
                runs += 1
                masks[runs] = mask
                weights[runs] = 0.0
                wkappa[runs] = 0.0
                klo[runs] = kappa
                khi[runs] = kappa
                last = mask
            weights[runs] += w
            wkappa[runs] += w * kappa
            klo[runs] = min(klo[runs], kappa)
            khi[runs] = max(khi[runs], kappa)
        if nc[i] < 0:
            break
        ceiling = rho
        i = nl[i] if j < nc[i] else nr[i]
    return runs + 1


@_jit
def _tree_hull(T, H, Q, use_hull):
    """Every split of one block (boundaries ``0 .. m``): arrays ``(a, b, rho, c, left, right)``
    per node, node 0 the block; ``rho`` is capped by the parent's (the levels of ``U`` nest)
    and is 0 at leaves (``c = left = right = -1``). A split is found by a scan of its segment
    (:func:`_split`) or, down a long right spine, in ``O(log m)``:

    For a segment ``[a, b]`` the relative tightness at ``x`` is the slope between the points
    ``P_x = (K_x, U_x)``, ``K_x = (H_b - H_x) / (Q_b - Q_x)``, ``U_x = (T_b - T_x) / (Q_b - Q_x)``
    and ``P_a``: ``rho(x) = (U_a - U_x) / (K_a - K_x)``. ``K`` falls as ``x`` grows (``H`` is
    concave), so the largest slope is the tangent from ``P_a`` to the lower convex hull of the
    points of ``(a, b)``, built by adding ``x = b - 1, b - 2, ...`` in order of ``K``. The right
    half ``[c, b]`` of a split keeps the anchor ``b``: its hull is the same one with the points
    ``x <= c`` (the last ones added) taken off by rolling their insertions back. A left half
    ``[a, c]`` gets a hull of its own. Ties between equal slopes go to either point."""
    m = T.shape[0] - 1
    cap = 2 * m + 1
    na = np.empty(cap, np.int64)
    nb = np.empty(cap, np.int64)
    nrho = np.zeros(cap)
    nc = np.full(cap, -1, np.int64)
    nl = np.full(cap, -1, np.int64)
    nr = np.full(cap, -1, np.int64)
    ceil = np.empty(cap)
    na[0], nb[0], ceil[0] = 0, m, 1.0
    count = 1
    pending = np.empty(cap, np.int64)
    pending[0] = 0
    npend = 1
    K = np.empty(m + 1)
    U = np.empty(m + 1)
    hs = np.empty(m + 1, np.int64)  # hull vertices (positions x), K ascending
    log_x = np.empty(m + 1, np.int64)
    log_top = np.empty(m + 1, np.int64)
    log_slot = np.empty(m + 1, np.int64)
    log_val = np.empty(m + 1, np.int64)
    while npend > 0:
        npend -= 1
        i = pending[npend]
        a, b = na[i], nb[i]
        have_hull = False
        hull_ok = use_hull
        steps = 0
        top = 0
        L = 0
        # down the right spine of node i: plain scans first; a spine that keeps going right
        # gets a hull (anchored at b) after two steps, and every later split costs O(log m)
        while True:
            if not have_hull and hull_ok and steps >= 2 and b - a > 64:
                have_hull = True
                top = 0
                L = 0
                kmax = -np.inf
                for x in range(b - 1, a, -1):
                    v = Q[b] - Q[x]
                    if v <= 0.0:
                        continue
                    kx = (H[b] - H[x]) / v
                    if kx < kmax:  # H rises by rounding only here: the hull's order fails, scan instead
                        hull_ok = False
                        break
                    kmax = kx
                    K[x] = kx
                    U[x] = (T[b] - T[x]) / v
                    old_top = top
                    while top >= 2:
                        A = hs[top - 2]
                        B = hs[top - 1]
                        cross = (K[B] - K[A]) * (U[x] - U[A]) - (U[B] - U[A]) * (K[x] - K[A])
                        if cross <= 0.0:
                            top -= 1
                        else:
                            break
                    log_x[L] = x
                    log_top[L] = old_top
                    if top >= 1 and K[x] == K[hs[top - 1]] and U[x] >= U[hs[top - 1]]:
                        top = old_top  # directly above a vertex: never on the lower hull
                        log_slot[L] = -1
                        log_val[L] = 0
                    else:
                        log_slot[L] = top
                        log_val[L] = hs[top]
                        hs[top] = x
                        top += 1
                    L += 1
                if not hull_ok:
                    have_hull = False
            rho = 0.0
            c = -1
            if not have_hull:
                rho, c = _split(T, H, Q, a, b)
            elif top > 0 and b - a > 1 and Q[b] - Q[a] > 0.0:
                Ka = (H[b] - H[a]) / (Q[b] - Q[a])
                Ua = (T[b] - T[a]) / (Q[b] - Q[a])
                hi = top  # vertices with K below Ka (the others would divide by <= 0)
                lo_ = 0
                while lo_ < hi:
                    mid = (lo_ + hi) // 2
                    if K[hs[mid]] < Ka:
                        lo_ = mid + 1
                    else:
                        hi = mid
                t = lo_
                if t > 0:
                    lo_, hi = 0, t - 1
                    while lo_ < hi:  # the largest slope: unimodal along the lower hull
                        mid = (lo_ + hi) // 2
                        d0 = Ka - K[hs[mid]]
                        d1 = Ka - K[hs[mid + 1]]
                        g0 = (Ua - U[hs[mid]]) / d0 if d0 > 0.0 else -np.inf
                        g1 = (Ua - U[hs[mid + 1]]) / d1 if d1 > 0.0 else -np.inf
                        if g0 <= g1:
                            lo_ = mid + 1
                        else:
                            hi = mid
                    c = hs[lo_]
                    rho = (Ua - U[c]) / (Ka - K[c]) if Ka > K[c] else 0.0
                    w_c = (Q[c] - Q[a]) / (Q[b] - Q[a])
                    if (H[c] - H[a]) - w_c * (H[b] - H[a]) <= GAP_FLOOR:  # rounding: scan this one
                        rho, c = _split(T, H, Q, a, b)
            if c < 0 or rho <= FLAT:
                break
            nrho[i] = min(rho, ceil[i])
            nc[i] = c
            left = count
            right = count + 1
            count += 2
            na[left], nb[left], ceil[left] = a, c, nrho[i]
            na[right], nb[right], ceil[right] = c, b, nrho[i]
            nl[i], nr[i] = left, right
            pending[npend] = left
            npend += 1
            if have_hull:  # the right half keeps the hull: roll back the points x <= c
                while L > 0 and log_x[L - 1] <= c:
                    L -= 1
                    if log_slot[L] >= 0:
                        hs[log_slot[L]] = log_val[L]
                    top = log_top[L]
            i = right
            a = c
            steps += 1
    return na[:count], nb[:count], nrho[:count], nc[:count], nl[:count], nr[:count]


@_jit
def _mixture_law(na, nb, nrho, nc, nl, nr, H, Qh, Ql, q, out):
    """The law the tree's rule gives on the block's tokens (masses ``q``), into ``out``: a token's
    ratio is the sum, over the nodes on its path, of each node's weight times its chord's slope
    (summed down each path, so the steep slopes of segments of tiny mass never meet the others;
    segment masses from the double-double prefix sums ``Qh + Ql``)."""
    count = na.shape[0]
    stack = np.empty(count, np.int64)
    acc = np.zeros(count)
    ceil = np.ones(count)
    stack[0] = 0
    ns = 1
    while ns > 0:
        ns -= 1
        i = stack[ns]
        a, b = na[i], nb[i]
        rho = nrho[i] if nc[i] >= 0 else 0.0
        w = ceil[i] - rho
        dq = _mass(Qh, Ql, a, b)
        if w != 0.0 and dq > 0.0:
            acc[i] += w * (H[b] - H[a]) / dq
        if nc[i] >= 0:
            for child in (nl[i], nr[i]):
                acc[child] = acc[i]
                ceil[child] = rho
                stack[ns] = child
                ns += 1
        else:
            for k in range(a, b):
                out[k] = max(acc[i], 0.0) * q[k]
