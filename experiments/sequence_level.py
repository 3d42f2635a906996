"""The `sequence-level` experiment: per-node and sequence-level verifiers against the sequence-level bounds.

Two pairs, one decoding step from fixed root contexts, T = 1 (and T = 0.6 for the exact part):

* ``synthetic-v4`` — the context-hashed Zipf pair at V = 4 (seed 9, noise 1.5),
  8 root contexts. Everything is exact: every draft tree is enumerated, each
  verifier's expected tokens per step comes from its exact conditional law, and
  the bounds are 1 + sum_d α*_d, the coupling LP and the lossless LP (the best
  any lossless verifier can do), and on the depth-2 trees the two-level
  transport rule (``two-level-lp``, mdsd_cli.decode.two_level: a measurement,
  not a verifier decode runs). Generation (the first step, 40 runs per
  context) is measured too.
* ``pydoc-ngram`` — the 4-gram / bigram pair (V = 2,380), depth 2, the first
  step from 48 held-out prompts: tau(c) at each (``mdsd decode --expected``'s
  estimator: exact recursion for per-node verifiers, Monte Carlo for the
  sequence-level verifiers), its mean with a 95% interval over the prompts, and the
  gap to 1 + sum_d α*_d paired at each prompt (exact for chains and iid paths;
  an upper bound for full trees; the LPs do not fit), and ``select-block``,
  ``select-traversal`` and ``select-race`` minus ``traversal``, minus the per-node
  optimum, minus ``select-block`` and (``select-race``) minus ``select-traversal``,
  paired prompt by prompt (``minus_*`` columns). Generation (16 runs of the first step from each of the
  same prompts) is the check.

Writes ``results/sequence-level/summary.csv`` (one row per dataset, tree, draft
law, verifier and method) with a manifest, and ``block-efficiency.png``/``.svg``.
Usage: ``python experiments/sequence_level.py [OUT_DIR]`` (about 9 minutes on 2 cores).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mdsd_cli.decode import parse_tree, plan_decode, run_decode
from mdsd_cli.decode.bounds import step_bound
from mdsd_cli.decode.exact import ConditionalLaws, per_node_output_law, tree_law, tree_paths
from mdsd_cli.decode.metrics import ratio_interval
from mdsd_cli.decode.sequence import SEQUENCE_VERIFIERS
from mdsd_cli.decode.two_level import two_level_law
from mdsd_cli.decode.walk import VerifierCache
from mdsd_cli.io import build_manifest, write_table
from mdsd_cli.models import Prompt, load_model_pair
from mdsd_cli.models.synthetic import synthetic_models
from mdsd_cli.verifiers import VERIFIERS

SEED = 0
T = 1.0
#: Temperatures of the exact synthetic-v4 part (generation and pydoc-ngram run at T only).
EXACT_TEMPERATURES = (1.0, 0.6)
#: (tree, draft law, verifiers): per-node first, then sequence-level.
CASES = [
    ("1x2", "iid", ["rrs", "block"]),
    ("1x3", "iid", ["rrs", "block"]),
    ("2x2", "iid", ["rrs", "kseq", "optimal-iid", "traversal", "select-block", "select-traversal", "select-race",
                    "two-level-lp"]),
    ("2x2", "wor", ["rrsw", "optimal-wor", "traversal", "select-block", "select-traversal", "select-race",
                    "two-level-lp"]),
    ("3,1", "iid", ["rrs", "optimal-iid", "traversal", "select-block", "select-traversal", "select-race",
                    "two-level-lp"]),
    ("3,1", "wor", ["rrsw", "optimal-wor", "traversal", "select-block", "select-traversal", "select-race",
                    "two-level-lp"]),
    ("paths:2x2", "iid", ["rrs", "kseq", "optimal-iid"]),
]
PYDOC_CASES = [
    ("1x2", "iid", ["rrs", "block"]),
    ("2x2", "iid", ["rrs", "kseq", "optimal-iid", "traversal", "select-block", "select-traversal", "select-race"]),
    ("2x2", "wor", ["rrsw", "optimal-wor", "traversal", "select-block", "select-traversal", "select-race"]),
    ("4x2", "iid", ["rrs", "kseq", "optimal-iid", "traversal", "select-block", "select-traversal", "select-race"]),
    ("paths:4x2", "iid", ["rrs", "kseq", "optimal-iid"]),
]
SEQUENCE = set(SEQUENCE_VERIFIERS)
#: The tree verifiers of issue 29, paired at each prompt with traversal, the per-node optimum and each other.
OURS = ("select-block", "select-traversal", "select-race")
#: Not a verifier `mdsd decode` runs: the two-level transport rule (mdsd_cli.decode.two_level), exact on the
#: depth-2 synthetic trees only, a measurement of how much a rule that sees only the tree's laws can still add.
REFERENCE = "two-level-lp"
#: Held-out prompts whose first step is evaluated on pydoc-ngram (tau(c) at each, paired).
PYDOC_CONTEXTS = 48


def log(msg: str) -> None:
    print(f"[sequence-level] {msg}", file=sys.stderr, flush=True)


def exact_tokens(target, draft, context, name, sampler, verifiers, temperature=T) -> dict[str, float]:
    """Each verifier's exact expected tokens per step at ``context`` (every draft tree enumerated)."""
    P, Q = ConditionalLaws(target, context, temperature), ConditionalLaws(draft, context, temperature)
    caches = {v: VerifierCache(VERIFIERS[v], sampler) for v in verifiers if v not in SEQUENCE and v != REFERENCE}
    out = dict.fromkeys(verifiers, 0.0)
    rules: dict = {}
    for tree, prob in tree_law(parse_tree(name), sampler, Q):
        Ps = list(P.many(tree_paths(tree)))
        for v in verifiers:
            if v == REFERENCE:
                law = two_level_law(tree, Ps, sampler, rules)
            elif v in SEQUENCE:
                law = SEQUENCE_VERIFIERS[v].output_law(tree, Ps, sampler)
            else:
                law = per_node_output_law(tree, Ps, lambda p, q, n, s, c=caches[v]: c(p, q, n), sampler)
            out[v] += prob * sum(m * len(k) for k, m in law.items())
    return out


