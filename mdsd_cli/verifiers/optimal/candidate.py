"""One candidate, then speculative sampling: the frame of the optimal verifiers.

A verifier of this family picks one draft ``Z`` with law ``t`` (the *candidate
law*), accepts it with probability ``min(1, p(Z) / t(Z))``, and otherwise draws
from the residual ``(p - t)_+`` normalised. Its output law is ``p`` for any
``t`` that really is the law of ``Z``, and its acceptance is ``sum min(p, t)``
when a rejected candidate's residual never lands on a draft. That sum is α*
exactly when

* ``t <= p`` on ``A*``, the largest minimising prefix of the chain (tokens by
  decreasing ``p / q``), and ``t(A*) = P(X hits A*)`` — a draft in ``A*`` always
  wins, so the residual lives on ``A*`` while the drafts missed it;
* ``t >= p`` off ``A*``.

This module computes such a ``t`` along the chain — ``min(p, lambda q)`` on
``A*`` and ``max(p, kappa q)`` off it, bases of the coverage polymatroid — and
the tight cuts of the chain (prefixes where the cumulative ``t`` meets
``P(X hits A_k)``), between which the *priority blocks* lie: a draft in an
earlier block always wins over drafts in later blocks. How a draft is chosen
inside a block is the concrete verifier's business
(:mod:`~mdsd_cli.verifiers.optimal.curtain`, :mod:`~mdsd_cli.verifiers.optimal.luce`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..._jit import numba_enabled
from ...samplers import ratio_order
from ...samplers.laws import WORSampler
from ..base import PreparedVerifier, drafted_mass

#: Relative gap under which a chain prefix counts as tight (block boundary).
TIGHT = 1e-12


def _capped(p, q, total):
    """``min(p, lam q)`` summing to ``total``; ``p``, ``q`` in decreasing ``p/q`` order.

    The capped tokens are a prefix ``[:k]``, so ``lam = (total - p[k:].sum()) / q[:k].sum()``
    exactly; ``t = q / q[:k].sum() * (...)`` never overflows, even for ``q`` near the
    float64 floor (where ``lam`` itself would).
    """
    if total >= p.sum():
        return p.copy()
    if total >= p[q > 0].sum():  # never for a minimising A* (it carries at least P(X hits A*))
        return np.where(q > 0, p, 0.0)
    pre_q = np.cumsum(q)  # q[:k+1].sum()
    suf_p = np.concatenate((np.cumsum(p[::-1])[::-1][1:], [0.0]))  # p[k+1:].sum()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lam = (total - suf_p) / pre_q
        nxt = np.concatenate((np.where(q[1:] > 0, p[1:] / q[1:], np.inf), [-np.inf]))
    ok = np.flatnonzero((pre_q > 0) & (lam >= nxt))  # the next token is not capped
    k = int(ok[0]) + 1 if ok.size else p.size
    t = p.copy()
    t[:k] = q[:k] / pre_q[k - 1] * (total - suf_p[k - 1])
    return np.minimum(t, p)


def _floored(p, q, total):
    """``max(p, kappa q)`` summing to ``total``; ``p``, ``q`` in decreasing ``p/q`` order.

    The floored tokens are a suffix ``[j:]``, so ``kappa = (total - p[:j].sum()) / q[j:].sum()``.
    """
    if total <= p.sum():
        return p.copy()
    pre_p = np.concatenate(([0.0], np.cumsum(p)))[:-1]  # p[:j].sum()
    suf_q = np.cumsum(q[::-1])[::-1]  # q[j:].sum()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        kappa = (total - pre_p) / suf_q
        prev = np.concatenate(([np.inf], np.where(q[:-1] > 0, p[:-1] / q[:-1], np.inf)))
    ok = np.flatnonzero((suf_q > 0) & (kappa <= prev))  # the previous token is not floored
    j = int(ok[-1]) if ok.size else 0
    t = p.copy()
    t[j:] = np.maximum(p[j:], q[j:] / suf_q[j] * (total - pre_p[j]))
    return t


def _tight_cuts(T, H, K):
    """Chain positions where the cumulative target meets the hit probability (plus 0, K, V)."""
    V = T.size - 1
    tight = np.abs(T - H) <= TIGHT * np.maximum(1.0, H)
    tight[[0, K, V]] = True
    return np.flatnonzero(tight)


def chain_targets(p: np.ndarray, q: np.ndarray, n: int, sampler, *, hits: bool = False):
    """The chain, the largest minimising prefix ``K``, the targets and the tight cuts.

    ``t = min(p, lambda q)`` on ``A* = chain[:K]`` (summing to ``P(X hits A*)``) and
    ``t = max(p, kappa q)`` after it (summing to ``P(X misses A*)``); the cuts are
    the chain prefixes where the cumulative target meets ``P(X hits A_k)``.
    Returns ``(order, K, t, cuts)`` with ``t`` indexed by token, and the hit
    probabilities ``H[k] = P(X hits A_k)`` after them with ``hits=True``. One
    compiled pass after the order and ``H`` (:func:`chain_targets_numpy` when
    numba is off); without replacement the order, ``H`` and the pass in one compiled
    call (:func:`~._candidate_kernels._pair_chain` for a pair, in closed form;
    :func:`~._candidate_kernels._wor_chain` for three drafts or more, by the quadrature).
    """
    fast = numba_enabled() and p.size > 1
    distinct = _wor_draws(sampler, q, n) if p.size > 1 else 0
    if distinct == 2 and fast:
        from ._candidate_kernels import _pair_chain

        V = p.size
        order, H, t, cuts = np.empty(V, np.int64), np.empty(V + 1), np.empty(V), np.empty(V + 2, np.int64)
        K, ncut = _pair_chain(np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64),
                              TIGHT, order, H, t, cuts)
        if K >= 0:
            return (order, int(K), t, cuts[:ncut], H) if hits else (order, int(K), t, cuts[:ncut])
    if distinct >= 3 and fast:
        return _wor_chain_targets(p, q, distinct, hits)
    order = wor_chain_order(p, q) if distinct >= 3 else ratio_order(p, q)
    H = sampler.hit_probability_chain(q, n, order)
    if not numba_enabled():
        return chain_targets_numpy(p, q, order, H, hits=hits)
    from ._candidate_kernels import _chain_targets

    V = p.size
    ts, cuts = np.empty(V), np.empty(V + 2, dtype=np.int64)
    K, ncut = _chain_targets(p[order], q[order], np.ascontiguousarray(H, dtype=np.float64), TIGHT, ts, cuts)
    t = np.empty(V)
    t[order] = ts
    if hits:
        return order, int(K), t, cuts[:ncut], H
    return order, int(K), t, cuts[:ncut]


def wor_chain_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The chain of three or more drafts without replacement: :func:`~mdsd_cli.samplers.ratio_order` (``p/q``
    decreasing), each run of exactly equal ratios reordered by decreasing ``q``, equal masses by index. Tied
    ratios may come in any order (``A*``, the candidate law and α* do not depend on it; the chords' choice
    rule does, and is exact along any such chain); grouped by mass, an n-gram pair's thousands of tied tokens
    join the hit chain's quadrature as a few dozen runs of one mass (:func:`~mdsd_cli._wor_loops._join_run`,
    ~4x cheaper on ``pydoc-ngram``). The compiled chain (:func:`~._candidate_kernels._ties_by_mass`) is the
    same order."""
    order = ratio_order(p, q)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.abs(q[order] / p[order])
    group = np.concatenate(([0], np.cumsum(~(key[1:] == key[:-1]))))  # NaN never ties (its q is 0 anyway)
    return order[np.lexsort((-q[order], group))]


