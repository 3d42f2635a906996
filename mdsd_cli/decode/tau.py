r"""Expected tokens per target call at one context, ``tau(c)``, exactly or by Monte Carlo.

A decoding step from context ``c`` appends ``tau`` tokens; ``tau(c) = E[tokens]`` over
the draft tree and the verifier's coins. Generation measures the mean of ``tau`` over
the steps it happens to take, with the noise of one trajectory per configuration;
here ``tau(c)`` is computed at fixed contexts and every configuration is compared on
the same ones, so differences are paired.

Exact (``method="exact"``), per-node verifiers
    The walk moves from a node to the child holding its output ``Y``; the child's
    subtree is drawn afresh from the child's own context. So

    .. math:: E(u) = 1 + \sum_{y \ne \mathrm{eos}} \sum_s \pi_u(y, s)\, E(\mathrm{child}_s(u, y)),

    with ``E = 1`` at a leaf (the bonus token) and ``pi_u(y, s)`` the probability
    that the walk leaves ``u`` with token ``y`` into a child of kind ``s``, averaged
    over ``u``'s draft tuple: the verifier's move law
    (:meth:`~mdsd_cli.verifiers.base.PreparedVerifier.moves`) split by what tells
    the children apart (``token`` when they carry the same subtree, ``position`` in
    sparse trees, ``count`` in ``paths:KxL``). ``tau(c) = E(root)`` is the sum,
    over the nodes the walk can reach, of the probability of reaching them. The
    recursion visits every child of path probability at least ``prune``; a child
    below it counts its certain token, and its subtree (at most ``h`` more tokens,
    ``h`` its height) is left as slack: the result is a **certified interval**
    ``[lower, upper]``, ``upper - lower <= prune-mass * depth``. With ``prune = 0``
    nothing is pruned (enumerable models).

Exact, sequence-level verifiers (``block``, ``traversal``)
    The sum over every draft tree of its probability times the verifier's exact
    expected length (:func:`~.exact.tree_law`; tiny V only).

Monte Carlo (``method="monte-carlo"``)
    ``repeats`` draft trees drawn from the context as generation draws them; for
    each, the exact expected tokens given the tree (the verifier's conditional
    law at every node: the walk's own coins are averaged out), then the mean and
    its standard error. Any verifier, any size.

Contexts (:func:`sample_contexts`): for each prompt, one continuation sampled
from the target at the configuration's temperature (what generation meets), and
``per_prompt`` positions in it; the context is the prompt plus the continuation
up to the position. Every configuration at that temperature uses the same
contexts. Intervals treat prompts as the independent units (positions of one
prompt share its continuation).
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, SizeLimitError
from ..samplers import DISTINCT_KINDS, get_sampler
from ..verifiers import get_verifier
from ..verifiers.base import sample_from_law
from .engine import DecodeSpec
from .exact import ConditionalLaws, _path, tree_law, tree_paths
from .laws import model_rows, tempered
from .sequence import SEQUENCE_VERIFIERS
from .trees import TreeShape

METHODS = ("auto", "exact", "sampled-drafts", "monte-carlo")
#: Default path probability under which the exact recursion stops (certified slack).
DEFAULT_PRUNE = 1e-4
#: Default Monte Carlo draft trees per context.
DEFAULT_REPEATS = 64
#: Pruned children expanded per level (drawn in proportion to their probability) for the point estimate.
DEFAULT_TAIL_SAMPLES = 8
#: Independent draws of the pruned tails per context (for the point estimate's standard error).
DEFAULT_REPLICATES = 4
#: Draft tuples per node where a verifier's move law is estimated (``sampled-drafts``).
DEFAULT_DRAFT_SAMPLES = 256
#: Most draft trees the exact sequence-level computation enumerates.
MAX_SEQUENCE_TREES = 20_000


class NoExactLaw(Exception):
    """Raised inside the exact recursion when a node's move law has no closed form at this size."""


# --- contexts ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Context:
    """A root context: ``prompt`` (id), ``position`` in its sampled continuation, the token ids."""

    prompt: int
    position: int
    tokens: tuple[int, ...]
    temperature: float


