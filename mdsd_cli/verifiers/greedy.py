"""Verifiers for deterministic-top drafts: ``greedy`` (any n) and SpecHub's ``hub`` (n = 2)."""

from __future__ import annotations

import numpy as np

from .base import PreparedVerifier, drafted_mass, sample_from_law
from .moves import distinct_split


def _normalised(x: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    s = x.sum()
    return x / s if s > 0 else fallback.copy()


class GreedyVerifier(PreparedVerifier):
    """Single-draft speculative sampling on the one random draft of ``greedy`` drafts.

    With top set ``T`` and ``r = q`` off ``T`` renormalised, the sampled draft
    ``x`` is accepted with probability ``min(1, p(x)/r(x))``; otherwise
    ``Y ~ norm((p - r)_+)``, which may land in ``T`` (still a draft). Its rate is
    ``alpha*_greedy = 1 - sum_{i not in T} (p(i) - r(i))_+``.
    """

    name = "greedy"
    description = "speculative sampling on the random draft of greedy drafts; reaches α*_greedy"
    default_sampler = "greedy"
    samplers = ("greedy",)

    def setup(self):
        self.whole_support = int(np.count_nonzero(self.q > 0)) < self.n
        if self.whole_support:  # the drafts are the whole support: output p itself
            return
        top = self.draft_sampler.top_set(self.q, self.n)
        rest = self.q.copy()
        rest[top] = 0.0
        self.r = rest / rest.sum()
        self.off_top = np.ones(self.V, dtype=bool)
        self.off_top[top] = False
        self.residual = _normalised(np.maximum(self.p - self.r, 0.0), self.p)

    def _coin(self, x):
        with np.errstate(over="ignore"):  # p(x) / r(x) = inf: r(x) near the float64 floor, accept
            return np.minimum(1.0, self.p[x] / self.r[x])

    def output_law(self, drafts):
        if self.whole_support:
            return self.p.copy()
        x = int(np.asarray(drafts)[-1])
        a = float(self._coin(x))
        out = (1.0 - a) * self.residual
        out[x] += a
        return out

    def acceptance(self, drafts):
        drafts = np.atleast_2d(drafts)
        if self.whole_support:
            return drafted_mass(self.p, drafts)
        a = self._coin(drafts[:, -1])
        return a + (1.0 - a) * drafted_mass(self.residual, drafts)

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        M = drafts.shape[0]
        if self.whole_support:
            return sample_from_law(self.p, M, rng)
        x = drafts[:, -1]
        out = sample_from_law(self.residual, M, rng)
        keep = rng.random(M) < self._coin(x)
        out[keep] = x[keep]
        return out

    def exact_rate(self):
        if self.whole_support:
            return float(self.p[self.q > 0].sum())
        return float(1.0 - np.maximum(self.p - self.r, 0.0)[self.off_top].sum())

    def closed_moves(self, split):
        """Top draft ``j`` takes the residual's mass at it; the random last draft ``x ~ r`` takes
        ``r(y) (a(y) + (1 - a(y)) residual(y))``."""
        top = self.draft_sampler.top_set(self.q, self.n)
        out = np.zeros((self.num_drafts, self.V))
        if self.whole_support:
            out[np.arange(top.size), top] = self.p[top]
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                a = np.where(self.r > 0, self._coin(np.arange(self.V)), 0.0)
            rejected = float((self.r * (1.0 - a)).sum())
            out[np.arange(top.size), top] = rejected * self.residual[top]
            out[-1] = self.r * (a + (1.0 - a) * self.residual)
        return distinct_split(out, split)


class HubVerifier(PreparedVerifier):
    """SpecHub (Sun et al., EMNLP 2024), after the authors' code, for hub drafts at n = 2.

    Hub ``a = argmax q``; pairs ``(i, a)`` with probability ``q(i)`` and ``(a, i)``
    with ``Q(i) = q(a) q(i) / (1 - q(a))``.

    1. pair ``(i, a)``: accept ``i`` w.p. ``min(1, p(i)/q(i))``;
    2. ``p' = (p - q)_+``, ``q' = (q - p)_+`` off the hub; pair ``(a, i)``: accept
       ``i`` w.p. ``min(1, p'(i)/Q(i))``;
    3. ``p'' = (p' - Q)_+``, ``Q' = (Q - p')_+``; ``i`` rejected in ``(a, i)``: accept
       ``a`` w.p. ``min(1, p(a)/sum Q')``; then ``p'(a) = (p(a) - sum Q')_+``;
    4. ``i`` rejected in ``(i, a)``: accept ``a`` w.p. ``min(1, p'(a)/sum q')``;
    5. otherwise ``Y`` from ``p''`` off the hub and ``(p'(a) - sum q')_+`` at the hub, normalised.

    No shortcut such as accepting ``a`` outright when ``p(a)`` is close to 1
    (which is not lossless).
    """

    name = "hub"
    description = "SpecHub for hub drafts (n = 2); reaches α*_greedy at n = 2"
    default_sampler = "hub"
    samplers = ("hub",)
    fixed_n = 2

    def setup(self):
        p, q = self.p, self.q
        self.a = a = self.draft_sampler.hub(q)
        self.single = int(np.count_nonzero(q > 0)) < 2
        if self.single:  # q = delta_a: plain speculative sampling on one draft
            self.single_residual = _normalised(np.maximum(p - q, 0.0), p)
            return
        off = np.ones(self.V, dtype=bool)
        off[a] = False
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self.acc1 = np.where(off & (q > 0), np.minimum(1.0, p / q), 0.0)
        p1 = np.where(off, np.maximum(p - q, 0.0), 0.0)  # p'
        q1 = np.where(off, np.maximum(q - p, 0.0), 0.0)  # q'
        with np.errstate(over="ignore"):  # at the hub itself (masked) when the rest is near the float64 floor
            Q = np.where(off, q[a] * (q / q[off].sum()), 0.0)  # Q_ai
        self.Q = Q
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self.acc2 = np.where(Q > 0, np.minimum(1.0, p1 / Q), 0.0)
        p2 = np.maximum(p1 - Q, 0.0)  # p''
        Q1 = np.maximum(Q - p1, 0.0)  # Q'
        sum_Q1, sum_q1 = Q1.sum(), q1.sum()
        self.beta3 = min(1.0, p[a] / sum_Q1) if sum_Q1 > 0 else 1.0
        hub_left = max(p[a] - sum_Q1, 0.0)  # p'(a) after step 3
        self.beta4 = min(1.0, hub_left / sum_q1) if sum_q1 > 0 else 1.0
        residual = p2.copy()
        residual[a] = max(hub_left - sum_q1, 0.0)
        self.residual = _normalised(residual, p)

    def _parts(self, drafts):
        """For each pair: (token i, P(accept i), P(accept hub | i rejected))."""
        drafts = np.atleast_2d(drafts)
        first, second = drafts[:, 0], drafts[:, 1]
        hub_second = second == self.a  # pair (i, a)
        i = np.where(hub_second, first, second)
        acc_i = np.where(hub_second, self.acc1[i], self.acc2[i])
        acc_hub = np.where(hub_second, self.beta4, self.beta3)
        return i, acc_i, acc_hub

    def output_law(self, drafts):
        drafts = np.asarray(drafts)
        if self.single:
            out = (1.0 - self.p[self.a]) * self.single_residual
            out[self.a] += self.p[self.a]
            return out
        i, acc_i, acc_hub = (v[0] for v in self._parts(drafts))
        rest = 1.0 - acc_i
        out = rest * (1.0 - acc_hub) * self.residual
        out[i] += acc_i
        out[self.a] += rest * acc_hub
        return out

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        M = drafts.shape[0]
        if self.single:
            out = sample_from_law(self.single_residual, M, rng)
            out[rng.random(M) < self.p[self.a]] = self.a
            return out
        i, acc_i, acc_hub = self._parts(drafts)
        out = sample_from_law(self.residual, M, rng)
        hub = rng.random(M) < acc_hub
        out[hub] = self.a
        take_i = rng.random(M) < acc_i
        out[take_i] = i[take_i]
        return out

    def acceptance(self, drafts):
        drafts = np.atleast_2d(drafts)
        if self.single:
            return np.full(drafts.shape[0], self.p[self.a] + (1 - self.p[self.a]) * self.single_residual[self.a])
        i, acc_i, acc_hub = self._parts(drafts)
        rest = 1.0 - acc_i
        return acc_i + rest * acc_hub + rest * (1.0 - acc_hub) * (self.residual[i] + self.residual[self.a])

    def closed_moves(self, split):
        """Sums over the partner ``i`` of the hub in the pairs ``(i, a)`` and ``(a, i)``."""
        a = self.a
        if self.single:
            out = np.zeros((1, self.V))
            out[0, a] = self.p[a] + (1.0 - self.p[a]) * self.single_residual[a]
            return distinct_split(out, split)
        others = np.flatnonzero((self.q > 0) & (np.arange(self.V) != a))
        out = np.zeros((2, self.V))
        rest1 = 1.0 - self.acc1[others]  # pair (i, a), probability q(i): i first, the hub second
        first = self.q[others]
        out[0, others] += first * (self.acc1[others] + rest1 * (1.0 - self.beta4) * self.residual[others])
        out[1, a] += float((first * rest1 * (self.beta4 + (1.0 - self.beta4) * self.residual[a])).sum())
        rest2 = 1.0 - self.acc2[others]  # pair (a, i), probability Q(i): the hub first
        second = self.Q[others]
        out[1, others] += second * (self.acc2[others] + rest2 * (1.0 - self.beta3) * self.residual[others])
        out[0, a] += float((second * rest2 * (self.beta3 + (1.0 - self.beta3) * self.residual[a])).sum())
        return distinct_split(out, split)

    def exact_rate(self):
        if self.single:
            return float(self.acceptance(np.array([[self.a]]))[0])
        others = np.flatnonzero((self.q > 0) & (np.arange(self.V) != self.a))
        pairs_ia = np.stack((others, np.full(others.size, self.a)), axis=1)
        pairs_ai = np.stack((np.full(others.size, self.a), others), axis=1)
        # elementwise products, not BLAS dot: OpenBLAS threads stall on a busy 2-core machine
        return float((self.q[others] * self.acceptance(pairs_ia)).sum()
                     + (self.Q[others] * self.acceptance(pairs_ai)).sum())
