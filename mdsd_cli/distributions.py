"""Target/draft distribution pairs: validation, temperature, synthetic families.

A *pair* is a target distribution ``p`` (the large model's next-token law) and a
draft distribution ``q`` (the small model's) over the same vocabulary of ``V``
tokens. Pairs come one at a time as ``[V]`` vectors or in batches ``[N, V]``.
Everything is computed in float64. Inputs may be lists, numpy arrays of any
float dtype, or torch tensors of any float dtype on any device (detached, moved
to the CPU and converted; torch is never imported by this module).

Temperature ``T`` turns logits ``l`` into ``softmax(l / T)``; for probability
vectors it is applied as ``p_i^(1/T)`` renormalised (the same thing with
``l = log p``). ``T = 0`` means greedy decoding: a one-hot vector on the arg max,
ties going to the lowest token index (the limit ``T -> 0`` would split the mass
evenly between tied maxima; we follow what greedy decoding does instead).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .errors import InputError, SizeLimitError, check_integer, check_positive, option

#: Rows of float64 (or integer) values must sum to 1 within this tolerance unless
#: ``renormalize=True``; lower precisions get :func:`sum_tolerance`.
SUM_TOLERANCE = 1e-6
#: Confidence multiplier of the probabilistic rounding bound in :func:`sum_tolerance`.
ROUNDING_LAMBDA = 9.0
_FLOAT32_ROUNDOFF = 2.0**-24
_FLOAT16_SUBNORMAL_HALF_STEP = 2.0**-25


def sum_tolerance(unit_roundoff: float, vocab_size: int, *, subnormal_step: float = 0.0) -> float:
    """Tolerance on ``|sum - 1|`` for a probability row of ``V`` values stored with unit roundoff ``u``.

    A row computed as a softmax and stored in a low precision misses 1 by

    * the rounding of each stored entry, at most ``u * sum(p) = u``;
    * the error of the normalising sum of ``V`` terms, accumulated in float32 or wider
      (torch and numpy accumulate float16/bfloat16 reductions in float32): with rounding
      errors modelled as independent and mean zero, at most ``lambda sqrt(V) u_acc``
      with probability at least ``1 - 2V exp(-lambda^2 / 2)`` (Higham and Mary, *A new
      approach to probabilistic rounding error analysis*, SIAM J. Sci. Comput. 2019);
      with ``lambda = 9`` that fails less than once in 10^11 rows at ``V = 10^6``. The
      worst case ``(V - 1) u_acc`` (0.9% at ``V = 152,064``) would let real damage through,
      while the 5e-6 to 2e-5 a float32 ``torch.softmax`` row of that size is off by is well
      inside the bound (2.1e-4);
    * one rounding of the division by that sum, at most ``u_acc``;
    * for float16, entries below its smallest normal number lose up to half the
      subnormal spacing (``2^-25``) each: at most ``V 2^-25``.

    .. math:: \\text{tol} = \\max\\big(10^{-6},\\; u + (\\lambda \\sqrt{V} + 1)\\, u_{acc} + V s\\big)

    float64 rows keep the fixed :data:`SUM_TOLERANCE` (1e-6).
    """
    if unit_roundoff <= 2.0**-53:
        return SUM_TOLERANCE
    accumulate = min(unit_roundoff, _FLOAT32_ROUNDOFF)
    bound = unit_roundoff + (ROUNDING_LAMBDA * math.sqrt(vocab_size) + 1.0) * accumulate
    return max(SUM_TOLERANCE, bound + vocab_size * subnormal_step)


def check_probabilities(
    x, *, name: str = "distribution", renormalize: bool = False, atol: float | None = None
) -> np.ndarray:
    """Validate probability vectors and return them as a float64 ``[N, V]`` array.

    Parameters
    ----------
    x : array_like, shape ``[V]`` or ``[N, V]``
        Probabilities, one distribution per row: a list, a numpy array, or a torch
        tensor of any float dtype on any device (copied to the CPU as float64).
    name : str
        What the array is (``"target"``, ``"draft"``), used in error messages.
    renormalize : bool
        Rescale rows whose sum is off by more than ``atol`` instead of refusing them.
        (Rows within ``atol`` are always rescaled to sum to 1 exactly.)
    atol : float, optional
        Tolerance on ``|sum - 1|``; default: what rounding in the input's dtype can
        explain (:func:`sum_tolerance`: 1e-6 for float64, 2.1e-4 for float32 at
        V = 152,064).

    Raises
    ------
    InputError
        Non-numeric dtype, wrong number of dimensions, empty vocabulary, NaN or
        infinite entries, negative entries, a row summing to zero, or a row sum
        off by more than ``atol`` without ``renormalize``.
    """
    return _check_rows(*_to_numpy(x), name=name, renormalize=renormalize, atol=atol)


def _check_rows(raw: np.ndarray, roundoff: float, stored: str, *, name: str, renormalize: bool,
                atol: float | None) -> np.ndarray:
    if not isinstance(renormalize, (bool, np.bool_)):  # "no" or "false" would read as True
        raise InputError(f"renormalize must be True or False, got {renormalize!r}")
    arr = _as_float_matrix(raw, name=name)
    if atol is None:
        atol = sum_tolerance(roundoff, arr.shape[1],
                             subnormal_step=_FLOAT16_SUBNORMAL_HALF_STEP if stored == "float16" else 0.0)
    with np.errstate(over="ignore"):  # a sum past the float64 range is refused below, without numpy's warning
        sums = arr.sum(axis=1)
    if not np.isfinite(sums).all():  # NaN/inf entries make the row sum non-finite
        bad = ~np.isfinite(arr)
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise InputError(
                f"{name} row {row} has a non-finite value ({arr[row, col]}) at token {col}; "
                "probabilities must be finite numbers"
            )
        if (arr >= 0).all():  # finite entries whose sum overflows: renormalising would divide by inf
            row = int(np.argmax(~np.isfinite(sums)))
            raise InputError(f"{name} row {row} sums past the largest float64 (entries up to "
                             f"{arr[row].max():.3g}); divide it by its largest entry first")
    if arr.min() < 0:
        row, col = (int(i) for i in np.argwhere(arr < 0)[0])
        raise InputError(
            f"{name} row {row} has a negative entry ({arr[row, col]:.3g}) at token {col}; "
            "probabilities must be >= 0"
        )
    zero = sums <= 0
    if zero.any():
        raise InputError(f"{name} row {int(np.argmax(zero))} sums to 0; a distribution needs positive mass")
    off = ~(np.abs(sums - 1.0) <= atol)
    if off.any() and not renormalize:
        row = int(np.argmax(off))
        low = (f" for {stored} rows of V = {arr.shape[1]:,}; {stored} values carry only "
               f"~{_DIGITS[stored]} significant digits" if stored in _DIGITS else "")
        raise InputError(
            f"{name} row {row} sums to {sums[row]:.9g}, not 1 (tolerance {atol:.2g}{low}); "
            f"pass {option('--renormalize', 'renormalize=True')} to rescale"
        )
    if (np.abs(sums - 1.0) <= 1e-12).all():
        return arr  # already normalised to ~1 ulp per token: no copy
    # Rows within tolerance are normalised too, so that every α* is computed on
    # exact distributions (a row summing to 1 + 1e-7 could otherwise give α* > 1).
    return arr / sums[:, None]


def check_pair(p, q, *, renormalize: bool = False) -> tuple[np.ndarray, np.ndarray, bool]:
    """Validate a target/draft pair (lists, numpy arrays or torch tensors; see :func:`check_probabilities`).

    Returns ``(P, Q, batched)`` with ``P`` and ``Q`` float64 ``[N, V]`` arrays and
    ``batched`` telling whether the inputs were ``[N, V]`` (else ``[V]``).
    """
    p_in, q_in = _to_numpy(p), _to_numpy(q)
    p_arr, q_arr = p_in[0], q_in[0]
    if p_arr.ndim != q_arr.ndim:
        raise InputError(
            f"target has shape {p_arr.shape} but draft has shape {q_arr.shape}; "
            "give both as [V] or both as [N, V]"
        )
    P = _check_rows(*p_in, name="target", renormalize=renormalize, atol=None)
    Q = _check_rows(*q_in, name="draft", renormalize=renormalize, atol=None)
    if P.shape != Q.shape:
        raise InputError(
            f"target has shape {tuple(p_arr.shape)} but draft has shape {tuple(q_arr.shape)}; "
            "p and q need the same number of pairs and the same vocabulary size V"
        )
    return P, Q, p_arr.ndim == 2


#: The most drafts per step mdsd takes: far above any decoding step's, and the exact rates cost O(n)
#: (``rrs`` at n = 10^9 would run for an hour).
MAX_DRAFTS = 100_000


def check_drafts(n) -> int:
    """Validate a number of drafts ``n`` (an integer, 1 to :data:`MAX_DRAFTS`)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise InputError(f"number of drafts must be an integer, got {n!r}")
    if n < 1:
        raise InputError(f"number of drafts must be >= 1, got {n}")
    if n > MAX_DRAFTS:
        raise InputError(f"number of drafts {n:,} is above the limit of {MAX_DRAFTS:,}; no decoding step drafts "
                         "that many (and exact rates cost O(n))")
    return int(n)


