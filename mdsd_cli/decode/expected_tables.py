"""The tables of an ``--expected`` run: the summary per configuration, one row per (configuration,
context), and paired differences between configurations on the shared contexts.

Intervals treat prompts as the independent units (positions of one prompt share its continuation):
Student t over the per-prompt means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .engine import DecodeSpec
from .tau import ExpectedRun


def _t_quantile(dof: int, level: float = 0.95) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, dof))


def _by_prompt(run: ExpectedRun, si: int, attribute) -> tuple[np.ndarray, np.ndarray]:
    """Prompt ids and the per-prompt mean of ``attribute(value)`` over the contexts of configuration ``si``."""
    sums: dict[int, list] = {}
    for ci, context in enumerate(run.contexts):
        value = run.values.get((si, ci))
        if value is not None:
            sums.setdefault(context.prompt, []).append(attribute(value, ci))
    ids = np.array(sorted(sums))
    return ids, np.array([np.mean(sums[i], axis=0) for i in ids])


def mean_interval(units: np.ndarray, *, level: float = 0.95) -> tuple[float, float]:
    """Mean over units and the half-width of its Student t interval (needs two units)."""
    units = np.asarray(units, dtype=float)
    if units.size < 2:
        raise InputError(f"an interval needs at least 2 prompts with contexts, got {units.size}; "
                         "give more --prompts")
    return float(units.mean()), _t_quantile(units.size - 1, level) * float(units.std(ddof=1)) / math.sqrt(units.size)


def summarize_expected(run: ExpectedRun, *, draft_cost: float = 0.05, node_cost: float = 0.0, level: float = 0.95):
    """One row per configuration: mean ``tau`` over the contexts with its interval over prompts (the columns
    of a decode summary where they apply), the certified bounds, the method, and per-depth acceptances.

    ``block_efficiency`` is the mean of the point estimates; ``block_efficiency_low/high`` its ``level``
    interval over prompts, clipped to ``[1, D + 1]``. ``generation_estimate`` is the harmonic mean
    ``1 / mean(1 / tau)``, what a long generation run's tokens per call estimates: a run visits a context as
    the start of a step about ``1 / tau`` times per token there (exact when ``tau`` changes slowly along the
    text), so its ratio weights the contexts by ``1 / tau``. ``certified_low/high`` the means of the certified
    per-context bounds (the exact mean over these contexts lies between them); ``mc_stderr`` the root mean
    square of the per-context standard errors (0: every context exact).
    """
    import pandas as pd

    depth_max = max(s.tree.depth for s in run.specs)
    rows = []
    for si, spec in enumerate(run.specs):
        cis = [ci for ci in range(len(run.contexts)) if (si, ci) in run.values]
        vals = [run.values[(si, ci)] for ci in cis]
        if not vals:
            continue
        _, units = _by_prompt(run, si, lambda v, ci: v.value)
        tau, half = mean_interval(units, level=level)
        D = spec.tree.depth
        methods = sorted({v.method for v in vals})
        row = {"tree": spec.tree.label, "nodes": spec.tree.max_nodes, "depth": D, "sampler": spec.sampler,
               "verifier": spec.verifier, "temperature": spec.temperature,
               "method": methods[0] if len(methods) == 1 else "+".join(methods),
               "prompts": int(units.size), "contexts": len(vals),
               "block_efficiency": tau, "block_efficiency_low": max(1.0, tau - half),
               "block_efficiency_high": min(D + 1.0, tau + half),
               "generation_estimate": math.nan, "generation_estimate_low": math.nan,
               "generation_estimate_high": math.nan,
               "certified_low": float(np.mean([v.lower for v in vals])),
               "certified_high": float(np.mean([v.upper for v in vals])),
               "mc_stderr": float(np.sqrt(np.mean([v.stderr ** 2 for v in vals])))}
        # a generation run's tokens per call weights contexts by how often steps start there (~ 1/tau):
        # the harmonic mean, with the interval of the mean of 1/tau turned around
        _, inverse = _by_prompt(run, si, lambda v, ci: 1.0 / v.value)
        inv, inv_half = mean_interval(inverse, level=level)
        row["generation_estimate"] = 1.0 / inv
        row["generation_estimate_low"] = max(1.0, 1.0 / (inv + inv_half))
        row["generation_estimate_high"] = min(D + 1.0, 1.0 / (inv - inv_half)) if inv > inv_half else D + 1.0
        acc = np.array([v.accepted_ge for v in vals])
        vis = np.array([v.visits for v in vals])
        for k in range(1, depth_max + 1):
            row[f"accepted_ge_{k}"] = float(np.mean(acc[:, k - 1])) if k <= D else math.nan
        for k in range(1, depth_max + 1):
            if k <= D:
                reach = float(np.mean(vis[:, k - 1]))
                row[f"acceptance_d{k}"] = float(np.mean(acc[:, k - 1])) / reach if reach > 0 else math.nan
            else:
                row[f"acceptance_d{k}"] = math.nan
        cost = 1.0 + draft_cost * D + node_cost * (spec.tree.max_nodes - 1)
        row["speedup_model"] = tau / cost
        if run.bounds:
            b = np.array([run.bounds[(si, ci)] for ci in cis if (si, ci) in run.bounds], dtype=float)
            if b.size:
                row["sequence_bound"] = 1.0 + float(b[:, 0].mean())
                row["sequence_bound_exact"] = bool(b[:, 1].all())
                row["lossless_bound"] = 1.0 + float(np.mean(b[:, 3])) if not np.isnan(b[:, 3]).any() else math.nan
                _, gaps = _by_prompt(run, si, lambda v, ci, si=si: 1.0 + run.bounds[(si, ci)][0] - v.value)
                gap, gap_half = mean_interval(gaps, level=level)
                row["gap_to_sequence_bound"] = gap
                row["gap_to_sequence_bound_half_width"] = gap_half
        rows.append(row)
    return pd.DataFrame(rows)


def per_context_table(run: ExpectedRun):
    """One row per (configuration, context): the prompt, position, ``tau`` (point, certified bounds,
    standard error), method, nodes evaluated and seconds."""
    import pandas as pd

    rows = []
    for (si, ci), v in sorted(run.values.items()):
        spec, context = run.specs[si], run.contexts[ci]
        row = {"tree": spec.tree.label, "sampler": spec.sampler, "verifier": spec.verifier,
               "temperature": spec.temperature, "prompt": context.prompt, "position": context.position,
               "context_length": len(context.tokens), "tau": v.value, "tau_low": v.lower, "tau_high": v.upper,
               "stderr": v.stderr, "method": v.method, "nodes": v.nodes, "seconds": v.seconds}
        if (si, ci) in run.bounds:
            row["sequence_bound"] = 1.0 + run.bounds[(si, ci)][0]
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Comparison:
    """``left - right``: two sides, each a verifier name or ``TREE/VERIFIER`` (``:SAMPLER`` pins the law)."""

    left: str
    right: str

    @property
    def label(self) -> str:
        return f"{self.left} - {self.right}"


def parse_comparison(text: str) -> Comparison:
    """``A,B`` (``tau(A) - tau(B)``): each side ``VERIFIER``, ``VERIFIER:SAMPLER``, ``TREE/VERIFIER`` or
    ``TREE/VERIFIER:SAMPLER``; a side without a tree is taken on every tree where both sides run."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 2 or not all(parts):
        raise InputError(f"--compare {text!r}: give two configurations as A,B (e.g. kseq,rrs or 4x3/kseq,1x3/rrs)")
    return Comparison(parts[0], parts[1])


