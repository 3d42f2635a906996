"""One node at a time on the CPU: ``rrs``, ``rrsw`` and ``kseq`` by sequential rejection, in torch.

:func:`~.device.verify_nodes` computes each row's whole output law and maps one uniform
through its inverse CDF: the right shape for a batch on a GPU, where every node of a tree
runs at once. The verification walk on the CPU visits one node at a time, and there
that costs a fixed ~60 small tensor operations per node (a torch launch each, 3-5 us on
the CPU): twice numpy's whole verification at V = 2,380. :func:`sample_visited` draws
the same law the way the algorithms are stated, and computes only what a draw reaches:

* ``rrs``/``rrsw``: draft ``j`` is accepted with its coin ``a_j`` (the same
  expression as :func:`~.device._recursive_rejection_law`, in float64 scalars); the
  first acceptance ends the node. Only after a rejection is the next ``G(C)`` (and,
  without replacement, the undrafted mass) summed over the vocabulary; only when every
  draft is rejected is the residual formed and drawn from.
* ``kseq``: independent coins ``min(1, p(x)/(rho* q(x)))`` in draft order, the
  residual only when all fail. ``rho*`` comes from numpy's own search
  (:class:`~.kseq.RhoSearch`, bisection), run only as far as the coins need: its
  bracket ``lo < rho* <= hi`` decides ``u < coin`` in a few steps unless ``u`` lies
  within the bracket's width of the coin. Those steps sum ``min(rho q, p)`` directly,
  without numpy's sort of ``q/p``; each ``f(mid)`` is then checked to be farther from
  0 than the two sums can differ by rounding, so the brackets are numpy's (else, and
  for the residual, which needs the search to its end, numpy's sorted search runs).

The law of the returned token is the output law of the batched path (and of the numpy
class) given those drafts: ``P(token = x_j first) = a_j prod_{i<j} (1 - a_i)`` and the
residual with the remaining mass. It uses ``k + 1`` uniforms of ``generator`` per node
(one per draft and one for the residual), drawn in one call; so the tokens are not
those of :func:`~.device.verify_nodes` for the same generator, only their law is.
"""

from __future__ import annotations

import numpy as np

#: The verifiers :func:`sample_visited` draws sequentially; the others go through the whole law.
SEQUENTIAL = ("rrs", "rrsw", "kseq")


def draw_inverse_cdf(torch, residual, fallback, u: float) -> int:
    """Inverse CDF of ``residual`` (``fallback`` where it has no mass) along the token ids, for uniform ``u``;
    a token of probability 0 is never returned (as :func:`~.device.sample_from_laws` on the CPU)."""
    cdf = torch.cumsum(residual, dim=0)
    total = float(cdf[-1])
    if not total > 0:
        residual, cdf = fallback, torch.cumsum(fallback, dim=0)
        total = float(cdf[-1])
    pick = int(torch.searchsorted(cdf, torch.tensor([u * total], dtype=cdf.dtype), right=True)[0])
    if pick >= cdf.shape[0] or not residual[min(pick, cdf.shape[0] - 1)] > 0:  # rounding past the end
        pick = int(torch.nonzero(residual > 0)[-1, 0])
    return pick


def _rejection(torch, p, q, drafts: list[int], u: list[float], without_replacement: bool) -> int:
    px = p.numpy()[drafts].tolist()  # views of the CPU tensors: scalar reads without a torch call each
    qx = q.numpy()[drafts].tolist()
    C, G = 0.0, float(p.sum())
    if without_replacement:
        rest = q.clone()
        s = float(rest.sum())
    else:
        s = 1.0
    k = len(drafts)
    for j, x in enumerate(drafts):
        alive = G > 0
        pk = max(px[j] - C * qx[j], 0.0) / (G if alive else 1.0)
        coin = min(pk * (s / qx[j]), 1.0) if pk > 0 else 0.0
        if u[j] < (coin if alive else 1.0):
            return x
        C = C + G / s
        if j + 1 < k:
            G = float((p - C * q).clamp_min(0.0).sum())
            if without_replacement:
                rest[x] = 0.0
                s = float(rest.sum())
    return draw_inverse_cdf(torch, (p - C * q).clamp_min(0.0), p, u[k])


class _TooClose(Exception):
    """A direct ``f(rho)`` within rounding of 0: its sign may differ from numpy's prefix-sum one."""


