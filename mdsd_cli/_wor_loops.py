"""The compiled loops of :mod:`mdsd_cli._wor_kernel` (numba when enabled; plain Python with
``MDSD_DISABLE_NUMBA=1``): the hit chain's sweep on the doubling grid, its exponentials by doubling,
and a pair's hit chain in closed form. Imported on first use, so that ``mdsd --help`` never pays for
numba."""

from __future__ import annotations

import math

import numpy as np

from ._jit import kernel
from ._wor_kernel import T_LO, T_MAX


@kernel
def _seed(a, t, i):  # pragma: no cover - compiled
    """``(1 - e^{-a t_i}, e^{-a t_i})`` directly: ``expm1`` below ln 2 (relative precision), ``exp``
    above it (values below 1e-300 set to 0)."""
    y = a * t[i]
    if y < 0.6931471805599453:
        s = -math.expm1(-y)
        return s, 1.0 - s
    c = math.exp(-y)
    if c < 1e-300:
        c = 0.0
    return 1.0 - c, c


@kernel
def _double(a, tj, s, c):  # pragma: no cover - compiled
    """``(1 - e^{-a t_j}, e^{-a t_j})`` from ``(s, c)`` at ``t_j / 2``: ``s (2 - s)`` while ``s < 1/2``,
    ``c^2`` after it (see :func:`_fill`); ``a t_j`` itself from a seed below 1e-290."""
    if s < 1e-290:  # a denormal seed keeps few bits: take the product itself (1 - e^{-y} = y here)
        return a * tj, 1.0
    if s < 0.5:
        sn = s * (2.0 - s)
        return sn, 1.0 - sn
    cn = c * c
    if cn < 1e-300:
        cn = 0.0
    return 1.0 - cn, cn


@kernel(inline=True)
def _fill(a, t, m, G, S, C):  # pragma: no cover - compiled
    """``S[j] = 1 - e^{-a t_j}`` and ``C[j] = e^{-a t_j}`` for ``j < G``: the first ``m`` points directly
    (``expm1`` below ln 2, to relative precision), then by doubling the time, ``C' = C^2``, kept
    accurate by squaring whichever of the two is below 1/2: ``S' = S (2 - S)`` while ``S < 1/2`` (its
    relative error grows by a few ulp a step; ``C = 1 - S`` is then above 1/2), ``C' = C^2`` after it
    (the relative error doubles, but ``C`` falls doubly exponentially: its absolute error stays below
    an ulp). Values below 1e-300 are set to 0 (no denormal arithmetic); below 1e-290, ``1 - e^{-a t}``
    is ``a t`` itself (doubling a denormal would keep its few bits). With ``m = 3`` (n <= 5) the three
    chains of doublings run side by side in registers (~1.5x the loop through memory)."""
    first = min(m, G)
    for i in range(first):
        S[i], C[i] = _seed(a, t, i)
    if m == 3 and G >= 3:
        s0, c0, s1, c1, s2, c2 = S[0], C[0], S[1], C[1], S[2], C[2]
        j = 3
        while j + 2 < G:
            s0, c0 = _double(a, t[j], s0, c0)
            s1, c1 = _double(a, t[j + 1], s1, c1)
            s2, c2 = _double(a, t[j + 2], s2, c2)
            S[j], C[j], S[j + 1], C[j + 1], S[j + 2], C[j + 2] = s0, c0, s1, c1, s2, c2
            j += 3
        first = j  # the last one or two points below
    for j in range(max(first, m), G):
        S[j], C[j] = _double(a, t[j], S[j - m], C[j - m])


