"""Draft samplers: how the n drafts of one step are drawn from the draft distribution q.

Each sampler, registered under its CLI name in :data:`SAMPLERS`, can

* sample draft tuples (:meth:`DraftSampler.sample`),
* give ``P(X hits A_k)`` for every prefix ``A_k`` of a chain of nested token
  sets in one vectorised pass (:meth:`DraftSampler.hit_probability_chain`),
* order the tokens so that some prefix minimises the dual of the optimal
  acceptance problem (:meth:`DraftSampler.chain_order`),
* enumerate the exact law of the draft tuple for small V (:meth:`DraftSampler.tuple_law`).

=========  ====================================================================
``iid``    n independent draws from q (with replacement)
``wor``    n draws without replacement (sequential, renormalised)
``greedy`` the n-1 most probable tokens of q (ties by index) plus one draw from
           q restricted to the other tokens
``hub``    SpecHub (n = 2): a = argmax q, x1 ~ q, x2 = a if x1 != a else a draw
           from q without a
=========  ====================================================================

When q has fewer than n tokens of positive mass, ``wor``, ``greedy`` and ``hub``
return the whole support (fewer than n drafts). Ties in q are broken by token
index everywhere.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .._jit import numba_enabled
from .._wor_kernel import wor_hit_chain
from ..distributions import check_drafts
from ..errors import USE_CHAIN, InputError, SizeLimitError, count_text

#: Largest number of draft tuples :meth:`DraftSampler.tuple_law` will enumerate.
MAX_TUPLES = 5_000_000


def top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most probable tokens of ``q`` in decreasing order, ties by lower index.

    ``O(V)`` via ``numpy.partition`` (plus sorting the ``k`` winners).
    """
    q = np.asarray(q, dtype=np.float64)
    V = q.size
    k = max(0, min(int(k), V))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if k == V:
        sel = np.arange(V)
    else:
        threshold = np.partition(q, V - k)[V - k]  # the k-th largest value
        above = np.flatnonzero(q > threshold)
        tied = np.flatnonzero(q == threshold)[: k - above.size]
        sel = np.concatenate((above, tied))
    return sel[np.lexsort((sel, -q[sel]))].astype(np.int64)


#: More tied keys than this in a row: :func:`ratio_order` sorts the row stably instead of fixing its ties.
MANY_TIES = 64


def ratio_order(p: np.ndarray, q: np.ndarray, *, canonical: bool = True) -> np.ndarray:
    """Tokens sorted by ``p(i)/q(i)`` in decreasing order, along the last axis.

    ``q(i) = 0 < p(i)`` counts as ``+inf``; ``p(i) = q(i) = 0`` goes last. With
    ``canonical`` (default), ties are broken by token index (lowest first);
    otherwise their order is whatever ``numpy.argsort`` gives (deterministic for
    a given input, and it never changes α*).
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    # Ascending q/p is descending p/q: q = 0 < p gives 0 (first), p = 0 < q gives
    # inf, and 0/0 gives NaN, which argsort puts last.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.abs(q / p)  # abs: a -0.0 entry must not turn into -inf
    if canonical and key.ndim == 1 and key.size > 1 and numba_enabled():
        from .._radix import stable_argsort  # a stable radix sort: ties by index in one go

        return stable_argsort(key)
    order = np.argsort(key, axis=-1)
    if not canonical:
        return order
    sorted_key = np.take_along_axis(key, order, axis=-1)
    a, b = sorted_key[..., 1:], sorted_key[..., :-1]
    tie = (a == b) | (np.isnan(a) & np.isnan(b))
    if tie.any():  # make ties canonical: lower index first
        if order.ndim == 1:
            # many ties (smoothed n-gram laws): a stable sort of the whole row is cheaper than fixing them
            order = (np.argsort(key, kind="stable") if np.count_nonzero(tie) > MANY_TIES
                     else _sort_ties(order, sorted_key, tie))
        else:
            for r in np.flatnonzero(tie.any(axis=1)):
                order[r] = (np.argsort(key[r], kind="stable") if np.count_nonzero(tie[r]) > MANY_TIES
                            else _sort_ties(order[r], sorted_key[r], tie[r]))
    return order


def packed_ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """:func:`ratio_order` by a value sort instead of an argsort (``[N, V]`` rows).

    The non-negative key ``q/p`` is monotone in its IEEE bit pattern; its low
    ``b = bits(V - 1)`` mantissa bits are replaced by the token index and the
    int64 words are sorted in place (a compiled radix sort, :func:`~mdsd_cli._radix.sort_words`;
    ``numpy.sort`` without numba: both cheaper than an ``argsort``). Ties go to the lower index; keys
    closer than ``2^-(52 - b)`` relative are ordered by index too, which can
    move α* by at most about that much (``b = 18`` at V = 152,064: 6e-11). Tokens with
    ``p = q = 0`` share the ``+inf`` key of those with ``p = 0 < q`` (by index among them; last either
    way, and of no mass), where :func:`ratio_order` puts them after.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    V = p.shape[-1]
    shift = max(1, int(V - 1).bit_length())
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.abs(q / p)
    key[np.isnan(key)] = np.inf  # p = q = 0: with the p = 0 < q tokens (+inf) at the end, by index
    packed = key.view(np.int64)
    packed >>= shift
    packed <<= shift
    packed |= np.arange(V, dtype=np.int64)
    if numba_enabled() and packed.flags.c_contiguous:
        from .._radix import sort_words  # a radix sort of each row: 1.5-4x numpy's on these words

        for row in packed.reshape(-1, V):
            sort_words(row)
    else:
        packed.sort(axis=-1)
    packed &= (1 << shift) - 1
    return packed


