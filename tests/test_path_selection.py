"""The lossless optimum of a draft tree is a path optimum (docs/sequence.md, "The tree optimum is a path
optimum"): choosing one root-to-leaf path of the drawn tree (by any rule that may look at the whole tree),
then verifying that path alone as a chain, loses nothing against the best lossless verifier of the tree.

The single-path LP below (its own HiGHS LP, on the enumerated trees of
:mod:`tests.test_node_restricted`) has a selection ``pi(S, z)`` of a path ``z`` of tree class ``S`` and a
chain verifier ``r(z, acc, w)`` that sees only ``z`` (``w`` extends the accepted prefix of ``z`` by one
token); its value equals :func:`mdsd_cli.bounds.sequence.lossless_lp`. Choosing always the same path
(the first in token order) instead loses acceptance, so the check has teeth.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

from mdsd_cli.bounds.sequence import lossless_lp

from .test_node_restricted import D, V, _instance, _sequence_law, _trees


def single_path_lp(trees: dict, p: dict, *, first_path_only: bool = False) -> float:
    law = _sequence_law(p)
    paths = sorted({z for S in trees for z in S[D - 1]})
    pick = [(S, z) for S in trees for z in (sorted(S[D - 1])[:1] if first_path_only else sorted(S[D - 1]))]
    kernel = [(z, acc, z[:acc] + (y,)) for z in paths for acc in range(D + 1) for y in range(V)]
    n1, n2 = len(pick), len(kernel)
    A, b = [], []
    for S, mass in trees.items():  # the selection takes each tree's whole mass
        row = np.zeros(n1 + n2)
        row[[i for i, (S2, _) in enumerate(pick) if S2 == S]] = 1.0
        A.append(row)
        b.append(mass)
    for z in paths:  # the chain verifier gets each path with the mass the selection gives it
        row = np.zeros(n1 + n2)
        row[[i for i, (_, z2) in enumerate(pick) if z2 == z]] = -1.0
        row[[n1 + j for j, (z2, _, _) in enumerate(kernel) if z2 == z]] = 1.0
        A.append(row)
        b.append(0.0)
    for y in itertools.product(range(V), repeat=D + 1):  # lossless: the output, continued by the target, is p
        row = np.zeros(n1 + n2)
        for j, (_, acc, w) in enumerate(kernel):
            if y[:acc + 1] == w:
                row[n1 + j] = np.prod([p[y[:k]][y[k]] for k in range(acc + 1, D + 1)])
        A.append(row)
        b.append(law[y])
    c = np.zeros(n1 + n2)
    c[n1:] = [acc for _, acc, _ in kernel]
    res = linprog(-c, A_eq=np.array(A), b_eq=np.array(b), bounds=(0, None), method="highs",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0, res.message
    return -res.fun


@pytest.mark.parametrize("seed", range(6))
def test_the_tree_optimum_is_reached_by_choosing_one_path_and_verifying_it_alone(seed):
    p, q = _instance(seed)
    trees = _trees(q)
    best = lossless_lp(list(trees), np.array(list(trees.values())), _sequence_law(p))
    assert single_path_lp(trees, p) == pytest.approx(best, abs=1e-8)
    assert single_path_lp(trees, p, first_path_only=True) < best - 1e-6