def _wor_draws(sampler, q: np.ndarray, n: int) -> int:
    """The number of distinct drafts ``min(n, |supp q|)`` where the drafts are drawn without replacement
    (the plain ``wor`` sampler: a pair's hit chain has a closed form, :func:`~mdsd_cli._wor_kernel.pair_hit_chain`),
    else 0."""
    if type(sampler).hit_probability_chain is not WORSampler.hit_probability_chain:
        return 0
    return min(int(n), int(np.count_nonzero(q > 0)))


@functools.lru_cache(maxsize=32)
def wor_grid(n_eff: int) -> tuple:
    """``(m, h, unit, offsets, d)``: the hit chain's grid parameters for ``n_eff`` drafts without replacement
    (:func:`~mdsd_cli._wor_kernel.wor_hit_chain` takes them), computed once."""
    from ..._wor_kernel import default_step, grid_offsets, grid_step, left_tail_terms, left_unit

    m, h = grid_step(default_step(n_eff))
    return m, h, left_unit(n_eff), grid_offsets(m), left_tail_terms(h)


def _wor_chain_targets(p: np.ndarray, q: np.ndarray, n_eff: int, hits: bool):
    """:func:`chain_targets` for ``n_eff >= 3`` drafts without replacement in one compiled call
    (:func:`~._candidate_kernels._wor_chain`: the chain, the quadrature's grid and hit chain, the targets)."""
    from ..._wor_kernel import check_wor_drafts
    from ._candidate_kernels import _wor_chain

    check_wor_drafts(n_eff, int(np.count_nonzero(q > 0)))
    V = p.size
    order, t, cuts = np.empty(V, np.int64), np.empty(V), np.empty(V + 2, np.int64)
    K, ncut, H = _wor_chain(np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64),
                            n_eff, *wor_grid(n_eff), TIGHT, order, t, cuts)
    return (order, int(K), t, cuts[:ncut], H) if hits else (order, int(K), t, cuts[:ncut])


