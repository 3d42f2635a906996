"""Compiled kernels of the nested-chord construction for drafts without replacement
(:mod:`~mdsd_cli.verifiers.optimal.chords`): the split of one segment of a priority block, and
the segment rule's choice probabilities over the drafted set.

Imported on first use (numba when enabled; plain Python with ``MDSD_DISABLE_NUMBA=1``).
"""

from __future__ import annotations

import numpy as np

from ..._jit import kernel as _jit
from ._candidate_kernels import _compensated_add, _pair_chain, _wor_chain_along

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
def _block_sums(ts, qs, Hc, A, B):
    """Block ``[A, B)`` of the chain in one pass: the cumulative target ``T``, draft mass ``Q`` (plain
    sums, as ``numpy.cumsum``) and hit probability ``H`` at its boundaries, relative to its start, and
    the draft mass in double-double (:func:`_prefix2`)."""
    m = B - A
    T = np.empty(m + 1)
    Q = np.empty(m + 1)
    H = np.empty(m + 1)
    hi = np.empty(m + 1)
    lo = np.empty(m + 1)
    T[0] = 0.0
    Q[0] = 0.0
    H[0] = 0.0
    hi[0] = 0.0
    lo[0] = 0.0
    s, c = 0.0, 0.0
    tk, qk = 0.0, 0.0  # the running sums in registers (read back from the arrays, each waits on the store)
    for k in range(m):
        tk += ts[A + k]
        qk += qs[A + k]
        T[k + 1] = tk
        Q[k + 1] = qk
        H[k + 1] = Hc[A + k + 1] - Hc[A]
        s, c = _compensated_add(s, c, qs[A + k])
        hi[k + 1] = s
        lo[k + 1] = c
    return T, Q, H, hi, lo


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
def _ratio_at(T, H, Q, a, b, x):
    """The relative tightness at boundary ``x`` of ``[a, b]`` (``-1`` where the gap is rounding)."""
    dq = Q[b] - Q[a]
    w = (Q[x] - Q[a]) / dq
    gH = (H[x] - H[a]) - w * (H[b] - H[a])
    if gH <= GAP_FLOOR:
        return -1.0
    return ((T[x] - T[a]) - w * (T[b] - T[a])) / gH


@_jit
def _split_bounded(T, H, Q, a, b):
    """:func:`_split` by branch and bound: ``(rho, c)`` over the boundaries strictly inside ``[a, b]``.

    On a run of boundaries ``[l, r]`` the gaps ``N = T - chord_T`` and ``D = H - chord_H`` are concave
    in ``Q``, so ``N`` lies under its two end tangents (the slopes of the run's first and last
    tokens) and ``D`` over its chord, ``min(D_l, D_r)``: their ratio bounds the run's relative
    tightness, and a run whose bound is below the best found so far is never scanned. Runs of
    16 boundaries or fewer are scanned. Margins cover rounding: ``D`` is lowered by twice
    :data:`GAP_FLOOR` (the hit curve's precision), ``N`` raised by 2e-15 of the sums it is made of."""
    dq = Q[b] - Q[a]
    if b - a <= 1 or dq <= 0.0:
        return 0.0, -1
    dT = T[b] - T[a]
    dH = H[b] - H[a]
    sT = dT / dq
    best = 0.0
    at = -1
    stack_l = np.empty(128, np.int64)
    stack_r = np.empty(128, np.int64)
    stack_l[0], stack_r[0] = a + 1, b - 1
    ns = 1
    while ns > 0:
        ns -= 1
        lo, hi = stack_l[ns], stack_r[ns]
        if hi - lo <= 16:
            for x in range(lo, hi + 1):
                r = _ratio_at(T, H, Q, a, b, x)
                if r > best:
                    best, at = r, x
            continue
        wl = (Q[lo] - Q[a]) / dq
        wr = (Q[hi] - Q[a]) / dq
        Nl = (T[lo] - T[a]) - wl * dT
        Nr = (T[hi] - T[a]) - wr * dT
        Dl = (H[lo] - H[a]) - wl * dH
        Dr = (H[hi] - H[a]) - wr * dH
        d_low = min(Dl, Dr) - 2.0 * GAP_FLOOR
        bound = np.inf
        ql = Q[lo + 1] - Q[lo]
        qr = Q[hi] - Q[hi - 1]
        if d_low > 0.0 and ql > 0.0 and qr > 0.0:
            sl = (T[lo + 1] - T[lo]) / ql - sT  # the tangent slopes of N at the run's two ends
            sr = (T[hi] - T[hi - 1]) / qr - sT
            span = Q[hi] - Q[lo]
            if sl > sr:
                z = (Nr - Nl - sr * span) / (sl - sr)  # where the tangents cross, from Q[lo]
                z = min(max(z, 0.0), span)
                n_max = min(Nl + sl * z, Nr - sr * (span - z))
            else:  # not concave by rounding: a looser bound
                n_max = max(Nl, Nr) + max(abs(sl), abs(sr)) * span
            n_max += 2e-15 * (abs(T[a]) + abs(T[b]) + abs(T[lo]) + abs(T[hi]))  # the sums' rounding
            bound = n_max / d_low if n_max > 0.0 else 0.0
        if bound <= best * (1.0 - 1e-9) or bound <= 0.0:
            continue
        mid = (lo + hi) // 2
        r = _ratio_at(T, H, Q, a, b, mid)
        if r > best:
            best, at = r, mid
        if ns + 2 > stack_l.shape[0]:
            stack_l = np.concatenate((stack_l, np.empty(stack_l.shape[0], np.int64)))
            stack_r = np.concatenate((stack_r, np.empty(stack_r.shape[0], np.int64)))
        stack_l[ns], stack_r[ns] = lo, mid - 1
        stack_l[ns + 1], stack_r[ns + 1] = mid + 1, hi
        ns += 2
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
def _hull_build(T, H, Q, a, b, side, K, U, hs, log_x, log_top, log_slot, log_val):
    """A lower convex hull of the points of ``(a, b)`` for one anchor, built in insertion order
    (``side = 1``: anchored at ``b``, points ``x = b - 1, b - 2, ...``; ``side = -1``: anchored at
    ``a``, points ``x = a + 1, a + 2, ...``, coordinates negated). Returns ``(top, L)`` (hull size,
    log length), or ``(-1, 0)`` where rounding breaks the order of ``K`` (then scan instead)."""
    top = 0
    L = 0
    x = b - 1 if side > 0 else a + 1
    while a < x < b:
        if side > 0:
            v = Q[b] - Q[x]
            kx, ux = ((H[b] - H[x]) / v, (T[b] - T[x]) / v) if v > 0.0 else (0.0, 0.0)
        else:
            v = Q[x] - Q[a]
            kx, ux = (-(H[x] - H[a]) / v, -(T[x] - T[a]) / v) if v > 0.0 else (0.0, 0.0)
        if v > 0.0:
            K[x] = kx
            U[x] = ux
            old_top = top
            while top >= 1 and K[hs[top - 1]] > kx:  # H rose by rounding only there: that point goes
                top -= 1
            while top >= 2:
                A = hs[top - 2]
                B = hs[top - 1]
                if (K[B] - K[A]) * (U[x] - U[A]) - (U[B] - U[A]) * (K[x] - K[A]) <= 0.0:
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
        x -= side
    return top, L


