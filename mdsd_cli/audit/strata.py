"""Strata of the draft law: draft tuples (or multisets) with their exact probabilities.

An audit calls the function on draft tuples of its own choosing instead of
sampling them, and weights what it sees by the exact probability of each
stratum. Three designs, the finest one the budget allows:

``tuples``
    one stratum per ordered draft tuple with positive probability;
``multisets``
    one stratum per multiset of drafts (tuples with the same tokens in any
    order); the order is drawn within the stratum from the exact tuple law, so
    the function still sees tuples as the sampler would produce them;
``sampled``
    one stratum holding the whole draft law, tuples drawn by the sampler (when
    the law is too large to enumerate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..samplers import DraftSampler

#: Largest number of tuples enumerated to group them into multisets.
MAX_ENUMERATED = 200_000


@dataclass(frozen=True)
class Strata:
    """A partition of the draft tuples into strata, with exact weights.

    Attributes
    ----------
    kind : {"tuples", "multisets", "sampled"}
    tuples : ndarray int64 ``[M, k]``
        Every tuple with positive probability, the members of a stratum contiguous
        (empty for ``sampled``).
    weight : ndarray float64 ``[M]``
        ``P(X = tuple)``.
    start : ndarray int64 ``[G + 1]``
        Stratum ``g`` holds tuples ``start[g]`` to ``start[g + 1] - 1``.
    stratum_weight : ndarray float64 ``[G]``
        ``P(X in stratum)``; sums to 1.
    """

    kind: str
    tuples: np.ndarray
    weight: np.ndarray
    start: np.ndarray
    stratum_weight: np.ndarray
    _cdf: np.ndarray  # stratum index + cumulative conditional probability within it, increasing

    @property
    def num_strata(self) -> int:
        return int(self.stratum_weight.size)

    @property
    def num_tuples(self) -> int:
        return int(self.weight.size)

    def stratum_of(self) -> np.ndarray:
        """The stratum of every tuple, ``[M]``."""
        return np.repeat(np.arange(self.num_strata), np.diff(self.start))

    def draw_members(self, strata: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One tuple index per entry of ``strata``, from the exact law within each stratum."""
        if self.kind == "tuples":
            return strata
        u = rng.random(strata.size)
        idx = np.searchsorted(self._cdf, strata + u, side="right")
        return np.clip(idx, self.start[strata], self.start[strata + 1] - 1)


def sampled_strata() -> Strata:
    """The one-stratum design of a draft law too large to enumerate."""
    one = np.ones(1)
    return Strata("sampled", np.zeros((0, 0), dtype=np.int64), np.zeros(0), np.array([0, 0]), one, np.zeros(0))


def stratify(sampler: DraftSampler, q: np.ndarray, n: int, *, max_strata: int) -> Strata:
    """The finest design with at most ``max_strata`` strata (see the module docstring)."""
    count = sampler.estimate_tuples(q, n)
    if count > MAX_ENUMERATED:
        return sampled_strata()
    tuples, prob = sampler.tuple_law(q, n, max_tuples=max(count, 1))
    keep = prob > 0
    tuples, prob = tuples[keep], prob[keep] / prob[keep].sum()
    if tuples.shape[0] <= max_strata:
        M = tuples.shape[0]
        return Strata("tuples", tuples, prob, np.arange(M + 1), prob.copy(), np.arange(M) + 1.0)
    keys, inverse = np.unique(np.sort(tuples, axis=1), axis=0, return_inverse=True)
    G = keys.shape[0]
    if G > max_strata:
        return sampled_strata()
    inverse = inverse.ravel()
    order = np.argsort(inverse, kind="stable")
    tuples, prob, group = tuples[order], prob[order], inverse[order]
    sizes = np.bincount(group, minlength=G)
    start = np.concatenate(([0], np.cumsum(sizes)))
    stratum_weight = np.bincount(group, weights=prob, minlength=G)
    conditional = prob / stratum_weight[group]
    cdf = np.empty(prob.size)
    for g in range(G):  # at most n! members each: a short loop, and no cancellation between strata
        cdf[start[g]:start[g + 1]] = np.cumsum(conditional[start[g]:start[g + 1]])
    cdf[start[1:] - 1] = 1.0  # the last member closes its stratum exactly
    return Strata("multisets", tuples, prob, start, stratum_weight, group + np.minimum(cdf, 1.0))
