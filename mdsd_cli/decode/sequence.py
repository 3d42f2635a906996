"""Sequence-level verifiers: judge whole draft paths instead of one node at a time.

Both take a drawn :class:`~.drafting.DraftTree`, the target's logits at its
nodes and a temperature, and return a :class:`~.walk.WalkResult` (the tokens of
the accepted path, then one bonus/correction token). Weights ``w`` below are
sequence-level: ``w`` of a node is the probability with which the whole path
from the root to it may still be accepted.

``block`` — Block Verification (Sun et al., ICLR 2025), chains ``1xD`` only.
    With drafts ``X_1..X_D``, ``P_i = p(. | X_{1:i})``, ``Q_i = q(. | X_{1:i})``
    (``i = 0`` is the root)::

        w_0 = 1,   w_i = min(1, w_{i-1} P_{i-1}(X_i) / Q_{i-1}(X_i))
        r_i(x) = max(w_i P_i(x) - Q_i(x), 0),   rho_i = sum_x r_i(x)
        h_D = w_D,   h_i = rho_i / (rho_i + 1 - w_i)  (0 < i < D),   h_0 = 1

    The number of accepted drafts is ``tau = max{i : eta_i <= h_i}`` with
    ``eta_i ~ U(0, 1)`` independent (checked from ``i = D`` down); the step
    appends ``X_{1:tau}`` and one token from ``P_D`` if ``tau = D``, else from
    ``r_tau / rho_tau``.

``traversal`` — Traversal Verification (Weng et al., NeurIPS 2025), any static
    tree whose nodes draw their children iid or without replacement. Nodes are
    examined leaf first, in depth-first order (the deepest node of the first
    remaining path). Every node ``u`` keeps a weight ``w_u``, a target law
    ``P_u`` and a draft law ``Q_u``; a child ``c`` with token ``x`` gets
    ``w_c = min(1, w_u P_u(x) / Q_u(x))`` when the walk reaches it. A node
    without remaining children is accepted with probability ``w_u``: the step
    appends its path and one token from ``P_u``. If rejected it is deleted and
    its parent ``u`` becomes::

        P_u <- normalise(max(w_u P_u - Q_u, 0)),   w_u <- rho / (rho + 1 - w_u)
        (rho = sum_x max(w_u P_u(x) - Q_u(x), 0)),  Q_u <- Q_u without x (wor)

    The root has ``w = 1`` throughout, so it is accepted when all its children
    are gone (a correction token from its residual, nothing accepted). On a
    chain this is Block Verification exactly (the same ``h_i``, checked in the
    same order); on a one-level tree it is RRS (iid) or RRS without
    replacement (wor).

``select-block`` — ours, any static tree with iid or wor children: at each node
    from the root, the per-node optimal verifier of that node (``optimal-iid`` /
    ``optimal-wor`` for its own ``(p, q, n)``) chooses one of its drafts (the chosen
    token has that verifier's candidate law ``t``); the chosen path, a chain drawn
    from the laws ``t``, is judged by Block Verification with ``t`` in place of
    ``Q``. Block Verification on a chain, the per-node optimal verifier on a
    one-level tree, and never below the latter (docs/sequence.md).

``select-traversal`` — ours, any static tree with iid or wor children: traversal
    with the per-node optimal verifier in place of RRS at every node, and every
    child's own acceptance deferred until all its siblings' subtrees have had
    their try. A node ``u`` of weight ``w`` sets up ``optimal-iid`` /
    ``optimal-wor`` for the target ``w P_u`` plus ``1 - w`` on one extra token no
    draft can be (``⊥``), against ``Q_u``: for the drawn drafts, child ``j`` must
    be accepted with probability ``A_j = pick_j min(1, w P_u(x_j) / t(x_j))``
    (``t`` the candidate law), averaged over what lies below it. Phase 1, the
    deep tries: the children are taken one by one; child ``j`` is reached with
    probability ``R_j = 1 - D_before`` (``D`` the expected deep acceptances of
    the children tried before, independent of ``j``'s subtree) and walks its
    subtree with the weight ``b_j = A_j / R_j``; the first acceptance below a
    child ends the step. Phase 2: child ``j`` itself is accepted with
    probability ``R_j rho_j / (1 - D)`` (``rho_j`` the mass of its residual
    ``r_j = max(b_j P_c - t_c, 0)``), then one token from ``r_j / rho_j``; at the
    root, what is left draws from the root's residual ``max(P - t, 0)``. Given
    ``u``'s drafts, child ``j`` and then ``z`` are appended with probability
    exactly ``A_j P_c(z)`` (deep ``R_j min(b_j P_c, t_c)(z)`` plus own
    ``R_j r_j(z)``), and the target follows, whatever the subtrees look like, so
    the node behaves like its per-node optimal verifier while its children's
    subtrees compete for the deep acceptances. The order of the tries may use
    anything but the subtrees' drafts: it maximises a one-level look-ahead of
    the deep acceptances (``sum_y min(R_j hit_c(y), A_j P_c(y))``, ``hit_c(y)`` the
    probability that ``y`` is among ``c``'s drafts). Block Verification on a chain,
    the per-node optimal verifier on a one-level tree (docs/sequence.md).

``select-race`` — ours, any static tree with iid or wor children: the shares
    ``A_j`` of ``select-traversal``, but the children's subtrees race instead of
    taking turns. Every child ``c_j`` with children brings its per-node optimal
    verifier at weight 1 (candidate law ``t_j``, choice rule). The pairs ``(j, z)``
    are ranked by decreasing ``A_j P_j(z) / t_j(z)`` from the laws alone, and one
    pass in that order (:func:`race_tables`) sets ``beta_j(z) = min(1, A_j P_j(z) /
    (t_j(z) reach))`` with ``reach`` the chance that no other child has won yet.
    Phase 1: each child picks one of its drafts by its choice rule; the picked
    pairs are tried in rank order, a pair by walking the picked draft's subtree
    with weight ``beta`` and then the draft itself with ``rho / (rho + 1 -
    beta)``; the first acceptance ends the step. The pair ``(j, z)`` wins with
    probability ``f_j(z) = t_j(z) beta_j(z) reach <= A_j P_j(z)``. Phase 2: child
    ``j`` itself with its own law ``A_j P_j - f_j``, and the root's residual, as in
    ``select-traversal``. Block Verification on a chain, the per-node optimal
    verifier on a one-level tree (docs/sequence.md).

All are lossless: the step's tokens, continued by the target, follow the
target's law (``tests/test_decode_sequence.py`` checks it exactly on every
enumerable tree of a tiny model, and in generation).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from .._jit import kernel, numba_enabled
from .._radix import _radix_argsort_into, stable_argsort
from ..distributions import as_rng, check_temperature
from ..errors import InputError
from ..samplers import get_sampler
from ..verifiers.base import sample_from_law
from .drafting import DraftTree
from .exact import _path as _path_to
from .laws import TemperedRows
from .trees import TreeShape
from .walk import Visit, WalkResult


def _residual(w: float, P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, float]:
    """``max(w P - Q, 0)`` and its mass."""
    r = np.maximum(w * P - Q, 0.0)
    return r, float(r.sum())


def _after_rejection(w: float, P: np.ndarray, Q: np.ndarray) -> tuple[float, np.ndarray]:
    """A node's weight and target law after one of its children is rejected (see the module doc)."""
    r, rho = _residual(w, P, Q)
    if rho <= 0.0:  # unreachable with exact arithmetic (a weight-1 node with P = Q never loses a child)
        return (1.0 if w >= 1.0 else 0.0), P
    return rho / (rho + max(1.0 - w, 0.0)), r / rho


