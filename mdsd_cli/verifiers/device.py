"""Per-node verifiers in torch, on the tensors' device, batched over the nodes of a draft tree.

Each row ``b`` of a batch is one node: its own target and draft distributions
``p[b], q[b]`` and its own draft tuple ``drafts[b]``. :func:`output_law` gives the
exact conditional law ``P(Y = . | X = drafts[b])`` of every row, the closed form
of the numpy verifier of the same name (:mod:`.nss`, :mod:`.rrs`, :mod:`.kseq`,
:mod:`.greedy`) ported line for line and vectorised over the rows;
:func:`verify_nodes` draws one output token per row from that law.

=========  ================================================================================
name       law computed here
=========  ================================================================================
``nss``    ``p`` (any draft law)
``topk``   ``p`` (the top-k drafts of q)
``rrs``    recursive rejection along the drafts, residuals ``(p - C_k q)_+`` normalised
``rrsw``   the same with ``q`` renormalised off the drafts already made
``kseq``   ``rho*`` by the same bisection as numpy, coins ``min(1, p/(rho* q))``, residual
``greedy`` speculative sampling on the last (random) draft against ``q`` off the top set
``hub``    SpecHub's five steps (n = 2)
=========  ================================================================================

``otm``, ``optimal-iid`` and ``optimal-wor`` stay on the host: their set-up (a linear
program, the block weights) is sequential per pair. A caller moves only the rows of
the nodes the walk visits to the CPU and uses the numpy class.

Precision and device
--------------------
Every law is computed in float64 on the device of ``p`` (CPU or CUDA; inputs of any
float dtype are converted, exactly). Laws agree with the numpy classes to rounding
(about 1e-15; 1e-12 is tested), with two exceptions:

* ``rrsw`` on pairs whose smallest positive draft probability is below 1e-290, which
  numpy computes in extended precision and this module in float64;
* ``kseq`` on a pair with ``p = q`` (to rounding) off the CPU. There ``rho* = 1`` and
  numpy's bisection reads ``f(1) = s - 1 + (1 - s)^n`` with ``s = sum(p)`` summed in
  its order: one ulp in ``s`` moves ``rho*`` by about ``ulp^(1/n)`` (1e-4 at n = 4). On
  the CPU the sums here run in numpy's order and agree to the bit; a GPU's parallel
  prefix sums can land elsewhere in that band (the law stays lossless: ``f(rho) >= 0``).

On the CPU, rows are processed in chunks that fit in cache (:data:`CPU_CHUNK`).
MPS has no float64 and is refused.

Synchronisation and checks
--------------------------
Nothing here copies a tensor value to the host unless ``validate=True``: no
``.item()``, no branch on a tensor value, a fixed number of kernel launches for a
given ``(verifier, n)``. Shapes, dtypes and devices are always checked (they are
metadata). ``validate=True`` also checks the values, with one synchronisation: ``p``
and ``q`` finite, non-negative rows summing to 1, draft ids in ``0..V-1`` with ``-1``
only as right padding, the width each row's draft law gives, ``q(x) > 0`` at every
draft, and the tuples the draft law can produce (no repeats for laws without
replacement; the top set for ``greedy``/``topk``; the hub for ``hub``), as the numpy
classes refuse them. Without it, draft ids are clamped into ``0..V-1`` for indexing and
invalid rows give meaningless laws instead of errors.

Random streams
--------------
:func:`verify_nodes` and :func:`sample_bonus` draw exactly one uniform per row, in row
order, as one ``torch.rand(B, generator=generator, dtype=torch.float64, device=p.device)``
(or take them as ``uniforms``), and map it to a token by the inverse CDF of the row's
law along the token ids (:func:`sample_from_laws`). A batch therefore gives the tokens
of ``B`` one-row calls given those uniforms one by one. On the CPU, torch's generator
hands out doubles in sequence, so ``B`` one-row calls on the same generator also draw
the same uniforms; CUDA's Philox generator advances by whole blocks per call, so there
only the ``uniforms`` route reproduces a batch row by row. A row's law alone and in a
batch agrees to rounding (a reduction may associate differently), which moves a token
only for a uniform within about 1e-15 of a boundary.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from ..errors import InputError, MdsdError, unknown_choice
from ..samplers import get_sampler
from ..samplers.parametric import TransformedSampler
from .device_checks import check_generator, draft_counts, draft_rows, float_rows, validate_values

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: Verifiers whose law this module computes on the device.
DEVICE_VERIFIERS = ("nss", "topk", "rrs", "rrsw", "kseq", "greedy", "hub")
#: Verifiers that stay on the host (their numpy classes take the visited rows).
HOST_VERIFIERS = ("otm", "optimal-iid", "optimal-wor")

#: ``kseq``'s bisection for ``rho*`` stops once ``hi - lo <= BISECTION_TOL * hi``, as numpy's does.
BISECTION_TOL = 4e-16


class NodeVerification(NamedTuple):
    """One output token per node and the accepted draft's position.

    Attributes
    ----------
    tokens : torch.Tensor, int64 ``[B]``
        The output token of each row; over the draft law it is distributed as ``p``.
    indices : torch.Tensor, int64 ``[B]``
        The first position of ``drafts[b]`` holding ``tokens[b]``, or -1 when no draft does
        (the token came from the residual).
    """

    tokens: torch.Tensor
    indices: torch.Tensor


def _torch():
    try:
        import torch
    except ImportError:
        raise MdsdError("device verifiers need torch: install a torch build for your machine "
                        "(CPU only: pip install torch==2.13.0)") from None
    return torch


def _verifier_spec(name: str, sampler):
    """The numpy class registered as ``name`` (for its draft laws) and the draft sampler."""
    from . import get_verifier

    cls = get_verifier(name)
    if name in HOST_VERIFIERS:
        raise InputError(f"verifier {name} runs on the host only; move the visited nodes' rows to the CPU and use "
                         f"mdsd_cli.verifiers.prepare_verifier({name!r}, ...)")
    if name not in DEVICE_VERIFIERS:  # pragma: no cover - a new numpy verifier not ported yet
        raise unknown_choice("device verifier", name, DEVICE_VERIFIERS)
    spec = get_sampler(sampler or cls.default_sampler)
    if cls.samplers is not None and spec.kind not in cls.samplers:
        raise InputError(f"verifier {name} is lossless for {'/'.join(cls.samplers)} drafts only (with any "
                         f"temperature, top_k or top_p), not {spec.name!r}")
    return cls, spec


def _prepare(name, p, q, drafts, sampler, n, validate):
    torch = _torch()
    cls, spec = _verifier_spec(name, sampler)
    P = float_rows(torch, p, "p")
    Q = float_rows(torch, q, "q", p.device)
    if Q.shape != P.shape:
        raise InputError(f"q has shape {tuple(q.shape)} but p has {tuple(p.shape)}; give one (p, q) row per node")
    X = draft_rows(torch, drafts, P.shape[0], p.device)
    fixed = cls.fixed_n or spec.fixed_n
    N = draft_counts(torch, n, P.shape[0], X.shape[1], p.device, fixed)
    Qd = draft_distribution(Q, spec)
    if validate:
        validate_values(torch, spec, fixed, p, q, P, Q, Qd, X, N)
    return torch, cls, spec, P, Qd, X, N


# --- the draft law ------------------------------------------------------------------------------------------------
def draft_distribution(q: torch.Tensor, sampler) -> torch.Tensor:
    """The law the drafts are drawn from, ``q'`` ``[B, V]`` float64: ``q`` transformed as ``sampler`` says.

    The torch form of :meth:`~mdsd_cli.samplers.DraftSampler.draft_distribution`: for
    ``base:temperature=τ,top_k=k,top_p=π``, ``q^(1/τ)`` renormalised, then its ``k`` most
    probable tokens (ties by lower index), then the nucleus of mass ``π``, each
    renormalised; ``q`` itself for a plain sampler. Nucleus boundaries follow float64
    cumulative sums, as numpy's do (a token whose preceding mass equals ``π`` to the last
    bit may fall on the other side).
    """
    torch = _torch()
    spec = get_sampler(sampler)
    Q = float_rows(torch, q, "q")
    if not isinstance(spec, TransformedSampler):
        return Q
    if spec.temperature != 1.0:
        logq = torch.log(Q)  # zeros give -inf, hence probability 0 again
        top = logq.amax(dim=1, keepdim=True)  # (max with indices: ~8 ms per call on CPU, torch 2.13)
        shifted = (logq - top) / spec.temperature
        if spec.temperature > 1.0:  # as numpy's softmax: divide first where the difference overflowed
            lost = torch.isneginf(shifted) & torch.isfinite(logq)
            shifted = torch.where(lost, logq / spec.temperature - top / spec.temperature, shifted)
        z = torch.exp(shifted)
        Q = z / z.sum(dim=1, keepdim=True)
    if spec.top_k is not None and spec.top_k < Q.shape[1]:
        order = torch.sort(Q, dim=1, descending=True, stable=True).indices[:, : spec.top_k]
        keep = torch.zeros_like(Q, dtype=torch.bool).scatter_(1, order, True)
        Q = torch.where(keep, Q, 0.0)
        Q = Q / Q.sum(dim=1, keepdim=True)
    if spec.top_p < 1.0:
        ranked, order = torch.sort(-Q, dim=1, stable=True)
        ranked = -ranked
        before = torch.cumsum(ranked, dim=1) - ranked
        keep_ranked = before < spec.top_p * ranked.sum(dim=1, keepdim=True)
        keep = torch.zeros_like(Q, dtype=torch.bool).scatter_(1, order, keep_ranked)
        Q = torch.where(keep, Q, 0.0)
        Q = Q / Q.sum(dim=1, keepdim=True)
    return Q


# --- the laws -----------------------------------------------------------------------------------------------------
def _normalised(torch, x, fallback):
    """Rows of ``x`` divided by their sums; ``fallback``'s row where a sum is 0."""
    s = x.sum(dim=1, keepdim=True)
    return torch.where(s > 0, x / torch.where(s > 0, s, 1.0), fallback)


