"""The one-parameter residual family ``(p - C q)_+ / G(C)`` of recursive rejection sampling.

Every residual of RRS, with or without replacement, has this form: if the
current target is ``p_k = (p - C_k q)_+ / G(C_k)`` and draft ``x_k`` (law
``q_k = q`` restricted to the ``s_k`` mass of not-yet-drafted tokens) is
rejected, then ``norm((p_k - q_k)_+) = (p - C_{k+1} q)_+ / G(C_{k+1})`` with

.. math:: C_{k+1} = C_k + G(C_k) / s_k, \\qquad G(C) = \\sum_i (p_i - C q_i)_+,

because nested positive parts of ``p - c q`` along the same direction collapse
and rejected tokens already have ``p_i < C q_i``. ``G`` is evaluated in
``O(log V)`` from prefix sums along the tokens sorted by ``p/q``.
"""

from __future__ import annotations

import numpy as np

from ..samplers.laws import _cdf_draw, ratio_order

#: Draws of one batch with more distinct ``C`` than this go along the ratio order (:meth:`ResidualFamily.sample`).
BY_ID_MAX = 16


class ResidualFamily:
    """``G(C)`` and the residual laws ``(p - C q)_+ / G(C)`` for one pair."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        self.p, self.q = p, q
        self.dtype = np.result_type(p.dtype, q.dtype, np.float64)  # float64, or longdouble for rrsw
        # Tokens by increasing q/p (= decreasing p/q): p_i > C q_i exactly for the
        # tokens with key q_i/p_i < 1/C. q = 0 < p gives key 0, p = 0 gives inf or
        # NaN (sorted last, never above any C). Ties go to the lower token index:
        # :meth:`sample` draws along this order, so an order that depended on the
        # sort's implementation (numpy's argsort differs between AVX2 and AVX-512
        # processors) would send one uniform to different tokens on different machines.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            key = np.abs(q / p)  # abs: a -0.0 entry must not turn into -inf
        if self.dtype == np.float64:
            self.order = ratio_order(p, q)
        else:  # longdouble (rrsw near the float64 floor): a stable sort, also the same on every machine
            self.order = np.argsort(key, kind="stable")
        self.sorted_key = key[self.order]
        self.p_in = np.concatenate(([0.0], np.cumsum(p[self.order])))
        self.q_in = np.concatenate(([0.0], np.cumsum(q[self.order])))

    def above(self, C) -> np.ndarray:
        """Number of tokens with ``p_i > C q_i``."""
        C = np.asarray(C, dtype=self.dtype)
        with np.errstate(divide="ignore"):
            limit = 1.0 / C
        return np.searchsorted(self.sorted_key, limit, side="left")

    def G(self, C):
        """``sum_i (p_i - C q_i)_+`` (vectorised over ``C``)."""
        C = np.asarray(C, dtype=self.dtype)
        k = self.above(C)
        return np.maximum(self.p_in[k] - C * self.q_in[k], 0.0)

    def law(self, C: float) -> np.ndarray:
        """The residual law ``(p - C q)_+ / G(C)`` (``p`` itself if ``G(C) = 0``)."""
        r = np.maximum(self.p - C * self.q, 0.0)
        s = r.sum()
        return r / s if s > 0 else self.p.copy()

    def sample(self, C: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw from ``(p - C_m q)_+`` normalised, for every entry ``C_m`` of ``C``.

        Inverse CDF along the token ids (``O(V)`` per distinct ``C``), not along the
        ratio order: tokens whose ratios ``p/q`` are equal in exact arithmetic come out
        an ulp apart in either direction depending on the processor's ``exp``/``log``
        (AVX-512 or not), and an order built from them would send one uniform to
        different tokens on different machines. Along the ids a token moves only if
        the uniform falls within rounding of a boundary. A decoding step has one ``C``;
        a batch with more than :data:`BY_ID_MAX` distinct values (a Monte Carlo check
        of ``rrsw``) is drawn along the ratio order instead, ``O(log V)`` per draw:
        as exact, and the same on every machine but for near-tied ratios.
        """
        C = np.asarray(C, dtype=self.dtype)
        u = rng.random(C.shape)
        values, inverse = np.unique(C.ravel(), return_inverse=True)
        if values.size > BY_ID_MAX:
            return self._along_ratio_order(C, u)
        flat_u = u.ravel()
        out = np.empty(flat_u.shape, dtype=np.int64)
        for w, c in enumerate(values):
            # in the family's precision (longdouble for rrsw: p - C q cancels), then drawn in float64
            r = np.maximum(self.p - c * self.q, 0.0).astype(np.float64, copy=False)
            if not (r > 0).any():  # no residual mass (G(C) = 0): the residual is p itself
                r = self.p.astype(np.float64)
            rows = np.flatnonzero(inverse == w)
            out[rows] = _cdf_draw(r, flat_u[rows])
        return out.reshape(C.shape)

    def _along_ratio_order(self, C: np.ndarray, u: np.ndarray) -> np.ndarray:
        """:meth:`sample` for many distinct ``C``: inverse CDF along the ratio order, where the cumulative
        residual ``p_in[j] - C q_in[j]`` is increasing up to ``above(C)``; a vectorised binary search."""
        hi = self.above(C)  # residual support is order[:hi]
        target = u * (self.p_in[hi] - C * self.q_in[hi])
        lo = np.zeros_like(hi)
        # smallest j in [1, hi] with cumulative(j) > target
        hi_search = hi.copy()
        while True:
            active = lo < hi_search
            if not active.any():
                break
            mid = (lo + hi_search) // 2
            cum = self.p_in[mid + 1] - C * self.q_in[mid + 1]
            go_right = active & (cum <= target)
            lo = np.where(go_right, mid + 1, lo)
            hi_search = np.where(active & ~go_right, mid, hi_search)
        lo = np.minimum(lo, np.maximum(hi - 1, 0))
        return self.order[lo]
