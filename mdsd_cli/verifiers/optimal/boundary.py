r"""Boundary marks: the fast choice rule of ``optimal-wor`` at n = 2, block by block.

An ordered pair without replacement (first ``y``, second ``z``) has probability
``r_y q_z``, ``r = q / (1 - q)``. Inside one priority block, index the tokens from the
bottom of the chain, ``j = 0 … m − 1``, and let ``v_j`` be the block's q-mass below
token ``j``. The *second* draft sits at its chain position; the *first* draft ``y``
draws a boundary ``i ∈ {0 … m}`` from a law ``π_y`` and wins iff ``i > j_z``. With
``b_j`` the r-mass of first-draft marks at boundaries ``≤ j`` and ``a_j = E_{π_j}[v]``,
token ``j`` is the candidate with probability

.. math:: c_j = r_j (L_q + a_j) + q_j (L_r + b_j) - r_j q_j,

``L_q``, ``L_r`` the later blocks' masses. So ``c = t`` asks for

* a nondecreasing ``b`` with ``a_j = (D'_j - q_j b_j) / r_j``,
  ``D'_j = t_j + r_j q_j - r_j L_q - q_j L_r``: chosen as the q-weighted L1 isotonic
  regression onto ``[lo_j, lo_j + r_j]``, ``lo_j = (D'_j - r_j v_{j+1}) / q_j`` (where it
  fits, ``a_j`` lies between ``v_j`` and ``v_{j+1}``), clipped to ``[0, R_B]``;
* a martingale coupling of the atoms ``(a_j, r_j)`` onto the point masses
  ``μ_i = b_i - b_{i-1}`` at ``v_i``: built as a left curtain on the axis of cumulative
  ``μ``-mass ``s ∈ [0, R_B]`` (value ``v(s) = v_i`` on ``[b_{i-1}, b_i)``), atoms in
  increasing ``a``, each taking a window contiguous in the free mass with mean value
  ``a_j`` (one stack of free pieces; ``O(m log^2 m)``).

Nothing here is proved to succeed. Each block is *checked*: the law the rule really
gives (``implied``: each window normalised to a probability, its mean value summed
segment by segment, the marks' r-mass below each ``b_j`` swept from the windows as
built) must meet ``t`` to ``TOLERANCE`` of the block's mass; a block that fails, or
whose curtain finds no window, goes back to the Luce weights of
:mod:`~mdsd_cli.verifiers.optimal.luce`. The verifier uses ``implied`` as the candidate law, so
losslessness never rests on ``b`` or on the curtain being right, only on ``implied``
being the rule's law (to rounding); the check guards optimality (``α*`` to ~1e-10).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A block is used when ``sum |implied - t|`` is at most ``TOLERANCE * t(B)`` plus ``FLOOR`` (as
#: close as the quadrature gets)
TOLERANCE = 1e-10
FLOOR = 1e-15
#: Rounding allowed in the curtain's root finding (times the block's total value integral),
#: tried in turn: too tight and a window is not found, too loose and the means drift.
SLACKS = (1e-17, 1e-14, 1e-12)


@dataclass
class BoundaryBlock:
    """The boundary-mark rule on one block (tokens bottom-first)."""

    tokens: np.ndarray  # bottom-first
    b: np.ndarray  # r-mass of first-draft marks at boundaries <= j
    ptr: np.ndarray  # windows of token j: pieces ptr[j]:ptr[j+1]
    lo: np.ndarray
    hi: np.ndarray
    implied: np.ndarray  # the candidate law the rule gives
    error: float  # sum |implied - t|
    bound: float  # Q_B * |R_B - covered|: how far the windows are from tiling [0, R_B]
    r: np.ndarray  # r and q of the tokens (bottom-first), the later blocks' masses
    q: np.ndarray
    later_q: float
    later_r: float

    def first_wins(self, y_local, z_local) -> np.ndarray:
        """``P(first draft beats second draft)`` for local indices (same block)."""
        from ._boundary_kernels import _first_wins

        return _first_wins(self.ptr, self.lo, self.hi, np.ascontiguousarray(y_local, dtype=np.int64),
                           np.ascontiguousarray(self.b[z_local], dtype=np.float64))


def build_block(tokens, r, q, t, Lq: float, Lr: float) -> BoundaryBlock | None:
    """The rule on the block ``tokens`` (chain order, top first); None if its check fails.

    ``r``, ``q``, ``t`` are indexed by token; ``Lq``, ``Lr`` the later blocks' masses.
    """
    from ._boundary_kernels import _block

    tok = np.ascontiguousarray(tokens[::-1])
    m = tok.size
    rb, qb, tb = r[tok], q[tok], t[tok]
    if m == 1:  # no choice inside the block: its law is fixed
        implied = rb * Lq + qb * Lr
        return BoundaryBlock(tok, np.zeros(1), np.array([0, 1]), np.zeros(1), np.array([rb[0]]), implied,
                             float(abs(implied[0] - tb[0])), 0.0, rb, qb, float(Lq), float(Lr))
    b, ptr = np.empty(m), np.empty(m + 1, dtype=np.int64)
    lo, hi, implied = np.empty(3 * m + 3), np.empty(3 * m + 3), np.empty(m)
    total = float(tb.sum())
    for slack in SLACKS:
        pieces, error, bound = _block(rb, qb, tb, float(Lq), float(Lr), b, ptr, lo, hi, implied, slack)
        if pieces >= 0:
            implied, error = _dominant_by_complement(rb, qb, implied, float(Lq), float(Lr), tb)
            if error <= TOLERANCE * total + FLOOR:
                return BoundaryBlock(tok, b, ptr, lo[:pieces].copy(), hi[:pieces].copy(), implied, error,
                                     float(bound), rb, qb, float(Lq), float(Lr))
    return None


def _dominant_by_complement(rb, qb, implied, Lq, Lr, tb):
    """The token with the largest r (q near 1 makes r huge) loses its law to cancellation in
    ``r (L_q + a - q)``; it is the block's total less the others instead. The total,
    P(the first draft in the block is in it), is ``sum_j r_j (L_q + Q_B - q_j) + q_j L_r``,
    with ``Q_B - q_j`` summed over the other tokens. Returns the law and ``sum |law - t|``."""
    d = int(np.argmax(rb))
    others = np.delete(np.arange(rb.size), d)
    q_others = float(qb[others].sum())
    block_total = float((rb[others] * (Lq + (q_others + qb[d]) - qb[others]) + qb[others] * Lr).sum()
                        + rb[d] * (Lq + q_others) + qb[d] * Lr)
    implied[d] = block_total - float(implied[others].sum())
    return implied, float(np.abs(implied - tb).sum())
