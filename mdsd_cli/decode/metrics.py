"""Tables from a decode: one summary row per configuration, per-step rows, generated text.

Block efficiency
    ``tau`` = tokens appended per target call, over all steps of all prompts
    (the last step of a prompt is counted whole, before its tokens are cut at
    ``max_new_tokens``, so ``tau`` estimates the expected walk length). Its 95%
    interval is the ratio estimator's over prompts:
    ``tau = sum_i T_i / sum_i S_i`` (tokens and steps of prompt i), standard
    error ``sqrt(m/(m-1) sum_i (T_i - tau S_i)^2) / sum_i S_i``, Student t with
    ``m - 1`` degrees of freedom (steps as the units when there is one prompt),
    clipped to the possible range ``[1, D + 1]`` (a step appends at least one
    token and at most ``D + 1``): with few prompts the t interval alone can
    leave it.

Cost model
    A target pass costs 1 whatever the tree's size, plus ``node_cost`` per
    scored node beyond the root (0 by default: the flat model); a draft pass
    costs ``draft_cost`` (``c``). A step of a tree with ``D`` draft passes and
    ``N`` nodes then costs ``1 + c D + b (N - 1)`` target passes and yields
    ``tau`` tokens, against one token per pass for plain target sampling::

        speedup_model = tau / (1 + c * D + b * (N - 1))

    (``D`` and ``N`` are the measured means per step.) Measured wall times
    (models, drafting bookkeeping, verification, KV-cache bookkeeping) and the measured tokens/s
    against plain sampling in the same run are reported beside it.
"""

from __future__ import annotations

import math

import numpy as np

from .engine import STEP_COLUMNS, VISIT_COLUMNS, DecodeRun

S = {name: i for i, name in enumerate(STEP_COLUMNS)}
VI = {name: i for i, name in enumerate(VISIT_COLUMNS)}
#: Columns with wall times (dropped by ``timing=False``; the rest is a function of the seed).
TIME_COLUMNS = ("draft_seconds", "tree_seconds", "target_seconds", "verify_seconds", "cache_seconds", "seconds",
                "tokens_per_second",
                "draft_cost_measured", "speedup_measured")
KEY_COLUMNS = ("tree", "sampler", "verifier", "temperature")


def ratio_interval(tokens: np.ndarray, steps: np.ndarray, *, level: float = 0.95,
                   bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float, float]:
    """``(tau, low, high)``: the ratio ``sum tokens / sum steps`` and its interval over units (see module doc),
    clipped to ``bounds`` (the range the ratio cannot leave)."""
    from scipy import stats

    tokens = np.asarray(tokens, dtype=float)
    steps = np.asarray(steps, dtype=float)
    total = steps.sum()
    if total <= 0:
        return math.nan, math.nan, math.nan
    tau = tokens.sum() / total
    m = tokens.size
    if m < 2:
        return tau, math.nan, math.nan
    se = math.sqrt(m / (m - 1) * float(((tokens - tau * steps) ** 2).sum())) / total
    half = float(stats.t.ppf(0.5 + level / 2, m - 1)) * se
    return tau, max(tau - half, bounds[0]), min(tau + half, bounds[1])


def _by_prompt(runs, column: int):
    tokens = np.array([r.steps[:, column].sum() for r in runs])
    steps = np.array([r.steps.shape[0] for r in runs], dtype=float)
    return tokens, steps


