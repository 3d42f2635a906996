r"""Where a verifier sends a tree walk, averaged over the draft law: the *move laws* of one node.

A tree walk at a node draws the drafts ``X`` (``n`` of them, by the draft
sampler), lets the verifier output ``Y``, and moves to a child holding ``Y``
(the first of several with that token: iid drafts may repeat). Which child
it moves to decides which subtree it walks next, so the expected length of a
step needs, per token ``y``, the probability of moving with ``y`` — split by
what distinguishes the children:

``token``
    ``m(y) = P(Y = y, y in X)`` (children with identical subtrees, as in ``KxD``);
``position``
    ``h_j(y) = E[P(Y = y | X) 1{X_j = y, X_i != y for i < j}]``: the walk
    moves to child slot ``j`` of a sparse tree when ``j`` is the first draft
    holding ``y`` (templates list children deepest first); ``sum_j h_j = m``;
``count``
    ``c_k(y) = P(Y = y, N_y = k + 1)`` (``paths:KxL`` trees, where the child of
    ``y`` carries the ``N_y`` paths that drew it); ``sum_k c_k = m``.

Each is an array ``[rows, V]`` (``token``: one row). :func:`enumerated_moves`
computes any of them for any verifier by summing over every draft tuple (small
V); the verifiers provide closed forms (:meth:`PreparedVerifier.moves`):

* *sequential coins* (``rrs``, ``kseq``, ``nss`` on iid drafts): draft ``k`` is
  accepted with probability ``a_k(x)``, and after ``n`` rejections ``Y`` is drawn
  from a fixed residual ``rho``. With ``alpha_k = sum_x q(x) a_k(x)``,
  ``R_k = prod_{i<k} (1 - alpha_i)`` and the law of a rejected draft
  ``r_k = q (1 - a_k) / (1 - alpha_k)``, the walk moves with ``y``

  .. math:: m(y) = \sum_k R_k q(y) a_k(y) + R_{n+1} \rho(y) \Big(1 - \prod_k (1 - r_k(y))\Big);

  the other drafts are independent Bernoulli indicators of ``y`` (``r_i(y)``
  before the accepted one, ``q(y)`` after it), so the position split is a
  product (slot ``j`` takes the move if draft ``j`` holds ``y`` and no draft
  before it does) and the count split the Poisson-binomial law of their sum;
* *one candidate, then speculative sampling* (``optimal-iid``,
  ``optimal-wor``): ``m = min(p, t)`` for the candidate law ``t`` (a rejected
  candidate's residual never lands on a draft); their position and count
  splits on iid drafts have no closed form (summed or sampled);
* ``greedy``, ``hub``, ``nss`` on greedy/hub drafts: finite sums over the
  random draft.

Every closed form is tested against :func:`enumerated_moves`.
"""

from __future__ import annotations

import numpy as np

#: The splits of a move law.
SPLITS = ("token", "position", "count")
#: Most draft tuples :func:`enumerated_moves` sums over.
MAX_MOVE_TUPLES = 200_000


def poisson_binomial(b: np.ndarray) -> np.ndarray:
    """``P(S = s)`` for ``S = sum_i Bernoulli(b[i, y])``, every column at once: ``[rows + 1, V]``."""
    b = np.atleast_2d(b)
    out = np.zeros((b.shape[0] + 1, b.shape[1]))
    out[0] = 1.0
    for i, bi in enumerate(b):
        out[1 : i + 2] = out[1 : i + 2] * (1.0 - bi) + out[: i + 1] * bi
        out[0] *= 1.0 - bi
    return out