def _continuation(target, prompt, length: int, temperature: float, rng) -> list[int]:
    """``length`` tokens sampled from the target after ``prompt`` (plain sampling; stops before EOS)."""
    context = list(prompt)
    out: list[int] = []
    target.reset_cache()
    eos = target.eos_token_id
    while len(out) < length:
        logits = model_rows(target, target.tree_logits(context, [-1], [-1], [0]), 1)
        y = int(sample_from_law(tempered(logits[0], temperature)[0], 1, rng)[0])
        if eos is not None and y == eos:
            break
        out.append(y)
        context.append(y)
    return out


def sample_contexts(target, prompts, *, per_prompt: int, max_new_tokens: int, temperature: float,
                    seed: int) -> list[Context]:
    """``per_prompt`` root contexts per prompt at ``temperature`` (see the module docstring).

    Positions are drawn without replacement from ``0 .. max_new_tokens - 1`` (the
    positions a generation of ``max_new_tokens`` tokens starts its steps at),
    seeded by ``(seed, prompt id, temperature)``; fewer where the continuation
    ends early (the target's end-of-sequence token).
    """
    if int(per_prompt) < 1:
        raise InputError(f"--contexts-per-prompt must be >= 1, got {per_prompt}")
    out = []
    for prompt in prompts:
        key = zlib.crc32(f"contexts|{float(temperature)!r}".encode())
        rng = np.random.default_rng([int(seed), int(prompt.id), key])
        continuation = _continuation(target, prompt.tokens, int(max_new_tokens) - 1, temperature, rng)
        available = len(continuation) + 1
        k = min(int(per_prompt), available)
        positions = np.sort(rng.choice(available, size=k, replace=False))
        out += [Context(int(prompt.id), int(i), tuple(prompt.tokens) + tuple(continuation[:i]), float(temperature))
                for i in positions]
    return out


# --- tree shapes as slots ------------------------------------------------------------------------

class _Slots:
    """What the recursion needs of a shape: width, height, the split at a slot and the child slots."""

    def __init__(self, shape: TreeShape, distinct: bool):
        self.shape, self.distinct = shape, distinct
        if shape.kind == "static":
            n = len(shape.children)
            self.height = [0] * n
            self.signature: list = [None] * n
            for u in range(n - 1, -1, -1):  # children have larger indices
                kids = shape.children[u]
                self.height[u] = 1 + max((self.height[c] for c in kids), default=-1)
                self.signature[u] = tuple(self.signature[c] for c in kids)

    def width(self, slot) -> int:
        return self.shape.width(slot)

    def height_of(self, slot) -> int:
        if self.shape.kind == "static":
            return self.height[slot]
        return self.shape.depth - slot[1]

    def split(self, slot) -> str:
        if self.shape.kind == "paths":
            return "token" if self.distinct else "count"
        kids = self.shape.children[slot]
        return "token" if len({self.signature[c] for c in kids}) <= 1 else "position"

    def child(self, slot, split: str, row: int):
        if self.shape.kind == "paths":
            return (row + 1 if split == "count" else 1, slot[1] + 1)
        kids = self.shape.children[slot]
        return kids[row] if split == "position" else kids[0]


# --- one context, one configuration --------------------------------------------------------------

@dataclass
class ContextValue:
    """``tau`` at one context for one configuration: a certified interval (exact) or a mean ± se."""

    lower: float
    upper: float
    #: P(at least k drafted tokens accepted), k = 1..D (exact: lower bounds where pruned)
    accepted_ge: np.ndarray
    #: expected verifications at depth k - 1 (the walk reaching an internal node there)
    visits: np.ndarray
    method: str
    stderr: float = 0.0
    nodes: int = 0
    seconds: float = 0.0
    #: the point estimate (exact: lower plus the sampled pruned subtrees; Monte Carlo: the mean)
    point: float = math.nan

    @property
    def value(self) -> float:
        return self.lower if math.isnan(self.point) else self.point