def _matches(side: str, spec: DecodeSpec, tree: str | None) -> bool:
    where, _, rest = side.rpartition("/")
    name, _, sampler = rest.partition(":")
    if where and where != spec.tree.label:
        return False
    if not where and tree is not None and spec.tree.label != tree:
        return False
    return name == spec.verifier and (not sampler or sampler == spec.sampler)


def _pair_up(left: list[int], right: list[int], specs) -> list[tuple[int, int]]:
    """Pairs ``(a, b)`` of the configurations matching each side: one each, or, where a side without a
    ``:SAMPLER`` matches several draft laws, one pair per draft law that both sides run."""
    if len(left) == 1 and len(right) == 1:
        return [(left[0], right[0])]
    pairs = []
    for sampler in dict.fromkeys(specs[i].sampler for i in left + right):
        a = [i for i in left if specs[i].sampler == sampler]
        b = [i for i in right if specs[i].sampler == sampler]
        if len(a) == 1 and len(b) == 1 and a[0] != b[0]:
            pairs.append((a[0], b[0]))
    return pairs


def comparison_pairs(specs, comp: Comparison) -> list[tuple[float, int, int]]:
    """``(temperature, left index, right index)`` into ``specs`` for one comparison: a side without a tree is
    matched on each tree, a side without a sampler on each draft law both sides run. Raises
    :class:`InputError` when nothing matches, so a run can be refused before it starts."""
    found = []
    live = [s.tree is not None for s in specs]  # plain sampling has no tree and no tau to compare
    for T in sorted({s.temperature for s, ok in zip(specs, live) if ok}):
        trees = dict.fromkeys(s.tree.label for s, ok in zip(specs, live) if ok and s.temperature == T)
        both_named = "/" in comp.left and "/" in comp.right
        for tree in trees:
            if both_named and tree != next(iter(trees)):
                continue  # both sides name their trees: one row per temperature
            where = None if both_named else tree
            left = [i for i, s in enumerate(specs) if live[i] and s.temperature == T and _matches(comp.left, s, where)]
            right = [i for i, s in enumerate(specs)
                     if live[i] and s.temperature == T and _matches(comp.right, s, where)]
            found += [(T, a, b) for a, b in _pair_up(left, right, specs)]
    if not found:
        raise InputError(f"--compare {comp.left},{comp.right}: no pair of configurations matches both sides "
                         "(name a verifier that runs, or TREE/VERIFIER with a tree given by --tree; "
                         "VERIFIER:SAMPLER picks one draft law)")
    return found