def generated(target, draft, contexts, cases, repeats) -> pd.DataFrame:
    """Block efficiency of the first step from each context, ``repeats`` runs each, with its 95% interval."""
    prompts = [Prompt(i * repeats + r, tuple(c)) for i, c in enumerate(contexts) for r in range(repeats)]
    rows = []
    for name, sampler, verifiers in cases:
        specs, _ = plan_decode([name], [f"{v}:{sampler}" for v in verifiers if v != REFERENCE], temperatures=[T],
                               vocab_size=target.vocab_size, baselines=False)
        run = run_decode(target, draft, prompts, specs, max_new_tokens=1, seed=SEED, node_metrics=False,
                         reuse_verifiers=True)
        for si, spec in enumerate(specs):
            units = [r for r in run.runs if r.spec == si]
            tokens = np.array([r.steps[:, 1].sum() for r in units])
            tau, lo, hi = ratio_interval(tokens, np.ones(len(units)))
            rows.append({"tree": name, "sampler": sampler, "temperature": T, "verifier": spec.verifier,
                         "method": "generation",
                         "block_efficiency": tau, "block_efficiency_low": lo, "block_efficiency_high": hi,
                         "steps": len(units)})
    return pd.DataFrame(rows)


def bounds_at(target, draft, contexts, cases, *, lp: bool, per_context: bool = False,
              temperature: float = T) -> pd.DataFrame:
    rows = []
    laws: dict = {}
    for i, context in enumerate(contexts):
        for name, sampler, _ in cases:
            total, exact, coupling, lossless = step_bound(target, draft, context, parse_tree(name), sampler,
                                                          temperature, lp=lp, laws=laws)
            rows.append({"context": i, "tree": name, "sampler": sampler, "temperature": temperature,
                         "sequence_bound": 1 + total,
                         "sequence_bound_exact": exact, "coupling_bound": 1 + coupling, "lossless_bound": 1 + lossless})
    b = pd.DataFrame(rows)
    return b if per_context else mean_bounds(b)