def _child_weight(w: float, P: np.ndarray, Q: np.ndarray, x: int) -> float:
    if Q[x] <= 0.0:
        return 0.0
    return min(1.0, w * P[x] / Q[x])


@dataclass
class SequenceVerifier:
    """A sequence-level verifier: its name, the draft laws it is lossless for, the trees it runs on."""

    name: str
    description: str
    samplers: tuple[str, ...] = ("iid", "wor")
    default_sampler: str = "iid"
    fixed_n = None

    def check_size(self, q, n, sampler) -> None:  # no set-up to refuse: O(V) per node
        return None

    def check_tree(self, tree: TreeShape) -> None:
        """Raise :class:`InputError` if this verifier cannot run on ``tree``."""
        if tree.kind != "static":
            raise InputError(f"{self.name} needs a static tree (KxD, widths or a file); tree {tree.label} merges "
                             "equal-token paths, whose subtrees are not drawn independently")
        if self.name == "block" and tree.widths != [1]:
            raise InputError(f"block verifies one chain; tree {tree.label} has nodes with "
                             f"{max(tree.widths)} children; use 1x{tree.depth} or --verifier traversal")

    def check_sampler(self, sampler: str) -> None:
        """Raise :class:`InputError` unless this verifier is lossless for ``sampler``'s drafts (a parametric law,
        ``wor:temperature=0.8``, by its kind)."""
        if get_sampler(sampler).kind not in self.samplers:
            raise InputError(f"{self.name} is lossless for {'/'.join(self.samplers)} drafts only, not {sampler!r}")

    @staticmethod
    def _check_rows(tree: DraftTree, rows: int) -> None:
        if rows < tree.size:
            raise InputError(f"the tree has {tree.size} nodes but {rows} target row(s) were given; give one row "
                             "(the target's law or logits at that node) per node, root first")

    # --- the law of one step, given the tree -----------------------------------------------------
    def output_law(self, tree: DraftTree, P: list, sampler: str) -> dict[tuple[int, ...], float]:
        """Exact law of the step's appended tokens given the drawn ``tree``, as ``{tokens: probability}``.

        ``P[i]`` is the target's law at node ``i``. Tokens are the accepted path
        followed by the bonus/correction token.
        """
        self.check_sampler(sampler)
        self._check_rows(tree, len(P))
        return _LAWS[self.name](tree, P, sampler)

    def expected_tokens(self, tree: DraftTree, P: list, sampler: str, eos_token_id: int | None = None) -> float:
        """The expected number of tokens the step appends given the drawn ``tree``: the mean length of
        :meth:`output_law`'s blocks (cut after an accepted end-of-sequence token), without building it."""
        self.check_sampler(sampler)
        self._check_rows(tree, len(P))
        out = _Lengths(eos_token_id)
        _LAWS[self.name](tree, P, sampler, out)
        return out.total

    def per_node(self, sampler: str) -> str | None:
        """The per-node verifier this one builds at the nodes it visits (``select-block``,
        ``select-traversal``, ``select-race``), else None: a
        :class:`~.walk.VerifierCache` of it may be passed to :meth:`walk`."""
        return _per_node_optimum(sampler) if self.name in ("select-block", "select-traversal", "select-race") else None

    def walk(self, tree: DraftTree, target_logits: np.ndarray, temperature: float, sampler: str,
             rng: np.random.Generator, *, eos_token_id: int | None = None, cache=None) -> WalkResult:
        """One step: verify ``tree`` against the target's logits at its nodes and draw the appended tokens
        (``cache``: prepared per-node verifiers, see :meth:`per_node`; the same outputs, less time)."""
        t0 = time.perf_counter()
        self.check_sampler(sampler)
        P = TemperedRows(target_logits, check_temperature(temperature))  # the rows the walk reads, tempered as it reads them
        self._check_rows(tree, len(P))
        if tree.children[0] and P.vocab_size != tree.q[0].size:
            raise InputError(f"the target's logits have V = {P.vocab_size} but the tree's draft laws V = "
                             f"{tree.q[0].size}; the two models must share one vocabulary")
        node, bonus = _SAMPLES[self.name](tree, P, sampler, as_rng(rng), cache)
        return accepted_path_result(tree, node, bonus, eos_token_id, t0, lambda visited: P[visited])