def compare_expected(run: ExpectedRun, comparisons: Sequence[Comparison], *, level: float = 0.95):
    """Paired differences ``tau(left) - tau(right)`` on the shared contexts, one row per (comparison, tree,
    draft law, temperature): the mean difference, its ``level`` interval over prompts, ``t`` and whether the
    interval excludes 0. A side without a tree is matched on each tree, a side without a sampler on each
    draft law both sides run; unmatched comparisons are refused (:func:`comparison_pairs`)."""
    import pandas as pd

    rows = []
    for comp in comparisons:
        for T, a, b in comparison_pairs(run.specs, comp):
            diffs: dict[int, list] = {}
            for ci, context in enumerate(run.contexts):
                if (a, ci) in run.values and (b, ci) in run.values:
                    d = run.values[(a, ci)].value - run.values[(b, ci)].value
                    diffs.setdefault(context.prompt, []).append(d)
            units = np.array([np.mean(v) for _, v in sorted(diffs.items())])
            mean, half = mean_interval(units, level=level)
            se = half / _t_quantile(units.size - 1, level) if half > 0 else 0.0
            rows.append({"comparison": comp.label, "left": run.specs[a].label, "right": run.specs[b].label,
                         "temperature": T, "prompts": int(units.size),
                         "contexts": int(sum(len(v) for v in diffs.values())), "difference": mean,
                         "difference_low": mean - half, "difference_high": mean + half,
                         "half_width": half, "t": mean / se if se > 0 else math.copysign(math.inf, mean)
                         if mean else 0.0, "resolved": bool(mean - half > 0 or mean + half < 0)})
    return pd.DataFrame(rows)


__all__ = ["Comparison", "compare_expected", "comparison_pairs", "mean_interval", "parse_comparison", "per_context_table",
           "summarize_expected"]