def chain_targets_numpy(p, q, order, H, *, hits: bool = False):
    """:func:`chain_targets` from the chain ``order`` and its hit probabilities ``H``, in numpy (the
    reference the compiled kernel is tested against)."""
    V = p.size
    P = np.concatenate(([0.0], np.cumsum(p[order])))
    g = H - P
    K = int(np.flatnonzero(g <= g.min() + 1e-13)[-1])  # the largest minimising prefix
    star, tail = order[:K], order[K:]
    t = np.zeros(V)
    if K:
        t[star] = _capped(p[star], q[star], float(H[K]))
    if K < V:
        t[tail] = _floored(p[tail], q[tail], float(1.0 - H[K]))
    T = np.concatenate(([0.0], np.cumsum(t[order])))
    if hits:
        return order, K, t, _tight_cuts(T, H, K), H
    return order, K, t, _tight_cuts(T, H, K)


def priority_blocks(order, K, cuts, q):
    """The runs of the chain between consecutive tight cuts (tokens with ``q > 0``).

    Returns ``[(tokens, end), ...]`` in priority order (``end`` is the chain position
    after the block) and the index of the first block after ``A* = chain[:K]``.
    """
    blocks, first_tail = [], None
    for a, b in zip(cuts[:-1], cuts[1:]):
        tokens = order[a:b]
        tokens = tokens[q[tokens] > 0]
        if tokens.size == 0:
            continue
        if a >= K and first_tail is None:
            first_tail = len(blocks)
        blocks.append((tokens, int(b)))
    return blocks, first_tail


def block_index(order, K, cuts, q):
    """:func:`priority_blocks` as arrays: ``(block, count, first_tail)``, ``block[token]`` the index
    of the token's block (the int64 maximum where ``q`` is 0), ``count`` the number of blocks."""
    if not numba_enabled():
        return block_index_numpy(order, K, cuts, q)
    from ._candidate_kernels import _block_index

    block = np.empty(order.size, dtype=np.int64)
    count, first_tail = _block_index(q[order], order, int(K), np.asarray(cuts, dtype=np.int64), block)
    return block, int(count), (int(first_tail) if first_tail >= 0 else None)


def block_index_numpy(order, K, cuts, q):
    """:func:`block_index` in numpy (the reference of the compiled one)."""
    sizes = np.diff(cuts)
    drafted = q[order] > 0
    per_position = np.repeat(np.arange(sizes.size), sizes)
    nonempty = np.zeros(sizes.size, dtype=bool)
    nonempty[per_position[drafted]] = True
    number = np.cumsum(nonempty) - 1
    block = np.full(order.size, np.iinfo(np.int64).max, dtype=np.int64)
    block[order[drafted]] = number[per_position[drafted]]
    tail = np.flatnonzero(nonempty & (np.asarray(cuts[:-1]) >= K))
    return block, int(nonempty.sum()), (int(number[tail[0]]) if tail.size else None)


