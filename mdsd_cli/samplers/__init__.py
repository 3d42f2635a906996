"""Draft samplers: how the n drafts of one step are drawn from the draft distribution q.

:mod:`.laws` holds the plain samplers (``iid``, ``wor``, ``greedy``, ``hub``) and
their exact laws; :mod:`.parametric` the draft-law transforms (temperature,
top-k, top-p) and the greedy/random hybrids; this module the registry, the
spec parser entry point :func:`get_sampler` and the public functions.
"""

from __future__ import annotations

import functools

import numpy as np

from ..distributions import _check_rows, _to_numpy, as_array, as_rng
from ..errors import InputError, check_integer, unknown_choice
from .laws import (
    DISTINCT_KINDS,
    MAX_TUPLES,
    TINY_MASS,
    DraftSampler,
    DraftSetLaw,
    GreedySampler,
    HubSampler,
    IIDSampler,
    TopKSampler,
    WORSampler,
    _cdf_draw,
    last_positive,
    packed_ratio_order,
    ratio_order,
    set_law_from_tuples,
    top_tokens,
)
from .parametric import (
    HybridSampler,
    TransformedSampler,
    parse_sampler_spec,
    truncate_top_k,
    truncate_top_p,
)

__all__ = [
    "DISTINCT_KINDS", "MAX_TUPLES", "SAMPLERS", "TINY_MASS", "DraftSampler", "DraftSetLaw", "GreedySampler", "HubSampler",
    "HybridSampler", "IIDSampler", "TopKSampler", "TransformedSampler", "WORSampler", "draft_set_law", "draft_tuple_law",
    "get_sampler", "hit_probability", "hit_probability_chain", "last_positive", "packed_ratio_order",
    "ratio_order", "sample_drafts", "sampler_names", "set_law_from_tuples", "top_tokens", "truncate_top_k",
    "truncate_top_p", "_cdf_draw",
]

#: Draft samplers by CLI name.
SAMPLERS: dict[str, DraftSampler] = {
    s.name: s for s in (IIDSampler(), WORSampler(), GreedySampler(), HubSampler(), TopKSampler())
}


def sampler_names() -> list[str]:
    """Names of the registered draft samplers."""
    return list(SAMPLERS)


@functools.lru_cache(maxsize=1024)
def _parsed(spec: str) -> DraftSampler:
    return parse_sampler_spec(spec, SAMPLERS)


def get_sampler(spec) -> DraftSampler:
    """The sampler written ``spec``: a registered name or ``base:key=value,...``.

    ``iid``, ``wor``, ``greedy``, ``hub`` are the plain samplers; any of them takes
    ``temperature=τ``, ``top_k=k``, ``top_p=π`` (drafts from the transformed q), and
    ``hybrid:m=k`` drafts the top ``k`` tokens plus ``n - k`` without replacement
    (see :mod:`mdsd_cli.samplers.parametric`). A :class:`DraftSampler` is returned as is.
    Raises :class:`InputError` naming the valid keys and ranges.

    >>> get_sampler("wor:temperature=0.8").name, get_sampler("wor:temperature=1").name
    ('wor:temperature=0.8', 'wor')
    """
    if isinstance(spec, DraftSampler):
        return spec
    if isinstance(spec, str) and spec in SAMPLERS:
        return SAMPLERS[spec]
    if not isinstance(spec, str):
        raise unknown_choice("draft sampler", spec, [*SAMPLERS, "hybrid"])
    return _parsed(spec)


def _one_distribution(q, name="draft", renormalize: bool = False) -> np.ndarray:
    converted = _to_numpy(q)
    if converted[0].ndim != 1:
        raise InputError(f"{name} must be one distribution of shape [V], got shape {tuple(converted[0].shape)}")
    return _check_rows(*converted, name=name, renormalize=renormalize, atol=None)[0]