@_jit
def _hull_rollback(c, side, hs, top, L, log_x, log_top, log_slot, log_val):
    """Take the points on ``c``'s far side (the last ones added) off the hull. Returns ``(top, L)``."""
    while L > 0 and side * (c - log_x[L - 1]) >= 0:
        L -= 1
        if log_slot[L] >= 0:
            hs[log_slot[L]] = log_val[L]
        top = log_top[L]
    return top, L


@_jit
def _tangent_value(K, U, hs, i, kq, uq):
    d = kq - K[hs[i]]
    return (uq - U[hs[i]]) / d if d > 0.0 else -np.inf


@_jit
def _hull_query(K, U, hs, top, kq, uq, hint):
    """``(rho, c, i)``: the largest slope from ``(kq, uq)`` to the hull's vertices left of it (the
    tangent; unimodal along the lower hull), reached at vertex ``i`` (``c = hs[i]``); ``(0, -1, -1)``
    if there is none. The search gallops from vertex ``hint`` (the last query's, down a spine the
    tangent moves little) and then bisects, so it costs ``O(log distance)``; it returns the first
    vertex whose next one is not higher, as a plain bisection of the whole hull would."""
    if top > 0 and K[hs[top - 1]] < kq:  # every vertex is left of the query (the usual case)
        count = top
    else:
        lo, hi = 0, top
        while lo < hi:
            mid = (lo + hi) // 2
            if K[hs[mid]] < kq:
                lo = mid + 1
            else:
                hi = mid
        count = lo
    if count == 0:
        return 0.0, -1, -1
    lo, hi = 0, count - 1
    h = min(max(hint, 0), hi)
    if h < hi and _tangent_value(K, U, hs, h, kq, uq) <= _tangent_value(K, U, hs, h + 1, kq, uq):
        lo = h + 1  # the tangent is right of h
        step = 1
        while h + step < hi:
            j = h + step
            if _tangent_value(K, U, hs, j, kq, uq) <= _tangent_value(K, U, hs, j + 1, kq, uq):
                lo = j + 1
                step *= 2
            else:
                hi = j
                break
    else:
        hi = h  # the tangent is at h or left of it
        step = 1
        while h - step >= lo:
            j = h - step
            if _tangent_value(K, U, hs, j, kq, uq) <= _tangent_value(K, U, hs, j + 1, kq, uq):
                lo = j + 1
                break
            hi = j
            step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _tangent_value(K, U, hs, mid, kq, uq) <= _tangent_value(K, U, hs, mid + 1, kq, uq):
            lo = mid + 1
        else:
            hi = mid
    c = hs[lo]
    return ((uq - U[c]) / (kq - K[c]) if kq > K[c] else 0.0), c, lo


