"""Parametric draft samplers: the rules a drafter can apply to q before drafting.

The drafter sees only ``q``, so a draft law is any rule that turns ``q`` into n
drafts. Two kinds are offered, written ``base:key=value,...`` wherever a
sampler is named (CLI, TOML, library):

* **transforms of q** (any base sampler): ``temperature=τ`` drafts from
  ``q^(1/τ)`` renormalised, ``top_k=k`` from the k most probable tokens of q
  (ties by lower index), ``top_p=π`` from the smallest set of most probable
  tokens whose mass reaches π (nucleus). Applied in that order, each
  renormalised. The sampler is then the base sampler run on the transformed
  law ``q'``: its tuple law, hit probabilities and chain are the base's with
  ``q'``, and the chain order is by ``p/q'`` (a truncated token, ``q' = 0 < p``,
  comes first). ``iid:temperature=0.8`` with target temperature T drafts at
  absolute temperature ``0.8 T``.
* **hybrids** ``hybrid:m=k``: the ``m`` most probable tokens of q (set ``T``,
  ties by lower index) are always drafted, the other ``n - m`` are drawn without
  replacement from ``q`` off ``T``, renormalised. ``m = 0`` is ``wor``,
  ``m = n - 1`` is ``greedy``. ``P(X hits A) = 1`` if ``A`` meets ``T``, else the
  ``wor`` hit probability of ``A`` with ``n - m`` draws from the rest; the chain
  lists the tokens off ``T`` by ``p/q`` and ``T`` last (the ``greedy``
  argument: a set meeting ``T`` scores ``1 - p(A) >= 1``, and off ``T`` the
  ``wor`` exchange condition holds).

Identity values (``temperature=1``, ``top_p=1``) are dropped from the canonical
name, so ``wor:temperature=1`` is ``wor``.
"""

from __future__ import annotations

import math

import numpy as np

from ..distributions import apply_temperature, check_drafts
from ..errors import InputError
from .laws import MAX_TUPLES, DraftSampler, WORSampler, ratio_order, top_tokens

#: Keys every base sampler accepts, with the range each must lie in (for error messages).
TRANSFORM_KEYS = {"temperature": "> 0", "top_k": "an integer >= 1", "top_p": "in (0, 1]"}
#: The key only ``hybrid`` takes.
HYBRID_KEYS = {"m": "an integer in 0..n-1"}


def _rows(q) -> tuple[np.ndarray, bool]:
    arr = np.asarray(q, dtype=np.float64)
    return np.atleast_2d(arr), arr.ndim == 1


def _normalised(Q: np.ndarray) -> np.ndarray:
    return Q / Q.sum(axis=1, keepdims=True)


def truncate_top_k(q, k: int) -> np.ndarray:
    """``q`` restricted to its ``k`` most probable tokens (ties by lower index), renormalised.

    ``[V]`` or ``[N, V]``; ``k >= V`` returns ``q`` unchanged.
    """
    Q, single = _rows(q)
    if k >= Q.shape[1]:
        return q if not single else Q[0]
    out = np.zeros_like(Q)
    for r in range(Q.shape[0]):
        keep = top_tokens(Q[r], k)
        out[r, keep] = Q[r, keep]
    out = _normalised(out)
    return out[0] if single else out


def truncate_top_p(q, top_p: float) -> np.ndarray:
    """Nucleus truncation: the smallest set of most probable tokens (ties by lower index)
    whose mass reaches ``top_p`` (cumulative sums in float64), renormalised.

    A token is kept when the mass of the tokens before it in that order is below
    ``top_p``; ``top_p >= 1`` returns ``q`` unchanged.
    """
    Q, single = _rows(q)
    if top_p >= 1.0:
        return q if not single else Q[0]
    order = np.argsort(-Q, axis=1, kind="stable")
    ranked = np.take_along_axis(Q, order, axis=1)
    before = np.cumsum(ranked, axis=1) - ranked
    keep_ranked = before < top_p * ranked.sum(axis=1, keepdims=True)
    keep = np.zeros(Q.shape, dtype=bool)
    np.put_along_axis(keep, order, keep_ranked, axis=1)
    out = _normalised(np.where(keep, Q, 0.0))
    return out[0] if single else out