def summarize(run: DecodeRun, *, draft_cost: float = 0.05, node_cost: float = 0.0, timing: bool = True,
              bounds: dict | None = None):
    """One row per configuration (a pandas DataFrame); see the module docstring for the definitions.

    Columns: tree, nodes (most nodes a tree can have), depth, sampler, verifier,
    temperature, prompts, generated_tokens, target_calls, block_efficiency and
    its 95% interval, mean_nodes and draft_passes per step,
    ``accepted_ge_k`` (fraction of steps that accepted at least k drafted
    tokens), visited_nodes (verifications), acceptance (realised, at those
    nodes), acceptance_expected (mean of the verifier's exact ``P(Y in X | X)``
    at those nodes), alpha_star (mean α* of those nodes' own draft laws), the
    same three per depth (``acceptance_dk``, ``alpha_star_dk``: nodes choosing
    the k-th token), speedup_model; with ``timing``: wall seconds of the draft
    model, the tree bookkeeping, the target model and verification, tokens/s,
    the measured draft cost ratio and the measured speed-up over plain sampling.

    With ``bounds`` (:func:`~.bounds.run_bounds`), means over the steps of:
    ``sequence_bound`` = 1 + sum_d α*_d (``sequence_bound_exact``: every step's
    α*_d exact, else some are upper bounds), ``coupling_bound`` and
    ``lossless_bound`` = 1 + the LP values (the best any lossless verifier can
    do; NaN where the trees cannot be enumerated); and ``per_node_figure`` =
    1 + sum_d prod_{k <= d} alpha_star_dk, the per-node α* of the visited nodes
    compounded down the depths: a figure for comparison, not a bound.
    """
    import pandas as pd

    depth_max = max((s.tree.depth for s in run.specs if not s.plain), default=0)
    by_spec: dict[int, list] = {}
    for r in run.runs:
        by_spec.setdefault(r.spec, []).append(r)
    rows = []
    plain_rate: dict[float, float] = {}
    for si, spec in enumerate(run.specs):
        runs = by_spec.get(si, [])
        steps = np.concatenate([r.steps for r in runs]) if runs else np.zeros((0, len(STEP_COLUMNS)))
        visits = np.concatenate([r.visits for r in runs]) if runs else np.zeros((0, len(VISIT_COLUMNS)))
        generated = sum(len(r.generated) for r in runs)
        tokens, counts = _by_prompt(runs, S["tokens"])
        possible = (1.0, 1.0 + (0 if spec.plain else spec.tree.depth))
        if len(runs) >= 2:
            tau, lo, hi = ratio_interval(tokens, counts, bounds=possible)
        else:
            tau, lo, hi = ratio_interval(steps[:, S["tokens"]], np.ones(steps.shape[0]), bounds=possible)
        n_steps = steps.shape[0]
        mean = lambda x: float(np.mean(x)) if len(x) else math.nan  # noqa: E731
        passes, nodes = mean(steps[:, S["draft_passes"]]), mean(steps[:, S["nodes"]])
        row = {
            "tree": "plain" if spec.plain else spec.tree.label,
            "nodes": 1 if spec.plain else spec.tree.max_nodes,
            "depth": 0 if spec.plain else spec.tree.depth,
            "sampler": "-" if spec.plain else spec.sampler,
            "verifier": "-" if spec.plain else spec.verifier,
            "temperature": spec.temperature,
            "prompts": len(runs), "generated_tokens": generated, "target_calls": n_steps,
            "block_efficiency": tau, "block_efficiency_low": lo, "block_efficiency_high": hi,
            "mean_nodes": nodes, "draft_passes": passes,
        }
        accepted = steps[:, S["accepted"]]
        for k in range(1, depth_max + 1):
            row[f"accepted_ge_{k}"] = (mean(accepted >= k) if not spec.plain and k <= spec.tree.depth
                                       else (0.0 if spec.plain else math.nan))
        row.update(visited_nodes=visits.shape[0], acceptance=mean(visits[:, VI["accepted"]]),
                   acceptance_expected=mean(visits[:, VI["acceptance"]]), alpha_star=mean(visits[:, VI["alpha_star"]]))
        for k in range(1, depth_max + 1):
            at = visits[visits[:, VI["depth"]] == k - 1]
            row[f"acceptance_d{k}"] = mean(at[:, VI["accepted"]])
            row[f"alpha_star_d{k}"] = mean(at[:, VI["alpha_star"]])
        cost = 1.0 + draft_cost * (passes if n_steps else 0.0) + node_cost * ((nodes - 1.0) if n_steps else 0.0)
        row["speedup_model"] = tau / cost if n_steps else math.nan
        if bounds is not None:
            b = bounds.get(si)
            has = b is not None and b.shape[0] > 0
            row["sequence_bound"] = 1.0 + float(b[:, 0].mean()) if has else math.nan
            row["sequence_bound_exact"] = bool(has and b[:, 1].all())
            row["coupling_bound"] = 1.0 + float(b[:, 2].mean()) if has else math.nan
            row["lossless_bound"] = 1.0 + float(b[:, 3].mean()) if has else math.nan
            figure, product = 1.0, 1.0
            for k in range(1, (0 if spec.plain else spec.tree.depth) + 1):
                product *= row[f"alpha_star_d{k}"] if not math.isnan(row[f"alpha_star_d{k}"]) else 0.0
                figure += product
            row["per_node_figure"] = figure if not spec.plain else math.nan
        seconds = {k: float(steps[:, S[k]].sum()) for k in ("draft_seconds", "tree_seconds", "target_seconds",
                                                              "verify_seconds", "cache_seconds")}
        total = sum(seconds.values())
        row.update(seconds)
        row["seconds"] = total
        row["tokens_per_second"] = generated / total if total > 0 else math.nan
        draft_pass = seconds["draft_seconds"] / steps[:, S["draft_passes"]].sum() if passes else math.nan
        target_pass = seconds["target_seconds"] / n_steps if n_steps else math.nan
        row["draft_cost_measured"] = draft_pass / target_pass if target_pass and target_pass > 0 else math.nan
        if spec.plain:
            plain_rate[spec.temperature] = row["tokens_per_second"]
        rows.append(row)
    for row in rows:
        base = plain_rate.get(row["temperature"])
        row["speedup_measured"] = row["tokens_per_second"] / base if base else math.nan
    df = pd.DataFrame(rows)
    if not timing:
        df = df.drop(columns=[c for c in TIME_COLUMNS if c in df.columns])
    return df


