"""Verifiers written as a third party writes them, to try ``mdsd audit`` on: two right, five wrong.

=========================  ======================================================================
``rrs``                    recursive rejection sampling (SpecInfer) for iid drafts, in plain numpy:
                           lossless
``rrsw``                   RRS for drafts without replacement (``--sampler wor``): draft k is
                           compared with ``q_k``, q renormalised without the earlier drafts: lossless
``rrs_skipping_repeats``   :func:`rrs`, but a draft equal to an earlier one is skipped without updating
                           the residual: lossy where iid drafts repeat
``accept_confident_top``   :func:`rrs`, but a draft with target probability above 0.999 is accepted
                           outright: lossy on peaked targets, by at most 0.001
``kseq_plain_residual``    K-SEQ's acceptance ``min(1, p / (rho q))`` followed by the single-draft
                           residual ``(p - q)_+`` instead of K-SEQ's
``independent_tests``      n single-draft tests against ``p``, then the residual ``(p - q)_+``
                           (SpecTr's counterexample)
``rrsw_against_q``         RRS on drafts without replacement that compares every draft with ``q``
                           instead of the renormalised ``q_k``
=========================  ======================================================================

Each has the audited signature ``verify(p, q, drafts, rng) -> token``::

    mdsd audit mdsd_cli.audit.examples:rrs_skipping_repeats -n 3
    mdsd audit mdsd_cli.audit.examples:rrsw_against_q --sampler wor -n 3
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


def rrsw(p, q, drafts, rng):
    """RRS without replacement: draft ``k`` is accepted with ``min(1, target(x) / q_k(x))``, ``q_k`` the draft
    law without the earlier drafts, renormalised; after a rejection the target becomes ``norm((target - q_k)_+)``."""
    target, rest = p, np.array(q, dtype=np.float64)
    for x in drafts:
        qk = rest / rest.sum()
        if rng.random() * qk[x] < target[x]:
            return int(x)
        residual = np.maximum(target - qk, 0.0)
        target = residual / residual.sum()
        rest[x] = 0.0
    return _draw(target, rng)


def rrsw_against_q(p, q, drafts, rng):
    """:func:`rrsw` comparing every draft with ``q`` itself, not the renormalised ``q_k`` (wrong): the same as
    :func:`rrs`, used on drafts drawn without replacement."""
    return rrs(p, q, drafts, rng)


class _KSeqPlainResidual:
    """K-SEQ's acceptance with the single-draft residual (wrong); ``rho`` is mdsd's K-SEQ's, per (p, q)."""

    __name__ = "kseq_plain_residual"

    def __init__(self):
        self._key, self._rho = None, None

    def __call__(self, p, q, drafts, rng):
        if self._key is None or self._key[0] is not p or self._key[1] is not q or self._key[2] != len(drafts):
            from ..verifiers import prepare_verifier

            self._key = (p, q, len(drafts))
            self._rho = prepare_verifier("kseq", p, q, len(drafts)).rho
        for x in drafts:
            if rng.random() * self._rho * q[x] < p[x]:
                return int(x)
        return _draw(np.maximum(p - q, 0.0), rng)


#: K-SEQ's acceptance ``min(1, p / (rho q))`` with the residual ``(p - q)_+`` of a single draft (wrong).
kseq_plain_residual = _KSeqPlainResidual()


def independent_tests(p, q, drafts, rng):
    """Each draft tested alone against ``p`` (accept with ``min(1, p / q)``), then a token from ``(p - q)_+``
    if every draft is rejected (wrong: SpecTr's counterexample to the naive extension)."""
    for x in drafts:
        if rng.random() * q[x] < p[x]:
            return int(x)
    return _draw(np.maximum(p - q, 0.0), rng)