@kernel(vector=True, inline=True)
def _join4(S, C, p0, p1, p2, p3, less, E, top, G2, G):  # pragma: no cover - compiled
    """One token joins ``B`` at n_eff = 3 (``top = 2``) or 4 (``top = 3``): the pmf's rows ``p0 .. p3``
    and ``P[N_B < n_eff]`` on the whole grid, and the prefix weight ``E`` divided by the token's
    ``e^{-q t}`` on the first ``G2`` points (row 3 is carried at n_eff = 3 but not read). One loop over the
    grid the compiler vectorises (numpy's error model: the divisors are positive there, ``q t <= W t <=
    50``); the same operations as the rows one by one, so the same floats."""
    for j in range(G):
        s, c = S[j], C[j]
        a0, a1, a2, a3 = p0[j], p1[j], p2[j], p3[j]
        less[j] = less[j] - s * (a3 if top == 3 else a2)
        p3[j] = a3 * c + a2 * s
        p2[j] = a2 * c + a1 * s
        p1[j] = a1 * c + a0 * s
        p0[j] = a0 * c
        if j < G2:
            E[j] = E[j] / c


@kernel(inline=True)
def _weighted(t, E, less, G2):  # pragma: no cover - compiled
    """``sum t E max(less, 0)`` over the first ``G2`` points: four partial sums over the points' residues
    mod 4, added in a fixed order (four chains of additions instead of one; the same floats on any
    machine)."""
    a0 = a1 = a2 = a3 = 0.0
    j = 0
    while j + 3 < G2:
        a0 += t[j] * E[j] * max(less[j], 0.0)
        a1 += t[j + 1] * E[j + 1] * max(less[j + 1], 0.0)
        a2 += t[j + 2] * E[j + 2] * max(less[j + 2], 0.0)
        a3 += t[j + 3] * E[j + 3] * max(less[j + 3], 0.0)
        j += 4
    while j < G2:
        a0 += t[j] * E[j] * max(less[j], 0.0)
        j += 1
    return (a0 + a1) + (a2 + a3)


@kernel
def _smallest_scale_loop(qs, k):  # pragma: no cover - compiled
    """``min`` over the prefixes ``j`` that matter (``W_j > 0`` and at least ``k`` positive rates in the suffix
    ``qs[j:]``) of ``W_j + m_j``, ``m_j`` the ``k``-th largest rate in ``qs[j:]``; -1 if none matters. Prefix
    sums first, then one scan from the end that keeps the ``k`` largest rates seen (ascending buffer;
    ``top[0]`` is the ``k``-th largest)."""
    V = qs.shape[0]
    W = np.empty(V + 1)
    W[0] = 0.0
    run = 0.0
    for i in range(V):
        run += qs[i]
        W[i + 1] = run
    return _smallest_scale_of(qs, k, W)


@kernel
def _smallest_scale_of(qs, k, W):  # pragma: no cover - compiled
    """:func:`_smallest_scale_loop` with the prefix sums ``W`` given."""
    V = qs.shape[0]
    top = np.zeros(k)
    count = 0
    best = -1.0
    for i in range(V - 1, -1, -1):
        x = qs[i]
        if x > 0.0:
            count += 1
        if x > top[0]:
            j = 1
            while j < k and top[j] < x:
                top[j - 1] = top[j]
                j += 1
            top[j - 1] = x
        if W[i] > 0.0 and count >= k:
            v = W[i] + top[0]
            if best < 0.0 or v < best:
                best = v
    return best