@_jit
def _tree_hull(T, H, Q, use_hull):
    """Every split of one block (boundaries ``0 .. m``): arrays ``(a, b, rho, c, left, right)``
    per node, node 0 the block; ``rho`` is capped by the parent's (the levels of ``U`` nest)
    and is 0 at leaves (``c = left = right = -1``). A split is found by a scan of its segment
    (:func:`_split`) or, down a long spine, in ``O(log m)``:

    For a segment ``[a, b]`` the relative tightness at ``x`` is the slope between the points
    ``P_x = (K_x, U_x)``, ``K_x = (H_b - H_x) / (Q_b - Q_x)``, ``U_x = (T_b - T_x) / (Q_b - Q_x)``
    and ``P_a``: ``rho(x) = (U_a - U_x) / (K_a - K_x)``. ``K`` falls as ``x`` grows (``H`` is
    concave), so the largest slope is the tangent from ``P_a`` to the lower convex hull of the
    points of ``(a, b)``, built by adding ``x = b - 1, b - 2, ...`` in order of ``K``. The right
    half ``[c, b]`` of a split keeps the anchor ``b``: its hull is the same one with the points
    ``x <= c`` (the last ones added) taken off by rolling their insertions back. Anchored at ``a``
    instead (``K'_x = (H_x - H_a) / (Q_x - Q_a)``, ``U'_x`` likewise, negated so that the same
    lower hull and tangent serve), the left half ``[a, c]`` keeps its hull. Each spine follows the
    larger half; the other half starts a spine of its own, so a block costs the sizes of the
    spines' starts and of the turns where a spine changes anchor, plus ``O(log m)`` a split.
    Ties between equal slopes go to either point."""
    m = T.shape[0] - 1
    cap = 2 * m + 1
    na = np.empty(cap, np.int64)  # a node's entries are written when it is made (a tree has a few dozen of 2m + 1)
    nb = np.empty(cap, np.int64)
    nrho = np.empty(cap)
    nc = np.empty(cap, np.int64)
    nl = np.empty(cap, np.int64)
    nr = np.empty(cap, np.int64)
    ceil = np.empty(cap)
    na[0], nb[0], ceil[0] = 0, m, 1.0
    nrho[0], nc[0], nl[0], nr[0] = 0.0, -1, -1, -1
    count = 1
    pending = np.empty(cap, np.int64)
    pending[0] = 0
    npend = 1
    # one hull per anchor side: index 0 anchored at b (right spines), 1 anchored at a (left spines)
    K = np.empty((2, m + 1))
    U = np.empty((2, m + 1))
    hs = np.empty((2, m + 1), np.int64)
    log_x = np.empty((2, m + 1), np.int64)
    log_top = np.empty((2, m + 1), np.int64)
    log_slot = np.empty((2, m + 1), np.int64)
    log_val = np.empty((2, m + 1), np.int64)
    top = np.zeros(2, np.int64)
    L = np.zeros(2, np.int64)
    hint = np.zeros(2, np.int64)  # each hull's last tangent vertex
    while npend > 0:
        npend -= 1
        i = pending[npend]
        a, b = na[i], nb[i]
        anchor_b = -1  # the right hull's anchor (valid while b == anchor_b)
        anchor_a = -1  # the left hull's anchor (valid while a == anchor_a)
        hull_ok = use_hull
        last = 0  # the spine's last move: 1 right (a rose), -1 left (b fell)
        run = 0
        while True:
            rho = 0.0
            c = -1
            if hull_ok and b - a > 64 and run >= 2 and anchor_b != b and anchor_a != a:
                s = 0 if last > 0 else 1
                tp, ln = _hull_build(T, H, Q, a, b, last, K[s], U[s], hs[s], log_x[s], log_top[s], log_slot[s],
                                     log_val[s])
                if tp < 0:
                    hull_ok = False
                else:
                    top[s], L[s] = tp, ln
                    if last > 0:
                        anchor_b = b
                    else:
                        anchor_a = a
            s = 0 if anchor_b == b else (1 if anchor_a == a else -1)
            if s < 0 or b - a <= 1 or Q[b] - Q[a] <= 0.0:
                rho, c = _split_bounded(T, H, Q, a, b) if use_hull and b - a > 64 else _split(T, H, Q, a, b)
            else:
                kq = (H[b] - H[a]) / (Q[b] - Q[a])
                uq = (T[b] - T[a]) / (Q[b] - Q[a])
                if s == 1:
                    kq, uq = -kq, -uq
                rho, c, hint[s] = _hull_query(K[s], U[s], hs[s], top[s], kq, uq, hint[s])
                if c >= 0:
                    w_c = (Q[c] - Q[a]) / (Q[b] - Q[a])
                    if (H[c] - H[a]) - w_c * (H[b] - H[a]) <= GAP_FLOOR:  # rounding: scan this one
                        rho, c = _split_bounded(T, H, Q, a, b)
            if c < 0 or rho <= FLAT:
                break
            nrho[i] = min(rho, ceil[i])
            nc[i] = c
            left = count
            right = count + 1
            count += 2
            na[left], nb[left], ceil[left] = a, c, nrho[i]
            na[right], nb[right], ceil[right] = c, b, nrho[i]
            for child in (left, right):  # a leaf until it is split
                nrho[child], nc[child], nl[child], nr[child] = 0.0, -1, -1, -1
            nl[i], nr[i] = left, right
            if b - c >= c - a:  # go on along the larger half: the right one
                pending[npend] = left
                npend += 1
                if anchor_b == b:
                    top[0], L[0] = _hull_rollback(c, 1, hs[0], top[0], L[0], log_x[0], log_top[0], log_slot[0],
                                                  log_val[0])
                anchor_a = -1
                run = run + 1 if last > 0 else 1
                last = 1
                i = right
                a = c
            else:
                pending[npend] = right
                npend += 1
                if anchor_a == a:
                    top[1], L[1] = _hull_rollback(c, -1, hs[1], top[1], L[1], log_x[1], log_top[1], log_slot[1],
                                                  log_val[1])
                anchor_b = -1
                run = run + 1 if last < 0 else 1
                last = -1
                i = left
                b = c
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