def _direct_search(pn, qn, n: int, tol: float):
    """K-SEQ's ``rho*`` search with ``S(rho) = sum_i min(rho q_i, p_i)`` summed directly (no sort): the same
    brackets as numpy's (:func:`~.kseq.kseq_search`) as long as every ``f(mid)`` is farther from 0 than the two
    sums can differ by rounding; :class:`_TooClose` is raised otherwise (the caller then sorts)."""
    from .kseq import RhoSearch

    margin = 8.0 * (n + 1) * pn.size * 2.3e-16  # |direct S - prefix S| <= V eps, times |df/dS| <= n + 1, with room

    def f(rho):
        s = float(np.minimum(rho * qn, pn).sum())
        value = s - 1.0 + (1.0 - s / rho) ** n
        if abs(value) <= margin:
            raise _TooClose
        return value

    return RhoSearch(f, n, tol)


def _kseq(torch, p, q, drafts: list[int], n: int, u: list[float]) -> int:
    from .device import BISECTION_TOL
    from .kseq import kseq_rho, kseq_search

    pn, qn = p.numpy(), q.numpy()  # views of the CPU tensors: scalar reads without a torch call each
    px = pn[drafts].tolist()
    qx = qn[drafts].tolist()
    try:  # most draws are decided after a few steps of a search without a sort
        search = _direct_search(pn, qn, n, BISECTION_TOL)
        token = _kseq_coins(search, drafts, px, qx, u)
    except _TooClose:  # numpy's own search (one sort); the coins decided so far decide the same way again
        search, _ = kseq_search(pn, qn, n, BISECTION_TOL)
        token = _kseq_coins(search, drafts, px, qx, u)
    if token is not None:
        return token
    rho, s = kseq_rho(pn, qn, n, BISECTION_TOL)  # every draft rejected: the exact rho* and S(rho*)
    beta = s / rho
    scale = (1.0 - (1.0 - beta) ** n) / beta if beta > 0 else rho
    residual = (p - torch.minimum(q, p / rho) * scale).clamp_min(0.0)
    return draw_inverse_cdf(torch, residual, p, u[len(drafts)])


def _kseq_coins(search, drafts, px, qx, u) -> int | None:
    """The first draft whose coin ``min(1, p(x)/(rho* q(x)))`` accepts, or None, running ``search`` only as far
    as the decisions need: the coin decreases in rho* and ``lo < rho* <= hi`` while the search runs, so ``u``
    below the coin at ``hi`` accepts and ``u`` at or above the coin at ``lo`` rejects."""
    for j, x in enumerate(drafts):
        while True:
            if u[j] < min(px[j] / (search.hi * qx[j]), 1.0):
                return x
            if search.done or u[j] >= min(px[j] / (search.lo * qx[j]), 1.0):
                break
            search.step()
    return None


def sample_visited(name: str, p, q, drafts, n: int, generator, sampler: str | None = None) -> int:
    """One output token of verifier ``name`` (in :data:`SEQUENTIAL`) at one node, on the CPU.

    ``p``: the target's law at the node, float64 ``[V]`` (or ``[1, V]``); ``q``: the draft
    model's, any float ``[V]`` or ``[1, V]`` (transformed by ``sampler`` as
    :func:`~.device.draft_distribution` does); ``drafts``: the node's draft tokens in
    drawing order (a sequence of ints); ``n``: the number of drafts asked for;
    ``generator``: a CPU ``torch.Generator``. The inputs come from the decode's own walk
    and are not checked again (use :func:`~.device.verify_nodes` with ``validate=True``
    for untrusted tensors).
    """
    import torch

    from .device import _verifier_spec, draft_distribution

    _, spec = _verifier_spec(name, sampler)
    P = p.reshape(-1).to(torch.float64)
    Q = draft_distribution(q.reshape(1, -1), spec)[0]
    drafts = [int(x) for x in drafts]
    u = torch.rand(len(drafts) + 1, generator=generator, dtype=torch.float64).tolist()
    if name == "kseq":
        return _kseq(torch, P, Q, drafts, n, u)
    return _rejection(torch, P, Q, drafts, u, without_replacement=name == "rrsw")


__all__ = ["SEQUENTIAL", "draw_inverse_cdf", "sample_visited"]