def accepted_path_result(tree: DraftTree, node: int, bonus: int, eos_token_id: int | None, t0: float,
                         rows) -> WalkResult:
    """The :class:`~.walk.WalkResult` of a sequence-level step that accepted the path to ``node`` and drew
    ``bonus``: the path's tokens and the bonus, cut after an accepted end-of-sequence token (generation stops
    there, as in :func:`~.walk.walk_per_node`: a function of the step's tokens, so their law stays the
    target's, truncated at EOS; nodes below are not visited), and one visit per node whose child (or
    correction/bonus) token is emitted. ``rows(visited)`` gives the target rows of those nodes (or None each);
    it is called after the step's time is taken."""
    path = []
    u = node
    while u > 0:
        path.append(u)
        u = tree.parents[u]
    path.reverse()
    tokens = [tree.tokens[u] for u in path] + [int(bonus)]
    if eos_token_id is not None and eos_token_id in tokens:
        tokens = tokens[: tokens.index(eos_token_id) + 1]
    accepted = min(len(path), len(tokens))
    seconds = time.perf_counter() - t0
    visited = []
    for u in [0, *path[: len(tokens) - 1]]:  # visit k's child (or correction/bonus) token is tokens[k]
        if not tree.children[u]:
            break
        visited.append(u)
    p_rows = rows(visited) if visited else []
    visits = [Visit(u, tree.depth[u], tree.n[u], tree.drafts[u], p_rows[k], tree.q[u], tokens[k], k < accepted)
              for k, u in enumerate(visited)]
    leaf = node if not tree.children[node] and len(tokens) == len(path) + 1 else None
    return WalkResult(tokens, accepted, visits, seconds, leaf)


# --- block verification ------------------------------------------------------------------------

def _chain(tree: DraftTree) -> list[int]:
    nodes = [0]
    while tree.children[nodes[-1]]:
        if len(tree.children[nodes[-1]]) != 1:
            raise InputError("block verifies one chain; this tree has a node with several children")
        nodes.append(tree.children[nodes[-1]][0])
    return nodes


def _block_quantities(tree: DraftTree, P: list):
    """``h_i`` and the law of the token drawn after accepting ``i`` drafts, ``i = 0..D``."""
    nodes = _chain(tree)
    return (nodes, *_path_quantities(tree, nodes, P, tree.q))


def _path_quantities(tree: DraftTree, nodes: list[int], P, Q) -> tuple[np.ndarray, list]:
    """Block verification's ``h_i`` and laws along the path ``nodes`` (root first), whose token at
    node ``i + 1`` was drawn from ``Q[nodes[i]]`` (the draft law, or the law of a selection)."""
    D = len(nodes) - 1
    w = 1.0
    h = np.empty(D + 1)
    laws = []
    for i, u in enumerate(nodes):
        if i > 0:
            parent = nodes[i - 1]
            w = _child_weight(w, P[parent], Q[parent], tree.tokens[u])
        if i == D:
            h[i], law = w, P[u]
        else:
            r, rho = _residual(w, P[u], Q[u])
            h[i] = 1.0 if i == 0 else (rho / (rho + (1.0 - w)) if rho + (1.0 - w) > 0 else 1.0)
            law = r / rho if rho > 0 else P[u]
        laws.append(law)
    h[0] = 1.0
    return h, laws


class _Lengths:
    """Accumulates the expected number of tokens of a step instead of its law (a step that accepts an
    end-of-sequence token ends there)."""

    def __init__(self, eos):
        self.eos, self.total = eos, 0.0

    def add(self, path, mass, law):
        length = len(path) + 1
        if self.eos is not None and self.eos in path:
            length = path.index(self.eos) + 1
        self.total += mass * float(law[law > 0].sum()) * length


def _emit(out, path: tuple, mass: float, law: np.ndarray) -> None:
    """Add ``mass`` times the law of the token after ``path`` to ``out`` (a dict of blocks, or :class:`_Lengths`)."""
    if isinstance(out, _Lengths):
        out.add(path, mass, law)
        return
    for y in np.flatnonzero(law > 0):
        key = (*path, int(y))
        out[key] = out.get(key, 0.0) + mass * float(law[y])


def _block_law(tree, P, sampler, out=None):
    nodes, h, laws = _block_quantities(tree, P)
    out = {} if out is None else out
    _path_law(tree, nodes, h, laws, 1.0, out)
    return out


def _path_law(tree, nodes, h, laws, weight: float, out) -> None:
    """Add ``weight`` times block verification's law on the path ``nodes`` to ``out``."""
    above = 1.0  # P(no i' > i accepted)
    for i in range(len(nodes) - 1, -1, -1):
        mass = float(above * h[i])
        above *= 1.0 - float(h[i])
        if mass <= 0:
            continue
        _emit(out, tuple(tree.tokens[u] for u in nodes[1 : i + 1]), weight * mass, laws[i])


def _block_sample(tree, P, sampler, rng, cache=None):
    nodes, h, laws = _block_quantities(tree, P)
    return _path_sample(nodes, h, laws, rng)


def _path_sample(nodes, h, laws, rng):
    for i in range(len(nodes) - 1, -1, -1):
        if i == 0 or rng.random() <= h[i]:
            return nodes[i], int(sample_from_law(laws[i], 1, rng)[0])
    raise AssertionError("unreachable")  # pragma: no cover


# --- traversal verification --------------------------------------------------------------------

def _traverse(tree: DraftTree, P: list, sampler: str, u: int, w: float, rng, weight: float, out: dict | None):
    """Examine ``u``'s subtree (``u`` has weight ``w``). Sampling (``rng``): returns ``(node, token)`` or None if
    rejected. Exact (``out``): adds the law of the outcomes, times ``weight``, to ``out`` and returns the
    probability that ``u`` is rejected."""
    Pu = P[u]
    Qu = tree.q.get(u)
    stay = 1.0  # exact mode: probability that every child so far was rejected
    for c in tree.children[u]:
        x = tree.tokens[c]
        wc = _child_weight(w, Pu, Qu, x)
        if out is None:
            found = _traverse(tree, P, sampler, c, wc, rng, 1.0, None)
            if found is not None:
                return found
        else:
            stay *= _traverse(tree, P, sampler, c, wc, None, weight * stay, out)
            if stay <= 0.0:
                return 0.0
        w, Pu = _after_rejection(w, Pu, Qu)
        if sampler == "wor":
            Qu = Qu.copy()
            Qu[x] = 0.0
            total = Qu.sum()
            Qu = Qu / total if total > 0 else Qu
    return _node_outcome(tree, u, 1.0 if u == 0 else w, Pu, rng, weight * stay, out, stay)


