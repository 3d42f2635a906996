"""The verification walk with the verifiers on the target's device (:mod:`mdsd_cli.verifiers.device`).

:func:`~.walk.walk_per_node` moves each visited node's logits to the host and
verifies it in numpy, one node at a time. :func:`walk_on_device` keeps the
target's logits where they are (float64 tempering there) and verifies in one of
two ways:

* **batched** (the default off the CPU): every internal node of the tree is
  verified in one call, with its own drafts and one uniform, and every leaf draws
  its bonus token in another; then the ``tree.size`` output tokens are copied to
  the host — the only synchronisation of a step — and the walk reads them: at
  node ``u`` the child holding ``u``'s token (the first in template order), or
  stop; at a leaf, its bonus token. On a GPU the nodes run in parallel, so the
  step costs about one node's kernels.
* **visited nodes only** (the default on the CPU, where a batch would spend its
  time on nodes the walk never reaches): one call per visited node, and one copy
  of its token, on which the walk must branch. On the CPU, ``rrs``, ``rrsw`` and
  ``kseq`` then draw by sequential rejection and compute only what the draw reaches
  (:mod:`~mdsd_cli.verifiers.device_visit`); the others through their whole law.

Lossless for the same reason as the host walk: every node's output is drawn from
its verifier's exact conditional law with its own uniform, independent of the
others, and the walk reads the nodes it visits only (a batch's other outputs are
discarded unread). The draft distributions (host arrays from the drafting) go to
the device in one copy per step (batched) or per visit.

The uniforms come from a ``torch.Generator`` on that device, seeded per step from
the decode's numpy stream, so a run is reproducible for a seed (on one device);
it is another stream than the host walk's, so the tokens differ from the host
path's for the same seed while their law is the same.

``otm``, ``optimal-iid`` and ``optimal-wor`` have no device form: only the visited
nodes' tempered rows are copied to the host, one ``[V]`` float64 row per visit,
and verified by the numpy class. The sequence-level verifiers (``block``,
``traversal``) run on the device too, in :mod:`.device_sequence`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np

from ..verifiers.base import sample_from_law
from .drafting import DraftTree
from .walk import Visit, WalkResult

#: Where ``mdsd decode`` verifies: ``auto`` is ``device`` when the target's logits are on an accelerator.
VERIFY_ON = ("auto", "device", "host")
#: Verify the whole tree in one call on the CPU too (the tests set it to check that path without a GPU).
BATCH_ON_CPU = False


def logits_device(model) -> str:
    """The torch device a model's logits live on: its ``device`` attribute (Hugging Face models), else ``cpu``."""
    device = getattr(model, "device", None)
    return str(device) if device is not None else "cpu"


def resolve_verify_on(verify_on: str, target) -> str:
    """``device`` or ``host`` for ``verify_on`` in :data:`VERIFY_ON` (``auto``: where the logits are)."""
    from ..errors import unknown_choice

    if verify_on not in VERIFY_ON:
        raise unknown_choice("verify-on", verify_on, VERIFY_ON)
    if verify_on == "auto":
        return "host" if logits_device(target).startswith("cpu") else "device"
    return verify_on


@contextmanager
def one_thread_on_cpu(device: str):
    """On the CPU, run torch single-threaded inside the block (the previous thread count is restored after).

    A verification walk is a few dozen small operations; with torch's two threads and the
    other core busy, an operation that goes parallel waits for its descheduled worker: the
    ``mdsd bench`` device rows measured 7.8 ms per verified node instead of 0.12 ms at
    V = 2,380 on a busy 2-core machine. Off the CPU this does nothing.
    """
    if not str(device).startswith("cpu"):
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def as_device_rows(model, logits, rows: int, device: str):
    """What ``model`` returned as logits for ``rows`` nodes, as a float tensor ``[rows, V]`` on ``device``:
    no copy when a tensor is there already; else :func:`~.laws.model_rows`'s checks and one upload. An
    :class:`~mdsd_cli.errors.InputError` names the model when the shape is wrong or the values are not numbers."""
    import torch

    from ..errors import InputError
    from .laws import model_rows

    if not isinstance(logits, torch.Tensor):
        return torch.as_tensor(model_rows(model, logits, rows), device=device)
    name = getattr(model, "name", "") or type(model).__name__
    expected = (rows, getattr(model, "vocab_size", logits.shape[-1] if logits.ndim else 0))
    if logits.is_meta or not logits.is_floating_point():
        raise InputError(f"model {name} returned logits of dtype {str(logits.dtype).removeprefix('torch.')} on "
                         f"{logits.device}; a model must return float logits with values")
    if tuple(logits.shape) != expected:
        raise InputError(f"model {name} returned logits of shape {tuple(logits.shape)} for {rows} contexts; "
                         f"expected {expected}")
    return logits.detach().to(device)


