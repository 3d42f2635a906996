"""Input checks of the device verifiers (:mod:`.device`): shapes, dtypes and devices (always: they are
metadata), and with ``validate=True`` the values, in one host synchronisation; each problem is one line
naming the tensor and the row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..distributions import sum_tolerance
from ..errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def float_rows(torch, x, name: str, device=None) -> torch.Tensor:
    """``x`` as a float64 ``[B, V]`` tensor on its own device; :class:`InputError` naming ``name`` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{name} must be a torch tensor [B, V], got {type(x).__name__}; use torch.as_tensor")
    if not x.is_floating_point():
        raise InputError(f"{name} has dtype {str(x.dtype).removeprefix('torch.')}; expected a floating-point tensor "
                         "of probabilities")
    if x.ndim != 2 or x.shape[1] == 0:
        raise InputError(f"{name} must be [B, V] with V >= 1 (one row per node), got shape {tuple(x.shape)}")
    if device is not None and x.device != device:
        raise InputError(f"{name} is on {x.device} but p is on {device}; put p, q, drafts and the generator "
                         "on one device")
    if x.device.type == "mps":
        raise InputError(f"{name} is on mps, which has no float64; move the tensors to cpu or cuda")
    return x.detach().to(torch.float64).contiguous()


def draft_rows(torch, drafts, B: int, device) -> torch.Tensor:
    if not isinstance(drafts, torch.Tensor):
        raise InputError(f"drafts must be a torch tensor [B, n] of token ids, got {type(drafts).__name__}")
    if drafts.is_floating_point() or drafts.is_complex() or drafts.dtype == torch.bool:
        raise InputError(f"drafts has dtype {str(drafts.dtype).removeprefix('torch.')}; expected integer token ids")
    if drafts.ndim != 2 or drafts.shape[0] != B or drafts.shape[1] == 0:
        raise InputError(f"drafts must be [B, n] with one row per node (B = {B}) and n >= 1, got shape "
                         f"{tuple(drafts.shape)}")
    if drafts.device != device:
        raise InputError(f"drafts is on {drafts.device} but p is on {device}; put p, q, drafts and the generator "
                         "on one device")
    return drafts.detach().to(torch.int64).contiguous()


def draft_counts(torch, n, B: int, width: int, device, fixed_n: int | None) -> torch.Tensor:
    """The number of drafts each row's sampler was asked for, as int64 ``[B]``."""
    if n is None:
        n = width
    if isinstance(n, torch.Tensor):
        if n.is_floating_point() or n.is_complex() or n.dtype == torch.bool or tuple(n.shape) != (B,):
            raise InputError(f"n must be an int or an integer tensor [B] (B = {B}), got dtype "
                             f"{str(n.dtype).removeprefix('torch.')} and shape {tuple(n.shape)}")
        if n.device != device:
            raise InputError(f"n is on {n.device} but p is on {device}; put every tensor on one device")
        return n.to(torch.int64)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= width:
        raise InputError(f"n must be an integer in 1..{width} (the width of drafts), got {n!r}")
    if fixed_n is not None and n != fixed_n:
        raise InputError(f"this verifier is defined for n = {fixed_n} only, got n = {n}")
    return torch.full((B,), n, dtype=torch.int64, device=device)


def check_generator(torch, generator, device) -> None:
    if not isinstance(generator, torch.Generator):
        raise InputError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    gen = generator.device
    if gen.type != device.type or (gen.index is not None and device.index is not None and gen.index != device.index):
        raise InputError(f"the generator is on {gen} but p is on {device}; create it with "
                         f"torch.Generator(device={str(device)!r})")