def _node_outcome(tree: DraftTree, u: int, accept: float, law: np.ndarray, rng, mass: float, out, stay: float):
    """A traversal's last word on node ``u`` once its children are gone (reached with probability ``stay``):
    accepted with probability ``accept``, then one token from ``law``. Sampling (``rng``): ``(u, token)`` or
    None; exact: adds ``mass * accept`` times ``law`` after ``u``'s path to ``out``, returns P(``u`` rejected)."""
    if out is None:
        if u == 0 or rng.random() < accept:
            return u, int(sample_from_law(law, 1, rng)[0])
        return None
    if accept > 0:
        path = []
        v = u
        while v > 0:
            path.append(tree.tokens[v])
            v = tree.parents[v]
        _emit(out, tuple(path[::-1]), mass * accept, law)
    return stay * (1.0 - accept)


def _traversal_law(tree, P, sampler, out=None):
    out = {} if out is None else out
    _traverse(tree, P, sampler, 0, 1.0, None, 1.0, out)
    return out


def _traversal_sample(tree, P, sampler, rng, cache=None):
    return _traverse(tree, P, sampler, 0, 1.0, rng, 1.0, None)


# --- select-block: the per-node optimal choice picks a path, block verification judges it ----------

def _per_node_optimum(sampler: str) -> str:
    """The per-node optimal verifier of a draft law."""
    return "optimal-wor" if sampler == "wor" else "optimal-iid"


def _node_verifier(walk, p: np.ndarray, q: np.ndarray, n: int, *, reuse: bool):
    """The per-node optimal verifier of ``(p, q, n)`` for a walk holding ``cls``, ``sampler`` and ``cache``: from
    the cache (a :class:`~.walk.VerifierCache`) where ``reuse`` and there is one, else set up afresh."""
    if reuse and walk.cache is not None:
        return walk.cache(p, q, n)
    return walk.cls.unchecked(p, q, n, walk.sampler)


def _pick_law(v, drafts: np.ndarray) -> np.ndarray:
    """``P(draft k is picked)`` by the per-node verifier ``v`` for these drafts. Where its exact choice
    probabilities underflow to nothing (drafts of draft mass ~1e-40 and below), the drafts' candidate masses
    stand in: such trees have probability below ~1e-20, and the walk must still pick one."""
    got = np.asarray(v.choice(drafts[None, :]), dtype=float)[0]
    if not np.isfinite(got).all():  # NaN as 0, infinities as the largest floats (numpy.nan_to_num)
        got = np.nan_to_num(got)
    got = np.maximum(got, 0.0)
    total = got.sum()
    if not total > 0.0:
        got = np.asarray(v.candidate, dtype=float)[drafts] + 0.0
        total = got.sum()
        if not total > 0.0:
            got, total = np.ones(drafts.size), float(drafts.size)
    return got / total


def _draw_pick(v, drafts: np.ndarray, rng) -> int:
    """The index of the draft the per-node verifier ``v`` picks among ``drafts`` (one node's), drawn by the
    verifier's own rule: the law :func:`_pick_law` gives, without its exact choice probabilities (which
    cost ``optimal-wor`` a block's whole tree of splits). A repeated token (iid drafts) goes to one of its
    instances uniformly, as the exact choice probabilities split it: the step's law given the tree is
    then :meth:`SequenceVerifier.output_law`'s, not only on average over the instances' subtrees."""
    one = getattr(v, "pick_one", None)  # optimal-wor: one tuple without the batch's arrays
    token = one(drafts, rng) if one is not None else int(v.pick(drafts[None, :], rng)[0])
    where = [i for i, x in enumerate(drafts.tolist()) if x == token]
    return where[0] if len(where) == 1 else where[int(rng.integers(len(where)))]


class _Selections:
    """The per-node optimal verifier of every node that needs one (``optimal-iid`` or ``optimal-wor`` for the
    node's own ``(p, q, n)``, built on first use): which child it picks and with which law."""

    def __init__(self, tree: DraftTree, P, sampler: str, cache=None):
        from ..verifiers import VERIFIERS

        self.tree, self.P, self.sampler, self.cache = tree, P, sampler, cache
        self.cls = VERIFIERS[_per_node_optimum(sampler)]
        self.laws: dict[int, np.ndarray] = {}
        self.picks: dict[int, np.ndarray] = {}
        self.verifiers: dict = {}

    def verifier(self, u: int):
        """Node ``u``'s per-node optimal verifier (built once); its candidate law goes to ``laws``."""
        got = self.verifiers.get(u)
        if got is None:
            got = _node_verifier(self, self.P[u], self.tree.q[u], self.tree.n[u], reuse=True)
            self.verifiers[u] = got
            self.laws[u] = np.asarray(got.candidate, dtype=float)
        return got

    def at(self, u: int) -> np.ndarray:
        """``P(child k is picked)`` for node ``u``'s children (the i-th draft is the i-th child)."""
        got = self.picks.get(u)
        if got is None:
            got = _pick_law(self.verifier(u), np.asarray(self.tree.drafts[u], dtype=np.int64))
            self.picks[u] = got
        return got

    def draw(self, u: int, rng) -> int:
        """The child of ``u`` its verifier picks, drawn (:func:`_draw_pick`)."""
        return _draw_pick(self.verifier(u), np.asarray(self.tree.drafts[u], dtype=np.int64), rng)


def _select_block_law(tree, P, sampler, out=None):
    """Exact: every path the choices can pick, with its probability, times block verification's law on it."""
    out = {} if out is None else out
    sel = _Selections(tree, P, sampler)

    def down(nodes, weight):
        u = nodes[-1]
        if not tree.children[u]:
            h, laws = _path_quantities(tree, nodes, P, sel.laws)
            _path_law(tree, nodes, h, laws, weight, out)
            return
        for c, pick in zip(tree.children[u], sel.at(u)):
            if pick > 0.0:
                down(nodes + [c], weight * float(pick))

    down([0], 1.0)
    return out


def _select_block_sample(tree, P, sampler, rng, cache=None):
    sel = _Selections(tree, P, sampler, cache)
    nodes = [0]
    while tree.children[nodes[-1]]:
        nodes.append(tree.children[nodes[-1]][sel.draw(nodes[-1], rng)])
    h, laws = _path_quantities(tree, nodes, P, sel.laws)
    return _path_sample(nodes, h, laws, rng)


# --- select-traversal: the per-node optimal verifier's acceptances, tried child by child -------------