def mean_bounds(per: pd.DataFrame) -> pd.DataFrame:
    """The bounds per case, averaged over the contexts. Strict: an LP that did not run or verify at one
    context leaves the mean empty (a mean over the other contexts would not be comparable with the
    verifiers' means over all of them)."""
    def strict(x):
        return x.mean(skipna=False)

    return per.groupby(["tree", "sampler", "temperature"], sort=False).agg(
        sequence_bound=("sequence_bound", strict), sequence_bound_exact=("sequence_bound_exact", "all"),
        coupling_bound=("coupling_bound", strict), lossless_bound=("lossless_bound", strict)).reset_index()


def expected_at(target, draft, contexts, cases, bounds: pd.DataFrame) -> pd.DataFrame:
    """tau(c) of every case at every context (``mdsd decode --expected``'s estimator; exact where the verifier
    has an exact law, sampled draft tuples or Monte Carlo elsewhere), its mean with a 95% interval over the
    contexts (one per prompt), and the paired gap to 1 + sum_d alpha*_d at the same contexts."""
    from mdsd_cli.decode.expected import Context, TauOptions, mean_interval, run_expected

    ctx = [Context(i, 0, tuple(c), T) for i, c in enumerate(contexts)]
    rows = []
    for name, sampler, verifiers in cases:
        per_context: dict[str, np.ndarray] = {}
        case_rows: dict[str, dict] = {}
        specs, _ = plan_decode([name], [f"{v}:{sampler}" for v in verifiers], temperatures=[T],
                               vocab_size=target.vocab_size, baselines=False)
        run = run_expected(target, draft, ctx, specs, options=TauOptions(prune=0.001, draft_samples=256,
                                                                         repeats=64), seed=SEED, jobs=2)
        bound = bounds[(bounds.tree == name) & (bounds.sampler == sampler)].set_index("context").sequence_bound
        for si, spec in enumerate(run.specs):
            values = np.array([run.values[(si, ci)].value for ci in range(len(ctx))])
            tau, half = mean_interval(values)
            gap, gap_half = mean_interval(bound.loc[range(len(ctx))].to_numpy() - values)
            methods = sorted({run.values[(si, ci)].method for ci in range(len(ctx))})
            case_rows[spec.verifier] = {
                "tree": name, "sampler": sampler, "temperature": T, "verifier": spec.verifier,
                "method": "+".join(methods), "block_efficiency": tau, "block_efficiency_low": tau - half,
                "block_efficiency_high": tau + half, "steps": len(ctx), "gap_to_sequence_bound": gap,
                "gap_half_width": gap_half}
            per_context[spec.verifier] = values
        # ours paired with traversal, the per-node optimum, select-block and select-traversal at the same contexts
        per_node = SEQUENCE_VERIFIERS["select-block"].per_node(sampler)
        for ours in OURS:
            row = case_rows.get(ours)
            for column, other in (("traversal", "traversal"), ("per_node", per_node), ("select_block", "select-block"),
                                  ("select_traversal", "select-traversal")):
                if row is not None and other in per_context and other != ours:
                    diff, diff_half = mean_interval(per_context[ours] - per_context[other])
                    row[f"minus_{column}"], row[f"minus_{column}_half"] = diff, diff_half
        rows += case_rows.values()
    return pd.DataFrame(rows)


def synthetic_part() -> pd.DataFrame:
    target, draft = synthetic_models(4, seed=9, noise=1.5)
    contexts = [(a, b) for a in range(4) for b in range(4)][::2]  # 8 root contexts
    t0 = time.perf_counter()
    bounds = pd.concat([bounds_at(target, draft, contexts, CASES, lp=True, temperature=temp)
                        for temp in EXACT_TEMPERATURES], ignore_index=True)
    log(f"synthetic bounds in {time.perf_counter() - t0:.0f} s")
    rows = []
    for temp in EXACT_TEMPERATURES:
        for name, sampler, verifiers in CASES:
            per = [exact_tokens(target, draft, c, name, sampler, verifiers, temp) for c in contexts]
            for v in verifiers:
                value = float(np.mean([p[v] for p in per]))
                rows.append({"tree": name, "sampler": sampler, "temperature": temp, "verifier": v, "method": "exact",
                             "block_efficiency": value, "block_efficiency_low": value,
                             "block_efficiency_high": value, "steps": np.nan})
    log(f"synthetic exact values in {time.perf_counter() - t0:.0f} s")
    gen = generated(target, draft, contexts, CASES, 40)
    log(f"synthetic generation in {time.perf_counter() - t0:.0f} s")
    df = pd.concat([pd.DataFrame(rows), gen], ignore_index=True).merge(bounds, on=["tree", "sampler", "temperature"])
    df.insert(0, "dataset", "synthetic-v4")
    return df