# --- the same rule without the tree: concave majorants ---------------------------------------------
#
# The segment the tree's walk gives position j at level u is the edge over j of the concave majorant of
# the points (Q_k, T_k - u H_k) (docs/theory.md, "Nested chords without the tree"): one O(m) pass per step,
# nothing built at set-up.


@_jit
def _upper_hull(T, H, Q, u, st):
    """The vertices (boundary indices, increasing) of the concave majorant of ``(Q_k, T_k - u H_k)``,
    ``k = 0 .. m``, into ``st``; returns their number. A point on or under the line of its neighbours
    is not a vertex."""
    m = T.shape[0] - 1
    top = 0
    for k in range(m + 1):
        xk = Q[k]
        yk = T[k] - u * H[k]
        while top >= 2:
            i0 = st[top - 2]
            i1 = st[top - 1]
            y0 = T[i0] - u * H[i0]
            y1 = T[i1] - u * H[i1]
            if (y1 - y0) * (xk - Q[i0]) <= (yk - y0) * (Q[i1] - Q[i0]):
                top -= 1
            else:
                break
        st[top] = k
        top += 1
    return top


@_jit
def _bridge(T, H, Q, u, j, st):
    """``(a, b)``: the edge of the concave majorant of ``(Q_k, T_k - u H_k)`` over token ``j`` (the
    vertices ``a <= j < b`` next to it) - the segment of the nested partition at level ``u``."""
    return _edge_over(st, _upper_hull(T, H, Q, u, st), j, T.shape[0] - 1)


@_jit
def _edge_over(st, top, j, m):
    """The hull's edge over token ``j``: its vertices ``a <= j < b`` (``st[:top]``, increasing; 0 and ``m``
    if none lies on that side)."""
    a = 0
    b = m
    for s in range(top):
        if st[s] <= j:
            a = st[s]
        else:
            b = st[s]
            break
    return a, b


@_jit
def _bridge_along(ts, qs, Hc, A, B, u, j, st, sx, sy):
    """:func:`_bridge` on block ``[A, B)`` from the chain's arrays, the block's prefix sums taken as the hull
    goes (the same floats as :func:`_block_sums` gives, each stack entry keeping its point): one pick on a
    block without its tree writes no block arrays. Returns ``(a, b)`` relative to ``A``."""
    m = B - A
    h0 = Hc[A]
    top = 0
    tk, qk = 0.0, 0.0
    for k in range(m + 1):
        if k > 0:
            tk += ts[A + k - 1]
            qk += qs[A + k - 1]
        yk = tk - u * (Hc[A + k] - h0)
        while top >= 2:
            x0, y0 = sx[top - 2], sy[top - 2]
            if (sy[top - 1] - y0) * (qk - x0) <= (yk - y0) * (sx[top - 1] - x0):
                top -= 1
            else:
                break
        st[top] = k
        sx[top] = qk
        sy[top] = yk
        top += 1
    return _edge_over(st, top, j, m)


@_jit
def _mass_along(qs, A, a, b):
    """:func:`_mass` of the segment ``[a, b)`` of block ``[A, B)`` (relative positions) from the chain's ``q``:
    the double-double prefix sums of :func:`_block_sums` up to ``b``, carried in registers."""
    s, c = 0.0, 0.0
    sa, ca = 0.0, 0.0
    for k in range(b):
        if k == a:
            sa, ca = s, c
        s, c = _compensated_add(s, c, qs[A + k])
    return (s - sa) + (c - ca)


