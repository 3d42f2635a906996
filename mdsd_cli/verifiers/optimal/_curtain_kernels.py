"""Compiled kernels of the left curtain (numba when enabled): the coupling of one
priority block (:class:`~mdsd_cli.verifiers.optimal.curtain.Curtain`), its marks, and
``optimal-iid``'s pick and whole verification step in one call each (:func:`_one_pick`,
:func:`_one_step`, with the chain lookup they need).

Imported on first use, so that ``mdsd --help`` never pays for numba. With
``MDSD_DISABLE_NUMBA=1`` the same functions run as plain Python (tests compare
both through ``_curtain.py_func`` when compiled).
"""

from __future__ import annotations

import math

import numpy as np

from ..._jit import kernel as _jit


@_jit
def _val(a, L, n, sign, o):
    """Integral of the value density over ``[o + a, o + a + L]`` (mirrored when ``sign < 0``).

    Positions are kept relative to the block's origin ``o`` and added to it only here, so
    that a block whose mass is far below the ulp of ``o`` keeps its lengths exact."""
    if L <= 0.0:
        return 0.0
    a = o + a
    if sign < 0:
        a = -(a + L)
    if a < 0.0:
        L += a
        a = 0.0
        if L <= 0.0:
            return 0.0
    b = a + L
    if a == 0.0:
        v = b ** n
    else:  # (a + L)^n - a^n without cancellation for small L
        v = -(b ** n) * math.expm1(n * math.log1p(-L / b))
    return v if sign > 0 else -v


@_jit
def _dens(u, n, sign, o):
    u = o + u
    if sign < 0:
        u = -u
    if u <= 0.0:
        d = 0.0 if n > 1 else 1.0
    else:
        d = n * u ** (n - 1)
    return d if sign > 0 else -d


@_jit
def _eval(mode, x, a0, a1, a2, a3, n, sign, o):
    """``(F, F')`` of the three monotone equations the curtain solves.

    mode 0 (a new run ``[x, x + Q]``): ``val(x, Q)``, with ``a0 = Q``.
    mode 1 (a run straddling the taken runs, ``x`` of it above ``top``):
    ``val(top, x) + val(hi - y, y)`` with ``y = clip(rest - x, 0, ln)`` taken from the top
    of the gap ending at ``hi``; ``a0 = top, a1 = rest, a2 = hi, a3 = ln`` (the caller
    subtracts the value of the gaps used in full from the target).
    mode 2 (the split of a run ``[x, e]``): ``val(x, e - x) / (e - x) - rho``, ``a0 = e, a1 = rho``.
    mode 3 (the split of a list of pieces): minus the mean value of the top ``a_prev + x``
    of the run, whose first ``a_prev`` have value ``v_prev`` and the next piece ends at
    ``hi``; ``a0 = hi, a1 = v_prev, a2 = a_prev``.
    """
    if mode == 0:
        Q = a0
        return _val(x, Q, n, sign, o), _dens(x + Q, n, sign, o) - _dens(x, n, sign, o)
    if mode == 1:
        top, rest, hi, ln = a0, a1, a2, a3
        y = rest - x
        if y < 0.0:
            y = 0.0
        if y > ln:
            y = ln
        return (_val(top, x, n, sign, o) + _val(hi - y, y, n, sign, o),
                _dens(top + x, n, sign, o) - _dens(hi - y, n, sign, o))
    if mode == 3:  # minus the mean value of the top a_prev + x of a run: -(v_prev + val(hi - x, x)) / (a_prev + x)
        hi, v_prev, a_prev = a0, a1, a2
        mass = a_prev + x
        if mass <= 0.0:
            return -_dens(hi, n, sign, o), 0.0
        mean = (v_prev + _val(hi - x, x, n, sign, o)) / mass
        return -mean, (mean - _dens(hi - x, n, sign, o)) / mass
    e, rho = a0, a1
    L = e - x
    if L <= 0.0:
        return _dens(e, n, sign, o) - rho, 0.0
    m = _val(x, L, n, sign, o) / L
    return m - rho, (m - _dens(x, n, sign, o)) / L


