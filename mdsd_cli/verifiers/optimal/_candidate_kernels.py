"""Compiled kernels of the candidate law (numba when enabled): the iid chain of
:func:`~mdsd_cli.verifiers.optimal.candidate.iid_chain` (its sort keys, the exact order, the
candidate law ``t`` along it, the tight cuts and α*; all in one call, :func:`_iid_chain`).

Imported on first use, so that ``mdsd --help`` never pays for numba. With
``MDSD_DISABLE_NUMBA=1`` the same functions run as plain Python (tests compare
both through ``_chain_plan.py_func`` when compiled).
"""

from __future__ import annotations

import math

import numpy as np

from ..._jit import kernel as _jit
from ..._radix import FEW_SHARE, _few_argsort, _float_words_into, _lsd_sort, _radix_argsort
from ..._wor_loops import _grid_above, _pair_loops, _wor_hit_chain_loops


@_jit
def _ratio_keys(p, q, keys):
    """The chain's sort keys ``|q/p|`` as numpy gives them: +inf where p = 0 < q, one canonical NaN
    where p = q = 0."""
    for k in range(p.shape[0]):
        if p[k] > 0.0:
            keys[k] = abs(q[k] / p[k])
        elif q[k] > 0.0:
            keys[k] = np.inf
        else:
            keys[k] = np.nan


@_jit
def _packed_keys(p, q, shift, keys, packed):
    """The chain's sort keys (:func:`_ratio_keys`) in ``keys``, and in ``packed`` (the same memory as
    int64) their bits truncated by ``shift`` with the token index in the low bits."""
    _ratio_keys(p, q, keys)
    for k in range(p.shape[0]):
        packed[k] = ((packed[k] >> shift) << shift) | k


#: Ratios ``q/p`` closer than this (relative) count as tied on the chain: exactly tied
#: ratios (thousands in an n-gram pair) come out of tempering and the division a few ulp
#: apart, and ordering them by that noise would cost a sort for nothing (their candidate
#: ratios then differ by at most this much, relative).
KEY_TIE = 1e-13


@_jit
def _compensated_add(s, c, y):
    """One step of Neumaier's summation: ``s + y`` and the running compensation ``c``.

    Also compiled into :mod:`._chord_kernels`, whose on-disk numba cache is keyed by its own
    file: after editing this function, delete the ``__pycache__/*.nb[ic]`` files here."""
    t = s + y
    if abs(s) >= abs(y):
        c += (s - t) + y
    else:
        c += (y - t) + s
    return t, c