def sample_drafts(q, n: int, *, sampler: str = "iid", rng=None, size: int | None = None,
                  renormalize: bool = False) -> np.ndarray:
    """Sample draft tuples from ``q``.

    Parameters
    ----------
    q : array_like ``[V]``
        Draft distribution: a list, numpy array or torch tensor of any float dtype
        and device (copied to the CPU as float64).
    n : int
        Number of drafts.
    sampler : {"iid", "wor", "greedy", "hub"}
    rng : numpy.random.Generator, int, torch.Generator or None
        Random source (an int is used as a seed).
    size : int, optional
        Number of tuples; ``None`` returns one tuple.
    renormalize : bool
        Rescale a ``q`` that does not sum to 1 within rounding instead of refusing it.

    Returns
    -------
    ndarray of int64, shape ``[k]`` or ``[size, k]``
        Token ids; ``k = n`` except for ``wor``/``greedy``/``hub`` when q has fewer
        than n tokens of positive mass (then the whole support).
    """
    s = get_sampler(sampler)
    n = s.check_n(n)
    qv = _one_distribution(q, renormalize=renormalize)
    rng = as_rng(rng)
    if size is None:
        return s.sample(qv, n, rng, 1)[0]
    return s.sample(qv, n, rng, check_integer(size, "size", 0))


def hit_probability_chain(q, n: int, order, *, sampler: str = "iid", renormalize: bool = False) -> np.ndarray:
    """``P(X hits A_k)`` for every prefix ``A_k = {order[0..k-1]}``, ``k = 0..V``.

    For ``iid``: ``1 - (1 - q(A))^n``; ``greedy``/``hub`` with top set ``T``: 1 if
    ``A`` meets ``T``, else ``q(A) / (1 - q(T))``; ``wor``: the exponential-clock
    integral of :mod:`mdsd_cli._wor_kernel`, exact to about 1e-12.
    """
    s = get_sampler(sampler)
    n = s.check_n(n)
    qv = _one_distribution(q, renormalize=renormalize)
    order = as_array(order)
    if order.shape != qv.shape or not np.array_equal(np.sort(order), np.arange(qv.size)):
        raise InputError("order must be a permutation of the token ids 0..V-1")
    return s.hit_probability_chain(qv, n, order.astype(np.int64))


def hit_probability(q, n: int, tokens, *, sampler: str = "iid", renormalize: bool = False) -> float:
    """``P(X hits A)``: the chance that some draft lies in the token set ``A``.

    ``tokens`` is a collection of token ids (list, set, integer array) or a
    boolean mask of length V.
    """
    qv = _one_distribution(q, renormalize=renormalize)
    if isinstance(tokens, (set, frozenset)):
        tokens = sorted(tokens)
    arr = as_array(tokens)
    if arr.dtype == bool:
        if arr.shape != qv.shape:
            raise InputError(f"a boolean token mask needs length V={qv.size}, got shape {arr.shape}")
        arr = np.flatnonzero(arr)
    elif arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"tokens must be integer token ids or a boolean mask, got dtype {arr.dtype}")
    tokens = np.unique(arr.astype(np.int64).ravel())
    if tokens.size and (tokens.min() < 0 or tokens.max() >= qv.size):
        raise InputError(f"token ids must lie in 0..{qv.size - 1}")
    rest = np.setdiff1d(np.arange(qv.size), tokens)
    return float(hit_probability_chain(qv, n, np.concatenate((tokens, rest)), sampler=sampler)[tokens.size])


def draft_tuple_law(q, n: int, *, sampler: str = "iid", max_tuples: int = MAX_TUPLES, renormalize: bool = False):
    """Exact law of the draft tuple by enumeration: ``(tuples [M, k], prob [M])``."""
    s = get_sampler(sampler)
    n = s.check_n(n)
    return s.tuple_law(_one_distribution(q, renormalize=renormalize), n, max_tuples=max_tuples)


def draft_set_law(q, n: int, *, sampler: str = "iid", max_tuples: int = MAX_TUPLES,
                  renormalize: bool = False) -> DraftSetLaw:
    """Exact law of the set of distinct drafts (see :class:`DraftSetLaw`)."""
    s = get_sampler(sampler)
    n = s.check_n(n)
    return s.set_law(_one_distribution(q, renormalize=renormalize), n, max_tuples=max_tuples)
