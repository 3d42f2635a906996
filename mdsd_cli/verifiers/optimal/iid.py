r"""``optimal-iid``: reaches α*_iid at full vocabulary, not just computes it.

It follows :mod:`~mdsd_cli.verifiers.optimal.candidate`: one draft ``Z`` is chosen with
the candidate law ``t`` (``min(p, lambda q)`` on the minimising set ``A*``,
``max(p, kappa q)`` off it), then single-draft speculative sampling against
``p`` gives output law ``p`` and acceptance ``sum min(p, t) = α*``. Drafts in an
earlier priority block of the chain always win.

Inside a block (:class:`OptimalIID`), each drafted instance draws a mark from a
per-token law and the largest mark wins; the laws are the left-curtain
martingale coupling of :mod:`~mdsd_cli.verifiers.optimal.curtain`, built in closed form
(one monotone root per chunk of tokens). Set-up costs one argsort of the
vocabulary plus a few passes over it; the coupling of a block is built the
first time a step's drafts reach that block. Per step: ``n`` marks, one coin,
at most one draw from the residual.
"""

from __future__ import annotations

import time

import numpy as np

from ..._jit import numba_enabled
from .candidate import CandidateVerifier, iid_chain
from .curtain import FIRST_CHUNK, LARGEST_CHUNK, SLACK, Curtain, _gauss_legendre

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

    @property
    def candidate(self) -> np.ndarray:
        """The candidate law ``t`` as a ``[V]`` vector: the chain's ``ts`` put back in token order (one scatter)."""
        if self.single:
            return self.q.copy()
        t = np.empty(self.V)
        t[self.chain.order] = self.chain.ts
        return t

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
        # row by row, each in one call of the row kernel (compiled when numba is on): a piece's weight from its
        # length in mass, not from its rounded positions, and a piece too short for its positions kept as an atom
        from ._curtain_kernels import _one_choice

        ch = self.chain
        xg, wg = _gauss_legendre(self.n // 2 + 2)  # exact for the product of the n - 1 others' CDFs
        rows = np.ascontiguousarray(drafts, dtype=np.int64)
        for r in range(rows.shape[0]):
            _one_choice(self.p, self.q, ch.qs, ch.ts, ch.rs, ch.order, ch.cuts, ch.suffix, ch.first_tail, self.n,
                        rows[r], xg, wg, FIRST_CHUNK, LARGEST_CHUNK, SLACK, CHUNK_BUDGET, out[r])
        return out

    def sample(self, drafts, rng):
        drafts = np.atleast_2d(np.asarray(drafts))
        if drafts.shape[0] != 1 or self.single or drafts.shape[1] == 1 or not numba_enabled():
            return super().sample(drafts, rng)
        # one step, as in decoding: everything in one compiled call (the coupling of the block
        # the drafts reach is built there and not kept)
        from ._curtain_kernels import _one_step

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
        if M == 1 and numba_enabled():  # one row, as a tree walk asks: the marks in one compiled call
            from ._curtain_kernels import _one_pick

            ch = self.chain
            row = np.ascontiguousarray(drafts[0], dtype=np.int64)
            i = _one_pick(self.p, self.q, ch.qs, ch.ts, ch.rs, ch.order, ch.cuts, ch.suffix, ch.first_tail, self.n,
                          row, rng.random(2 * k), FIRST_CHUNK, LARGEST_CHUNK, SLACK, CHUNK_BUDGET)
            return drafts[:, i].copy()
        pos, blk, first = self._first_block(drafts)
        marks = np.full(drafts.shape, -np.inf)
        for b in np.unique(first):
            rows = np.flatnonzero(first == b)
            sub = blk[rows] == b
            r_idx, c_idx = np.nonzero(sub)
            cur, chunk, lam = self._marks_setup(int(b), pos[rows[r_idx], c_idx])
            marks[rows[r_idx], c_idx] = cur.sample_marks(chunk, lam, rng)
        return drafts[np.arange(M), np.argmax(marks, axis=1)]
