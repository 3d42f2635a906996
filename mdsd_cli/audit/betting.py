"""An anytime-valid test that a stratified output law equals ``p``: betting on a learned direction.

The audit observes, in rounds, outputs ``Y`` of the function on draft tuples
drawn from strata ``g`` of known weight ``w_g``. Lossless means

.. math:: \\sum_g w_g L_g = p, \\qquad L_g = \\text{the law of } Y \\text{ given a tuple of stratum } g.

Before each round the test fixes, from the rounds before it only,

* a direction ``f`` on tokens (``|f| <= 1``): where the estimated output law
  departs from ``p``, in standard errors, soft-thresholded at one;
* a control variate ``mu_g``, the estimated mean of ``f`` in stratum ``g``;
* an allocation ``pi_g`` of the round's calls to strata: a quarter in proportion to
  ``w_g``, the rest to ``w_g sigma_g`` (Neyman's allocation, ``sigma_g`` the estimated
  spread of ``f`` in stratum ``g``): the calls go to the tuples whose outputs vary
  along ``f``, and no stratum gets less than a quarter of its share;

and each call (stratum ``g`` drawn from ``pi``, output ``y``) scores

.. math:: Z = \\frac{w_g}{\\pi_g}\\,(f(y) - \\mu_g) + \\sum_h w_h \\mu_h - f \\cdot p,

whose mean is ``f . (sum_g w_g L_g - p)``: zero when the function is lossless,
whatever its conditional laws are. The wealth of a bet ``lambda`` is the product
of ``1 + lambda Z`` over the calls, a non-negative martingale under losslessness;
the test holds the average over ten bets (halves of the largest bet that keeps
every factor positive) and, by Ville's inequality, ``P(wealth ever reaches 1/a)
<= a``. The p-value is ``1 / (largest wealth reached)``: valid at every call, for
any number of calls, and so under early stopping, adaptive allocation and a
direction learned on the way, with no asymptotics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The bets of the mixture, as fractions of the largest bet keeping every factor positive.
BET_FRACTIONS = 0.5 ** np.arange(1, 11)
#: Share of each round's calls allocated in proportion to the strata weights.
PROPORTIONAL_SHARE = 0.25
#: Standard errors below which a departure from p is taken as noise when learning the direction.
NOISE_THRESHOLD = 1.0
#: Pseudo-calls of p added to every stratum's counts when estimating (never in the score itself).
PRIOR_CALLS = 1.0


def smoothed_laws(p: np.ndarray, counts: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """``(counts_g + PRIOR_CALLS p) / (calls_g + PRIOR_CALLS)``: each stratum's output law, shrunk to ``p``."""
    return (counts + PRIOR_CALLS * p) / (calls + PRIOR_CALLS)[:, None]


def learned_direction(p: np.ndarray, weight: np.ndarray, counts: np.ndarray, calls: np.ndarray):
    """The direction ``f`` (``max |f| = 1``, or None when nothing departs from ``p``) and the smoothed laws.

    ``f_y`` is proportional to ``sign(z_y) (|z_y| - 1)_+ / s_y``: ``z_y`` is the departure of the
    stratified estimate of ``P(Y = y)`` from ``p_y`` in standard errors and ``s_y^2`` the per-call
    variance of the indicator of ``y`` (each the average of its stratified estimate and its
    value under ``p``, so that a token never seen in few calls is not taken for a certainty).
    This is the linear statistic a chi-square test weighs most, with the noise cut off.
    """
    laws = smoothed_laws(p, counts, calls)
    delta = weight @ laws - p
    within = 0.5 * (laws * (1.0 - laws) + p * (1.0 - p))
    variance = ((weight * weight) / (calls + PRIOR_CALLS)) @ within
    per_call = weight @ within
    tiny = np.finfo(np.float64).tiny
    z = delta / np.sqrt(variance + tiny)
    f = np.sign(z) * np.maximum(np.abs(z) - NOISE_THRESHOLD, 0.0) / np.sqrt(per_call + tiny)
    f[~(p > 0)] = 0.0  # an output of probability 0 is judged on its own (impossible outputs)
    largest = float(np.abs(f).max()) if f.size else 0.0
    if not largest > 0 or not math.isfinite(largest):
        return None, laws
    return f / largest, laws


