"""Recursive rejection sampling: ``rrs`` (iid drafts) and ``rrsw`` (drafts without replacement).

``p_1 = p``; for ``k = 1..n`` accept ``x_k`` with probability
``min(1, p_k(x_k) / q_k(x_k))``; on rejection ``p_{k+1} = norm((p_k - q_k)_+)``;
if every draft is rejected, ``Y ~ p_{n+1}``. For ``rrs`` ``q_k = q``; for
``rrsw`` ``q_k`` is ``q`` without ``x_1..x_{k-1}``, renormalised. Every residual
is ``(p - C_k q)_+`` normalised (see :mod:`.residual`), so the conditional
acceptance ``1 - prod_k (1 - a_k)`` costs ``O(n log V)`` per tuple.

For ``rrs`` the ``C_k`` do not depend on the drafts and the rate telescopes:

.. math:: \\alpha_{rrs} = 1 - \\prod_k \\big(1 - \\sum_i \\min(p_k(i), q(i))\\big) = 1 - G(C_{n+1}).
"""

from __future__ import annotations

import numpy as np

from ..samplers import top_tokens
from .base import PreparedVerifier
from .residual import ResidualFamily


class _RecursiveRejection(PreparedVerifier):
    def setup(self):
        self.family = ResidualFamily(self.p, self.q)
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
        for j in range(k):
            x = drafts[:, j]
            qx = self.q[x]
            live = G > 0
            pk = np.maximum(self.p[x] - C * qx, 0.0) / np.where(live, G, 1.0)
            a[:, j] = np.where(live, np.minimum(1.0, pk * s[:, j] / qx), 1.0)
            C = C + G / s[:, j]
            G = self.family.G(C)
        return a, C

    def acceptance(self, drafts):
        a, _ = self.path(drafts)
        return 1.0 - np.prod(1.0 - a, axis=1)

    def output_law(self, drafts):
        drafts = np.asarray(drafts)
        a, C = self.path(drafts[None, :])
        out = np.zeros(self.V)
        reach = 1.0
        for j, x in enumerate(drafts):
            out[x] += reach * a[0, j]
            reach *= 1.0 - a[0, j]
        if reach > 0:
            out += reach * self.family.law(C[0])
        return out

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


class RRSW(_RecursiveRejection):
    name = "rrsw"
    description = "recursive rejection sampling without replacement, wor drafts"
    default_sampler = "wor"
    samplers = ("wor",)

    def setup(self):
        super().setup()
        # Undrafted mass without cancellation: the K most probable tokens are
        # summed explicitly per tuple, the rest once per pair.
        K = min(self.V, max(64, 4 * self.n))
        self.top = top_tokens(self.q, K)
        self.q_top = self.q[self.top]
        self.rank = np.full(self.V, -1, dtype=np.int64)
        self.rank[self.top] = np.arange(self.top.size)
        rest = np.ones(self.V, dtype=bool)
        rest[self.top] = False
        self.rest_mass = float(self.q[rest].sum())

    def _undrafted(self, drafts):
        M, k = drafts.shape
        s = np.empty((M, k))
        removed = np.zeros((M, self.top.size), dtype=bool)
        rest_drafted = np.zeros(M)
        rows = np.arange(M)
        for j in range(k):
            s[:, j] = (self.rest_mass - rest_drafted) + np.where(removed, 0.0, self.q_top).sum(axis=1)
            r = self.rank[drafts[:, j]]
            in_top = r >= 0
            removed[rows[in_top], r[in_top]] = True
            rest_drafted += np.where(in_top, 0.0, self.q[drafts[:, j]])
        return s
