"""A key/value cache holding a committed sequence and a token tree below it: tree attention in one pass.

The cache of a Hugging Face causal LM (``transformers.DynamicCache``) stores
one key and one value per layer for each *slot*. Here the slots hold

* the **chain**: slots ``0..C-1`` are the tokens of one sequence at positions
  ``0..C-1`` (the text so far, as far as it is cached);
* **tree slots** ``C..S-1``: tokens of a draft tree hanging below the chain,
  each with its parent slot and its position (the parent's + 1), found by
  ``(parent slot, token)``.

:meth:`TreeCache.score` gives the logits after ``prefix`` + the path to each
requested node of a tree. It reuses every slot whose whole context it has
seen before: the longest common prefix of the chain and ``prefix``, then the
tree slots along the rest of ``prefix`` (the accepted path of the previous
step), then nodes of the same tree scored by an earlier call (a draft tree
grown level by level). Every other slot is dropped, and the kept ones are
moved down so that the chain is again slots ``0..C-1`` (only the moved slots
are copied). The new tokens are then fed in **one forward pass**: the uncached
tail of the prefix, causal among itself, and the tree nodes, each at position
``len(prefix) + depth - 1`` with a 4-D attention mask that lets it see the
chain, the tail and its own ancestors (and itself), nothing else. A long
uncached tail and tree nodes in one call (the first step of a prompt) are fed
as two passes, the tail first, so the mask never spans the prompt twice.

The caller always gives full contexts, so the cache is invisible to it: the
logits are those of plain forwards of each node's full context (to float
rounding; the tests check 1e-4 in float32).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: An uncached prefix tail longer than this is fed in a pass of its own before a tree (the mask stays small).
LONG_TAIL = 64


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


class TreeCache:
    """A model's KV cache as a chain plus a token tree (see the module docstring).

    Parameters
    ----------
    forward : callable
        ``forward(ids, positions, mask, cache, keep) -> (logits, cache)`` runs the
        model on one row of new tokens (``ids``, ``positions``: int lists; ``mask``:
        a bool array ``[q, S + q]`` over the cached slots and the new tokens, or
        None for plain causal attention after the cache; ``keep``: the rows whose
        logits are wanted) and returns those logits and the updated cache.
    new_cache : callable
        ``new_cache()`` gives an empty cache object.
    move : callable
        ``move(cache, start, slots)`` keeps slots ``0..start-1``, then the given
        slots in order, and drops the rest.
    """

    def __init__(self, forward, new_cache, move):
        self._forward, self._new_cache, self._move = forward, new_cache, move
        self.reset()

    def reset(self) -> None:
        """Forget everything cached."""
        self.kv = None
        self.chain: list[int] = []
        self.parent: list[int] = []   # tree slot C + j: its parent slot
        self.token: list[int] = []    # ... its token
        self.position: list[int] = []  # ... its position
        self.children: dict[tuple[int, int], int] = {}
        #: Tokens fed to the model and forward passes made (statistics, for tests and notes).
        self.fed = 0
        self.passes = 0

    @property
    def size(self) -> int:
        return len(self.chain) + len(self.parent)

    # --- matching and compaction ---------------------------------------------------------------
    def _match(self, prefix: list[int]) -> tuple[int, list[int]]:
        """``(lcp, path)``: the chain's common prefix with ``prefix``, then the tree slots along the rest."""
        C = len(self.chain)
        lcp = C if len(prefix) >= C and prefix[:C] == self.chain else common_prefix(self.chain, prefix)
        path: list[int] = []
        if lcp == C and self.parent:
            s = C - 1
            for token in prefix[C:]:
                nxt = self.children.get((s, token))
                if nxt is None:
                    break
                path.append(nxt)
                s = nxt
        return lcp, path

    def _compact(self, lcp: int, path: list[int], tree_slots: list[int]) -> dict[int, int]:
        """Keep chain slots ``0..lcp-1``, then ``path`` (it joins the chain), then ``tree_slots``; drop the rest.

        Returns the map old slot -> new slot of the kept tree slots.
        """
        moved = path + tree_slots
        if self.kv is not None and (moved != list(range(lcp, lcp + len(moved))) or lcp + len(moved) < self.size):
            self._move(self.kv, lcp, moved)
        C = lcp + len(path)
        remap = {old: C + j for j, old in enumerate(tree_slots)}
        remap[path[-1] if path else lcp - 1] = C - 1  # the end of the chain: the root of the tree below it
        base = len(self.chain)
        old = {s: (self.parent[s - base], self.token[s - base], self.position[s - base]) for s in tree_slots}
        self.parent, self.token, self.position = [], [], []
        self.children = {}
        for s in tree_slots:
            parent, token, position = old[s]
            new = remap[s]
            self.parent.append(remap[parent])
            self.token.append(token)
            self.position.append(position)
            self.children[(remap[parent], token)] = new
        return remap

    # --- scoring --------------------------------------------------------------------------------
    def score(self, prefix: Sequence[int], parents: Sequence[int], tokens: Sequence[int],
              nodes: Sequence[int]):
        """Logits after ``prefix`` + the path to each of ``nodes`` (rows in the order of ``nodes``).

        ``parents[0] = -1`` (the root is the prefix itself), ``parents[i] < i``;
        ``tokens[i]`` is node ``i``'s token. ``prefix`` must not be empty.
        """
        prefix = [int(t) for t in prefix]
        P = len(prefix)
        n = len(parents)
        nodes = [int(u) for u in nodes]
        want = set(nodes)
        lcp, path = self._match(prefix)
        if lcp + len(path) == P and 0 in want:  # the root's logits: its last token must be fed
            if path:
                path.pop()
            else:
                lcp -= 1
        k = lcp + len(path)
        # which nodes of this tree are cached already (only below a fully cached prefix), which are fed
        old_root = (path[-1] if path else lcp - 1) if k == P else None
        slot: list[int | None] = [None] * n
        slot[0] = old_root
        depth = [0] * n
        for i in range(1, n):
            p = int(parents[i])
            depth[i] = depth[p] + 1
            if slot[p] is not None and i not in want:
                slot[i] = self.children.get((slot[p], int(tokens[i])))
        need = [False] * n
        for u in nodes:
            if u > 0:
                need[u] = True
        for u in nodes:
            v = int(parents[u]) if u > 0 else -1
            while v > 0 and slot[v] is None and not need[v]:
                need[v] = True
                v = int(parents[v])
        cached_tree = sorted({slot[i] for i in range(1, n) if slot[i] is not None})  # equal siblings share one
        remap = self._compact(lcp, path, cached_tree)
        self.chain = prefix[:k]
        for i in range(n):
            if slot[i] is not None:
                slot[i] = remap[slot[i]]
        C = k
        S = self.size
        tail = prefix[k:]
        t = len(tail)
        tree_rows = [i for i in range(1, n) if need[i]]
        if t > LONG_TAIL and tree_rows:  # feed a long tail first: the tree's mask then spans one token of it
            self._feed_chain(tail[:-1], C, keep=[])
            C, S, tail, t = C + t - 1, S + t - 1, tail[-1:], 1
        # rows: the tail (causal), then the tree nodes
        row_of = [-1] * n
        if t:
            row_of[0] = t - 1
        ids = list(tail)
        positions = list(range(C, C + t))
        parent_col: list[int] = []  # for tree rows: the column of the parent (a slot, or S + its row)
        for i in tree_rows:
            row_of[i] = len(ids)
            p = int(parents[i])
            parent_col.append(S + row_of[p] if row_of[p] >= 0 else slot[p])
            ids.append(int(tokens[i]))
            positions.append(P + depth[i] - 1)
        keep_rows = [row_of[u] for u in nodes]
        if not tree_rows:
            logits = self._feed_chain(tail, C, keep=keep_rows)
        else:
            q = len(ids)
            mask = np.zeros((q, S + q), dtype=bool)
            mask[:, :C] = True
            mask[:t, S:S + t] = np.tril(np.ones((t, t), dtype=bool))
            for j in range(len(tree_rows)):
                r = t + j
                col = parent_col[j]
                if col >= S:
                    mask[r] = mask[col - S]
                else:
                    mask[r, :C] = True
                    s = col
                    while s >= C:
                        mask[r, s] = True
                        s = self.parent[s - C]
                    mask[r, S:S + t] = True
                mask[r, S + r] = True
            logits = self._run(ids, positions, mask, keep_rows)
            for j, i in enumerate(tree_rows):  # slot S + r holds row r; the tail rows extend the chain
                parent_slot, token = parent_col[j], int(tokens[i])
                self.parent.append(parent_slot)
                self.token.append(token)
                self.position.append(positions[t + j])
                self.children[(parent_slot, token)] = S + t + j
            if t:
                self.chain += tail
        return logits

    def _feed_chain(self, tail: list[int], C: int, *, keep: list[int]):
        """Feed tokens that extend the chain (no tree slots are cached then): plain causal attention."""
        assert len(self.parent) == 0 or not tail, "tree slots below a chain that grows"
        logits = self._run(tail, list(range(C, C + len(tail))), None, keep)
        self.chain += tail
        return logits

    def _run(self, ids, positions, mask, keep):
        if self.kv is None:
            self.kv = self._new_cache()
        logits, self.kv = self._forward(ids, positions, mask, self.kv, keep)
        self.fed += len(ids)
        self.passes += 1
        return logits


__all__ = ["TreeCache", "common_prefix"]
