r"""Optimal verifiers: reach α* at full vocabulary, not just compute it.

Both follow :mod:`~mdsd_cli.verifiers.candidate`: one draft ``Z`` is chosen with
the candidate law ``t`` (``min(p, lambda q)`` on the minimising set ``A*``,
``max(p, kappa q)`` off it), then single-draft speculative sampling against
``p`` gives output law ``p`` and acceptance ``sum min(p, t) = α*``. Drafts in an
earlier priority block of the chain always win; they differ in how ``Z`` is
chosen inside a block.

``optimal-iid`` (:class:`OptimalIID`): each drafted instance draws a mark from a
per-token law and the largest mark wins; the laws are the left-curtain
martingale coupling of :mod:`~mdsd_cli.verifiers.curtain`, built in closed form
(one monotone root per chunk of tokens). Set-up costs one argsort of the
vocabulary plus a few passes over it; the coupling of a block is built the
first time a step's drafts reach that block. Per step: ``n`` marks, one coin,
at most one draw from the residual.

``optimal-wor`` (:class:`OptimalWOR`): at n = 2, the boundary-mark rule of
:mod:`~mdsd_cli.verifiers.boundary` in every block whose check passes (the
ordered pair's first draft draws a mark from a martingale coupling, the second
sits at its chain position); elsewhere, and for n >= 3, a Luce choice
(exponential keys) whose weights are solved so that the chosen draft has law
``t`` (:mod:`~mdsd_cli.verifiers.luce`): by enumeration of the draft sets (small
V) or, for pairs, through the closed form of a pair's Luce law by quadrature.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._jit import numba_enabled
from .candidate import CandidateVerifier, chain_targets, iid_chain, priority_blocks
from .chords import MAX_CHORD_DRAFTS, ChordPlan
from .curtain import FIRST_CHUNK, LARGEST_CHUNK, SLACK, Curtain, win_probabilities
from .luce import (
    LuceVerifier,
    _PairBlock,
    _rest_mass,
    _solve_blocks,
    _solve_pair_block,
    solve_enumerated,
    wor_pair_plan,
)

#: First budget of chunks for a block's coupling (see :meth:`OptimalIID.curtain`).
CHUNK_BUDGET = 64


class OptimalIID(CandidateVerifier):
    """Reaches α*_iid: block priority, a left-curtain choice of one draft, speculative sampling."""

    name = "optimal-iid"
    description = ("optimal verifier for iid drafts (left-curtain choice in priority blocks + speculative "
                   "sampling); reaches α*")
    default_sampler = "iid"
    samplers = ("iid",)

    def setup(self):
        t0 = time.perf_counter()
        self.single = self.n == 1
        self._curtains: dict[int, Curtain] = {}
        self._residual_cdf = None
        if self.single:  # one draft: it is the candidate, with law q
            self.chain = None
            self.info = {"method": "single draft", "blocks": 1}
        else:
            self.chain = iid_chain(self.p, self.q, self.n)
            self.info = {"method": "left curtain", "K": self.chain.K, "blocks": len(self.chain.cuts) - 1,
                         "first_tail_block": self.chain.first_tail}
        self.setup_seconds = time.perf_counter() - t0

    # --- the candidate law -----------------------------------------------------------------
    def candidate_mass(self, tokens):
        tokens = np.asarray(tokens)
        if self.single:
            return self.q[tokens]
        return self.chain.ts[self.chain.positions(tokens)]

    def accept_probability(self, tokens):
        tokens = np.asarray(tokens)
        if self.single:
            return super().accept_probability(tokens)
        pos = self.chain.positions(tokens)
        ps, ts = self.chain.ps[pos], self.chain.ts[pos]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(ts > 0, np.minimum(1.0, ps / np.where(ts > 0, ts, 1.0)), 0.0)

    def _residual_weights(self):
        """``(p - t)_+`` along the chain: nonzero only on the capped tokens of ``A*``."""
        if self.single:
            return np.maximum(self.p - self.q, 0.0), None
        K = self.chain.K
        return np.maximum(self.chain.ps[:K] - self.chain.ts[:K], 0.0), self.chain.order[:K]

    def residual(self):
        w, tokens = self._residual_weights()
        law = np.zeros(self.V)
        if tokens is None:
            law = w
        else:
            law[tokens] = w
        total = law.sum()
        return law / total if total > 0 else self.p.copy()

    def draw_residual(self, size, rng):
        if self._residual_cdf is None:
            w, tokens = self._residual_weights()
            if w.sum() <= 0:  # the candidate is always accepted: any draw of p is never used
                w, tokens = self.p, None
            self._residual_cdf = (np.cumsum(w), tokens)
        cdf, tokens = self._residual_cdf
        k = np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), cdf.size - 1)
        return k if tokens is None else tokens[k]

    def exact_rate(self):
        if self.single:
            return float(np.minimum(self.p, self.q).sum())
        return self.chain.alpha

    def closed_moves(self, split):
        """``min(p, t)``: the accepted candidate (the residual never lands on a draft). No closed position
        or count split: which of several drafts holding y comes first is not in t."""
        if split != "token":
            return None
        return np.minimum(self.p, self.candidate)[None, :]

    # --- the choice inside a block ---------------------------------------------------------
    def curtain(self, block: int) -> Curtain:
        """The coupling of one priority block (built on first use).

        Both directions of the curtain are exact; they differ in how many chunks they
        need. The likelier one (the mirror on ``A*``, whose top ratios are tied) is
        tried first within a budget of chunks, then the other, with the budget
        growing eightfold each round: the work stays within a constant of the cheaper.
        """
        cur = self._curtains.get(block)
        if cur is None:
            ch = self.chain
            a, e = int(ch.cuts[block]), int(ch.cuts[block + 1])
            qs, ts, o = ch.qs[a:e], ch.ts[a:e], ch.later_mass(block)
            first = -1 if block < ch.first_tail else 1
            budget = CHUNK_BUDGET
            while True:
                cur = Curtain(qs, ts, o, self.n, direction=first, max_chunks=budget)
                if cur.chunks >= 0:
                    break
                cur = Curtain(qs, ts, o, self.n, direction=-first, max_chunks=budget)
                if cur.chunks >= 0:
                    break
                budget *= 8
            self._curtains[block] = cur
        return cur

    def _first_block(self, drafts):
        pos = self.chain.positions(drafts)
        blk = self.chain.block_of(pos)
        return pos, blk, blk.min(axis=1)

    def _marks_setup(self, block, pos):
        """Chunk and part-A probability of the drafts at chain positions ``pos`` in ``block``."""
        cur = self.curtain(block)
        local = pos - self.chain.cuts[block]
        rho = self.chain.ts[pos] / self.chain.qs[pos]
        chunk = cur.chunk_of(local)
        return cur, chunk, cur.part_a_probability(chunk, rho)

    def choice(self, drafts):
        drafts = np.atleast_2d(np.asarray(drafts))
        out = np.zeros(drafts.shape)
        if self.single or drafts.shape[1] == 1:
            out[:, 0] = 1.0
            return out
        pos, blk, first = self._first_block(drafts)
        for r in range(drafts.shape[0]):
            inb = np.flatnonzero(blk[r] == first[r])
            if inb.size == 1:
                out[r, inb[0]] = 1.0
                continue
            cur, chunk, lam = self._marks_setup(int(first[r]), pos[r, inb])
            laws = [cur.densities(c, lm) for c, lm in zip(chunk, lam)]
            out[r, inb] = win_probabilities(laws, (inb.size + 1) // 2 + 1)
        return out

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(np.asarray(drafts))
        if drafts.shape[0] != 1 or self.single or drafts.shape[1] == 1 or not numba_enabled():
            return super().sample(drafts, rng)
        # one step, as in decoding: everything in one compiled call (the coupling of the block
        # the drafts reach is built there and not kept)
        from ._optimal_kernels import _one_step

        ch = self.chain
        row = np.ascontiguousarray(drafts[0], dtype=np.int64)
        u = rng.random(2 * row.size + 2)
        token = _one_step(self.p, self.q, ch.qs, ch.ps, ch.ts, ch.rs, ch.order, ch.cuts, ch.suffix, ch.K,
                          ch.first_tail, self.n, row, u, FIRST_CHUNK, LARGEST_CHUNK, SLACK, CHUNK_BUDGET)
        return np.array([token], dtype=np.int64)

    def pick(self, drafts, rng):
        drafts = np.atleast_2d(np.asarray(drafts))
        M, k = drafts.shape
        if self.single or k == 1:
            return drafts[:, 0].copy()
        pos, blk, first = self._first_block(drafts)
        marks = np.full(drafts.shape, -np.inf)
        for b in np.unique(first):
            rows = np.flatnonzero(first == b)
            sub = blk[rows] == b
            r_idx, c_idx = np.nonzero(sub)
            cur, chunk, lam = self._marks_setup(int(b), pos[rows[r_idx], c_idx])
            marks[rows[r_idx], c_idx] = cur.sample_marks(chunk, lam, rng)
        return drafts[np.arange(M), np.argmax(marks, axis=1)]


#: Largest number of draft sets the exact (enumerated) optimal-wor plan handles.
MAX_WOR_SETS = 20_000
#: Pairs (n = 2) use the boundary-mark rule where its check passes (False: Luce weights only).
FAST_PAIRS = True
#: n >= 3 uses nested chords (False: Luce weights on enumerated draft sets, small V only).
CHORDS = True


class OptimalWOR(LuceVerifier):
    """Reaches α*_wor: block priority + Luce choice of a candidate, then speculative sampling.

    Full vocabulary for every n <= 16: boundary marks in each priority block at n = 2
    (:mod:`~mdsd_cli.verifiers.boundary`, Luce weights where its check fails), nested chords
    at n >= 3 (:mod:`~mdsd_cli.verifiers.chords`).
    """

    name = "optimal-wor"
    description = ("optimal verifier for wor drafts (boundary marks at n = 2, nested chords at n >= 3, in priority "
                   "blocks + speculative sampling); reaches α*")
    default_sampler = "wor"
    samplers = ("wor",)

    @classmethod
    def check_size(cls, q, n, sampler):
        from ..errors import SizeLimitError

        for row in np.atleast_2d(np.asarray(q)):
            if min(n, int(np.count_nonzero(row > 0))) > MAX_CHORD_DRAFTS:
                raise SizeLimitError(
                    f"optimal-wor takes at most {MAX_CHORD_DRAFTS} drafts (its choice works over the 2^n subsets "
                    f"of the drafts); got n = {n}. Use rrsw for more drafts"
                )

    def plan(self):
        from ..errors import SizeLimitError

        p, q, n, V = self.p, self.q, self.n, self.V
        k = self.num_drafts
        order, K, t, cuts, H = chain_targets(p, q, n, self.draft_sampler, hits=True)
        if k <= 1:  # one draft (or a one-token support): speculative sampling on it
            c = q.copy()
            blocks = [order[q[order] > 0]]
            return blocks, np.ones(V), c, t, {"K": K, "blocks": 1, "iterations": 0, "residual": 0.0,
                                             "first_tail_block": None, "method": "single draft"}
        sets = math.comb(int(np.count_nonzero(q > 0)), k)
        if k == 2 and FAST_PAIRS:
            return self._boundary_plan(order, K, t, cuts, sets <= MAX_WOR_SETS)
        if k >= 3 and CHORDS:
            self.check_size(q, n, self.draft_sampler)
            return self._chord_plan(order, K, t, cuts, H)
        if sets <= MAX_WOR_SETS:
            return self._enumerated(order, K, t, cuts, q, n)
        if k == 2:
            return wor_pair_plan(p, q, order, K, t, cuts)
        raise SizeLimitError(
            f"optimal-wor at n = {n} needs the {sets:,} draft sets enumerated at V={V} (limit {MAX_WOR_SETS:,}) "
            "with the nested chords switched off"
        )

    def _chord_plan(self, order, K, t, cuts, H):
        """Any n >= 3: nested chords in every priority block (:mod:`~mdsd_cli.verifiers.chords`);
        the rule's law is the candidate law ``t`` itself (``H``: the hit probabilities along the chain)."""
        blocks, first_tail = priority_blocks(order, K, cuts, self.q)
        self._chords = ChordPlan(self.q, order, t, cuts, H)
        c = self._chords.law  # t, up to rounding where the hit curve's noise steered a split (then a bit less)
        info = {"K": K, "blocks": len(blocks), "iterations": 0, "residual": float(np.abs(c - t).sum()),
                "first_tail_block": first_tail, "method": "nested chords", "steered_blocks": self._chords.steered}
        return [tokens for tokens, _ in blocks], np.ones(self.V), c, t, info

    def _boundary_plan(self, order, K, t, cuts, enumerable):
        """Pairs (n = 2): the boundary-mark rule on every block whose check passes
        (:mod:`~mdsd_cli.verifiers.boundary`), Luce weights on the others (by enumeration
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
            tokens, first = np.unique(drafts[r], return_index=True)
            out[r, first] = self._chords.choice(tokens)
        return out

    def sample(self, drafts, rng):
        if getattr(self, "_chords", None) is not None:
            drafts = np.atleast_2d(drafts)
            M = drafts.shape[0]
            u = rng.random((M, 2))
            z = np.array([self._chords.pick(np.unique(row), a, b) for row, (a, b) in zip(drafts, u)],
                         dtype=np.int64)
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
