r"""``optimal-wor``: reaches α*_wor at full vocabulary, not just computes it.

It follows :mod:`~mdsd_cli.verifiers.optimal.candidate`: one draft ``Z`` is chosen with
the candidate law ``t`` (``min(p, lambda q)`` on the minimising set ``A*``,
``max(p, kappa q)`` off it), then single-draft speculative sampling against
``p`` gives output law ``p`` and acceptance ``sum min(p, t) = α*``. Drafts in an
earlier priority block of the chain always win; the rule inside a block depends on n.

In every block, at any n >= 2, the nested chords of
:mod:`~mdsd_cli.verifiers.optimal.chords` (one uniform picks a segment of a random nested
partition of the block, and the segment rule a draft in it with the flat law). With
:data:`PAIR_CHORDS` off, pairs (n = 2) use the boundary-mark rule of
:mod:`~mdsd_cli.verifiers.optimal.boundary` in every block whose check passes (the ordered
pair's first draft draws a mark from a martingale coupling, the second sits at its chain
position); in the blocks whose check fails, a Luce choice (exponential keys) whose weights are
solved so that the chosen draft has law ``t`` (:mod:`~mdsd_cli.verifiers.optimal.luce`): by
enumeration of the draft sets (small V) or through the closed form of a pair's Luce law by
quadrature. With :data:`CHORDS` off, Luce weights on the enumerated draft sets (small V only).
"""

from __future__ import annotations

import math

import numpy as np

from ..._jit import numba_enabled
from ...samplers.laws import WORSampler
from .candidate import TIGHT, block_index, chain_targets, priority_blocks, wor_grid
from .chords import MAX_CHORD_DRAFTS, TRUSTED, ChordPlan, _kernels
from .luce import (
    LuceVerifier,
    _PairBlock,
    _rest_mass,
    _solve_blocks,
    _solve_pair_block,
    solve_enumerated,
    wor_pair_plan,
)

#: Largest number of draft sets the exact (enumerated) optimal-wor plan handles.
MAX_WOR_SETS = 20_000
#: Pairs (n = 2) use the boundary-mark rule where its check passes (False: Luce weights only).
FAST_PAIRS = True
#: n >= 3 uses nested chords (False: Luce weights on enumerated draft sets, small V only).
CHORDS = True
#: Pairs (n = 2) use the nested chords too (False: the boundary-mark rule, with its fallbacks).
PAIR_CHORDS = True
#: The chords' set-up in one compiled call (:meth:`OptimalWOR._fused_chord_plan`; False: step by step).
FUSED = True


def _distinct(drafts) -> tuple[np.ndarray, list[int]]:
    """``numpy.unique(drafts, return_index=True)`` for one short tuple of token ids (in Python: a tuple's few
    ids cost numpy's sorts more than they save)."""
    first: dict[int, int] = {}
    for i, x in enumerate(np.asarray(drafts).tolist()):
        first.setdefault(x, i)
    tokens = sorted(first)
    return np.array(tokens, dtype=np.int64), [first[x] for x in tokens]


