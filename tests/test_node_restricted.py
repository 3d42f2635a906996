"""The node-restricted optimum equals the lossless LP (docs/sequence.md, "What a verifier may know").

A real verifier sees the draft tree and the target's (and draft's) next-token laws at the tree's
nodes only; the lossless LP lets its kernel depend on p at every sequence. The proof in
docs/sequence.md builds, from an optimal LP kernel for one instance (p, q), a verifier that sees
only its tree's nodes and is lossless on *every* instance: where the laws at a tree's nodes are the
instance's, it is the LP kernel; where they differ, it collapses the LP kernel above the topmost
differing nodes and is locally lossless below them. These tests check the two steps of that proof
on small enumerated trees, with an LP solved here (scipy's HiGHS, independent of
:func:`mdsd_cli.bounds.sequence.lossless_lp`):

* the completed verifier's exact output law on a perturbed instance is the perturbed target's;
* the LP over both instances, with the kernels tied on every tree that cannot see the perturbation,
  has the same value at the reference instance as the untied LP; tying also the trees that can see
  it (a verifier blind to the laws at its own nodes) loses acceptance, so the check has teeth.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

from mdsd_cli.bounds.sequence import lossless_lp

V, D = 3, 2  # tokens, tree depth: outputs are D + 1 = 3 tokens


def _instance(seed):
    """Conditional laws: target p[()] , p[(x,)], p[(x, y)]; draft q[()], q[(x,)]."""
    rng = np.random.default_rng(seed)
    p = {s: rng.dirichlet(np.full(V, 0.8)) for k in range(D + 1) for s in itertools.product(range(V), repeat=k)}
    q = {s: rng.dirichlet(np.full(V, 0.8)) for k in range(D) for s in itertools.product(range(V), repeat=k)}
    return p, q


def _sequence_law(p):
    law = np.zeros((V,) * (D + 1))
    for z in itertools.product(range(V), repeat=D + 1):
        law[z] = np.prod([p[z[:k]][z[k]] for k in range(D + 1)])
    return law


def _trees(q):
    """Two iid drafts at the root, one iid child under each distinct first token: ``{class: probability}``
    with a class the prefix sets ``(T_1, T_2)``."""
    out = {}
    for x1, x2 in itertools.product(range(V), repeat=2):
        firsts = sorted({x1, x2})
        for ys in itertools.product(range(V), repeat=len(firsts)):
            prob = q[()][x1] * q[()][x2] * np.prod([q[(x,)][y] for x, y in zip(firsts, ys)])
            S = (frozenset((x,) for x in firsts), frozenset((x, y) for x, y in zip(firsts, ys)))
            out[S] = out.get(S, 0.0) + prob
    return out


def _outcomes(S):
    """Every ``(acc, w)`` a verifier may emit on class ``S``: ``w_{1:acc}`` in ``T_l``, ``w`` of length ``acc + 1``."""
    levels = ({()},) + tuple(S)
    return [(acc, pre + (y,)) for acc in range(D + 1) for pre in sorted(levels[acc]) for y in range(V)]


def _lossless_rows(trees, p):
    """Equality rows of the lossless LP for one instance, over its own variables."""
    law = _sequence_law(p)
    cols = [(S, acc, w) for S in trees for acc, w in _outcomes(S)]
    index = {c: j for j, c in enumerate(cols)}
    A, b = [], []
    for S, mass in trees.items():
        row = np.zeros(len(cols))
        row[[index[(S, acc, w)] for acc, w in _outcomes(S)]] = 1.0
        A.append(row)
        b.append(mass)
    for z in itertools.product(range(V), repeat=D + 1):
        row = np.zeros(len(cols))
        for j, (_, acc, w) in enumerate(cols):
            if z[:acc + 1] == w:
                row[j] = np.prod([p[z[:k]][z[k]] for k in range(acc + 1, D + 1)])
        A.append(row)
        b.append(law[z])
    return cols, index, np.array(A), np.array(b)


def _solve(blocks, objective, ties=()):
    """``max objective·x`` over the stacked instances' variables, with ``x_i = x_j`` for each tie."""
    sizes = [len(c) for c, _, _, _ in blocks]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    A = np.zeros((sum(a.shape[0] for _, _, a, _ in blocks) + len(ties), offsets[-1]))
    b = np.zeros(A.shape[0])
    r = 0
    for k, (_, _, a, bb) in enumerate(blocks):
        A[r:r + a.shape[0], offsets[k]:offsets[k + 1]] = a
        b[r:r + a.shape[0]] = bb
        r += a.shape[0]
    for i, j in ties:
        A[r, i], A[r, j] = 1.0, -1.0
        r += 1
    res = linprog(-objective, A_eq=A, b_eq=b, bounds=(0, None), method="highs",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0, res.message
    return -res.fun, res.x


def _perturbed(p, q, node, seed):
    """The same instance with the target's and the draft's laws at ``node`` redrawn."""
    rng = np.random.default_rng(seed)
    p2, q2 = dict(p), dict(q)
    p2[node] = rng.dirichlet(np.full(V, 0.8))
    if node in q2:
        q2[node] = rng.dirichlet(np.full(V, 0.8))
    return p2, q2


def _sees(S, node):
    return node == () or node in S[len(node) - 1]


def _completed_law(r_star, cols, trees_ref, trees_new, p_new, node):
    """Exact output law (continued by the target) of the verifier the proof builds from the LP kernel
    ``r_star`` of the reference instance, run on the instance ``(p_new, trees_new)`` that differs at ``node``."""
    k = len(node)

    def collapse(S):  # drop the sequences strictly below node
        return tuple(frozenset(s for s in T if not (len(s) > k and s[:k] == node)) for T in S)

    # the collapsed kernel of the reference: outcomes through node (accepted up to it) become "reach"
    collapsed, mass = {}, {}
    for (S, acc, w), x in zip(cols, r_star):
        if not _sees(S, node):
            continue
        key = collapse(S)
        out = "reach" if acc >= k and w[:k] == node else (acc, w)
        collapsed.setdefault(key, {})
        collapsed[key][out] = collapsed[key].get(out, 0.0) + x
    for S, m in trees_ref.items():
        if _sees(S, node):
            mass[collapse(S)] = mass.get(collapse(S), 0.0) + m
    kernel = {}
    for (S, acc, w), x in zip(cols, r_star):
        if not _sees(S, node):
            kernel.setdefault(S, {})[(acc, w)] = x / trees_ref[S]
    law = np.zeros((V,) * (D + 1))

    def emit(prob, acc, w):
        for z in itertools.product(range(V), repeat=D + 1):
            if z[:acc + 1] == w:
                law[z] += prob * np.prod([p_new[z[:j]][z[j]] for j in range(acc + 1, D + 1)])

    for S, m in trees_new.items():
        if not _sees(S, node):  # the tree cannot tell the instances apart: the LP kernel itself
            for (acc, w), x in kernel[S].items():
                emit(m * x, acc, w)
            continue
        key = collapse(S)
        for out, x in collapsed[key].items():
            share = m * x / mass[key]
            if out == "reach":  # locally lossless below node: append one token of the new target's law there
                for y in range(V):
                    emit(share * p_new[node][y], k, node + (y,))
            else:
                emit(share, *out)
    return law


@pytest.mark.parametrize("seed,node", [(0, (0,)), (1, (2,)), (2, (1, 0)), (3, ())])
def test_the_lp_kernel_completes_to_a_verifier_that_sees_only_its_nodes(seed, node):
    p, q = _instance(seed)
    trees = _trees(q)
    cols, _, A, b = _lossless_rows(trees, p)
    objective = np.array([acc for _, acc, _ in cols], dtype=float)
    value, r_star = _solve([(cols, None, A, b)], objective)
    # the LP here is the library's lossless LP (grouped by the same classes)
    classes, probs = list(trees), np.array(list(trees.values()))
    assert value == pytest.approx(lossless_lp(classes, probs, _sequence_law(p)), abs=1e-8)
    p2, q2 = _perturbed(p, q, node, seed + 100)
    trees2 = _trees(q2)
    law = _completed_law(r_star, cols, trees, trees2, p2, node)
    np.testing.assert_allclose(law, _sequence_law(p2), atol=1e-9)
    # and on the reference instance itself it is the LP kernel: value = the LP's
    np.testing.assert_allclose(_completed_law(r_star, cols, trees, trees, p, (0, 0)), _sequence_law(p), atol=1e-9)


@pytest.mark.parametrize("seed,node", [(4, (0,)), (5, (1,)), (6, (2, 2))])
def test_tying_the_kernels_the_tree_cannot_tell_apart_costs_nothing(seed, node):
    p, q = _instance(seed)
    p2, q2 = _perturbed(p, q, node, seed + 100)
    if node in q:  # the blind variant below needs the same draft law (its trees' masses must agree)
        q2 = dict(q)
    ref, new = _trees(q), _trees(q2)
    blocks = [_lossless_rows(ref, p), _lossless_rows(new, p2)]
    n0 = len(blocks[0][0])
    objective = np.concatenate(([acc for _, acc, _ in blocks[0][0]], np.zeros(len(blocks[1][0]))))
    free, _ = _solve(blocks, objective)
    alone, _ = _solve(blocks[:1], objective[:n0])
    assert free == pytest.approx(alone, abs=1e-9)

    def ties(blind):
        idx2 = blocks[1][1]
        return [(j, n0 + idx2[c]) for j, c in enumerate(blocks[0][0]) if c in idx2 and (blind or not _sees(c[0], node))]

    tied, _ = _solve(blocks, objective, ties(False))
    assert tied == pytest.approx(alone, abs=1e-9)  # node-restricted = the lossless LP
    blind, _ = _solve(blocks, objective, ties(True))
    assert blind < alone - 1e-5  # a verifier that could not see the laws at its own nodes loses