def check_temperature(temperature) -> float:
    """Validate a temperature: a finite number >= 0 (0 means greedy, one-hot)."""
    if isinstance(temperature, bool):
        raise InputError(f"temperature must be a number, got {temperature!r}")
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise InputError(f"temperature must be a number, got {temperature!r}") from None
    if not math.isfinite(t) or t < 0:
        raise InputError(f"temperature must be finite and >= 0 (0 = greedy), got {temperature!r}")
    return t


#: Significant decimal digits of the low-precision float types, for error messages.
_DIGITS = {"float16": 3, "bfloat16": 2, "float32": 6}


def _is_torch_tensor(x) -> bool:
    # duck typing: torch is never imported here (start-up stays instant without it)
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def _to_numpy(x) -> tuple[np.ndarray, float, str]:
    """``x`` as a numpy array, the unit roundoff of the type it came in (0 if exact) and that type's name.

    Torch tensors are detached and copied to the CPU; bfloat16, which numpy lacks,
    becomes float32 (exactly).
    """
    if _is_torch_tensor(x):
        import sys

        torch = sys.modules["torch"]
        t = x.detach().cpu()
        stored = str(t.dtype).removeprefix("torch.")
        if t.is_complex():
            raise InputError(f"got a tensor of dtype {stored}; expected a floating-point tensor")
        if t.is_floating_point():
            roundoff = float(torch.finfo(t.dtype).eps) / 2
            if t.dtype not in (torch.float16, torch.float32, torch.float64):
                t = t.to(torch.float32 if t.element_size() <= 4 else torch.float64)
        else:
            roundoff = 0.0
        return t.resolve_neg().numpy(), roundoff, stored
    arr = np.asarray(x)
    if np.issubdtype(arr.dtype, np.floating):
        return arr, float(np.finfo(arr.dtype).eps) / 2, str(arr.dtype)
    return arr, 0.0, str(arr.dtype)