class OptimalWOR(LuceVerifier):
    """Reaches α*_wor: block priority + Luce choice of a candidate, then speculative sampling.

    Full vocabulary for every n <= 16: nested chords in each priority block
    (:mod:`~mdsd_cli.verifiers.optimal.chords`); at n = 2 also the boundary-mark rule
    (:mod:`~mdsd_cli.verifiers.optimal.boundary`, with :data:`PAIR_CHORDS` off).
    """

    name = "optimal-wor"
    description = ("optimal verifier for wor drafts (nested chords in priority blocks + speculative sampling); "
                   "reaches α*")
    default_sampler = "wor"
    samplers = ("wor",)

    @classmethod
    def check_size(cls, q, n, sampler):
        if n <= MAX_CHORD_DRAFTS:  # every set-up asks: the common answer first
            return
        from ...errors import SizeLimitError

        for row in np.atleast_2d(np.asarray(q)):
            if min(n, int(np.count_nonzero(row > 0))) > MAX_CHORD_DRAFTS:
                raise SizeLimitError(
                    f"optimal-wor takes at most {MAX_CHORD_DRAFTS} drafts (its choice works over the 2^n subsets "
                    f"of the drafts); got n = {n}. Use rrsw for more drafts"
                )

    def plan(self):
        p, q, n, V = self.p, self.q, self.n, self.V
        k = self.num_drafts
        # the plain wor sampler's distinct drafts (_wor_draws) are num_drafts: not counted again
        if FUSED and (k >= 3 or (k == 2 and PAIR_CHORDS)) and CHORDS and V > 1 and numba_enabled() \
                and type(self.draft_sampler).hit_probability_chain is WORSampler.hit_probability_chain:
            self.check_size(q, n, self.draft_sampler)
            plan = self._fused_chord_plan(k)
            if plan is not None:
                return plan
        order, K, t, cuts, H = chain_targets(p, q, n, self.draft_sampler, hits=True)
        if k <= 1:  # one draft (or a one-token support): speculative sampling on it
            c = q.copy()
            blocks = [order[q[order] > 0]]
            return blocks, np.ones(V), c, t, {"K": K, "blocks": 1, "iterations": 0, "residual": 0.0,
                                             "first_tail_block": None, "method": "single draft"}
        sets = math.comb(int(np.count_nonzero(q > 0)), k)
        if k == 2 and CHORDS and PAIR_CHORDS:
            return self._chord_plan(order, K, t, cuts, H)
        if k == 2 and FAST_PAIRS:
            return self._boundary_plan(order, K, t, cuts, sets <= MAX_WOR_SETS)
        if k >= 3 and CHORDS:
            self.check_size(q, n, self.draft_sampler)
            return self._chord_plan(order, K, t, cuts, H)
        if sets <= MAX_WOR_SETS:
            return self._enumerated(order, K, t, cuts, q, n)
        if k == 2:
            return wor_pair_plan(p, q, order, K, t, cuts)
        from ...errors import SizeLimitError

        raise SizeLimitError(
            f"optimal-wor at n = {n} needs the {sets:,} draft sets enumerated at V={V} (limit {MAX_WOR_SETS:,}) "
            "with the nested chords switched off"
        )

    def _chord_plan(self, order, K, t, cuts, H):
        """Any n >= 2: nested chords in every priority block (:mod:`~mdsd_cli.verifiers.optimal.chords`);
        the rule's law is the candidate law ``t`` itself (``H``: the hit probabilities along the chain)."""
        block, count, first_tail = block_index(order, K, cuts, self.q)
        self._chords = ChordPlan(self.q, order, t, cuts, H)
        return self._chords_result(block, count, first_tail, K, t)

    def _chords_result(self, block, count, first_tail, K, t):
        """What :meth:`plan` returns for the nested chords (``self._chords`` built): the rule's law is ``t``, or
        a block's majorant law where that misses ``t`` by more than 1e-9."""
        c = self._chords.law  # t itself (the same floats) unless a block was steered
        residual = float(np.abs(c - t).sum()) if self._chords.steered else 0.0
        info = {"K": int(K), "blocks": int(count), "iterations": 0, "residual": residual,
                "first_tail_block": first_tail, "method": "nested chords", "steered_blocks": self._chords.steered}
        return block, None, c, t, info  # no Luce weights (built as ones if asked for)

    def _fused_chord_plan(self, k):
        """:meth:`_chord_plan` after :func:`~.candidate.chain_targets` for two or more drafts without
        replacement, in one compiled call (:func:`~._chord_kernels._wor_chord_setup`: the chain, hit chain,
        candidate law, block index and the chords' arrays; the same floats). None where a pair's closed form
        declines (the quadrature then, on the general path)."""
        p, q = np.ascontiguousarray(self.p, dtype=np.float64), np.ascontiguousarray(self.q, dtype=np.float64)
        K, order, t, cuts, H, block, count, first_tail, pos, qs, above, ts, law, steered = \
            _kernels()._wor_chord_setup(p, q, k, *wor_grid(max(k, 3)), TIGHT, TRUSTED)
        if K < 0:  # a pair whose closed form declines (a dominant token's 1 - q below 1e-100): the quadrature
            return None
        self._chords = ChordPlan.from_arrays(self.q, order, t, cuts, H, pos, qs, above, ts, law, steered)
        return self._chords_result(block, count, int(first_tail) if first_tail >= 0 else None, K, t)

    def _boundary_plan(self, order, K, t, cuts, enumerable):
        """Pairs (n = 2): the boundary-mark rule on every block whose check passes
        (:mod:`~mdsd_cli.verifiers.optimal.boundary`), Luce weights on the others (by enumeration
        when the pairs can be listed, else by quadrature)."""
        from .boundary import build_block

        q, V = self.q, self.V
        rest = _rest_mass(q)
        r = np.where(rest > 0.0, q / np.maximum(rest, 1e-300), 0.0)
        Lq = np.concatenate((np.cumsum(q[order][::-1])[::-1], [0.0]))  # mass from chain position k on
        Lr = np.concatenate((np.cumsum(r[order][::-1])[::-1], [0.0]))
        blocks, first_tail = priority_blocks(order, K, cuts, q)
        weights, c = np.zeros(V), np.zeros(V)
        self._rule = [None] * len(blocks)
        self._local = np.zeros(V, dtype=np.int64)
        fallback, block_of, law = [], None, None
        for i, (tokens, end) in enumerate(blocks):
            rule = build_block(tokens, r, q, t, Lq[end], Lr[end])
            if rule is not None:
                self._rule[i] = rule
                c[rule.tokens] = rule.implied
                self._local[rule.tokens] = np.arange(rule.tokens.size)
                weights[tokens] = 1.0
                continue
            fallback.append(i)
            if enumerable:
                if law is None:
                    law = self.draft_sampler.set_law(q, self.n)
                    block_of = np.full(V, np.iinfo(np.int64).max, dtype=np.int64)
                    for j, (tk, _) in enumerate(blocks):
                        block_of[tk] = j
                w, cb, _ = solve_enumerated(law.members, law.prob, block_of, tokens, t, V)
            else:
                w, cb, _ = _solve_pair_block(_PairBlock(tokens, q, t, Lq[end], Lr[end], rest))
            weights[tokens], c[tokens] = w, cb
        info = {"K": K, "blocks": len(blocks), "iterations": 0, "residual": 0.0, "first_tail_block": first_tail,
                "method": "boundary marks", "fast_blocks": len(blocks) - len(fallback),
                "fallback_blocks": len(fallback)}
        return [tokens for tokens, _ in blocks], weights, c, t, info

    def choice(self, drafts):
        if getattr(self, "_chords", None) is not None:
            return self._chord_choice(drafts)
        if getattr(self, "_rule", None) is None:
            return super().choice(drafts)
        drafts = np.atleast_2d(drafts)
        out = super().choice(drafts)  # earlier block wins; Luce inside fallback blocks
        blk = self.block[drafts]
        same = np.flatnonzero(blk[:, 0] == blk[:, 1])
        for b in np.unique(blk[same, 0]):
            rule = self._rule[int(b)]
            if rule is None:
                continue
            rows = same[blk[same, 0] == b]
            first = rule.first_wins(self._local[drafts[rows, 0]], self._local[drafts[rows, 1]])
            out[rows, 0], out[rows, 1] = first, 1.0 - first
        return out

    def _chord_choice(self, drafts):
        drafts = np.atleast_2d(drafts)
        out = np.zeros(drafts.shape)
        for r in range(drafts.shape[0]):
            tokens, first = _distinct(drafts[r])
            out[r, first] = self._chords.choice(tokens)
        return out

    def pick(self, drafts, rng):
        """The chosen draft token of each row of ``drafts [M, n]``, drawn with law :meth:`choice` (the
        nested chords: a segment from one uniform, the segment rule from another; no tree of splits is
        built for it before a block has seen :data:`~.chords.TREE_AFTER` steps)."""
        drafts = np.atleast_2d(drafts)
        M = drafts.shape[0]
        if getattr(self, "_chords", None) is not None:
            u = rng.random((M, 2))
            return np.array([self._chords.pick(np.unique(row), a, b) for row, (a, b) in zip(drafts, u)],
                            dtype=np.int64)
        law = np.cumsum(self.choice(drafts), axis=1)
        k = (law < rng.random((M, 1)) * law[:, -1:]).sum(axis=1)
        return drafts[np.arange(M), np.minimum(k, drafts.shape[1] - 1)]

    def pick_one(self, drafts, rng) -> int:
        """:meth:`pick` for one tuple ``drafts [n]`` (the same uniforms, the same token), without the batch's
        arrays: a tree verifier draws one pick a node."""
        if getattr(self, "_chords", None) is None:
            return int(self.pick(np.asarray(drafts)[None, :], rng)[0])
        a, b = rng.random(2)
        return self._chords.pick(_distinct(drafts)[0], a, b)

    def sample(self, drafts, rng):
        if getattr(self, "_chords", None) is not None:
            drafts = np.atleast_2d(drafts)
            M = drafts.shape[0]
            z = self.pick(drafts, rng)
        elif getattr(self, "_rule", None) is None:
            return super().sample(drafts, rng)
        else:
            drafts = np.atleast_2d(drafts)
            M = drafts.shape[0]
            first = self.choice(drafts)[:, 0]
            z = np.where(rng.random(M) < first, drafts[:, 0], drafts[:, 1])
        cdf = self.residual_cdf
        out = np.minimum(np.searchsorted(cdf, rng.random(M) * cdf[-1], side="right"), self.V - 1)
        keep = rng.random(M) < self.accept[z]
        out[keep] = z[keep]
        return out

    def _enumerated(self, order, K, t, cuts, q, n):
        law = self.draft_sampler.set_law(q, n)
        blocks, first_tail = priority_blocks(order, K, cuts, q)
        block_of = np.full(self.V, np.iinfo(np.int64).max, dtype=np.int64)
        for i, (tokens, _) in enumerate(blocks):
            block_of[tokens] = i
        return _solve_blocks(blocks, first_tail, self.V, K, t, "enumerated",
                             lambda tokens, end: solve_enumerated(law.members, law.prob, block_of, tokens, t, self.V))