def _sort_ties(order, sorted_key, tie):
    pos = np.flatnonzero(np.concatenate(([False], tie)) | np.concatenate((tie, [False])))
    sub = order[pos]
    order = order.copy()
    # runs of equal keys are contiguous and keys ascend, so sorting the tied
    # positions by (key, index) keeps every run in place
    order[pos] = sub[np.lexsort((sub, np.nan_to_num(sorted_key[pos], nan=np.inf, posinf=np.finfo(float).max)))]
    return order


@dataclass(frozen=True)
class DraftSetLaw:
    """The exact law of the *set* of distinct drafts.

    Attributes
    ----------
    members : ndarray int64 ``[M, k]``
        One row per set with positive probability; tokens in increasing order,
        padded with -1 (``iid`` sets can be smaller than n).
    prob : ndarray float64 ``[M]``
        Probability of each set; sums to 1.
    """

    members: np.ndarray
    prob: np.ndarray

    @property
    def num_sets(self) -> int:
        return int(self.prob.size)

    @property
    def num_edges(self) -> int:
        """Number of (set, token in set) pairs: the variables of the flow LP."""
        return int(np.count_nonzero(self.members >= 0))


def set_law_from_tuples(tuples: np.ndarray, prob: np.ndarray) -> DraftSetLaw:
    """Merge a tuple law into the law of the set of distinct drafts."""
    pad = np.iinfo(np.int64).max
    rows = np.sort(np.asarray(tuples, dtype=np.int64), axis=1)
    repeat = np.zeros(rows.shape, dtype=bool)
    repeat[:, 1:] = rows[:, 1:] == rows[:, :-1]
    rows = np.sort(np.where(repeat, pad, rows), axis=1)  # repeats move to the end
    keys, inverse = np.unique(rows, axis=0, return_inverse=True)
    merged = np.bincount(inverse.ravel(), weights=prob, minlength=keys.shape[0])
    keep = merged > 0
    keys = np.where(keys == pad, -1, keys[:, :])[keep]
    width = int(np.count_nonzero(keys >= 0, axis=1).max()) if keys.size else 0
    return DraftSetLaw(members=keys[:, :width], prob=merged[keep])


#: Kinds of draft law that never repeat a token within a tuple (all but iid).
DISTINCT_KINDS = frozenset({"wor", "greedy", "hub", "topk", "hybrid"})