@dataclass
class IIDChain:
    """Everything the optimal iid verifier needs, in chain order.

    ``order`` is the chain (tokens by decreasing ``p/q``, i.e. increasing ``rs = q/p``,
    ties by index); ``qs``, ``ps``, ``ts`` are ``q``, ``p`` and the candidate law along
    it; blocks are the runs ``cuts[i]:cuts[i+1]``, those from ``first_tail`` on lie
    after ``A*``. :meth:`positions` finds tokens on the chain.
    """

    order: np.ndarray
    qs: np.ndarray
    ps: np.ndarray
    ts: np.ndarray
    K: int
    cuts: np.ndarray
    first_tail: int
    alpha: float
    suffix: np.ndarray  # suffix[k] = qs[k:].sum(), summed from the end
    rs: np.ndarray  # q/p along the chain (+inf where p = 0 < q, NaN where p = q = 0)
    p: np.ndarray
    q: np.ndarray
    _inverse: np.ndarray | None = None

    def positions(self, tokens) -> np.ndarray:
        """Chain positions of ``tokens``: binary search on ``q/p`` for a few tokens, the
        inverse permutation (built once) for many."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if self._inverse is not None or tokens.size > 64:
            if self._inverse is None:
                self._inverse = np.empty(self.order.size, dtype=np.int64)
                self._inverse[self.order] = np.arange(self.order.size)
            return self._inverse[tokens]
        flat = tokens.ravel()
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            pf, qf = self.p[flat], self.q[flat]
            key = np.where(pf > 0, np.abs(qf / np.where(pf > 0, pf, 1.0)), np.where(qf > 0, np.inf, np.nan))
        # runs of ratios tied to rounding share one key (see _candidate_kernels.KEY_TIE)
        lo = np.searchsorted(self.rs, key * (1.0 - 1e-12), side="left")
        hi = np.searchsorted(self.rs, key * (1.0 + 1e-12), side="right")
        out = np.array([a + int(np.flatnonzero(self.order[a:b] == y)[0]) for a, b, y in zip(lo, hi, flat)],
                       dtype=np.int64)
        return out.reshape(tokens.shape)

    def block_of(self, positions):
        return np.searchsorted(self.cuts, positions, side="right") - 1

    def later_mass(self, block: int) -> float:
        """Draft mass of every block after ``block`` (summed, not ``1 -`` a prefix)."""
        return float(self.suffix[self.cuts[block + 1]])


def iid_chain(p: np.ndarray, q: np.ndarray, n: int) -> IIDChain:
    """:class:`IIDChain` for ``n`` iid drafts: one argsort and a few passes over V
    (compiled; :func:`iid_chain_numpy` when numba is off)."""
    if not numba_enabled():
        return iid_chain_numpy(p, q, n)
    from ._candidate_kernels import _iid_chain

    V = p.size
    # a value sort of the keys' bits truncated by `shift`, the token index in the low bits (ties and
    # near-ties by index), which the kernel repairs into the exact chain: cheaper than an argsort; keys,
    # sort and chain in one call
    shift = max(1, int(V - 1).bit_length())
    order = np.empty(V, dtype=np.int64)
    qs, ps, rs, ts, sq = np.empty(V), np.empty(V), np.empty(V), np.empty(V), np.empty(V + 1)
    cuts = np.empty(V + 2, dtype=np.int64)
    K, ncut, alpha = _iid_chain(np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64),
                                shift, n, TIGHT, order, qs, ps, rs, ts, sq, cuts)
    cuts = cuts[:ncut]
    first_tail = int(np.searchsorted(cuts, K, side="left"))
    return IIDChain(order, qs, ps, ts, int(K), cuts, first_tail, float(alpha), sq, rs, p, q)


def iid_chain_numpy(p: np.ndarray, q: np.ndarray, n: int) -> IIDChain:
    """:func:`iid_chain` in numpy (the reference the compiled kernel is tested against)."""
    V = p.size
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.where(p > 0, np.abs(q / np.where(p > 0, p, 1.0)), np.where(q > 0, np.inf, np.nan))
    order = np.lexsort((np.arange(V), key))  # ties by index, as the compiled kernel
    qs, ps = q[order], p[order]
    Qc = np.concatenate(([0.0], np.cumsum(qs)))
    np.clip(Qc, 0.0, 1.0, out=Qc)
    with np.errstate(divide="ignore"):
        H = -np.expm1(n * np.log1p(-Qc))
    P = np.concatenate(([0.0], np.cumsum(ps)))
    g = H - P
    K = int(np.flatnonzero(g <= g.min() + 1e-13)[-1])
    ts = np.empty(V)
    if K:
        ts[:K] = _capped(ps[:K], qs[:K], float(H[K]))
    if K < V:
        # P(X misses A*) from the exact tail mass: 1 - H[K] would lose it below 1e-16
        ts[K:] = _floored(ps[K:], qs[K:], float(qs[K:].sum()) ** n)
    sq = np.concatenate((np.cumsum(qs[::-1])[::-1], [0.0]))
    # tight cuts to relative precision: prefix sums of t against H on A*, suffix sums
    # against the miss probability sq^n after it
    T = np.concatenate(([0.0], np.cumsum(ts)))
    S = np.concatenate((np.cumsum(ts[::-1])[::-1], [0.0]))
    with np.errstate(divide="ignore"):
        H = np.where(Qc < 0.5, -np.expm1(n * np.log1p(-Qc)), 1.0 - sq ** n)
    M = sq ** n
    k = np.arange(V + 1)
    tight = np.where(k < K, np.abs(T - H) <= TIGHT * H, np.abs(S - M) <= TIGHT * M)
    tight[[0, K, V]] = True
    cuts = np.flatnonzero(tight)
    first_tail = int(np.searchsorted(cuts, K, side="left"))
    alpha = math.fsum(np.minimum(ps, ts))
    rs = key[order]
    return IIDChain(order, qs, ps, ts, K, cuts, first_tail, alpha, sq, rs, p, q)


class CandidateVerifier(PreparedVerifier):
    """Shared machinery: pick one candidate draft, then single-draft speculative sampling.

    Subclasses provide the candidate law ``t`` (:meth:`candidate_mass`), the exact
    choice probabilities ``P(Z = x_i | X)`` (:meth:`choice`) and a sampler of the
    chosen draft (:meth:`pick`); everything else follows.
    """

    def candidate_mass(self, tokens) -> np.ndarray:
        """``t`` at ``tokens``: the law of the candidate."""
        raise NotImplementedError

    def residual(self) -> np.ndarray:
        """The residual law ``(p - t)_+`` normalised (``[V]``; ``p`` if it is empty)."""
        raise NotImplementedError

    def draw_residual(self, size: int, rng) -> np.ndarray:
        law = self.residual()
        cdf = np.cumsum(law)
        return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), self.V - 1)

    def choice(self, drafts) -> np.ndarray:
        """``P(Z = x_i | X)`` for every draft instance ``[M, n]``."""
        raise NotImplementedError

    def pick(self, drafts, rng) -> np.ndarray:
        """The chosen draft token of each row of ``drafts [M, n]``."""
        raise NotImplementedError

    @property
    def candidate(self) -> np.ndarray:
        """The candidate law ``t`` as a ``[V]`` vector."""
        return self.candidate_mass(np.arange(self.V))

    def accept_probability(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens)
        c = self.candidate_mass(tokens)
        p = self.p[tokens]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(c > 0, np.minimum(1.0, p / np.where(c > 0, c, 1.0)), 0.0)

    def output_law(self, drafts):
        drafts = np.asarray(drafts)
        z = self.choice(drafts)[0]
        out = np.zeros(self.V)
        np.add.at(out, drafts, z * self.accept_probability(drafts))
        return out + (1.0 - out.sum()) * self.residual()

    def acceptance(self, drafts):
        drafts = np.atleast_2d(drafts)
        z = self.choice(drafts)
        taken = (z * self.accept_probability(drafts)).sum(axis=1)
        return taken + (1.0 - taken) * drafted_mass(self.residual(), drafts)

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        z = self.pick(drafts, rng)
        keep = rng.random(z.size) < self.accept_probability(z)
        out = z.copy()
        if not keep.all():
            out[~keep] = self.draw_residual(int((~keep).sum()), rng)
        return out