class TransformedSampler(DraftSampler):
    """A base sampler run on a transformed draft law ``q'`` (temperature, then top-k, then top-p)."""

    def __init__(self, base: DraftSampler, *, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float = 1.0, name: str):
        self._base = base
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.name = name
        self.kind = base.kind
        self.fixed_n = base.fixed_n
        self.description = f"{base.description}, from q transformed ({name})"

    @property
    def base(self) -> DraftSampler:
        return self._base

    def draft_distribution(self, q):
        out = q
        if self.temperature != 1.0:
            out = apply_temperature(out, self.temperature)
        if self.top_k is not None:
            out = truncate_top_k(out, self.top_k)
        if self.top_p < 1.0:
            out = truncate_top_p(out, self.top_p)
        return out

    def check_n(self, n) -> int:
        return self._base.check_n(n)

    def num_drafts(self, q, n):
        return self._base.num_drafts(self.draft_distribution(q), n)

    def sample(self, q, n, rng, size):
        return self._base.sample(self.draft_distribution(q), n, rng, size)

    def hit_probability_chain(self, q, n, order):
        return self._base.hit_probability_chain(self.draft_distribution(q), n, order)

    def chain_order(self, p, q, n):
        return self._base.chain_order(p, self.draft_distribution(q), n)

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        return self._base.tuple_law(self.draft_distribution(q), n, max_tuples=max_tuples)

    def set_law(self, q, n, *, max_tuples=MAX_TUPLES):
        return self._base.set_law(self.draft_distribution(q), n, max_tuples=max_tuples)

    def estimate_tuples(self, q, n):
        return self._base.estimate_tuples(self.draft_distribution(q), n)


_WOR = WORSampler()


class HybridSampler(DraftSampler):
    """``hybrid:m=k``: the ``m`` most probable tokens of q always, ``n - m`` more drawn without replacement."""

    kind = "hybrid"

    def __init__(self, m: int):
        self.m = int(m)
        self.name = f"hybrid:m={self.m}"
        self.description = f"the {self.m} most probable tokens of q plus n - {self.m} draws without replacement " \
                           "from the rest"

    def check_n(self, n) -> int:
        n = check_drafts(n)
        if self.m > n - 1:
            raise InputError(f"{self.name} needs m in 0..{n - 1} for n = {n} drafts "
                             f"(m = 0 is wor, m = n - 1 is greedy)")
        return n

    def _support_small(self, q, n) -> bool:
        return int(np.count_nonzero(q > 0)) < n

    def top_set(self, q, n) -> np.ndarray:
        """The deterministic drafts: the top ``m`` tokens (the whole support if it has < n tokens)."""
        if self._support_small(q, n):
            return top_tokens(q, int(np.count_nonzero(q > 0)))
        return top_tokens(q, self.m)

    def _rest(self, q, top) -> np.ndarray:
        rest = q.copy()
        rest[top] = 0.0
        return rest / rest.sum()

    def sample(self, q, n, rng, size):
        top = self.top_set(q, n)
        fixed = np.broadcast_to(top, (size, top.size))
        if self._support_small(q, n):
            return fixed.copy()
        drawn = _WOR.sample(self._rest(q, top), n - self.m, rng, size)
        return np.concatenate((fixed, drawn), axis=1).astype(np.int64)

    def hit_probability_chain(self, q, n, order):
        in_order = np.concatenate(([0.0], np.cumsum(q[order])))
        if self._support_small(q, n):  # drafts = the whole support
            return (in_order > 0).astype(np.float64)
        top = self.top_set(q, n)
        H = _WOR.hit_probability_chain(self._rest(q, top), n - self.m, order)
        is_top = np.zeros(q.size, dtype=bool)
        is_top[top] = True
        hits_top = np.concatenate(([False], np.logical_or.accumulate(is_top[order])))
        return np.where(hits_top, 1.0, H)

    def chain_order(self, p, q, n):
        # As for greedy: a set meeting T scores F(A) = 1 - p(A) >= 0 = F(empty set), so T
        # goes last; off T the wor law of the rest satisfies the exchange condition.
        order = ratio_order(p, q)
        if self._support_small(q, n) or self.m == 0:
            return order
        is_top = np.zeros(q.size, dtype=bool)
        is_top[self.top_set(q, n)] = True
        flags = is_top[order]
        return np.concatenate((order[~flags], order[flags]))

    def estimate_tuples(self, q, n):
        support = int(np.count_nonzero(q > 0))
        return 1 if support < n else math.perm(support - self.m, n - self.m)

    def tuple_law(self, q, n, *, max_tuples=MAX_TUPLES):
        self._check_enumerable(q, n, max_tuples)
        top = self.top_set(q, n)
        if self._support_small(q, n):
            return top[None, :].copy(), np.ones(1)
        tuples, prob = _WOR.tuple_law(self._rest(q, top), n - self.m, max_tuples=max_tuples)
        fixed = np.broadcast_to(top, (tuples.shape[0], top.size))
        return np.concatenate((fixed, tuples), axis=1).astype(np.int64), prob