def walk_on_device(tree: DraftTree, logits, temperature: float, verifier: str, sampler: str, generator, *,
                   eos_token_id: int | None = None, conditional_acceptance: bool = True,
                   batched: bool | None = None) -> WalkResult:
    """Walk ``tree`` with every node verified on the device of ``logits`` (see the module docstring).

    ``logits``: the target's logits at every node, a float tensor ``[tree.size, V]`` on the
    device. ``generator``: a ``torch.Generator`` on that device. ``batched``: verify every node
    of the tree in one call and copy the tokens once (the default off the CPU, where the nodes
    run in parallel), or only the nodes the walk visits, one call and one copy of a token each
    (the default on the CPU, where the batch would spend its time on nodes never visited).
    Either way each node uses one uniform of ``generator`` (batched: in node order; else in the
    order of the visits). ``seconds`` covers tempering, the verification and the copies; with
    ``conditional_acceptance`` each visit's ``P(Y in X | X)`` is computed outside that time (the
    visited rows are then copied to the host, as ``p`` of the :class:`~.walk.Visit`).
    """
    from ..verifiers import device as dv

    t0 = time.perf_counter()
    if verifier in dv.HOST_VERIFIERS:
        return _walk_host_rows(tree, logits, temperature, verifier, sampler, generator, t0, eos_token_id)
    if batched is None:
        batched = logits.device.type != "cpu" or BATCH_ON_CPU
    if not batched:
        return _walk_visited(tree, logits, temperature, verifier, sampler, generator, t0, eos_token_id,
                             conditional_acceptance)
    import torch

    P = dv.tempered_torch(logits, temperature)
    internal = [u for u in range(tree.size) if tree.children[u]]
    leaves = [u for u in range(tree.size) if not tree.children[u]]
    # a node may hold fewer drafts than its n (a draft law without replacement runs out of tokens): -1 pads
    width = max(len(tree.drafts[u]) for u in internal)
    X = np.full((len(internal), width), -1, dtype=np.int64)
    for row, u in enumerate(internal):
        X[row, : len(tree.drafts[u])] = tree.drafts[u]
    device = P.device
    Q = torch.as_tensor(np.stack([tree.q[u] for u in internal]), device=device)
    Xd = torch.as_tensor(X, device=device)
    N = torch.as_tensor([tree.n[u] for u in internal], device=device)
    out = torch.empty(tree.size, dtype=torch.int64, device=device)
    Pi = P[internal]
    laws = dv.output_law(verifier, Pi, Q, Xd, sampler, n=N)
    out[internal] = dv.sample_from_laws(laws, torch.rand(len(internal), generator=generator, dtype=torch.float64,
                                                         device=device))
    if leaves:
        out[leaves] = dv.sample_bonus(P[leaves], generator)
    tokens = out.cpu().numpy()  # the one synchronisation of the step
    path, ys = [], []
    u = 0
    while True:
        y = int(tokens[u])
        ys.append(y)
        if not tree.children[u]:
            break
        nxt = next((c for c in tree.children[u] if tree.tokens[c] == y), None)
        path.append((u, nxt))
        if nxt is None or (eos_token_id is not None and y == eos_token_id):
            break
        u = nxt
    seconds = time.perf_counter() - t0
    leaf = u if not tree.children[u] else None
    visits = []
    if path:
        rows = [internal.index(v) for v, _ in path]
        if conditional_acceptance:  # outside the time: the visited rows' acceptance, and p, q on the host
            hit = torch.zeros_like(laws[rows]).scatter_(1, Xd[rows].clamp(min=0), (Xd[rows] >= 0).to(laws.dtype))
            acceptance = (laws[rows] * hit).sum(dim=1).cpu().numpy()
            p_rows = Pi[rows].cpu().numpy()
        for k, (v, nxt) in enumerate(path):
            visit = Visit(v, tree.depth[v], tree.n[v], tree.drafts[v],
                          p_rows[k] if conditional_acceptance else None, tree.q[v], ys[k], nxt is not None)
            if conditional_acceptance:
                visit.acceptance = float(acceptance[k])
            visits.append(visit)
    return WalkResult(ys, sum(v.accepted for v in visits), visits, seconds, leaf)


