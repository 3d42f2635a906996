"""Two-level transport: a reference rule for depth-2 draft trees that looks at every child's drafts at once.

Exact laws only, at small vocabularies (a measurement for docs/sequence.md and the `sequence-level` experiment,
not a verifier for `mdsd decode`). The root keeps ``select-traversal``'s per-node optimal acceptances ``A_j``
(child ``j`` with token ``x_j``); given the root's drafts and the drafts ``Y`` below every child, child ``j`` and
its draft ``z`` are accepted with probability ``m(Y, j, z)``, the optimum of a transport LP over the children's
draft tuples (whose laws are the tree's own, ``Q`` at the children)::

    maximise  E_Y sum_{j, z in Y_j} m(Y, j, z)
    s.t.      sum_{j, z} m(Y, j, z) <= 1 for every Y,    E_Y m(Y, j, z) <= A_j P_j(z) for every (j, z).

What the LP leaves is filled in with fixed fractions (``need(j, z) = A_j P_j(z) - E_Y m(Y, j, z)`` for "append
``x_j`` then ``z``", ``1 - sum_j A_j`` for the root's residual), so that given the root's drafts the step
appends ``x_j`` then ``z`` with probability exactly ``A_j P_j(z)``: lossless for every root tuple, and a
function of the laws at the tree's nodes only. The LP has one variable per (outcome, child, drafted token), with
``V^(n k)`` outcomes per root tuple.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ..errors import InputError, SizeLimitError
from ..samplers import get_sampler
from .drafting import DraftTree
from .sequence import _emit, _Tries

#: Most outcomes (joint draft tuples of the root's children) one root tuple's LP may enumerate.
MAX_OUTCOMES = 200_000


def transport(A, P_children, Q_children, k, sampler):
    """The LP's accepted picks ``{(Y, j, z): m}`` over the children's draft tuples Y, and what they leave per
    (j, z) (``need``, to be filled in), made exactly feasible (the solver's answer is clipped and scaled down)."""
    n, V = len(A), P_children[0].size
    laws = []
    count = 1
    for q in Q_children:
        tuples, probs = get_sampler(sampler).tuple_law(q, k)
        laws.append([(tuple(int(t) for t in row), float(p)) for row, p in zip(tuples, probs) if p > 0])
        count *= len(laws[-1])
        if count > MAX_OUTCOMES:
            raise SizeLimitError(f"two-level transport: more than {MAX_OUTCOMES:,} joint draft tuples below one root "
                                 "tuple; use a smaller tree or vocabulary")
    outcomes = list(itertools.product(*laws))
    prob = np.array([np.prod([p for _, p in o]) for o in outcomes])
    var = [(oi, j, z) for oi, o in enumerate(outcomes) for j in range(n) for z in sorted(set(o[j][0]))]
    rows_o = np.array([oi for oi, _, _ in var])
    rows_jz = np.array([j * V + z for _, j, z in var])
    cols = np.arange(len(var))
    per_outcome = sp.csr_matrix((np.ones(len(var)), (rows_o, cols)), shape=(len(outcomes), len(var)))
    per_pick = sp.csr_matrix((prob[rows_o], (rows_jz, cols)), shape=(n * V, len(var)))
    cap = np.concatenate([A[j] * P_children[j] for j in range(n)])
    res = linprog(-prob[rows_o], A_ub=sp.vstack([per_outcome, per_pick]), b_ub=np.r_[np.ones(len(outcomes)), cap],
                  bounds=(0, 1), method="highs")
    if res.status != 0:
        raise RuntimeError(f"two-level transport LP: {res.message}")
    x = np.clip(res.x, 0.0, 1.0)
    total = per_outcome @ x
    x = x * np.where(total[rows_o] > 1.0, 1.0 / np.maximum(total[rows_o], 1e-300), 1.0)
    got = per_pick @ x
    x = x * np.where(got[rows_jz] > cap[rows_jz], cap[rows_jz] / np.maximum(got[rows_jz], 1e-300), 1.0)
    picks = {(tuple(t for t, _ in outcomes[oi]), j, z): x[v] for v, (oi, j, z) in enumerate(var) if x[v] > 0}
    return picks, np.maximum(cap - per_pick @ x, 0.0).reshape(n, V)


def two_level_law(tree: DraftTree, P, sampler: str, rules: dict | None = None, key=None) -> dict:
    """The rule's exact output law on one depth-2 tree whose children all have the same number of drafts, as
    ``{tokens: probability}`` (:meth:`~.sequence.SequenceVerifier.output_law`'s form). One LP per root tuple,
    memoised in ``rules`` under ``(key, root drafts)`` (``key``: the context and temperature)."""
    rules = {} if rules is None else rules
    kids = tree.children[0]
    widths = {len(tree.children[c]) for c in kids}
    if not kids or len(widths) != 1 or 0 in widths or any(tree.children[g] for c in kids for g in tree.children[c]):
        raise InputError("two-level transport runs on depth-2 trees whose root's children all have the same "
                         "number of drafts (e.g. 2x2, 3,1)")
    drafts = tuple(tree.tokens[c] for c in kids)
    tries = _Tries(tree, P, sampler)
    A, _, r, rho = tries.at(0, 1.0)
    k = len(tree.children[kids[0]])
    if (key, drafts) not in rules:
        rules[key, drafts] = transport(A, [P[c] for c in kids], [tree.q[c] for c in kids], k, sampler)
    picks, need = rules[key, drafts]
    below = tuple(tuple(tree.tokens[g] for g in tree.children[c]) for c in kids)
    out: dict = {}
    used = 0.0
    for j, c in enumerate(kids):
        for z in dict.fromkeys(below[j]):
            m = picks.get((below, j, z), 0.0)
            g = next(g for g in tree.children[c] if tree.tokens[g] == z)
            _emit(out, (drafts[j], z), m, P[g])
            used += m
    rest_root = max(1.0 - float(A.sum()), 0.0)
    fill, share = 1.0 - used, float(need.sum()) + rest_root
    if fill > 0 and share > 0:
        for j, c in enumerate(kids):
            for z in np.flatnonzero(need[j] > 0):
                grand = [g for g in tree.children[c] if tree.tokens[g] == z]
                if grand:  # a drafted z is accepted, with a bonus token
                    _emit(out, (drafts[j], int(z)), fill * need[j, z] / share, P[grand[0]])
                else:
                    out[(drafts[j], int(z))] = out.get((drafts[j], int(z)), 0.0) + fill * need[j, z] / share
        if rest_root > 0 and rho > 0:
            _emit(out, (), fill * rest_root / share, r / rho)
    return out


__all__ = ["MAX_OUTCOMES", "transport", "two_level_law"]
