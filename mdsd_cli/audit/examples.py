"""Verifiers written as a third party writes them, to try ``mdsd audit`` on: one right, two wrong.

=========================  ======================================================================
``rrs``                    recursive rejection sampling (SpecInfer) for iid drafts, in plain numpy:
                           lossless
``rrs_skipping_repeats``   the same, but a draft equal to an earlier one is skipped without updating
                           the residual: lossy where iid drafts repeat
``accept_confident_top``   the same, but a draft with target probability above 0.999 is accepted
                           outright: lossy on peaked targets, by at most 0.001
=========================  ======================================================================

Each has the audited signature ``verify(p, q, drafts, rng) -> token``::

    mdsd audit mdsd_cli.audit.examples:rrs_skipping_repeats -n 3
"""

from __future__ import annotations

import numpy as np


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    """One token from non-negative ``weights`` (any positive total), by inverse CDF."""
    cdf = np.cumsum(weights)
    token = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(token, int(np.flatnonzero(weights > 0)[-1]))


def rrs(p, q, drafts, rng):
    """Recursive rejection sampling: accept draft ``x`` with ``min(1, target(x) / q(x))``; after a
    rejection the target becomes ``norm((target - q)_+)``; if every draft is rejected, sample the target."""
    target = p
    for x in drafts:
        if rng.random() * q[x] < target[x]:
            return int(x)
        residual = np.maximum(target - q, 0.0)
        target = residual / residual.sum()
    return _draw(target, rng)


def rrs_skipping_repeats(p, q, drafts, rng):
    """:func:`rrs`, except that a repeated draft is skipped, so the residual is not updated for it (wrong)."""
    target = p
    seen = set()
    for x in drafts:
        if int(x) in seen:
            continue
        seen.add(int(x))
        if rng.random() * q[x] < target[x]:
            return int(x)
        residual = np.maximum(target - q, 0.0)
        target = residual / residual.sum()
    return _draw(target, rng)


def accept_confident_top(p, q, drafts, rng):
    """:func:`rrs`, except that a draft the target gives more than 0.999 is accepted outright (wrong)."""
    for x in drafts:
        if p[x] > 0.999:
            return int(x)
    return rrs(p, q, drafts, rng)