def _recursive_rejection_law(torch, P, Q, X, live, *, without_replacement: bool):
    """``rrs``/``rrsw``: :meth:`.rrs._RecursiveRejection.path` and ``output_law``, over the rows.

    ``G(C) = sum_i (p_i - C q_i)_+`` is summed directly over the vocabulary (numpy uses
    prefix sums along the ``p/q`` order, the same value to rounding).
    """
    B, k = X.shape
    px, qx = torch.gather(P, 1, X), torch.gather(Q, 1, X)
    C = torch.zeros(B, dtype=torch.float64, device=P.device)
    G = P.sum(dim=1)
    a = torch.zeros((B, k), dtype=torch.float64, device=P.device)
    rest = Q.clone() if without_replacement else None  # q off the drafts made so far
    for j in range(k):
        if without_replacement:
            s = rest.sum(dim=1)
            xj = X[:, j : j + 1]
            rest.scatter_(1, xj, torch.where(live[:, j : j + 1], 0.0, torch.gather(rest, 1, xj)))
        else:
            s = torch.ones_like(C)
        alive = G > 0
        pk = (px[:, j] - C * qx[:, j]).clamp_min(0.0) / torch.where(alive, G, 1.0)
        coin = torch.where(pk > 0, torch.clamp_max(pk * (s / qx[:, j]), 1.0), 0.0)
        a[:, j] = torch.where(live[:, j], torch.where(alive, coin, 1.0), 0.0)
        C = torch.where(live[:, j], C + G / s, C)
        if j + 1 < k:
            G = (P - C[:, None] * Q).clamp_min(0.0).sum(dim=1)
    out = torch.zeros_like(P)
    reach = torch.ones_like(C)
    for j in range(k):
        out.scatter_add_(1, X[:, j : j + 1], (reach * a[:, j])[:, None])
        reach = reach * (1.0 - a[:, j])
    residual = _normalised(torch, (P - C[:, None] * Q).clamp_min(0.0), P)
    return out + reach[:, None] * residual


