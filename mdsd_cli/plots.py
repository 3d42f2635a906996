"""Figures from sweep results (matplotlib, PNG and SVG).

============== =====================================================================
figure         what it shows
============== =====================================================================
samplers       α* against temperature, one line per draft sampler, a panel per n
verifier-gap   each verifier's acceptance against temperature, with α* of each
               draft law dashed, a panel per n
num-drafts     α* per sampler and each verifier's acceptance against n
scaling        seconds per pair against V for each solver (log-log), a panel per n;
               sizes a solver refused are marked on the axis ("the wall")
tree-decode    from an ``mdsd decode`` summary (or its ``expected.csv`` from ``--expected``, when
               present): block efficiency with its 95% interval
               per tree, draft law and verifier (a panel per temperature), and the
               acceptance at each depth next to α* of the visited nodes (a panel per tree)
============== =====================================================================
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import DataFileError, InputError, OutputError, option, unknown_choice

KINDS = ("samplers", "verifier-gap", "num-drafts", "scaling", "tree-decode", "draft-design")
COLORS = {"iid": "#1f77b4", "wor": "#2ca02c", "greedy": "#d62728", "hub": "#9467bd", "topk": "#8c564b", "nss": "#7f7f7f",
          "rrs": "#1f77b4", "rrsw": "#2ca02c", "kseq": "#ff7f0e", "otm": "#17becf", "chain": "#1f77b4",
          "primal-lp": "#ff7f0e", "dual-lp": "#2ca02c", "subsets": "#d62728", "optimal-iid": "#000000",
          "optimal-wor": "#8c564b"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "mdsd", "figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3,
                         "font.size": 9})
    return plt


def _save(fig, out: Path, stem: str) -> list[Path]:
    from .io import atomic_path

    paths = []
    for ext, meta in (("png", {"Software": None}), ("svg", {"Date": None})):
        path = out / f"{stem}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=meta, bbox_inches="tight")
        paths.append(path)
    return paths


def _panels(plt, count: int, title: str):
    cols = min(count, 3)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True,
                             layout="constrained")
    fig.suptitle(title)
    flat = list(axes.ravel())
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat


def _band(ax, x, rows, color, label, band=True):
    """Mean over pairs with its 95% interval as a light band."""
    ax.plot(x, rows["mean"], "-o", color=color, label=label, ms=3, lw=1.4)
    if band:
        ax.fill_between(x, rows["ci95_low"], rows["ci95_high"], color=color, alpha=0.1, lw=0)


def _need(rows, what: str):
    if rows.empty:
        raise DataFileError(f"the sweep has no {what} to plot; pick the figure that matches its grid")
    return rows


def _temperature_panels(plt, rows, out: Path, title: str, stem: str, *, band: bool, ylabel: str, legend: dict,
                        extra=None) -> list[Path]:
    """One figure per dataset, a panel per n: a line per ``name`` against temperature (with its 95% band if
    ``band``), then whatever ``extra(ax, rows)`` adds to the panel."""
    paths = []
    for dataset, d in rows.groupby("dataset", sort=False):
        ns = sorted(d.n.unique())
        fig, axes = _panels(plt, len(ns), f"{title} — {dataset}")
        for ax, n in zip(axes, ns):
            dn = d[d.n == n]
            for name, g in dn.groupby("name", sort=False):
                g = g.sort_values("temperature")
                _band(ax, g.temperature, g, COLORS.get(name), name, band=band)
            if extra is not None:
                extra(ax, dn)
            ax.set_title(f"n = {n}")
            ax.set_xlabel("temperature")
        axes[0].set_ylabel(ylabel)
        axes[0].legend(**legend)
        paths += _save(fig, out, f"{stem}-{dataset}")
        plt.close(fig)
    return paths


def plot_samplers(summary, out: Path) -> list[Path]:
    plt = _pyplot()
    rows = _need(summary[(summary.kind == "bound") & (summary.status == "ok")], "α* rows")
    return _temperature_panels(plt, rows, out, "α* against temperature", "alpha-vs-temperature", band=True,
                               ylabel="optimal acceptance α*", legend={"title": "draft sampler"})


def plot_verifier_gap(summary, out: Path) -> list[Path]:
    plt = _pyplot()
    rows = _need(summary[(summary.kind == "verify") & (summary.status == "ok")], "verifier rows")

    def alpha_star_lines(ax, dn):  # α* of each draft law, dashed
        dashes = iter((":", "--", "-.", (0, (1, 3))))
        for law, g in dn.groupby("sampler", sort=False):
            g = g.drop_duplicates("temperature").sort_values("temperature")
            ax.plot(g.temperature, g.alpha_star_mean, ls=next(dashes), color="black", lw=1.0, alpha=0.7,
                    label=f"α* {law}")

    return _temperature_panels(plt, rows, out, "verifiers against α* of their draft law", "verifier-gap",
                               band=False, ylabel="acceptance rate P(Y ∈ X)",
                               legend={"title": "verifier / bound", "fontsize": 7, "ncol": 2}, extra=alpha_star_lines)


def plot_num_drafts(summary, out: Path) -> list[Path]:
    plt = _pyplot()
    rows = _need(summary[summary.status == "ok"], "finished cells")
    paths = []
    for (dataset, T), d in rows.groupby(["dataset", "temperature"], sort=False):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, squeeze=False, layout="constrained")
        axes = axes.ravel()
        fig.suptitle(f"acceptance against the number of drafts — {dataset}, T = {T:g}")
        for name, g in d[d.kind == "bound"].groupby("name", sort=False):
            g = g.sort_values("n")
            _band(axes[0], g.n, g, COLORS.get(name), f"α* {name}")
        for name, g in d[d.kind == "verify"].groupby("name", sort=False):
            g = g.sort_values("n")
            _band(axes[1], g.n, g, COLORS.get(name), name, band=False)
        axes[0].set_title("optimal acceptance α*")
        axes[1].set_title("verifiers")
        from matplotlib.ticker import MaxNLocator

        for ax in axes:
            ax.set_xlabel("drafts n")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # n is a count: no 2.5 drafts
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        axes[0].set_ylabel("acceptance rate")
        paths += _save(fig, out, f"num-drafts-{dataset}-T{T:g}")
        plt.close(fig)
    return paths


def plot_scaling(summary, timings, out: Path) -> list[Path]:
    plt = _pyplot()
    if timings.empty:
        raise DataFileError("the sweep has no timings to plot")
    timings = timings.copy()
    if "kind" not in timings:  # tables from before verifier cells were told apart
        timings["kind"] = "bound"
    if "name" not in timings:
        timings["name"] = timings["sampler"]
    # a bound cell is named by its solver (method) and sampler; a verifier cell by the verifier
    # itself (its method is exact/monte-carlo/auto, not a solver)
    timings["method"] = timings["method"].where(timings["kind"] == "bound", timings["name"])
    per = timings.groupby(["vocab", "n", "kind", "sampler", "method"], sort=True)["seconds_median"].median()
    per = per.reset_index().rename(columns={"seconds_median": "seconds"})
    ns = sorted(per.n.unique())
    styles = {s: st for s, st in zip(sorted(per.sampler.unique()), ("-o", "--s", ":^", "-.v"))}
    kinds = set(per.kind)
    title = "wall time per pair against V" + (" (the LP wall)" if "bound" in kinds else "")
    fig, axes = _panels(plt, len(ns), title)
    for ax, n in zip(axes, ns):
        for (kind, sampler, method), g in per[per.n == n].groupby(["kind", "sampler", "method"], sort=False):
            label = f"{method}, {sampler}" if kind == "bound" else f"verifier {method} ({sampler} drafts)"
            ax.loglog(g.vocab, g.seconds, styles[sampler], ms=3, color=COLORS.get(method), label=label)
        walls = summary[(summary.n == n) & (summary.status == "refused")]
        walls = walls.assign(method=walls["method"].where(walls["kind"] == "bound", walls["name"]))
        for method, g in walls.groupby("method", sort=False):
            ax.axvline(g.vocab.min(), color=COLORS.get(method), ls=":", lw=1)
        ax.set_title(f"n = {n} (dotted: first V refused)")
        ax.set_xlabel("vocabulary size V")
    axes[0].set_ylabel("seconds per pair")
    axes[0].legend(title="solver, draft sampler" if kinds == {"bound"} else None, fontsize=7)
    paths = _save(fig, out, "scaling")
    plt.close(fig)
    return paths


MARKERS = {"iid": "o", "wor": "s", "greedy": "^", "hub": "D", "topk": "v", "-": "x"}


def _tree_order(labels) -> list[str]:
    """Chains (1xD) first by depth, then the other trees as they came."""
    labels = [t for t in dict.fromkeys(labels) if t != "plain"]
    chains = sorted((t for t in labels if t.startswith("1x") and t[2:].isdigit()), key=lambda t: int(t[2:]))
    return chains + [t for t in labels if t not in chains]


def plot_tree_decode(summary, out: Path) -> list[Path]:
    """Block efficiency per tree (with intervals) and acceptance by depth, from an ``mdsd decode`` summary
    (a generation run, or the expected tokens per call of ``--expected``)."""
    plt = _pyplot()
    rows = _need(summary[summary.tree != "plain"], "decode rows")
    trees = _tree_order(rows.tree)
    temps = sorted(rows.temperature.unique())
    combos = list(dict.fromkeys(zip(rows.sampler, rows.verifier)))
    expected = "certified_low" in rows.columns
    title = ("Expected tokens per target call at shared contexts (95% intervals over prompts)" if expected
             else "Block efficiency (tokens per target call, 95% intervals)")
    fig, axes = _panels(plt, len(temps), title)
    for ax, T in zip(axes, temps):
        at = rows[rows.temperature == T]
        present = {t: [c for c in combos if ((at.tree == t) & (at.sampler == c[0]) & (at.verifier == c[1])).any()]
                   for t in trees}
        for sampler, verifier in combos:
            d = at[(at.sampler == sampler) & (at.verifier == verifier)].set_index("tree")
            xs = [i for i, t in enumerate(trees) if t in d.index]
            if not xs:
                continue
            sel = d.loc[[trees[i] for i in xs]]
            x = [i - 0.4 + 0.8 / len(present[trees[i]]) * (present[trees[i]].index((sampler, verifier)) + 0.5)
                 for i in xs]
            ax.errorbar(x, sel.block_efficiency, yerr=[sel.block_efficiency - sel.block_efficiency_low,
                                                        sel.block_efficiency_high - sel.block_efficiency],
                        fmt=MARKERS.get(sampler, "o"), ms=4, capsize=2, lw=1, color=COLORS.get(verifier, "#333333"),
                        label=f"{verifier} ({sampler})")
        ax.axhline(1.0, color="#999999", lw=0.8, ls=":")
        ax.set_xticks(range(len(trees)), trees, rotation=30)
        ax.set_title(f"T = {T:g}")
        ax.set_ylabel("block efficiency")
    axes[0].legend(fontsize=7, ncol=2)
    paths = _save(fig, out, "block-efficiency")
    plt.close(fig)
    from matplotlib.ticker import MaxNLocator

    depth_cols = sorted((c for c in rows.columns if c.startswith("acceptance_d")), key=lambda c: int(c[12:]))
    chains = {t for t in trees if t.startswith("1x") and t[2:].isdigit()}
    panels = [t for t in trees if t not in chains] or trees
    for T in temps:
        at = rows[rows.temperature == T]
        fig, axes = _panels(plt, len(panels), f"Acceptance at each depth, T = {T:g} (" + (
            "expected, at shared contexts" if expected else "dashed: α* of the visited nodes")
            + "; dotted black: the single-draft chain of the same depth)")
        for ax, tree in zip(axes, panels):
            d = at[at.tree == tree]
            chain = at[(at.tree == f"1x{int(d.depth.iloc[0])}")] if not d.empty else d
            for _, r in d.iterrows():
                k = [int(c[12:]) for c in depth_cols if r[c] == r[c]]
                color = COLORS.get(r.verifier, "#333333")
                ax.plot(k, [r[f"acceptance_d{i}"] for i in k], "-" + MARKERS.get(r.sampler, "o"), color=color,
                        ms=3, lw=1.2, label=f"{r.verifier} ({r.sampler})")
                if f"alpha_star_d{k[0]}" in r.index:
                    ax.plot(k, [r[f"alpha_star_d{i}"] for i in k], "--", color=color, lw=0.8, alpha=0.6)
            if tree not in chains and not chain.empty:
                c = chain.iloc[0]
                k = [int(col[12:]) for col in depth_cols if c[col] == c[col]]
                ax.plot(k, [c[f"acceptance_d{i}"] for i in k], ":", color="black", lw=1.6, label=f"chain {c.tree}")
            ax.set_title(tree)
            ax.set_xlabel("depth of the accepted token")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(0, 1)
            ax.legend(fontsize=6)
        axes[0].set_ylabel("acceptance at visited nodes")
        paths += _save(fig, out, f"acceptance-by-depth-T{T:g}")
        plt.close(fig)
    return paths


#: Columns of a sweep's summary.csv that the figures read.
def plot_design(summary, out: Path) -> list[Path]:
    """α* of the temperature family against the absolute drafting temperature (x times the target's),
    one line per target temperature, a panel per n; the selected parameter is ringed."""
    plt = _pyplot()
    rows = summary[summary.family == "temperature"]
    if rows.empty:
        raise DataFileError("the design table has no temperature family rows to plot")
    if "dataset" not in rows.columns:
        rows = rows.assign(dataset="design")
    paths = []
    colours = plt.get_cmap("viridis")
    for dataset, d in rows.groupby("dataset", sort=False):
        ns = sorted(d.n.unique())
        temps = sorted(d.temperature.unique())
        fig, axes = _panels(plt, len(ns), f"α* against the drafting temperature — {dataset}")
        for ax, n in zip(axes, ns):
            for k, T in enumerate(temps):
                g = d[(d.n == n) & (d.temperature == T)].sort_values("parameter")
                colour = colours(k / max(len(temps) - 1, 1))
                x = g.parameter * T
                ax.plot(x, g.alpha_star, "-", color=colour, lw=1.4, label=f"target T = {T:g}")
                ax.fill_between(x, g.ci95_low, g.ci95_high, color=colour, alpha=0.1, lw=0)
                chosen = g[g.selected]
                ax.plot(chosen.parameter * T, chosen.alpha_star, "o", mfc="none", color=colour, ms=7)
                ax.axvline(T, color=colour, lw=0.8, ls=":")
            ax.set_xscale("log")
            ax.set_title(f"n = {n} ({d.sampler.iloc[0].split(':')[0]} drafts)")
            ax.set_xlabel("drafting temperature (log scale; dotted: the target's)")
        axes[0].set_ylabel("optimal acceptance α*")
        axes[0].legend(fontsize=7)
        paths += _save(fig, out, f"alpha-vs-draft-temperature-{dataset}")
        plt.close(fig)
    return paths


SUMMARY_COLUMNS = {"dataset", "vocab", "temperature", "n", "kind", "name", "sampler", "method", "status", "mean",
                   "ci95_low", "ci95_high", "alpha_star_mean", "gap_mean"}


def plot_results(results, out, *, figure: str | None = None) -> list[Path]:
    """Draw the figure of a sweep directory into ``out`` (created if missing); returns the files written."""
    import pandas as pd

    results, out = Path(results), Path(out)
    summary_path = results / "summary.csv"
    if not summary_path.exists():
        raise DataFileError(f"{results} has no summary.csv; run mdsd sweep into it first")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the figure directory {out}: {exc.strerror or exc}") from None
    summary = _read_table(summary_path, results)
    if "block_efficiency" in summary.columns:  # an mdsd decode summary
        if figure not in (None, "tree-decode"):
            raise InputError(f"{summary_path} is an mdsd decode summary; its figure is tree-decode, not {figure}")
        expected = results / "expected.csv"  # mdsd decode --expected beside it: the figures show those values
        return plot_tree_decode(_read_table(expected, results) if expected.exists() else summary, out)
    if "family" in summary.columns and "selected" in summary.columns:  # an mdsd design table
        if figure not in (None, "draft-design"):
            raise InputError(f"{summary_path} is an mdsd design table; its figure is draft-design, not {figure}")
        return plot_design(summary, out)
    missing = sorted(SUMMARY_COLUMNS - set(summary.columns))
    if missing:
        raise DataFileError(f"{summary_path} lacks the column(s) {', '.join(missing)}; it is not a sweep summary "
                            f"(rerun mdsd sweep into {results})")
    if figure is None:
        try:
            figure = json.loads((results / "manifest.json").read_text())["config"].get("figure", "none")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            figure = "none"
    if figure in (None, "none"):
        raise InputError("this sweep names no figure; pass "
                         f"{option('--figure ' + '|'.join(KINDS), 'figure=' + ' or '.join(map(repr, KINDS)))}")
    if figure not in KINDS:
        raise unknown_choice("figure", figure, KINDS)
    try:
        if figure == "samplers":
            return plot_samplers(summary, out)
        if figure == "verifier-gap":
            return plot_verifier_gap(summary, out)
        if figure == "num-drafts":
            return plot_num_drafts(summary, out)
        timings_path = results / "timings.csv"
        timings = (_read_table(timings_path, results) if timings_path.exists() and timings_path.stat().st_size > 1
                   else pd.DataFrame())
        return plot_scaling(summary, timings, out)
    except (KeyError, AttributeError) as exc:
        raise DataFileError(f"the tables in {results} lack a column the figure needs ({exc}); "
                            "rerun mdsd sweep into it") from None


def _read_table(path: Path, results: Path):
    import pandas as pd

    try:
        return pd.read_csv(path)
    except (ValueError, OSError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataFileError(f"{path} is not a readable sweep table ({first}); rerun mdsd sweep into {results}") from None


__all__ = ["KINDS", "plot_results"]
