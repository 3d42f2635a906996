"""Draft-tree shapes: where the nodes of a draft tree go, and how many drafts each node draws.

=====================  =================================================================
spec                   shape
=====================  =================================================================
``KxD``                K children per node down to depth D (EAGLE's binary2..binary5 are
                       ``2x1``..``2x4``; ``1xD`` is the single-draft chain)
``4,2,2,1``            per-depth widths: every node at depth d has w_d children
``paths:KxL``          K paths of length L drawn from the root (SpecTr); paths that share a
                       prefix share nodes, so a node draws as many tokens as paths pass
                       through it and its number of distinct children is random
``FILE.json``          an explicit sparse tree: a JSON list of child-index paths (the format of
                       EAGLE's and Medusa's static trees), e.g. ``[[0], [1], [0, 0]]``
=====================  =================================================================

A *static* shape (the first two and files) is a template: template node ``u``
has ``k_u`` child slots; the ``k_u`` tokens drawn jointly at ``u`` fill them in
drawing order (child index 0 gets the first draft), and each child grows its own
subtree. When the sampler returns fewer drafts than slots (``wor``/``greedy`` on
a draft law with a small support), the extra slots and their subtrees are
dropped. A *paths* shape is grown by counting paths instead (see
:meth:`TreeShape.children`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataFileError, InputError, SizeLimitError

#: Largest number of nodes (root included) a tree may have.
MAX_TREE_NODES = 2048

_KXD = re.compile(r"^(\d+)x(\d+)$")
_WIDTHS = re.compile(r"^\d+(,\d+)*$")
_PATHS = re.compile(r"^paths:(\d+)x(\d+)$")
SPEC_HELP = ("KxD (e.g. 2x4), per-depth widths (e.g. 4,2,2,1), paths:KxL (e.g. paths:4x4) or a JSON file "
             "of child-index paths (e.g. [[0], [1], [0, 0]])")


@dataclass(frozen=True)
class TreeShape:
    """A draft-tree shape.

    Attributes
    ----------
    label : str
        How tables name it (the spec, or the file's stem).
    kind : {"static", "paths"}
    depth : int
        Maximum depth D (the root is depth 0): D draft passes per step.
    children : tuple of tuples
        Static shapes: ``children[u]`` lists template node ``u``'s child slots in
        drawing order (template node 0 is the root). Empty for ``paths``.
    paths : int
        ``paths:KxL``: K.
    """

    label: str
    kind: str
    depth: int
    children: tuple[tuple[int, ...], ...] = ()
    paths: int = 0

    @property
    def max_nodes(self) -> int:
        """Most nodes (root included) a drawn tree can have."""
        return len(self.children) if self.kind == "static" else 1 + self.paths * self.depth

    @property
    def widths(self) -> list[int]:
        """Every number of drafts a node may be asked for (sorted)."""
        if self.kind == "paths":
            return list(range(1, self.paths + 1))
        return sorted({len(c) for c in self.children if c})

    def root(self):
        """The root's slot: a template index (static) or ``(paths through it, depth)``."""
        return 0 if self.kind == "static" else (self.paths, 0)

    def width(self, slot) -> int:
        """How many drafts a node in this slot draws (0: a leaf)."""
        if self.kind == "static":
            return len(self.children[slot])
        count, depth = slot
        return count if depth < self.depth else 0

    def children_of(self, slot, drafts) -> list[tuple[int, object]]:
        """``(token, child slot)`` for each child of a node in ``slot`` that drew ``drafts``.

        Static: the i-th draft fills the i-th slot. Paths: one child per distinct
        token (first-drawn order), carrying as many paths as drew it.
        """
        if self.kind == "static":
            return [(int(t), c) for t, c in zip(drafts, self.children[slot])]
        count, depth = slot
        tally: dict[int, int] = {}
        for t in drafts:
            tally[int(t)] = tally.get(int(t), 0) + 1
        return [(t, (m, depth + 1)) for t, m in tally.items()]

    def describe(self) -> dict:
        d = {"label": self.label, "kind": self.kind, "depth": self.depth, "max_nodes": self.max_nodes}
        if self.kind == "static":
            d["children"] = [list(c) for c in self.children]
        else:
            d["paths"] = self.paths
        return d


#: Node counts above this are reported as "more than" it (the exact count of 1000x1000 has 3,001 digits).
HUGE_NODES = 10**15


def _check_size(label: str, nodes: int) -> None:
    if nodes > MAX_TREE_NODES:
        count = f"{nodes:,}" if nodes <= HUGE_NODES else "more than 10^15"
        raise SizeLimitError(f"tree {_short(label)} has {count} nodes (limit {MAX_TREE_NODES:,}); "
                             "use a smaller width or depth")


def _short(label: str) -> str:
    return label if len(label) <= 60 else label[:57] + "..."


def _count(text: str, digits: str) -> int:
    """A width, depth or count of a tree spec (Python refuses to parse integers of more than 4,300 digits)."""
    if len(digits) > 18:
        raise SizeLimitError(f"tree {_short(text)}: a number of {len(digits):,} digits; the tree would have more than "
                             f"{MAX_TREE_NODES:,} nodes (the limit)")
    return int(digits)


def _from_widths(label: str, widths: list[int]) -> TreeShape:
    if not widths or any(w < 1 for w in widths):
        raise InputError(f"tree {label}: every width must be >= 1 and there must be at least one level")
    nodes, level = 1, 1
    for w in widths:
        level *= w
        nodes += level
        _check_size(label, nodes)
    children: list[tuple[int, ...]] = []
    frontier, next_id = [0], 1
    children.append(())
    for w in widths:
        new_frontier = []
        for u in frontier:
            kids = tuple(range(next_id, next_id + w))
            children[u] = kids
            children.extend(() for _ in kids)
            new_frontier.extend(kids)
            next_id += w
        frontier = new_frontier
    return TreeShape(label, "static", len(widths), tuple(children))


def sparse_tree(paths, *, label: str = "sparse") -> TreeShape:
    """A static shape from child-index paths (EAGLE/Medusa format), e.g. ``[[0], [1], [0, 0]]``.

    Every path's parent path must be present, and a node's children must be
    numbered ``0..k-1`` without gaps (child ``i`` is the node's ``i``-th draft).
    """
    if not isinstance(paths, list) or not paths:
        raise InputError(f"tree {label}: expected a non-empty list of child-index paths such as [[0], [1], [0, 0]]")
    seen: set[tuple[int, ...]] = set()
    for path in paths:
        if (not isinstance(path, list) or not path
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in path)):
            raise InputError(f"tree {label}: {json.dumps(path)} is not a path of child indices "
                             "(a non-empty list of integers >= 0)")
        key = tuple(path)
        if key in seen:
            raise InputError(f"tree {label}: path {json.dumps(path)} appears twice")
        seen.add(key)
    for key in sorted(seen, key=lambda k: (len(k), k)):
        if len(key) > 1 and key[:-1] not in seen:
            raise InputError(f"tree {label} is not a tree: {json.dumps(list(key))} has no parent "
                             f"{json.dumps(list(key[:-1]))}")
        if key[-1] > 0 and (*key[:-1], key[-1] - 1) not in seen:
            raise InputError(f"tree {label} is not a tree: {json.dumps(list(key))} without its sibling "
                             f"{json.dumps([*key[:-1], key[-1] - 1])} (children are numbered 0..k-1 in draft order)")
    _check_size(label, len(seen) + 1)
    ordered = sorted(seen, key=lambda k: (len(k), k))
    ids = {(): 0}
    for i, key in enumerate(ordered, start=1):
        ids[key] = i
    children: list[list[int]] = [[] for _ in range(len(ids))]
    for key in ordered:  # sorted: siblings arrive in index order
        children[ids[key[:-1]]].append(ids[key])
    return TreeShape(label, "static", max(len(k) for k in seen), tuple(tuple(c) for c in children))


