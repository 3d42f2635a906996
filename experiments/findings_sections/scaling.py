"""Section 4 of FINDINGS.md: the largest vocabulary each α* solver reaches, and its time per pair."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import load


def scaling(results: Path) -> list[str]:
    summary, pairs = load(results, "scaling")
    timings = pd.read_csv(results / "scaling" / "timings.csv")
    out = ["## 4. Scaling and the LP wall (`scaling`)", ""]
    ok = summary[summary.status == "ok"]
    walls = []
    for (n, method), d in summary.groupby(["n", "method"]):
        solved = d[d.status == "ok"].vocab.max()
        refused = d[d.status == "refused"].vocab.min()
        walls.append(f"| {method} | {n} | {solved:,} | {'—' if pd.isna(refused) else f'{int(refused):,}'} |")
    agreement = ""
    if pairs is not None:
        p = pairs[pairs.kind == "bound"].pivot_table(index=["dataset", "n", "sampler", "pair"], columns="method",
                                                      values="value")
        diffs = {m: (p[m] - p["chain"]).abs().max() for m in p.columns if m != "chain"}
        agreement = ", ".join(f"{m} {d:.1e}" for m, d in diffs.items())
    med = timings.groupby(["method", "vocab"]).seconds_median.median()
    big = int(ok[ok.method == "chain"].vocab.max())
    out += ["| solver | n | largest V solved | first V refused |", "|---|---|---|---|", *walls, "",
            f"chain at V = {big:,}: {med.loc[('chain', big)]:.3f} s per pair (median over samplers and n). "
            + (f"Largest |value − chain| where both ran: {agreement}." if agreement else
               "(The per-pair agreement with the other solvers needs `pairs.parquet`: rerun `make scaling`.)"), ""]
    return out
