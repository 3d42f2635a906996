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
``optimal-wor`` ``wor`` the same for drafts without replacement; reaches α* (full
                       vocabulary for n <= 2, enumerable draft sets otherwise)
=========  ==========  ==============================================================

Adding a verifier: one module with a :class:`~.base.PreparedVerifier` subclass
and one entry in :data:`VERIFIERS`.
"""

from __future__ import annotations

import numpy as np

from ..distributions import check_pair
from ..errors import InputError
from .base import PreparedVerifier
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
from .nss import NSS
from .optimal import OptimalIID, OptimalWOR
from .otm import OTM
from .rrs import RRS, RRSW

#: Verifier classes by CLI name.
VERIFIERS: dict[str, type[PreparedVerifier]] = {
    cls.name: cls for cls in (NSS, RRS, RRSW, KSeq, HubVerifier, GreedyVerifier, OTM, OptimalIID, OptimalWOR)
}

__all__ = [
    "MAX_ENUMERATION", "VERIFIERS", "LosslessTest", "PreparedVerifier", "acceptance_rate", "can_be_exact",
    "enumerated_rate", "exact_rate", "get_verifier", "monte_carlo_rate", "output_distribution",
    "output_law", "prepare_verifier", "sampled_output_test", "verifier_names", "verify",
]


def verifier_names() -> list[str]:
    """Names of the registered verifiers."""
    return list(VERIFIERS)


def get_verifier(name: str) -> type[PreparedVerifier]:
    """The verifier class registered as ``name``; :class:`InputError` for unknown names."""
    try:
        return VERIFIERS[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown verifier {name!r}; choose one of: {', '.join(VERIFIERS)}") from None


def prepare_verifier(name: str, p, q, n: int, *, sampler: str | None = None,
                     renormalize: bool = False) -> PreparedVerifier:
    """Validate ``(p, q)`` (one pair, ``[V]``) and set verifier ``name`` up for ``n`` drafts.

    ``sampler`` overrides the verifier's draft law where it allows others
    (``nss`` and ``otm`` accept any).
    """
    cls = get_verifier(name)
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    if batched:
        raise InputError("a verifier works on one pair: give p and q of shape [V]")
    return cls(P[0], Q[0], n, sampler)


def _check_drafts(verifier: PreparedVerifier, drafts) -> np.ndarray:
    d = np.asarray(drafts)
    if d.ndim != 1 or not np.issubdtype(d.dtype, np.integer):
        raise InputError(f"drafts must be a 1-D array of token ids, got {d!r}")
    if d.size != verifier.num_drafts:
        raise InputError(f"{verifier.sampler} drafts here have {verifier.num_drafts} tokens, got {d.size}")
    if d.size and (d.min() < 0 or d.max() >= verifier.V):
        raise InputError(f"draft token ids must lie in 0..{verifier.V - 1}")
    if (verifier.q[d] <= 0).any():
        raise InputError(f"draft token {int(d[verifier.q[d] <= 0][0])} has draft probability 0; "
                         "it cannot have been drafted")
    return d.astype(np.int64)


def output_law(name: str, p, q, drafts, *, n: int | None = None, sampler: str | None = None) -> np.ndarray:
    """Exact conditional law ``P(Y = . | X = drafts)`` of verifier ``name``."""
    drafts = np.asarray(drafts)
    v = prepare_verifier(name, p, q, n if n is not None else int(drafts.size), sampler=sampler)
    return v.output_law(_check_drafts(v, drafts))


def verify(name: str, p, q, drafts, *, rng=None, n: int | None = None, sampler: str | None = None) -> int:
    """One output token of verifier ``name`` for the draft tuple ``drafts``.

    Parameters
    ----------
    name : str
        A verifier (see :func:`verifier_names`).
    p, q : array_like ``[V]``
        Target and draft distributions.
    drafts : array_like of int
        The draft tuple, in drawing order.
    rng : numpy.random.Generator, int or None
    n : int, optional
        Number of drafts the sampler was asked for (default ``len(drafts)``;
        differs when ``q`` has fewer tokens than ``n``).
    sampler : str, optional
        Draft law, for verifiers that accept several.
    """
    drafts = np.asarray(drafts)
    v = prepare_verifier(name, p, q, n if n is not None else int(drafts.size), sampler=sampler)
    d = _check_drafts(v, drafts)
    return int(v.sample(d[None, :], np.random.default_rng(rng))[0])


def acceptance_rate(name: str, p, q, n: int, *, method: str = "exact", samples: int = 100_000, rng=None,
                    sampler: str | None = None, max_tuples: int = MAX_ENUMERATION):
    """Acceptance rate ``P(Y in X)`` of verifier ``name`` on its draft law.

    ``method="exact"`` returns a float: the closed form (``nss``, ``rrs``,
    ``kseq``, ``greedy``, ``hub``, ``otm``) or exact enumeration over draft tuples
    (any verifier, small V). ``method="monte-carlo"`` returns ``(mean, stderr)``
    over ``samples`` sampled draft tuples, averaging the exact conditional
    acceptance. ``method="auto"``: exact when possible, else Monte Carlo.

    ``[N, V]`` inputs give an ``[N]`` array (exact) or a pair of ``[N]`` arrays
    (Monte Carlo; row ``i`` uses the ``i``-th stream spawned from ``rng``).
    """
    if method not in ("exact", "monte-carlo", "auto"):
        raise InputError(f"unknown method {method!r}; choose exact, monte-carlo or auto")
    cls = get_verifier(name)
    P, Q, batched = check_pair(p, q)
    streams = np.random.default_rng(rng).spawn(P.shape[0]) if batched else [np.random.default_rng(rng)]
    results = []
    for i in range(P.shape[0]):
        v = cls(P[i], Q[i], n, sampler)
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
