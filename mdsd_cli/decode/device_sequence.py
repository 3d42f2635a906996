"""The sequence-level verifiers (:mod:`.sequence`: ``block``, ``traversal``) on the target's device.

:func:`walk_sequence_on_device` is the torch form of
:meth:`~.sequence.SequenceVerifier.walk`: the target's logits stay where they are
(float64 tempering there, :func:`~mdsd_cli.verifiers.device.tempered_torch`), the
draft laws ``tree.q[u]`` (host arrays from the drafting) go to the device in one
copy per step, and the uniforms come from a ``torch.Generator`` on that device.
It follows the numpy algorithms step for step, so the step's tokens have the
same conditional law given the tree; the random stream is another one, so the
tokens differ from the host walk's for the same seed.

* **block** runs without a branch: the weights ``w_0..w_D`` of the chain are one
  scan (``log w_i = S_i - max_{j <= i} S_j`` with ``S_i`` the cumulative sum of
  ``log P_{j-1}(X_j) / Q_{j-1}(X_j)``, which is ``w_i = min(1, w_{i-1} P/Q)``
  unrolled), the residuals ``r_i`` and ``h_i`` of every depth are computed at
  once, the ``D + 1`` uniforms come from one ``torch.rand`` (``eta_1..eta_D``,
  then the token's), and ``tau = max{i : eta_i < h_i}`` and the token drawn from
  ``tau``'s law are found on the device. Copying ``(tau, token)`` to the host is
  the one synchronisation of a step.
* **traversal** must branch on each accept/reject decision: the weights and the
  parents' residual updates are computed on the device, and the walk
  synchronises exactly (1) once per decision — when every child of a non-root
  node ``u`` has been rejected, one uniform ``eta`` is drawn and the comparison
  ``eta < w_u`` (a bool) is copied to the host — and (2) once at the end, copying
  the emitted token. The uniforms are drawn in the order of the decisions
  (depth-first, children in the tree's order, a node after its whole subtree),
  then one for the token. The root takes no decision (``w = 1``).

A decision compares ``eta < h`` where the numpy ``block`` uses ``<=``: the two
differ on an event of probability 0.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import InputError
from .drafting import DraftTree
from .sequence import accepted_path_result
from .walk import WalkResult

#: The verifiers :func:`walk_sequence_on_device` runs.
DEVICE_SEQUENCE_VERIFIERS = ("block", "traversal")


def walk_sequence_on_device(name: str, tree: DraftTree, logits, temperature: float, sampler: str, generator, *,
                            eos_token_id: int | None = None, visit_rows: bool = True) -> WalkResult:
    """One step of the sequence-level verifier ``name`` on the device of ``logits`` (see the module docstring).

    Parameters
    ----------
    name : str
        ``block`` (a chain ``1xD``) or ``traversal`` (a static tree).
    tree : DraftTree
        The drawn draft tree; ``tree.q[u]`` are the draft laws of its internal nodes (host arrays).
    logits : torch.Tensor
        The target's logits at every node, a float tensor ``[tree.size, V]`` on the device.
    temperature : float
        The target's temperature (``0``: greedy).
    sampler : str
        The draft law of the children: ``iid`` or ``wor`` (traversal removes a rejected token from
        ``Q`` under ``wor``; block ignores it).
    generator : torch.Generator
        On the device of ``logits``; the step's uniforms are drawn from it.
    eos_token_id : int, optional
        The step's tokens are cut after it, as :meth:`~.sequence.SequenceVerifier.walk` does.
    visit_rows : bool
        Copy the tempered rows of the visited nodes to the host as each visit's ``p`` (outside
        ``seconds``, a second copy); without it ``p`` is None.

    Returns
    -------
    WalkResult
        The accepted path's tokens and one bonus/correction token, the number of drafts accepted,
        one :class:`~.walk.Visit` per node on the path with children (``acceptance`` NaN, as the host
        walk leaves it), ``seconds`` (tempering, verification and the copies) and the leaf where a
        bonus token was drawn (None otherwise).
    """
    import torch

    from ..errors import unknown_choice
    from ..verifiers import device as dv

    t0 = time.perf_counter()
    if name not in DEVICE_SEQUENCE_VERIFIERS:
        raise unknown_choice("sequence verifier", name, DEVICE_SEQUENCE_VERIFIERS)
    if name == "traversal" and sampler not in ("iid", "wor"):
        raise InputError(f"traversal verifies iid or wor drafts, not {sampler!r}")
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.shape[0] != tree.size:
        raise InputError(f"logits must be a torch tensor [tree.size, V] = [{tree.size}, V], got "
                         f"{tuple(getattr(logits, 'shape', ())) or type(logits).__name__}")
    device = logits.device
    if not isinstance(generator, torch.Generator):
        raise InputError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator.device.type != device.type:
        raise InputError(f"the generator is on {generator.device} but the logits are on {device}; create it with "
                         f"torch.Generator(device={str(device)!r})")
    P = dv.tempered_torch(logits, temperature)
    if name == "block":
        node, token = _block(tree, P, generator)
    else:
        node, token = _traversal(tree, P, sampler == "wor", generator)
    return accepted_path_result(tree, node, token, eos_token_id, t0,
                                lambda visited: P[visited].cpu().numpy() if visit_rows else [None] * len(visited))


def _block(tree: DraftTree, P, generator) -> tuple[int, int]:
    """Block verification of the chain (module docstring): the accepted node and the token drawn after it."""
    import torch

    from ..verifiers import device as dv
    from .sequence import _chain

    nodes = _chain(tree)
    D = len(nodes) - 1
    device = P.device
    Pc = P if nodes == list(range(tree.size)) else P[nodes]  # [D + 1, V], row i = node at depth i
    uniforms = torch.rand(D + 1, generator=generator, dtype=torch.float64, device=device)  # eta_1..eta_D, token
    if D == 0:  # the root alone: a token from its law
        laws, tau = Pc, torch.zeros((), dtype=torch.int64, device=device)
    else:
        Q = torch.as_tensor(np.stack([tree.q[u] for u in nodes[:-1]]), dtype=torch.float64, device=device)
        X = torch.as_tensor([tree.tokens[u] for u in nodes[1:]], dtype=torch.int64, device=device)
        px = Pc[:-1].gather(1, X[:, None])[:, 0]
        qx = Q.gather(1, X[:, None])[:, 0]
        # w_i = min(1, w_{i-1} P_{i-1}(X_i) / Q_{i-1}(X_i)), w_0 = 1, as a scan in the log domain: a draft the
        # draft law cannot give (q = 0) has weight 0, as in the host's _child_weight (log 0 = -inf stays -inf)
        step = torch.where(qx > 0, torch.log(px) - torch.log(qx), -torch.inf)
        S = torch.cat([torch.zeros(1, dtype=torch.float64, device=device), torch.cumsum(step, 0)])
        w = torch.exp(S - torch.cummax(S, 0).values)  # [D + 1]
        R = torch.clamp(w[:D, None] * Pc[:D] - Q, min=0.0)  # r_i, i = 0..D-1
        rho = R.sum(dim=1)
        denom = rho + 1.0 - w[:D]
        h = torch.cat([torch.where(denom > 0, rho / denom, 1.0), w[D:]])
        h[0] = 1.0
        residual = torch.where(rho[:, None] > 0, R / rho[:, None], Pc[:D])
        laws = torch.cat([residual, Pc[D:]])
        accept = torch.cat([torch.ones(1, dtype=torch.bool, device=device), uniforms[:D] < h[1:]])
        tau = torch.where(accept, torch.arange(D + 1, device=device), 0).amax()
    token = dv.sample_from_laws(laws.index_select(0, tau.reshape(1)), uniforms[D:])
    tau_host, token_host = torch.stack([tau, token[0]]).cpu().tolist()  # the one synchronisation of the step
    return nodes[tau_host], token_host


def _traversal(tree: DraftTree, P, without_replacement: bool, generator) -> tuple[int, int]:
    """Traversal verification (module docstring): the accepted node and the token drawn after it."""
    import torch

    from ..verifiers import device as dv

    device = P.device
    internal = [u for u in range(tree.size) if tree.children[u]]
    Q = (torch.as_tensor(np.stack([tree.q[u] for u in internal]), dtype=torch.float64, device=device)
         if internal else None)  # the draft laws: one copy per step
    row = {u: k for k, u in enumerate(internal)}

    def after_rejection(w, Pu, Qu):
        # _after_rejection of .sequence: the parent's weight and law once a child is rejected
        r = torch.clamp(w * Pu - Qu, min=0.0)
        rho = r.sum()
        w_new = torch.where(rho > 0, rho / (rho + torch.clamp(1.0 - w, min=0.0)), (w >= 1.0).to(torch.float64))
        return w_new, torch.where(rho > 0, r / rho, Pu)

    def traverse(u: int, w):
        """``u``'s subtree with ``u`` at weight ``w`` (a 0-d tensor): ``(node, its law)`` accepted, or None."""
        Pu = P[u]
        Qu = Q[row[u]] if tree.children[u] else None
        for c in tree.children[u]:
            x = tree.tokens[c]
            qx = Qu[x]
            found = traverse(c, torch.where(qx > 0, torch.clamp(w * Pu[x] / qx, max=1.0), 0.0))
            if found is not None:
                return found
            w, Pu = after_rejection(w, Pu, Qu)
            if without_replacement:
                Qu = Qu.clone()
                Qu[x] = 0.0
                total = Qu.sum()
                Qu = torch.where(total > 0, Qu / total, Qu)
        if u == 0:
            return u, Pu
        eta = torch.rand((), generator=generator, dtype=torch.float64, device=device)
        if bool((eta < w).cpu()):  # a synchronisation: the walk branches on this decision
            return u, Pu
        return None

    node, law = traverse(0, torch.ones((), dtype=torch.float64, device=device))
    token = dv.sample_from_laws(law[None, :], torch.rand(1, generator=generator, dtype=torch.float64, device=device))
    return node, int(token.cpu()[0])  # the last synchronisation of the step


__all__ = ["DEVICE_SEQUENCE_VERIFIERS", "walk_sequence_on_device"]