def sequential_moves(q: np.ndarray, coins: np.ndarray, residual: np.ndarray, split: str) -> np.ndarray:
    """Move law of a sequential-coin verifier on ``n`` iid drafts from ``q`` (see the module doc).

    ``coins[k, x]``: probability that draft ``k`` is accepted if it is ``x``;
    ``residual``: the law of ``Y`` after every draft is rejected.
    """
    n, V = coins.shape
    a = np.where(q > 0, coins, 0.0)
    alpha = (q * a).sum(axis=1)
    reach = np.concatenate(([1.0], np.cumprod(1.0 - alpha)))  # R_1..R_{n+1}
    with np.errstate(divide="ignore", invalid="ignore"):
        rejected = np.where((1.0 - alpha)[:, None] > 0, q * (1.0 - a) / (1.0 - alpha)[:, None], 0.0)
    accepted = reach[:n, None] * q * a  # [n, V]: accepted at step k with token y
    tail = reach[n] * residual  # every draft rejected, Y = y from the residual
    if split == "token":
        return (accepted.sum(axis=0) + tail * (1.0 - np.prod(1.0 - rejected, axis=0)))[None, :]
    # the other drafts' indicators of y: r_j before the accepted one, q after it
    others = [np.stack([rejected[j] if j < k else q for j in range(n)]) for k in range(n)]
    if split == "count":
        out = np.zeros((n, V))
        for k in range(n):
            rest = np.delete(others[k], k, axis=0)
            out += accepted[k] * poisson_binomial(rest)[:n] if n > 1 else accepted[k][None, :]
        out += tail * poisson_binomial(rejected)[1:]
        return out
    if split != "position":
        raise ValueError(split)
    out = np.zeros((n, V))
    for k in range(n):
        b = others[k]
        clear = 1.0  # P(no draft before the current one holds y), the accepted draft k excepted
        for j in range(k + 1):
            if j == k:
                out[k] += accepted[k] * clear
            else:
                out[j] += accepted[k] * b[j] * clear
                clear = clear * (1.0 - b[j])
    clear = 1.0
    for j in range(n):
        out[j] += tail * rejected[j] * clear
        clear = clear * (1.0 - rejected[j])
    return out


def distinct_split(positions: np.ndarray, split: str) -> np.ndarray:
    """A position move law ``[k, V]`` of drafts that never repeat (wor, greedy, hub) in the asked split."""
    if split == "position":
        return positions
    if split == "token":
        return positions.sum(axis=0)[None, :]
    out = np.zeros_like(positions)
    out[0] = positions.sum(axis=0)
    return out


def enumerated_moves(verifier, split: str, *, max_tuples: int = MAX_MOVE_TUPLES) -> np.ndarray | None:
    """The move law by summing over every draft tuple (None if there are more than ``max_tuples``)."""
    sampler = verifier.draft_sampler
    if sampler.estimate_tuples(verifier.q, verifier.n) > max_tuples:
        return None
    tuples, prob = sampler.tuple_law(verifier.q, verifier.n, max_tuples=max(max_tuples, 1))
    k = tuples.shape[1] if tuples.ndim == 2 else 0
    out = np.zeros((1 if split == "token" else max(k, 1), verifier.V))
    for start in range(0, tuples.shape[0], 2048):
        block = tuples[start : start + 2048]
        out += accumulate_moves(block, verifier.law_at_drafts(block), prob[start : start + 2048], split, verifier.V)
    return out


def accumulate_moves(tuples: np.ndarray, law_at_drafts: np.ndarray, weights: np.ndarray, split: str,
                     V: int) -> np.ndarray:
    """A move law from draft tuples ``[M, k]``, ``law_at_drafts[m, j] = P(Y = tuples[m, j] | tuples[m])`` and
    tuple weights ``[M]`` (probabilities, or ``1/M`` for sampled tuples)."""
    M, k = tuples.shape
    out = np.zeros((1 if split == "token" else max(k, 1), V))
    for j in range(k):
        y = tuples[:, j]
        first = ~(tuples[:, :j] == y[:, None]).any(axis=1)  # the first draft holding y takes the move
        count = (tuples == y[:, None]).sum(axis=1)
        mass = np.where(first, weights * law_at_drafts[:, j], 0.0)
        if split == "token":
            np.add.at(out[0], y, mass)
        elif split == "position":
            np.add.at(out[j], y, mass)
        else:
            np.add.at(out, (count - 1, y), mass)
    return out


def sampled_moves(verifier, split: str, samples: int, rng: np.random.Generator) -> np.ndarray:
    """An unbiased estimate of the move law from ``samples`` draft tuples drawn from the draft law (any
    verifier; :meth:`~.base.PreparedVerifier.law_at_drafts` gives each tuple's exact conditional law)."""
    tuples = verifier.draft_sampler.sample(verifier.q, verifier.n, rng, int(samples))
    return accumulate_moves(tuples, verifier.law_at_drafts(tuples), np.full(tuples.shape[0], 1.0 / samples), split,
                            verifier.V)


__all__ = ["MAX_MOVE_TUPLES", "SPLITS", "accumulate_moves", "distinct_split", "enumerated_moves", "poisson_binomial",
           "sampled_moves", "sequential_moves"]