def recursive_tau(P: ConditionalLaws, Q: ConditionalLaws, shape: TreeShape, sampler: str, verifier: str, *,
                  prune: float = DEFAULT_PRUNE, eos: int | None = None, tail_samples: int = DEFAULT_TAIL_SAMPLES,
                  replicates: int = DEFAULT_REPLICATES, draft_samples: int | None = None, rng=None,
                  memo: dict | None = None) -> ContextValue:
    """``tau`` at the context of ``P``/``Q`` by the recursion of the module docstring (per-node verifiers).

    ``P(path)``, ``Q(path)``: the target's and draft's tempered laws after the
    path. Returns the certified interval ``[lower, upper]`` (children of path
    probability below ``prune`` are not expanded: their own token counts, their
    subtree is slack) and a point ``value``: the same recursion in which the
    pruned children of each level are pooled and ``tail_samples`` of them,
    drawn in proportion to their probability, are expanded in their stead (each
    carrying ``1/tail_samples`` of the pool's probability), so that ``value`` is
    unbiased for ``tau``; its standard error comes from ``replicates``
    independent draws of the pools. Nothing pruned (``prune = 0``, or no child
    below it): ``value = lower = upper``, exact (method ``exact``).

    A node whose move law has no closed form and cannot be enumerated raises
    :class:`NoExactLaw`, unless ``draft_samples`` is set: its move law is then
    estimated from that many draft tuples drawn afresh in every replicate (each
    tuple's conditional law exact), which keeps ``value`` unbiased (the
    recursion is linear in each node's law, and the estimates are independent);
    there is no certificate then (``lower = upper = value``, method
    ``sampled-drafts``). ``memo`` keeps exact move laws by node between calls.
    """
    t0 = time.perf_counter()
    cls = get_verifier(verifier)
    spec = get_sampler(sampler)
    slots = _Slots(shape, spec.kind in DISTINCT_KINDS)
    memo = {} if memo is None else memo
    force_sampled = bool(memo.pop("force-sampled", False))  # every node's law from sampled tuples (checks)
    rng = np.random.default_rng(0) if rng is None else rng
    D = shape.depth
    state = {"nodes": 0, "sampled": False}
    prepared: dict = {}

    def moves(batch):
        """The move law (rows) and the child slot of each row, for every ``(path, slot)`` of ``batch``."""
        missing = [b for b in dict.fromkeys(batch) if b not in memo]
        if missing:
            paths = [path for path, _ in missing]
            fresh = {}
            for (path, slot), p, q in zip(missing, P.many(paths), Q.many(paths)):
                n = slots.width(slot)
                v = prepared.get((path, n))
                if v is None:
                    v = prepared[(path, n)] = cls.unchecked(p, q, n, sampler)
                split = slots.split(slot)
                kids = lambda rows, slot=slot, split=split: [slots.child(slot, split, r) for r in range(rows)]  # noqa: E731
                law = None if force_sampled else v.moves(split)
                if law is not None:
                    memo[(path, slot)] = (law, kids(law.shape[0]))
                    state["nodes"] += 1
                    continue
                if draft_samples is None:
                    raise NoExactLaw(f"{verifier} has no exact move law ({split}) at V={v.V:,}, n={n}")
                law = v.sampled_moves(split, draft_samples, rng)  # fresh in every replicate: not memoised
                state["sampled"] = True
                state["nodes"] += 1
                fresh[(path, slot)] = (law, kids(law.shape[0]))
            return [fresh[b] if b in fresh else memo[b] for b in batch]
        return [memo[b] for b in batch]

    def walk(sample: bool):
        """One pass: ``(lower, slack, accepted, visits, value)``; with ``sample``, pooled tails expanded."""
        accepted, visits = np.zeros(D), np.zeros(D)
        lower, slack, value = 1.0, 0.0, 1.0
        # frontier entries: (path, slot, mass, certified) -- certified: reached through expanded children only
        frontier = [((), shape.root(), 1.0, True)]
        for level in range(D):
            internal = [f for f in frontier if slots.width(f[1]) > 0]
            if not internal:
                break
            laws = moves([(f[0], f[1]) for f in internal])
            frontier = []
            pool_w, pool_from = [], []
            for (path, _, mass, certified), (law, kids) in zip(internal, laws):
                visits[level] += mass
                for row, child in enumerate(kids):
                    w = mass * law[row]
                    total = float(w.sum())
                    if total <= 0.0:
                        continue
                    accepted[level] += total
                    if eos is not None:
                        total -= float(w[eos])  # an accepted end of sequence ends the step
                        w = w.copy()
                        w[eos] = 0.0
                    value += total
                    if certified:
                        lower += total
                    h = slots.height_of(child)
                    if h == 0:
                        continue  # a leaf: its bonus token is certain, counted above
                    keep = (w >= prune) & (w > 0.0)
                    big = np.flatnonzero(keep)
                    frontier += [((*path, int(y)), child, float(w[y]), certified) for y in big]
                    small = np.flatnonzero(~keep & (w > 0.0))
                    if small.size:
                        if certified:
                            slack += float(w[small].sum()) * h
                        pool_w.append(w[small])
                        pool_from.append((path, child, small))
            if sample and pool_w and tail_samples > 0:
                weights = np.concatenate(pool_w)
                total = float(weights.sum())
                picks = np.sort(sample_from_law(weights / total, int(tail_samples), rng))
                ends = np.cumsum([w.size for w in pool_w])
                for i in picks:
                    j = int(np.searchsorted(ends, i, side="right"))
                    path, child, small = pool_from[j]
                    k = int(i - (ends[j - 1] if j else 0))
                    frontier.append(((*path, int(small[k])), child, total / tail_samples, False))
        return lower, slack, accepted, visits, value

    lower, slack, accepted, visits, _ = walk(False)
    if state["sampled"]:  # estimated node laws: replicates of the whole recursion, tails sampled too
        runs = [walk(True)[4] for _ in range(max(int(replicates), 2))]
        value, se = float(np.mean(runs)), float(np.std(runs, ddof=1) / math.sqrt(len(runs)))
        return ContextValue(value, value, accepted, visits, "sampled-drafts", stderr=se, nodes=state["nodes"],
                            seconds=time.perf_counter() - t0, point=value)
    if slack <= 0.0:
        value, se = lower, 0.0
    else:
        runs = [walk(True)[4] for _ in range(max(int(replicates), 2))]
        value, se = float(np.mean(runs)), float(np.std(runs, ddof=1) / math.sqrt(len(runs)))
    return ContextValue(lower, lower + max(slack, 0.0), accepted, visits, "exact", stderr=se, nodes=state["nodes"],
                        seconds=time.perf_counter() - t0, point=value)


