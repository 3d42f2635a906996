"""Sequence-level bounds at the steps of a decode: the most tokens per step any lossless verifier could give.

At a step's root context, for the configuration's tree shape, draft law and
temperature (see :mod:`mdsd_cli.bounds.sequence` for the definitions):

``sum_alpha_star``
    ``sum_d α*_d`` with each ``α*_d`` exact where the chain theorem holds over
    sequences (chains; ``paths:KxL`` with iid drafts; depth 1 of any tree) and
    ``V^d`` sequences fit, else a valid upper bound: at depth 2 of a tree of
    uniform widths with iid drafts the best prefix of the ratio order, and
    otherwise ``α*_{d-1}`` (``α*_d`` never grows with ``d``).
``coupling_lp``, ``lossless_lp``
    where every tree and every sequence of length ``D + 1`` can be enumerated
    (tiny models): the coupling LP, and the exact optimum over all lossless
    verifiers. ``sum_alpha_star`` is then exact too (one transport LP per depth).
"""

from __future__ import annotations

import math

import numpy as np

from ..bounds.chain import chain_solve
from ..bounds.sequence import (
    MAX_SEQUENCE_LP_VARIABLES,
    aggregate,
    coupling_lp,
    lossless_lp,
    lp_sizes,
    per_depth_lp,
    prefix_sets,
    sequence_alpha_star,
    uniform_tree_alpha_star_2,
)
from ..errors import SizeLimitError, SolverError
from .exact import ConditionalLaws, sequence_law, tree_law, tree_paths
from .trees import TreeShape

#: Largest V^d for which α*_d is computed over sequences.
MAX_SEQUENCES = 6_000_000
#: The LPs run when the tree has at most this many draws and V^(D+1) is at most MAX_LP_SEQUENCES.
MAX_LP_TREES = 20_000
MAX_LP_SEQUENCES = 4_096

BOUND_COLUMNS = ("sum_alpha_star", "exact", "coupling_lp", "lossless_lp")


def _uniform_widths(shape: TreeShape) -> list[int] | None:
    """Per-depth widths if every node at each depth has the same number of children, else None."""
    if shape.kind != "static":
        return None
    widths, level = [], [0]
    while level:
        ws = {len(shape.children[u]) for u in level}
        if len(ws) != 1:
            return None
        w = ws.pop()
        if w == 0:
            break
        widths.append(w)
        level = [c for u in level for c in shape.children[u]]
    return widths


def _count_trees(shape: TreeShape, V: int, limit: int) -> bool:
    """Whether the number of draft tuples drawn over a tree (a crude count, V^nodes) stays within ``limit``."""
    nodes = shape.max_nodes - 1
    return nodes * math.log(max(V, 2)) <= math.log(limit)


