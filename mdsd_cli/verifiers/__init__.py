"""Lossless multi-draft verifiers, each built around its exact conditional output law.

=========  ==========  ==============================================================
name       draft law   rule
=========  ==========  ==============================================================
``nss``    any         ``Y ~ p``, ignoring the drafts
``rrs``    ``iid``     recursive rejection sampling (SpecInfer)
``rrsw``   ``wor``     recursive rejection sampling without replacement
``kseq``   ``iid``     SpecTr K-SEQ
``hub``    ``hub``     SpecHub (n = 2)
``greedy`` ``greedy``  speculative sampling on the random draft; reaches α*_greedy
``otm``    any         optimal transport plan (LP, small V); reaches α*
``optimal-iid`` ``iid`` Luce choice in priority blocks + speculative sampling; reaches α*
                       at full vocabulary
``optimal-wor`` ``wor`` the same for drafts without replacement (nested chords,
                       2 <= n <= 16); reaches α* at full vocabulary
=========  ==========  ==============================================================

Adding a verifier: one module with a :class:`~.base.PreparedVerifier` subclass
and one entry in :data:`VERIFIERS`.
"""

from __future__ import annotations

import numpy as np

from ..distributions import as_array, as_rng, check_pair
from ..errors import InputError, check_integer, unknown_choice
from .base import BatchVerification, PreparedVerifier, Verification, accepted_index
from .estimation import (
    MAX_ENUMERATION,
    LosslessTest,
    can_be_exact,
    enumerated_rate,
    exact_rate,
    monte_carlo_rate,
    output_distribution,
    sampled_output_test,
)
from .greedy import GreedyVerifier, HubVerifier
from .kseq import KSeq
from .nss import NSS, TopK
from .optimal import OptimalIID, OptimalWOR
from .otm import OTM
from .rrs import RRS, RRSW

#: Verifier classes by CLI name.
VERIFIERS: dict[str, type[PreparedVerifier]] = {
    cls.name: cls for cls in (NSS, RRS, RRSW, KSeq, HubVerifier, GreedyVerifier, OTM, OptimalIID, OptimalWOR, TopK)
}

__all__ = [
    "MAX_ENUMERATION", "VERIFIERS", "BatchVerification", "LosslessTest", "PreparedVerifier", "Verification",
    "acceptance_rate", "accepted_index", "can_be_exact", "enumerated_rate", "exact_rate", "get_verifier",
    "monte_carlo_rate", "output_distribution", "output_law", "prepare_verifier", "sampled_output_test",
    "verifier_names", "verify", "verify_batch",
]


def verifier_names() -> list[str]:
    """Names of the registered verifiers."""
    return list(VERIFIERS)


def get_verifier(name: str) -> type[PreparedVerifier]:
    """The verifier class registered as ``name``; :class:`InputError` for unknown names."""
    try:
        return VERIFIERS[name]
    except (KeyError, TypeError):
        raise unknown_choice("verifier", name, VERIFIERS) from None


def prepare_verifier(name: str, p, q, n: int, *, sampler: str | None = None,
                     renormalize: bool = False) -> PreparedVerifier:
    """Validate ``(p, q)`` (one pair, ``[V]``) and set verifier ``name`` up for ``n`` drafts.

    The set-up (sorting, closed forms, the optimal verifiers' weights) is done once;
    the returned object then verifies any number of draft tuples of this pair with
    :meth:`~PreparedVerifier.verify` (one tuple: token and accepted index) or
    :meth:`~PreparedVerifier.verify_batch`. This is the way to use a verifier in a
    decoding loop that verifies several tuples, or a tree, per step.

    ``p`` and ``q`` may be lists, numpy arrays or torch tensors of any float dtype
    and device (copied to the CPU and computed in float64). ``sampler`` overrides the
    verifier's draft law where it allows others (``nss`` and ``otm`` accept any).
    """
    cls = get_verifier(name)
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    if batched:
        raise InputError("a verifier works on one pair: give p and q of shape [V] (verify_batch takes [N, V])")
    return cls.unchecked(P[0], Q[0], n, sampler)


def _num_drafts(drafts: np.ndarray, n: int | None) -> int:
    if drafts.ndim == 0:
        raise InputError(f"drafts must be a 1-D array of integer token ids, got the scalar {drafts.item()!r}")
    return n if n is not None else int(drafts.shape[-1])


def output_law(name: str, p, q, drafts, *, n: int | None = None, sampler: str | None = None,
               renormalize: bool = False) -> np.ndarray:
    """Exact conditional law ``P(Y = . | X = drafts)`` of verifier ``name``."""
    drafts = as_array(drafts)
    v = prepare_verifier(name, p, q, _num_drafts(drafts, n), sampler=sampler, renormalize=renormalize)
    return v.output_law(v.check_drafts(drafts))