def pydoc_part() -> pd.DataFrame:
    pair = load_model_pair("pydoc-ngram")
    contexts = [p.tokens for p in pair.prompts(PYDOC_CONTEXTS)]
    t0 = time.perf_counter()
    per = bounds_at(pair.target, pair.draft, contexts, PYDOC_CASES, lp=False, per_context=True)
    bounds = mean_bounds(per)
    log(f"pydoc-ngram bounds in {time.perf_counter() - t0:.0f} s")
    expected = expected_at(pair.target, pair.draft, contexts, PYDOC_CASES, per)
    log(f"pydoc-ngram expected tokens in {time.perf_counter() - t0:.0f} s")
    gen = generated(pair.target, pair.draft, contexts, PYDOC_CASES, 16)  # the check: the first step, sampled
    log(f"pydoc-ngram generation in {time.perf_counter() - t0:.0f} s")
    df = pd.concat([expected, gen], ignore_index=True).merge(bounds, on=["tree", "sampler", "temperature"])
    df.insert(0, "dataset", "pydoc-ngram")
    return df


def plot(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(dict.fromkeys(df.dataset))
    fig, axes = plt.subplots(1, len(sets), figsize=(6.2 * len(sets), 4.2), squeeze=False)
    colours = {"rrs": "#9ecae1", "kseq": "#6baed6", "optimal-iid": "#2171b5", "rrsw": "#a1d99b", "optimal-wor": "#31a354",
               "block": "#fd8d3c", "traversal": "#d94801", "select-block": "#7a0177",
               "select-traversal": "#e7298a", "select-race": "#49006a", REFERENCE: "#bdbdbd"}
    for ax, name in zip(axes[0], sets):
        d = df[(df.dataset == name) & (df.temperature == T)
               & ((df.method == "exact") if name == "synthetic-v4" else (df.method != "generation"))]
        groups = list(dict.fromkeys(zip(d.tree, d.sampler)))
        for g, (tree, sampler) in enumerate(groups):
            rows = d[(d.tree == tree) & (d.sampler == sampler)]
            width = 0.8 / len(rows)
            for j, r in enumerate(rows.itertuples()):
                x = g - 0.4 + width * (j + 0.5)
                err = None if r.block_efficiency_low == r.block_efficiency_high else [[r.block_efficiency - r.block_efficiency_low],
                                                        [r.block_efficiency_high - r.block_efficiency]]
                ax.bar(x, r.block_efficiency, width, yerr=err, color=colours.get(r.verifier, "grey"),
                       label=r.verifier if g == 0 or r.verifier not in ax.get_legend_handles_labels()[1] else None)
            top = rows.iloc[0]
            ax.hlines(top.sequence_bound, g - 0.45, g + 0.45, colors="black", linestyles="--",
                      label="1 + Σ α*_d" if g == 0 else None)
            if not np.isnan(top.lossless_bound):
                ax.hlines(top.lossless_bound, g - 0.45, g + 0.45, colors="black",
                          label="lossless optimum (LP)" if g == 0 else None)
        ax.set_xticks(range(len(groups)), [f"{t}\n{s}" for t, s in groups])
        ax.set_ylabel("tokens per target call (τ)")
        ax.set_ylim(1, None)
        ax.set_title(f"{name}: " + ("exact" if name == "synthetic-v4" else "expected, first step, ± 95% over prompts"))
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper left")
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"block-efficiency.{ext}", dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path("results/sequence-level")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    df = pd.concat([synthetic_part(), pydoc_part()], ignore_index=True)
    manifest = build_manifest("sequence-level", {"temperature": T, "exact_temperatures": list(EXACT_TEMPERATURES),
                                                 "seed": SEED, "cases": CASES,
                                                 "pydoc_cases": PYDOC_CASES},
                              seconds=round(time.perf_counter() - t0, 1))
    write_table(df, out / "summary.csv", manifest=manifest)
    plot(df, out)
    log(f"wrote {out / 'summary.csv'} and the figure in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