def _kseq_rho(torch, P, Q, N, width: int):
    """``rho*`` and ``S(rho*)`` per row: numpy's bisection on ``f(rho) = S - 1 + (1 - S/rho)^n``, step for step.

    ``S(rho) = sum_i min(rho q_i, p_i)`` comes from prefix sums along the tokens sorted by
    ``q/p`` (one sort per row, then ``O(log V)`` per evaluation), as in :class:`.kseq.KSeq`.
    """
    if P.device.type == "cpu":  # numpy's own set-up and bisection (kseq_rho) on the same memory, row by row:
        # its sort and steps to the bit, without a torch launch per bisection step (7x numpy at V = 2,380)
        from .kseq import kseq_rho

        rows = [kseq_rho(p, q, n, BISECTION_TOL) for p, q, n in zip(P.numpy(), Q.numpy(), N.tolist())]
        rho, s = zip(*rows) if rows else ((), ())
        return torch.tensor(rho, dtype=torch.float64), torch.tensor(s, dtype=torch.float64)
    key = (Q / P).abs()  # abs: a -0.0 entry must not give -inf
    key = torch.where(torch.isnan(key), torch.inf, key)  # p = q = 0: never above any rho
    # numpy's order (ties by lower index), as a GPU's stable sort gives it
    sorted_key, order = torch.sort(key, dim=1, stable=True)
    zero = torch.zeros((P.shape[0], 1), dtype=torch.float64, device=P.device)
    p_in = torch.cat((zero, torch.cumsum(torch.gather(P, 1, order), dim=1)), dim=1)
    q_in = torch.cat((zero, torch.cumsum(torch.gather(Q, 1, order), dim=1)), dim=1)
    p_total = p_in[:, -1]
    n = N.to(torch.float64)

    def S(rho):
        above = torch.searchsorted(sorted_key, (1.0 / rho)[:, None].contiguous(), side="left")
        return rho * torch.gather(q_in, 1, above)[:, 0] + (p_total - torch.gather(p_in, 1, above)[:, 0])

    def f(rho):
        s = S(rho)
        return s - 1.0 + torch.pow(1.0 - s / rho, n)

    lo = torch.ones_like(n)
    hi = torch.where(f(lo) >= 0, lo, n)
    # numpy stops a row once hi - lo <= 4e-16 hi; a stopped row stays put here, so enough steps for
    # the widest interval, [1, width], give numpy's hi on every row with no synchronisation.
    steps = min(200, 4 + math.ceil(math.log2(max(width - 1, 1) / BISECTION_TOL)))
    for _ in range(steps):
        active = (hi - lo) > BISECTION_TOL * hi
        mid = 0.5 * (lo + hi)
        up = f(mid) >= 0
        hi = torch.where(active & up, mid, hi)
        lo = torch.where(active & ~up, mid, lo)
    return hi, S(hi)


