"""Section 5 of FINDINGS.md: decoding with draft trees — τ per (tree, verifier, T), agreement with
generation, whether the single-step orders carry over, and where in the tree multi-draft helps."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import verdict

#: Single-step orders expected to carry over (better, worse): within a draft law, then wor against iid.
ORDERS = [("optimal-iid", "kseq"), ("kseq", "rrs"), ("rrs", "nss"), ("optimal-wor", "rrsw"), ("rrsw", "rrs"),
          ("optimal-wor", "optimal-iid")]
#: The verifier columns of the τ table, in order.
VERIFIER_COLUMNS = ["nss", "rrs", "kseq", "optimal-iid", "rrsw", "optimal-wor", "greedy", "topk", "hub"]
#: The orderings the tree-decode experiment tests (expected from the single step, sections 2-3).
ORDER_LABELS = [f"{a} - {b}" for a, b in ORDERS]
#: Largest half-width of a paired difference the experiment aims at (tokens per call).
PAIRED_TARGET = 0.02


def _overlap(a_low, a_high, b_low, b_high) -> bool:
    return a_low <= b_high and b_low <= a_high


def _topk_reading(expected: pd.DataFrame) -> list[str]:
    """How the deterministic top-k drafts (EAGLE-2/3, Medusa) fare against greedy and rrs, tree by tree."""
    top = expected[expected.verifier == "topk"]
    if top.empty:
        return []
    parts = []
    for T, at in expected.groupby("temperature"):
        gaps = []
        for r in top[top.temperature == T].itertuples():
            row = at[at.tree == r.tree].set_index("verifier").block_efficiency
            chain = at[at.tree == f"1x{int(r.depth)}"].block_efficiency
            gaps.append((r.tree, r.block_efficiency - row.get("greedy", float("nan")),
                         r.block_efficiency - row.get("rrs", float("nan")),
                         r.block_efficiency - (chain.iloc[0] if len(chain) else float("nan"))))
        lo = min(g[1] for g in gaps)
        hi = max(g[1] for g in gaps)
        rrs_lo = min(g[2] for g in gaps)
        rrs_hi = max(g[2] for g in gaps)
        below = [g for g in gaps if g[3] < 0]
        parts.append(f"at T = {T:g}, {lo:+.2f} to {hi:+.2f} tokens per call against `greedy` and {rrs_lo:+.2f} to "
                     f"{rrs_hi:+.2f} against `rrs`"
                     + (f", and below the single-draft chain of the same depth on {len(below)} of {len(gaps)} trees "
                        f"({min(g[3] for g in below):+.2f} to {max(g[3] for g in below):+.2f})" if below else ""))
    return ["*Deterministic top-k drafts* (`topk`, EAGLE-2/3's and Medusa's law, with target sampling, which is "
            "optimal for it), differences of the means over the same contexts: " + "; ".join(parts) + ". Fixing the drafts to the draft model's top k gives up the "
            "mass a random draft covers; with a bigram draft at T = 1 that costs most.", ""]


def _eagle_reversal(T: float, ge1: dict, ge2: dict) -> str:
    """eagle-1: `kseq` accepts some root child more often than `rrs`, but the first (deepest) one less often."""
    return ("On eagle-1 the children of a node are unlike: the first carries the deepest subtree. `rrs` and "
            "`rrsw` try the drafts in order and so accept the first child most often; `kseq`, `optimal-iid` and "
            "`optimal-wor` raise the chance of accepting *some* child but are indifferent to which. At "
            f"T = {T:g}, `kseq` accepts a root child more often than `rrs` (P(accepted ≥ 1) {ge1['kseq']:.3f} "
            f"against {ge1['rrs']:.3f}) and goes deeper less often (P(accepted ≥ 2) {ge2['kseq']:.3f} against "
            f"{ge2['rrs']:.3f}). A per-node optimum is not an optimum over the tree where subtrees differ; a "
            "verifier that weighs each child by what its subtree yields is the open question (docs/sequence.md)")


def _paths_reversal(T: float, d1: dict, d2: dict) -> str:
    """paths:4x4: drafting without replacement accepts more at the root and less along the path below."""
    return ("On paths:4x4 every root child leads a single-draft path. Drafting without replacement accepts "
            f"more at the root (at T = {T:g}, `optimal-wor` {d1['optimal-wor']:.3f} against `kseq` "
            f"{d1['kseq']:.3f}) but the path below is accepted less often (depth 2: {d2['optimal-wor']:.3f} "
            f"against {d2['kseq']:.3f}): the extra root tokens are less likely ones, presumably followed by "
            "contexts the bigram draft predicts worse")


#: The reversals explained, in the order they are told: (tree, the verifiers and the two columns of `expected`
#: the explanation reads, a function of T and each column's {verifier: value} that tells it).
_REVERSALS = [("eagle-1", ("rrs", "kseq"), ("accepted_ge_1", "accepted_ge_2"), _eagle_reversal),
              ("paths:4x4", ("optimal-wor", "kseq"), ("acceptance_d1", "acceptance_d2"), _paths_reversal)]


def _reversals_explained(reversed_: pd.DataFrame, expected: pd.DataFrame) -> str:
    """Why an expected order reverses, from the per-depth acceptances of the trees where it does."""
    if reversed_.empty:
        return ""
    parts = []
    trees = sorted({r.left.split()[0] for r in reversed_.itertuples()})
    exact = expected[expected.method == "exact"]
    for tree, verifiers, columns, explain in _REVERSALS:
        if tree not in trees:
            continue
        T = max(reversed_[reversed_.left.str.startswith(tree)].temperature)  # the hottest reversal on the tree
        at = exact[(exact.tree == tree) & (exact.temperature == T)]
        values = [{v: (None if at[at.verifier == v].empty else float(at[at.verifier == v][col].iloc[0]))
                   for v in verifiers} for col in columns]
        if not any(None in v.values() for v in values):
            parts.append(explain(T, *values))
    return ("*Why the reversals.* " + ". ".join(parts) + ".") if parts else ""


def tree_decode(results: Path) -> list[str]:
    base = results / "tree-decode"
    expected = pd.read_csv(base / "expected.csv")
    comparisons = pd.read_csv(base / "comparisons.csv")
    generation = pd.read_csv(base / "summary.csv")
    generation = generation[generation.tree != "plain"]
    chains = [t for t in dict.fromkeys(expected.tree) if t.startswith("1x")]
    multi = [t for t in dict.fromkeys(expected.tree) if t not in chains]
    temps = sorted(expected.temperature.unique())
    first = expected.iloc[0]
    sampled = sorted({f"{r.verifier} on {r.tree}" for r in expected.itertuples() if r.method != "exact"})
    out = ["## 5. Decoding with draft trees (`tree-decode`)", "",
           f"`pydoc-ngram` models over whole contexts. Every configuration is evaluated at the same "
           f"{int(first.contexts)} contexts per temperature (one position in the first "
           f"{48} tokens of a target continuation of each of {int(first.prompts)} held-out prompts): τ(c), the "
           "expected tokens of one step from context c (`mdsd decode --expected`), exact by recursion over the "
           "accepted tokens where the verifier has an exact law (subtrees below path probability 0.01 sampled, "
           "with a certified interval), from sampled draft tuples where it has none ("
           + ", ".join(sampled) + "). Mean τ ± the half-width of its 95% interval over prompts; every verifier on "
           "its own draft law (`nss` on iid drafts); the chains " + ", ".join(chains) + " are single-draft "
           "speculative sampling (`rrs` with one draft), the baseline of every tree of that depth.", ""]
    lines = ["| T | tree | nodes | " + " | ".join(VERIFIER_COLUMNS) + " |", "|---" * (3 + len(VERIFIER_COLUMNS)) + "|"]
    for T in temps:
        for tree in chains + multi:
            d = expected[(expected.temperature == T) & (expected.tree == tree)].set_index("verifier")
            cells = [f"{d.loc[v, 'block_efficiency']:.3f} ± "
                     f"{d.loc[v, 'block_efficiency_high'] - d.loc[v, 'block_efficiency']:.3f}"
                     + ("*" if d.loc[v, "method"] != "exact" else "")
                     if v in d.index else "—" for v in VERIFIER_COLUMNS]
            lines.append(f"| {T:g} | {tree} | {int(d.nodes.iloc[0])} | " + " | ".join(cells) + " |")
    width = (expected.certified_high - expected.certified_low)[expected.method == "exact"]
    out += lines + ["", "(—: not run. `hub` needs two drafts at every node; the single-draft chains `1xL` run "
                    "`rrs` only. *: node laws from sampled draft tuples. Where exact, the mean of the certified "
                    f"per-context intervals is {width.median():.3f} wide (median; up to {width.max():.3f}): the "
                    "point is the exact part plus the sampled pruned subtrees.)", ""]
    out += _topk_reading(expected)

    # agreement with generation
    agree = mean_agree = cells = 0
    worst = []
    for r in generation.itertuples():
        e = expected[(expected.tree == r.tree) & (expected.verifier == r.verifier) & (expected.sampler == r.sampler)
                     & (expected.temperature == r.temperature)]
        if e.empty:
            continue
        e = e.iloc[0]
        cells += 1
        ok = _overlap(r.block_efficiency_low, r.block_efficiency_high, e.generation_estimate_low,
                      e.generation_estimate_high)
        agree += ok
        mean_agree += _overlap(r.block_efficiency_low, r.block_efficiency_high, e.block_efficiency_low,
                               e.block_efficiency_high)
        worst.append((abs(r.block_efficiency - e.generation_estimate), f"{r.verifier} on {r.tree} at "
                      f"T = {r.temperature:g}: generation {r.block_efficiency:.2f} "
                      f"[{r.block_efficiency_low:.2f}, {r.block_efficiency_high:.2f}], expected "
                      f"{e.generation_estimate:.2f} [{e.generation_estimate_low:.2f}, "
                      f"{e.generation_estimate_high:.2f}]"))
    worst.sort()
    gen_prompts = int(generation.prompts.iloc[0])
    out += [f"*Check: does generation agree?* A generation run ({gen_prompts} other held-out prompts, "
            f"{int(generation.generated_tokens.iloc[0] / generation.prompts.iloc[0])} tokens each; `rrs`, `kseq`, "
            "`optimal-iid` on every tree and the chains) measures tokens per target call as a ratio over its steps, "
            "which weights a context by how often a step starts there, about 1/τ(c) per token: it estimates "
            "about the harmonic mean of τ(c), not the mean (exactly so only where τ(c) varies slowly along the "
            "text; it does not on eagle-1, where one hard token is often followed by easy ones). Its interval "
            "overlaps that of the harmonic mean in "
            f"{agree} of {cells} configurations ({verdict(agree == cells, partial=agree >= cells - 2)}; farthest: "
            f"{worst[-1][1]}), and that of the plain mean in {mean_agree} of {cells}: the mean of τ(c) is the "
            "expected length of a step at a position of the text, larger than what a run's ratio shows.", ""]

    # Q1: orderings, paired
    orders = comparisons[comparisons.comparison.isin(ORDER_LABELS)]
    held = int((orders.difference > 0).sum())
    resolved = int(((orders.difference_low > 0)).sum())
    reversed_ = orders[orders.difference_high < 0]
    within = int((orders.half_width <= PAIRED_TARGET).sum())
    wide = orders[orders.half_width > PAIRED_TARGET]
    wide_resolved = int(((wide.difference_low > 0) | (wide.difference_high < 0)).sum())
    rev = "; ".join(f"{r.comparison} on {r.left.split()[0]} at T = {r.temperature:g}: {r.difference:+.3f} "
                    f"[{r.difference_low:+.3f}, {r.difference_high:+.3f}]" for r in reversed_.itertuples())
    open_ = orders[(orders.difference_low <= 0) & (orders.difference_high >= 0)]
    opened = "; ".join(f"{r.comparison} on {r.left.split()[0]} at T = {r.temperature:g}: {r.difference:+.3f} "
                       f"± {r.half_width:.3f}" for r in open_.itertuples())
    out += ["*Expected (single step, §2–3): optimal-iid > kseq > rrs > nss on iid drafts, optimal-wor > rrsw, and "
            "drafting without replacement ≥ iid (rrsw ≥ rrs, optimal-wor ≥ optimal-iid). Does the order carry over "
            "to tokens per call?*", "",
            f"Paired on the shared contexts, the expected order holds in {held} of {len(orders)} (ordering, tree, T) "
            f"comparisons, {resolved} of them resolved (95% interval above 0), and is reversed with the interval "
            f"below 0 in {len(reversed_)}"
            + (f": {rev}" if rev else "") + ". "
            + (f"Unresolved: {opened}. " if opened else "")
            + f"{within} of {len(orders)} paired intervals are at most ±{PAIRED_TARGET} tokens per call (median "
            f"±{orders.half_width.median():.3f}); the {len(wide)} wider ones are differences that vary much "
            f"between contexts, {wide_resolved} of them resolved all the same: "
            f"{verdict(len(reversed_) == 0 and resolved == len(orders), partial=resolved >= len(orders) // 2)}.", ""]
    why = _reversals_explained(reversed_, expected)
    if why:
        out += [why, ""]
    lines = ["| ordering | T | " + " | ".join(multi) + " |", "|---|---" + "|---" * len(multi) + "|"]
    for label in ORDER_LABELS:
        for T in temps:
            row = []
            for tree in multi:
                c = orders[(orders.comparison == label) & (orders.temperature == T)
                           & (orders.left.str.split().str[0] == tree)]
                row.append("—" if c.empty else f"{c.difference.iloc[0]:+.3f} ± {c.half_width.iloc[0]:.3f}")
            lines.append(f"| {label} | {T:g} | " + " | ".join(row) + " |")
    out += lines + [""]
    trees_vs = comparisons[~comparisons.comparison.isin(ORDER_LABELS)]
    out += ["Every tree against the single-draft chain of its depth (`rrs`): "
            + "; ".join(f"{r.left.split()[0]} at T = {r.temperature:g} {r.difference:+.3f} ± {r.half_width:.3f}"
                        for r in trees_vs.itertuples())
            + f" ({int((trees_vs.difference_low > 0).sum())} of {len(trees_vs)} resolved above 0, "
            f"{int((trees_vs.difference_high < 0).sum())} below).", ""]

    # Q2: where in the tree does multi-draft help most?
    depth_max = int(expected[expected.tree.isin(multi)].depth.max())
    depth_lines = ["| T | tree | verifier | " + " | ".join(f"depth {k}" for k in range(1, depth_max + 1))
                   + " | τ − τ(chain) | P(accepted ≥ 1) − chain's |", "|---" * (5 + depth_max) + "|"]
    root_best = deeper_best = 0
    root_part = total_gain = 0.0
    for T in temps:
        at = expected[expected.temperature == T]
        for tree in multi:
            depth = int(at[at.tree == tree].depth.iloc[0])
            chain = at[at.tree == f"1x{depth}"].iloc[0]
            cells_ = [f"{chain[f'acceptance_d{k}']:.3f}" if k <= depth else "" for k in range(1, depth_max + 1)]
            depth_lines.append(f"| {T:g} | {tree} | chain 1x{depth} (one draft) | " + " | ".join(cells_) + " | | |")
            for verifier in ("rrs", "kseq", "optimal-iid", "rrsw", "optimal-wor", "greedy", "topk"):
                r = at[(at.tree == tree) & (at.verifier == verifier)]
                if r.empty or r.iloc[0].method != "exact":
                    continue  # per-depth acceptances come from the exact recursion only
                r = r.iloc[0]
                gains = {k: r[f"acceptance_d{k}"] - chain[f"acceptance_d{k}"] for k in range(1, depth + 1)}
                best = max(gains, key=gains.get)
                root_best += best == 1
                deeper_best += best > 1
                gain = r.block_efficiency - chain.block_efficiency
                root = r.accepted_ge_1 - chain.accepted_ge_1
                total_gain += gain
                root_part += root
                cells_ = [f"{r[f'acceptance_d{k}']:.3f} ({gains[k]:+.3f})" if k in gains else ""
                          for k in range(1, depth_max + 1)]
                depth_lines.append(f"| {T:g} | {tree} | {verifier} | " + " | ".join(cells_)
                                   + f" | {gain:+.2f} | {root:+.3f} |")
    share = root_part / total_gain
    out += ["*Where in the tree does multi-draft help most?* Acceptance at each depth k (expected: P(accepted ≥ k) "
            "over the probability that the walk verifies a node at depth k − 1; lower bounds where pruned) and, in "
            "brackets, its gain over the single-draft chain of the same depth; then the gain in τ, and the root's "
            "part of it: since τ = 1 + Σ_k P(accepted ≥ k), the root adds the change in P(accepted ≥ 1) and every "
            "deeper level the change in P(accepted ≥ k):", "", *depth_lines, "",
            f"Per visit, the acceptance gains most at the root (depth 1) in {root_best} of {root_best + deeper_best} "
            f"(tree, verifier, T) cases and deeper down in {deeper_best}. Summed over these cases, the root's change "
            f"in P(accepted ≥ 1) is {share:.0%} of the total gain in τ and the deeper levels' {1 - share:.0%}: "
            + ("multi-draft helps most at the root, both per visit and in tokens per call."
               if share > 0.6 else
               "per visit multi-draft helps most at the root, and in tokens per call the root and the deeper "
               "levels contribute about equally (the root's gain also carries every deeper level's)."
               if share >= 0.4 else
               "per visit multi-draft helps most at the root, but most of the gain in tokens per call is made "
               "deeper down.")
            + " (Per-visit acceptances at depth k are averaged over the contexts the walk reaches there: easier "
            "ones than the root's; with widths that shrink, as in paths:4x4 and eagle-1, deeper nodes draw fewer "
            "drafts and their gain falls to zero or below.)", ""]
    timings = base / "timings.csv"
    if timings.exists():
        t = pd.read_csv(timings).merge(generation[["tree", "sampler", "verifier", "temperature", "visited_nodes"]],
                                       on=["tree", "sampler", "verifier", "temperature"])
        per = (t.verify_seconds / t.visited_nodes).groupby(t.verifier).median()
        out += ["Verification time per visited node in the generation run (median over configurations; wall "
                "times are in `timings.csv`): "
                + ", ".join(f"{v} {per[v] * 1e3:.2f} ms" for v in VERIFIER_COLUMNS if v in per.index) + ".", ""]
    return out + _synthetic_wor(base)


def _synthetic_wor(base: Path) -> list[str]:
    """`optimal-wor` against `rrsw` on the wor trees of the V = 32,000 synthetic run: tau and time per node."""
    summary, timings = base / "synthetic-summary.csv", base / "synthetic-timings.csv"
    if not (summary.exists() and timings.exists()):
        return []
    keys = ["tree", "sampler", "verifier", "temperature"]
    d = pd.read_csv(summary).merge(pd.read_csv(timings)[[*keys, "verify_seconds"]], on=keys)
    d = d[d.verifier.isin(["rrsw", "optimal-wor"])].set_index(["temperature", "tree", "verifier"])
    lines = ["| T | tree | `rrsw` τ | `optimal-wor` τ | `rrsw` ms per node | `optimal-wor` ms per node |",
             "|---|---|---|---|---|---|"]
    wins, ratios = [], []

    def _times(x):
        return f"{x:.1f}" if x < 10 else f"{x:.0f}"

    for (T, tree), _ in d.groupby(level=[0, 1], sort=True):
        r, o = d.loc[(T, tree, "rrsw")], d.loc[(T, tree, "optimal-wor")]
        lines.append(f"| {T:g} | {tree} | {r.block_efficiency:.2f} [{r.block_efficiency_low:.2f}, "
                     f"{r.block_efficiency_high:.2f}] | {o.block_efficiency:.2f} [{o.block_efficiency_low:.2f}, "
                     f"{o.block_efficiency_high:.2f}] | {1e3 * r.verify_seconds / r.visited_nodes:.2f} | "
                     f"{1e3 * o.verify_seconds / o.visited_nodes:.2f} |")
        wins.append(o.block_efficiency > r.block_efficiency)
        ratios.append((o.verify_seconds / o.visited_nodes) / (r.verify_seconds / r.visited_nodes))
    return ["*At V = 32,000* (`--models synthetic`, the context-hashed perturbed-Zipf pair; "
            "experiments/tree-decode-synthetic.toml, a generation run of 16 prompts × 48 tokens; 95% intervals "
            "over prompts), `optimal-wor` against `rrsw` on the wor trees, with the verification time per visited "
            "node (a new (p, q) pair at every node: `optimal-wor`'s set-up, the `wor` hit chain and its law checked "
            "block by block, then a step's concave majorant, against `rrsw`'s rejection loop):", "", *lines, "",
            f"`optimal-wor` has the higher block efficiency in {sum(wins)} of {len(wins)} (tree, T) cells "
            f"(one generation run each, not paired), at {_times(min(ratios))}–{_times(max(ratios))}× `rrsw`'s "
            "verification time per node.", ""]
