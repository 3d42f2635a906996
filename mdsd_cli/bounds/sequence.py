"""Sequence-level bounds for a draft tree: the most tokens per step any lossless verifier can give.

Let ``T_d`` be the set of depth-``d`` paths (token sequences) of a random draft
tree and ``Y`` the target's output. A lossless verifier accepts ``d`` drafts
only if ``Y_{1:d}`` is in ``T_d``, so with ``p_{1:d}`` the target's law of the
next ``d`` tokens

.. math::

    E[\\text{accepted}] \\le \\sum_{d=1}^{D} \\alpha^*_d, \\qquad
    \\alpha^*_d = \\max_{\\text{couplings}} P(Y_{1:d} \\in T_d)
               = 1 + \\min_{H} \\big[P(T_d \\text{ meets } H) - p_{1:d}(H)\\big]

(the single-step α* with length-``d`` sequences as the tokens). Three values, each
at most the one before:

``sum_alpha_star``  the sum above (:func:`sequence_alpha_star` per depth);
``coupling_lp``     one coupling of the tree and ``Y_{1:D}`` for all depths at once,
                    maximising ``E[max{d : Y_{1:d} in T_d}]`` (:func:`coupling_lp`);
``lossless_lp``     the best lossless verifier: the law of the step's output given
                    the tree, such that the output continued by the target is the
                    target's law (:func:`lossless_lp`). Every lossless verifier —
                    even one that knows p and q everywhere — is one of its feasible
                    points, and every feasible point is a lossless verifier, so this
                    is the exact optimum.

The LPs enumerate every tree and every sequence: tiny V and depth only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..errors import SizeLimitError
from ..samplers import get_sampler
from .chain import chain_solve
from .lp import certified_max

#: Most LP variables :func:`coupling_lp` and :func:`lossless_lp` build.
MAX_SEQUENCE_LP_VARIABLES = 2_000_000


def prefix_sets(paths: Sequence[tuple[int, ...]], depth: int) -> tuple[frozenset, ...]:
    """``(T_1, ..., T_D)``: the sets of depth-``d`` paths among ``paths`` (a tree's node paths)."""
    return tuple(frozenset(p for p in paths if len(p) == d) for d in range(1, depth + 1))


def aggregate(trees: Sequence[tuple[tuple[frozenset, ...], float]]) -> tuple[list, np.ndarray]:
    """Merge trees with the same prefix sets (every bound depends on the tree only through them)."""
    mass: dict = {}
    for sets, prob in trees:
        mass[sets] = mass.get(sets, 0.0) + float(prob)
    keys = list(mass)
    return keys, np.array([mass[k] for k in keys])


def _flat(seq: tuple[int, ...], V: int) -> int:
    i = 0
    for t in seq:
        i = i * V + int(t)
    return i


def accepted_length(sets: tuple[frozenset, ...], y: tuple[int, ...]) -> int:
    """``max{d : y_{1:d} in T_d}`` (0 if ``y_1`` is not in ``T_1``)."""
    d = 0
    while d < len(sets) and tuple(y[: d + 1]) in sets[d]:
        d += 1
    return d


def sequence_alpha_star(p_d: np.ndarray, q_d: np.ndarray, n: int, *, sampler: str = "iid") -> float:
    """α*_d of ``n`` independent root paths (``paths:nxL`` with iid drafts; ``n = 1``: a chain), exact.

    ``p_d``, ``q_d`` are the target's and the draft's laws of the next ``d``
    tokens (any shape; flattened). The depth-``d`` paths of ``n`` independent
    paths are ``n`` iid draws from ``q_{1:d}``, so the single-step chain theorem
    applies with sequences as tokens: ``P(T_d meets H) = 1 - (1 - q_{1:d}(H))^n``.
    """
    P = np.asarray(p_d, dtype=float).reshape(1, -1)
    Q = np.asarray(q_d, dtype=float).reshape(1, -1)
    get_sampler(sampler)
    return float(chain_solve(P, Q, int(n), sampler=sampler, want_sets=False)[0][0])


def uniform_tree_alpha_star_2(p_2: np.ndarray, q_1: np.ndarray, q_2: np.ndarray, widths: tuple[int, int]) -> float:
    """An upper bound on α*_2 of a tree with ``k1`` iid root drafts, each with ``k2`` iid children.

    ``P(T_2 meets H) = 1 - (sum_x q(x) (1 - q(H_x | x))^k2)^k1`` with
    ``H_x = {y : (x, y) in H}``, evaluated exactly for every prefix ``H`` of the
    sequences sorted by ``p_{1:2} / q_{1:2}``; the smallest value over them
    bounds α*_2 from above (any ``H`` does). ``p_2``, ``q_2``: ``[V, V]`` joint laws; ``q_1``: ``[V]``.
    """
    k1, k2 = widths
    V = q_1.size
    p = np.asarray(p_2, dtype=float).ravel()
    q = np.asarray(q_2, dtype=float).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(-ratio, kind="stable")
    xs = order // V
    # a_x after each step: the conditional draft mass of H_x, accumulated within each x in the global order
    by_x = np.argsort(xs, kind="stable")
    cond = np.zeros_like(q)
    qx = q_1[xs]
    with np.errstate(divide="ignore", invalid="ignore"):
        cond_step = np.where(qx > 0, q[order] / np.where(qx > 0, qx, 1.0), 0.0)
    grouped = cond_step[by_x]
    group_x = xs[by_x]
    csum = np.cumsum(grouped)
    starts = np.r_[0, np.flatnonzero(np.diff(group_x)) + 1]
    offsets = np.repeat(csum[starts] - grouped[starts], np.diff(np.r_[starts, grouped.size]))
    after = np.empty_like(cond)
    after[by_x] = np.clip(csum - offsets, 0.0, 1.0)
    before = np.clip(after - cond_step, 0.0, 1.0)
    delta = qx * ((1.0 - after) ** k2 - (1.0 - before) ** k2)
    S = np.clip(1.0 + np.cumsum(delta), 0.0, 1.0)
    objective = np.r_[0.0, 1.0 - S ** k1 - np.cumsum(p[order])]
    return float(np.clip(1.0 + objective.min(), 0.0, 1.0))


def _check_size(count: int, what: str) -> None:
    if count > MAX_SEQUENCE_LP_VARIABLES:
        raise SizeLimitError(f"the {what} needs {count:,} variables and constraint entries (limit "
                             f"{MAX_SEQUENCE_LP_VARIABLES:,}); use a smaller vocabulary, tree or depth")


def _columns(sets: list, p_seq: np.ndarray) -> list[tuple[int, int, int]]:
    """The lossless LP's variables ``(class, l, flat index of w in V^(l+1))`` with ``p(w) > 0``."""
    D = p_seq.ndim - 1
    V = p_seq.shape[0]
    marg = _marginals(p_seq)
    cols: list[tuple[int, int, int]] = []
    for i, s in enumerate(sets):
        prefixes = [[()]] + [sorted(level) for level in s]
        for k in range(D + 1):
            for pre in prefixes[k]:
                base = _flat(pre, V) * V
                for y in range(V):
                    if marg[k + 1][base + y] > 0:
                        cols.append((i, k, base + y))
    return cols


def _marginals(p_seq: np.ndarray) -> list[np.ndarray]:
    """``marg[k]``: the law of the first ``k`` tokens, flat (``marg[0] = [1]``)."""
    D = p_seq.ndim - 1
    return [p_seq.sum(axis=tuple(range(k, D + 1))).ravel() if k <= D else p_seq.ravel() for k in range(D + 2)]


def lp_sizes(sets: list, p_seq: np.ndarray) -> dict[str, int]:
    """Variables and constraint entries each LP builds (``per-depth LP``, ``coupling LP``, ``lossless LP``), as
    checked against :data:`MAX_SEQUENCE_LP_VARIABLES` before building them."""
    D = p_seq.ndim - 1
    V = p_seq.shape[0]
    per_depth = max((sum(len(level) for level in {s[d]: 0 for s in sets}) for d in range(D)), default=0)
    lossless = sum(V ** (D - k) for _, k, _ in _columns(sets, p_seq))
    return {"per-depth LP": per_depth, "coupling LP": len(sets) * V ** D, "lossless LP": lossless}


def per_depth_lp(sets: list, probs: np.ndarray, p_d: np.ndarray, d: int) -> float:
    """α*_d by the transport LP between ``T_d`` (over the enumerated trees) and ``Y_{1:d}``, to 1e-9
    (verified by a duality gap, :func:`~.lp.certified_max`)."""
    import scipy.sparse as sp

    V = p_d.shape[0]
    law: dict = {}
    for s, pr in zip(sets, probs):
        law[s[d - 1]] = law.get(s[d - 1], 0.0) + pr
    levels = list(law)
    rows, cols = [], []
    for i, level in enumerate(levels):
        for seq in level:
            rows.append(i)
            cols.append(_flat(seq, V))
    _check_size(len(rows), "per-depth LP")
    A = sp.csr_matrix((np.ones(len(rows)), (rows, np.arange(len(rows)))), shape=(len(levels), len(rows)))
    B = sp.csr_matrix((np.ones(len(rows)), (cols, np.arange(len(rows)))), shape=(V ** d, len(rows)))
    return certified_max(np.ones(len(rows)), A_ub=sp.vstack([A, B]),
                         b_ub=np.r_[[law[k] for k in levels], p_d.ravel()], what="per-depth LP").value


def coupling_lp(sets: list, probs: np.ndarray, p_seq: np.ndarray) -> float:
    """``max E[max{d : Y_{1:d} in T_d}]`` over couplings of the tree and ``Y_{1:D}`` (``p_seq``: ``[V] * D``),
    to 1e-9 (verified by a duality gap)."""
    import scipy.sparse as sp

    D = p_seq.ndim
    V = p_seq.shape[0]
    ys = list(itertools.product(range(V), repeat=D))
    _check_size(len(sets) * len(ys), "coupling LP")
    reward = np.array([[accepted_length(s, y) for y in ys] for s in sets], dtype=float)
    # x[i, j] flat as i * len(ys) + j; <= instead of ==: the same optimum (rewards are >= 0, so a partial
    # coupling extends without loss), and no infeasibility from the two marginals' rounding
    rows = sp.kron(sp.identity(len(sets)), np.ones((1, len(ys))), format="csr")
    columns = sp.kron(np.ones((1, len(sets))), sp.identity(len(ys)), format="csr")
    return certified_max(reward.ravel(), A_ub=sp.vstack([rows, columns]), b_ub=np.r_[probs, p_seq.ravel()],
                         what="coupling LP").value


def lossless_lp(sets: list, probs: np.ndarray, p_seq: np.ndarray) -> float:
    """The most drafts any lossless verifier accepts per step, on average: by an LP, to 1e-9.

    Variables ``r(S, l, w)``: given tree class ``S``, accept ``l`` drafts and emit
    the ``l + 1`` tokens ``w`` (``w_{1:l}`` in ``T_l``). Constraints: the mass of
    each ``S`` is its probability; for every ``z`` in ``V^(D+1)``,
    ``sum_l sum_S r(S, l, z_{1:l+1}) p(z_{l+2:} | z_{1:l+1}) = p(z)`` (the output,
    continued by the target, is the target's law). Objective: ``E[l]``.
    ``p_seq`` is the target's law of the next ``D + 1`` tokens, ``[V] * (D + 1)``.
    The value is verified by a duality gap (:func:`~.lp.certified_max`); a
    solver's unverified answer raises :class:`~mdsd_cli.errors.SolverError`.
    """
    import scipy.sparse as sp

    D = p_seq.ndim - 1
    V = p_seq.shape[0]
    probs = np.asarray(probs, dtype=float) * (p_seq.sum() / np.sum(probs))  # equal totals to the last bit
    marg = _marginals(p_seq)
    cols = _columns(sets, p_seq)
    nz = sum(V ** (D - k) for _, k, _ in cols)
    _check_size(nz, "lossless LP")
    # scaled variables s = r / p(w): the lossless rows become sum_{l, S} s(S, l, z_{1:l+1}) = 1 (a 0-1 matrix,
    # well conditioned however small p(z) is) and the mass of S is sum s(S, l, w) p(w)
    rows, var = [], []
    Z = p_seq.ravel()
    for j, (_, k, w) in enumerate(cols):
        span = V ** (D - k)
        rows.append(np.arange(w * span, (w + 1) * span))
        var.append(np.full(span, j))
    rows_all, var_all = np.concatenate(rows), np.concatenate(var)
    A = sp.csr_matrix((np.ones(rows_all.size), (rows_all, var_all)), shape=(Z.size, len(cols)))
    weight = np.array([marg[c[1] + 1][c[2]] for c in cols])
    cls = np.array([c[0] for c in cols])
    M = sp.csr_matrix((weight, (cls, np.arange(len(cols)))), shape=(len(sets), len(cols)))
    length = np.array([c[1] for c in cols], dtype=float)
    live = Z > 0
    return certified_max(length * weight, A_eq=sp.vstack([M, A[live]]), b_eq=np.r_[probs, np.ones(int(live.sum()))],
                         what="lossless LP").value


__all__ = ["MAX_SEQUENCE_LP_VARIABLES", "accepted_length", "aggregate", "coupling_lp", "lossless_lp", "lp_sizes",
           "per_depth_lp", "prefix_sets", "sequence_alpha_star", "uniform_tree_alpha_star_2"]
