"""Nested chords: the choice of one draft among drafts without replacement, any n.

Inside a priority block (tokens ``a .. b`` of the chain, everything above it missed)
the candidate's cumulative law ``T`` and the hit curve ``H`` (``P(X hits A_k)``),
both against the cumulative draft mass ``Q``, are concave, ``T <= H``, and they meet
at the block's ends. ``T`` is then a mixture of the chord interpolants of ``H``: split
the segment at the boundary ``c`` of largest relative tightness
``rho = (T - chord_T) / (H - chord_H)``; the segment's own chord takes the mixture weight
``rho_parent - rho`` and the two halves recurse. With one uniform ``U`` this is a random
nested partition of the block; the rule takes the segment of that partition holding
the drafts' highest chain position, and inside it one of its drafts with the *flat* law
``q_y (H(b) - H(a)) / (Q(b) - Q(a))``.

The flat law comes from the segment rule (:func:`_segment_rule`): the first drafted
token of the segment, plus ``kappa = Q(a) / (Q(b) - Q(a))`` times the swap of that token
with the last draft when the last draft is in the segment too, averaged over the
orders of the drafted set. Conditioned on missing the chain above the segment, a wor
tuple is tilted by ``prod_k (1 - Q(a) - Q_{k-1}) / (1 - Q_{k-1})``; the swap undoes
exactly that tilt (docs/theory.md).

Everything the rule needs comes from the chain: no per-token integrals. No split is needed at
all: the partition at level ``U`` is the set of vertices of the concave majorant of
``T - U H``, so a step's segment is that majorant's edge over the drafts' highest position (one
pass over the block), and the rule's law is the majorant of ``T`` minus the majorant of ``T - H``
(two passes a block, checked against ``t`` at set-up). The tree of splits is built only for a
block many steps go into, or whose exact choice probabilities are asked for (docs/theory.md).
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

#: Largest number of drafts the segment rule takes (it works over the 2^n subsets of the drafts).
MAX_CHORD_DRAFTS = 16
#: A block whose tree mixes its chords into more than this away from ``t`` is rebuilt by scans only
#: (a split the hulls missed by rounding shows as 1e-8 to 1e-5; the hit curve's own noise as 1e-13 to
#: 1e-12, where a rebuild finds the same tree at the cost of scans).
MIXTURE_TOLERANCE = 1e-11
#: Up to this the mixture's distance from ``t`` is the hit curve's quadrature error, not the tree's.
TRUSTED = 1e-9
#: Steps into one block found by concave majorants (``O(m)`` each) before its tree of splits is built
#: and walked instead (many steps on one pair: Monte Carlo checks; a decoding step visits a pair once).
TREE_AFTER = 64


@functools.lru_cache(maxsize=1)
def _kernels():
    """The compiled kernels (imported on first use: numba loads them then; one namespace for every plan)."""
    from ._chord_kernels import (
        _block_sums,
        _block_tree,
        _bridge,
        _bridge_path,
        _chord_pick_row,
        _first_block,
        _majorant_laws,
        _mass,
        _mixture_law,
        _path_choice_row,
        _path_groups,
        _plan_arrays,
        _prefix2,
        _segment_rule,
        _tree_hull,
        _walk,
        _wor_chord_setup,
    )

    return SimpleNamespace(_block_sums=_block_sums, _block_tree=_block_tree, _bridge=_bridge, _bridge_path=_bridge_path,
                           _chord_pick_row=_chord_pick_row, _first_block=_first_block,
                           _majorant_laws=_majorant_laws, _mass=_mass, _mixture_law=_mixture_law,
                           _path_choice_row=_path_choice_row, _path_groups=_path_groups, _plan_arrays=_plan_arrays,
                           _prefix2=_prefix2, _segment_rule=_segment_rule, _tree_hull=_tree_hull, _walk=_walk,
                           _wor_chord_setup=_wor_chord_setup)


def segment_rule_decimal(qS: np.ndarray, inG: np.ndarray, rest: float, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """The segment rule's ``(base, slope)`` in decimal arithmetic, with ``34 + log10(kappa)`` digits
    so that ``base + kappa * slope`` keeps 1e-16 of precision (the correction's two sums cancel to
    about ``1/kappa`` of their size when the segment's mass is tiny next to the mass above it),
    and an exponent range far past float64's (masses at the float64 floor)."""
    import decimal

    n = qS.size
    ctx = decimal.Context(prec=int(34 + max(0.0, math.log10(max(kappa, 1.0)))), Emin=-999999, Emax=999999)
    full, N = (1 << n) - 1, 1 << n
    gmask = sum(1 << i for i in range(n) if inG[i])
    with decimal.localcontext(ctx):
        D = decimal.Decimal
        zero = D(0)
        q = [D(float(x)) for x in qS]
        rem = [D(float(rest)) + sum((q[i] for i in range(n) if not (U >> i) & 1), zero) for U in range(N)]
        alpha = [zero] * N
        aF = [[zero] * n for _ in range(N)]
        alpha[0] = D(1)
        for U in sorted(range(N), key=lambda u: bin(u).count("1")):
            if alpha[U] == 0:
                continue
            for w in range(n):
                if (U >> w) & 1:
                    continue
                V, f = U | (1 << w), q[w] / rem[U]
                alpha[V] += alpha[U] * f
                if inG[w] and not (U & gmask):
                    aF[V][w] += alpha[U] * f
                aF[V] = [x + y * f for x, y in zip(aF[V], aF[U])]
        base, slope = np.zeros(n), np.zeros(n)
        for z in np.flatnonzero(inG):
            b = sum((aF[full ^ (1 << g)][z] * q[g] / rem[full ^ (1 << g)] for g in np.flatnonzero(inG) if g != z),
                    zero)
            Uz = full ^ (1 << z)
            c = alpha[Uz] * q[z] / rem[Uz] if Uz & gmask else zero
            base[z] = float(aF[full][z] / alpha[full])
            slope[z] = float((b - c) / alpha[full])
    return base, slope


#: Above this (kappa times the number of drafts), the segment rule runs in decimal arithmetic.
EXACT_KAPPA = 1e4


class ChordPlan:
    """The nested-chord rule for every priority block of one ``(p, q, n)``.

    ``order`` is the chain, ``t`` the candidate law (indexed by token), ``cuts`` the block
    boundaries (chain positions, with 0 and V), ``H`` the hit probabilities along the chain.

    Nothing per block is built at set-up but the rule's law (two concave majorants a block,
    :func:`~._chord_kernels._majorant_laws`, checked against ``t``). A step finds its segment as
    the edge of one concave majorant over the drafts' first position (``O(m)`` in the block's size
    ``m``); a block stepped into :data:`TREE_AFTER` times gets its tree of splits, walked in
    ``O(depth)`` from then on, and so does a block whose exact choice probabilities are asked for.
    """

    def __init__(self, q: np.ndarray, order: np.ndarray, t: np.ndarray, cuts: np.ndarray, H: np.ndarray):
        order = np.ascontiguousarray(order, dtype=np.int64)
        cuts, H = np.asarray(cuts, dtype=np.int64), np.asarray(H, dtype=np.float64)
        V = order.size
        pos, qs, ts, law, above = np.empty(V, dtype=np.int64), np.empty(V), np.empty(V), np.empty(V), np.empty(V + 1)
        steered = _kernels()._plan_arrays(np.ascontiguousarray(q, dtype=np.float64), order,
                                          np.ascontiguousarray(t, dtype=np.float64), cuts, H, TRUSTED, pos, qs,
                                          above, ts, law)
        self._keep(q, order, t, cuts, H, pos, qs, above, ts, law, steered)

    @classmethod
    def from_arrays(cls, q, order, t, cuts, H, pos, qs, above, ts, law, steered) -> ChordPlan:
        """The plan from what :func:`~._chord_kernels._plan_arrays` computed (``optimal-wor``'s set-up
        at n >= 3 computes it in the same compiled call as the chain, :func:`~._chord_kernels._wor_chord_setup`)."""
        plan = cls.__new__(cls)
        plan._keep(q, order, t, cuts, H, pos, qs, above, ts, law, steered)
        return plan

    def _keep(self, q, order, t, cuts, H, pos, qs, above, ts, law, steered):
        self.q, self.order, self.V, self.cuts, self.t, self.H = q, order, order.size, cuts, t, H
        self.total = float(q.sum())
        self._arrays: dict[int, tuple] = {}
        self._trees: dict[int, tuple] = {}  # block -> (tree, trusted)
        self._treed = np.zeros(cuts.size, dtype=np.bool_)  # block -> whether its tree is built
        self._steps = np.zeros(cuts.size, dtype=np.int64)  # block -> steps found by bridges
        self.k = _kernels()
        self.pos = pos  # the chain position of each token
        self.qs = qs  # q along the chain
        self.above = above  # Q(a): draft mass above position a
        self.ts = ts  # t along the chain
        #: The law the rule really gives: ``t`` where a block's majorant law is within :data:`TRUSTED`
        #: of it (always seen), else that law (``t`` not concave, or above the hit curve, past rounding).
        self.law = law
        self.steered = int(steered)  # blocks whose rule misses t by more than TRUSTED

    # --- the blocks and their splits -------------------------------------------------------
    def block_of(self, position: int) -> int:
        return int(np.searchsorted(self.cuts, position, side="right") - 1)

    def _block_arrays(self, i: int):
        """Block ``i``: its first position and cumulative ``T``, ``H``, ``Q`` (relative to it, at its
        boundaries), the double-double prefix masses, and a scratch stack for the bridges."""
        got = self._arrays.get(i)
        if got is None:
            A, B = int(self.cuts[i]), int(self.cuts[i + 1])
            T, Q, H, Qh, Ql = self.k._block_sums(self.ts, self.qs, self.H, A, B)
            got = (A, T, H, Q, (Qh, Ql), np.empty(B - A + 1, np.int64))
            self._arrays[i] = got
        return got

    def _tree(self, i: int):
        """Block ``i``'s tree of splits (built on first use) and whether its law is ``t`` to
        :data:`TRUSTED` (a tree the hulls' rounding steered is never walked)."""
        got = self._trees.get(i)
        if got is None:  # the sums, the tree by hulls, its law, and by scans where rounding steered a split
            A, B = int(self.cuts[i]), int(self.cuts[i + 1])
            T, Q, H, Qh, Ql, tree, err = self.k._block_tree(self.ts, self.qs, self.H, A, B, MIXTURE_TOLERANCE)
            if i not in self._arrays:
                self._arrays[i] = (A, T, H, Q, (Qh, Ql), np.empty(B - A + 1, np.int64))
            got = (tree, float(err) <= TRUSTED)
            self._trees[i] = got
            self._treed[i] = True
        return got

    def _block(self, i: int):
        """``(first position, (Qh, Ql), tree)`` of block ``i``, its tree built if it was not."""
        A, _, _, _, masses, _ = self._block_arrays(i)
        return A, masses, self._tree(i)[0]

    def segment(self, j: int, u: float) -> tuple[int, int]:
        """The segment the rule uses for position ``j`` and a uniform ``u``: the edge over ``j`` of the
        concave majorant of ``T - u H`` (the block's trusted tree gives the same, once it is built)."""
        i = self.block_of(j)
        A, T, H, Q, _, stack = self._block_arrays(i)
        tree = self._trees.get(i)
        if tree is None:
            self._steps[i] += 1
            if self._steps[i] > TREE_AFTER:
                tree = self._tree(i)
        if tree is not None and tree[1]:
            na, nb, nrho, nc, nl, nr = tree[0]
            node = self.k._walk(nrho, nc, nl, nr, j - A, u)
            return A + int(na[node]), A + int(nb[node])
        a, b = self.k._bridge(T, H, Q, u, j - A, stack)
        return A + int(a), A + int(b)

    # --- the rule inside a segment ------------------------------------------------------------
    def _rest(self, drafts: np.ndarray) -> float:
        """Draft mass outside the drafted set, without cancellation when the set holds most of it."""
        inside = float(self.q[drafts].sum())
        if self.total - inside >= 1e-3 * self.total:  # the difference keeps 13 digits: no O(V) sum
            return self.total - inside
        mask = np.ones(self.V, dtype=bool)
        mask[drafts] = False
        return float(self.q[mask].sum())

    def _parts(self, drafts: np.ndarray, inG: np.ndarray, rest: float,
               kappa: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """``(base, slope)``: the segment rule's probabilities are ``base + kappa * slope`` (in
        decimal arithmetic when ``kappa``, the largest multiplier of ``slope``, would amplify rounding)."""
        base, slope = np.zeros(drafts.size), np.zeros(drafts.size)
        if inG.sum() == 1:
            base[inG] = 1.0
            return base, slope
        qS = np.ascontiguousarray(self.q[drafts], dtype=np.float64)
        if kappa * drafts.size > EXACT_KAPPA:
            return segment_rule_decimal(qS, inG, rest, kappa)
        self.k._segment_rule(qS, inG, rest, base, slope)
        if not (np.isfinite(base).all() and np.isfinite(slope).all()):
            base, slope = segment_rule_decimal(qS, inG, rest, kappa)  # masses near the float64 floor
        return base, slope

    def _kappa(self, a: int, b: int) -> float:
        """``Q(a) / (Q(b) - Q(a))``: the draft mass above the segment over the segment's."""
        A, _, _, _, (Qh, Ql), _ = self._block_arrays(self.block_of(a))
        return float(self.above[a]) / float(self.k._mass(Qh, Ql, a - A, b - A))

    @staticmethod
    def _checked(w: np.ndarray) -> np.ndarray:
        if w.min() < -1e-9:  # never seen; the rule's law would not be the flat one
            raise ArithmeticError(f"optimal-wor: the segment rule gave a negative probability {w.min():.3e}")
        return np.maximum(w, 0.0)

    def rule(self, drafts: np.ndarray, a: int, b: int) -> np.ndarray:
        """Choice probabilities over ``drafts`` (distinct tokens) in the segment ``[a, b)``."""
        drafts = np.asarray(drafts, dtype=np.int64)
        inG = (self.pos[drafts] >= a) & (self.pos[drafts] < b)
        kappa = self._kappa(a, b)
        base, slope = self._parts(drafts, inG, self._rest(drafts), kappa)
        return self._checked(base + kappa * slope)

    def choice(self, drafts: np.ndarray) -> np.ndarray:
        """``P(Z = x_i | X)`` for one tuple of distinct drafts: the segment rule on every level
        of the path, grouped into runs where the segment holds the same drafts (the rule is
        affine in ``kappa``, so a run needs one evaluation, checked at its two ends). A draft alone
        in the earliest block the drafts reach is chosen outright (no tree of splits)."""
        drafts = np.asarray(drafts, dtype=np.int64)
        j, i, alone = self._first_block(drafts)
        if alone >= 0:
            out = np.zeros(drafts.size)
            out[alone] = 1.0
            return out
        return self._path_choice(drafts, j, i)

    def _first_block(self, drafts: np.ndarray) -> tuple[int, int, int]:
        """``(j, i, alone)``: the drafts' first chain position, its block, and the index of the draft if it is
        the only one in that block (it then wins outright: an earlier block always wins), else -1."""
        j, i, alone = self.k._first_block(self.pos, self.cuts, np.asarray(drafts, dtype=np.int64))
        return int(j), int(i), int(alone)

    def _path_choice(self, drafts: np.ndarray, j: int, i: int) -> np.ndarray:
        """:meth:`choice` over the path of block ``i``'s tree of splits through position ``j`` (the drafts'
        first)."""
        tree, trusted = self._tree(i)  # first: its compiled call computes the block's sums too
        A, T, H, Q, (Qh, Ql), _ = self._block_arrays(i)
        if not trusted:  # the rule is the majorants': its path by bisection over the bridges
            cap = 2 * T.size + 1
            na, nb, nc, nl, nr = (np.full(cap, -1, np.int64) for _ in range(5))
            nrho = np.zeros(cap)
            count = self.k._bridge_path(T, H, Q, j - A, na, nb, nrho, nc, nl, nr)
            tree = (na[:count], nb[:count], nrho[:count], nc[:count], nl[:count], nr[:count])
        where = self.pos[drafts] - A
        n = drafts.size
        rest = self._rest(drafts)
        out = np.empty(n)
        if self.k._path_choice_row(*tree, Qh, Ql, float(self.above[A]), where, j - A,
                                   np.ascontiguousarray(self.q[drafts], dtype=np.float64), rest, EXACT_KAPPA, out):
            return out
        masks = np.zeros(n + 1, dtype=np.int64)
        weights, wkappa, klo, khi = (np.zeros(n + 1) for _ in range(4))
        runs = self.k._path_groups(*tree, Qh, Ql, float(self.above[A]), where, j - A, masks, weights, wkappa, klo,
                                   khi)
        out = np.zeros(n)
        bits = 1 << np.arange(n)
        for r in range(runs):
            inG = (int(masks[r]) & bits) > 0
            base, slope = self._parts(drafts, inG, rest, max(float(khi[r]), float(wkappa[r])))
            self._checked(base + klo[r] * slope)  # affine in kappa: both ends cover every level
            self._checked(base + khi[r] * slope)
            out += weights[r] * base + wkappa[r] * slope
        return np.maximum(out, 0.0)

    def pick(self, drafts: np.ndarray, u: float, v: float) -> int:
        """The chosen draft for one tuple of distinct increasing tokens, from two uniforms (the level and the
        draw in the segment). One compiled call (:func:`~._chord_kernels._chord_pick_row`: the first block, a lone
        draft, and on a block without its tree the bridge, the segment rule and the draw) unless the block's tree
        gives the segment or the rule needs decimal arithmetic."""
        drafts = np.asarray(drafts, dtype=np.int64)
        token, i, j, a, b = self.k._chord_pick_row(self.ts, self.qs, self.H, self.q, self.pos, self.above, self.cuts,
                                                   self._treed, self._steps, TREE_AFTER, drafts, u, v, self.total,
                                                   EXACT_KAPPA)
        if a == -2 or token >= 0:  # a draft alone in the earliest block, or the compiled pick
            return int(token)
        if a == -3:  # the block's tree (or, past TREE_AFTER steps, the one built now) gives the segment
            a, b = self.segment(int(j), u)
        w = self.rule(drafts, a, b)
        k = int(np.searchsorted(np.cumsum(w), v * w.sum(), side="right"))
        return int(drafts[min(k, drafts.size - 1)])


__all__ = ["MAX_CHORD_DRAFTS", "ChordPlan"]