def _kseq_law(torch, P, Q, X, live, N, rho, S):
    """``kseq``: :class:`.kseq.KSeq` set-up (given ``rho*`` and ``S(rho*)``) and ``output_law``, over the rows."""
    n = N.to(torch.float64)
    beta = S / rho
    accept_total = 1.0 - torch.pow(1.0 - beta, n)
    scale = torch.where(beta > 0, accept_total / torch.where(beta > 0, beta, 1.0), rho)
    residual = (P - torch.minimum(Q, P / rho[:, None]) * scale[:, None]).clamp_min(0.0)
    residual = _normalised(torch, residual, P)
    coins = torch.clamp_max(torch.gather(P, 1, X) / (rho[:, None] * torch.gather(Q, 1, X)), 1.0)
    coins = torch.where(live, coins, 0.0)
    out = torch.zeros_like(P)
    reach = torch.ones_like(rho)
    for j in range(X.shape[1]):
        out.scatter_add_(1, X[:, j : j + 1], (reach * coins[:, j])[:, None])
        reach = reach * (1.0 - coins[:, j])
    return out + reach[:, None] * residual


def _greedy_law(torch, P, Q, X, live, N):
    """``greedy``: :class:`.greedy.GreedyVerifier` over the rows (row ``b``'s top set is its first ``n_b - 1`` drafts)."""
    B, k = X.shape
    whole = (Q > 0).sum(dim=1) < N  # the drafts are the whole support: the law is p
    top = (torch.arange(k, device=X.device)[None, :] < (N - 1)[:, None]) & live
    in_top = torch.zeros_like(P).scatter_add_(1, X, top.to(torch.float64)) > 0  # counts: repeats cannot clash
    rest = torch.where(in_top, 0.0, Q)
    r = rest / rest.sum(dim=1, keepdim=True)
    last = torch.gather(X, 1, (N - 1).clamp(0, k - 1)[:, None])
    a = torch.clamp_max(torch.gather(P, 1, last) / torch.gather(r, 1, last), 1.0)
    residual = _normalised(torch, (P - r).clamp_min(0.0), P)
    out = (1.0 - a) * residual
    out.scatter_add_(1, last, a)
    return torch.where(whole[:, None], P, out)


