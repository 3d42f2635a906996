"""A seeded synthetic model pair at any vocabulary size: context-hashed perturbed-Zipf logits.

The target's logits after a context are Zipf-shaped over a ranking of the
vocabulary that depends on the last ``order`` tokens of the context,

.. math:: l_i(c) = -s \\log(1 + r_c(i)), \\qquad r_c(i) = \\pi\\big((a_c i + b_c) \\bmod V\\big),

with ``pi`` a random permutation of ``0..V-1`` drawn once from the seed and
``(a_c, b_c)`` (``a_c`` a unit mod V) hashed from the seed and the context, so
every context gets its own ranking at the cost of one gather. The draft's
logits add seeded noise re-indexed the same way,
``l_i(c) + sigma * eps((a'_c i + b'_c) mod V)`` with ``eps ~ N(0, 1)`` drawn once.
So a draft/target pair looks like the ``zipf`` pairs of
:func:`mdsd_cli.distributions.zipf_pairs` at every context, costs ``O(V)`` per
context with no model weights, and runs at V = 152,064 (the pair behind the
decoding benchmarks). Everything depends only on ``seed`` and the context.
"""

from __future__ import annotations

import numpy as np

from ..errors import check_integer, check_positive
from .base import NextTokenModel, Prompt


def _units(V: int) -> np.ndarray:
    """The multipliers ``a`` with ``gcd(a, V) = 1`` (so ``i -> a i + b mod V`` is a permutation)."""
    if V == 1:
        return np.array([1], dtype=np.int64)
    a = np.arange(1, V, dtype=np.int64)
    return a[np.gcd(a, V) == 1]


class SyntheticModel(NextTokenModel):
    """Context-hashed perturbed-Zipf logits (see the module docstring).

    Parameters
    ----------
    vocab_size : int
    seed : int
        Seeds the base ranking, the noise and the context hash.
    order : int
        The logits depend on the last ``order`` tokens of the context.
    exponent : float
        Zipf exponent ``s``.
    noise : float
        ``sigma``: 0 for the target, > 0 for a draft.
    """

    def __init__(self, vocab_size: int, *, seed: int = 0, order: int = 2, exponent: float = 1.0,
                 noise: float = 0.0, name: str | None = None):
        self.vocab_size = V = check_integer(vocab_size, "vocabulary size", 1)  # 2.5 would be cut to 2
        self.seed, self.order = check_integer(seed, "seed", 0), check_integer(order, "context order", 0)
        self.exponent = check_positive(exponent, "Zipf exponent")
        self.noise = check_positive(noise, "draft noise", zero=True)
        rng = np.random.default_rng([self.seed, V])
        base = -self.exponent * np.log1p(np.arange(V, dtype=np.float64))
        self.ranked = base[rng.permutation(V)]  # l at index j = base[pi(j)]
        self.eps = rng.standard_normal(V) * self.noise
        self.units = _units(V)
        self.index = np.arange(V, dtype=np.int64)
        self._memo: dict[tuple, np.ndarray] = {}  # context tail -> its four map parameters
        self.name = name or (f"synthetic zipf V={V} seed={self.seed}" + (f" noise={self.noise:g}" if noise else ""))

    def _maps(self, context) -> np.ndarray:
        tail = tuple(int(t) + 1 for t in list(context)[len(context) - self.order:]) if self.order else ()
        tail = (0,) * (self.order - len(tail)) + tail  # shorter contexts: padded with a start marker
        maps = self._memo.get(tail)
        if maps is None:
            state = np.random.SeedSequence([self.seed, 7, *tail]).generate_state(4, dtype=np.uint64)
            k = self.units.size
            maps = (int(self.units[state[0] % k]), int(state[1] % self.vocab_size),
                    int(self.units[state[2] % k]), int(state[3] % self.vocab_size))
            if len(self._memo) >= 1 << 16:
                self._memo.clear()
            self._memo[tail] = maps
        return maps

    def logits(self, contexts):
        V = self.vocab_size
        out = np.empty((len(contexts), V))
        for row, context in enumerate(contexts):
            a, b, c, d = self._maps(context)
            out[row] = self.ranked[(a * self.index + b) % V]
            if self.noise:
                out[row] += self.eps[(c * self.index + d) % V]
        return out

    def describe(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "kind": "synthetic zipf", "seed": self.seed,
                "order": self.order, "exponent": self.exponent, "noise": self.noise}


def synthetic_models(vocab_size: int, *, seed: int = 0, order: int = 2, exponent: float = 1.0,
                     noise: float = 1.0) -> tuple[SyntheticModel, SyntheticModel]:
    """A (target, draft) pair: the same context-hashed Zipf logits, the draft with noise ``sigma = noise``."""
    target = SyntheticModel(vocab_size, seed=seed, order=order, exponent=exponent, noise=0.0,
                            name=f"synthetic zipf target V={vocab_size} seed={seed}")
    draft = SyntheticModel(vocab_size, seed=seed, order=order, exponent=exponent, noise=noise,
                           name=f"synthetic zipf draft V={vocab_size} seed={seed} noise={noise:g}")
    return target, draft


def synthetic_prompts(count: int, vocab_size: int, *, seed: int = 0, length: int = 8) -> list[Prompt]:
    """``count`` prompts of ``length`` uniformly random token ids (prompt ``i`` depends on ``seed, i`` only)."""
    prompts = []
    for pid in range(int(count)):
        ids = tuple(int(t) for t in np.random.default_rng([seed, 11, pid]).integers(0, vocab_size, size=length))
        prompts.append(Prompt(pid, ids, " ".join(map(str, ids))))
    return prompts


__all__ = ["SyntheticModel", "synthetic_models", "synthetic_prompts"]