@_jit
def _chord_pick(ts, qs, Hc, q, pos, above, A, B, drafts, u, v, total, exact_kappa):
    """:meth:`~mdsd_cli.verifiers.optimal.chords.ChordPlan.pick` on block ``[A, B)`` of the chain by its bridge,
    in one call (``drafts``: distinct, increasing): the segment ``[a, b)`` (:func:`_bridge_along`, the block's
    sums taken as it goes), ``kappa`` (:func:`_mass_along`), the segment rule (:func:`_segment_rule`) and the draw from ``v``.
    Returns ``(token, a, b)``; ``token`` is -1 where the Python rule must decide with the segment (``kappa``
    past ``exact_kappa``: decimal arithmetic; drafts holding all but 1e-3 of the mass; a non-finite or
    negative rule). The sums over the drafts run in order (numpy's for fewer than eight)."""
    st = np.empty(B - A + 1, np.int64)
    sx, sy = np.empty(B - A + 1), np.empty(B - A + 1)
    n = drafts.shape[0]
    j = pos[drafts[0]]
    inside = 0.0
    for i in range(n):
        j = min(j, pos[drafts[i]])
        inside += q[drafts[i]]
    a, b = _bridge_along(ts, qs, Hc, A, B, u, j - A, st, sx, sy)
    kappa = above[a + A] / _mass_along(qs, A, a, b)
    a += A
    b += A
    if not total - inside >= 1e-3 * total:
        return -1, a, b
    inG = np.zeros(n, np.bool_)
    count = 0
    qS = np.empty(n)
    for i in range(n):
        x = pos[drafts[i]]
        inG[i] = a <= x < b
        count += inG[i]
        qS[i] = q[drafts[i]]
    base = np.zeros(n)
    slope = np.zeros(n)
    if count == 1:
        for i in range(n):
            if inG[i]:
                base[i] = 1.0
    else:
        if kappa * n > exact_kappa:
            return -1, a, b
        _segment_rule(qS, inG, total - inside, base, slope)
    w = np.empty(n)
    low = 0.0
    for i in range(n):
        if not (np.isfinite(base[i]) and np.isfinite(slope[i])):
            return -1, a, b
        w[i] = base[i] + kappa * slope[i]
        low = min(low, w[i])
    if low < -1e-9:
        return -1, a, b
    mass = 0.0
    for i in range(n):
        w[i] = max(w[i], 0.0)
        mass += w[i]
    x = v * mass
    k = 0
    acc = 0.0
    for i in range(n):  # searchsorted(cumsum(w), x, side="right")
        acc += w[i]
        if acc <= x:
            k = i + 1
    return drafts[min(k, n - 1)], a, b


@_jit
def _chord_pick_row(ts, qs, Hc, q, pos, above, cuts, treed, steps, tree_after, drafts, u, v, total, exact_kappa):
    """:meth:`~mdsd_cli.verifiers.optimal.chords.ChordPlan.pick` for one tuple (distinct, increasing) in one call:
    the drafts' first position ``j`` and its block ``b`` (binary search over ``cuts``), a draft alone in that block
    (it wins), else, where the block has no tree of splits (``treed``) and has seen fewer than ``tree_after`` steps
    (``steps``, counted here), :func:`_chord_pick`. Returns ``(token, b, j, a, c)``: ``a = -2`` for a lone draft,
    ``a = -3`` where the block's tree decides (the caller's segment), else :func:`_chord_pick`'s segment ``[a, c)``
    with ``token`` -1 where the Python rule must decide."""
    j, b, alone = _first_block(pos, cuts, drafts)
    if alone >= 0:
        return drafts[alone], b, j, -2, -2
    if treed[b] or steps[b] + 1 > tree_after:
        return -1, b, j, -3, -3
    steps[b] += 1
    token, a, c = _chord_pick(ts, qs, Hc, q, pos, above, cuts[b], cuts[b + 1], drafts, u, v, total, exact_kappa)
    return token, b, j, a, c


@_jit
def _first_block(pos, cuts, drafts):
    """``(j, b, alone)``: the drafts' first chain position, its block (``searchsorted(cuts, j, "right") - 1``),
    and the index of the draft if it is the only one in that block (it wins outright: an earlier block always
    wins), else -1."""
    n = drafts.shape[0]
    j = pos[drafts[0]]
    k = 0
    for i in range(1, n):
        if pos[drafts[i]] < j:
            j = pos[drafts[i]]
            k = i
    lo, hi = 0, cuts.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if cuts[mid] <= j:
            lo = mid + 1
        else:
            hi = mid
    b = lo - 1
    inside = 0
    for i in range(n):
        if pos[drafts[i]] < cuts[b + 1]:
            inside += 1
    return j, b, (k if inside == 1 else -1)


@_jit
def _majorant_laws(ts, qs, Hc, cuts, law, err, cap):
    """The law of the majorant rule on every block of two or more tokens: over ``U`` uniform the
    chord interpolants of ``H`` at the vertices of the concave majorant of ``T - U H`` average to
    ``G_0 - G_1``, the majorants of ``T`` and of ``T - H`` (the derivative in ``U`` of the majorant
    at a point is minus the interpolant there). ``law[x]`` per chain position, ``err[i]`` a bound on
    the largest ``|law - ts|`` of block ``i`` (0 for one-token blocks, which are not touched).

    Where ``T`` is concave and under ``H`` up to rounding, the majorants are not needed: with
    ``s`` the slopes ``t/q`` and ``S`` their suffix maxima (non-increasing), ``T`` lies under the
    concave ``integral of S``, so ``0 <= G_0 - T <= sum (S - s) q``, and ``G_1`` lies between the
    chord of its ends (0 and ``T - H`` at the block's end, 0 up to rounding at a tight cut) and
    ``max(T - H)``; twice the two bound ``|law - t|``. A block where that bound is at most ``cap``
    gets ``law = t`` and the bound; any other block the two majorants (every block where ``cap`` is
    negative)."""
    _majorant_into(ts, qs, Hc, cuts, law, err, cap, True)