def as_rng(rng) -> np.random.Generator:
    """A numpy Generator from what a caller may pass as ``rng``: None (fresh entropy), an int seed, a
    numpy Generator, BitGenerator or SeedSequence, or a ``torch.Generator`` (on any device; one 63-bit
    seed is drawn from it, so the same torch state gives the same draws and the torch stream advances)."""
    if rng is None or isinstance(rng, (np.random.Generator, np.random.BitGenerator, np.random.SeedSequence)):
        return np.random.default_rng(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if int(rng) < 0:
            raise InputError(f"rng must be a seed >= 0 (or a Generator), got {int(rng)}")
        return np.random.default_rng(int(rng))
    if type(rng).__module__.startswith("torch") and type(rng).__name__ == "Generator":
        import torch

        seed = torch.randint(0, 2**63 - 1, (1,), generator=rng, device=rng.device, dtype=torch.int64)
        return np.random.default_rng(int(seed.item()))
    raise InputError(f"rng must be a numpy Generator, an int seed >= 0, a torch.Generator or None; "
                     f"got {type(rng).__name__}")


def as_array(x) -> np.ndarray:
    """``x`` (a list, numpy array or torch tensor on any device) as a numpy array, no dtype change
    except bfloat16 -> float32."""
    return _to_numpy(x)[0]


def _as_float_matrix(x, *, name: str) -> np.ndarray:
    arr = as_array(x)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ) or np.issubdtype(arr.dtype, np.bool_):
        raise InputError(f"{name} has dtype {arr.dtype}; expected a floating-point array")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise InputError(f"{name} has {arr.ndim} dimensions; expected [V] or [N, V]")
    if arr.shape[1] == 0 or arr.shape[0] == 0:
        raise InputError(f"{name} has shape {arr.shape}; need at least one pair and one token")
    return arr.astype(np.float64, copy=False)


