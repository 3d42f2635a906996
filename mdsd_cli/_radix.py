"""Radix sorts (least significant digit first, 11-bit digits), compiled: a stable argsort of float64
keys (:func:`stable_argsort`, the order ``numpy.argsort(keys, kind="stable")`` gives, ties by index)
and an in-place sort of non-negative int64 words (:func:`sort_words`, the packed keys of the chain
orders).

``numpy``'s sorts cost 30-90 ns a key on vectors of a few thousand with many ties (a quicksort
degrades on runs of equal keys, and the stable sort is a merge), and its int64 value sort ~40 ns a word
at V = 152,064 on the bench machine; the tree verifiers sort several such vectors a step (the per-node
chains, ``select-race``'s race). A radix sort scatters the keys by
their top two digits (three past 16,384 keys: a race table of four children at V = 2,380 sorts its
9,520 keys ~20% faster with two), skipping a digit whose histogram is a single bucket, then
finishes each run of keys equal there by the whole key (insertion; the lower digits for a long run): the
same stable order as a scatter for every digit, in a third of them (V = 2,380: ~15 against ~40 µs). Float keys are mapped to unsigned integers in the same
order first: ``-0.0`` as ``+0.0`` and every NaN above ``+inf``, as ``numpy`` orders them. Keys that take few
values (at most a quarter of them, 1,024 at most: an n-gram pair's chain ties 2,380 keys on ~100 values, a
race table 9,520 on ~130) are counted instead (:func:`_few_argsort`: one pass through a hash table, the distinct
values sorted, one scatter; the race table ~2x faster), the same stable order. The compiled
loops live here, imported on first use (``mdsd --help`` never pays for numba); both functions fall back
to ``numpy`` without numba.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel, numba_enabled

#: Bits of a digit: six passes at most over a 64-bit key (numba reads these as compile-time constants).
WIDTH = 11
DIGITS = 6
BUCKETS = 1 << WIDTH
#: Digits scattered from the top of the words' range (22 bits: keys a few binades apart are told apart to
#: ~2^-17 of their size); the runs they leave tied are finished in place. One more above ``FEW`` words.
TOP = 2
FEW = 16384
#: Runs of equal top digits up to this long are finished by insertion; longer ones by their lower digits.
RUN = 32


@kernel
def _lsd_digits(bits, idx, carry, base, low, count):  # pragma: no cover - compiled (numpy's sorts are the reference)
    """Sort the unsigned words ``bits`` in place by the ``count`` digits of ``bits - base`` from bit ``low`` up,
    least significant first (stable), moving ``idx`` with them where ``carry``: one pass counts the digits'
    histograms, one scatter per digit that varies (``base`` at most every word)."""
    n = bits.shape[0]
    counts = np.zeros((count, BUCKETS), dtype=np.int64)
    mask = np.uint64(BUCKETS - 1)
    for i in range(n):
        u = bits[i] - base
        for b in range(count):
            counts[b, (u >> np.uint64(low + WIDTH * b)) & mask] += 1
    src, dst = bits, np.empty(n, dtype=np.uint64)
    isrc, idst = idx, np.empty(n if carry else 0, dtype=np.int64)
    start = np.empty(BUCKETS, dtype=np.int64)
    swapped = False
    for b in range(count):
        shift = np.uint64(low + WIDTH * b)
        if counts[b, ((src[0] - base) >> shift) & mask] == n:  # one bucket holds every word
            continue
        acc = 0
        for v in range(BUCKETS):
            start[v] = acc
            acc += counts[b, v]
        for i in range(n):
            u = src[i]
            d = ((u - base) >> shift) & mask
            k = start[d]
            start[d] = k + 1
            dst[k] = u
            if carry:
                idst[k] = isrc[i]
        src, dst = dst, src
        isrc, idst = idst, isrc
        swapped = not swapped
    if swapped:  # the sorted words (and indices) are in the scratch arrays: back in place
        for i in range(n):
            bits[i] = src[i]
        if carry:
            for i in range(n):
                idx[i] = isrc[i]


@kernel
def _lsd_sort(bits, idx, carry):  # pragma: no cover - compiled (numpy's sorts are the reference)
    """Sort the unsigned words ``bits`` in place (stable), moving ``idx`` with them where ``carry``: by the top
    :data:`TOP` digits of their offsets from the smallest word (one more above :data:`FEW` words), then every
    run equal there by the whole word: by insertion up to :data:`RUN` words (stable), by all its digits
    beyond. The order a scatter for every digit gives, in two or three scatters."""
    n = bits.shape[0]
    if n < 2:
        return
    lo, hi = bits[0], bits[0]
    for i in range(1, n):
        lo = min(lo, bits[i])
        hi = max(hi, bits[i])
    span = hi - lo
    width = 0  # bits of the span
    while width < 64 and (span >> np.uint64(width)) != np.uint64(0):
        width += 1
    if width == 0:
        return  # every word equal
    count = TOP if n <= FEW else TOP + 1
    low = max(width - WIDTH * count, 0)
    _lsd_digits(bits, idx, carry, lo, low, count)
    if low == 0:
        return
    shift = np.uint64(low)
    s = 0
    while s < n:
        head = (bits[s] - lo) >> shift
        e = s + 1
        same = True  # a run of one word repeated (exact ties) is in order already
        while e < n and ((bits[e] - lo) >> shift) == head:
            same = same and bits[e] == bits[s]
            e += 1
        if same:
            pass
        elif e - s > RUN:
            if carry:
                _lsd_digits(bits[s:e], idx[s:e], True, np.uint64(0), 0, DIGITS)
            else:
                _lsd_digits(bits[s:e], idx, False, np.uint64(0), 0, DIGITS)
        elif e - s > 1:
            for i in range(s + 1, e):  # insertion, stable: past strictly larger words only
                u = bits[i]
                j = i
                if carry:
                    x = idx[i]
                    while j > s and bits[j - 1] > u:
                        bits[j] = bits[j - 1]
                        idx[j] = idx[j - 1]
                        j -= 1
                    idx[j] = x
                else:
                    while j > s and bits[j - 1] > u:
                        bits[j] = bits[j - 1]
                        j -= 1
                bits[j] = u
        s = e


#: Distinct words (pairs of words) up to which :func:`_few_argsort` counts instead of scattering digits, at
#: most this share of the words (an input of more gives up after that many, for a few ns each), and its
#: open-addressing table's size in bits (four slots a distinct word at most).
FEW_DISTINCT = 1024
FEW_SHARE = 4
FEW_BITS = 12


@kernel
def _few_argsort(a, b, out, limit):  # pragma: no cover - compiled (numpy's stable argsort is the reference)
    """``out`` = the stable order of the unsigned words ``a`` (with ``b`` of the same size: of the pairs
    ``(a, b)``, ``a`` first) where they hold at most ``limit`` distinct values (pairs): each word's value is
    found in an open-addressing table as it is counted, the distinct values are sorted (a few hundred where
    an n-gram pair ties thousands of keys) and every index goes to its value's next place, in index order.
    Returns False, ``out`` unset, past ``limit`` distinct values (the caller's radix sort then)."""
    n = a.shape[0]
    pairs = b.shape[0] == n
    limit = min(limit, FEW_DISTINCT)
    size = 1 << FEW_BITS
    slot = np.full(size, -1, dtype=np.int64)
    va = np.empty(limit, dtype=np.uint64)
    vb = np.zeros(limit, dtype=np.uint64)
    count = np.zeros(limit, dtype=np.int64)
    entry = np.empty(n, dtype=np.int64)
    mul = np.uint64(0x9E3779B97F4A7C15)
    mask = np.int64(size - 1)
    d = 0
    for i in range(n):
        x = a[i]
        y = b[i] if pairs else np.uint64(0)
        e = np.int64(((x ^ (y * np.uint64(0xC2B2AE3D27D4EB4F))) * mul) >> np.uint64(64 - FEW_BITS))
        while True:
            s = slot[e]
            if s < 0:
                if d == limit:
                    return False
                slot[e] = d
                va[d] = x
                vb[d] = y
                s = d
                d += 1
                break
            if va[s] == x and vb[s] == y:
                break
            e = (e + np.int64(1)) & mask
        count[s] += 1
        entry[i] = s
    rank = np.arange(d)  # the distinct values in order: by b, then stably by a
    if pairs:
        kb = vb[:d].copy()
        _lsd_sort(kb, rank, True)
        ka = np.empty(d, dtype=np.uint64)
        for r in range(d):
            ka[r] = va[rank[r]]
        _lsd_sort(ka, rank, True)
    else:
        ka = va[:d].copy()
        _lsd_sort(ka, rank, True)
    start = np.empty(d, dtype=np.int64)
    acc = 0
    for r in range(d):
        s = rank[r]
        start[s] = acc
        acc += count[s]
    for i in range(n):
        s = entry[i]
        out[start[s]] = i
        start[s] += 1
    return True


@kernel
def _float_words_into(x):  # pragma: no cover - compiled (through _ties_by_mass, against numpy's sort)
    """Unsigned words in the order of the float64 ``x`` as numpy sorts them (negative keys with every bit flipped,
    others with the sign bit set, ``-0.0`` as ``+0.0``, every NaN last: one word above all others), in place: ``x``
    is overwritten and returned as its uint64 view (no copy: each entry is read before its word is written)."""
    bits = x.view(np.uint64)
    sign = np.uint64(1) << np.uint64(63)
    top = ~np.uint64(0)
    for i in range(x.shape[0]):
        v = x[i]
        if v != v:
            bits[i] = top
        else:
            u = np.uint64(0) if v == 0.0 else bits[i]  # -0.0 as +0.0
            bits[i] = ~u if u & sign else u | sign
    return bits


@kernel
def _float_words(keys):  # pragma: no cover - compiled (through _radix_argsort, against numpy's)
    """Unsigned words in the order of the float64 ``keys`` as numpy sorts them: negative keys with every bit
    flipped, others with the sign bit set, ``-0.0`` as ``+0.0`` and every NaN last (one word above all others);
    ``keys`` are left as they are (:func:`_float_words_into` on a copy)."""
    return _float_words_into(keys + 0.0)


@kernel
def _radix_argsort(keys, out):  # pragma: no cover - compiled (numpy's stable argsort is the reference)
    """``out`` = the stable ascending order of ``keys`` (float64, 1-D): the keys as unsigned words in the same
    order, sorted with their indices (counted where they take few values, :func:`_few_argsort`)."""
    _argsort_words(_float_words(keys), out)


@kernel
def _radix_argsort_into(keys, out):  # pragma: no cover - compiled (through race_tables, against numpy's)
    """:func:`_radix_argsort` that overwrites ``keys`` with their words (no copy; the caller is done with them)."""
    _argsort_words(_float_words_into(keys), out)


@kernel
def _argsort_words(bits, out):  # pragma: no cover - compiled
    """``out`` = the stable order of the unsigned words ``bits`` (sorted in place unless counted)."""
    n = bits.shape[0]
    if n > 2 * FEW_SHARE and _few_argsort(bits, bits[:0], out, n // FEW_SHARE):
        return
    for i in range(n):
        out[i] = i
    _lsd_sort(bits, out, True)


@kernel
def _radix_sort_words(a):  # pragma: no cover - compiled (numpy's sort is the reference)
    """Sort non-negative int64 words in place (their order as unsigned words is theirs as integers)."""
    _lsd_sort(a.view(np.uint64), np.empty(0, dtype=np.int64), False)


def sort_words(a: np.ndarray) -> None:
    """Sort a 1-D array of non-negative int64 words in place (the packed keys of the chain orders: a key's
    bits with the token index in the low ones), by the compiled radix sort when numba is on: ~1.5x faster
    than ``numpy.sort`` at V = 2,380 and 4x at V = 152,064 on the bench machine."""
    if a.ndim != 1 or a.dtype != np.int64 or not a.flags.c_contiguous or not numba_enabled() or a.size < 2:
        a.sort()
        return
    if a.min() < 0:  # as unsigned words, negative ones would sort last: numpy's sort instead
        a.sort()
        return
    _radix_sort_words(a)


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``numpy.argsort(keys, kind="stable")`` for a 1-D float64 vector (int64 indices), by the compiled radix
    sort when numba is on."""
    keys = np.asarray(keys)
    if keys.dtype != np.float64 or keys.ndim != 1 or not numba_enabled() or keys.size < 2:
        return np.argsort(keys, kind="stable")  # other dtypes as they are (int64 above 2^53 is not a float64)
    keys = np.ascontiguousarray(keys)
    out = np.empty(keys.size, dtype=np.int64)
    _radix_argsort(keys, out)
    return out


__all__ = ["sort_words", "stable_argsort"]