@_jit
def _majorant_into(ts, qs, Hc, cuts, law, err, cap, fill):
    """:func:`_majorant_laws`; with ``fill`` False the blocks that get ``law = t`` are left unwritten (the fused
    set-up takes their law from ``ts`` itself). The hulls' stacks are allocated for the first block that needs
    them."""
    V = ts.shape[0]
    T = np.empty(V + 1)
    Q = np.empty(V + 1)
    Y = np.empty(V + 1)
    st0 = np.empty(0, np.int64)
    st1 = np.empty(0, np.int64)
    for i in range(cuts.shape[0] - 1):
        A = cuts[i]
        m = cuts[i + 1] - A
        err[i] = 0.0
        if m < 2:
            continue
        if cap >= 0.0:  # the check first, on the prefix sums in registers (stored below only if it fails)
            excess = 0.0
            tk = 0.0
            y = 0.0
            for k in range(1, m + 1):
                tk += ts[A + k - 1]
                y = tk - (Hc[A + k] - Hc[A])
                excess = max(excess, y)
            above = 0.0  # sum of (S - s) q: how far T may lie under its concave majorant
            top = 0.0
            for k in range(m - 1, -1, -1):
                t, q = ts[A + k], qs[A + k]
                if q > 0.0:
                    top = max(top, t / q)
                    above += max(top * q - t, 0.0)
                elif t != 0.0:  # mass on an undrafted token: T jumps
                    above = np.inf
                    break
            bound = 2.0 * (above + max(excess, -y))  # y = Y[m]
            if bound <= cap:
                if fill:
                    for k in range(m):
                        law[A + k] = ts[A + k]
                err[i] = bound
                continue
        T[0] = 0.0
        Q[0] = 0.0
        Y[0] = 0.0
        tk, qk = 0.0, 0.0  # the prefix sums, carried in registers
        for k in range(1, m + 1):
            tk += ts[A + k - 1]
            qk += qs[A + k - 1]
            T[k] = tk
            Q[k] = qk
            Y[k] = tk - (Hc[A + k] - Hc[A])
        if st0.shape[0] == 0:
            st0 = np.empty(V + 1, np.int64)
            st1 = np.empty(V + 1, np.int64)
        st0[0] = 0
        st1[0] = 0
        top0 = 1
        top1 = 1
        for k in range(1, m + 1):
            # both majorants, point by point (written out: a call per point costs more than the test)
            while top0 >= 2:
                i0 = st0[top0 - 2]
                i1 = st0[top0 - 1]
                if (T[i1] - T[i0]) * (Q[k] - Q[i0]) <= (T[k] - T[i0]) * (Q[i1] - Q[i0]):
                    top0 -= 1
                else:
                    break
            st0[top0] = k
            top0 += 1
            while top1 >= 2:
                i0 = st1[top1 - 2]
                i1 = st1[top1 - 1]
                if (Y[i1] - Y[i0]) * (Q[k] - Q[i0]) <= (Y[k] - Y[i0]) * (Q[i1] - Q[i0]):
                    top1 -= 1
                else:
                    break
            st1[top1] = k
            top1 += 1
        worst = 0.0
        s0 = 0
        s1 = 0
        g0_prev = 0.0
        g1_prev = 0.0
        for k in range(1, m + 1):
            while st0[s0 + 1] < k:
                s0 += 1
            while st1[s1 + 1] < k:
                s1 += 1
            i0, i1 = st0[s0], st0[s0 + 1]
            g0 = T[i1]  # at a vertex (or over no draft mass: tokens with q = 0)
            if k < i1 and Q[i1] > Q[i0]:
                g0 = T[i0] + (T[i1] - T[i0]) * ((Q[k] - Q[i0]) / (Q[i1] - Q[i0]))
            j0, j1 = st1[s1], st1[s1 + 1]
            g1 = Y[j1]
            if k < j1 and Q[j1] > Q[j0]:
                g1 = Y[j0] + (Y[j1] - Y[j0]) * ((Q[k] - Q[j0]) / (Q[j1] - Q[j0]))
            c = (g0 - g0_prev) - (g1 - g1_prev)
            law[A + k - 1] = c
            worst = max(worst, abs(c - ts[A + k - 1]))
            g0_prev = g0
            g1_prev = g1
        err[i] = worst


@_jit
def _bridge_path(T, H, Q, j, na, nb, nrho, nc, nl, nr):
    """Position ``j``'s path through the nested partition, by bisection on ``U`` over :func:`_bridge`
    (``O(m)`` a bridge, ~60 a level): the arrays of a tree (as :func:`_tree_hull`'s) holding that path
    only, each node's other child a leaf. For the exact choice probabilities where a block's tree is
    not trusted. Each edge is clipped to the segment above it (where rounding decides whether points
    collinear with an edge are vertices, a lower level could otherwise come out wider), so every
    level shrinks the segment and the path has at most ``m`` levels (``2m + 1`` nodes). Returns the
    number of nodes."""
    m = T.shape[0] - 1
    st = np.empty(m + 1, np.int64)
    na[0], nb[0] = 0, m
    nl[0], nr[0] = -1, -1
    count = 1
    i = 0
    hi = 1.0
    a, b = 0, m
    while True:
        lo_a, lo_b = _bridge(T, H, Q, 0.0, j, st)
        lo_a, lo_b = max(lo_a, a), min(lo_b, b)
        if lo_a == a and lo_b == b:  # nothing finer below: a leaf
            nc[i] = -1
            nrho[i] = 0.0
            break
        lo = 0.0
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            ma, mb = _bridge(T, H, Q, mid, j, st)
            ma, mb = max(ma, a), min(mb, b)
            if ma == a and mb == b:
                hi = mid
            else:
                lo = mid
                lo_a, lo_b = ma, mb
        right = lo_a > a  # the right part goes on: split at its left end (else the left part, at its right end)
        c = lo_a if right else lo_b
        nrho[i] = hi
        nc[i] = c
        nl[i], nr[i] = count, count + 1
        na[count], nb[count] = a, c
        na[count + 1], nb[count + 1] = c, b
        for leaf in (count, count + 1):
            nc[leaf] = -1
            nrho[leaf] = 0.0
            nl[leaf] = -1
            nr[leaf] = -1
        i = count + 1 if right else count
        count += 2
        if right:
            a = lo_a
        else:
            b = lo_b
        # where both ends moved at one level, the next node splits again at the same level (weight 0)
    return count


