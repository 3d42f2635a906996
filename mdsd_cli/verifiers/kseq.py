"""SpecTr's K-SEQ verifier (Sun et al., NeurIPS 2023) for iid drafts.

With ``beta(rho) = sum_i min(q_i, p_i / rho)``, ``rho*`` is the smallest
``rho`` in ``[1, n]`` with ``1 - (1 - beta)^n <= rho beta``. Drafts are tried in
order, each accepted with probability ``min(1, p(x) / (rho* q(x)))``; if none
is, ``Y`` comes from the residual ``p - min(q, p/rho*) (1 - (1 - beta)^n)/beta``
(normalised). Its rate is

.. math:: \\alpha_{kseq} = 1 - (1 - \\beta(\\rho^*))^n.

``rho*`` is found by bisection on ``f(rho) = S(rho) - 1 + (1 - S(rho)/rho)^n``
(increasing), ``S(rho) = sum_i min(rho q_i, p_i)`` evaluated in ``O(log V)``.
"""

from __future__ import annotations

import numpy as np

from .base import PreparedVerifier, drafted_mass, sample_from_law
from .residual import ResidualFamily


class RhoSearch:
    """The bisection for K-SEQ's ``rho*``, one step at a time: the smallest ``rho`` in ``[1, n]`` with
    ``f(rho) >= 0`` (``f`` increasing), halving ``[lo, hi]`` until ``hi - lo <= tol hi``; ``rho*`` is the final
    ``hi`` (1 when ``f(1) >= 0``). While it runs, ``lo < rho* <= hi``: a caller that needs only a comparison
    with ``rho*`` can stop as soon as the bracket decides it (:mod:`.device_visit` does)."""

    def __init__(self, f, n: int, tol: float = 4e-16):
        self.f, self.tol = f, tol
        self.lo, self.hi = 1.0, float(n)
        self.steps = 0
        self.done = f(self.lo) >= 0
        if self.done:
            self.hi = self.lo

    def step(self) -> None:
        mid = 0.5 * (self.lo + self.hi)
        if self.f(mid) >= 0:
            self.hi = mid
        else:
            self.lo = mid
        self.steps += 1
        self.done = self.hi - self.lo <= self.tol * self.hi or self.steps >= 200

    def run(self) -> float:
        while not self.done:
            self.step()
        return self.hi


def bisect_rho(f, n: int, tol: float = 4e-16) -> float:
    """The smallest ``rho`` in ``[1, n]`` with ``f(rho) >= 0``, by bisection until ``hi - lo <= tol hi``
    (``f`` increasing; ``rho = 1`` when ``f(1) >= 0``)."""
    return RhoSearch(f, n, tol).run()


def kseq_search(p: np.ndarray, q: np.ndarray, n: int, tol: float = 4e-16):
    """K-SEQ's ``rho*`` search for ``(p, q)`` and ``n`` drafts, not yet run, and ``S``: ``rho*`` is the smallest
    ``rho`` in ``[1, n]`` with ``S(rho) - 1 + (1 - S(rho)/rho)^n >= 0``, ``S(rho) = sum_i min(rho q_i, p_i)`` from
    prefix sums along the ``q/p`` order (one sort, then ``O(log V)`` per step). Returns ``(RhoSearch, S)``."""
    fam = ResidualFamily(p, q)
    p_total = fam.p_in[-1]

    def S(rho):
        k = int(fam.sorted_key.searchsorted(1.0 / rho))  # ResidualFamily.above for one rho >= 1
        return rho * fam.q_in[k] + (p_total - fam.p_in[k])

    def f(rho):
        s = S(rho)
        return s - 1.0 + (1.0 - s / rho) ** n

    return RhoSearch(f, n, tol), S


def kseq_rho(p: np.ndarray, q: np.ndarray, n: int, tol: float = 4e-16) -> tuple[float, float]:
    """``rho*`` and ``S(rho*)`` of K-SEQ for ``(p, q)`` and ``n`` drafts (see :func:`kseq_search`)."""
    search, S = kseq_search(p, q, n, tol)
    rho = search.run()
    return rho, S(rho)


class KSeq(PreparedVerifier):
    name = "kseq"
    description = "SpecTr K-SEQ, iid drafts"
    default_sampler = "iid"
    samplers = ("iid",)

    def setup(self):
        n = self.n
        self.rho, s = kseq_rho(self.p, self.q, n)
        self.beta = s / self.rho
        accept_total = 1.0 - (1.0 - self.beta) ** n
        self.scale = accept_total / self.beta if self.beta > 0 else self.rho
        residual = np.maximum(self.p - np.minimum(self.q, self.p / self.rho) * self.scale, 0.0)
        mass = residual.sum()
        self.residual = residual / mass if mass > 0 else self.p.copy()
        self.rate = accept_total

    def coins(self, drafts):
        x = np.atleast_2d(drafts)
        with np.errstate(over="ignore"):  # q(x) near the float64 floor: ratio inf, accept
            return np.minimum(1.0, self.p[x] / (self.rho * self.q[x]))

    def acceptance(self, drafts):
        drafts = np.atleast_2d(drafts)
        none = np.prod(1.0 - self.coins(drafts), axis=1)
        return 1.0 - none + none * drafted_mass(self.residual, drafts)

    def output_law(self, drafts):
        drafts = np.asarray(drafts)
        b = self.coins(drafts)[0]
        out = np.zeros(self.V)
        reach = 1.0
        for x, bx in zip(drafts, b):
            out[x] += reach * bx
            reach *= 1.0 - bx
        return out + reach * self.residual

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        accepted = rng.random(drafts.shape) < self.coins(drafts)
        out = drafts[np.arange(drafts.shape[0]), np.argmax(accepted, axis=1)]
        rejected = ~accepted.any(axis=1)
        if rejected.any():
            out[rejected] = sample_from_law(self.residual, int(rejected.sum()), rng)
        return out

    def exact_rate(self):
        return float(min(max(self.rate, 0.0), 1.0))

    def closed_moves(self, split):
        """Sequential coins with the same coin at every draft (:func:`~.moves.sequential_moves`)."""
        from .moves import sequential_moves

        with np.errstate(divide="ignore", invalid="ignore"):  # q = 0: never drafted, masked there
            coins = np.broadcast_to(self.coins(np.arange(self.V)[None, :])[0], (self.n, self.V))
        return sequential_moves(self.q, coins, self.residual, split)