def _one_hot_argmax(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x, dtype=np.float64)
    out[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 1.0
    return out


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """Probabilities ``softmax(logits / T)`` in float64, row-wise.

    .. math:: p_i = \\frac{e^{l_i / T}}{\\sum_j e^{l_j / T}}

    ``-inf`` logits give probability 0. ``T = 0`` gives the one-hot vector on the
    arg max (lowest index among ties). Shape in, shape out: ``[V]`` gives ``[V]``,
    ``[N, V]`` gives ``[N, V]``. Logits may be lists, numpy arrays or torch tensors
    of any float dtype and device.

    Raises
    ------
    InputError
        NaN or ``+inf`` logits, a row of only ``-inf``, or an invalid temperature.
    """
    t = check_temperature(temperature)
    raw = as_array(logits)
    out = _softmax_rows(_as_float_matrix(raw, name="logits"), t)
    return out[0] if raw.ndim == 1 else out


def _softmax_rows(arr: np.ndarray, t: float) -> np.ndarray:
    if np.isnan(arr).any() or np.isposinf(arr).any():
        row = int(np.argwhere(np.isnan(arr) | np.isposinf(arr))[0, 0])
        raise InputError(f"logits row {row} contains NaN or +inf; logits must be finite or -inf")
    top = arr.max(axis=1, keepdims=True)
    if np.isneginf(top).any():
        raise InputError(f"logits row {int(np.argmax(np.isneginf(top)))} is all -inf; nothing to sample")
    if t == 0:
        return _one_hot_argmax(arr)
    with np.errstate(over="ignore"):  # logits more than the float64 range apart: exp(-inf) = 0
        shifted = (arr - top) / t
        if t > 1.0:  # (l - max) overflowed but (l - max) / T may not: divide first there
            lost = np.isneginf(shifted) & np.isfinite(arr)
            if lost.any():
                shifted = np.where(lost, arr / t - top / t, shifted)
    z = np.exp(shifted)
    return z / z.sum(axis=1, keepdims=True)


def apply_temperature(probs, temperature: float) -> np.ndarray:
    """Re-temper probability rows: ``p_i^(1/T)`` renormalised (``T = 1`` is a no-op).

    Zero probabilities stay zero; ``T = 0`` gives the one-hot arg max. Shape in,
    shape out (``[V]`` or ``[N, V]``), float64.
    """
    t = check_temperature(temperature)
    raw = as_array(probs)
    arr = _as_float_matrix(raw, name="probabilities")
    # the rows' scale does not matter (T != 1 renormalises), their signs and finiteness do, at T = 1 too
    low, high = arr.min(axis=1), arr.max(axis=1)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        row = int(np.argmax(~np.isfinite(arr).all(axis=1)))
        raise InputError(f"probabilities row {row} has a non-finite value; probabilities must be finite numbers")
    if (low < 0).any():
        raise InputError(f"probabilities row {int(np.argmax(low < 0))} has a negative entry "
                         f"({float(low[np.argmax(low < 0)]):.3g}); probabilities must be >= 0")
    if (high <= 0).any():
        raise InputError(f"probabilities row {int(np.argmax(high <= 0))} sums to 0; a distribution needs positive mass")
    if t != 1.0:
        with np.errstate(divide="ignore"):
            arr = _softmax_rows(np.log(arr), t)
    return arr[0] if raw.ndim == 1 else arr


def physical_memory() -> int | None:
    """Bytes of physical memory, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, or v1), or None when there is none."""
    candidates = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":  # v2
                candidates.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max")
            elif "memory" in controllers.split(","):  # v1
                candidates.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    candidates += [Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")]
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" or v1's huge number: no limit
            return int(text)
        return None
    return None


def _address_space_left() -> int | None:
    """Bytes this process may still map under ``ulimit -v`` (RLIMIT_AS) or RLIMIT_DATA, or None when unlimited."""
    try:
        import resource
    except ImportError:  # pragma: no cover - non-POSIX
        return None
    limits = []
    for kind in ("RLIMIT_AS", "RLIMIT_DATA"):
        soft, _ = resource.getrlimit(getattr(resource, kind, resource.RLIMIT_AS))
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    if not limits:
        return None
    used = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                used = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return max(0, min(limits) - used)


def memory_limits() -> list[tuple[str, float, bool]]:
    """What bounds the memory mdsd may use: ``(description, bytes, per_process)`` for physical memory, a
    cgroup limit (containers, CI), and ``ulimit -v`` (what this process may still map)."""
    limits = []
    total = physical_memory()
    if total is not None:
        limits.append(("this machine has", float(total), False))
    cgroup = _cgroup_limit()
    if cgroup is not None and (total is None or cgroup < total):
        limits.append(("the cgroup memory limit is", float(cgroup), False))
    left = _address_space_left()
    if left is not None:
        limits.append(("ulimit -v leaves this process", float(left), True))
    return limits


def check_memory(need: float, what: str, remedy: str, *, processes: int = 1) -> None:
    """Refuse (before allocating) work that needs more than 80% of the memory it may use.

    ``need`` is the peak of one process, in bytes; ``processes`` of them run at once (``--jobs``).
    The limits are physical memory, a cgroup limit (containers) and ``ulimit -v`` (per process):
    see :func:`memory_limits`. The message reads ``"<what> would need about X GiB ...; <remedy>"``.
    """
    processes = max(1, int(processes))
    for description, limit, per_process in memory_limits():
        total = need if per_process else need * processes
        if total > 0.8 * limit:
            each = f" ({processes} processes at {need / 2**30:.1f} GiB each)" if processes > 1 and not per_process \
                else ""
            fewer = "; or fewer --jobs" if processes > 1 and not per_process else ""
            raise SizeLimitError(f"{what} would need about {total / 2**30:.1f} GiB{each} ({description} "
                                 f"{limit / 2**30:.1f} GiB); {remedy}{fewer}")


def check_allocation(num_pairs: int, vocab_size: int, *, arrays: int = 4) -> None:
    """Refuse to allocate ``arrays`` float64 ``[num_pairs, vocab_size]`` arrays if they
    would not fit in physical memory."""
    check_memory(float(num_pairs) * float(vocab_size) * 8.0 * arrays, f"{num_pairs} pairs x V={vocab_size}",
                 "use fewer pairs or a smaller vocabulary")


@dataclass(frozen=True)
class PairBatch:
    """A batch of target/draft pairs over one vocabulary.

    Attributes
    ----------
    target, draft : ndarray, float64 ``[N, V]``
        Probabilities at ``temperature``.
    target_logits, draft_logits : ndarray or None
        Logits the probabilities came from, kept so that any temperature can be
        applied later.
    temperature : float
        Temperature at which ``target`` and ``draft`` are given.
    source : str
        Where the pairs came from (a file path or a synthetic spec).
    metadata : dict
        Free-form provenance (generator parameters, model names...).
    labels : dict of str to ndarray ``[N]``
        Per-pair columns carried along (prompt id, position...).
    """

    target: np.ndarray
    draft: np.ndarray
    target_logits: np.ndarray | None = None
    draft_logits: np.ndarray | None = None
    temperature: float = 1.0
    source: str = ""
    metadata: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)

    @property
    def num_pairs(self) -> int:
        return int(self.target.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.target.shape[1])

    def at_temperature(self, temperature: float) -> PairBatch:
        """The same pairs at another temperature (from the logits when present).

        Without logits the stored probabilities are taken as temperature 1.
        """
        t = check_temperature(temperature)
        if self.target_logits is not None and self.draft_logits is not None:
            return replace(
                self,
                target=softmax(self.target_logits, t),
                draft=softmax(self.draft_logits, t),
                temperature=t,
            )
        if self.temperature != 1.0:
            raise InputError("pairs without logits can only be re-tempered from temperature 1")
        return replace(
            self,
            target=apply_temperature(self.target, t),
            draft=apply_temperature(self.draft, t),
            temperature=t,
        )

    def select(self, rows) -> PairBatch:
        """A sub-batch with the given row indices."""
        pick = lambda a: None if a is None else a[rows]  # noqa: E731
        return replace(
            self,
            target=self.target[rows],
            draft=self.draft[rows],
            target_logits=pick(self.target_logits),
            draft_logits=pick(self.draft_logits),
            labels={k: v[rows] for k, v in self.labels.items()},
        )


def pairs_from_probabilities(target, draft, *, renormalize: bool = False, source: str = "",
                             metadata: dict | None = None) -> PairBatch:
    """Validate probability arrays and wrap them as a :class:`PairBatch`."""
    P, Q, _ = check_pair(target, draft, renormalize=renormalize)
    return PairBatch(target=P, draft=Q, source=source, metadata=dict(metadata or {}))


def pairs_from_logits(target_logits, draft_logits, *, temperature: float = 1.0, source: str = "",
                      metadata: dict | None = None) -> PairBatch:
    """Validate logit arrays and wrap them as a :class:`PairBatch` at ``temperature``."""
    tl = _as_float_matrix(target_logits, name="target_logits")
    dl = _as_float_matrix(draft_logits, name="draft_logits")
    if tl.shape != dl.shape:
        raise InputError(
            f"target_logits has shape {tl.shape} but draft_logits has shape {dl.shape}; "
            "they need the same number of pairs and the same vocabulary size V"
        )
    t = check_temperature(temperature)
    return PairBatch(
        target=softmax(tl, t), draft=softmax(dl, t), target_logits=tl, draft_logits=dl,
        temperature=t, source=source, metadata=dict(metadata or {}),
    )


def _check_synthetic_size(num_pairs: int, vocab_size: int, seed: int) -> tuple[int, int, int]:
    """The sizes and seed of a synthetic family as ints, or an :class:`InputError` (2.5 pairs, a seed "1")."""
    num_pairs = check_integer(num_pairs, "number of pairs", 1)
    vocab_size = check_integer(vocab_size, "vocabulary size", 1)
    seed = check_integer(seed, "seed", 0)
    check_allocation(num_pairs, vocab_size, arrays=6)
    return num_pairs, vocab_size, seed


def _row_generators(seed: int, num_pairs: int) -> list[np.random.Generator]:
    # One independent stream per pair: pair i is the same whatever num_pairs is.
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(num_pairs)]