def step_bound(target, draft, context, shape: TreeShape, sampler: str, temperature: float, *,
               lp: bool = True, laws: dict | None = None, notify=None) -> tuple[float, bool, float, float]:
    """``(sum_alpha_star, exact, coupling_lp, lossless_lp)`` at one root context (NaN where not computed).

    ``laws`` (a dict) keeps the models' conditional laws between calls at the same context and temperature.
    Where the LPs are attempted but cannot run (too large, or no solver's answer verified to 1e-9) their
    values are NaN, ``sum_alpha_star`` comes from the closed forms, and ``notify(message)`` is told why.
    """
    notify = notify or (lambda message: None)
    V = target.vocab_size
    D = shape.depth
    key = (tuple(context), float(temperature))
    if laws is not None and key in laws:
        P, Q = laws[key]
    else:
        P = ConditionalLaws(target, context, temperature)
        Q = ConditionalLaws(draft, context, temperature)
        if laws is not None:
            laws.clear()  # one context at a time: V^(D-1) rows each
            laws[key] = (P, Q)
    coupling = lossless = math.nan
    enumerable = lp and V ** (D + 1) <= MAX_LP_SEQUENCES and _count_trees(shape, V, MAX_LP_TREES)
    if lp and not enumerable:
        notify(f"LP bounds left empty for tree {shape.label} at V={V:,}: the coupling and lossless LPs need every "
               f"draft tree enumerated (at most {MAX_LP_SEQUENCES:,} sequences of {D + 1} tokens and "
               f"{MAX_LP_TREES:,} trees); only 1 + sum_d alpha*_d is computed")
    if enumerable:
        trees = tree_law(shape, sampler, Q, max_trees=MAX_LP_TREES)
        sets, probs = aggregate([(prefix_sets(tree_paths(t), D), pr) for t, pr in trees])
        p_seq = sequence_law(P, V, D + 1)
        too_big = {what: size for what, size in lp_sizes(sets, p_seq).items() if size > MAX_SEQUENCE_LP_VARIABLES}
        if too_big:
            what, size = next(iter(too_big.items()))
            notify(f"LP bounds left empty for tree {shape.label} at V={V:,}: the {what} needs {size:,} variables "
                   f"and constraint entries (limit {MAX_SEQUENCE_LP_VARIABLES:,})")
        else:
            try:
                alphas = [per_depth_lp(sets, probs, p_seq.sum(axis=tuple(range(d, D + 1))), d)
                          for d in range(1, D + 1)]
                coupling = coupling_lp(sets, probs, p_seq.sum(axis=D))
                lossless = lossless_lp(sets, probs, p_seq)
                return float(sum(alphas)), True, coupling, lossless
            except (SolverError, SizeLimitError) as exc:
                notify(f"LP bounds left empty for tree {shape.label} at V={V:,}: {exc}")
                coupling = lossless = math.nan
    widths = _uniform_widths(shape)
    chain = widths is not None and set(widths) == {1} and sampler in ("iid", "wor")  # T_d: one draw of q_{1:d}
    paths = shape.kind == "paths" and sampler == "iid"
    alphas: list[float] = []
    exact = True
    for d in range(1, D + 1):
        value = math.nan
        if V ** d <= MAX_SEQUENCES:
            if d == 1:
                n = shape.paths if shape.kind == "paths" else len(shape.children[0])
                value = float(chain_solve(P(())[None, :], Q(())[None, :], n, sampler=sampler, want_sets=False)[0][0])
            elif chain or paths:
                value = sequence_alpha_star(sequence_law(P, V, d), sequence_law(Q, V, d), shape.paths if paths else 1)
            elif d == 2 and widths is not None and sampler == "iid":
                value = uniform_tree_alpha_star_2(sequence_law(P, V, 2), Q(()), sequence_law(Q, V, 2),
                                                  (widths[0], widths[1]))
                exact = False
        if math.isnan(value):
            value, exact = alphas[-1], False
        alphas.append(min(value, alphas[-1]) if alphas else value)
    return float(sum(alphas)), exact, coupling, lossless


def run_bounds(run, target, draft, *, lp: bool = True, progress=None, notify=None) -> dict[int, np.ndarray]:
    """Per step of every tree configuration of ``run``: ``[steps, 4]`` rows of :data:`BOUND_COLUMNS`.

    Steps are in the order of ``run.runs`` (prompts in order, steps in order).
    Results are cached by (root context, configuration), so repeated prompts
    cost one computation. ``notify(message)`` hears once per configuration
    why its LP columns are left empty (see :func:`step_bound`).
    """
    cache: dict = {}
    laws: dict = {}
    told: set = set()

    def once(spec):
        def tell(message):
            if spec not in told and notify is not None:
                told.add(spec)
                notify(f"{message}; configuration {run.specs[spec].label}")
        return tell

    out: dict[int, list] = {}
    advance = progress or (lambda k=1: None)
    for r in run.runs:
        spec = run.specs[r.spec]
        if spec.plain:
            continue
        prompt = list(run.prompts[r.prompt].tokens)
        rows = out.setdefault(r.spec, [])
        for position in r.steps[:, 0].astype(int):
            context = tuple(prompt + list(r.generated[:position]))
            key = (context, spec.tree.label, spec.sampler, spec.temperature)
            if key not in cache:
                cache[key] = step_bound(target, draft, context, spec.tree, spec.sampler, spec.temperature, lp=lp,
                                        laws=laws, notify=once(r.spec))
            rows.append(cache[key])
        advance(1)
    return {k: np.array(v, dtype=float).reshape(-1, len(BOUND_COLUMNS)) for k, v in out.items()}


__all__ = ["BOUND_COLUMNS", "MAX_LP_SEQUENCES", "MAX_LP_TREES", "MAX_SEQUENCES", "run_bounds", "step_bound"]
