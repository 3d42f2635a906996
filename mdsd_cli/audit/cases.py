"""The (p, q) cases an audit runs on: a built-in adversarial battery, random pairs, or pairs from a file.

The battery puts each case where verifiers are known to break:

=====================  ===================================================================
``peaked-target``      p(top) = 0.99905 > 0.999 and q(top) = 0.99999: almost every draft is
                       the top token and the other tokens come only from its rejections
                       (a shortcut accepting a token with p > 0.999 loses them all)
``draft-near-one``     q = 1 - 1e-9 on one token: iid drafts repeat it; drafts without
                       replacement renormalise a mass of 1e-9
``repeated-drafts``    half of q on one token that p rarely wants: iid drafts repeat it and
                       the residual must be updated at every repeat
``draft-zeros``        q = 0 where p > 0: the residual alone must produce those tokens
``target-zeros``       p = 0 where q > 0: those drafts must always be rejected
``ties``               equal values in q, in p and in p/q
``one-hot-target``     p one-hot (any other output is impossible)
``one-hot-draft``      q one-hot (every draft is the same token)
``float-floor``        masses of 2^-983 (1.6e-296) in float64, 2^-87 in float32: a token
                       p wants half the time that is almost never drafted, and the reverse
``vocab-at-most-n``    V = n (n >= 2): drafts without replacement take the whole support
``dirichlet-5``        two generic pairs (seeded Dirichlet draws, V = 5 and V = 10)
``dirichlet-10``
=====================  ===================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..distributions import PairBatch, check_pair
from ..errors import InputError


@dataclass(frozen=True)
class AuditCase:
    """One target/draft pair to audit a verifier on.

    Attributes
    ----------
    name : str
        A short label (``peaked-target``, ``pair 3``).
    p, q : ndarray float64 ``[V]``
        Target and draft distributions (validated, summing to 1).
    purpose : str
        What the case is for (the battery says which bugs it exposes).
    """

    name: str
    p: np.ndarray
    q: np.ndarray
    purpose: str = ""

    @property
    def vocab_size(self) -> int:
        return int(self.p.size)


def make_case(name: str, p, q, purpose: str = "", *, renormalize: bool = False) -> AuditCase:
    """An :class:`AuditCase` from any ``[V]`` pair (lists, numpy arrays, torch tensors), validated."""
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    if batched:
        raise InputError(f"case {name!r}: give p and q of shape [V], not a batch")
    return AuditCase(name, P[0].copy(), Q[0].copy(), purpose)


def _normalised(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


def battery_cases(n: int, *, dtype="float64") -> list[AuditCase]:
    """The built-in adversarial cases for ``n`` drafts (see the module docstring).

    ``dtype`` is the float type the audited function receives; the ``float-floor``
    case puts its tiny masses near that type's smallest normal number.
    """
    # 2^-983 in float64, 2^-87 in float32, 2^-13 in float16 (whose floor is 2^-14)
    tiny = float(np.finfo(np.dtype(dtype)).tiny) * (2.0 if np.dtype(dtype) == np.float16 else 2.0**39)
    cases = [
        ("peaked-target", [0.99905, 4e-4, 3e-4, 2e-4, 5e-5], [0.99999, 4e-6, 3e-6, 2e-6, 1e-6],
         "p(top) > 0.999; the other tokens come only from rejections of the top draft"),
        ("draft-near-one", [0.4, 0.3, 0.15, 0.1, 0.05], [1 - 1e-9, 4e-10, 3e-10, 2e-10, 1e-10],
         "q within 1e-9 of 1 on one token: repeated iid drafts, a renormalised 1e-9 without replacement"),
        ("repeated-drafts", [0.05, 0.35, 0.25, 0.15, 0.1, 0.1], [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
         "iid drafts repeat the token q favours; the residual must change at every repeat"),
        ("draft-zeros", [0.3, 0.2, 0.1, 0.25, 0.15], [0.5, 0.3, 0.2, 0.0, 0.0],
         "q = 0 where p > 0: only the residual produces tokens 3 and 4"),
        ("target-zeros", [0.6, 0.4, 0.0, 0.0, 0.0], [0.1, 0.2, 0.3, 0.25, 0.15],
         "p = 0 where q > 0: drafts 2, 3, 4 must never be output"),
        ("ties", [0.3, 0.1, 0.2, 0.2, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.1, 0.1],
         "ties in q, in p and in p/q"),
        ("one-hot-target", [0.0, 0.0, 1.0, 0.0], [0.4, 0.3, 0.2, 0.1],
         "p one-hot: any output other than token 2 is impossible"),
        ("one-hot-draft", [0.5, 0.2, 0.2, 0.1], [0.0, 1.0, 0.0, 0.0],
         "q one-hot: every draft is token 1"),
        ("float-floor", [0.55, 0.45, tiny, tiny], [tiny, 0.5, 0.5, tiny],
         "masses near the float floor: token 0 wanted half the time, almost never drafted"),
    ]
    out = [make_case(name, _normalised(p), _normalised(q), purpose) for name, p, q, purpose in cases]
    if n >= 2:
        V = n
        ranks = np.arange(1, V + 1, dtype=np.float64)
        out.append(make_case("vocab-at-most-n", _normalised(ranks), _normalised(ranks[::-1] ** 2),
                             f"V = n = {n}: drafts without replacement take the whole support"))
    rng = np.random.default_rng(20)
    for V, concentration in ((5, 1.0), (10, 0.5)):
        p, q = rng.dirichlet(np.full(V, concentration)), rng.dirichlet(np.full(V, concentration))
        out.append(make_case(f"dirichlet-{V}", p, q, f"a generic pair (Dirichlet {concentration:g}, V = {V})"))
    return out


def random_cases(count: int, *, seed: int = 0, vocab_max: int = 8) -> list[AuditCase]:
    """``count`` random small pairs (V from 2 to ``vocab_max``), some peaked, some with zeros in p or q."""
    if count < 1:
        raise InputError(f"the number of random cases must be >= 1, got {count}")
    if vocab_max < 2:
        raise InputError(f"the largest random vocabulary must be >= 2, got {vocab_max}")
    rng = np.random.default_rng([seed, 20])
    out = []
    for i in range(count):
        V = int(rng.integers(2, vocab_max + 1))
        p = rng.dirichlet(np.full(V, rng.choice([0.2, 0.5, 1.0, 3.0])))
        q = rng.dirichlet(np.full(V, rng.choice([0.2, 0.5, 1.0, 3.0])))
        if rng.random() < 0.3:
            q[rng.integers(V)] = 0.0
        if rng.random() < 0.2:
            p[rng.integers(V)] = 0.0
        if p.sum() <= 0 or q.sum() <= 0:
            p, q = np.full(V, 1.0 / V), np.full(V, 1.0 / V)
        out.append(make_case(f"random-{i}", _normalised(p), _normalised(q), f"random pair, V = {V}"))
    return out


def pair_cases(pairs, *, prefix: str = "pair") -> list[AuditCase]:
    """One case per pair of a :class:`~mdsd_cli.distributions.PairBatch`, named ``{prefix}-{index}``
    (the index is the pair's ``pair`` label when it has one)."""
    index = pairs.labels.get("pair", np.arange(pairs.num_pairs))
    return [AuditCase(f"{prefix}-{int(index[i])}", pairs.target[i], pairs.draft[i], f"from {pairs.source or 'pairs'}")
            for i in range(pairs.num_pairs)]


def resolve_cases(cases, n: int, *, seed: int = 0, count: int = 10, dtype: str = "float64") -> list[AuditCase]:
    """``"battery"``, ``"random"``, a :class:`~mdsd_cli.distributions.PairBatch`, or a sequence of
    :class:`AuditCase` or ``(p, q)`` pairs, as a list of cases."""
    if isinstance(cases, str):
        if cases == "battery":
            return battery_cases(n, dtype=dtype)
        if cases == "random":
            return random_cases(count, seed=seed)
        raise InputError(f"unknown cases {cases!r}; give 'battery', 'random', pairs or a list of (p, q)")
    if isinstance(cases, PairBatch):
        return pair_cases(cases)
    out = []
    for i, c in enumerate(cases):
        out.append(c if isinstance(c, AuditCase) else make_case(f"case-{i}", *c))
    if not out:
        raise InputError("no cases to audit")
    return out