@_jit
def _chain_plan(p, q, order, shift, n, tight, qs, ps, rs, ts, sq, cuts):
    """The iid chain in a few sequential passes (see :func:`~mdsd_cli.verifiers.optimal.candidate.iid_chain`).

    ``order`` comes from a value sort of keys truncated by ``shift`` bits (runs of equal
    truncated keys in index order); each such run is sorted here by its exact keys
    (stably), which makes ``order`` the exact chain: tokens by increasing ``q/p``
    (``rs``: +inf where p = 0 < q, NaN where p = q = 0, after everything), ties by
    index; a run tied to :data:`KEY_TIE` keeps its index order and gets one key. Fills ``qs, ps`` (q, p along the chain), ``rs``, ``sq`` (suffix sums of
    ``qs``, ``sq[V] = 0``), ``ts`` (the candidate law along the chain) and ``cuts``
    (block boundaries); returns ``(K, number of cuts, alpha)``.
    """
    V = order.shape[0]
    for k in range(V):
        y = order[k]
        qs[k] = q[y]
        ps[k] = p[y]
        if ps[k] > 0.0:
            rs[k] = abs(qs[k] / ps[k])
        else:  # p = 0 < q: +inf; p = q = 0: NaN, after everything
            rs[k] = np.inf if qs[k] > 0.0 else np.nan
    bits = rs.view(np.int64)
    start = 0
    for k in range(1, V + 1):
        if k < V and (bits[k] >> shift) == (bits[start] >> shift):
            continue
        if k - start > 1 and not np.isnan(rs[start]):  # a run of near-ties
            lo = rs[start]
            hi = rs[start]
            ordered = True
            for i in range(start + 1, k):
                ordered = ordered and rs[i] >= rs[i - 1]
                lo = min(lo, rs[i])
                hi = max(hi, rs[i])
            if ordered:
                start = k
                continue
            if hi <= lo * (1.0 + KEY_TIE):  # tied up to rounding (n-gram backoff): keep the
                for i in range(start, k):  # index order, with one key for the run
                    rs[i] = lo
                start = k
                continue
            idx = np.argsort(rs[start:k], kind="mergesort")
            sub_q = qs[start:k][idx]
            sub_p = ps[start:k][idx]
            sub_r = rs[start:k][idx]
            sub_o = order[start:k][idx]
            qs[start:k] = sub_q
            ps[start:k] = sub_p
            rs[start:k] = sub_r
            order[start:k] = sub_o
        start = k
    sq[V] = 0.0
    run = 0.0
    for k in range(V - 1, -1, -1):
        run += qs[k]
        sq[k] = run
    # H_k = P(X hits chain[:k]) = 1 - sq[k]^n: exact in the tail, where 1 - Qc loses it
    # K: the last position within 1e-13 of the minimum (one pass: once the running minimum
    # is final, every later candidate is measured against it), in the pass of the prefix sums
    Pc = np.empty(V + 1)
    Qc = np.empty(V + 1)
    Pc[0] = 0.0
    Qc[0] = 0.0
    gmin = 0.0
    K = 0
    pk, qk = 0.0, 0.0
    for k in range(V):
        pk += ps[k]
        qk += qs[k]
        Pc[k + 1] = pk
        Qc[k + 1] = qk
        g = (1.0 - sq[k + 1] ** n) - pk
        if g < gmin:
            gmin = g
        if g <= gmin + 1e-13:
            K = k + 1
    # on A* = chain[:K]: t = min(p, lam q) summing to H_K; the capped tokens are a prefix
    HK = 0.0
    if K > 0:
        HK = -math.expm1(n * math.log1p(-Qc[K])) if Qc[K] < 0.5 else 1.0 - sq[K] ** n
    PK = Pc[K]
    for k in range(K):
        ts[k] = ps[k]
    if K > 0 and HK < PK:
        positive = 0.0  # p mass of A* where q > 0
        for k in range(K):
            if qs[k] > 0.0:
                positive += ps[k]
        if HK >= positive:
            for k in range(K):
                if qs[k] <= 0.0:
                    ts[k] = 0.0
        else:
            cap = K
            for k in range(1, K + 1):  # k capped tokens: lam = (H_K - p[k:K]) / q[:k]
                if Qc[k] <= 0.0:
                    continue
                lam = (HK - (PK - Pc[k])) / Qc[k]
                if k == K or (qs[k] > 0.0 and lam >= ps[k] / qs[k]):
                    cap = k
                    break
            scale = (HK - (PK - Pc[cap])) / Qc[cap]
            for k in range(cap):
                v = qs[k] * scale
                ts[k] = v if v < ps[k] else ps[k]
    # off A*: t = max(p, kappa q) summing to P(X misses A*) = sq[K]^n; floored tokens a suffix
    W = sq[K] ** n
    ptail = 0.0
    for k in range(K, V):
        ts[k] = ps[k]
        ptail += ps[k]
    if K < V and W > ptail:
        pre = 0.0  # p[K:j] summed from K (relative precision in a tiny tail)
        pre_j = np.empty(V - K + 1)
        for k in range(K, V):
            pre_j[k - K] = pre
            pre += ps[k]
        j = K
        for k in range(V - 1, K - 1, -1):
            if sq[k] <= 0.0:
                continue
            kappa = (W - pre_j[k - K]) / sq[k]
            if k == K or qs[k - 1] <= 0.0 or kappa <= ps[k - 1] / qs[k - 1]:
                j = k
                break
        scale = (W - pre_j[j - K]) / sq[j]
        for k in range(j, V):
            v = qs[k] * scale
            if v > ps[k]:
                ts[k] = v
    # tight cuts: prefix sums of t against H_k on A*, suffix sums against the miss
    # probability sq[k]^n after it, both to relative precision
    ncut = 0
    cuts[ncut] = 0
    ncut += 1
    T = 0.0
    for k in range(1, K):
        T += ts[k - 1]
        H = 1.0 - sq[k] ** n  # to 1e-16 absolute: enough to rule most positions out
        if abs(T - H) > tight * H + 1e-14:
            continue
        if Qc[k] < 0.5:  # small H: to relative precision, once n x - C(n, 2) x^2 <= H <= n x
            x = Qc[k]  # (x = Qc[k]) cannot rule the position out
            hi = n * x
            lo = hi - 0.5 * n * (n - 1) * x * x
            if T > hi * (1.0 + tight + 1e-15) or T < lo * (1.0 - tight - 1e-15):
                continue
            H = -math.expm1(n * math.log1p(-x))
        if abs(T - H) <= tight * H:
            cuts[ncut] = k
            ncut += 1
    if K > 0 and K < V:
        cuts[ncut] = K
        ncut += 1
    S = 0.0
    tail_cuts = ncut
    for k in range(V - 1, K, -1):
        S += ts[k]
        M = sq[k] ** n
        if abs(S - M) <= tight * M:
            cuts[ncut] = k
            ncut += 1
    # the tail cuts were found from the end: reverse them into increasing order
    a, b = tail_cuts, ncut - 1
    while a < b:
        cuts[a], cuts[b] = cuts[b], cuts[a]
        a += 1
        b -= 1
    cuts[ncut] = V
    ncut += 1
    alpha = 0.0
    comp = 0.0  # Neumaier's compensation: alpha to the last bit, not V roundings
    for k in range(V):
        alpha, comp = _compensated_add(alpha, comp, ts[k] if ts[k] < ps[k] else ps[k])
    return K, ncut, alpha + comp