@_jit
def _plan_arrays(q, order, t, cuts, H, cap, pos, qs, above, ts, law):
    """What :class:`~mdsd_cli.verifiers.optimal.chords.ChordPlan` keeps, in a few passes: ``pos`` (the
    chain position of each token), ``qs`` and ``ts`` (q and t along the chain), ``above`` (draft mass
    above each position) and ``law`` (by token: ``t``, or the rule's own law on a block whose
    majorant law misses ``t`` by more than ``cap``, :func:`_majorant_laws`; a one-token block's law
    is its hit mass). Returns the number of such blocks."""
    V = order.shape[0]
    for k in range(V):
        y = order[k]
        pos[y] = k
        qs[k] = q[y]
        ts[k] = t[y]
    return _plan_along(order, cuts, H, cap, pos, qs, above, ts, law)


@_jit
def _plan_along(order, cuts, H, cap, pos, qs, above, ts, law):
    """:func:`_plan_arrays` after ``pos``, ``qs`` and ``ts`` are filled (the chain's set-up has ``q`` and ``t``
    along the chain already)."""
    V = order.shape[0]
    above[0] = 0.0
    run = 0.0
    for k in range(V):
        run += qs[k]
        above[k + 1] = run
    chain_law, bad, steered = _checked_blocks(ts, qs, H, cuts, cap)
    for b in range(cuts.shape[0] - 1):
        for k in range(cuts[b], cuts[b + 1]):
            law[order[k]] = max(chain_law[k], 0.0) if bad[b] else ts[k]
    return steered


@_jit
def _checked_blocks(ts, qs, H, cuts, cap):
    """Every block's law against ``t`` (:func:`_majorant_into`; a one-token block's law is its hit mass):
    ``(chain_law, bad, steered)``, ``chain_law`` along the chain and read only on the blocks ``bad`` marks (their
    rule misses ``t`` by more than ``cap``; ``steered`` of them); the others keep ``t``."""
    nb = cuts.shape[0] - 1
    chain_law = np.empty(ts.shape[0])
    err = np.empty(nb)
    _majorant_into(ts, qs, H, cuts, chain_law, err, cap, False)
    bad = np.empty(nb, np.bool_)
    steered = 0
    for b in range(nb):
        a, e = cuts[b], cuts[b + 1]
        if e - a == 1:
            chain_law[a] = H[a + 1] - H[a] if qs[a] > 0.0 else 0.0
            err[b] = abs(chain_law[a] - ts[a])
        bad[b] = err[b] > cap
        if bad[b]:
            steered += 1
    return chain_law, bad, steered


@_jit
def _wor_chord_setup(p, q, n_eff, m, h, unit, offsets, d, tight, cap):
    """``optimal-wor``'s whole set-up for two or more drafts without replacement in one call: the chain,
    hit chain and candidate law (:func:`~._candidate_kernels._wor_chain_along`, ``q`` and ``t`` along the chain
    kept for the chords; a pair's by :func:`~._candidate_kernels._pair_chain`, which returns ``K = -1`` where it
    declines), then the block of every token and what the nested chords keep in one scatter a block
    (:func:`_scatter_plan`: what :func:`~._candidate_kernels._block_index` and :func:`_plan_arrays` give).
    Returns ``(K, order, t, cuts, H, block, count, first_tail, pos, qs, above, ts, law, steered)``."""
    V = p.shape[0]
    order = np.empty(V, dtype=np.int64)
    t = np.empty(V)
    cuts = np.empty(V + 2, dtype=np.int64)
    if n_eff == 2:  # a pair's hit chain in closed form (K = -1 where it declines: the caller's quadrature)
        H = np.empty(V + 1)
        K, ncut = _pair_chain(p, q, tight, order, H, t, cuts)
        if K < 0:
            none = np.empty(0, dtype=np.int64)
            return K, order, t, none, H, none, 0, -1, none, t, H, t, t, 0
        qs, ts = np.empty(V), np.empty(V)
        above = np.empty(V + 1)
        above[0] = 0.0
        run = 0.0
        for k in range(V):
            y = order[k]
            qs[k] = q[y]
            ts[k] = t[y]
            run += qs[k]
            above[k + 1] = run
    else:  # the chain, with q and t along it and the mass above each position kept for the chords' arrays
        K, ncut, H, qs, ts, above = _wor_chain_along(p, q, n_eff, m, h, unit, offsets, d, tight, order, cuts)
    cuts = cuts[:ncut].copy()
    pos = np.empty(V, dtype=np.int64)
    law = np.empty(V)
    block = np.empty(V, dtype=np.int64)
    steered, count, first_tail = _scatter_plan(order, cuts, H, cap, K, qs, ts, t, pos, law, block)
    return K, order, t, cuts, H, block, count, first_tail, pos, qs, above, ts, law, steered