def dirichlet_pairs(num_pairs: int, vocab_size: int, *, concentration: float = 1.0,
                    seed: int = 0) -> PairBatch:
    """Independent Dirichlet target and draft vectors.

    ``p ~ Dir(c 1_V)`` and ``q ~ Dir(c 1_V)`` independently for every pair;
    small ``c`` gives peaked vectors, large ``c`` nearly uniform ones. Pair ``i``
    depends only on ``seed`` and ``i``.
    """
    num_pairs, vocab_size, seed = _check_synthetic_size(num_pairs, vocab_size, seed)
    concentration = check_positive(concentration, "Dirichlet concentration")
    p = np.empty((num_pairs, vocab_size))
    q = np.empty((num_pairs, vocab_size))
    alpha = np.full(vocab_size, float(concentration))
    for i, rng in enumerate(_row_generators(seed, num_pairs)):
        p[i] = _dirichlet(rng, alpha)
        q[i] = _dirichlet(rng, alpha)
    return PairBatch(
        target=p, draft=q, source=f"dirichlet(pairs={num_pairs}, vocab={vocab_size}, "
        f"concentration={concentration:g}, seed={seed})",
        metadata={"family": "dirichlet", "pairs": num_pairs, "vocab": vocab_size,
                  "concentration": concentration, "seed": seed},
    )