@_jit
def _iid_chain(p, q, shift, n, tight, order, qs, ps, rs, ts, sq, cuts):
    """:func:`_packed_keys`, their radix sort and :func:`_chain_plan` in one call (``order`` receives the
    chain): the whole set-up of the iid chain without a return to Python between them."""
    V = p.shape[0]
    key = np.empty(V)
    packed = key.view(np.int64)
    _packed_keys(p, q, shift, key, packed)
    _lsd_sort(packed.view(np.uint64), np.empty(0, dtype=np.int64), False)
    mask = (1 << shift) - 1
    for k in range(V):
        order[k] = packed[k] & mask
    return _chain_plan(p, q, order, shift, n, tight, qs, ps, rs, ts, sq, cuts)


@_jit
def _chain_targets(ps, qs, H, tight, ts, cuts):
    """:func:`~mdsd_cli.verifiers.optimal.candidate.chain_targets` after the chain and its hit
    probabilities, in a few passes (the numpy version is the reference it is tested against):
    ``ps, qs`` are ``p, q`` along the chain and ``H[k] = P(X hits chain[:k])``. Fills ``ts`` (the
    candidate law along the chain) and ``cuts``; returns ``(K, number of cuts)``. The sums run in
    the order numpy's cumulative sums take them. Passes over the chain: the prefix sums of ``p`` with
    ``min (H - P)`` and ``K``, the tail's prefix sums of ``p`` and (from its end)
    the search for ``kappa`` where the tail is floored, then one pass that writes the tail's targets and
    finds the tight cuts."""
    V = ps.shape[0]
    # K: the last prefix within 1e-13 of min (H - P), in the same pass (after the minimum's last fall, the running
    # minimum is the final one, and every earlier candidate lies before that fall)
    gmin = H[0]
    K = 0
    run = 0.0
    for k in range(V):
        run += ps[k]
        g = H[k + 1] - run
        if g < gmin:
            gmin = g
        if g <= gmin + 1e-13:
            K = k + 1
    # suffix sums of ps within A* = [0, K) (suf[K] = 0); the tail's [K, V) only as a total, used at K = 0
    suf = np.empty(K + 1)
    suf[K] = 0.0
    if K == 0:
        run = 0.0
        for k in range(V - 1, -1, -1):
            run += ps[k]
        suf[0] = run
    else:
        run = 0.0
        for k in range(K - 1, -1, -1):
            run += ps[k]
            suf[k] = run
    # on A*: min(p, lam q) summing to H[K], the capped tokens a prefix
    for k in range(K):
        ts[k] = ps[k]
    total = H[K]
    if K > 0 and total < suf[0]:
        positive = 0.0
        for k in range(K):
            if qs[k] > 0.0:
                positive += ps[k]
        if total >= positive:
            for k in range(K):
                if qs[k] <= 0.0:
                    ts[k] = 0.0
        else:
            pre = 0.0
            cap = K
            for k in range(K):
                pre += qs[k]
                if pre <= 0.0:
                    continue
                lam = (total - suf[k + 1]) / pre
                if k == K - 1:
                    nxt = -np.inf
                elif qs[k + 1] > 0.0:
                    nxt = ps[k + 1] / qs[k + 1]
                else:
                    nxt = np.inf
                if lam >= nxt:
                    cap = k + 1
                    break
            pre = 0.0
            for k in range(cap):
                pre += qs[k]
            rest = total - suf[cap]
            for k in range(cap):
                v = qs[k] / pre * rest
                if v < ps[k]:
                    ts[k] = v
    # after A*: max(p, kappa q) summing to 1 - H[K], the floored tokens a suffix [j, V)
    total = 1.0 - H[K]
    floored = K < V and total > suf[K]
    j = K
    base = 0.0
    rest = 0.0
    if floored:
        pre = np.empty(V - K)
        run = 0.0
        for k in range(K, V):
            pre[k - K] = run
            run += ps[k]
        run = 0.0  # the tail's suffix sums of q, from its end
        found = False
        for k in range(V - 1, K - 1, -1):
            run += qs[k]
            if run <= 0.0:
                continue
            kappa = (total - pre[k - K]) / run
            if k == K or qs[k - 1] <= 0.0 or kappa <= ps[k - 1] / qs[k - 1]:
                j = k
                base = run
                found = True
                break
        if not found:
            base = run
        rest = total - pre[j - K]
    # the tail's targets and the tight cuts (the cumulative t meets the hit probability, and 0, K, V), one pass
    ncut = 0
    T = 0.0
    for k in range(V + 1):
        if k > 0:
            i = k - 1
            if i >= K:
                x = ps[i]
                if floored and i >= j:
                    v = qs[i] / base * rest
                    if v > x:
                        x = v
                ts[i] = x
            T += ts[i]
        if k == 0 or k == K or k == V or abs(T - H[k]) <= tight * max(1.0, H[k]):
            cuts[ncut] = k
            ncut += 1
    return K, ncut


