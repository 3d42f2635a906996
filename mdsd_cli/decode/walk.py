"""Verification walks down the tree: a per-node multi-draft verifier at every node on the way.

At node ``u`` (starting at the root) with draft tuple ``X_u`` drawn from
``q_u`` by the sampler, the verifier outputs one token ``Y ~ P(. | X_u)``:

* if ``Y`` is one of ``u``'s children's tokens, append it and move to that child
  (among several children with that token — iid drafts may repeat — the first
  in the template's order, which lists children deepest first: a rule on the
  template, never on the subtrees' tokens, so the choice stays lossless);
* otherwise append ``Y`` and stop.

At a leaf, append one bonus token drawn from ``p_u`` and stop. Every appended
token is distributed exactly as the target's next token given everything
before it, because the verifier is lossless for ``X_u``'s law and each child's
subtree was drawn independently of the verification above it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..verifiers.base import sample_from_law, set_up
from .drafting import DraftTree
from .laws import tempered


@dataclass
class Visit:
    """One verification on the walk: the node, its depth, and what the verifier saw and did."""

    node: int
    depth: int
    n: int
    drafts: np.ndarray
    p: np.ndarray
    q: np.ndarray
    output: int
    accepted: bool
    #: ``P(Y in X | X)`` for these drafts, by the verifier's exact conditional law.
    acceptance: float = float("nan")


@dataclass
class WalkResult:
    """Tokens appended by one walk and the verifications on the way.

    ``accepted`` counts the drafted tokens taken (the depth reached); the walk
    appends ``accepted + 1`` tokens unless it stopped at an accepted end-of-sequence token.
    """

    tokens: list[int]
    accepted: int
    visits: list[Visit] = field(default_factory=list)
    seconds: float = 0.0
    #: the leaf where the walk drew a bonus token (None if a verifier stopped it)
    leaf: int | None = None


class VerifierCache:
    """Prepared verifiers keyed by their exact inputs ``(n, p, q)`` (bytes), least recently used out first.

    A verifier's set-up is a deterministic function of ``(p, q, n, sampler)`` and
    draws no random numbers, so reusing one for an identical pair changes no
    output — only the time. Useful when contexts repeat (n-gram models, a fixed
    prompt in tests); it holds at most ``max_entries`` verifiers.
    """

    def __init__(self, verifier_cls, sampler: str, *, max_entries: int = 256):
        self.verifier_cls, self.sampler, self.max_entries = verifier_cls, sampler, max_entries
        self.entries: dict = {}
        self.hits = self.misses = 0

    def __call__(self, p: np.ndarray, q: np.ndarray, n: int):
        key = (n, p.tobytes(), q.tobytes())
        v = self.entries.pop(key, None)
        if v is None:
            self.misses += 1
            v = set_up(self.verifier_cls, p, q, n, self.sampler)
            if len(self.entries) >= self.max_entries:
                self.entries.pop(next(iter(self.entries)))
        else:
            self.hits += 1
        self.entries[key] = v
        return v


def walk_per_node(tree: DraftTree, target_logits: np.ndarray, temperature: float, verifier_cls, sampler: str,
                  rng: np.random.Generator, *, eos_token_id: int | None = None,
                  conditional_acceptance: bool = True, cache: VerifierCache | None = None) -> WalkResult:
    """Walk ``tree`` from the root with ``verifier_cls`` at every node (see the module docstring).

    ``target_logits[i]`` are the target's logits at node ``i`` (one target pass
    over the whole tree). ``verifier_cls(p, q, n, sampler)`` is set up at each
    visited node with that node's own ``(p, q, n)``. The walk stops early after
    ``eos_token_id``. ``seconds`` covers tempering, verifier set-up and sampling;
    the conditional acceptance recorded per visit (``conditional_acceptance``)
    is computed outside that time. With ``cache``, verifiers for a pair seen
    before are reused (same outputs, less time).
    """
    out: list[int] = []
    visits: list[Visit] = []
    seconds = 0.0
    u = 0
    leaf = None
    while True:
        t0 = time.perf_counter()
        p = tempered(target_logits[u], temperature)[0]
        children = tree.children[u]
        if not children:  # a leaf: one bonus token from the target
            y = int(sample_from_law(p, 1, rng)[0])
            seconds += time.perf_counter() - t0
            out.append(y)
            leaf = u
            break
        drafts = tree.drafts[u]
        verifier = (cache(p, tree.q[u], tree.n[u]) if cache is not None
                    else set_up(verifier_cls, p, tree.q[u], tree.n[u], sampler))
        y = int(verifier.sample(drafts[None, :], rng)[0])
        out.append(y)
        matches = [c for c in children if tree.tokens[c] == y]
        nxt = matches[0] if matches else None
        seconds += time.perf_counter() - t0
        visit = Visit(u, tree.depth[u], tree.n[u], drafts, p, tree.q[u], y, nxt is not None)
        if conditional_acceptance:
            visit.acceptance = float(verifier.acceptance(drafts[None, :])[0])
        visits.append(visit)
        if nxt is None or (eos_token_id is not None and y == eos_token_id):
            break
        u = nxt
    return WalkResult(out, sum(v.accepted for v in visits), visits, seconds, leaf)


__all__ = ["VerifierCache", "Visit", "WalkResult", "walk_per_node"]
