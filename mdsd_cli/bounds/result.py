"""Result types of the optimal-acceptance solvers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TransportPlan:
    """An optimal partial coupling of the draft set and the output token (flow form).

    ``flow[e]`` is ``P(X's set = sets[edge_set[e]], Y = edge_token[e])`` for the
    accepted mass; the rejected mass of each set is coupled with what is left of
    ``p``. Attributes
    ----------
    members : ndarray int64 ``[M, k]``
        The draft sets (tokens ascending, padded with -1).
    set_prob : ndarray ``[M]``
        Probability of each set.
    edge_set, edge_token : ndarray int64 ``[E]``
        The (set, token in set) pairs.
    flow : ndarray ``[E]``
        Accepted mass on each pair.
    """

    members: np.ndarray
    set_prob: np.ndarray
    edge_set: np.ndarray
    edge_token: np.ndarray
    flow: np.ndarray

    @property
    def value(self) -> float:
        """Total accepted mass, ``P(Y in X)``."""
        return float(self.flow.sum())

    def accepted_mass(self, vocab_size: int) -> np.ndarray:
        """``r(y) = P(Y = y, Y in X)`` for every token."""
        return np.bincount(self.edge_token, weights=self.flow, minlength=vocab_size)


@dataclass(frozen=True)
class OptimalAcceptance:
    """α* for one pair, with what the solver knows about its optimum.

    Attributes
    ----------
    value : float
        The optimal acceptance rate α*.
    token_set : ndarray int64
        A minimising set ``A`` of the dual ``1 - p(A) + P(X hits A)`` (for
        ``chain`` a prefix of its order; for the LPs recovered from the duals).
    sampler, solver : str
    n : int
    status : str
        ``"optimal"`` (solvers raise on anything else).
    plan : TransportPlan or None
        The optimal coupling (``primal-lp`` only).
    """

    value: float
    token_set: np.ndarray
    sampler: str
    solver: str
    n: int
    status: str = "optimal"
    plan: TransportPlan | None = None

    @property
    def set_size(self) -> int:
        """Size of the minimising set (for ``chain``, the minimising prefix size)."""
        return int(self.token_set.size)

    def __float__(self) -> float:
        return float(self.value)