def _read_tree_file(path: Path) -> TreeShape:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(f"cannot read tree file {path} ({exc})") from None
    except ValueError as exc:
        raise DataFileError(f"tree file {path} is not valid JSON ({exc})") from None
    if isinstance(data, dict):
        data = data.get("paths", data.get("tree"))
    return sparse_tree(data, label=path.stem)


def parse_tree(spec) -> TreeShape:
    """A :class:`TreeShape` from a spec: ``KxD``, ``w1,w2,...``, ``paths:KxL`` or a JSON file.

    Raises :class:`~mdsd_cli.errors.InputError` for an unknown spec or a file that
    is not a tree, and :class:`~mdsd_cli.errors.SizeLimitError` (before building
    anything) for a tree of more than :data:`MAX_TREE_NODES` nodes.
    """
    text = str(spec).strip()
    if m := _KXD.match(text):
        K, D = _count(text, m.group(1)), _count(text, m.group(2))
        if K < 1 or D < 1:
            raise InputError(f"tree {text}: K and D must be >= 1")
        if K > 1 and D > 64:  # K^D beyond any limit: no need to compute a number of D log10 K digits
            _check_size(text, HUGE_NODES + 1)
        nodes = D + 1 if K == 1 else (K ** (D + 1) - 1) // (K - 1)
        _check_size(text, nodes)
        return _from_widths(text, [K] * D)
    if _WIDTHS.match(text):
        return _from_widths(text, [_count(text, w.strip()) for w in text.split(",")])
    if m := _PATHS.match(text):
        K, L = _count(text, m.group(1)), _count(text, m.group(2))
        if K < 1 or L < 1:
            raise InputError(f"tree {text}: K and L must be >= 1")
        _check_size(text, 1 + K * L)
        return TreeShape(text, "paths", L, paths=K)
    path = Path(text)
    if path.suffix.lower() == ".json" or path.exists():
        if not path.exists():
            raise DataFileError(f"tree file {path} not found")
        return _read_tree_file(path)
    raise InputError(f"unknown tree spec {text!r}; use {SPEC_HELP}")


__all__ = ["MAX_TREE_NODES", "SPEC_HELP", "TreeShape", "parse_tree", "sparse_tree"]