def _dirichlet(rng: np.random.Generator, alpha: np.ndarray) -> np.ndarray:
    g = rng.standard_gamma(alpha)
    s = g.sum()
    if s <= 0:  # all gammas underflowed (tiny concentration): fall back to a one-hot draw
        g = np.zeros_like(alpha)
        g[rng.integers(alpha.size)] = 1.0
        s = 1.0
    return g / s


def zipf_pairs(num_pairs: int, vocab_size: int, *, exponent: float = 1.0, noise: float = 1.0,
               temperature: float = 1.0, seed: int = 0) -> PairBatch:
    """Perturbed Zipf logits: a language-model-like target and a noisy draft.

    Target logits are Zipf-shaped over a random ranking of the vocabulary,
    ``l_i = -s log(rank_i)`` (ranks 1..V), and the draft logits are
    ``l_i + noise * N(0, 1)``; both become probabilities through
    ``softmax(l / T)``. The logits are kept, so the batch can be re-tempered.
    """
    num_pairs, vocab_size, seed = _check_synthetic_size(num_pairs, vocab_size, seed)
    exponent = check_positive(exponent, "Zipf exponent")
    noise = check_positive(noise, "draft noise scale", zero=True)
    base = -float(exponent) * np.log(np.arange(1, vocab_size + 1, dtype=np.float64))
    tl = np.empty((num_pairs, vocab_size))
    dl = np.empty((num_pairs, vocab_size))
    for i, rng in enumerate(_row_generators(seed, num_pairs)):
        tl[i] = base[rng.permutation(vocab_size)]
        dl[i] = tl[i] + noise * rng.standard_normal(vocab_size)
    return pairs_from_logits(
        tl, dl, temperature=temperature,
        source=f"zipf(pairs={num_pairs}, vocab={vocab_size}, exponent={exponent:g}, "
        f"noise={noise:g}, seed={seed})",
        metadata={"family": "zipf", "pairs": num_pairs, "vocab": vocab_size,
                  "exponent": exponent, "noise": noise, "seed": seed},
    )


#: Synthetic families by CLI name.
SYNTHETIC_FAMILIES = {"dirichlet": dirichlet_pairs, "zipf": zipf_pairs}
