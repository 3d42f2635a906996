r"""Which draft to pick inside a priority block: a martingale coupling in closed form.

The optimal verifiers pick one draft ``Z`` with a prescribed law ``t`` and then
run single-draft speculative sampling on it. Inside one priority block of the
chain (drafts in earlier blocks always win, drafts in later blocks never do),
each draft instance with token ``y`` draws a random *mark* ``u`` from a law
``nu_y`` on the block's stretch of the "remaining draft mass" axis; the drafted
instance with the largest mark wins. For ``n`` iid drafts from ``q``, if the
marks of all the block's tokens add up to the uniform measure,

.. math:: \sum_y q_y \nu_y = \mathrm{Leb}\,[o,\, o + Q_B],

a mark ``u`` beats the other ``n - 1`` drafts with probability ``u^{n-1}`` (each
of them is either in a later block, mass ``o``, or in the block with a smaller
mark, mass ``u - o``), so the law of the winner is

.. math:: c_y = q_y \int n u^{n-1}\, d\nu_y(u).

Matching ``c = t`` is therefore a *martingale coupling*: token ``y`` (mass ``q_y``)
needs marks whose mean value under ``v(u) = n u^{n-1}`` is its target ratio
``rho_y = t_y / q_y``, and the marks of all tokens must tile the axis. Such a
coupling exists exactly when ``t`` lies in the block's base polytope (Strassen),
and the *left-curtain* coupling (Beiglböck & Juillet, 2016) builds one token at
a time: tokens in increasing ``rho``, each takes the contiguous run of the
still-free axis (contiguous in the free measure, so it may straddle runs taken
before) with mass ``q_y`` and mean value ``rho_y``. Free runs below the topmost
taken run are kept on a stack, so the whole construction is ``O(tokens)`` with
one monotone root per token.

Consecutive tokens are merged into *chunks*: a chunk takes one run as if it
were a single token (the left curtain of the coarser measure is still valid),
and splits it into a part ``A`` (one interval) and a part ``B`` (the rest);
token ``y`` of the chunk draws from ``A`` with probability
``lambda_y = (rho_y - m_B) / (m_A - m_B)`` and from ``B`` otherwise, which
gives mean value ``rho_y`` exactly whenever ``m_B <= rho_y <= m_A`` for every
token of the chunk. Chunks grow while that holds and shrink (down to single
tokens, which always hold) when it does not; on real pairs a block of 10^5
tokens needs a few dozen chunks. ``direction = -1`` runs the mirror image
(tokens in decreasing ``rho``, the right curtain), which needs fewer chunks
when a block's largest ratios are tied (the capped tokens of ``A*``).

Everything is exact up to floating-point rounding: the marks' law, hence
``P(Z = x_i | X)``, is piecewise uniform and its winner probabilities are
integrated exactly (:func:`~mdsd_cli.verifiers.optimal._curtain_kernels._one_choice`;
:meth:`Curtain.densities` gives a mark's pieces on the axis, as the tests' exact checks use them).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

#: Chunk sizes (in tokens): the first try, and the largest.
FIRST_CHUNK = 64
LARGEST_CHUNK = 1 << 16
#: Relative slack in the chunk test ``m_B <= rho <= m_A`` (rounding of the run's values).
SLACK = 1e-13


# --- the coupling ------------------------------------------------------------------------

class Curtain:
    """The left-curtain coupling of one priority block (iid drafts).

    Parameters
    ----------
    q, t : ndarray
        Draft mass and target candidate mass of the block's tokens, in chain order
        (non-increasing ``t / q``).
    o : float
        Draft mass of every later block (the bottom of the block's axis).
    n : int
        Number of drafts.
    direction : {1, -1}
        1: the left curtain (tokens from the end of the chain); -1: the mirror image.
    max_chunks : int, optional
        Give up (``self.chunks = -1``) once more chunks than this would be needed.
    """

    def __init__(self, q, t, o, n, *, direction=1, max_chunks=None):
        from ._curtain_kernels import _curtain

        q = np.asarray(q, dtype=np.float64)
        t = np.asarray(t, dtype=np.float64)
        m = q.size
        self.n, self.o, self.size = int(n), float(o), m
        self.mass = float(q.sum())
        self.direction = direction
        if direction > 0:  # increasing rho: the chain reversed
            qq, tt, oo = np.ascontiguousarray(q[::-1]), np.ascontiguousarray(t[::-1]), float(o)
        else:  # decreasing rho on the mirrored axis u' = -u
            qq, tt, oo = np.ascontiguousarray(q), -t, -float(o + q.sum())
        arrays = (np.empty(m, np.int64), np.empty(m), np.empty(m), np.empty(m), np.empty(m),
                  np.empty(m + 1, np.int64), np.empty(3 * m + 3), np.empty(3 * m + 3))
        budget = m + 1 if max_chunks is None else int(max_chunks)
        chunks, pieces = _curtain(qq, tt, oo, self.n, float(direction), FIRST_CHUNK, LARGEST_CHUNK, SLACK,
                                  budget, *arrays)
        self.chunks = int(chunks)
        if chunks < 0:
            return
        end, split, m_a, m_b, total, ptr, pc_start, pc_len = arrays
        self.split, self.total = split[:chunks], total[:chunks]
        # mean values in the real orientation (the mirror negates them)
        self.m_a, self.m_b = direction * m_a[:chunks], direction * m_b[:chunks]
        self.ptr, self.pc_start, self.pc_len = ptr[:chunks + 1], pc_start[:pieces], pc_len[:pieces]
        end = end[:chunks]
        starts = np.concatenate(([0], end[:-1]))
        # chain position (within the block) of each chunk's first token
        self.chunk_first = m - end if direction > 0 else starts
        self._by_chain = np.argsort(self.chunk_first, kind="stable")
        self._first_sorted = self.chunk_first[self._by_chain]

    def chunk_of(self, positions):
        """Chunk index of tokens at these chain positions within the block."""
        k = np.searchsorted(self._first_sorted, positions, side="right") - 1
        return self._by_chain[k]

    def part_a_probability(self, chunk, rho):
        """``lambda``: probability that a token of ratio ``rho`` in ``chunk`` marks in part A."""
        chunk = np.asarray(chunk)
        rho = np.asarray(rho, dtype=np.float64)
        m_a, m_b = self.m_a[chunk], self.m_b[chunk]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            lam = np.where(np.isnan(m_a), 1.0, (rho - m_b) / (m_a - m_b))
        return np.clip(lam, 0.0, 1.0)

    def sample_marks(self, chunk, lam, rng):
        """One mark per (chunk, lambda) pair, on the real axis up to a shift that is the
        same for the whole block (the largest mark wins)."""
        from ._curtain_kernels import _sample_marks

        chunk = np.ascontiguousarray(chunk, dtype=np.int64)
        marks = np.empty(chunk.shape)
        _sample_marks(chunk, np.ascontiguousarray(lam, dtype=np.float64), rng.random(chunk.shape),
                      rng.random(chunk.shape), self.split, self.total, self.ptr, self.pc_start, self.pc_len,
                      marks)
        return self.direction * marks

    def _parts(self, chunk):
        """Part A and part B of a chunk's run as lists of ``(lo, hi)`` on the real axis,
        relative to the block's bottom ``o`` (so within ``[0, Q_B]``: a block whose mass is
        below the ulp of ``o`` keeps its lengths exact)."""
        c = int(chunk)
        a_left = self.split[c]
        parts = ([], [])
        for k in range(self.ptr[c], self.ptr[c + 1]):
            s, L = self.pc_start[k], self.pc_len[k]
            top = s + L
            take = min(max(a_left, 0.0), L)  # pieces are used from their top down
            for (lo, hi), part in (((top - take, top), 0), ((s, top - take), 1)):
                if hi > lo:
                    parts[part].append((lo, hi) if self.direction > 0 else (self.mass - hi, self.mass - lo))
            a_left -= L
        return parts

    def densities(self, chunk, lam):
        """The piecewise-uniform law of one mark: ``[(start, end, probability), ...]`` with
        positions relative to ``o`` (probabilities, not densities: a piece may be too short
        for its density to be finite). The probabilities come from the pieces' rounded positions, so a
        piece shorter than the float spacing at its place is lost here: the tests' exact checks of the
        construction use this, the exact choice probabilities take a piece's length in mass instead."""
        c = int(chunk)
        a_mass, b_mass = self.split[c], self.total[c] - self.split[c]
        part_a, part_b = self._parts(c)
        out = []
        if a_mass > 0 and lam > 0:
            out += [(lo, hi, lam * ((hi - lo) / a_mass)) for lo, hi in part_a]
        if b_mass > 0 and lam < 1:
            out += [(lo, hi, (1.0 - lam) * ((hi - lo) / b_mass)) for lo, hi in part_b]
        return out


@lru_cache(maxsize=64)
def _gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (read-only; computed once per ``n``)."""
    xg, wg = np.polynomial.legendre.leggauss(n)
    xg.flags.writeable = wg.flags.writeable = False
    return xg, wg
