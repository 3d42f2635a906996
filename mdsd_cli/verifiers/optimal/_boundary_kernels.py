"""Compiled kernels of the boundary-mark construction for pairs without replacement
(:mod:`~mdsd_cli.verifiers.optimal.boundary`): the isotonic ``b`` and the left curtain of the
first drafts onto point masses, one priority block at a time, plus the exact check.

Imported on first use (numba when enabled; plain Python with ``MDSD_DISABLE_NUMBA=1``).
"""

from __future__ import annotations

import numpy as np

from ..._jit import kernel as _jit


@_jit
def _isotonic(lo, hi, w, b):
    """Weighted L1 isotonic regression onto the intervals ``[lo_j, hi_j]`` (slope trick,
    a max-heap of breakpoints; the smallest optimal solution), written into ``b``."""
    m = lo.shape[0]
    hv = np.empty(2 * m + 2)  # heap values (max-heap): at most two pushes per token
    hw = np.empty(2 * m + 2)
    size = 0
    tops = np.empty(m)
    for j in range(m):
        if w[j] > 0:
            # push (lo_j, w_j)
            k = size
            size += 1
            while k > 0 and hv[(k - 1) // 2] < lo[j]:
                hv[k], hw[k] = hv[(k - 1) // 2], hw[(k - 1) // 2]
                k = (k - 1) // 2
            hv[k], hw[k] = lo[j], w[j]
            rem = w[j]
            if hv[0] > hi[j]:
                while rem > 0 and size > 0 and hv[0] > hi[j]:
                    if hw[0] > rem:
                        hw[0] -= rem
                        rem = 0.0
                    else:
                        rem -= hw[0]
                        # pop the top
                        size -= 1
                        x, xw = hv[size], hw[size]
                        k = 0
                        while True:
                            c = 2 * k + 1
                            if c >= size:
                                break
                            if c + 1 < size and hv[c + 1] > hv[c]:
                                c += 1
                            if hv[c] <= x:
                                break
                            hv[k], hw[k] = hv[c], hw[c]
                            k = c
                        if size > 0:
                            hv[k], hw[k] = x, xw
                # push (hi_j, w_j - rem)
                k = size
                size += 1
                while k > 0 and hv[(k - 1) // 2] < hi[j]:
                    hv[k], hw[k] = hv[(k - 1) // 2], hw[(k - 1) // 2]
                    k = (k - 1) // 2
                hv[k], hw[k] = hi[j], w[j] - rem
        tops[j] = hv[0] if size > 0 else -np.inf
    nxt = np.inf
    for j in range(m - 1, -1, -1):
        b[j] = min(nxt, tops[j])
        nxt = b[j]


@_jit
def _integral(s, C, IC, v, m):
    """``int_0^s v``, ``v`` the step function ``v_i`` on ``[C_i, C_{i+1})``."""
    k = np.searchsorted(C, s, side="right") - 1
    if k < 0:
        k = 0
    if k > m:
        k = m
    return IC[k] + v[k] * (s - C[k])


@_jit
def _stack_integral(y, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m):
    """``int v`` over the top ``y`` of the free mass on the stack; also the piece and position
    of the lower end."""
    if ns == 0 or y <= 0.0:
        return 0.0
    S = st_cm[ns - 1]
    c = S - y
    if c < 0.0:
        c = 0.0
    p = np.searchsorted(st_cm[:ns], c, side="right")
    if p >= ns:
        return 0.0
    base = st_cm[p - 1] if p > 0 else 0.0
    s_low = min(st_lo[p] + (c - base), st_hi[p])
    return (st_ci[ns - 1] - st_ci[p]) + (st_ih[p] - _integral(s_low, C, IC, v, m))


@_jit
def _fa(x, a, r, top, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m):
    """Window = top ``r - x`` of the stack plus ``[top, top + x]``: its integral minus ``a r``."""
    up = _integral(top + x, C, IC, v, m) - _integral(top, C, IC, v, m)
    return up + _stack_integral(r - x, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m) - a * r


@_jit
def _fb(d, a, r, top, C, IC, v, m):
    """Window = ``[top + d, top + d + r]``: its integral minus ``a r``."""
    return _integral(top + d + r, C, IC, v, m) - _integral(top + d, C, IC, v, m) - a * r


@_jit
def _narrow(x, f, mid, lo, hi, flo, fhi, klo, khi):
    """One step of a bisection over breakpoints: the value ``f`` at ``x`` (breakpoint ``mid``)
    replaces the low end of the bracket ``[lo, hi]`` (values ``flo <= 0 <= fhi``) when ``f <= 0``,
    else the high end; the breakpoint range ``[klo, khi]`` shrinks to match. Returns the new
    ``(lo, hi, flo, fhi, klo, khi)``."""
    if f <= 0.0:
        return x, hi, f, fhi, mid + 1, khi
    return lo, x, flo, f, klo, mid - 1


@_jit
def _bisect_window(off, lo_d, hi_d, glo, ghi, a, r, top, C, IC, v, m):
    """Narrow the bracket ``[lo_d, hi_d]`` of the window ``[top + d, top + d + r]`` (``glo <= 0 <= ghi``:
    :func:`_fb` at its ends) by bisection over the ``C_k`` that the point ``top + d + off`` crosses
    (``off = 0``: the window's lower end; ``off = r``: its upper end). Returns the new
    ``(lo_d, hi_d, glo, ghi)``."""
    kl = np.searchsorted(C, top + lo_d + off, side="right")
    kh = np.searchsorted(C, top + hi_d + off, side="left") - 1
    while kl <= kh:
        mid = (kl + kh) // 2
        dm = min(max(C[mid] - top - off, lo_d), hi_d)
        gm = _fb(dm, a, r, top, C, IC, v, m)
        lo_d, hi_d, glo, ghi, kl, kh = _narrow(dm, gm, mid, lo_d, hi_d, glo, ghi, kl, kh)
    return lo_d, hi_d, glo, ghi


@_jit
def _curtain_points(a, r, C, IC, v, m, order, ptr, plo, phi, slack):
    """Left curtain of the atoms ``(a_j, r_j)`` (in the order ``order``, increasing ``a``)
    onto the uniform measure of ``[0, C[m + 1]]`` pushed by ``v``: each atom takes a window
    contiguous in the free mass, with mean value ``a_j``. Windows are written as pieces
    ``plo[ptr[j]:ptr[j + 1]]``, ``phi[...]`` (``ptr`` indexed by atom). Returns the number of
    pieces, or -1 if some atom finds no window of the required shape."""
    n = a.shape[0]
    RB = C[m + 1]
    st_lo = np.empty(n + 1)
    st_hi = np.empty(n + 1)
    st_cm = np.empty(n + 1)
    st_ci = np.empty(n + 1)
    st_ih = np.empty(n + 1)  # int_0^{st_hi} v
    ns = 0
    top = 0.0
    npc = 0
    start = np.empty(n, np.int64)
    count = np.empty(n, np.int64)
    tplo = np.empty(3 * n + 3)
    tphi = np.empty(3 * n + 3)
    for kk in range(n):
        j = order[kk]
        aj, rj = a[j], r[j]
        start[j] = npc
        if kk == n - 1:  # the last atom takes what is left (its mean is checked after)
            for k in range(ns):
                tplo[npc], tphi[npc] = st_lo[k], st_hi[k]
                npc += 1
            ns = 0
            if RB > top:
                tplo[npc], tphi[npc] = top, RB
                npc += 1
                top = RB
            count[j] = npc - start[j]
            continue
        S = st_cm[ns - 1] if ns > 0 else 0.0
        xmax = min(rj, RB - top)
        fmax = _fa(xmax, aj, rj, top, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m)
        tol = 1e-12 * abs(aj * rj) + slack * IC[m + 1] + 1e-300  # rounding (the check decides)
        if fmax >= -tol or xmax < rj:
            if fmax < -tol:
                return -1
            fmax = max(fmax, 0.0)
            xmin = max(0.0, rj - S)
            flo = _fa(xmin, aj, rj, top, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m)
            if flo > 0.0:
                if flo > tol:
                    return -2
                flo = 0.0
            lo_x, hi_x, fhi = xmin, xmax, fmax
            i_top = _integral(top, C, IC, v, m)
            # 1. the upper end crosses the C_k above top
            kl = np.searchsorted(C, top + lo_x, side="right")
            kh = np.searchsorted(C, top + hi_x, side="left") - 1
            while kl <= kh:
                mid = (kl + kh) // 2
                xm = C[mid] - top
                if xm > lo_x and xm < hi_x:
                    fm = (IC[mid] - i_top) + _stack_integral(rj - xm, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC,
                                                             v, m) - aj * rj
                else:
                    xm = min(max(xm, lo_x), hi_x)
                    fm = _fa(xm, aj, rj, top, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m)
                lo_x, hi_x, flo, fhi, kl, kh = _narrow(xm, fm, mid, lo_x, hi_x, flo, fhi, kl, kh)
            # 2. the lower end crosses stack piece boundaries (the upper end now stays in
            # segment ku, so its integral is linear)
            ku = np.searchsorted(C, top + 0.5 * (lo_x + hi_x), side="right") - 1
            ku = min(max(ku, 0), m)
            if ns > 0:
                c1, c2 = S - rj + lo_x, S - rj + hi_x
                pl = np.searchsorted(st_cm[:ns], c1, side="right")
                ph = np.searchsorted(st_cm[:ns], c2, side="left") - 1
                while pl <= ph:
                    mid = (pl + ph) // 2
                    xm = st_cm[mid] - S + rj
                    if xm > lo_x and xm < hi_x:
                        fm = (IC[ku] + v[ku] * (top + xm - C[ku]) - i_top) + (st_ci[ns - 1] - st_ci[mid]) - aj * rj
                    else:
                        xm = min(max(xm, lo_x), hi_x)
                        fm = _fa(xm, aj, rj, top, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m)
                    lo_x, hi_x, flo, fhi, pl, ph = _narrow(xm, fm, mid, lo_x, hi_x, flo, fhi, pl, ph)
                # 3. ... and the C_k inside that piece
                c1 = max(S - rj + lo_x, 0.0)
                p = np.searchsorted(st_cm[:ns], c1, side="right")
                if p < ns:
                    base = st_cm[p - 1] if p > 0 else 0.0
                    s1 = st_lo[p] + (c1 - base)
                    s2 = st_lo[p] + (S - rj + hi_x - base)
                    kl = np.searchsorted(C, s1, side="right")
                    kh = np.searchsorted(C, s2, side="left") - 1
                    i_hi = st_ih[p]
                    while kl <= kh:
                        mid = (kl + kh) // 2
                        xm = C[mid] - st_lo[p] + base - S + rj
                        if xm > lo_x and xm < hi_x:
                            fm = ((IC[ku] + v[ku] * (top + xm - C[ku]) - i_top) + (st_ci[ns - 1] - st_ci[p])
                                  + (i_hi - IC[mid]) - aj * rj)
                        else:
                            xm = min(max(xm, lo_x), hi_x)
                            fm = _fa(xm, aj, rj, top, ns, st_lo, st_hi, st_cm, st_ci, st_ih, C, IC, v, m)
                        lo_x, hi_x, flo, fhi, kl, kh = _narrow(xm, fm, mid, lo_x, hi_x, flo, fhi, kl, kh)
            x = lo_x
            if fhi > flo:
                x = lo_x + (hi_x - lo_x) * (-flo / (fhi - flo))
                x = min(max(x, lo_x), hi_x)
            # the window: top r - x of the stack, then [top, top + x]
            y = rj - x
            if ns > 0 and y > 0.0:
                c = max(S - y, 0.0)
                p = np.searchsorted(st_cm[:ns], c, side="right")
                if p < ns:
                    base = st_cm[p - 1] if p > 0 else 0.0
                    s_low = min(st_lo[p] + (c - base), st_hi[p])
                    if st_hi[p] > s_low:
                        tplo[npc], tphi[npc] = s_low, st_hi[p]
                        npc += 1
                    for q in range(p + 1, ns):
                        tplo[npc], tphi[npc] = st_lo[q], st_hi[q]
                        npc += 1
                    if s_low > st_lo[p]:
                        st_hi[p] = s_low
                        prev_cm = st_cm[p - 1] if p > 0 else 0.0
                        prev_ci = st_ci[p - 1] if p > 0 else 0.0
                        st_cm[p] = prev_cm + (s_low - st_lo[p])
                        i_low = _integral(s_low, C, IC, v, m)
                        st_ci[p] = prev_ci + (i_low - _integral(st_lo[p], C, IC, v, m))
                        st_ih[p] = i_low
                        ns = p + 1
                    else:
                        ns = p
            if x > 0.0:
                tplo[npc], tphi[npc] = top, top + x
                npc += 1
                top = top + x
        else:
            # the window lies wholly above top: [top + d, top + d + r]
            dmax = RB - top - rj
            glo, ghi = fmax, _fb(dmax, aj, rj, top, C, IC, v, m)
            if ghi < -tol:
                return -3
            ghi = max(ghi, 0.0)
            # the lower end crosses C_k, then the upper end
            lo_d, hi_d, glo, ghi = _bisect_window(0.0, 0.0, dmax, glo, ghi, aj, rj, top, C, IC, v, m)
            lo_d, hi_d, glo, ghi = _bisect_window(rj, lo_d, hi_d, glo, ghi, aj, rj, top, C, IC, v, m)
            d = lo_d
            if ghi > glo:
                d = lo_d + (hi_d - lo_d) * (-glo / (ghi - glo))
                d = min(max(d, lo_d), hi_d)
            if d > 0.0:
                st_lo[ns], st_hi[ns] = top, top + d
                prev_cm = st_cm[ns - 1] if ns > 0 else 0.0
                prev_ci = st_ci[ns - 1] if ns > 0 else 0.0
                st_cm[ns] = prev_cm + d
                i_d = _integral(top + d, C, IC, v, m)
                st_ci[ns] = prev_ci + (i_d - _integral(top, C, IC, v, m))
                st_ih[ns] = i_d
                ns += 1
            tplo[npc], tphi[npc] = top + d, top + d + rj
            npc += 1
            top = top + d + rj
        count[j] = npc - start[j]
    # pieces grouped by atom index
    ptr[0] = 0
    for j in range(n):
        ptr[j + 1] = ptr[j] + count[j]
    for j in range(n):
        for k in range(count[j]):
            plo[ptr[j] + k] = tplo[start[j] + k]
            phi[ptr[j] + k] = tphi[start[j] + k]
    # uncovered free mass is reported through the check (as a deficit of lengths)
    return npc


@_jit
def _block(r, q, t, Lq, Lr, b, ptr, plo, phi, implied, slack):
    """The boundary-mark construction of one block (tokens bottom-first). Fills ``b``, the
    pieces and ``implied`` (the candidate law the rule gives, from the pieces themselves);
    returns ``(pieces, sum |implied - t|, Q_B * |R_B - covered|)`` (the last: how far the
    windows are from tiling ``[0, R_B]``); ``(-1, inf, inf)`` when the curtain finds no
    window or windows overlap."""
    m = r.shape[0]
    v = np.empty(m + 1)
    v[0] = 0.0
    for j in range(m):
        v[j + 1] = v[j] + q[j]
    Dp = np.empty(m)
    lo = np.empty(m)
    hi = np.empty(m)
    RB = 0.0
    for j in range(m):
        RB += r[j]
        Dp[j] = t[j] + r[j] * q[j] - r[j] * Lq - q[j] * Lr
        lo[j] = (Dp[j] - r[j] * v[j + 1]) / q[j]
        hi[j] = (Dp[j] - r[j] * v[j]) / q[j]
    _isotonic(lo, hi, q, b)
    for j in range(m):
        b[j] = min(max(b[j], 0.0), RB)
    a = np.empty(m)
    for j in range(m):
        a[j] = (Dp[j] - q[j] * b[j]) / r[j]
    # the tight cuts hold to rounding, so the atoms' total mean misses the targets' by a
    # rounding error: move it onto the atoms in proportion to their room inside [0, v_m]
    gap = 0.0
    prev = 0.0
    for j in range(m):
        gap += r[j] * a[j] - (b[j] - prev) * v[j]
        prev = b[j]
    gap -= (RB - prev) * v[m]
    room = 0.0
    for j in range(m):
        a[j] = min(max(a[j], 0.0), v[m])
        room += r[j] * (a[j] if gap > 0 else v[m] - a[j])
    if room > 0.0:
        for j in range(m):
            a[j] -= gap * ((a[j] if gap > 0 else v[m] - a[j]) / room)
    C = np.empty(m + 2)
    C[0] = 0.0
    for j in range(m):
        C[j + 1] = b[j]
    C[m + 1] = RB
    IC = np.empty(m + 2)
    IC[0] = 0.0
    for i in range(m + 1):
        IC[i + 1] = IC[i] + v[i] * (C[i + 1] - C[i])
    order = np.argsort(a, kind="mergesort")
    npc = _curtain_points(a, r, C, IC, v, m, order, ptr, plo, phi, slack)
    if npc < 0:
        return npc, np.inf, np.inf
    # the check, from the pieces themselves: each token's window normalised to a
    # probability, its mean value and the marks' r-mass per segment, summed segment by segment
    QB = v[m]
    err = 0.0
    covered = 0.0
    mean = np.empty(m)
    seg = np.zeros(m + 1)  # r-mass of first-draft marks in segment i
    for j in range(m):
        total = 0.0
        for k in range(ptr[j], ptr[j + 1]):
            if phi[k] < plo[k]:
                return -1, np.inf, np.inf
            total += phi[k] - plo[k]
        if total <= 0.0:
            return -1, np.inf, np.inf
        covered += total
        density = r[j] / total
        integral = 0.0
        for k in range(ptr[j], ptr[j + 1]):
            lo_s, hi_s = plo[k], phi[k]
            i = np.searchsorted(C, lo_s, side="right") - 1
            if i < 0:
                i = 0
            s = lo_s
            while s < hi_s and i <= m:
                e = min(hi_s, C[i + 1]) if i < m else hi_s
                if e > s:
                    integral += v[i] * (e - s)
                    seg[i] += density * (e - s)
                    s = e
                i += 1
        mean[j] = integral / total
    G = 0.0  # marks below b_j = in segments 0..j
    for j in range(m):
        G += seg[j]
        implied[j] = r[j] * (Lq + mean[j]) + q[j] * (Lr + G) - r[j] * q[j]
        err += abs(implied[j] - t[j])
    return npc, err, QB * abs(RB - covered)


@_jit
def _first_wins(ptr, plo, phi, y, bz):
    """``P(first draft y beats second draft z)`` for pairs in one fast block: the share of
    y's window at or above ``b_z`` (``y``: local index; ``bz``: ``b`` at z)."""
    M = y.shape[0]
    out = np.empty(M)
    for k in range(M):
        total = 0.0
        above = 0.0
        for i in range(ptr[y[k]], ptr[y[k] + 1]):
            lo, hi = plo[i], phi[i]
            total += hi - lo
            if hi > bz[k]:
                above += hi - max(lo, bz[k])
        out[k] = above / total if total > 0 else 0.0
    return out