def timings_table(summary):
    """The key columns and the wall-time columns of a summary (for a separate timings file)."""
    return summary[[*KEY_COLUMNS, *[c for c in TIME_COLUMNS if c in summary.columns]]]


def steps_table(run: DecodeRun, *, timing: bool = True):
    """One row per step: configuration, prompt, step, position, tokens, accepted, nodes, passes, α* at the root, times."""
    import pandas as pd

    frames = []
    for r in run.runs:
        spec = run.specs[r.spec]
        if not r.steps.shape[0]:
            continue
        df = pd.DataFrame(r.steps, columns=list(STEP_COLUMNS))
        for c in ("position", "tokens", "accepted", "nodes", "draft_passes"):
            df[c] = df[c].astype(np.int64)
        root = np.full(len(df), np.nan)
        if r.visits.shape[0]:
            at_root = r.visits[r.visits[:, VI["depth"]] == 0]
            root[at_root[:, VI["step"]].astype(int)] = at_root[:, VI["alpha_star"]]
        df.insert(0, "step", np.arange(len(df)))
        df.insert(0, "prompt", run.prompts[r.prompt].id)
        df.insert(0, "temperature", spec.temperature)
        df.insert(0, "verifier", "-" if spec.plain else spec.verifier)
        df.insert(0, "sampler", "-" if spec.plain else spec.sampler)
        df.insert(0, "tree", "plain" if spec.plain else spec.tree.label)
        df.insert(df.columns.get_loc("draft_passes") + 1, "alpha_star_root", root)
        frames.append(df)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not timing and not out.empty:
        out = out.drop(columns=["draft_seconds", "tree_seconds", "target_seconds", "verify_seconds", "cache_seconds"])
    return out


def prompts_table(run: DecodeRun):
    """One row per (configuration, prompt): generated tokens, target calls, the walks' tokens and accepted
    drafts, verified nodes, and the prompt's block efficiency (walk tokens per target call).

    Every configuration decodes the same prompts, so two configurations can be
    compared prompt by prompt (a paired test), which removes the large
    differences between prompts from the comparison.
    """
    import pandas as pd

    rows = []
    for r in run.runs:
        spec = run.specs[r.spec]
        steps = r.steps.shape[0]
        tokens = float(r.steps[:, S["tokens"]].sum())
        rows.append({"tree": "plain" if spec.plain else spec.tree.label, "sampler": "-" if spec.plain else spec.sampler,
                     "verifier": "-" if spec.plain else spec.verifier, "temperature": spec.temperature,
                     "prompt": run.prompts[r.prompt].id, "generated_tokens": len(r.generated), "target_calls": steps,
                     "walk_tokens": int(tokens), "accepted": int(r.steps[:, S["accepted"]].sum()),
                     "visited_nodes": r.visits.shape[0],
                     "block_efficiency": tokens / steps if steps else math.nan})
    return pd.DataFrame(rows)


def text_records(run: DecodeRun, model) -> list[dict]:
    """One record per (configuration, prompt): the prompt, the generated ids and their text."""
    records = []
    for r in run.runs:
        spec, prompt = run.specs[r.spec], run.prompts[r.prompt]
        records.append({
            "tree": "plain" if spec.plain else spec.tree.label, "sampler": spec.sampler or "-",
            "verifier": spec.verifier or "-", "temperature": spec.temperature, "prompt": prompt.id,
            "prompt_text": prompt.text if prompt.text is not None else model.decode(prompt.tokens),
            "text": model.decode(r.generated), "ids": [int(t) for t in r.generated],
        })
    return records


__all__ = ["KEY_COLUMNS", "TIME_COLUMNS", "prompts_table", "ratio_interval", "steps_table", "summarize",
           "text_records", "timings_table"]