@dataclass(frozen=True)
class RoundPlan:
    """What one round bets on, fixed before its calls: allocation, direction, control variates, bets."""

    allocation: np.ndarray  # pi [G], sums to 1
    direction: np.ndarray | None  # f [V]
    control: np.ndarray  # mu [G]
    ratio: np.ndarray  # w / pi [G]
    offset: float  # sum_g w_g mu_g - f . p
    bets: np.ndarray  # lambda [K]; all 0 when the round only learns

    def scores(self, strata: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """``Z`` of each call."""
        if self.direction is None:
            return np.zeros(strata.size)
        return self.ratio[strata] * (self.direction[tokens] - self.control[strata]) + self.offset


class DirectionalBettingTest:
    """The sequential test of the module docstring, for one case.

    Parameters
    ----------
    p : ndarray ``[V]``
        The target law.
    weight : ndarray ``[G]``
        Exact probabilities of the strata (sum to 1).
    """

    def __init__(self, p: np.ndarray, weight: np.ndarray):
        self.p = np.asarray(p, dtype=np.float64)
        self.weight = np.asarray(weight, dtype=np.float64)
        self.log_wealth = np.zeros(BET_FRACTIONS.size)
        #: log of the largest mixture wealth reached so far (the test statistic)
        self.max_log_wealth = 0.0

    @property
    def pvalue(self) -> float:
        """``min(1, 1 / largest wealth)``: an anytime-valid p-value."""
        return float(min(1.0, math.exp(-self.max_log_wealth)))

    def plan(self, counts: np.ndarray, calls: np.ndarray) -> RoundPlan:
        """The next round's plan from the counts so far (``counts [G, V]``, ``calls [G]``)."""
        w = self.weight
        G = w.size
        zero = np.zeros(G)
        direction = None
        if calls.sum() > 0:
            direction, laws = learned_direction(self.p, w, counts, calls)
        if direction is None:
            return RoundPlan(w.copy(), None, zero, np.ones(G), 0.0, np.zeros(BET_FRACTIONS.size))
        mu = laws @ direction
        spread = np.sqrt(np.maximum(laws @ (direction * direction) - mu * mu, 0.0))
        neyman = w * spread
        total = float(neyman.sum())
        pi = PROPORTIONAL_SHARE * w + (1.0 - PROPORTIONAL_SHARE) * (neyman / total if total > 0 else w)
        ratio = np.divide(w, pi, out=np.ones(G), where=pi > 0)
        offset = float(w @ mu - direction @ self.p)
        lowest = offset + float((ratio * (direction.min() - mu)).min())
        if not -lowest > 1e-12:  # no output can score below 0, so none scores above it either
            return RoundPlan(pi, direction, mu, ratio, offset, np.zeros(BET_FRACTIONS.size))
        return RoundPlan(pi, direction, mu, ratio, offset, BET_FRACTIONS / -lowest)

    def observe(self, plan: RoundPlan, strata: np.ndarray, tokens: np.ndarray) -> None:
        """Multiply the wealth by the round's factors, in call order (the running maximum counts)."""
        if strata.size == 0 or not plan.bets.any():
            return
        z = plan.scores(strata, tokens)
        steps = np.log1p(plan.bets[:, None] * z[None, :])
        path = self.log_wealth[:, None] + np.cumsum(steps, axis=1)
        top = path.max(axis=0)
        mixture = top + np.log(np.exp(path - top).sum(axis=0)) - math.log(BET_FRACTIONS.size)
        self.max_log_wealth = max(self.max_log_wealth, float(mixture.max()))
        self.log_wealth = path[:, -1]


class AcceptanceBoundTest:
    """An anytime-valid test that the acceptance rate is at most ``alpha_star``.

    No lossless function accepts more often than α*: its output ``Y`` is distributed as ``p``, so
    ``(X, Y)`` is a coupling of the draft law and ``p`` and ``P(accepted) <= P(Y in X) <= α*``.
    Each call (stratum ``g`` drawn with probability ``pi_g``, ``h = 1`` if it accepted) scores

    .. math:: A = \\frac{w_g}{\\pi_g} h - b, \\qquad b = \\min(1, \\alpha^* + \\text{tolerance}),

    whose mean is ``acceptance - b <= 0`` for a lossless function. ``A >= -b``, so for bets
    ``0 <= lambda < 1 / b`` the wealth, the product of ``1 + lambda A``, is a non-negative
    supermartingale; the mixture over :data:`BET_FRACTIONS` of ``1 / b`` and Ville's inequality
    give an anytime-valid p-value, as for :class:`DirectionalBettingTest`.
    """

    def __init__(self, alpha_star: float, tolerance: float = 1e-9):
        self.bound = min(1.0, max(float(alpha_star), 0.0) + tolerance)
        self.bets = BET_FRACTIONS / self.bound
        self.log_wealth = np.zeros(BET_FRACTIONS.size)
        self.max_log_wealth = 0.0

    @property
    def pvalue(self) -> float:
        return float(min(1.0, math.exp(-self.max_log_wealth)))

    def observe(self, ratio: np.ndarray, hits: np.ndarray) -> None:
        """One round: ``ratio = w_g / pi_g`` of each call's stratum and whether the call accepted."""
        if hits.size == 0:
            return
        z = ratio * hits - self.bound
        path = self.log_wealth[:, None] + np.cumsum(np.log1p(self.bets[:, None] * z[None, :]), axis=1)
        top = path.max(axis=0)
        mixture = top + np.log(np.exp(path - top).sum(axis=0)) - math.log(BET_FRACTIONS.size)
        self.max_log_wealth = max(self.max_log_wealth, float(mixture.max()))
        self.log_wealth = path[:, -1]
