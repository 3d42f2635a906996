"""Next-token laws from model logits at a temperature (the decoding loop's hot path)."""

from __future__ import annotations

import numpy as np

from ..errors import InputError


def tempered(logits, temperature: float) -> np.ndarray:
    """``softmax(logits / T)`` row-wise in float64, ``[M, V]`` (a ``[V]`` row gives ``[1, V]``).

    The same law as :func:`mdsd_cli.distributions.softmax` (``T = 0``: one-hot on
    the arg max, lowest index among ties; ``-inf`` gives probability 0), with
    one cheap check in place of its input validation: a row whose maximum is
    not finite (NaN anywhere, ``+inf``, or all ``-inf``) is refused.
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    top = x.max(axis=1, keepdims=True)
    if not np.isfinite(top).all():
        row = int(np.argmax(~np.isfinite(top[:, 0])))
        raise InputError(f"model logits row {row} has NaN, +inf or only -inf values; a model must give finite "
                         "logits (or -inf for impossible tokens)")
    if temperature == 0:
        out = np.zeros_like(x)
        out[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 1.0
        return out
    with np.errstate(over="ignore"):  # a tiny T (1e-320): gaps to the maximum overflow to -inf, exp gives 0
        z = np.exp((x - top) / temperature)
    z /= z.sum(axis=1, keepdims=True)
    return z


def model_rows(model, logits, rows: int) -> np.ndarray:
    """What ``model`` returned as logits for ``rows`` contexts, as float64 ``[rows, V]``, or an
    :class:`InputError` saying what is wrong: a model that returns one row for several contexts
    would otherwise leave nodes unscored, and strings or meta tensors would raise deep inside."""
    name = getattr(model, "name", "") or type(model).__name__
    V = getattr(model, "vocab_size", None)
    try:
        if hasattr(logits, "detach"):  # a torch tensor, on any device
            logits = logits.detach().float().cpu().numpy()
        x = np.asarray(logits, dtype=np.float64)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        raise InputError(f"model {name} returned logits that are not numbers ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); return a float array [contexts, V]") from None
    if x.ndim == 1 and rows == 1:
        x = x[None, :]
    if x.shape != (rows, V):
        raise InputError(f"model {name} returned logits of shape {tuple(x.shape)} for {rows} context(s); it must "
                         f"return one row of V = {V} per context, shape ({rows}, {V})")
    return x


__all__ = ["model_rows", "tempered"]