def _with_weight(w: float, P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A node of weight ``w`` as a per-node problem: the target ``w P`` plus ``1 - w`` on one extra token
    ``⊥`` that no draft can be (its draft mass is 0), against ``Q``."""
    if w >= 1.0:
        return P, Q
    V = P.shape[0]
    target, draft = np.empty(V + 1), np.empty(V + 1)
    np.multiply(P, w, out=target[:V])
    target[V] = 1.0 - w
    draft[:V] = Q
    draft[V] = 0.0
    return target, draft


#: Above this many children that can be accepted, select-traversal orders its tries greedily (the exact order
#: is a dynamic programme over 2^n sets of children).
MAX_ORDERED = 10


def _look_ahead(Q: np.ndarray, k: int, target: np.ndarray, rests: np.ndarray) -> np.ndarray:
    """``sum_y min(r hit(y), target(y))`` at each ``r`` in ``rests``, ``hit = 1 - (1 - Q)^k``, in a few passes
    over the vocabulary: with ``ratio = target / hit`` the sum is ``r hit(ratio > r) + target(ratio <= r)``
    (for a few ``r``, one pass each is cheaper)."""
    with np.errstate(divide="ignore"):  # Q = 1 (T = 0): log1p(-1) = -inf, and hit = 1 exactly
        hit = Q if k == 1 else -np.expm1(k * np.log1p(-np.minimum(Q, 1.0)))
    if rests.size <= 4:
        return np.array([float(np.minimum(r * hit, target).sum()) for r in rests])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(hit > 0.0, target / hit, np.inf)
    cuts = np.unique(rests)
    bins = np.searchsorted(cuts, ratio, side="left")  # ratio <= cuts[b] for the first b
    hit_in = np.bincount(bins, weights=hit, minlength=cuts.size + 1)
    target_in = np.bincount(bins, weights=target, minlength=cuts.size + 1)
    below = np.cumsum(target_in)[: cuts.size]  # target of the tokens with ratio <= cuts[b]
    above = hit_in.sum() - np.cumsum(hit_in)[: cuts.size]  # hit of the tokens with ratio > cuts[b]
    values = cuts * above + below
    return values[np.searchsorted(cuts, rests)]


def _try_order(tree: DraftTree, P, u: int, A: np.ndarray) -> list[int]:
    """The order in which ``u``'s children get their deep tries: the one that maximises the one-level look-ahead
    ``sum_j g_j(R_j)``, ``g_j(R) = sum_y min(R hit_c(y), A_j P_c(y))`` (child ``c = children[j]``, ``hit_c(y)`` the
    probability that ``y`` is among ``c``'s drafts, taken as ``1 - (1 - Q_c(y))^k``) and ``R_j = 1 - sum`` of the
    ``g`` of the children tried before (a proxy for the probability that the walk reaches ``j``), by dynamic
    programming over the sets of children tried first (greedily, one child at a time, above :data:`MAX_ORDERED`
    children that can be accepted). The programme is exact where every ``g`` has slope at most 1 (children with one
    draft), a heuristic otherwise. Any order that does not look at the subtrees' drafts keeps the walk lossless;
    this one only decides how much it accepts."""
    children = tree.children[u]
    live = [j for j in range(len(children)) if A[j] > 0.0]
    if len(live) < 2 or not any(tree.children[children[j]] for j in live):
        return live

    def value(j, rests):
        c = children[j]
        if not tree.children[c]:
            return np.zeros(len(rests))
        return _look_ahead(tree.q[c], len(tree.children[c]), A[j] * P[c], np.asarray(rests, dtype=float))

    if len(live) > MAX_ORDERED:  # greedy: the child whose try gains most next, one at a time
        order, deep = [], 0.0
        left = list(live)
        while left:
            gains = [float(value(j, [max(1.0 - deep, 0.0)])[0]) for j in left]
            k = int(np.argmax(gains))
            order.append(left.pop(k))
            deep += gains[k]
        return order
    m = len(live)  # dynamic programming over the sets of live children tried first (bit i: live[i])
    N = 1 << m
    sets = np.arange(N)
    size = ((sets[:, None] >> np.arange(m)) & 1).sum(axis=1)
    best = np.full(N, -np.inf)
    best[0] = 0.0
    last = np.zeros(N, dtype=np.int64)
    for layer in range(m):  # every set of one size is final before the sets one larger
        S = np.flatnonzero(size == layer)
        for i, j in enumerate(live):
            rows = S[((S >> i) & 1) == 0]
            T = rows | (1 << i)
            candidate = best[rows] + value(j, np.maximum(1.0 - best[rows], 0.0))
            better = candidate > best[T]
            best[T[better]], last[T[better]] = candidate[better], i
    order, S = [], N - 1
    while S:
        order.append(live[int(last[S])])
        S ^= 1 << int(last[S])
    return order[::-1]


class _Tries:
    """At each node the walk reaches with a weight: the per-node optimal verifier of the weighted node, the
    children's acceptance probabilities ``A``, the order of their deep tries and the residual."""

    def __init__(self, tree: DraftTree, P, sampler: str, cache=None):
        from ..verifiers import VERIFIERS

        self.tree, self.P, self.sampler, self.cache = tree, P, sampler, cache
        self.cls = VERIFIERS[_per_node_optimum(sampler)]
        # what a node at a weight gives is a function of the tree's laws and drafts: an exact law (select-race's,
        # which enumerates the children's picks) asks for the same (node, weight) many times
        self._memo: dict = {}

    def memo(self, key, make):
        """``make()``, computed once per ``key`` for this tree."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def at(self, u: int, w: float, order: bool = True):
        return self.memo((u, w, order), lambda: self._at(u, w, order))

    def unit(self, c: int):
        """Node ``c``'s per-node optimal verifier at weight 1 (memoised)."""
        return self.memo(("unit", c), lambda: _node_verifier(self, self.P[c], self.tree.q[c], self.tree.n[c],
                                                             reuse=True))

    def unit_pick(self, c: int) -> np.ndarray:
        """The pick law of :meth:`unit` for ``c``'s drafts (memoised; the exact law needs it, a sampled step
        draws the pick instead, :func:`_draw_pick`)."""
        return self.memo(("pick", c), lambda: _pick_law(self.unit(c), np.asarray(self.tree.drafts[c], dtype=np.int64)))

    def node(self, u: int, w: float):
        """Node ``u`` at weight ``w``: its per-node optimal verifier, candidate law ``t`` and residual
        ``r = max(w P_u - t, 0)`` with its mass (memoised)."""
        return self.memo(("node", u, w), lambda: self._node(u, w))

    def _node(self, u: int, w: float):
        tree, Pu = self.tree, self.P[u]
        target, draft = _with_weight(w, Pu, tree.q[u])
        # only weight-1 nodes (the root, a child of weight 1) repeat across steps: weighted set-ups would crowd the cache
        v = _node_verifier(self, target, draft, tree.n[u], reuse=w >= 1.0)
        t = np.asarray(v.candidate, dtype=float)[: Pu.size]
        r, rho = _residual(w, Pu, t)
        return v, t, r, rho

    def _at(self, u: int, w: float, order: bool):
        tree, Pu = self.tree, self.P[u]
        v, t, r, rho = self.node(u, w)
        drafts = np.asarray(tree.drafts[u], dtype=np.int64)
        pick = _pick_law(v, drafts)
        tx = t[drafts]
        safe = np.where(tx > 0.0, tx, 1.0)
        A = np.where(tx > 0.0, pick * np.minimum(1.0, w * Pu[drafts] / safe), 0.0)
        return A, (_try_order(tree, self.P, u, A) if order else None), r, rho


def _select_traverse(tree: DraftTree, tries: _Tries, u: int, w: float, rng, weight: float, out):
    """Walk below ``u`` (weight ``w``, which has children): phase 1, the children's deep tries in order; phase 2,
    one child's own acceptance; at the root, its residual. ``u``'s own acceptance is its parent's phase 2.

    Returns ``(result, r, rho)``, ``r = max(w P_u - t, 0)`` and ``rho`` its mass (what the parent needs for ``u``'s
    own acceptance). Sampling (``rng``): ``result`` is ``(node, token)``, or None if nothing below ``u`` was
    accepted; exact (``out``): the law of the outcomes below ``u``, times ``weight``, is added to ``out`` and
    ``result`` is the probability that nothing below ``u`` is accepted, given this tree."""
    P = tries.P
    A, order, r, rho = tries.at(u, w)
    used, stay = 0.0, 1.0  # used: P(a deep try before this one accepted), averaged over the subtrees
    own = []  # (child, its own acceptance law times its mass) for phase 2
    for j in order:
        c = tree.children[u][j]
        reach = max(1.0 - used, A[j])  # >= A_j exactly (used <= the A of the children before); guards rounding
        if tree.children[c]:
            b = min(1.0, A[j] / reach)
            found, rc, rhoc = _select_traverse(tree, tries, c, b, rng, weight * stay, out)
            if out is None:
                if found is not None:
                    return found, r, rho
            else:
                stay *= found
                if stay <= 0.0:
                    return 0.0, r, rho
            used += max(A[j] - reach * rhoc, 0.0)  # reach * (b - rho_c): deep acceptance, averaged below c
            own.append((c, reach * rc))  # A_j P_c minus the deep law reach * min(b P_c, t_c)
        else:
            own.append((c, A[j] * P[c]))
    return _own_acceptances(tree, u, [c for c, _ in own], [law for _, law in own], used, r, rho, P, rng, weight,
                            stay, out)


def _own_acceptances(tree: DraftTree, u: int, kids: list, own: list, used: float, r, rho, P, rng, weight: float,
                     stay: float, out):
    """Phase 2 below ``u``: child ``kids[i]`` itself is accepted with probability ``own[i].sum() / (1 - used)``
    (``used``: P(phase 1 accepted), averaged over the subtrees), then one token from ``own[i]``; at the root the
    rest draws from its residual ``r / rho``. Returns like :func:`_select_traverse` (phase 1 found nothing,
    reached with probability ``stay`` in exact mode)."""
    rest = max(1.0 - used, 0.0)  # P(phase 2 is reached), averaged over the subtrees
    masses = np.array([float(law.sum()) for law in own])
    share = masses / rest if rest > 0.0 else np.zeros(len(own))
    if out is None:
        k = int(np.searchsorted(np.cumsum(share), rng.random(), side="right"))
        if k < len(own):
            return (kids[k], int(sample_from_law(own[k], 1, rng)[0])), r, rho
        if u == 0:
            return (0, int(sample_from_law(r if rho > 0.0 else P[0], 1, rng)[0])), r, rho
        return None, r, rho
    for c, law, s in zip(kids, own, share):
        if s > 0.0:
            _emit(out, _path_to(tree, c), weight * stay * s, law / law.sum())
    if u == 0:
        root = max(1.0 - float(share.sum()), 0.0)
        if root > 0.0:
            _emit(out, (), weight * stay * root, r / rho if rho > 0.0 else P[0])
        return 0.0, r, rho
    return stay * max(1.0 - float(share.sum()), 0.0), r, rho


def _select_traversal_law(tree, P, sampler, out=None):
    out = {} if out is None else out
    if not tree.children[0]:
        _emit(out, (), 1.0, P[0])
        return out
    _select_traverse(tree, _Tries(tree, P, sampler), 0, 1.0, None, 1.0, out)
    return out


def _select_traversal_sample(tree, P, sampler, rng, cache=None):
    if not tree.children[0]:
        return 0, int(sample_from_law(P[0], 1, rng)[0])
    return _select_traverse(tree, _Tries(tree, P, sampler, cache), 0, 1.0, rng, 1.0, None)[0]


# --- select-race: the children's candidates race by their cap-to-candidate ratio ---------------------------

@kernel
def _race_keys(caps, cands, keys, js, zs, rank, beta, deep):  # pragma: no cover - compiled (the plain version is tested)
    """The race's sort keys: ``-caps / cands`` of every pair with both positive, with the pair's child ``j``
    and token ``z``, in row-major order; every other pair's table entries set off the race (rank -1, beta and
    ``f`` 0: the pass writes every entry of the pairs in the race). Returns how many pairs race."""
    K, V = caps.shape
    count = 0
    for j in range(K):
        for z in range(V):
            if cands[j, z] > 0.0 and caps[j, z] > 0.0:
                keys[count] = -(caps[j, z] / cands[j, z])
                js[count] = j
                zs[count] = z
                count += 1
            else:
                rank[j, z] = -1
                beta[j, z] = 0.0
                deep[j, z] = 0.0
    return count


@kernel
def _race_pass(js, zs, caps, cands, beta, deep, rank):  # pragma: no cover - compiled (the plain version is tested)
    """The race's one pass over the (child, token) pairs ``(js[p], zs[p])`` in order: ``beta``, ``deep``
    (``f``) and ``rank`` (the pair's place in the order), filled in place; ``S_j`` is the probability that
    child ``j`` has not won yet."""
    K = caps.shape[0]
    S = np.ones(K)
    n = js.size
    p = 0
    while p < n:  # a run of one child's pairs at a time: the others' S, hence reach, hold along it
        j = js[p]
        reach = 1.0
        for i in range(K):
            if i != j:
                reach *= max(S[i], 0.0)
        s = S[j]
        e = p
        while e < n and js[e] == j:
            z = zs[e]
            rank[j, z] = e
            if reach > 0.0:
                t = cands[j, z]
                tr = t * reach
                c = caps[j, z]
                if c >= tr:  # the cap does not bind (also where tr underflows to 0 with denormal t): beta = 1
                    beta[j, z] = 1.0
                    deep[j, z] = tr
                    s -= t
                else:
                    b = c / tr
                    beta[j, z] = b
                    deep[j, z] = min(tr * b, c)  # f <= caps also where rounding in denormals would pass it
                    s -= t * b
            else:  # no reach left: the pair is ranked but never tried
                beta[j, z] = 0.0
                deep[j, z] = 0.0
            e += 1
        S[j] = s
        p = e


@kernel
def _race_all(caps, cands):  # pragma: no cover - compiled (race_tables' numpy path is tested)
    """The whole race in one compiled call: the keys, their stable radix sort (the keys made its words in place)
    and the pass; returns ``(rank, beta, deep)``, every entry written once (no tables cleared beforehand)."""
    K, V = caps.shape
    beta, deep = np.empty((K, V)), np.empty((K, V))
    rank = np.empty((K, V), dtype=np.int64)
    keys = np.empty(K * V)
    jk = np.empty(K * V, dtype=np.int64)
    zk = np.empty(K * V, dtype=np.int64)
    live = _race_keys(caps, cands, keys, jk, zk, rank, beta, deep)
    idx = np.empty(live, dtype=np.int64)
    _radix_argsort_into(keys[:live], idx)
    js = np.empty(live, dtype=np.int64)
    zs = np.empty(live, dtype=np.int64)
    for p in range(live):
        js[p] = jk[idx[p]]
        zs[p] = zk[idx[p]]
    _race_pass(js, zs, caps, cands, beta, deep, rank)
    return rank, beta, deep


def race_tables(caps: np.ndarray, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The race of ``select-race`` at one node: ``caps[j] = A_j P_j`` and ``cands[j] = t_j`` (child ``j``'s
    candidate law), both ``[K, V]``. The pairs ``(j, z)`` with ``t_j(z) caps_j(z) > 0`` are ranked by decreasing
    ``caps_j(z) / t_j(z)`` (ties: smaller ``j``, then smaller ``z``); in that order, with ``S_j = 1`` at first,
    ``reach = prod_{i != j} S_i``, ``beta_j(z) = min(1, caps_j(z) / (t_j(z) reach))``,
    ``f_j(z) = t_j(z) beta_j(z) reach`` and ``S_j -= t_j(z) beta_j(z)``. Returns ``(rank, beta, f)`` (rank -1:
    not in the race); ``f <= caps`` by construction."""
    K, V = caps.shape
    caps, cands = np.ascontiguousarray(caps, dtype=float), np.ascontiguousarray(cands, dtype=float)
    if numba_enabled() and K * V > 1:
        return _race_all(caps, cands)
    beta, deep = np.empty((K, V)), np.empty((K, V))
    rank = np.empty((K, V), dtype=np.int64)
    keys, js, zs = np.empty(K * V), np.empty(K * V, dtype=np.int64), np.empty(K * V, dtype=np.int64)
    live = _race_keys(caps, cands, keys, js, zs, rank, beta, deep)  # row-major: j, then z
    # ties in row-major order: a stable sort (radix when compiled; the keys tie by the thousand, where t_j = P_j)
    order = stable_argsort(keys[:live])
    js, zs = js[order], zs[order]
    _race_pass(js, zs, caps, cands, beta, deep, rank)
    return rank, beta, deep


def _race_prep(tree: DraftTree, tries: _Tries, u: int, w: float):
    """What :func:`_race_walk` needs at ``u`` (weight ``w``), a function of the tree's laws and drafts (memoised:
    the exact law asks again for every combination of picks): the residual ``r, rho``, the racing children
    ``inner`` (their verifiers: ``tries.unit``), the race table ``rank, beta`` (rows in ``inner``'s order) and
    the children's shares ``A_j P_j`` with the deep acceptances ``f`` (phase 2's own laws, :func:`_race_own`)."""
    return tries.memo(("race", u, w), lambda: _race_table_at(tree, tries, u, w))


def _race_table_at(tree: DraftTree, tries: _Tries, u: int, w: float):
    P = tries.P
    A, _, r, rho = tries.at(u, w, order=False)
    kids = tree.children[u]
    inner = [j for j, c in enumerate(kids) if tree.children[c] and A[j] > 0.0]
    shares = [A[j] * P[c] for j, c in enumerate(kids)]
    rank, beta, deep = None, None, None
    if inner:
        V = P[kids[inner[0]]].size
        caps, cands = np.empty((len(inner), V)), np.empty((len(inner), V))
        for i, j in enumerate(inner):
            caps[i] = shares[j]
            cands[i] = np.asarray(tries.unit(kids[j]).candidate, dtype=float)[:V]
        rank, beta, deep = race_tables(caps, cands)
    return r, rho, inner, rank, beta, shares, deep


def _race_own(tree: DraftTree, tries: _Tries, u: int, w: float):
    """Phase 2's laws at ``u`` (memoised; a sampled step builds them only where phase 1 found nothing): every
    child's own law ``A_j P_j - f_j`` and ``used = sum f``."""
    def make():
        _, _, inner, _, _, shares, deep = _race_prep(tree, tries, u, w)
        own = list(shares)
        for i, j in enumerate(inner):
            own[j] = np.maximum(shares[j] - deep[i], 0.0)
        return own, (float(deep.sum()) if inner else 0.0)

    return tries.memo(("own", u, w), make)


def _race_walk(tree: DraftTree, tries: _Tries, u: int, w: float, rng, weight: float, out):
    """Below ``u`` (weight ``w``, with children), ``select-race``: phase 1, the race of the children's candidates
    (each inner child's per-node optimal verifier at weight 1 picks one of its drafts; the tried one walks its
    subtree with weight ``beta``); phase 2, one child's own acceptance; at the root, its residual. Returns like
    :func:`_select_traverse`."""
    P = tries.P
    kids = tree.children[u]
    if out is None and not any(tree.children[c] for c in kids):
        return _leaf_race(tree, tries, u, w, rng)
    r, rho, inner, rank, beta, _, _ = _race_prep(tree, tries, u, w)
    stay = 1.0
    if inner:
        if out is None:
            tried = []
            for i, j in enumerate(inner):
                c = kids[j]
                g = tree.children[c][_draw_pick(tries.unit(c), np.asarray(tree.drafts[c], dtype=np.int64), rng)]
                z = tree.tokens[g]
                if rank[i, z] >= 0:
                    tried.append((rank[i, z], g, float(beta[i, z])))
            for _, g, b in sorted(tried):
                found = _race_full(tree, tries, g, b, rng, 1.0, None)
                if found is not None:
                    return found, r, rho
        else:
            stay = 0.0
            picks = [tries.unit_pick(kids[j]) for j in inner]
            for combo in itertools.product(*[np.flatnonzero(pk > 0.0) for pk in picks]):
                prob = float(np.prod([picks[i][k] for i, k in enumerate(combo)]))
                tried = []
                for i, (j, k) in enumerate(zip(inner, combo)):
                    g = tree.children[kids[j]][int(k)]
                    if rank[i, tree.tokens[g]] >= 0:
                        tried.append((rank[i, tree.tokens[g]], g, float(beta[i, tree.tokens[g]])))
                for _, g, b in sorted(tried):
                    prob *= _race_full(tree, tries, g, b, None, weight * prob, out)
                    if prob <= 0.0:
                        break
                stay += prob
    own, used = _race_own(tree, tries, u, w)
    return _own_acceptances(tree, u, kids, own, used, r, rho, P, rng, weight, stay, out)


def _leaf_race(tree: DraftTree, tries: _Tries, u: int, w: float, rng):
    """:func:`_race_walk` below a node whose children are all leaves, sampled: with no race, phase 2 takes child
    ``j`` with probability ``A_j = pick_j min(1, w P_u(x_j) / t(x_j))`` and then a token from its target law, so
    the node's own verifier draws the pick (:func:`_draw_pick`, no exact choice probabilities) and a coin
    accepts it; otherwise (the rest, ``1 - sum A``) the root draws from its residual and any other node is
    rejected. The same law as the general walk, at the cost of one pick."""
    v, t, r, rho = tries.node(u, w)
    drafts = np.asarray(tree.drafts[u], dtype=np.int64)
    j = _draw_pick(v, drafts, rng)
    x = int(drafts[j])
    if t[x] > 0.0 and rng.random() * t[x] < w * tries.P[u][x]:  # accepted with probability min(1, w P / t)
        c = tree.children[u][j]
        return (c, int(sample_from_law(tries.P[c], 1, rng)[0])), r, rho
    if u == 0:
        return (0, int(sample_from_law(r if rho > 0.0 else tries.P[0], 1, rng)[0])), r, rho
    return None, r, rho


def _race_full(tree: DraftTree, tries: _Tries, g: int, a: float, rng, weight: float, out):
    """Node ``g`` tried with weight ``a``: the race below it, then ``g`` itself with probability
    ``rho / (rho + 1 - a)`` (a leaf: ``a``). Sampling: ``(node, token)`` or None; exact: P(``g`` rejected)."""
    if not tree.children[g] or a <= 0.0:
        return _node_outcome(tree, g, a, tries.P[g], rng, weight, out, 1.0)
    found, r, rho = _race_walk(tree, tries, g, a, rng, weight, out)
    if out is None and found is not None:
        return found
    stay = 1.0 if out is None else found
    accept = rho / (rho + (1.0 - a)) if rho + (1.0 - a) > 0.0 else 1.0  # 1 - a first: exact at a = 1
    return _node_outcome(tree, g, accept, r / rho if rho > 0.0 else tries.P[g], rng, weight * stay, out, stay)


def _select_race_law(tree, P, sampler, out=None):
    out = {} if out is None else out
    if not tree.children[0]:
        _emit(out, (), 1.0, P[0])
        return out
    _race_walk(tree, _Tries(tree, P, sampler), 0, 1.0, None, 1.0, out)
    return out


def _select_race_sample(tree, P, sampler, rng, cache=None):
    if not tree.children[0]:
        return 0, int(sample_from_law(P[0], 1, rng)[0])
    return _race_walk(tree, _Tries(tree, P, sampler, cache), 0, 1.0, rng, 1.0, None)[0]


_LAWS = {"block": _block_law, "traversal": _traversal_law, "select-block": _select_block_law,
         "select-traversal": _select_traversal_law, "select-race": _select_race_law}
#: ``(tree, P, sampler, rng, cache)``: select-block, select-traversal and select-race use ``cache`` (prepared per-node
#: verifiers).
_SAMPLES = {"block": _block_sample, "traversal": _traversal_sample, "select-block": _select_block_sample,
            "select-traversal": _select_traversal_sample, "select-race": _select_race_sample}


#: Sequence-level verifiers by CLI name.
SEQUENCE_VERIFIERS: dict[str, SequenceVerifier] = {
    "block": SequenceVerifier("block", "Block Verification (Sun et al., ICLR 2025): the whole chain judged at once"),
    "traversal": SequenceVerifier("traversal", "Traversal Verification (Weng et al., NeurIPS 2025): leaves first, "
                                               "sequence-level weights"),
    "select-block": SequenceVerifier("select-block", "per-node optimal choice of one path (optimal-iid / "
                                                     "optimal-wor), then Block Verification of it"),
    "select-traversal": SequenceVerifier("select-traversal", "traversal with the per-node optimal verifier "
                                                             "(optimal-iid / optimal-wor) at every node, children "
                                                             "tried in a look-ahead order"),
    "select-race": SequenceVerifier("select-race", "the per-node optimal verifier at every node; the children's "
                                                   "candidates race for the deep acceptances by their "
                                                   "cap-to-candidate ratio, then the children themselves"),
}

__all__ = ["SEQUENCE_VERIFIERS", "SequenceVerifier"]
