"""Recursive rejection sampling: ``rrs`` (iid drafts) and ``rrsw`` (drafts without replacement).

``p_1 = p``; for ``k = 1..n`` accept ``x_k`` with probability
``min(1, p_k(x_k) / q_k(x_k))``; on rejection ``p_{k+1} = norm((p_k - q_k)_+)``;
if every draft is rejected, ``Y ~ p_{n+1}``. For ``rrs`` ``q_k = q``; for
``rrsw`` ``q_k`` is ``q`` without ``x_1..x_{k-1}``, renormalised. Every residual
is ``(p - C_k q)_+`` normalised (see :mod:`.residual`), so the conditional
acceptance ``1 - prod_k (1 - a_k)`` costs ``O(n log V)`` per tuple.

For ``rrs`` the ``C_k`` do not depend on the drafts and the rate telescopes:

.. math:: \\alpha_{rrs} = 1 - \\prod_k \\big(1 - \\sum_i \\min(p_k(i), q(i))\\big) = 1 - G(C_{n+1}).

For ``rrsw``, ``C`` grows like ``1 / s_k``: when the undrafted mass can fall
near the float64 floor (draft probabilities below :data:`WIDE_BELOW`, as
``softmax`` at temperatures near 0 produces), ``C`` would overflow and the
products lose their digits in denormals, so such pairs are computed in
extended precision (``numpy.longdouble``, 64-bit mantissa and 15-bit exponent
on x86-64; refused where ``longdouble`` is only float64).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..samplers import top_tokens
from .base import PreparedVerifier
from .residual import ResidualFamily

#: ``rrsw`` computes pairs whose smallest positive draft probability is below this in extended precision.
WIDE_BELOW = 1e-290
_WIDE = np.longdouble if np.finfo(np.longdouble).maxexp > np.finfo(np.float64).maxexp else None


class _RecursiveRejection(PreparedVerifier):
    #: dtype of the path computations (float64, or longdouble for rrsw on tiny draft probabilities)
    work = np.float64

    def setup(self):
        self.wp = self.p.astype(self.work, copy=False)
        self.wq = self.q.astype(self.work, copy=False)
        self.family = ResidualFamily(self.wp, self.wq)
        self.total = self.family.G(0.0)

    def _undrafted(self, drafts: np.ndarray) -> np.ndarray:
        """``s[m, j]``: draft mass not among ``x_1..x_{j-1}`` (1 for iid)."""
        return np.ones(drafts.shape)

    def path(self, drafts: np.ndarray):
        """Acceptance probabilities ``a [M, k]`` along the all-rejected path, and the final ``C``."""
        drafts = np.atleast_2d(drafts)
        M, k = drafts.shape
        s = self._undrafted(drafts)
        C = np.zeros(M)
        G = np.full(M, self.total)
        a = np.empty((M, k))
        a = np.empty((M, k), dtype=self.work)
        C = C.astype(self.work)
        G = G.astype(self.work)
        for j in range(k):
            x = drafts[:, j]
            qx = self.wq[x]
            live = G > 0
            pk = np.maximum(self.wp[x] - C * qx, 0.0) / np.where(live, G, 1.0)
            with np.errstate(over="ignore", invalid="ignore"):  # s / q(x) may overflow: then accept if p_k(x) > 0
                coin = np.where(pk > 0, np.minimum(1.0, pk * (s[:, j] / qx)), 0.0)
            a[:, j] = np.where(live, coin, 1.0)
            C = C + G / s[:, j]
            G = self.family.G(C)
        return a, C

    def acceptance(self, drafts):
        a, _ = self.path(drafts)
        return (1.0 - np.prod(1.0 - a, axis=1)).astype(np.float64)

    def output_law(self, drafts):
        drafts = np.asarray(drafts)
        a, C = self.path(drafts[None, :])
        out = np.zeros(self.V)
        reach = 1.0
        for j, x in enumerate(drafts):
            out[x] += reach * a[0, j]
            reach *= 1.0 - a[0, j]
        if reach > 0:
            out += (reach * self.family.law(C[0])).astype(np.float64)
        return out

    def law_at_drafts(self, drafts):
        """Vectorised over the tuples: the coins along the rejection path, and the final residual at the drafts."""
        drafts = np.atleast_2d(drafts)
        a, C = self.path(drafts)
        reach = np.concatenate((np.ones((a.shape[0], 1), dtype=a.dtype), np.cumprod(1.0 - a, axis=1)), axis=1)
        G = self.family.G(C)
        with np.errstate(divide="ignore", invalid="ignore"):
            residual = np.where(G[:, None] > 0, np.maximum(self.wp[drafts] - C[:, None] * self.wq[drafts], 0.0)
                                / np.where(G > 0, G, 1.0)[:, None], self.wp[drafts])
        out = reach[:, -1:] * residual
        for j in range(drafts.shape[1]):  # a draft equal to draft j (iid repeats) also carries j's acceptance
            out += np.where(drafts == drafts[:, j : j + 1], (reach[:, j] * a[:, j])[:, None], 0.0)
        return out.astype(np.float64)

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        a, C = self.path(drafts)
        accepted = rng.random(a.shape) < a
        first = np.argmax(accepted, axis=1)
        any_accepted = accepted.any(axis=1)
        out = drafts[np.arange(drafts.shape[0]), first]
        rejected = ~any_accepted
        if rejected.any():
            out[rejected] = self.family.sample(C[rejected], rng)
        return out


class RRS(_RecursiveRejection):
    name = "rrs"
    description = "recursive rejection sampling (SpecInfer), iid drafts"
    default_sampler = "iid"
    samplers = ("iid",)

    def exact_rate(self):
        C, G = 0.0, self.total
        for _ in range(self.num_drafts):
            C = C + G
            G = float(self.family.G(C))
        return min(max(1.0 - G / self.total, 0.0), 1.0)

    def closed_moves(self, split):
        """Sequential coins (:func:`~.moves.sequential_moves`): ``C_k`` does not depend on the drafts."""
        from .moves import sequential_moves

        p, q = self.p, self.q
        coins = np.empty((self.num_drafts, self.V))
        C, G = 0.0, float(self.total)
        for k in range(self.num_drafts):
            if G > 0:
                pk = np.maximum(p - C * q, 0.0) / G
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    coins[k] = np.where(pk > 0, np.minimum(1.0, pk / q), 0.0)
            else:  # the residual is empty: never reached (the step before accepted surely)
                coins[k] = 1.0
            C = C + G
            G = float(self.family.G(C))
        return sequential_moves(q, coins, self.family.law(C), split)


class RRSW(_RecursiveRejection):
    name = "rrsw"
    description = "recursive rejection sampling without replacement, wor drafts"
    default_sampler = "wor"
    samplers = ("wor",)

    def setup(self):
        positive = self.q[self.q > 0]
        if positive.size and positive.min() < WIDE_BELOW:
            if _WIDE is None:  # pragma: no cover - platforms whose longdouble is float64
                raise InputError(f"rrsw: draft probabilities down to {positive.min():.3g} need extended "
                                 "precision, which numpy.longdouble does not give on this platform")
            self.work = _WIDE
        super().setup()
        # Undrafted mass without cancellation: the K most probable tokens are
        # summed explicitly per tuple, the rest once per pair.
        K = min(self.V, max(64, 4 * self.n))
        self.top = top_tokens(self.q, K)
        self.q_top = self.wq[self.top]
        self.rank = np.full(self.V, -1, dtype=np.int64)
        self.rank[self.top] = np.arange(self.top.size)
        rest = np.ones(self.V, dtype=bool)
        rest[self.top] = False
        self.rest_mass = self.wq[rest].sum()

    def closed_moves(self, split):
        """One draft: recursive rejection sampling with or without replacement is the same rule."""
        if self.num_drafts != 1:
            return None
        from .moves import sequential_moves

        p, q = self.p, self.q
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            coins = np.where(q > 0, np.minimum(1.0, p / q), 0.0)
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        return sequential_moves(q, coins[None, :], residual / total if total > 0 else p.copy(), split)

    def _undrafted(self, drafts):
        M, k = drafts.shape
        s = np.empty((M, k), dtype=self.work)
        removed = np.zeros((M, self.top.size), dtype=bool)
        rest_drafted = np.zeros(M, dtype=self.work)
        rows = np.arange(M)
        for j in range(k):
            s[:, j] = (self.rest_mass - rest_drafted) + np.where(removed, 0.0, self.q_top).sum(axis=1)
            r = self.rank[drafts[:, j]]
            in_top = r >= 0
            removed[rows[in_top], r[in_top]] = True
            rest_drafted += np.where(in_top, 0.0, self.wq[drafts[:, j]])
        return s
