"""Exact laws on tiny models: every draft tree with its probability, sequence laws, a step's stream law.

Used to check verifiers exactly (the law of what a step appends, continued by
the target, must be the target's sequence law) and to compute the
sequence-level bounds where every tree and every sequence can be enumerated
(V of a few tokens, depth 2-3).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import SizeLimitError
from ..samplers import get_sampler
from ..verifiers.base import set_up
from .drafting import DraftTree
from .laws import model_rows, tempered
from .trees import TreeShape

#: Most draft trees :func:`tree_law` enumerates.
MAX_TREES = 200_000


class ConditionalLaws:
    """``law(path)``: a model's next-token law at ``prefix + path`` at a temperature, memoised."""

    def __init__(self, model, prefix: Sequence[int], temperature: float):
        self.model, self.prefix, self.temperature = model, list(prefix), float(temperature)
        self.vocab_size = model.vocab_size
        self._memo: dict[tuple[int, ...], np.ndarray] = {}

    def many(self, paths: Sequence[tuple[int, ...]]) -> np.ndarray:
        missing = [p for p in dict.fromkeys(map(tuple, paths)) if p not in self._memo]
        if missing:
            rows = tempered(model_rows(self.model, self.model.logits([self.prefix + list(p) for p in missing]),
                                       len(missing)), self.temperature)
            self._memo.update(zip(missing, rows))
        return np.stack([self._memo[tuple(p)] for p in paths]) if paths else np.zeros((0, self.vocab_size))

    def __call__(self, path: Sequence[int]) -> np.ndarray:
        return self.many([tuple(path)])[0]


def sequence_law(law: Callable, V: int, length: int) -> np.ndarray:
    """The joint law of the next ``length`` tokens, an array of shape ``[V] * length``."""
    joint = np.ones(())
    for d in range(length):
        paths = list(itertools.product(range(V), repeat=d))
        cond = law.many(paths) if hasattr(law, "many") else np.stack([law(p) for p in paths])
        joint = (joint.reshape(-1, 1) * cond).reshape((V,) * (d + 1))
    return joint


def tree_law(shape: TreeShape, sampler: str, q_law: Callable, *, max_trees: int = MAX_TREES) -> list[tuple[DraftTree, float]]:
    """Every draft tree ``grow_tree`` can draw with ``shape`` and ``sampler``, with its exact probability.

    ``q_law(path)`` is the draft's (tempered) law after the path. Trees are
    built exactly as :func:`~.drafting.grow_tree` builds them (same node order,
    same child slots), so a verifier sees the same objects.
    """
    s = get_sampler(sampler)
    done: list[tuple[DraftTree, float]] = []
    # a state: (tree, slots, pending nodes to expand in grow_tree's order, probability)
    stack = [(DraftTree(), [shape.root()], [0], 1.0)]
    while stack:
        tree, slots, pending, prob = stack.pop()
        expand = [u for u in pending if shape.width(slots[u]) > 0]
        if not expand:
            done.append((tree, prob))
            if len(done) > max_trees:
                raise SizeLimitError(f"more than {max_trees:,} draft trees to enumerate; use a smaller tree or V")
            continue
        u, rest = expand[0], expand[1:]
        path = _path(tree, u)
        q = q_law(path)
        n = shape.width(slots[u])
        tuples, probs = s.tuple_law(q, n)
        for drafts, pr in zip(tuples, probs):
            if pr <= 0:
                continue
            t = copy.deepcopy(tree)
            sl = list(slots)
            t.q[u], t.drafts[u], t.n[u] = q, np.asarray(drafts, dtype=np.int64), n
            new = []
            for token, slot in shape.children_of(slots[u], drafts):
                new.append(t.add(u, token))
                sl.append(slot)
            # grow_tree's order: the rest of this level, then the new nodes (same node indices)
            stack.append((t, sl, rest + new, prob * float(pr)))
    return done


def _path(tree: DraftTree, u: int) -> tuple[int, ...]:
    out = []
    while u > 0:
        out.append(tree.tokens[u])
        u = tree.parents[u]
    return tuple(out[::-1])


def tree_paths(tree: DraftTree) -> list[tuple[int, ...]]:
    """The token path of every node (the root's is empty)."""
    return [_path(tree, u) for u in range(tree.size)]


def per_node_output_law(tree: DraftTree, P: Sequence[np.ndarray], verifier_cls, sampler: str) -> dict:
    """Exact law of a per-node walk's appended tokens given the drawn ``tree`` (``P[i]``: target law at node i).

    The walk of :func:`~.walk.walk_per_node`: the verifier's exact conditional
    output law at each node; a token shared by several children moves to the
    first of them; a leaf appends one token from its ``P``.
    """
    out: dict[tuple[int, ...], float] = {}

    def visit(u: int, path: tuple[int, ...], mass: float) -> None:
        if not tree.children[u]:
            for y in np.flatnonzero(P[u] > 0):
                key = (*path, int(y))
                out[key] = out.get(key, 0.0) + mass * float(P[u][y])
            return
        law = set_up(verifier_cls, P[u], tree.q[u], tree.n[u], sampler).output_law(tree.drafts[u])
        for y in np.flatnonzero(law > 0):
            matches = [c for c in tree.children[u] if tree.tokens[c] == y]
            if not matches:
                key = (*path, int(y))
                out[key] = out.get(key, 0.0) + mass * float(law[y])
            else:  # the walk's rule: the first child holding y
                visit(matches[0], (*path, int(y)), mass * float(law[y]))

    visit(0, (), 1.0)
    return out


def stream_law(block_law: dict[tuple[int, ...], float], p_law: Callable, V: int, length: int) -> np.ndarray:
    """The law of the first ``length`` generated tokens when a step appends ``block_law`` and the target continues.

    ``p_law(path)`` is the target's law after the path. A verifier is lossless
    for the step iff this equals :func:`sequence_law` of the target for every
    ``length`` up to the depth + 1.
    """
    out = np.zeros((V,) * length)
    for block, mass in block_law.items():
        head = block[:length]
        if len(head) == length:
            out[head] += mass
            continue
        rest = sequence_law(_Shifted(p_law, head), V, length - len(head))
        out[head] += mass * rest
    return out


class _Shifted:
    def __init__(self, law, head):
        self.law, self.head = law, tuple(head)

    def many(self, paths):
        return np.stack([self.law((*self.head, *p)) for p in paths])


__all__ = ["MAX_TREES", "ConditionalLaws", "per_node_output_law", "sequence_law", "stream_law", "tree_law", "tree_paths"]