@kernel
def _grid_points(t_hi, m, t_lo, offsets):  # pragma: no cover - compiled
    """``t_j = t_lo offsets[j mod m] 2^(j div m)`` from ``t_lo`` to at least ``t_hi`` (``offsets = e^{h i}``,
    ``h = ln 2 / m``): each point exactly twice the one ``m`` before it."""
    ratio = t_hi / t_lo
    span = math.log(ratio) if math.isfinite(ratio) else math.log(t_hi) - math.log(t_lo)
    h = math.log(2.0) / m
    G = int(math.ceil(span / h)) + 1
    t = np.empty(G)
    for j in range(G):
        t[j] = math.ldexp(t_lo * offsets[j % m], j // m)
    return t


@kernel
def _grid_loops(qs, n_eff, m, unit, t_lo, offsets):  # pragma: no cover - compiled
    """``(rates, t, t_lo)`` of :func:`~mdsd_cli._wor_kernel._grid_for` for the chain ``qs`` in one call: a
    total mass outside 1e-150..1e150 rescaled by an exact power of two, ``t_lo = unit / total`` unless given
    (``t_lo > 0``), ``t_hi`` from :func:`_smallest_scale_loop`, and the rates rescaled by ``2^e`` where
    ``t_hi`` would pass :data:`T_MAX` (see :func:`~mdsd_cli._wor_kernel.scaled_grid`)."""
    return _grid_above(qs, n_eff, m, unit, t_lo, offsets, np.empty(qs.shape[0] + 1))


@kernel
def _grid_above(qs, n_eff, m, unit, t_lo, offsets, above):  # pragma: no cover - compiled
    """:func:`_grid_loops`, filling ``above[i] = qs[0] + ... + qs[i - 1]`` (plain sums, in order: the draft mass
    above each chain position, which the nested chords keep) as it takes the total, and reusing them for the
    smallest scale where the rates are not rescaled."""
    V = qs.shape[0]
    above[0] = 0.0
    total = 0.0
    for i in range(V):
        total += qs[i]
        above[i + 1] = total
    rates = qs
    rescaled = False
    if total > 0.0 and not 1e-150 < total < 1e150:  # an exact power of two: P(X hits A) depends on rate x time
        shift = -math.frexp(total)[1]
        rates = np.empty(V)
        total = 0.0
        for i in range(V):
            rates[i] = math.ldexp(qs[i], shift)
            total += rates[i]
        if t_lo > 0.0:
            t_lo = math.ldexp(t_lo, -shift)
        rescaled = True
    if t_lo <= 0.0:
        t_lo = unit / total if total > 0.0 else T_LO
    best = _smallest_scale_loop(rates, n_eff) if rescaled else _smallest_scale_of(rates, n_eff, above)
    if best < 0.0:
        return rates, _grid_points(t_lo * 10.0, m, t_lo, offsets), t_lo
    if 45.0 / T_MAX <= best:  # the grid fits
        return rates, _grid_points(min(max(45.0 / best, t_lo * 10.0), T_MAX), m, t_lo, offsets), t_lo
    log_hi = math.log(45.0) - math.log(best)  # finite even when best is denormal
    e = int(round((log_hi + math.log(t_lo)) / (2.0 * math.log(2.0))))
    scaled_lo = math.ldexp(t_lo, -e)
    scaled = np.empty(V)
    for i in range(V):
        scaled[i] = math.ldexp(rates[i], e)
    t_hi = max(math.exp(log_hi - e * math.log(2.0)), scaled_lo * 10.0)
    return scaled, _grid_points(t_hi, m, scaled_lo, offsets), scaled_lo


#: Distinct rates whose exponentials the hit chain keeps (``2^SLOT_BITS``, direct-mapped by a hash; 32 slots
#: are ~30 KB at V = 2,380: more cost more than they save where the caches are cold).
SLOT_BITS = 5
SLOTS = 1 << SLOT_BITS


#: A run of at least ``max(RUN_MIN, n_eff + 1)`` tokens of one draft mass along the chain (zeros between them
#: allowed) joins ``B`` at once (:func:`_join_run`): an n-gram draft's chain is mostly such runs.
RUN_MIN = 8


@kernel(vector=True, inline=True)
def _join_run(qs, W, k, lo, r, S, C, n_eff, four, p0, p1, p2, p3, pmf, less, E, G2, t, m, h, t_lo, d, count, H,
              work, K, Bl, small, span):  # pragma: no cover - compiled
    """Chain positions ``k`` down to ``lo``: ``r`` tokens of one mass (``S = 1 - e^{-q t}``, ``C = e^{-q t}``)
    and zeros join ``B`` at once. After ``j`` of them, ``P[N_B < n] = sum_l C(j, l) s^l c^(j-l) b_l`` with
    ``b_l = P[N_B0 <= n - 1 - l]`` (``B0``: ``B`` before the run), and ``e^{-W t} c^(j-l) = e^{-W_(l) t}``
    (``W_(l)``: the prefix's mass after ``l`` of them), so every position's integral is
    ``sum_{l < n} C(j, l) M_l`` with the moments ``M_l = sum_t t e^{-W_(l) t} s^l b_l``: ``n`` passes over
    the grid for the run instead of one a token, all terms non-negative. A moment keeps the points with
    ``W_(l) t <= 50 + L ln r`` (a binomial up to ``r^L`` multiplies it). Then the pmf's rows take the
    binomial law of the run (``c^(r-L)`` by doubling, :func:`_fill`), and ``E`` the new prefix's weight
    (:func:`_fill` too). Fills ``H[lo .. k]``; returns ``(count, G2)``."""
    G = t.shape[0]
    S2, C2, El, sl, tmp = work[0], work[1], work[2], work[3], work[4]
    mom = small[0]
    L = min(n_eff - 1, r)
    lim = 50.0 + L * math.log(r)
    Wl = W[k + 1]
    g = G2
    for j in range(G2):
        El[j] = E[j]
    while g < G and Wl * t[g] <= lim:
        El[g] = math.exp(-Wl * t[g])
        g += 1
    for j in range(G):
        sl[j] = 1.0
    cb = 1.0
    pp = k + 1
    for ell in range(L + 1):
        if ell > 0:
            pp -= 1
            while qs[pp] == 0.0:
                pp -= 1
            Wl = W[pp]
            for j in range(g):
                El[j] = El[j] / C[j]
            while g < G and Wl * t[g] <= lim:
                El[g] = math.exp(-Wl * t[g])
                g += 1
            for j in range(G):
                sl[j] = sl[j] * S[j]
            cb = cb * (r - ell + 1) / ell
        acc = 0.0
        if ell == 0:
            for j in range(g):
                acc += t[j] * El[j] * less[j]
        else:
            top = n_eff - 1 - ell  # b_l = P[N_B0 <= top]
            if four:
                for j in range(G):
                    Bl[ell, j] = p0[j] + (p1[j] if top >= 1 else 0.0) + (p2[j] if top >= 2 else 0.0)
            else:
                for j in range(G):
                    tmp[j] = pmf[0, j]
                for i in range(1, top + 1):
                    for j in range(G):
                        tmp[j] = tmp[j] + pmf[i, j]
                for j in range(G):
                    Bl[ell, j] = tmp[j]
            for j in range(g):
                acc += t[j] * El[j] * sl[j] * Bl[ell, j]
        mom[ell] = acc
        for j in range(G):
            K[ell, j] = cb * sl[j]
    # K[l] = C(r, l) s^l c^(r - l): the powers of c from c^(r - L) up
    _fill((r - L) * qs[k], t, m, G, S2, C2)
    for ell in range(L, -1, -1):
        for j in range(G):
            K[ell, j] = K[ell, j] * C2[j]
        if ell > 0:
            for j in range(G):
                C2[j] = C2[j] * C[j]
    for j in range(G):
        tmp[j] = K[0, j] * less[j]
    for ell in range(1, L + 1):
        for j in range(G):
            tmp[j] = tmp[j] + K[ell, j] * Bl[ell, j]
    for j in range(G):
        less[j] = tmp[j]
    if four:  # rows from the top down, each from the rows below it (row 3 unread at n_eff = 3)
        for j in range(G):
            a0, a1, a2, a3 = p0[j], p1[j], p2[j], p3[j]
            k0, k1, k2 = K[0, j], K[1, j], K[2, j]
            k3 = K[3, j] if L >= 3 else 0.0
            p3[j] = k0 * a3 + k1 * a2 + k2 * a1 + k3 * a0
            p2[j] = k0 * a2 + k1 * a1 + k2 * a0
            p1[j] = k0 * a1 + k1 * a0
            p0[j] = k0 * a0
    else:
        for i in range(n_eff - 1, -1, -1):
            for j in range(G):
                tmp[j] = K[0, j] * pmf[i, j]
            for ell in range(1, min(i, L) + 1):
                for j in range(G):
                    tmp[j] = tmp[j] + K[ell, j] * pmf[i - ell, j]
            for j in range(G):
                pmf[i, j] = tmp[j]
    Wlo = W[lo]
    G2 = 0
    if Wlo > 0.0:
        _fill(Wlo, t, m, G, S2, E)
        while G2 < G and Wlo * t[G2] <= 50.0:
            G2 += 1
    # every position's H from the moments, vectorised over the run's positions pos = lo + x (in memory order):
    # the sum sum_l C(j, l) M_l nested as M_0 + j (M_1 + (j - 1) / 2 (M_2 + ...)) with j the tokens joined from
    # k down to pos (the factor j - l + 1 is 0 at l = j + 1, so the terms above j vanish), then the left tail
    # by Horner in W t_lo
    M = d.shape[0]
    npos = k - lo + 1
    jv, av, tv = span[0], span[1], span[2]
    gaps = npos != r  # zeros between the run's tokens
    if gaps:
        j = 0
        for i in range(npos):
            if qs[k - i] > 0.0:
                j += 1
            jv[npos - 1 - i] = j
    else:  # every position holds a token: j = k - pos + 1
        for x in range(npos):
            jv[x] = npos - x
    for x in range(npos):
        av[x] = mom[L]
    for ell in range(L, 0, -1):
        low, inv, off = mom[ell - 1], 1.0 / ell, ell - 1.0
        for x in range(npos):
            av[x] = low + (jv[x] - off) * inv * av[x]
    for x in range(npos):
        tv[x] = d[M - 1]
    for mm in range(M - 2, -1, -1):
        dm = d[mm]
        for x in range(npos):
            tv[x] = dm - W[lo + x] * t_lo * tv[x]
    for x in range(npos):
        v = W[lo + x] * (h * av[x] + t_lo * tv[x])
        H[lo + x] = min(max(v, 0.0), 1.0)
    if gaps or count < n_eff or W[lo] <= 0.0:  # zeros (H as above them), fewer than n drafted tokens, no prefix
        for i in range(npos):
            pos = k - i
            if qs[pos] > 0.0:
                count += 1
            if W[pos] <= 0.0:
                H[pos] = 0.0
            elif qs[pos] == 0.0:
                H[pos] = H[pos + 1]
            elif count < n_eff:
                H[pos] = 1.0
    else:
        count += r
    return count, G2


@kernel(vector=True)
def _wor_hit_chain_loops(qs, n_eff, t, m, h, t_lo, d):  # pragma: no cover - compiled
    # Down the chain (tokens V-1 .. 0 join B): every grid point's pmf of N_B(t) below n_eff and
    # P[N_B(t) < n_eff], with the token's e^{-q t} by doubling (_fill, m exponentials a token; a rate
    # seen lately reuses them). The weight e^{-W_k t} of the prefix is carried
    # down as well, divided by the token's e^{-q t} at each step (recomputed every 64 drafted tokens), on
    # the points with W_k t <= 50 only (beyond, the terms are below e^{-50}; a point entering that range
    # gets its own exponential). At n_eff = 3 or 4 the pmf's rows are four arrays updated in one
    # vectorised loop with the weight and the sum (_join4); else row by row. A run of tokens of one mass
    # joins at once (_join_run).
    V = qs.shape[0]
    G = t.shape[0]
    W = np.empty(V + 1)  # the prefixes' masses, compensated (Neumaier): a run's positions share one rate, and
    W[0] = 0.0  # a plain sum's drift (1e-13 over 30,000 equal masses) would show against it
    s, c = 0.0, 0.0
    for i in range(V):
        y = qs[i]
        tot = s + y
        if s >= y:
            c += (s - tot) + y
        else:
            c += (y - tot) + s
        s = tot
        W[i + 1] = s + c
    four = 3 <= n_eff <= 4
    pmf = np.zeros((1 if four else n_eff, G))
    p0, p1, p2, p3 = np.zeros(G), np.zeros(G), np.zeros(G), np.zeros(G)
    for j in range(G):
        pmf[0, j] = 1.0
        p0[j] = 1.0
    less = np.ones(G)
    # the exponentials of the last SLOTS distinct rates, by a hash of the rate's bits (n-gram drafts
    # give thousands of tokens a few hundred distinct rates)
    cached_S = np.empty((SLOTS, G))
    cached_C = np.empty((SLOTS, G))
    cached_rate = np.full(SLOTS, -1.0)
    bits = np.empty(1)
    ibits = bits.view(np.uint64)
    S = cached_S[0]
    C = cached_C[0]
    tmp = np.empty(G)
    E = np.zeros(G)
    H = np.empty(V + 1)
    H[V] = 1.0
    # the runs' scratch
    width = max(n_eff, 4)
    work = np.empty((5, G))  # S2, C2, El, sl and a buffer
    K, Bl = np.empty((width, G)), np.empty((width, G))
    small = np.empty((1, width))  # the moments
    span = np.empty((3, V))  # a run's positions: tokens joined, the moments' sum, the left tail
    run_min = max(RUN_MIN, n_eff + 1)
    count = 0
    M = d.shape[0]
    top = n_eff - 1
    G2 = 0  # E[j] = e^{-W t_j} for j < G2, W the mass of the current prefix
    since = 0  # drafted tokens since E was last computed directly
    last = -1.0  # the rate S and C hold
    short = V  # positions from here up were scanned for a run and go token by token
    k = V - 1
    while k >= 0:
        qk = qs[k]
        Wk = W[k]
        if qk > 0.0:
            if qk != last:
                bits[0] = qk
                slot = int((ibits[0] * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - SLOT_BITS))
                S = cached_S[slot]
                C = cached_C[slot]
                if cached_rate[slot] != qk:
                    _fill(qk, t, m, G, S, C)
                    cached_rate[slot] = qk
                last = qk
            if k < short:  # the run of this mass from here down (zeros between its tokens allowed)
                lo, r, i = k, 1, k - 1
                while i >= 0 and (qs[i] == qk or qs[i] == 0.0):
                    if qs[i] == qk:
                        r += 1
                        lo = i
                    i -= 1
                if r >= run_min and W[k + 1] > 0.0:
                    count, G2 = _join_run(qs, W, k, lo, r, S, C, n_eff, four, p0, p1, p2, p3, pmf, less, E, G2,
                                          t, m, h, t_lo, d, count, H, work, K, Bl, small,
                                          span)
                    since = 0
                    k = lo - 1
                    continue
                short = lo
            count += 1
            since += 1
            if since >= 64:  # recomputed every 64 drafted tokens, whatever zeros lie between them
                G2 = 0
                since = 0
            if four:
                _join4(S, C, p0, p1, p2, p3, less, E, top, G2, G)
            else:
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
                for j in range(G2):
                    E[j] = E[j] / C[j]
        if Wk <= 0.0:
            H[k] = 0.0
            k -= 1
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
            acc = _weighted(t, E, less, G2)
            x0 = Wk * t_lo
            tail = d[M - 1]
            for i in range(M - 2, -1, -1):
                tail = d[i] - x0 * tail
            v = Wk * (h * acc + t_lo * tail)
            H[k] = min(max(v, 0.0), 1.0)
        k -= 1
    return H


@kernel
def _pair_loops(qs, H):  # pragma: no cover - compiled
    """:func:`~mdsd_cli._wor_kernel.pair_hit_chain` in two passes (the same sums in the same order); False
    where a dominant token's ``1 - q`` is below 1e-100."""
    V = qs.shape[0]
    S = np.empty(V + 1)
    S[V] = 0.0
    run = 0.0
    for k in range(V - 1, -1, -1):
        run += qs[k]
        S[k] = run
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
    run = 0.0
    for k in range(V - 1, -1, -1):
        run += r[k]
        R[k] = run
    W = 0.0
    for k in range(V):
        H[k] = min(W * (1.0 + R[k]), 1.0)
        W += qs[k]
    H[V] = 1.0
    return True