@_jit
def _root(mode, lo, hi, target, a0, a1, a2, a3, n, sign, o):
    """Root of the increasing ``F(x) - target`` on ``[lo, hi]`` (clamped to the ends):
    safeguarded Newton with a bracket."""
    flo = _eval(mode, lo, a0, a1, a2, a3, n, sign, o)[0] - target
    if flo >= 0.0:
        return lo
    fhi = _eval(mode, hi, a0, a1, a2, a3, n, sign, o)[0] - target
    if fhi <= 0.0:
        return hi
    x = lo - flo * (hi - lo) / (fhi - flo)  # a secant start
    if not (lo < x < hi):
        x = 0.5 * (lo + hi)
    for _ in range(200):
        f, d = _eval(mode, x, a0, a1, a2, a3, n, sign, o)
        f -= target
        if f > 0.0:
            hi = x
        elif f < 0.0:
            lo = x
        else:
            return x
        nx = x - f / d if d > 0.0 else 0.5 * (lo + hi)
        if not (lo < nx < hi):
            nx = 0.5 * (lo + hi)
        if nx == x or hi - lo <= 4e-16 * max(abs(lo), abs(hi)):
            return nx
        x = nx
    return x


@_jit
def _curtain(q, t, o, n, sign, first, largest, slack, max_chunks,
             chunk_end, split, m_a, m_b, total, ptr, pc_start, pc_len):
    """Left curtain over the tokens ``q, t`` given in increasing ``sign * rho`` (``t`` already
    multiplied by ``sign``), on the axis ``[o, o + sum q]`` (mirrored when ``sign < 0``:
    the caller passes mirrored coordinates, and the values are negated). Positions (``top``,
    the gaps, the pieces) are relative to ``o``, which only the value integrals add back.

    Fills the chunk arrays and returns ``(chunks, pieces)``, or ``(-1, 0)`` once more
    than ``max_chunks`` chunks would be needed. Chunk ``c`` holds tokens
    ``chunk_end[c-1]:chunk_end[c]`` and the run ``ptr[c]:ptr[c+1]`` of pieces
    ``[pc_start, pc_start + pc_len]`` in decreasing value (mass ``total[c]``); part A
    is the top ``split[c]`` of that mass, part B the rest; ``m_a``, ``m_b`` their mean
    values (NaN: every token of the chunk is uniform on the whole run).
    """
    m = q.shape[0]
    Qc = np.zeros(m + 1)
    Tc = np.zeros(m + 1)
    qk, tk = 0.0, 0.0
    for k in range(m):
        qk += q[k]
        tk += t[k]
        Qc[k + 1] = qk
        Tc[k + 1] = tk
    U = Qc[m]  # positions are relative to o (see _val)
    top = 0.0
    gap_lo = np.empty(m + 1)
    gap_len = np.empty(m + 1)
    tmp_start = np.empty(m + 2)
    tmp_len = np.empty(m + 2)
    gaps = 0
    chunks = 0
    pieces = 0
    ptr[0] = 0
    i = 0
    size = first
    while i < m:
        if chunks >= max_chunks:
            return -1, 0
        j = min(i + size, m)
        Q = Qc[j] - Qc[i]
        T = Tc[j] - Tc[i]
        if Q <= 0.0:  # tokens of zero draft mass are never drafted
            chunk_end[chunks] = j
            split[chunks] = 0.0
            total[chunks] = 0.0
            m_a[chunks] = np.nan
            m_b[chunks] = np.nan
            ptr[chunks + 1] = pieces
            chunks += 1
            i = j
            continue
        r_lo = np.inf
        r_hi = -np.inf
        for k in range(i, j):  # zero-mass tokens inside the range carry no ratio
            if q[k] > 0.0:
                r_lo = t[k] / q[k]
                break
        for k in range(j - 1, i - 1, -1):
            if q[k] > 0.0:
                r_hi = t[k] / q[k]
                break
        uniform = j - i == 1 or r_hi - r_lo <= 1e-15 * abs(r_hi)  # tied ratios (to rounding)
        room = U - top
        if room < 0.0:
            room = 0.0
        new_run = Q <= room and _val(top, Q, n, sign, o) <= T
        seg = -1
        cm = 0.0
        cv = 0.0
        h = 0.0
        x = 0.0
        s = top
        if new_run:
            s = _root(0, top, max(top, U - Q), T, Q, 0.0, 0.0, 0.0, n, sign, o) if Q < room else top
        else:
            g = gaps - 1
            while g >= 0:
                h_end = Q - cm - gap_len[g]
                if h_end <= 0.0:
                    seg = g
                    break
                if _val(top, h_end, n, sign, o) + cv + _val(gap_lo[g], gap_len[g], n, sign, o) - T <= 0.0:
                    seg = g
                    break
                cv += _val(gap_lo[g], gap_len[g], n, sign, o)
                cm += gap_len[g]
                g -= 1
            if seg < 0:  # rounding: every gap is used; the rest of the run is above `top`
                h = min(max(Q - cm, 0.0), room)
            else:
                ln = gap_len[seg]
                hi_g = gap_lo[seg] + ln
                lo_h = max(0.0, Q - cm - ln)
                hi_h = min(Q - cm, room)
                if hi_h < lo_h:
                    hi_h = lo_h
                h = _root(1, lo_h, hi_h, T - cv, top, Q - cm, hi_g, ln, n, sign, o)
                x = min(max(Q - cm - h, 0.0), ln)
        # the run's pieces in decreasing value
        npc = 0
        if new_run:
            tmp_start[0] = s
            tmp_len[0] = Q
            npc = 1
        else:
            if h > 0.0:
                tmp_start[0] = top
                tmp_len[0] = h
                npc = 1
            g = gaps - 1
            while g > seg:  # fully used gaps, topmost first
                tmp_start[npc] = gap_lo[g]
                tmp_len[npc] = gap_len[g]
                npc += 1
                g -= 1
            if seg >= 0 and x > 0.0:
                tmp_start[npc] = gap_lo[seg] + gap_len[seg] - x
                tmp_len[npc] = x
                npc += 1
        run = 0.0
        vtot = 0.0
        for k in range(npc):
            run += tmp_len[k]
            vtot += _val(tmp_start[k], tmp_len[k], n, sign, o)
        # the split: part A = the top `a` of the run's mass, the largest `a` whose mean
        # value still reaches r_hi; the chunk is kept when B's mean is at most r_lo
        a = run
        ma = np.nan
        mb = np.nan
        ok = run > 0.0
        if ok and not uniform:
            a_prev = 0.0
            v_prev = 0.0
            found = False
            for k in range(npc):
                L = tmp_len[k]
                vp = _val(tmp_start[k], L, n, sign, o)
                if (v_prev + vp) >= r_hi * (a_prev + L):
                    a_prev += L
                    v_prev += vp
                    continue
                hi_p = tmp_start[k] + L
                if a_prev <= 0.0 and _dens(hi_p, n, sign, o) < r_hi - slack * abs(r_hi):
                    break  # not even the top value reaches r_hi
                xs = _root(3, 0.0, L, -r_hi, hi_p, v_prev, a_prev, 0.0, n, sign, o)
                a = a_prev + xs
                va = v_prev + _val(hi_p - xs, xs, n, sign, o)
                found = a > 0.0 and a < run
                if found:
                    ma = va / a
                    mb = (vtot - va) / (run - a)
                break
            ok = found and ma >= r_hi - slack * abs(r_hi) and mb <= r_lo + slack * abs(r_lo) and ma > mb
        if not ok:
            if j - i == 1:  # cannot happen for a single token; guard against rounding loops
                ok = True
                a = run
                ma = np.nan
                mb = np.nan
            else:
                size = max(1, (j - i) // 4)
                continue
        # commit the chunk
        chunk_end[chunks] = j
        split[chunks] = a
        total[chunks] = run
        m_a[chunks] = ma
        m_b[chunks] = mb
        for k in range(npc):
            pc_start[pieces] = tmp_start[k]
            pc_len[pieces] = tmp_len[k]
            pieces += 1
        ptr[chunks + 1] = pieces
        if new_run:
            if s > top:
                gap_lo[gaps] = top
                gap_len[gaps] = s - top
                gaps += 1
            top = s + Q
        else:
            if seg >= 0:
                gap_len[seg] -= x
                gaps = seg + 1 if gap_len[seg] > 0.0 else seg
            else:
                gaps = 0
            top = top + h
        chunks += 1
        size = min(max(2 * (j - i), 1), largest)
        i = j
    return chunks, pieces


@_jit
def _mark(c, in_a, u, split, total, ptr, pc_start, pc_len):
    """A mark of chunk ``c``: uniform (``u`` uniform) on part A of its run (the top ``split[c]``
    of its mass) when ``in_a``, else on part B; pieces are used from their top down."""
    if in_a:
        x = u * split[c]
    else:
        x = split[c] + u * (total[c] - split[c])
    k = ptr[c]
    while k < ptr[c + 1] - 1 and x >= pc_len[k]:
        x -= pc_len[k]
        k += 1
    if x > pc_len[k]:
        x = pc_len[k]
    return pc_start[k] + pc_len[k] - x


@_jit
def _sample_marks(chunk, lam, u, v, split, total, ptr, pc_start, pc_len, marks):
    """One mark per instance: on part A of its chunk's run with probability ``lam``, else on
    part B (``u``, ``v`` uniform; see :func:`_mark`)."""
    for i in range(chunk.shape[0]):
        marks[i] = _mark(chunk[i], v[i] < lam[i], u[i], split, total, ptr, pc_start, pc_len)


@_jit
def _chain_position(y, p, q, rs, order):
    """Chain position of token ``y``: binary search on ``q/p`` (runs tied to rounding share
    one key, hence the margins), then the token among the candidates."""
    if p[y] > 0.0:
        key = abs(q[y] / p[y])
    else:
        key = np.inf if q[y] > 0.0 else np.nan
    V = rs.shape[0]
    lo = 0
    if not np.isnan(key):  # (drafted tokens have q > 0, so a NaN key never comes here)
        lo = np.searchsorted(rs, key * (1.0 - 1e-12), side="left")
    for k in range(lo, V):
        if order[k] == y:
            return k
    for k in range(0, lo):  # never reached for a well-formed chain; kept for safety
        if order[k] == y:
            return k
    return -1


@_jit
def _find_drafts(p, q, rs, order, cuts, drafts):
    """Chain positions and blocks of one row of drafts, and the first block they reach."""
    m = drafts.shape[0]
    pos = np.empty(m, dtype=np.int64)
    blk = np.empty(m, dtype=np.int64)
    b = cuts.shape[0]
    for i in range(m):
        pos[i] = _chain_position(drafts[i], p, q, rs, order)
        blk[i] = np.searchsorted(cuts, pos[i], side="right") - 1
        if blk[i] < b:
            b = blk[i]
    return pos, blk, b


@_jit
def _block_curtain(qs, ts, cuts, suffix, first_tail, n, b, first, largest, slack, budget):
    """The left curtain of block ``b`` (as :meth:`~mdsd_cli.verifiers.optimal.iid.OptimalIID.curtain`
    builds it: the likelier direction first, budgets growing eightfold): ``(sign, chunks, chunk_end,
    split, m_a, m_b, total, ptr, pc_start, pc_len)`` on the kernel's axis (``sign`` times the real one)."""
    a = cuts[b]
    e = cuts[b + 1]
    size = e - a
    o = suffix[e]
    d0 = -1.0 if b < first_tail else 1.0
    chunk_end = np.empty(size, np.int64)
    split = np.empty(size)
    m_a = np.empty(size)
    m_b = np.empty(size)
    total = np.empty(size)
    ptr = np.empty(size + 1, np.int64)
    pc_start = np.empty(3 * size + 3)
    pc_len = np.empty(3 * size + 3)
    qq = np.empty(size)
    tt = np.empty(size)
    sign = d0
    chunks = -1
    limit = budget
    while chunks < 0:
        for attempt in range(2):
            sign = d0 if attempt == 0 else -d0
            if sign > 0:
                for k in range(size):
                    qq[k] = qs[e - 1 - k]
                    tt[k] = ts[e - 1 - k]
                oo = o
            else:
                mass = 0.0
                for k in range(size):
                    qq[k] = qs[a + k]
                    tt[k] = -ts[a + k]
                    mass += qs[a + k]
                oo = -(o + mass)
            chunks, pieces = _curtain(qq, tt, oo, n, sign, first, largest, slack, limit, chunk_end, split, m_a,
                                      m_b, total, ptr, pc_start, pc_len)
            if chunks >= 0:
                break
        limit *= 8
    return sign, chunks, chunk_end, split, m_a, m_b, total, ptr, pc_start, pc_len


@_jit
def _mark_chunk(position, a, size, sign, chunks, chunk_end, m_a, m_b, qs, ts):
    """Chunk and part-A probability ``lambda`` of the draft at chain position ``position`` in the block
    starting at ``a``."""
    local = position - a
    j = size - 1 - local if sign > 0 else local  # index in processing order
    c = np.searchsorted(chunk_end[:chunks], j, side="right")
    rho = sign * ts[position] / qs[position]
    if np.isnan(m_a[c]):
        return c, 1.0
    lam = (rho - m_b[c]) / (m_a[c] - m_b[c])
    return c, min(max(lam, 0.0), 1.0)


@_jit
def _one_pick(p, q, qs, ts, rs, order, cuts, suffix, first_tail, n, drafts, u, first, largest, slack, budget):
    """The index of the draft ``optimal-iid`` picks (chooses as its candidate) among one row of
    ``drafts``, drawn in one compiled call: find the drafts on the chain, build the left curtain of
    the first block they reach, draw the marks; the largest wins. ``u`` holds ``2 n`` uniforms
    (draft ``i``'s mark uses ``u[2 i]`` and ``u[2 i + 1]``)."""
    m = drafts.shape[0]
    pos, blk, b = _find_drafts(p, q, rs, order, cuts, drafts)
    a = cuts[b]
    size = cuts[b + 1] - a
    sign, chunks, chunk_end, split, m_a, m_b, total, ptr, pc_start, pc_len = _block_curtain(
        qs, ts, cuts, suffix, first_tail, n, b, first, largest, slack, budget)
    # marks of the drafts in block b; the largest (on the real axis) wins
    best = -np.inf
    winner = -1
    for i in range(m):
        if blk[i] != b:
            continue
        c, lam = _mark_chunk(pos[i], a, size, sign, chunks, chunk_end, m_a, m_b, qs, ts)
        mark = sign * _mark(c, u[2 * i + 1] < lam, u[2 * i], split, total, ptr, pc_start, pc_len)
        if winner < 0 or mark > best:
            best = mark
            winner = i
    return winner


@_jit
def _one_choice(p, q, qs, ts, rs, order, cuts, suffix, first_tail, n, drafts, xg, wg, first, largest, slack,
                budget, out):
    """``out[i] = P(draft i is picked)`` for one row of ``drafts`` (what
    :meth:`~mdsd_cli.verifiers.optimal.iid.OptimalIID.choice` computes for a row), in one compiled call:
    the drafts of the first block they reach race by their marks, each piecewise uniform on its chunk's
    run (part A with probability ``lambda``, pieces used from their top down, :func:`_mark`); the
    probability that mark ``i`` is the largest is integrated exactly between breakpoints by
    Gauss-Legendre (nodes ``xg``, weights ``wg`` on [-1, 1], exact for the degree of the product), then
    normalised to sum to one (their sum is 1 to rounding; unnormalised, two halves could each be an ulp
    above 0.5)."""
    m = drafts.shape[0]
    for i in range(m):
        out[i] = 0.0
    pos, blk, b = _find_drafts(p, q, rs, order, cuts, drafts)
    inb = np.flatnonzero(blk == b)
    k = inb.shape[0]
    if k == 1:
        out[inb[0]] = 1.0
        return
    a = cuts[b]
    size = cuts[b + 1] - a
    sign, chunks, chunk_end, split, m_a, m_b, total, ptr, pc_start, pc_len = _block_curtain(
        qs, ts, cuts, suffix, first_tail, n, b, first, largest, slack, budget)
    # every in-block draft's law as segments (lo, hi, probability) on the real axis (sign x the kernel's)
    most = 0
    for i in range(k):
        c, lam = _mark_chunk(pos[inb[i]], a, size, sign, chunks, chunk_end, m_a, m_b, qs, ts)
        most += 2 * (ptr[c + 1] - ptr[c])
    seg_lo = np.empty(most)
    seg_hi = np.empty(most)
    seg_w = np.empty(most)
    owner = np.empty(most, np.int64)
    count = 0
    for i in range(k):
        c, lam = _mark_chunk(pos[inb[i]], a, size, sign, chunks, chunk_end, m_a, m_b, qs, ts)
        a_mass = split[c]
        b_mass = total[c] - split[c]
        depth = 0.0  # x of _mark: the mass above the piece, from the run's top
        for j in range(ptr[c], ptr[c + 1]):
            L = pc_len[j]
            top = pc_start[j] + L
            for part in range(2):
                if part == 0:
                    x0, x1, mass, w = depth, min(depth + L, a_mass), a_mass, lam
                else:
                    x0, x1, mass, w = max(depth, a_mass), depth + L, b_mass, 1.0 - lam
                if x1 <= x0 or mass <= 0.0 or w <= 0.0:
                    continue
                lo = sign * (top - (x0 - depth))
                hi = sign * (top - (x1 - depth))
                if lo > hi:
                    lo, hi = hi, lo
                # a piece narrower than the float spacing at its position (a draft of q ~1e-16 of its
                # position, or denormal) collapses to hi == lo: kept as an atom, not dropped (its weight
                # would vanish and, through the others' distribution functions, every draft's win with it)
                seg_lo[count] = lo
                seg_hi[count] = hi
                seg_w[count] = w * ((x1 - x0) / mass)
                owner[count] = i
                count += 1
            depth += L
    points = np.empty(2 * count)
    for s in range(count):
        points[2 * s] = seg_lo[s]
        points[2 * s + 1] = seg_hi[s]
    points = np.unique(points)
    g = xg.shape[0]
    frac = np.empty(g)
    for t in range(g):
        frac[t] = 0.5 * (xg[t] + 1.0)
    F = np.empty((k, g))
    inside = np.empty(k)
    win = np.zeros(k)
    for r in range(points.shape[0] - 1):
        lo = points[r]
        hi = points[r + 1]
        if hi <= lo:
            continue
        F[:, :] = 0.0
        inside[:] = 0.0
        for s in range(count):
            i = owner[s]
            sa, sb, w = seg_lo[s], seg_hi[s], seg_w[s]
            if sb <= lo:
                for t in range(g):
                    F[i, t] += w
            elif sa < hi:  # [lo, hi] lies inside [sa, sb]
                for t in range(g):
                    F[i, t] += w * ((lo - sa) / (sb - sa) + (hi - lo) / (sb - sa) * frac[t])
                inside[i] += w * ((hi - lo) / (sb - sa))
        for i in range(k):
            if inside[i] > 0.0:
                acc = 0.0
                for t in range(g):
                    prod = 1.0
                    for other in range(k):
                        if other != i:
                            prod *= F[other, t]
                    acc += wg[t] * prod
                win[i] += inside[i] * 0.5 * acc
    for s in range(count):  # atoms: P(mark i = x is the largest) = w prod_l P(mark l < x), ties to the earlier draft
        if seg_hi[s] > seg_lo[s]:
            continue
        i = owner[s]
        x = seg_lo[s]
        prod = seg_w[s]
        for other in range(k):
            if other == i:
                continue
            below = 0.0
            for s2 in range(count):
                if owner[s2] != other:
                    continue
                sa, sb, w = seg_lo[s2], seg_hi[s2], seg_w[s2]
                if sb == sa:
                    if sa < x or (sa == x and other > i):
                        below += w
                elif sb <= x:
                    below += w
                elif sa < x:
                    below += w * ((x - sa) / (sb - sa))
            prod *= below
        win[i] += prod
    total_win = 0.0  # 1 but for rounding: normalised, so that no probability (or their sum) passes 1
    for i in range(k):
        total_win += win[i]
    for i in range(k):
        out[inb[i]] = win[i] / total_win if total_win > 0.0 else 0.0


@_jit
def _one_step(p, q, qs, ps, ts, rs, order, cuts, suffix, K, first_tail, n, drafts, u, first, largest, slack,
              budget):
    """One verification step of ``optimal-iid`` in one compiled call (what
    :meth:`~mdsd_cli.verifiers.optimal.iid.OptimalIID.sample` does for one row): the pick
    (:func:`_one_pick`), then accept it or draw from the residual. ``u`` holds ``2 n + 2`` uniforms."""
    m = drafts.shape[0]
    winner = _one_pick(p, q, qs, ts, rs, order, cuts, suffix, first_tail, n, drafts, u, first, largest, slack,
                       budget)
    z = _chain_position(drafts[winner], p, q, rs, order)
    accept = 1.0
    if ts[z] > 0.0 and ps[z] < ts[z]:
        accept = ps[z] / ts[z]
    if u[2 * m] < accept:
        return drafts[winner]
    # the residual (p - t)_+ lives on the capped tokens of A*
    total_w = 0.0
    for k in range(K):
        if ps[k] > ts[k]:
            total_w += ps[k] - ts[k]
    if total_w > 0.0:
        target = u[2 * m + 1] * total_w
        acc = 0.0
        last = 0
        for k in range(K):
            if ps[k] > ts[k]:
                acc += ps[k] - ts[k]
                last = k
                if acc > target:
                    return order[k]
        return order[last]
    target = u[2 * m + 1] * ps.sum()  # never used in law (the candidate is always accepted)
    acc = 0.0
    for k in range(ps.shape[0]):
        acc += ps[k]
        if acc > target:
            return order[k]
    return order[ps.shape[0] - 1]