def exact_tau(P: ConditionalLaws, Q: ConditionalLaws, shape: TreeShape, sampler: str, verifier: str, *,
              prune: float = DEFAULT_PRUNE, eos: int | None = None, **options) -> ContextValue:
    """:func:`recursive_tau` with every node's move law exact (raises :class:`NoExactLaw` otherwise)."""
    return recursive_tau(P, Q, shape, sampler, verifier, prune=prune, eos=eos, draft_samples=None, **options)


def _tokens_given_tree(tree, P, verifier: str, sampler: str, eos, cache: dict | None) -> float:
    """Exact expected tokens of one step given the drawn ``tree`` (``P[i]``: target law at node ``i``)."""
    if verifier in SEQUENCE_VERIFIERS:
        return SEQUENCE_VERIFIERS[verifier].expected_tokens(tree, list(P), sampler, eos)
    cls = get_verifier(verifier)
    paths = tree_paths(tree) if cache is not None else None

    def value(u: int) -> float:
        kids = tree.children[u]
        if not kids:
            return 1.0
        key = (paths[u], tree.n[u]) if cache is not None else None
        v = cache.get(key) if cache is not None else None
        if v is None:
            v = cls.unchecked(P[u], tree.q[u], tree.n[u], sampler)
            if cache is not None:
                cache[key] = v
        law = v.output_law(tree.drafts[u])
        by_token: dict[int, list[int]] = {}
        for c in kids:
            by_token.setdefault(tree.tokens[c], []).append(c)
        out = 1.0
        for y, children in by_token.items():
            if eos is not None and y == eos:
                continue
            out += float(law[y]) * sum(value(c) for c in children) / len(children)
        return out

    return value(0)