def _hub_law(torch, P, Q, X):
    """``hub``: :class:`.greedy.HubVerifier` (its set-up and ``output_law``) over the rows."""
    V = P.shape[1]
    a = torch.argmax(Q, dim=1, keepdim=True)  # the hub: the first maximum, as numpy's top token
    single = (Q > 0).sum(dim=1) < 2
    pa, qa = torch.gather(P, 1, a), torch.gather(Q, 1, a)
    single_law = (1.0 - pa) * _normalised(torch, (P - Q).clamp_min(0.0), P)
    single_law.scatter_add_(1, a, pa)
    off = torch.arange(V, device=P.device)[None, :] != a
    p1 = torch.where(off, (P - Q).clamp_min(0.0), 0.0)  # p'
    q1 = torch.where(off, (Q - P).clamp_min(0.0), 0.0)  # q'
    Qa = torch.where(off, qa * (Q / torch.where(off, Q, 0.0).sum(dim=1, keepdim=True)), 0.0)  # Q_ai
    p2 = (p1 - Qa).clamp_min(0.0)  # p''
    sum_Q1 = (Qa - p1).clamp_min(0.0).sum(dim=1, keepdim=True)  # sum Q'
    sum_q1 = q1.sum(dim=1, keepdim=True)
    beta3 = torch.where(sum_Q1 > 0, torch.clamp_max(pa / sum_Q1, 1.0), 1.0)
    hub_left = (pa - sum_Q1).clamp_min(0.0)
    beta4 = torch.where(sum_q1 > 0, torch.clamp_max(hub_left / sum_q1, 1.0), 1.0)
    residual = _normalised(torch, p2.scatter(1, a, (hub_left - sum_q1).clamp_min(0.0)), P)
    # rows where q has one token (``single``) hold one draft: a placeholder second, never used
    first = X[:, :1]
    second = X[:, 1:2] if X.shape[1] > 1 else first
    second = torch.where(second < 0, first, second)
    hub_second = second == a  # the pair (i, a)
    i = torch.where(hub_second, first, second)
    p_i, q_i = torch.gather(P, 1, i), torch.gather(Q, 1, i)
    acc1 = torch.where((i != a) & (q_i > 0), torch.clamp_max(p_i / q_i, 1.0), 0.0)
    Q_i = torch.gather(Qa, 1, i)
    acc2 = torch.where(Q_i > 0, torch.clamp_max(torch.gather(p1, 1, i) / Q_i, 1.0), 0.0)
    acc_i = torch.where(hub_second, acc1, acc2)
    acc_hub = torch.where(hub_second, beta4, beta3)
    rest = 1.0 - acc_i
    out = rest * (1.0 - acc_hub) * residual
    out.scatter_add_(1, i, acc_i)
    out.scatter_add_(1, a, rest * acc_hub)
    return torch.where(single[:, None], single_law, out)


#: On the CPU, rows are processed in chunks of about this many float64 entries, so that the
#: temporaries of the closed forms stay in cache (4x faster than whole [B, V] tensors at V = 152,064).
CPU_CHUNK = 1 << 17