def validate_values(torch, spec, fixed_n, p_in, q_in, P, Q, Qd, X, N) -> None:
    """Value checks (one synchronisation): raise the first problem found, naming the tensor and the row."""
    B, V = P.shape
    k = X.shape[1]
    kind = spec.kind
    live = X >= 0
    xs = X.clamp(0, V - 1)
    support = (Qd > 0).sum(dim=1)
    expected = N if kind == "iid" else torch.minimum(N, support)
    checks = {}
    for label, raw, rows in (("p", p_in, P), ("q", q_in, Q)):
        checks[f"{label} values"] = ~(torch.isfinite(rows).all(dim=1) & (rows >= 0).all(dim=1))
        tol = sum_tolerance(float(torch.finfo(raw.dtype).eps) / 2, V)
        checks[f"{label} sums"] = ~((rows.sum(dim=1) - 1.0).abs() <= tol)
    checks["n"] = (N < 1) | (N > k) | ((N != fixed_n) if fixed_n is not None else torch.zeros_like(N, dtype=torch.bool))
    checks["ids"] = ((X < -1) | (X >= V)).any(dim=1)
    checks["padding"] = (live[:, 1:] & ~live[:, :-1]).any(dim=1) if k > 1 else torch.zeros_like(N, dtype=torch.bool)
    checks["width"] = live.sum(dim=1) != expected
    qx = torch.gather(Qd, 1, xs)
    checks["impossible"] = (live & (qx <= 0)).any(dim=1)
    no = torch.zeros_like(N, dtype=torch.bool)
    if kind in ("wor", "greedy", "hub", "topk", "hybrid"):
        same = (X[:, :, None] == X[:, None, :]) & live[:, :, None] & live[:, None, :]
        checks["repeats"] = torch.triu(same, diagonal=1).any(dim=2).any(dim=1)
    else:
        checks["repeats"] = no
    checks["top"] = no
    if kind in ("greedy", "topk"):
        tops = torch.minimum(N, support) if kind == "topk" else torch.where(support < N, support, N - 1)
        token = torch.arange(V, device=X.device)
        for j in range(k):  # the rank of draft j among q's tokens (ties by lower index) must be j
            qj, xj = qx[:, j : j + 1], xs[:, j : j + 1]
            rank = ((Qd > qj) | ((Qd == qj) & (token[None, :] < xj))).sum(dim=1)
            checks["top"] = checks["top"] | ((j < tops) & (rank != j))
    elif kind == "hub":
        hub = torch.argmax(Qd, dim=1)
        checks["top"] = ~((X == hub[:, None]) & live).any(dim=1)
    flags = torch.stack(list(checks.values()), dim=1).cpu()  # the one synchronisation
    if not bool(flags.any()):
        return
    column = int(flags.any(dim=0).to(torch.int8).argmax())
    what = list(checks)[column]
    row = int(flags[:, column].to(torch.int8).argmax())
    raise InputError(problem_message(torch, what, row, spec, fixed_n, P, Q, Qd, X, N))


def problem_message(torch, what: str, row: int, spec, fixed_n, P, Q, Qd, X, N) -> str:
    """The message for the failed check ``what`` at row ``row`` (host copies of that row only)."""
    V = P.shape[1]
    d = [int(v) for v in X[row].cpu()]
    n = int(N[row].cpu())
    live = [v for v in d if v >= 0]
    if what.endswith("values"):
        return (f"{what.split()[0]} row {row} has a NaN, infinite or negative entry; rows must be "
                "probabilities")
    if what.endswith("sums"):
        rows = P if what.startswith("p") else Q
        return (f"{what.split()[0]} row {row} sums to {float(rows[row].sum().cpu()):.9g}, not 1; "
                "renormalise the rows first")
    if what == "n":
        return f"n for row {row} is {n}; it must lie in 1..{X.shape[1]} (the width of drafts)" + (
            f" and equal {fixed_n}" if fixed_n else "")
    if what == "ids":
        bad = next(v for v in d if v < -1 or v >= V)
        return (f"drafts row {row} holds token id {bad}, outside 0..{V - 1}; token ids must index the vocabulary "
                "(-1 pads a row on the right)")
    if what == "padding":
        return f"drafts row {row} has -1 padding before a token id; pad on the right only"
    if what == "width":
        support = int((Qd[row] > 0).sum().cpu())
        want = n if spec.kind == "iid" else min(n, support)
        return (f"drafts row {row} has {len(live)} drafts, but {spec.name} drafts of n = {n} from this q have "
                f"{want}; pass each row's n (n=tensor) and pad with -1 on the right")
    if what == "impossible":
        qx = Qd[row].cpu()
        bad = next(v for v in live if not float(qx[v]) > 0)
        return f"draft token {bad} of drafts row {row} has draft probability 0; it cannot have been drafted"
    tuple_text = tuple(live)
    if what == "repeats":
        return (f"draft tuple {tuple_text} (row {row}) repeats a token, which {spec.name} drafts never do; verify "
                "drafts drawn with replacement with an iid verifier (rrs, kseq, optimal-iid)")
    if spec.kind == "hub":
        hub = int(torch.argmax(Qd[row]).cpu())
        return (f"draft tuple {tuple_text} (row {row}) cannot come from {spec.name} drafts: the hub, token {hub} "
                "(the most likely under q), is not among them")
    return (f"draft tuple {tuple_text} (row {row}) cannot come from {spec.name} drafts: they begin with q's most "
            "likely tokens in decreasing order (ties by lower index)")

__all__ = ["check_generator", "draft_counts", "draft_rows", "float_rows", "problem_message", "validate_values"]