def _grow(P: ConditionalLaws, Q: ConditionalLaws, shape: TreeShape, sampler, rng):
    """A draft tree drawn as :func:`~.drafting.grow_tree` draws it, from memoised laws; and its nodes' paths."""
    from .drafting import grow_with

    tree = grow_with(lambda tree, expand: Q.many([_path(tree, u) for u in expand]), shape, sampler, rng)
    return tree, tree_paths(tree)


def monte_carlo_tau(P: ConditionalLaws, Q: ConditionalLaws, shape: TreeShape, sampler: str, verifier: str, *,
                    repeats: int = DEFAULT_REPEATS, rng, eos: int | None = None) -> ContextValue:
    """``tau`` at the context of ``P``/``Q``: the mean over ``repeats`` drawn trees of the exact expected
    tokens given the tree, with its standard error."""
    t0 = time.perf_counter()
    if int(repeats) < 2:
        raise InputError(f"--repeats must be >= 2 for a standard error, got {repeats}")
    spec = get_sampler(sampler)
    D = shape.depth
    values = np.empty(int(repeats))
    cache: dict = {}
    nodes = 0
    for r in range(int(repeats)):
        tree, paths = _grow(P, Q, shape, spec, rng)
        Ps = P.many(paths)
        values[r] = _tokens_given_tree(tree, Ps, verifier, sampler, eos, cache)
        nodes += tree.size
    mean = float(values.mean())
    se = float(values.std(ddof=1) / math.sqrt(values.size))
    nan = np.full(D, np.nan)
    return ContextValue(mean, mean, nan, nan.copy(), "monte-carlo", stderr=se, nodes=nodes,
                        seconds=time.perf_counter() - t0)