@_jit
def _ordered(p, q, order):
    """The chain into ``order`` (``ratio_order``'s keys and stable sort); returns ``p`` and ``q`` along it."""
    V = p.shape[0]
    key = np.empty(V)
    _ratio_keys(p, q, key)
    _radix_argsort(key, order)
    ps = np.empty(V)
    qs = np.empty(V)
    for k in range(V):
        ps[k] = p[order[k]]
        qs[k] = q[order[k]]
    return ps, qs


#: Distinct draft masses a run of tied ratios is counting-sorted by (more: a stable comparison sort), and the
#: size of the open-addressing table that finds them.
DISTINCT = 64
TABLE_BITS = 7
TABLE = 1 << TABLE_BITS


@_jit
def _ties_by_mass(p, q, order):
    """The chain :func:`_ordered` gives, with every run of exactly equal keys reordered by decreasing ``q``
    (stably: equal masses keep their index order); returns ``p`` and ``q`` along it. Tied ratios may come in
    any order on the chain (the candidate law, ``A*`` and the optimum do not depend on it), and an n-gram
    pair ties thousands of tokens whose draft masses are a few dozen values: grouped, they join the hit
    chain's quadrature as runs of one mass (:func:`~mdsd_cli._wor_loops._join_run`). Where the pairs
    (ratio, mass) take few values (an n-gram row: ~150 among 2,380 tokens) they are counted in one pass
    (:func:`~mdsd_cli._radix._few_argsort`, the same order) instead of sorted and regrouped."""
    V = p.shape[0]
    if V > 2 * FEW_SHARE:
        keys = np.empty(V)
        _ratio_keys(p, q, keys)
        if _few_argsort(_float_words_into(keys), _float_words_into(-q), order, V // FEW_SHARE):
            ps, qs = np.empty(V), np.empty(V)
            for k in range(V):
                ps[k] = p[order[k]]
                qs[k] = q[order[k]]
            return ps, qs
    ps, qs = _ordered(p, q, order)
    keys = np.empty(V)
    _ratio_keys(ps, qs, keys)
    seg = np.empty(0, dtype=np.int64)
    pseg, qseg = np.empty(0), np.empty(0)
    entry = np.empty(0, dtype=np.int64)  # each token's entry in the table of masses
    table = np.full(TABLE, -1.0)  # a group's distinct masses, open addressing on their bits
    start = np.zeros(TABLE, dtype=np.int64)
    used = np.empty(DISTINCT, dtype=np.int64)
    bits = np.empty(1)
    ibits = bits.view(np.uint64)
    lo = 0
    while lo < V:
        hi = lo + 1
        mixed = False
        while hi < V and keys[hi] == keys[lo]:
            if qs[hi] != qs[hi - 1]:
                mixed = True
            hi += 1
        if mixed:
            if seg.shape[0] == 0:
                seg, entry = np.empty(V, dtype=np.int64), np.empty(V, dtype=np.int64)
                pseg, qseg = np.empty(V), np.empty(V)
            d = 0
            for i in range(lo, hi):  # the distinct masses and their counts (n-gram groups hold a few dozen)
                x = qs[i] + 0.0  # -0.0 as +0.0: one mass, as numpy compares them
                bits[0] = x
                e = np.int64((ibits[0] * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - TABLE_BITS))
                while table[e] != x and table[e] >= 0.0:
                    e = (e + np.int64(1)) & np.int64(TABLE - 1)
                if table[e] < 0.0:
                    if d == DISTINCT:
                        d = -1
                        break
                    table[e] = x
                    start[e] = 0
                    used[d] = e
                    d += 1
                start[e] += 1
                entry[i] = e
            if d < 0:  # many distinct masses: a stable sort of the group
                d = DISTINCT
                sub = np.argsort(-qs[lo:hi], kind="mergesort")
                for i in range(hi - lo):
                    seg[i], pseg[i], qseg[i] = order[lo + sub[i]], ps[lo + sub[i]], qs[lo + sub[i]]
            else:  # a counting sort by decreasing mass, stable
                for i in range(1, d):  # the distinct masses in decreasing order (insertion)
                    u = used[i]
                    j = i - 1
                    while j >= 0 and table[used[j]] < table[u]:
                        used[j + 1] = used[j]
                        j -= 1
                    used[j + 1] = u
                acc = 0
                for s in range(d):
                    c = start[used[s]]
                    start[used[s]] = acc
                    acc += c
                for i in range(lo, hi):
                    u = entry[i]
                    seg[start[u]], pseg[start[u]], qseg[start[u]] = order[i], ps[i], qs[i]
                    start[u] += 1
            for s in range(d):
                table[used[s]] = -1.0
            for i in range(hi - lo):
                order[lo + i], ps[lo + i], qs[lo + i] = seg[i], pseg[i], qseg[i]
        lo = hi
    return ps, qs


@_jit
def _targets_by_token(ps, qs, H, tight, order, ts, cuts):
    """:func:`_chain_targets` along the chain ``order``, the targets scattered to ``ts`` by token."""
    along = np.empty(ps.shape[0])
    K, ncut = _chain_targets(ps, qs, H, tight, along, cuts)
    for k in range(ps.shape[0]):
        ts[order[k]] = along[k]
    return K, ncut


@_jit
def _pair_chain(p, q, tight, order, H, ts, cuts):
    """:func:`~mdsd_cli.verifiers.optimal.candidate.chain_targets` for a pair without replacement in one
    call: the chain (:func:`_ordered`), the pair's hit chain in closed form
    (:func:`~mdsd_cli._wor_loops._pair_loops` on ``q`` normalised along it) and :func:`_chain_targets`.
    Fills ``order``, ``H``, ``ts`` (by token) and ``cuts``; returns ``(K, number of cuts)``, or
    ``(-1, 0)`` where the closed form declines (a dominant token's ``1 - q`` below 1e-100)."""
    ps, qs = _ordered(p, q, order)
    V = p.shape[0]
    total = 0.0
    for k in range(V):
        total += qs[k]
    unit = np.empty(V)
    for k in range(V):
        unit[k] = qs[k] / total
    if not _pair_loops(unit, H):
        return -1, 0
    return _targets_by_token(ps, qs, H, tight, order, ts, cuts)


@_jit
def _wor_chain(p, q, n_eff, m, h, unit, offsets, d, tight, order, ts, cuts):
    """:func:`~mdsd_cli.verifiers.optimal.candidate.chain_targets` for three or more drafts without
    replacement in one call: the chain (:func:`_ties_by_mass`), the quadrature's grid
    (:func:`~mdsd_cli._wor_loops._grid_loops`; ``n_eff, m, h, unit, offsets, d`` as
    :func:`~mdsd_cli._wor_kernel.wor_hit_chain` takes them), its hit chain and :func:`_chain_targets`.
    Fills ``order``, ``ts`` (by token) and ``cuts``; returns ``(K, number of cuts, H)``."""
    K, ncut, H, qs, along, _ = _wor_chain_along(p, q, n_eff, m, h, unit, offsets, d, tight, order, cuts)
    for k in range(p.shape[0]):
        ts[order[k]] = along[k]
    return K, ncut, H


@_jit
def _wor_chain_along(p, q, n_eff, m, h, unit, offsets, d, tight, order, cuts):
    """:func:`_wor_chain` with ``q`` and the targets left along the chain: fills ``order`` and ``cuts``; returns
    ``(K, number of cuts, H, q along the chain, t along the chain, the draft mass above each position)`` (the
    chords' arrays start from them)."""
    ps, qs = _ties_by_mass(p, q, order)
    above = np.empty(p.shape[0] + 1)
    rates, t, t_lo = _grid_above(qs, n_eff, m, unit, -1.0, offsets, above)
    H = _wor_hit_chain_loops(rates, n_eff, t, m, h, t_lo, d)
    along = np.empty(p.shape[0])
    K, ncut = _chain_targets(ps, qs, H, tight, along, cuts)
    return K, ncut, H, qs, along, above


@_jit
def _block_index(qs, order, K, cuts, block):
    """:func:`~mdsd_cli.verifiers.optimal.candidate.block_index` in one pass: ``block[token]`` the
    number of its block among those holding draft mass (the int64 maximum where ``q`` is 0);
    returns ``(count, first_tail)`` (``first_tail`` -1 if no block lies after ``A*``)."""
    count = 0
    first_tail = -1
    for b in range(cuts.shape[0] - 1):
        found = False
        for k in range(cuts[b], cuts[b + 1]):
            if qs[k] > 0.0:
                block[order[k]] = count
                found = True
            else:
                block[order[k]] = np.iinfo(np.int64).max
        if found:
            if first_tail < 0 and cuts[b] >= K:
                first_tail = count
            count += 1
    return count, first_tail
