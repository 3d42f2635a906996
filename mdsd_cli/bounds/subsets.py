"""α* by brute force over all 2^V token sets (V <= 20).

For every set ``B`` the chance that all drafts avoid its complement,
``g(B) = P(every draft lies in B)``, is computed for all ``2^V`` sets at once,
independently of the chain machinery:

* ``iid``: ``g(B) = q(B)^n`` (n independent draws);
* ``wor``: a dynamic programme over subsets gives the law of the drawn set,
  ``P(S) = sum_{x in S} P(S - x) q(x) / q(complement of S - x)``, then a
  subset-sum (zeta) transform gives ``g``;
* ``greedy``/``hub``/``hybrid``: the enumerated set law, then the zeta transform.

A transformed draft law (``wor:temperature=0.8``) is its base sampler on the
transformed ``q'``.

Then ``alpha* = min_A 1 - p(A) + 1 - g(complement of A)``.
"""

from __future__ import annotations

import numpy as np

from ..errors import USE_CHAIN, SizeLimitError
from ..samplers import DraftSampler
from .result import OptimalAcceptance

#: Largest vocabulary the brute force accepts (2^20 sets).
MAX_SUBSET_VOCAB = 20


def _subset_sums(x: np.ndarray, V: int) -> np.ndarray:
    """``out[mask] = sum_i x[i] [bit i of mask]`` for every mask."""
    out = np.zeros(1 << V)
    for i in range(V):
        out.reshape(-1, 2, 1 << i)[:, 1, :] += x[i]
    return out


def _zeta(f: np.ndarray, V: int) -> np.ndarray:
    """Subset-sum transform: ``g[B] = sum_{S subset of B} f[S]``."""
    g = f.copy()
    for i in range(V):
        view = g.reshape(-1, 2, 1 << i)
        view[:, 1, :] += view[:, 0, :]
    return g


def _wor_set_law(q: np.ndarray, n: int, V: int) -> np.ndarray:
    full = (1 << V) - 1
    masks = np.arange(1 << V)
    q_in = _subset_sums(q, V)
    q_out = q_in[full ^ masks]  # mass of the complement, summed directly (no 1 - x cancellation)
    popcount = np.zeros(1 << V, dtype=np.int64)
    for i in range(V):
        popcount.reshape(-1, 2, 1 << i)[:, 1, :] += 1
    k = min(n, int(np.count_nonzero(q > 0)))
    law = np.zeros(1 << V)
    law[0] = 1.0
    for size in range(1, k + 1):
        layer = masks[popcount == size]
        for x in range(V):
            if q[x] <= 0:
                continue
            sub = layer[(layer >> x) & 1 == 1]
            prev = sub ^ (1 << x)
            ok = q_out[prev] > 0
            law[sub[ok]] += law[prev[ok]] * (q[x] / q_out[prev[ok]])  # ratio first: no denormal product
    law[popcount != k] = 0.0
    return law


def _law_masks(sampler: DraftSampler, q: np.ndarray, n: int, V: int) -> np.ndarray:
    law = sampler.set_law(q, n)
    bits = np.where(law.members >= 0, np.left_shift(1, np.maximum(law.members, 0)), 0)
    f = np.zeros(1 << V)
    np.add.at(f, bits.sum(axis=1), law.prob)
    return f


def subsets_solve(p: np.ndarray, q: np.ndarray, n: int, sampler: DraftSampler) -> OptimalAcceptance:
    """α* by brute force over every token set; returns the value and a minimising set."""
    V = p.size
    if V > MAX_SUBSET_VOCAB:
        raise SizeLimitError(
            f"subsets enumerates 2^V sets and accepts V <= {MAX_SUBSET_VOCAB}, got V={V}; "
            f"use {USE_CHAIN} (exact, O(V log V))"
        )
    law = sampler.base  # a transformed draft law is the base sampler on q'
    q = sampler.draft_distribution(q)
    if law.kind == "iid":
        all_in = _subset_sums(q, V) ** n
    elif law.kind == "wor":
        all_in = _zeta(_wor_set_law(q, n, V), V)
    else:
        all_in = _zeta(_law_masks(law, q, n, V), V)
    full = (1 << V) - 1
    p_in = _subset_sums(p, V)
    objective = 1.0 - p_in + 1.0 - all_in[full ^ np.arange(1 << V)]
    lowest = float(objective.min())
    # among (numerically) tied minimisers report the smallest set
    tied = np.flatnonzero(objective <= lowest + 1e-13)
    sizes = np.zeros(tied.size, dtype=np.int64)
    for i in range(V):
        sizes += (tied >> i) & 1
    best = int(tied[np.argmin(sizes)])
    token_set = np.flatnonzero([(best >> i) & 1 for i in range(V)]).astype(np.int64)
    return OptimalAcceptance(
        value=min(max(lowest, 0.0), 1.0), token_set=token_set,
        sampler=sampler.name, solver="subsets", n=n,
    )