def _walk_visited(tree, logits, temperature, verifier, sampler, generator, t0, eos_token_id,
                  conditional_acceptance) -> WalkResult:
    """The walk verifying only the nodes it visits, each in a call of its own on the device."""
    import torch

    from ..verifiers import device as dv
    from ..verifiers.device_visit import SEQUENTIAL, draw_inverse_cdf, sample_visited

    device = logits.device
    sequential = device.type == "cpu" and verifier in SEQUENTIAL
    out, visits, laws = [], [], []
    u, leaf = 0, None
    while True:
        p = dv.tempered_torch(logits[u], temperature)
        if not tree.children[u]:
            if sequential:  # the same inverse CDF in fewer operations, one uniform
                u = float(torch.rand(1, generator=generator, dtype=torch.float64)[0])
                out.append(draw_inverse_cdf(torch, p[0], p[0], u))
            else:
                out.append(int(dv.sample_bonus(p, generator)[0].cpu()))
            leaf = u
            break
        q = torch.as_tensor(tree.q[u][None, :], device=device)
        if sequential:  # draws only what it reaches (see device_visit)
            y = sample_visited(verifier, p, q, tree.drafts[u], tree.n[u], generator, sampler)
            law = None
        else:
            drafts = torch.as_tensor(np.asarray(tree.drafts[u], dtype=np.int64)[None, :], device=device)
            law = dv.output_law(verifier, p, q, drafts, sampler, n=torch.as_tensor([tree.n[u]], device=device))
            y = int(dv.sample_from_laws(law, torch.rand(1, generator=generator, dtype=torch.float64,
                                                        device=device))[0].cpu())  # the walk branches on it
        out.append(y)
        nxt = next((c for c in tree.children[u] if tree.tokens[c] == y), None)
        visits.append(Visit(u, tree.depth[u], tree.n[u], tree.drafts[u], None, tree.q[u], y, nxt is not None))
        laws.append((p, q, law))
        if nxt is None or (eos_token_id is not None and y == eos_token_id):
            break
        u = nxt
    seconds = time.perf_counter() - t0
    if conditional_acceptance:  # outside the time
        for visit, (p, q, law) in zip(visits, laws):
            if law is None:
                drafts = torch.as_tensor(np.asarray(visit.drafts, dtype=np.int64)[None, :], device=device)
                law = dv.output_law(verifier, p, q, drafts, sampler, n=torch.as_tensor([visit.n], device=device))
            visit.p = p[0].cpu().numpy()
            visit.acceptance = float(law[0].cpu().numpy()[np.unique(visit.drafts)].sum())
    return WalkResult(out, sum(v.accepted for v in visits), visits, seconds, leaf)


def _walk_host_rows(tree, logits, temperature, verifier, sampler, generator, t0, eos_token_id) -> WalkResult:
    """The optimal verifiers: a walk on the host over the visited rows only (one ``[V]`` copy per visit),
    with a numpy stream seeded from ``generator``."""
    import torch

    from ..verifiers import device as dv
    from ..verifiers import get_verifier

    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=logits.device).cpu())
    rng = np.random.default_rng(seed)
    cls = get_verifier(verifier)
    out, visits = [], []
    u, leaf = 0, None
    while True:
        p = dv.tempered_torch(logits[u], temperature)[0].cpu().numpy()
        if not tree.children[u]:
            out.append(int(sample_from_law(p, 1, rng)[0]))
            leaf = u
            break
        prepared = cls.unchecked(p, tree.q[u], tree.n[u], sampler)
        drafts = tree.drafts[u]
        y = int(prepared.sample(drafts[None, :], rng)[0])
        out.append(y)
        nxt = next((c for c in tree.children[u] if tree.tokens[c] == y), None)
        visit = Visit(u, tree.depth[u], tree.n[u], drafts, p, tree.q[u], y, nxt is not None)
        visit.acceptance = float(prepared.acceptance(drafts[None, :])[0])
        visits.append(visit)
        if nxt is None or (eos_token_id is not None and y == eos_token_id):
            break
        u = nxt
    return WalkResult(out, sum(v.accepted for v in visits), visits, time.perf_counter() - t0, leaf)


__all__ = ["VERIFY_ON", "as_device_rows", "logits_device", "one_thread_on_cpu", "resolve_verify_on",
           "walk_on_device"]