def _law(torch, name: str, P, Q, X, N):
    if name in ("nss", "topk"):
        return P
    B, V = P.shape
    extra = _kseq_rho(torch, P, Q, N, X.shape[1]) if name == "kseq" else ()  # one batched sort: faster whole
    rows = max(1, CPU_CHUNK // V)
    if P.device.type != "cpu" or B <= rows:
        return _law_rows(torch, name, P, Q, X, N, *extra)
    return torch.cat([_law_rows(torch, name, *(t[i : i + rows] for t in (P, Q, X, N, *extra)))
                      for i in range(0, B, rows)])


def _law_rows(torch, name: str, P, Q, X, N, *extra):
    live = X >= 0
    xs = X.clamp(0, P.shape[1] - 1)
    if name in ("nss", "topk"):
        return P
    if name in ("rrs", "rrsw"):
        return _recursive_rejection_law(torch, P, Q, xs, live, without_replacement=name == "rrsw")
    if name == "kseq":
        return _kseq_law(torch, P, Q, xs, live, N, *extra)
    if name == "greedy":
        return _greedy_law(torch, P, Q, xs, live, N)
    return _hub_law(torch, P, Q, xs)


# --- the public functions -----------------------------------------------------------------------------------------
def output_law(name: str, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, sampler: str | None = None, *,
               n=None, validate: bool = False) -> torch.Tensor:
    """Exact ``P(Y = . | X = drafts[b])`` of verifier ``name`` for every node ``b``, ``[B, V]`` float64.

    Parameters
    ----------
    name : str
        One of :data:`DEVICE_VERIFIERS` (``nss``, ``topk``, ``rrs``, ``rrsw``, ``kseq``,
        ``greedy``, ``hub``); the host-only verifiers (:data:`HOST_VERIFIERS`) are refused.
    p, q : torch.Tensor ``[B, V]``
        Target and draft distributions of each node (any float dtype; one device).
    drafts : torch.Tensor of int ``[B, k]``
        Each node's draft tuple in drawing order. A row with fewer drafts (its sampler
        asked for fewer, or ``q`` has fewer tokens of positive mass) is padded with -1 on
        the right.
    sampler : str, optional
        The draft law (default: the verifier's own), transforms included
        (``wor:temperature=0.8``): the laws are computed against the transformed ``q'``.
    n : int or torch.Tensor of int ``[B]``, optional
        The number of drafts each row's sampler was asked for (default ``k``). It decides
        ``kseq``'s ``rho*`` and whether ``greedy`` drafted the whole support.
    validate : bool
        Check the values too (one host synchronisation; see the module docstring).

    Returns
    -------
    torch.Tensor ``[B, V]``, float64, on the device of ``p``
        Row ``b`` is the numpy class's ``output_law(drafts[b])`` for ``(p[b], q[b])`` to rounding.
    """
    torch, _, _, P, Q, X, N = _prepare(name, p, q, drafts, sampler, n, validate)
    law = _law(torch, name, P, Q, X, N)
    return law.clone() if law is P else law  # nss: never hand back the caller's own p


def sample_from_laws(laws: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of ``laws [B, V]`` for the uniforms ``uniforms [B]`` in ``[0, 1)``, int64 ``[B]``.

    Inverse CDF along the token ids: the first token whose cumulative mass exceeds
    ``u * total``, as :func:`~.base.sample_from_laws` does, so the same uniforms give
    numpy's tokens up to rounding at the boundaries. A token of probability 0 is never
    returned: on the CPU the cumulative sum is sequential (adding 0 changes nothing), so
    only rounding past the end can reach one, and goes to the last token of positive
    mass; on other devices (parallel scans) any pick of probability 0 goes to the last
    token of positive mass before it.
    """
    torch = _torch()
    B, V = laws.shape
    rows = max(1, CPU_CHUNK // V)
    if laws.device.type != "cpu":
        return _draw(torch, laws, uniforms, sequential=False)
    return torch.cat([_draw(torch, laws[i : i + rows], uniforms[i : i + rows], sequential=True)
                      for i in range(0, B, rows)]) if B > rows else _draw(torch, laws, uniforms, sequential=True)


def _draw(torch, laws, uniforms, *, sequential: bool):
    V = laws.shape[1]
    cdf = torch.cumsum(laws, dim=1)
    target = (uniforms.to(laws.dtype) * cdf[:, -1])[:, None].contiguous()
    pick = torch.searchsorted(cdf, target, right=True)[:, 0].clamp_max(V - 1)
    positive = laws > 0
    if sequential:
        last = V - 1 - torch.argmax(positive.flip(1).to(torch.uint8), dim=1)
        return torch.minimum(pick, last)
    token = torch.arange(V, device=laws.device)
    at_or_before = torch.cummax(torch.where(positive, token, -1), dim=1).values  # last positive token <= each
    chosen = torch.gather(at_or_before, 1, pick[:, None])[:, 0]
    return torch.where(chosen >= 0, chosen, torch.argmax(positive.to(torch.uint8), dim=1))


def _uniforms(torch, B: int, generator, uniforms, device):
    """The ``[B]`` float64 uniforms of a call: ``uniforms`` as given (checked), or one ``torch.rand`` draw."""
    if uniforms is None:
        if generator is not None:
            check_generator(torch, generator, device)
        return torch.rand(B, generator=generator, dtype=torch.float64, device=device)
    if generator is not None:
        raise InputError("give a generator or uniforms, not both")
    if not isinstance(uniforms, torch.Tensor) or not uniforms.is_floating_point() or tuple(uniforms.shape) != (B,):
        raise InputError(f"uniforms must be a floating-point torch tensor [B] (B = {B}) of values in [0, 1), got "
                         f"{getattr(uniforms, 'dtype', type(uniforms).__name__)} of shape "
                         f"{tuple(getattr(uniforms, 'shape', ()))}")
    if uniforms.device != device:
        raise InputError(f"uniforms is on {uniforms.device} but p is on {device}; put every tensor on one device")
    return uniforms.to(torch.float64)


def accepted_index(drafts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """For each row of ``drafts [B, k]``, the first position holding ``tokens[b]``, or -1 (int64 ``[B]``)."""
    torch = _torch()
    hit = drafts == tokens[:, None]
    first = torch.argmax(hit.to(torch.uint8), dim=1)
    return torch.where(hit.any(dim=1), first, -1)


def verify_nodes(name: str, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator=None,
                 sampler: str | None = None, *, n=None, validate: bool = False,
                 uniforms: torch.Tensor | None = None) -> NodeVerification:
    """Verify every node of a batch at once: one output token per row and the accepted draft's position.

    Parameters as :func:`output_law`; ``generator`` is a ``torch.Generator`` on the
    device of ``p`` (None: torch's default generator there); ``uniforms`` (float ``[B]``
    in ``[0, 1)``, instead of a generator) are the uniforms to use, one per row.

    Row ``b``'s token is drawn from :func:`output_law`'s row ``b`` with the ``b``-th of
    ``torch.rand(B, generator=generator, dtype=torch.float64)`` (inverse CDF,
    :func:`sample_from_laws`): one uniform per row, in row order (see the module
    docstring for how that compares with one-row calls). Over the draft law the token
    is distributed exactly as ``p[b]`` (the verifiers are lossless); the accepted index
    is the first draft equal to it (equal drafts are interchangeable), -1 if none.

    Returns
    -------
    NodeVerification
        ``tokens`` and ``indices``, int64 ``[B]`` on the device of ``p``.
    """
    torch, _, _, P, Q, X, N = _prepare(name, p, q, drafts, sampler, n, validate)
    u = _uniforms(torch, P.shape[0], generator, uniforms, P.device)
    tokens = sample_from_laws(_law(torch, name, P, Q, X, N), u)
    return NodeVerification(tokens, accepted_index(X, tokens))


def sample_bonus(p: torch.Tensor, generator=None, *, uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of ``p [B, V]`` (a leaf's bonus token from the target), int64 ``[B]``.

    The same stream use as :func:`verify_nodes`: one uniform per row, in row order, from
    ``generator`` or given as ``uniforms``.
    """
    torch = _torch()
    P = float_rows(torch, p, "p")
    return sample_from_laws(P, _uniforms(torch, P.shape[0], generator, uniforms, P.device))


def tempered_torch(logits: torch.Tensor, temperature: float, *, validate: bool = False) -> torch.Tensor:
    """``softmax(logits / T)`` row-wise in float64 on the device of ``logits``, ``[B, V]`` (``[V]`` gives ``[1, V]``).

    The torch form of :func:`mdsd_cli.decode.laws.tempered`: ``T = 0`` gives the one-hot
    vector on the arg max (the lowest index among ties), ``-inf`` logits probability 0.
    ``validate=True`` refuses (one synchronisation) a row whose maximum is not finite, as
    ``tempered`` always does; without it such a row gives NaN.
    """
    from ..distributions import check_temperature

    torch = _torch()
    t = check_temperature(temperature)
    if not isinstance(logits, torch.Tensor):
        raise InputError(f"logits must be a torch tensor [B, V], got {type(logits).__name__}; use torch.as_tensor")
    if not logits.is_floating_point():
        raise InputError(f"logits has dtype {str(logits.dtype).removeprefix('torch.')}; expected a floating-point "
                         "tensor")
    x = logits[None, :] if logits.ndim == 1 else logits
    x = float_rows(torch, x, "logits")
    if validate:
        top = x.amax(dim=1, keepdim=True)  # not .max(dim): that costs ~8 ms per call on CPU (torch 2.13)
        bad = ~torch.isfinite(top[:, 0])
        if bool(bad.any().cpu()):
            row = int(bad.to(torch.uint8).argmax().cpu())
            raise InputError(f"model logits row {row} has NaN, +inf or only -inf values; a model must give finite "
                             "logits (or -inf for impossible tokens)")
    if t == 0:
        return torch.zeros_like(x).scatter_(1, torch.argmax(x, dim=1, keepdim=True), 1.0)
    return torch.softmax(x / t, dim=1)  # exp(x/T - max) / sum, one fused kernel (numpy's to about 1 ulp)


__all__ = [
    "DEVICE_VERIFIERS", "HOST_VERIFIERS", "NodeVerification", "accepted_index", "draft_distribution", "output_law",
    "sample_bonus", "sample_from_laws", "tempered_torch", "verify_nodes",
]