def verify(name: str, p, q, drafts, *, rng=None, n: int | None = None, sampler: str | None = None,
           renormalize: bool = False, return_index: bool = False):
    """One output token of verifier ``name`` for the draft tuple ``drafts``.

    Parameters
    ----------
    name : str
        A verifier (see :func:`verifier_names`).
    p, q : array_like ``[V]``
        Target and draft distributions: lists, numpy arrays or torch tensors of any
        float dtype and device (copied to the CPU and computed in float64).
    drafts : array_like of int
        The draft tuple, in drawing order.
    rng : numpy.random.Generator, int, torch.Generator or None
    n : int, optional
        Number of drafts the sampler was asked for (default ``len(drafts)``;
        differs when ``q`` has fewer tokens than ``n``).
    sampler : str, optional
        Draft law, for verifiers that accept several.
    renormalize : bool
        Rescale rows that do not sum to 1 within rounding instead of refusing them.
    return_index : bool
        Return a :class:`Verification` (``token`` and the accepted draft's ``index``,
        None when no draft was accepted) instead of the token alone.

    Returns
    -------
    int, or Verification with ``return_index=True``

    Each call sets the verifier up for ``(p, q)``; to verify several tuples of
    one pair, use :func:`prepare_verifier` once and its ``verify`` method.
    """
    drafts = as_array(drafts)
    v = prepare_verifier(name, p, q, _num_drafts(drafts, n), sampler=sampler, renormalize=renormalize)
    result = v.verify(drafts, rng)
    return result if return_index else result.token


def verify_batch(name: str, p, q, drafts, *, rng=None, n: int | None = None, sampler: str | None = None,
                 renormalize: bool = False) -> BatchVerification:
    """Verify one draft tuple per pair: ``p, q [N, V]`` and ``drafts [N, k]`` give ``N`` tokens and indices.

    Every row is its own pair (one verifier set-up per row), as in a decoding loop
    over a batch of sequences. A row whose draft law gives fewer than ``k`` drafts
    (``wor``, ``greedy`` or ``hub`` on a ``q`` with fewer than ``n`` tokens of positive
    mass) is padded on the right with -1. Rows draw from ``rng`` in order.

    Returns
    -------
    BatchVerification
        ``tokens [N]`` and ``indices [N]`` (-1 where no draft was accepted).
    """
    cls = get_verifier(name)
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    d = as_array(drafts)
    if d.ndim != 2 or d.shape[0] != P.shape[0]:
        raise InputError(f"drafts must be [N, k] with one row per pair (N = {P.shape[0]}), got shape {d.shape}")
    if not np.issubdtype(d.dtype, np.integer):
        raise InputError(f"drafts must be integer token ids, got dtype {d.dtype}")
    rng = as_rng(rng)
    tokens = np.empty(P.shape[0], dtype=np.int64)
    indices = np.empty(P.shape[0], dtype=np.int64)
    for i in range(P.shape[0]):
        width = int(np.count_nonzero(d[i] >= 0))
        if (d[i, width:] >= 0).any() or (d[i, :width] < 0).any():
            raise InputError(f"drafts row {i} has -1 padding before a token id; pad on the right only")
        v = cls.unchecked(P[i], Q[i], _num_drafts(d, n), sampler)
        result = v.verify(d[i, :width], rng)
        tokens[i] = result.token
        indices[i] = -1 if result.index is None else result.index
    return BatchVerification(tokens, indices)


def acceptance_rate(name: str, p, q, n: int, *, method: str = "exact", samples: int = 100_000, rng=None,
                    sampler: str | None = None, max_tuples: int = MAX_ENUMERATION, renormalize: bool = False):
    """Acceptance rate ``P(Y in X)`` of verifier ``name`` on its draft law.

    ``method="exact"`` returns a float: the closed form (``nss``, ``rrs``,
    ``kseq``, ``greedy``, ``hub``, ``otm``) or exact enumeration over draft tuples
    (any verifier, small V). ``method="monte-carlo"`` returns ``(mean, stderr)``
    over ``samples`` sampled draft tuples, averaging the exact conditional
    acceptance. ``method="auto"``: exact when possible, else Monte Carlo.

    ``[N, V]`` inputs give an ``[N]`` array (exact) or a pair of ``[N]`` arrays
    (Monte Carlo; row ``i`` uses the ``i``-th stream spawned from ``rng``).
    ``renormalize=True`` rescales rows that do not sum to 1 within rounding.
    """
    if method not in ("exact", "monte-carlo", "auto"):
        raise unknown_choice("method", method, ("exact", "monte-carlo", "auto"))
    samples, max_tuples = check_integer(samples, "samples", 2), check_integer(max_tuples, "max_tuples", 1)
    cls = get_verifier(name)
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    streams = as_rng(rng).spawn(P.shape[0]) if batched else [as_rng(rng)]
    results = []
    for i in range(P.shape[0]):
        v = cls.unchecked(P[i], Q[i], n, sampler)
        if method == "exact" or (method == "auto" and can_be_exact(v, max_tuples=max_tuples)):
            results.append(exact_rate(v, max_tuples=max_tuples))
        else:
            results.append(monte_carlo_rate(v, samples, streams[i]))
    if not batched:
        return results[0]
    if all(isinstance(r, float) for r in results):
        return np.array(results)
    if any(isinstance(r, float) for r in results):  # auto mixed exact and estimated rows
        results = [(r, 0.0) if isinstance(r, float) else r for r in results]
    means, errors = zip(*results)
    return np.array(means), np.array(errors)
