"""The verifier interface: one small class per verifier, built around its exact
conditional output law ``P(Y = . | X)``.

A verifier class is instantiated once per (p, q, n, draft sampler) — that is
the per-pair pre-processing — and then answers, for any batch of draft tuples
``drafts [M, k]``:

* :meth:`PreparedVerifier.output_law` — the exact law of ``Y`` given one tuple;
* :meth:`PreparedVerifier.acceptance` — ``P(Y in X | X)`` for every tuple;
* :meth:`PreparedVerifier.sample` — one output token per tuple;
* :meth:`PreparedVerifier.verify` / :meth:`PreparedVerifier.verify_batch` — the
  output token and which draft was accepted, for a decoding loop;
* :meth:`PreparedVerifier.exact_rate` — ``P(Y in X)`` in closed form, when known.

*Accepted* means ``Y in X``, the event whose probability is the acceptance rate:
the accepted index is the first position of the drafts holding the output token,
or None when the token is none of the drafts (it came from the residual). Which
of several equal drafts is named does not matter for iid or without-replacement
drafts: equal tokens are interchangeable, so a tree walk may descend into the
first child with that token without looking at the subtrees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..distributions import as_array, as_rng, check_pair
from ..errors import InputError
from ..samplers import DISTINCT_KINDS, _cdf_draw, get_sampler


def set_up(factory, p, q, n: int, sampler: str):
    """A verifier for rows already validated: ``factory.unchecked(p, q, n, sampler)`` for a verifier class, else
    ``factory(p, q, n, sampler)`` (any callable that sets one up: a cache, a closure)."""
    unchecked = getattr(factory, "unchecked", None)
    return unchecked(p, q, n, sampler) if unchecked is not None else factory(p, q, n, sampler)


def _checked_row_pair(p, q, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q)`` as float64 rows ``[V]``, validated: float64 vectors of one shape, no negative entry, each
    summing to 1 within 1e-12 pass in two passes each (NaN and infinities fail the sum); anything else goes
    through :func:`~mdsd_cli.distributions.check_pair` (conversions, tolerances, the error messages)."""
    if (type(p) is np.ndarray and type(q) is np.ndarray and p.dtype == np.float64 and q.dtype == np.float64
            and p.ndim == 1 and p.shape == q.shape and p.size > 0):
        if abs(p.sum() - 1.0) <= 1e-12 and abs(q.sum() - 1.0) <= 1e-12 and p.min() >= 0.0 and q.min() >= 0.0:
            return p, q
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    if batched:
        raise InputError("a verifier is set up for one pair: give p and q of shape [V] "
                         "(verify_batch takes [N, V])")
    return P[0], Q[0]


@dataclass(frozen=True)
class Verification:
    """The outcome of verifying one draft tuple.

    Attributes
    ----------
    token : int
        The output token ``Y``; over the draft law it is distributed exactly as ``p``.
    index : int or None
        Position in the draft tuple of the accepted draft (the first draft equal to
        ``token``), or None when ``token`` is not among the drafts.
    """

    token: int
    index: int | None

    @property
    def accepted(self) -> bool:
        """Whether a draft was accepted (``Y in X``)."""
        return self.index is not None


@dataclass(frozen=True)
class BatchVerification:
    """The outcomes of verifying many draft tuples: ``tokens [M]`` and ``indices [M]``.

    ``indices[m]`` is the position of the accepted draft in tuple ``m``, or -1 when
    no draft was accepted; ``batch[m]`` gives row ``m`` as a :class:`Verification`.
    """

    tokens: np.ndarray
    indices: np.ndarray

    @property
    def accepted(self) -> np.ndarray:
        """Boolean ``[M]``: whether each tuple had a draft accepted."""
        return self.indices >= 0

    def __len__(self) -> int:
        return int(self.tokens.size)

    def __getitem__(self, m: int) -> Verification:
        index = int(self.indices[m])
        return Verification(int(self.tokens[m]), index if index >= 0 else None)


def accepted_index(drafts, tokens) -> np.ndarray:
    """For each tuple of ``drafts [M, k]``, the first position holding ``tokens[m]``, or -1."""
    drafts = np.atleast_2d(drafts)
    hit = drafts == np.asarray(tokens).reshape(-1, 1)
    return np.where(hit.any(axis=1), np.argmax(hit, axis=1), -1).astype(np.int64)