class DraftSampler:
    """Base class of the draft samplers; subclasses implement the law.

    ``name`` is the sampler's spec as the user writes it (``wor``,
    ``wor:temperature=0.8``, ``hybrid:m=2``); ``kind`` is the family whose law
    it follows once its draft distribution is known (``wor`` for both of the
    first two): the solvers and verifiers dispatch on ``kind`` after replacing
    ``q`` by :meth:`draft_distribution`.
    """

    name: str = ""
    kind: str = ""
    description: str = ""
    #: If set, the only number of drafts the sampler is defined for.
    fixed_n: int | None = None

    def check_n(self, n) -> int:
        n = check_drafts(n)
        if self.fixed_n is not None and n != self.fixed_n:
            raise InputError(
                f"{self.name} drafts are defined for n = {self.fixed_n} only, got n = {n}"
            )
        return n

    @property
    def base(self) -> DraftSampler:
        """The sampler that draws from :meth:`draft_distribution` (``self`` unless a transform is applied)."""
        return self

    def draft_distribution(self, q: np.ndarray) -> np.ndarray:
        """The law the drafter really samples from, ``[V]`` or ``[N, V]`` (``q`` itself here)."""
        return q

    # --- laws -------------------------------------------------------------------------
    def num_drafts(self, q: np.ndarray, n: int) -> int:
        """How many drafts a tuple has for this ``q`` (n, or the support size if smaller)."""
        return min(n, int(np.count_nonzero(q > 0)))

    def sample(self, q: np.ndarray, n: int, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draft tuples as an int64 array ``[size, num_drafts]``."""
        raise NotImplementedError

    def hit_probability_chain(self, q: np.ndarray, n: int, order: np.ndarray) -> np.ndarray:
        """``H[k] = P(X hits {order[0..k-1]})`` for ``k = 0..V`` (one ``q`` row)."""
        raise NotImplementedError

    def chain_order(self, p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
        """An order of the tokens some prefix of which minimises ``1 - p(A) + P(X hits A)``."""
        return ratio_order(p, q)

    def tuple_law(self, q: np.ndarray, n: int, *, max_tuples: int = MAX_TUPLES):
        """Exact law of the draft tuple: ``(tuples [M, k] int64, prob [M])``."""
        raise NotImplementedError

    def set_law(self, q: np.ndarray, n: int, *, max_tuples: int = MAX_TUPLES) -> DraftSetLaw:
        """Exact law of the set of distinct drafts (tuples merged)."""
        tuples, prob = self.tuple_law(q, n, max_tuples=max_tuples)
        return set_law_from_tuples(tuples, prob)

    def estimate_tuples(self, q: np.ndarray, n: int) -> int:
        """Number of draft tuples :meth:`tuple_law` would enumerate."""
        raise NotImplementedError

    def _check_enumerable(self, q, n, max_tuples):
        count = self.estimate_tuples(q, n)
        if count > max_tuples:
            raise SizeLimitError(
                f"the exact {self.name} draft law for V={q.size}, n={n} has {count_text(count)} tuples "
                f"(limit {count_text(max_tuples)}); use the chain solver ({USE_CHAIN}), which needs no enumeration"
            )


#: Inverse-CDF draws from weights summing to less than this rescale them by 2^600 first (exact),
#: so that ``u * total`` keeps its digits when the mass left is near the float64 floor.
TINY_MASS = 1e-290


def last_positive(weights: np.ndarray) -> int:
    """Index of the last entry with positive weight (0 if there is none)."""
    return max(int(weights.size - 1 - np.argmax(weights[::-1] > 0)), 0)


def _cdf_draw(q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws from the weights ``q`` (any positive total) for uniforms ``u``.

    Never returns a token of weight 0: rounding at the top end goes to the last
    positive token, and tiny totals are rescaled exactly before the search.
    """
    cdf = np.cumsum(q)
    if cdf[-1] < TINY_MASS:
        cdf = np.cumsum(np.ldexp(q, 600))
    idx = np.searchsorted(cdf, u * cdf[-1], side="right")
    return np.minimum(idx, last_positive(q))


class IIDSampler(DraftSampler):
    name = "iid"
    kind = "iid"
    description = "n independent draws from q (with replacement)"

    def num_drafts(self, q, n):
        return n

    def sample(self, q, n, rng, size):
        return _cdf_draw(q, rng.random((size, n))).astype(np.int64)

    def hit_probability_chain(self, q, n, order):
        Q = np.concatenate(([0.0], np.cumsum(q[order])))
        Q = np.clip(Q, 0.0, 1.0)
        # 1 - (1 - Q)^n without cancellation for small Q
        with np.errstate(divide="ignore"):
            return -np.expm1(n * np.log1p(-Q))

    def estimate_tuples(self, q, n):
        return int(np.count_nonzero(q > 0)) ** n

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        self._check_enumerable(q, n, max_tuples)
        support = np.flatnonzero(q > 0)
        m = support.size
        index = np.arange(m ** n, dtype=np.int64)  # at most max_tuples: the digits below fit int64
        # mixed radix, first draft most significant (the order numpy.meshgrid's "ij" gives, without its 32-axis cap)
        digits = np.stack([(index // m ** (n - 1 - j)) % m for j in range(n)], axis=1)
        tuples = support[digits].astype(np.int64)
        return tuples, np.prod(q[tuples], axis=1)

    def set_law(self, q, n, *, max_tuples=MAX_TUPLES):
        # Multisets instead of tuples (n! fewer): P = n!/prod(c!) prod q^c.
        support = np.flatnonzero(q > 0)
        count = math.comb(support.size + n - 1, n)
        if count > max_tuples or count * n > 4 * max_tuples:  # the multisets' table holds count x n ids
            self._check_enumerable(q, n, max_tuples)
        multisets = np.array(list(itertools.combinations_with_replacement(support, n)), dtype=np.int64)
        multisets = multisets.reshape(-1, n)
        log_prob = np.log(q[multisets]).sum(axis=1) + math.lgamma(n + 1)
        # divide by prod(c!) over runs of equal tokens
        same = np.zeros(multisets.shape, dtype=np.int64)
        for j in range(1, n):
            same[:, j] = np.where(multisets[:, j] == multisets[:, j - 1], same[:, j - 1] + 1, 0)
        log_prob -= np.log(same + 1).sum(axis=1)
        return set_law_from_tuples(multisets, np.exp(log_prob))


class WORSampler(DraftSampler):
    name = "wor"
    kind = "wor"
    description = "n draws without replacement (sequential, renormalised)"

    def sample(self, q, n, rng, size):
        k = self.num_drafts(q, n)
        out = np.empty((size, k), dtype=np.int64)
        cdf = np.cumsum(q)
        total = cdf[-1]
        last = last_positive(q)
        for step in range(k):
            active = np.arange(size)
            for _ in range(64):  # rejection: redraw from q until the token is new
                draw = np.minimum(np.searchsorted(cdf, rng.random(active.size) * total, side="right"), last)
                fresh = ~np.any(out[active, :step] == draw[:, None], axis=1)
                out[active[fresh], step] = draw[fresh]
                active = active[~fresh]
                if active.size == 0:
                    break
            for i in active:  # q concentrated on drawn tokens: draw exactly from the rest
                rest = q.copy()
                rest[out[i, :step]] = 0.0
                out[i, step] = _cdf_draw(rest, rng.random(1))[0]
        return out

    def hit_probability_chain(self, q, n, order):
        return wor_hit_chain(q[order], n)

    def estimate_tuples(self, q, n):
        m = int(np.count_nonzero(q > 0))
        return math.perm(m, min(n, m))

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        self._check_enumerable(q, n, max_tuples)
        support = np.flatnonzero(q > 0)
        k = min(n, support.size)
        tuples = np.array(list(itertools.permutations(support, k)), dtype=np.int64).reshape(-1, k)
        prob = np.ones(tuples.shape[0])
        # blocks of tuples, so that the [tuples, V] mask stays small (V = 1,000 at n = 2 has a million tuples)
        step = max(1, (1 << 22) // max(q.size, 1))
        for start in range(0, tuples.shape[0], step):
            block = tuples[start : start + step]
            rows = np.arange(block.shape[0])
            taken = np.zeros((block.shape[0], q.size), dtype=bool)
            for j in range(k):
                remaining = (q[None, :] * ~taken).sum(axis=1)  # summed, not 1 - cumsum: no cancellation
                prob[start : start + step] *= q[block[:, j]] / remaining
                taken[rows, block[:, j]] = True
        return tuples, prob


class GreedySampler(DraftSampler):
    name = "greedy"
    kind = "greedy"
    description = "the n-1 most probable tokens of q plus one draw from the rest"

    def top_set(self, q, n) -> np.ndarray:
        """The deterministic drafts: top n-1 tokens (or the whole support if it has < n tokens)."""
        m = int(np.count_nonzero(q > 0))
        if m < n:
            return top_tokens(q, m)
        return top_tokens(q, n - 1)

    def sample(self, q, n, rng, size):
        top = self.top_set(q, n)
        if int(np.count_nonzero(q > 0)) < n:
            return np.broadcast_to(top, (size, top.size)).copy()
        rest = q.copy()
        rest[top] = 0.0
        last = _cdf_draw(rest, rng.random(size))
        return np.concatenate((np.broadcast_to(top, (size, top.size)), last[:, None]), axis=1)

    def hit_probability_chain(self, q, n, order):
        V = q.size
        in_order = np.concatenate(([0.0], np.cumsum(q[order])))
        if int(np.count_nonzero(q > 0)) < n:  # drafts = the whole support
            return (in_order > 0).astype(np.float64)
        top = self.top_set(q, n)
        is_top = np.zeros(V, dtype=bool)
        is_top[top] = True
        rest_mass = q[~is_top].sum()
        H = np.minimum(in_order / rest_mass, 1.0)
        hits_top = np.concatenate(([False], np.logical_or.accumulate(is_top[order])))
        H[hits_top] = 1.0
        return H

    def chain_order(self, p, q, n):
        # The plain p/q order is not enough: a top token with a large ratio would
        # force every later prefix to hit T. Sets meeting T never help (their
        # value is >= 1), so T goes last and the rest follows p/q.
        order = ratio_order(p, q)
        if int(np.count_nonzero(q > 0)) < n:
            return order
        is_top = np.zeros(q.size, dtype=bool)
        is_top[self.top_set(q, n)] = True
        flags = is_top[order]
        return np.concatenate((order[~flags], order[flags]))

    def closed_form(self, p, q, n):
        """``alpha* = 1 - sum_{i not in T} (p(i) - q(i)/(1 - q(T)))_+`` and the minimising set."""
        top = self.top_set(q, n)
        if int(np.count_nonzero(q > 0)) < n:
            outside = q <= 0
            return 1.0 - p[outside].sum(), np.flatnonzero(outside & (p > 0))
        rest = q.copy()
        rest[top] = 0.0
        r = rest / rest.sum()
        gain = p - r
        gain[top] = 0.0
        winners = np.flatnonzero(gain > 0)
        return 1.0 - gain[winners].sum(), winners

    def estimate_tuples(self, q, n):
        m = int(np.count_nonzero(q > 0))
        return 1 if m < n else m - (n - 1)

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        top = self.top_set(q, n)
        if int(np.count_nonzero(q > 0)) < n:
            return top[None, :].copy(), np.ones(1)
        rest = q.copy()
        rest[top] = 0.0
        last = np.flatnonzero(rest > 0)
        tuples = np.concatenate((np.broadcast_to(top, (last.size, top.size)), last[:, None]), axis=1)
        return tuples.astype(np.int64), rest[last] / rest[last].sum()


class TopKSampler(GreedySampler):
    """The deterministic top k: the n most probable tokens of q, most probable first (EAGLE-2/3, Medusa).

    No randomness: the tuple law is one tuple. The best acceptance any lossless verifier reaches is
    ``alpha*_topk = p(T)``, T the top set (the output is a draft only if it lies in T, and Y ~ p gets
    exactly that), which :class:`~mdsd_cli.verifiers.nss.TopK` (target sampling) reaches.
    """

    name = "topk"
    kind = "topk"
    description = "the n most probable tokens of q, no randomness (EAGLE-2/3, Medusa)"

    def top_set(self, q, n) -> np.ndarray:
        return top_tokens(q, min(int(n), int(np.count_nonzero(q > 0))))

    def sample(self, q, n, rng, size):
        top = self.top_set(q, n)
        return np.broadcast_to(top, (size, top.size)).astype(np.int64)

    def _is_top(self, q, n) -> np.ndarray:
        is_top = np.zeros(q.size, dtype=bool)
        is_top[self.top_set(q, n)] = True
        return is_top

    def hit_probability_chain(self, q, n, order):
        return np.concatenate(([False], np.logical_or.accumulate(self._is_top(q, n)[order]))).astype(np.float64)

    def closed_form(self, p, q, n):
        """``alpha* = p(T)``; the minimising set is every token outside T that p gives mass."""
        is_top = self._is_top(q, n)
        return float(p[is_top].sum()), np.flatnonzero(~is_top & (p > 0))

    def estimate_tuples(self, q, n):
        return 1

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        return self.top_set(q, n)[None, :].astype(np.int64), np.ones(1)


class HubSampler(GreedySampler):
    name = "hub"
    kind = "hub"
    description = "SpecHub pairs (n = 2): x1 ~ q, x2 = argmax q unless x1 is it"
    fixed_n = 2

    def hub(self, q) -> int:
        return int(top_tokens(q, 1)[0])

    def sample(self, q, n, rng, size):
        a = self.hub(q)
        if int(np.count_nonzero(q > 0)) < 2:
            return np.full((size, 1), a, dtype=np.int64)
        first = _cdf_draw(q, rng.random(size))
        rest = q.copy()
        rest[a] = 0.0
        other = _cdf_draw(rest, rng.random(size))
        second = np.where(first == a, other, a)
        return np.stack((first, second), axis=1).astype(np.int64)

    def estimate_tuples(self, q, n):
        m = int(np.count_nonzero(q > 0))
        return 1 if m < 2 else 2 * (m - 1)

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        a = self.hub(q)
        if int(np.count_nonzero(q > 0)) < 2:
            return np.array([[a]], dtype=np.int64), np.ones(1)
        others = np.flatnonzero((q > 0) & (np.arange(q.size) != a))
        rest_mass = q[others].sum()
        first = np.stack((others, np.full(others.size, a)), axis=1)  # (i, a): x1 = i
        second = np.stack((np.full(others.size, a), others), axis=1)  # (a, i): x1 = a
        prob = np.concatenate((q[others], q[a] * q[others] / rest_mass))
        return np.concatenate((first, second)).astype(np.int64), prob

