"""A route tried for the optimal tree verifier (docs/sequence.md): does falling back to the other drafts
after the per-node optimal choice's path is rejected add anything to `select-block`?

The walk below is traversal verification with each node's children examined in a random order: the child
the per-node optimal verifier (`optimal-iid` / `optimal-wor`) picks first, the others after it in slot
order. Each child is judged against its exact conditional law given the shapes of the subtrees examined
so far (its own included) and the tokens before it, computed by enumerating the node's draft tuples;
the order never looks below the node, so a subtree is still a fresh draw given its token. Checked here:
it is lossless on every enumerated tree; with the order of the slots it is `traversal` and without
fall-backs it is `select-block`, value for value; and the fall-backs add nothing with wor drafts and
at most 1e-3 with iid drafts, which is why `mdsd` does not ship it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mdsd_cli.decode import parse_tree
from mdsd_cli.decode.exact import ConditionalLaws, sequence_law, stream_law, tree_law, tree_paths
from mdsd_cli.decode.sequence import SEQUENCE_VERIFIERS, _after_rejection, _child_weight, _emit
from mdsd_cli.models.synthetic import synthetic_models
from mdsd_cli.verifiers import VERIFIERS


def tuple_law(q, n, sampler):
    """Every draft tuple of the node with its probability (iid, or without replacement)."""
    out = {}
    for d in itertools.product(range(q.size), repeat=n):
        if sampler == "iid":
            prob = float(np.prod(q[list(d)]))
        else:
            if len(set(d)) < n:
                continue
            prob, left = 1.0, 1.0
            for x in d:
                prob, left = prob * q[x] / left, left - q[x]
        if prob > 0:
            out[d] = prob
    return out


def skeleton(tree, u):
    return tuple(skeleton(tree, c) for c in tree.children[u])


class Walk:
    """Traversal with a chosen order of the children (``ordered``: the per-node choice first)."""

    def __init__(self, tree, P, sampler, ordered: bool, fallback: bool):
        self.tree, self.P, self.sampler, self.ordered, self.fallback = tree, P, sampler, ordered, fallback
        self.verifiers: dict = {}

    def picks(self, u, drafts):
        n = len(drafts)
        if not self.ordered:
            return np.eye(n)[0]
        v = self.verifiers.get(u)
        if v is None:
            cls = VERIFIERS[SEQUENCE_VERIFIERS["select-block"].per_node(self.sampler)]
            v = self.verifiers[u] = cls(self.P[u], self.tree.q[u], n, self.sampler)
        got = np.maximum(np.asarray(v.choice(np.asarray(drafts, dtype=np.int64)[None, :]), dtype=float)[0], 0.0)
        return got / got.sum()

    def order_law(self, u, shapes):
        """Law of (shapes in examination order, tokens in examination order) at node ``u``."""
        law: dict = {}
        n = len(shapes)
        for d, prob in tuple_law(self.tree.q[u], n, self.sampler).items():
            for k, pick in enumerate(self.picks(u, d)):
                if pick > 0:
                    order = (k, *(i for i in range(n) if i != k))
                    key = (tuple(shapes[i] for i in order), tuple(d[i] for i in order))
                    law[key] = law.get(key, 0.0) + prob * pick
        return law

    def run(self, u, w, weight, out):
        """Adds the law of the outcomes of ``u``'s subtree (times ``weight``) to ``out``; returns P(rejected)."""
        tree, P = self.tree, self.P
        children = tree.children[u]
        path = tuple(tree.tokens[v] for v in self.path(u))
        if not children:
            accept = 1.0 if u == 0 else w
            _emit(out, path, weight * accept, P[u])
            return 1.0 - accept
        shapes = [skeleton(tree, c) for c in children]
        law = self.order_law(u, shapes)
        drafts = [tree.tokens[c] for c in children]
        rejected = 0.0
        for k, pick in enumerate(self.picks(u, drafts)):
            if pick <= 0:
                continue
            order = (k, *(i for i in range(len(children)) if i != k))
            seen_shapes, seen = tuple(shapes[i] for i in order), tuple(drafts[i] for i in order)
            wu, Pu, stay = w, P[u], 1.0
            for j, i in enumerate(order):
                Q = np.zeros(Pu.size)
                for (s, t), prob in law.items():
                    if s[: j + 1] == seen_shapes[: j + 1] and t[:j] == seen[:j]:
                        Q[t[j]] += prob
                Q /= Q.sum()
                stay *= self.run(children[i], _child_weight(wu, Pu, Q, seen[j]), weight * pick * stay, out)
                wu, Pu = _after_rejection(wu, Pu, Q)
                if not self.fallback or stay <= 0:
                    break
            accept = 1.0 if u == 0 else wu
            if stay > 0 and accept > 0:
                _emit(out, path, weight * pick * stay * accept, Pu)
            rejected += pick * stay * (1.0 - accept)
        return rejected

    def path(self, u):
        nodes = []
        while u > 0:
            nodes.append(u)
            u = self.tree.parents[u]
        return nodes[::-1]


def one_step(name, sampler, context, ordered, fallback, reference=None):
    target, draft = synthetic_models(3, seed=9, noise=1.5)
    P, Q = ConditionalLaws(target, context, 1.0), ConditionalLaws(draft, context, 1.0)
    total: dict = {}
    tau = {"walk": 0.0, reference: 0.0}
    for tree, prob in tree_law(parse_tree(name), sampler, Q):
        Ps = list(P.many(tree_paths(tree)))
        out: dict = {}
        Walk(tree, Ps, sampler, ordered, fallback).run(0, 1.0, 1.0, out)
        assert sum(out.values()) == pytest.approx(1.0, abs=1e-12)
        for block, mass in out.items():
            total[block] = total.get(block, 0.0) + prob * mass
            tau["walk"] += prob * mass * len(block)
        if reference is not None:
            law = SEQUENCE_VERIFIERS[reference].output_law(tree, Ps, sampler)
            tau[reference] += prob * sum(m * len(k) for k, m in law.items())
    depth = parse_tree(name).depth
    error = max(float(np.abs(stream_law(total, P, 3, k) - sequence_law(P, 3, k)).max()) for k in range(1, depth + 2))
    return tau, error


CASES = [("2x2", "iid", (0,)), ("2x2", "wor", (1, 2)), ("3,1", "iid", (0,)),
         ("3,1", "wor", (1, 2)), ("2,1,2", "wor", (0,))]


@pytest.mark.parametrize("name,sampler,context", CASES)
def test_falling_back_after_the_per_node_choice_is_lossless_and_adds_next_to_nothing(name, sampler, context):
    plain, e0 = one_step(name, sampler, context, ordered=False, fallback=True, reference="traversal")
    alone, e1 = one_step(name, sampler, context, ordered=True, fallback=False, reference="select-block")
    both, e2 = one_step(name, sampler, context, ordered=True, fallback=True)
    assert max(e0, e1, e2) < 1e-12  # lossless: the law of the next D + 1 tokens is the target's
    assert plain["walk"] == pytest.approx(plain["traversal"], abs=1e-12)  # slot order: traversal itself
    assert alone["walk"] == pytest.approx(alone["select-block"], abs=1e-12)  # no fall-back: select-block
    gain = both["walk"] - alone["walk"]
    assert -1e-12 <= gain <= (1e-12 if sampler == "wor" else 1e-3), gain