@_jit
def _scatter_plan(order, cuts, H, cap, K, qs, ts, t, pos, law, block):
    """What :func:`_plan_along` and :func:`~._candidate_kernels._block_index` give, after ``qs``, ``ts`` (and the
    mass above each position) along the chain: the blocks' laws checked (:func:`_checked_blocks`), then one
    scatter a block that writes every token's ``t``, chain position, law and block. Returns ``(steered blocks, blocks holding draft mass, first tail block or -1)``."""
    chain_law, bad, steered = _checked_blocks(ts, qs, H, cuts, cap)
    count = 0
    first_tail = -1
    none = np.iinfo(np.int64).max
    for b in range(cuts.shape[0] - 1):
        a, e = cuts[b], cuts[b + 1]
        found = False
        for k in range(a, e):
            y = order[k]
            t[y] = ts[k]
            pos[y] = k
            law[y] = max(chain_law[k], 0.0) if bad[b] else ts[k]
            if qs[k] > 0.0:
                block[y] = count
                found = True
            else:
                block[y] = none
        if found:
            if first_tail < 0 and a >= K:
                first_tail = count
            count += 1
    return steered, count, first_tail


@_jit
def _block_tree(ts, qs, Hc, A, B, tolerance):
    """Block ``[A, B)``'s sums (:func:`_block_sums`) and tree of splits in one call: the tree by hulls, its law
    (:func:`_mixture_law`) against ``t`` along the chain, and, where it misses by more than ``tolerance``
    (rounding steered a split), the tree by scans if that one misses by less. Returns
    ``(T, Q, H, Qh, Ql, tree, err)``, ``err`` the largest ``|law - t|`` of the tree kept."""
    T, Q, H, Qh, Ql = _block_sums(ts, qs, Hc, A, B)
    m = B - A
    tree = _tree_hull(T, H, Q, True)
    law = np.empty(m)
    _mixture_law(tree[0], tree[1], tree[2], tree[3], tree[4], tree[5], H, Qh, Ql, qs[A:B], law)
    err = _largest_miss(law, ts, A)
    if err > tolerance:
        scanned = _tree_hull(T, H, Q, False)
        _mixture_law(scanned[0], scanned[1], scanned[2], scanned[3], scanned[4], scanned[5], H, Qh, Ql, qs[A:B], law)
        err2 = _largest_miss(law, ts, A)
        if err2 < err:
            tree, err = scanned, err2
    return T, Q, H, Qh, Ql, tree, err


@_jit
def _largest_miss(law, ts, A):
    """``max |law - ts[A:]|`` as numpy gives it: NaN if any difference is NaN."""
    err = 0.0
    for k in range(law.shape[0]):
        d = abs(law[k] - ts[A + k])
        if d != d:
            return d
        err = max(err, d)
    return err


@_jit
def _path_choice_row(na, nb, nrho, nc, nl, nr, Qh, Ql, above0, where, j, qS, rest, exact_kappa, out):
    """The choice probabilities of one tuple along block position ``j``'s path in one call: the runs of levels
    with the same drafts in the segment (:func:`_path_groups`), the segment rule on each (:func:`_segment_rule`,
    affine in ``kappa``: checked at both ends of the run's range), summed with the runs' weights into ``out``.
    Returns False where the Python rule must decide (a ``kappa`` past ``exact_kappa``: decimal arithmetic; a
    non-finite rule); ``out`` is then undefined."""
    n = where.shape[0]
    masks = np.zeros(n + 1, np.int64)
    weights, wkappa, klo, khi = np.zeros(n + 1), np.zeros(n + 1), np.zeros(n + 1), np.zeros(n + 1)
    runs = _path_groups(na, nb, nrho, nc, nl, nr, Qh, Ql, above0, where, j, masks, weights, wkappa, klo, khi)
    inG = np.zeros(n, np.bool_)
    base, slope = np.zeros(n), np.zeros(n)
    for k in range(n):
        out[k] = 0.0
    for r in range(runs):
        count = 0
        for k in range(n):
            inG[k] = (masks[r] >> k) & 1
            count += inG[k]
            base[k] = 0.0
            slope[k] = 0.0
        if count == 1:
            for k in range(n):
                if inG[k]:
                    base[k] = 1.0
        else:
            if max(khi[r], wkappa[r]) * n > exact_kappa:
                return False
            _segment_rule(qS, inG, rest, base, slope)
        for k in range(n):
            if not (np.isfinite(base[k]) and np.isfinite(slope[k])):
                return False
            if base[k] + klo[r] * slope[k] < -1e-9 or base[k] + khi[r] * slope[k] < -1e-9:
                return False  # never seen: the Python rule raises
            out[k] += weights[r] * base[k] + wkappa[r] * slope[k]
    for k in range(n):
        out[k] = max(out[k], 0.0)
    return True