def drafted_mass(law_or_p: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """``sum over the distinct tokens of each tuple`` of a per-token law ([M]), at most 1 (a law whose floats
    add up to 1 + an ulp, ``p = (1, 0.005) / 1.005``, would otherwise accept with probability above 1)."""
    drafts = np.atleast_2d(drafts)
    values = law_or_p[drafts] if law_or_p.ndim == 1 else np.take_along_axis(law_or_p, drafts, axis=1)
    first = np.ones(drafts.shape, dtype=bool)  # count repeated iid drafts once
    for j in range(1, drafts.shape[1]):
        first[:, j] = ~np.any(drafts[:, :j] == drafts[:, j : j + 1], axis=1)
    return np.minimum(np.where(first, values, 0.0).sum(axis=1), 1.0)


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

    def __init__(self, p, q, n: int, sampler: str | None = None, *, renormalize: bool = False):
        """Set the verifier up for the pair ``(p, q)`` (``[V]`` each: numpy arrays, lists or torch tensors), checked
        as :func:`~mdsd_cli.distributions.check_pair` checks them: finite, non-negative, summing to 1 within
        rounding (``renormalize=True`` rescales a row that does not), one shape; an :class:`InputError` says
        what is wrong. :meth:`unchecked` skips the checks for rows already validated."""
        p, q = _checked_row_pair(p, q, renormalize)
        self._prepare(p, q, n, sampler)

    @classmethod
    def unchecked(cls, p: np.ndarray, q: np.ndarray, n: int, sampler: str | None = None):
        """The verifier of ``(p, q)`` without the checks of ``p`` and ``q`` (two passes over V each), for rows
        already validated: mdsd's own loops (tempered model rows, pairs from
        :func:`~mdsd_cli.distributions.check_pair`, the weighted rows of the tree verifiers) set verifiers up
        this way. ``n`` and ``sampler`` are still checked."""
        self = cls.__new__(cls)
        self._prepare(p, q, n, sampler)
        return self

    def _prepare(self, p, q, n: int, sampler: str | None) -> None:
        spec = get_sampler(sampler or self.default_sampler)
        if self.samplers is not None and spec.kind not in self.samplers:
            raise InputError(
                f"verifier {self.name} is lossless for {'/'.join(self.samplers)} drafts only (with any "
                f"temperature, top_k or top_p), not {spec.name!r}"
            )
        #: The draft law as named (``wor:temperature=0.8``); ``draft_sampler`` is its base
        #: sampler and ``q`` the law the drafts are really drawn from (``q'``), which is what
        #: the verifier must verify against.
        self.sampler_spec = spec
        self.draft_sampler = spec.base
        self.n = spec.check_n(n)
        if self.fixed_n is not None and self.n != self.fixed_n:
            raise InputError(f"verifier {self.name} is defined for n = {self.fixed_n} only, got n = {self.n}")
        self.p = np.asarray(p, dtype=np.float64)
        self.q = np.asarray(spec.draft_distribution(np.asarray(q, dtype=np.float64)), dtype=np.float64)
        self.V = self.p.size
        self.num_drafts = self.draft_sampler.num_drafts(self.q, self.n)
        self.setup()

    @property
    def sampler(self) -> str:
        return self.sampler_spec.name

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

    def sample_with_index(self, drafts, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One output token per tuple of ``drafts [M, k]`` and the position of the accepted
        draft (-1 if none). Derived from the token (:func:`accepted_index`); a verifier that
        knows which draft it took may override this."""
        drafts = np.atleast_2d(drafts)
        tokens = self.sample(drafts, rng)
        return tokens, accepted_index(drafts, tokens)

    # --- in a decoding loop ---------------------------------------------------------------
    def check_drafts(self, drafts) -> np.ndarray:
        """Validate one draft tuple (token ids in drawing order; a list, numpy array or torch tensor)."""
        d = as_array(drafts)
        if d.ndim != 1:
            raise InputError(f"drafts must be a 1-D array of integer token ids, got shape {d.shape}")
        return self._check_draft_rows(d[None, :])[0]

    def _check_draft_rows(self, d: np.ndarray) -> np.ndarray:
        if not np.issubdtype(d.dtype, np.integer):
            raise InputError(f"drafts must be integer token ids, got dtype {d.dtype}")
        if d.shape[1] != self.num_drafts:
            raise InputError(f"{self.sampler} drafts here have {self.num_drafts} tokens, got {d.shape[1]}")
        if d.size and (d.min() < 0 or d.max() >= self.V):
            raise InputError(f"draft token ids must lie in 0..{self.V - 1}")
        impossible = self.q[d] <= 0
        if impossible.any():
            raise InputError(f"draft token {int(d[impossible][0])} has draft probability 0; "
                             "it cannot have been drafted")
        self._check_law_can_draft(d)
        return d.astype(np.int64)

    def _check_law_can_draft(self, d: np.ndarray) -> None:
        """Refuse tuples the draft law never produces: a verifier is lossless for its law's tuples only (rrsw given
        a repeated iid draft, greedy given drafts that are not q's top tokens, would be silently lossy)."""
        kind = self.draft_sampler.kind
        if kind not in DISTINCT_KINDS or not d.size:
            return
        ordered = np.sort(d, axis=1)
        repeats = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        if repeats.any():
            row = tuple(int(x) for x in d[int(np.argmax(repeats))])
            raise InputError(f"draft tuple {row} repeats a token, which {self.sampler} drafts never do; verify "
                             "drafts drawn with replacement with an iid verifier (rrs, kseq, optimal-iid)")
        if kind not in ("greedy", "topk", "hub"):
            return
        if not hasattr(self, "_law_top"):
            self._law_top = (np.array([self.draft_sampler.hub(self.q)]) if kind == "hub"
                             else self.draft_sampler.top_set(self.q, self.n))
        top = self._law_top
        if kind == "hub":
            bad = ~(d == top[0]).any(axis=1)
            what = f"the hub, token {int(top[0])} (the most likely under q), is not among them"
        else:
            k = top.size
            bad = (d[:, :k] != top[None, :]).any(axis=1)
            what = (f"{kind} drafts begin with q's most likely token, {int(top[0])}" if k == 1 else
                    f"{kind} drafts begin with q's {k} most likely tokens, {tuple(int(x) for x in top)}, in that order")
        if bad.any():
            row = tuple(int(x) for x in d[int(np.argmax(bad))])
            raise InputError(f"draft tuple {row} cannot come from {self.sampler} drafts: {what}")

    def verify(self, drafts, rng=None) -> Verification:
        """Verify one draft tuple: the output token and the accepted draft's position.

        Parameters
        ----------
        drafts : array_like of int, ``[k]``
            The drafts in drawing order (as :func:`~mdsd_cli.sample_drafts` returns them).
        rng : numpy.random.Generator, int, torch.Generator or None
            Random source; pass one Generator for the whole loop.
        """
        d = self.check_drafts(drafts)
        tokens, indices = self.sample_with_index(d[None, :], as_rng(rng))
        index = int(indices[0])
        return Verification(int(tokens[0]), index if index >= 0 else None)

    def verify_batch(self, drafts, rng=None) -> BatchVerification:
        """Verify many draft tuples ``[M, k]`` of this pair at once (vectorised)."""
        d = as_array(drafts)
        if d.ndim != 2:
            raise InputError(f"drafts must be [M, k] token ids here, got shape {d.shape}")
        rows = self._check_draft_rows(d)
        tokens, indices = self.sample_with_index(rows, as_rng(rng))
        return BatchVerification(np.asarray(tokens, dtype=np.int64), indices)

    def exact_rate(self) -> float | None:
        """``P(Y in X)`` in closed form, or None when there is none."""
        return None

    # --- in a tree walk -----------------------------------------------------------------------
    def moves(self, split: str = "token", *, max_tuples: int | None = None) -> np.ndarray | None:
        """Where a tree walk goes from a node with this pair, averaged over the draft law.

        ``split="token"``: ``[1, V]``, ``P(Y = y, y in X)``; ``"position"``: ``[k, V]``,
        the part of that move to the child of draft position ``j`` (the first draft holding
        ``y``); ``"count"``: ``[k, V]``, the part where ``y`` was drafted ``c + 1`` times
        (:mod:`~mdsd_cli.verifiers.moves`). The verifier's closed form when it has one, else
        a sum over every draft tuple (at most ``max_tuples``), else None.
        """
        from .moves import MAX_MOVE_TUPLES, SPLITS, enumerated_moves

        if split not in SPLITS:
            raise InputError(f"unknown move split {split!r}; choose one of: {', '.join(SPLITS)}")
        law = self.closed_moves(split)
        if law is None and split != "token" and self.num_drafts <= 1:  # one draft: one position, count 1
            law = self.closed_moves("token")
        if law is None:
            law = enumerated_moves(self, split, max_tuples=MAX_MOVE_TUPLES if max_tuples is None else max_tuples)
        return law

    def closed_moves(self, split: str) -> np.ndarray | None:
        """:meth:`moves` in closed form, or None (the default: no closed form)."""
        return None

    def sampled_moves(self, split: str, samples: int, rng: np.random.Generator) -> np.ndarray:
        """An unbiased estimate of :meth:`moves` from ``samples`` draft tuples drawn from the draft law."""
        from .moves import sampled_moves

        return sampled_moves(self, split, samples, rng)

    def law_at_drafts(self, drafts) -> np.ndarray:
        """``P(Y = drafts[m, j] | drafts[m])`` for every draft of every tuple ``[M, k]``."""
        drafts = np.atleast_2d(drafts)
        laws = self.output_laws(drafts)
        return np.take_along_axis(laws, drafts, axis=1)
