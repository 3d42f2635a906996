"""``otm``: output from the optimal transport plan (SpecTr's OTM), any draft law, small V.

The primal LP of :mod:`mdsd_cli.bounds.lp` gives a coupling ``pi(S, y)`` of the
draft set ``S`` and an accepted token ``y in S``. Given drafts with set ``S``,
output ``y`` with probability ``pi(S, y) / P(S)``; with the remaining
probability draw from what is left of ``p``, ``p - sum_S pi(S, .)``
(normalised). Lossless and optimal up to the LP tolerance (1e-6): its rate is α*.
"""

from __future__ import annotations

import numpy as np

from ..bounds.lp import MAX_LP_VARIABLES, primal_lp
from .base import PreparedVerifier, drafted_mass, sample_from_law


class OTM(PreparedVerifier):
    name = "otm"
    description = "optimal transport plan (LP) conditioned on the drafts; reaches α* (small V)"
    default_sampler = "iid"
    samplers = None
    lp_solver = "highs"
    max_lp_variables = MAX_LP_VARIABLES

    @classmethod
    def check_size(cls, q, n, sampler):
        from ..bounds import check_problem_size, estimate_lp_variables
        from ..errors import SizeLimitError
        from ..samplers import get_sampler

        Q = np.atleast_2d(np.asarray(q))
        try:
            check_problem_size(Q, n, sampler=sampler, solver="primal-lp", max_lp_variables=cls.max_lp_variables)
        except SizeLimitError:
            need = max(estimate_lp_variables(get_sampler(sampler), row, n) for row in Q)
            raise SizeLimitError(f"otm solves an LP with {need:,} variables at V={Q.shape[1]}, n={n} "
                                 f"(limit {cls.max_lp_variables:,}); it is for small vocabularies") from None

    def setup(self):
        result = primal_lp(self.p, self.q, self.n, self.draft_sampler, lp_solver=self.lp_solver,
                           max_variables=self.max_lp_variables)
        plan = result.plan
        self.value = result.value
        self.set_prob = plan.set_prob
        self.members = plan.members
        self.index = {tuple(int(t) for t in row if t >= 0): i for i, row in enumerate(plan.members)}
        self.flow = np.zeros((plan.set_prob.size, self.V))
        np.add.at(self.flow, (plan.edge_set, plan.edge_token), plan.flow)
        self._make_feasible()
        left = np.maximum(self.p - self.flow.sum(axis=0), 0.0)
        self.leftover = left / left.sum() if left.sum() > 0 else self.p.copy()
        # conditional accepted law per set, clipped to a probability
        self.accept = self.flow / self.set_prob[:, None]
        total = self.accept.sum(axis=1, keepdims=True)
        self.accept = np.where(total > 1.0, self.accept / np.maximum(total, 1e-300), self.accept)
        # A draft set whose probability underflows to 0 (tokens near the float64 floor) is not
        # in the plan; it accepts nothing and outputs the leftover law (it carries no mass).
        self.accept = np.vstack((self.accept, np.zeros(self.V)))

    def _make_feasible(self):
        """Scale the LP's flow down onto its constraints (``sum_S flow(S, y) <= p(y)``,
        ``sum_y flow(S, y) <= P(S)``): the LP meets them only to its tolerance (~1e-10),
        which could make the output law miss ``p`` or the rate pass α* by that much."""
        flow = self.flow
        per_token = flow.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            flow *= np.where(per_token > self.p, self.p / per_token, 1.0)[None, :]
            per_set = flow.sum(axis=1)
            flow *= np.where(per_set > self.set_prob, self.set_prob / per_set, 1.0)[:, None]

    def _set_index(self, drafts) -> int:
        key = tuple(sorted({int(x) for x in np.asarray(drafts).ravel()}))
        return self.index.get(key, self.accept.shape[0] - 1)

    def output_law(self, drafts):
        a = self.accept[self._set_index(drafts)]
        return a + (1.0 - a.sum()) * self.leftover

    def _set_indices(self, drafts) -> np.ndarray:
        return np.array([self._set_index(row) for row in np.atleast_2d(drafts)], dtype=np.int64)

    def acceptance(self, drafts):
        drafts = np.atleast_2d(drafts)
        idx = self._set_indices(drafts)
        accepted = self.accept[idx].sum(axis=1)
        return accepted + (1.0 - accepted) * drafted_mass(self.leftover, drafts)

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(drafts)
        idx = self._set_indices(drafts)
        out = np.empty(drafts.shape[0], dtype=np.int64)
        for s in np.unique(idx):  # one law per draft set
            rows = np.flatnonzero(idx == s)
            law = self.accept[s] + (1.0 - self.accept[s].sum()) * self.leftover
            out[rows] = sample_from_law(law, rows.size, rng)
        return out

    def exact_rate(self):
        """``sum_S P(S) P(Y in S | S)`` over the plan's draft sets: the rate of the law
        actually used (after :meth:`_make_feasible`), equal to the LP value within its tolerance."""
        members = self.members
        mask = members >= 0
        rows = np.arange(members.shape[0])
        accepted = self.accept[rows].sum(axis=1)
        leftover_in = np.where(mask, self.leftover[np.maximum(members, 0)], 0.0).sum(axis=1)
        return float(min(max((self.set_prob * (accepted + (1.0 - accepted) * leftover_in)).sum(), 0.0), 1.0))
