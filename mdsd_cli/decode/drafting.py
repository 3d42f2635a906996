"""Drafting a tree: level by level, one draft-model pass per depth, children drawn by a draft sampler."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..samplers import DraftSampler
from .laws import model_rows, tempered
from .trees import TreeShape


@dataclass
class DraftTree:
    """One drawn draft tree below a prefix (node 0 is the root, the prefix itself).

    ``parents[i] < i``; ``tokens[i]`` is node ``i``'s token (unused for the root);
    ``children[i]`` lists node ``i``'s children in drawing order; ``drafts[i]`` is
    the draft tuple drawn at node ``i`` (what its verifier sees; for ``paths``
    trees it may repeat tokens that share one child) and ``n[i]`` the number of
    drafts the sampler was asked for (0 at a leaf); ``q[i]`` is the draft law at
    an internal node.
    """

    parents: list[int] = field(default_factory=lambda: [-1])
    tokens: list[int] = field(default_factory=lambda: [-1])
    depth: list[int] = field(default_factory=lambda: [0])
    children: list[list[int]] = field(default_factory=lambda: [[]])
    drafts: list[np.ndarray | None] = field(default_factory=lambda: [None])
    n: list[int] = field(default_factory=lambda: [0])
    q: dict[int, np.ndarray] = field(default_factory=dict)
    #: Draft-model passes used (one per depth that had something to expand).
    passes: int = 0
    #: Wall seconds inside the draft model, and in the rest of the drafting (tempering, sampling, bookkeeping).
    model_seconds: float = 0.0
    bookkeeping_seconds: float = 0.0

    @property
    def size(self) -> int:
        return len(self.parents)

    def add(self, parent: int, token: int) -> int:
        node = len(self.parents)
        self.parents.append(parent)
        self.tokens.append(int(token))
        self.depth.append(self.depth[parent] + 1)
        self.children.append([])
        self.drafts.append(None)
        self.n.append(0)
        self.children[parent].append(node)
        return node


def grow_tree(draft_model, prefix, shape: TreeShape, sampler: DraftSampler, temperature: float,
              rng: np.random.Generator) -> DraftTree:
    """Draw a draft tree of ``shape`` below ``prefix``.

    At every depth the frontier nodes that have child slots are scored in one
    call of ``draft_model.tree_logits`` (one draft pass); each draws
    ``n = width`` tokens jointly from its own ``q = softmax(logits / T)`` with
    ``sampler``, and the children take them as :meth:`TreeShape.children_of`
    says. The random stream is consumed in a fixed order (level by level,
    nodes in index order), so a seed gives one tree.
    """
    t_start = time.perf_counter()
    model_seconds = 0.0

    def laws(tree, expand):
        nonlocal model_seconds
        t0 = time.perf_counter()
        logits = model_rows(draft_model, draft_model.tree_logits(prefix, tree.parents, tree.tokens, expand),
                            len(expand))
        model_seconds += time.perf_counter() - t0
        return tempered(logits, temperature)

    tree = grow_with(laws, shape, sampler, rng)
    tree.model_seconds = model_seconds
    tree.bookkeeping_seconds = time.perf_counter() - t_start - model_seconds
    return tree


def grow_with(laws, shape: TreeShape, sampler: DraftSampler, rng: np.random.Generator) -> DraftTree:
    """:func:`grow_tree` with the draft laws from ``laws(tree, nodes)`` (``[len(nodes), V]``), one call per depth."""
    tree = DraftTree()
    slots = [shape.root()]
    frontier = [0]
    while frontier:
        expand = [u for u in frontier if shape.width(slots[u]) > 0]
        if not expand:
            break
        Q = laws(tree, expand)
        tree.passes += 1
        frontier = []
        for u, q in zip(expand, Q):
            n = shape.width(slots[u])
            drafts = sampler.sample(q, n, rng, 1)[0]
            tree.q[u], tree.drafts[u], tree.n[u] = q, drafts, n
            for token, slot in shape.children_of(slots[u], drafts):
                child = tree.add(u, token)
                slots.append(slot)
                frontier.append(child)
    return tree


__all__ = ["DraftTree", "grow_tree", "grow_with"]
