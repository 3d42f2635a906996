"""The verifier interface: one small class per verifier, built around its exact
conditional output law ``P(Y = . | X)``.

A verifier class is instantiated once per (p, q, n, draft sampler) — that is
the per-pair pre-processing — and then answers, for any batch of draft tuples
``drafts [M, k]``:

* :meth:`PreparedVerifier.output_law` — the exact law of ``Y`` given one tuple;
* :meth:`PreparedVerifier.acceptance` — ``P(Y in X | X)`` for every tuple;
* :meth:`PreparedVerifier.sample` — one output token per tuple;
* :meth:`PreparedVerifier.exact_rate` — ``P(Y in X)`` in closed form, when known.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..errors import InputError
from ..samplers import _cdf_draw, get_sampler


def drafted_mass(law_or_p: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """``sum over the distinct tokens of each tuple`` of a per-token vector ([M])."""
    drafts = np.atleast_2d(drafts)
    values = law_or_p[drafts] if law_or_p.ndim == 1 else np.take_along_axis(law_or_p, drafts, axis=1)
    first = np.ones(drafts.shape, dtype=bool)  # count repeated iid drafts once
    for j in range(1, drafts.shape[1]):
        first[:, j] = ~np.any(drafts[:, :j] == drafts[:, j : j + 1], axis=1)
    return np.where(first, values, 0.0).sum(axis=1)


def sample_from_law(law: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` independent draws from one law ``[V]`` (inverse CDF, ``O(log V)`` each)."""
    return _cdf_draw(law, rng.random(size)).astype(np.int64)


def sample_from_laws(laws: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw from each row of ``laws [M, V]`` (inverse CDF)."""
    cdf = np.cumsum(laws, axis=1)
    u = rng.random(laws.shape[0]) * cdf[:, -1]
    out = (cdf <= u[:, None]).sum(axis=1)
    last = laws.shape[1] - 1 - np.argmax(laws[:, ::-1] > 0, axis=1)  # never a token of probability 0
    return np.minimum(out, last)


class PreparedVerifier:
    """Base class: a verifier set up for one pair ``(p, q)``, ``n`` drafts and a draft law."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: The draft law the verifier is designed for.
    default_sampler: ClassVar[str] = "iid"
    #: Draft laws it is lossless for (None: any).
    samplers: ClassVar[tuple[str, ...] | None] = ("iid",)
    #: If set, the only number of drafts it is defined for.
    fixed_n: ClassVar[int | None] = None

    def __init__(self, p: np.ndarray, q: np.ndarray, n: int, sampler: str | None = None):
        sampler = sampler or self.default_sampler
        if self.samplers is not None and sampler not in self.samplers:
            raise InputError(
                f"verifier {self.name} is lossless for {'/'.join(self.samplers)} drafts only, "
                f"not {sampler!r}"
            )
        self.draft_sampler = get_sampler(sampler)
        self.n = self.draft_sampler.check_n(n)
        if self.fixed_n is not None and self.n != self.fixed_n:
            raise InputError(f"verifier {self.name} is defined for n = {self.fixed_n} only, got n = {self.n}")
        self.p = np.asarray(p, dtype=np.float64)
        self.q = np.asarray(q, dtype=np.float64)
        self.V = self.p.size
        self.num_drafts = self.draft_sampler.num_drafts(self.q, self.n)
        self.setup()

    @property
    def sampler(self) -> str:
        return self.draft_sampler.name

    @classmethod
    def check_size(cls, q, n: int, sampler: str) -> None:
        """Raise :class:`~mdsd_cli.errors.SizeLimitError` now if the verifier would refuse
        these draft distributions (``[V]`` or ``[N, V]``); cheap, for failing before work."""

    def setup(self) -> None:
        """Per-pair pre-processing."""

    # --- the law ---------------------------------------------------------------------------
    def output_law(self, drafts) -> np.ndarray:
        """Exact ``P(Y = y | X = drafts)`` for every token ``y`` (a ``[V]`` vector)."""
        raise NotImplementedError

    def output_laws(self, drafts) -> np.ndarray:
        """Exact output laws for a batch of tuples, ``[M, V]``."""
        drafts = np.atleast_2d(drafts)
        return np.stack([self.output_law(row) for row in drafts]) if drafts.size else np.zeros((0, self.V))

    def acceptance(self, drafts) -> np.ndarray:
        """``P(Y in X | X)`` for each tuple of ``drafts [M, k]``."""
        drafts = np.atleast_2d(drafts)
        return drafted_mass(self.output_laws(drafts), drafts)

    def sample(self, drafts, rng: np.random.Generator) -> np.ndarray:
        """One output token for each tuple of ``drafts [M, k]``."""
        return sample_from_laws(self.output_laws(np.atleast_2d(drafts)), rng)

    def exact_rate(self) -> float | None:
        """``P(Y in X)`` in closed form, or None when there is none."""
        return None
