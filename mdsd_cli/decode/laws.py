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
    x = np.ascontiguousarray(logits, dtype=np.float64)  # rows contiguous: a row's sum the same as a row alone
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


class TemperedRows:
    """``tempered(logits, temperature)``, a row at a time on first use: a tree walk reads the laws of a few of
    its nodes (``traversal`` 9-18 of a ``2x4`` / ``4x3`` tree's 31 / 85, ``select-race`` 7-8), and tempering
    them all cost 0.2-0.5 ms a step at V = 2,380 (~36 ms at V = 152,064 for 85 rows, against ~11 for 18).
    A row is the same floats :func:`tempered` gives; every row's maximum is checked at once, so a bad row is
    refused with :func:`tempered`'s error whether or not the walk reads it. ``rows[i]`` is row ``i``
    (read-only; kept), ``rows[list]`` their stack."""

    def __init__(self, logits, temperature: float):
        x = np.ascontiguousarray(logits, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        top = x.max(axis=1)
        if not np.isfinite(top).all():
            tempered(x, temperature)  # raises its error for the first such row
        self._x, self._top, self._temperature = x, top, temperature
        self._rows: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self._x.shape[0]

    @property
    def vocab_size(self) -> int:
        """V: the rows' width."""
        return self._x.shape[1]

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            k = range(len(self))[int(key)]
            row = self._rows.get(k)
            if row is None:
                row = self._row(k)
                row.flags.writeable = False
                self._rows[k] = row
            return row
        index = np.arange(len(self))[key]  # lists, arrays, slices
        if index.ndim == 0:
            return self[int(index)]
        return np.stack([self[int(i)] for i in index]) if index.size else np.zeros((0, self._x.shape[1]))

    def _row(self, k: int) -> np.ndarray:
        """Row ``k`` as :func:`tempered` computes it (the same operations on the row alone)."""
        x, T = self._x[k], self._temperature
        if T == 0:
            out = np.zeros_like(x)
            out[np.argmax(x)] = 1.0
            return out
        if self._top[k] - x.min() < 700.0 * T:
            z = np.exp((x - self._top[k]) / T)  # no overflow to mind: the errstate is not needed
        else:
            with np.errstate(over="ignore"):  # a tiny T: gaps to the maximum overflow to -inf, exp gives 0
                z = np.exp((x - self._top[k]) / T)
        z /= z.sum()
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


__all__ = ["TemperedRows", "model_rows", "tempered"]