def enumerated_tau(P: ConditionalLaws, Q: ConditionalLaws, shape: TreeShape, sampler: str, verifier: str, *,
                   eos: int | None = None, max_trees: int = MAX_SEQUENCE_TREES) -> ContextValue:
    """``tau`` as the sum over every draft tree (any verifier; tiny V): raises :class:`NoExactLaw` if there
    are more than ``max_trees`` trees."""
    t0 = time.perf_counter()
    try:
        trees = tree_law(shape, sampler, Q, max_trees=max_trees)
    except SizeLimitError as exc:
        raise NoExactLaw(str(exc)) from None
    total = 0.0
    cache: dict = {}
    for tree, prob in trees:
        total += prob * _tokens_given_tree(tree, P.many(tree_paths(tree)), verifier, sampler, eos, cache)
    nan = np.full(shape.depth, np.nan)
    return ContextValue(total, total, nan, nan.copy(), "exact", nodes=len(trees), seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class TauOptions:
    """How ``tau(c)`` is computed (see the module docstring).

    ``method``: ``auto`` (the recursion with exact node laws, sampled draft tuples at a
    node without one; sequence-level verifiers enumerated where they can be, else Monte
    Carlo), ``exact`` (refused where a node has no exact law), ``sampled-drafts`` (every
    node's law from sampled tuples), ``monte-carlo`` (repeated steps).
    """

    method: str = "auto"
    prune: float = DEFAULT_PRUNE
    tail_samples: int = DEFAULT_TAIL_SAMPLES
    replicates: int = DEFAULT_REPLICATES
    draft_samples: int = DEFAULT_DRAFT_SAMPLES
    repeats: int = DEFAULT_REPEATS

    def check(self) -> TauOptions:
        if self.method not in METHODS:
            from ..errors import unknown_choice

            raise unknown_choice("method", self.method, METHODS)
        prune = float(self.prune)
        if not 0.0 <= prune < 1.0 or math.isnan(prune):
            raise InputError(f"--prune must be in [0, 1) (a path probability), got {self.prune}")
        for name, low in (("tail_samples", 0), ("replicates", 2), ("draft_samples", 1), ("repeats", 2)):
            value = getattr(self, name)
            if int(value) != value or value < low:
                what = " for a standard error" if low == 2 else ""
                raise InputError(f"--{name.replace('_', '-')} must be an integer >= {low}{what}, got {value}")
        return self


def context_tau(P, Q, spec: DecodeSpec, options: TauOptions = TauOptions(), *, rng=None,
                eos: int | None = None) -> ContextValue:
    """``tau`` at one context for one configuration (see :class:`TauOptions`)."""
    o = options
    rng = rng if rng is not None else np.random.default_rng(0)
    if o.method != "monte-carlo":
        try:
            if spec.verifier in SEQUENCE_VERIFIERS:
                return enumerated_tau(P, Q, spec.tree, spec.sampler, spec.verifier, eos=eos)
            memo = {"force-sampled": True} if o.method == "sampled-drafts" else None
            return recursive_tau(P, Q, spec.tree, spec.sampler, spec.verifier, prune=o.prune, eos=eos,
                                 tail_samples=o.tail_samples, replicates=o.replicates,
                                 draft_samples=None if o.method == "exact" else o.draft_samples, rng=rng,
                                 memo=memo)
        except NoExactLaw as exc:
            if o.method == "exact":
                raise InputError(f"{spec.label}: no exact law ({exc}); use --method auto or monte-carlo") from None
    return monte_carlo_tau(P, Q, spec.tree, spec.sampler, spec.verifier, repeats=o.repeats, rng=rng, eos=eos)


def check_exact(spec: DecodeSpec, vocab_size: int) -> str | None:
    """Why ``spec`` has no exact method at this V (None if it has one, judged on a generic pair)."""
    if spec.verifier in SEQUENCE_VERIFIERS:
        count = spec.tree.max_nodes - 1
        if count * math.log(max(vocab_size, 2)) > math.log(MAX_SEQUENCE_TREES):
            return f"{spec.verifier} needs every draft tree enumerated, too many at V={vocab_size:,}"
        return None
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(vocab_size))
    q = rng.dirichlet(np.ones(vocab_size))
    slots = _Slots(spec.tree, get_sampler(spec.sampler).kind in DISTINCT_KINDS)
    seen = set()
    cls = get_verifier(spec.verifier)
    nodes = range(len(spec.tree.children)) if spec.tree.kind == "static" else \
        [(k, d) for k in range(1, spec.tree.paths + 1) for d in range(spec.tree.depth)]
    for slot in nodes:
        n = slots.width(slot)
        if n == 0:
            continue
        split = slots.split(slot)
        if (n, split) in seen:
            continue
        seen.add((n, split))
        if cls.unchecked(p, q, n, spec.sampler).moves(split) is None:
            return f"{spec.verifier} has no exact {split} move law at V={vocab_size:,} with n={n}"
    return None


# --- the values at many contexts -----------------------------------------------------------------

@dataclass
class ExpectedRun:
    """The contexts, the configurations and ``values[(spec index, context index)]``."""

    specs: list[DecodeSpec]
    contexts: list[Context]
    values: dict
    options: TauOptions
    seed: int
    seconds: float = 0.0
    #: (spec index, context index) -> (sequence bound, exact?, coupling LP, lossless LP)
    bounds: dict = field(default_factory=dict)


__all__ = ["DEFAULT_DRAFT_SAMPLES", "DEFAULT_PRUNE", "DEFAULT_REPEATS", "DEFAULT_REPLICATES", "DEFAULT_TAIL_SAMPLES",
           "MAX_SEQUENCE_TREES", "METHODS", "TauOptions", "Context", "ContextValue", "ExpectedRun",
           "NoExactLaw", "check_exact", "context_tau", "enumerated_tau", "exact_tau", "monte_carlo_tau",
           "recursive_tau", "sample_contexts"]
