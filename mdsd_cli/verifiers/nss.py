"""``nss``: naive sampling — ignore the drafts and output ``Y ~ p``.

Lossless for any draft law; its rate is ``sum_i p(i) P(i in X)``, in closed
form for ``iid`` (``P(i in X) = 1 - (1 - q_i)^n``), ``greedy`` and ``hub``.
"""

from __future__ import annotations

import numpy as np

from .base import PreparedVerifier, drafted_mass, sample_from_law


class NSS(PreparedVerifier):
    name = "nss"
    description = "naive sampling: Y ~ p, ignoring the drafts (any draft law)"
    default_sampler = "iid"
    samplers = None

    def output_law(self, drafts):
        return self.p.copy()

    def acceptance(self, drafts):
        return drafted_mass(self.p, np.atleast_2d(drafts))

    def sample(self, drafts, rng):
        return sample_from_law(self.p, np.atleast_2d(drafts).shape[0], rng)

    def exact_rate(self):
        name = self.draft_sampler.kind
        if name == "iid":
            with np.errstate(divide="ignore"):
                included = -np.expm1(self.n * np.log1p(-np.minimum(self.q, 1.0)))
            return float((self.p * included).sum())  # not BLAS dot: its threads stall on busy machines
        if name == "topk":  # the drafts are the top set itself
            return float(self.p[self.draft_sampler.top_set(self.q, self.n)].sum())
        if name in ("greedy", "hub"):
            if int(np.count_nonzero(self.q > 0)) < self.n:
                return float(self.p[self.q > 0].sum())
            top = self.draft_sampler.top_set(self.q, self.n)
            rest = self.q.copy()
            rest[top] = 0.0
            included = rest / rest.sum()
            included[top] = 1.0
            return float((self.p * included).sum())
        return None  # wor: inclusion probabilities by enumeration or Monte Carlo

    def closed_moves(self, split):
        """``Y ~ p`` whatever the drafts: ``p(y)`` times how the draft law holds ``y``."""
        from .moves import distinct_split, sequential_moves

        kind = self.draft_sampler.kind
        if kind == "iid":
            return sequential_moves(self.q, np.zeros((self.n, self.V)), self.p, split)
        if kind not in ("greedy", "hub", "topk"):
            return None  # wor: the positions' laws by enumeration only
        tuples, prob = self.draft_sampler.tuple_law(self.q, self.n) if kind == "hub" else (None, None)
        if kind in ("greedy", "topk"):
            top = self.draft_sampler.top_set(self.q, self.n)
            marginals = np.zeros((self.num_drafts, self.V))
            marginals[np.arange(top.size), top] = 1.0
            if top.size < self.num_drafts:  # the last draft is random: q off the top set
                rest = self.q.copy()
                rest[top] = 0.0
                marginals[-1] = rest / rest.sum()
        else:
            marginals = np.zeros((tuples.shape[1], self.V))
            for j in range(tuples.shape[1]):
                np.add.at(marginals[j], tuples[:, j], prob)
        return distinct_split(self.p * marginals, split)  # position j holds y w.p. marginals[j, y]


class TopK(NSS):
    """Target sampling on deterministic top-k drafts: ``Y ~ p``, the accepted draft the one equal to ``Y``.

    With the drafts fixed to the top set T of q, any lossless verifier outputs a draft only when
    ``Y`` lies in T, so ``p(T)`` is the most it can accept: ``alpha*_topk``, which this reaches. (EAGLE-2/3
    and Medusa draft the top k and verify this way.)
    """

    name = "topk"
    description = "target sampling on the deterministic top-k drafts (EAGLE-2/3, Medusa); reaches α*_topk = p(top k)"
    default_sampler = "topk"
    samplers = ("topk",)