def _number(spec: str, key: str, text: str, valid: str, *, integer: bool):
    try:
        value = float(text)
        if integer:
            if not value.is_integer():
                raise ValueError
            value = int(value)
    except (ValueError, OverflowError):
        raise InputError(f"{key}={text} in sampler {spec!r} is not valid; {key} must be {valid}") from None
    ok = {
        "temperature": lambda v: math.isfinite(v) and v > 0,
        "top_k": lambda v: v >= 1,
        "top_p": lambda v: 0 < v <= 1,
        "m": lambda v: v >= 0,
    }[key](value)
    if not ok:
        raise InputError(f"{key}={text} in sampler {spec!r} is out of range; {key} must be {valid}")
    return value


def format_value(value) -> str:
    """A parameter value as it appears in a canonical spec (shortest round-trip form)."""
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def parse_sampler_spec(spec: str, plain: dict[str, DraftSampler]) -> DraftSampler:
    """The sampler written ``base[:key=value,...]``; ``plain`` maps base names to their samplers.

    Raises :class:`InputError` naming the valid keys and ranges for unknown
    bases or keys, malformed items, repeated keys and out-of-range values.
    """
    from ..errors import unknown_choice

    if not isinstance(spec, str):
        raise unknown_choice("draft sampler", spec, [*plain, "hybrid"])
    base_name, sep, params = spec.strip().partition(":")
    base_name = base_name.strip()
    if base_name not in plain and base_name != "hybrid":
        raise unknown_choice("draft sampler", base_name, [*plain, "hybrid"])
    keys = dict(TRANSFORM_KEYS, **(HYBRID_KEYS if base_name == "hybrid" else {}))
    valid_keys = ", ".join(f"{k} ({v})" for k, v in keys.items())
    values: dict[str, float | int] = {}
    items = params.split(",") if sep else []
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key or not text.strip():
            raise InputError(f"{item.strip()!r} in sampler {spec!r} is not key=value; "
                             f"write e.g. {base_name}:temperature=0.8; keys: {valid_keys}")
        if key not in keys:
            raise InputError(f"unknown key {key!r} in sampler {spec!r}; valid keys for {base_name}: {valid_keys}")
        if key in values:
            raise InputError(f"key {key!r} appears twice in sampler {spec!r}")
        values[key] = _number(spec, key, text.strip(), keys[key], integer=key in ("top_k", "m"))
    if base_name == "hybrid":
        if "m" not in values:
            raise InputError(f"sampler {spec!r} needs m, the number of top tokens always drafted "
                             f"({HYBRID_KEYS['m']}), e.g. hybrid:m=1")
        base = HybridSampler(int(values["m"]))
    else:
        base = plain[base_name]
    temperature = float(values.get("temperature", 1.0))
    top_k = values.get("top_k")
    top_p = float(values.get("top_p", 1.0))
    parts = [f"temperature={format_value(temperature)}"] if temperature != 1.0 else []
    if top_k is not None:
        parts.append(f"top_k={int(top_k)}")
    if top_p < 1.0:
        parts.append(f"top_p={format_value(top_p)}")
    if not parts:
        return base
    name = f"{base.name}{',' if ':' in base.name else ':'}{','.join(parts)}"
    return TransformedSampler(base, temperature=temperature, top_k=None if top_k is None else int(top_k),
                              top_p=top_p, name=name)
