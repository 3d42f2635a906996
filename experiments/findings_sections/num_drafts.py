"""Section 3 of FINDINGS.md: α* and the verifiers' acceptance as the number of drafts n grows."""

from __future__ import annotations

from pathlib import Path

from .common import TOL, load, verdict


def num_drafts(results: Path) -> list[str]:
    summary, _ = load(results, "num-drafts")
    s = summary[summary.status == "ok"]
    out = ["## 3. Number of drafts (`num-drafts`)", ""]
    names = ["rrs", "rrsw", "kseq", "greedy", "optimal-iid", "optimal-wor"]
    lines = ["| dataset | n | α\\* iid | α\\* wor | α\\* greedy | " + " | ".join(names) + " | optimal-wor − rrsw |",
             "|---" * (6 + len(names)) + "|"]
    refused_any = False
    monotone = True
    for dataset, d in s.groupby("dataset", sort=False):
        v = d[d.kind == "verify"].pivot_table(index="n", columns="name", values="mean")
        b = d[d.kind == "bound"].pivot_table(index="n", columns="name", values="mean")
        monotone &= bool((b.diff().dropna() >= -TOL).all().all())
        for n in b.index:
            rb = b.loc[n]
            cells = [f"{v.loc[n, name]:.4f}" if name in v and n in v.index and v.loc[n, name] == v.loc[n, name]
                     else "refused" for name in names]
            ran = "optimal-wor" in v and n in v.index and v.loc[n, "optimal-wor"] == v.loc[n, "optimal-wor"]
            refused_any |= not ran
            best = v.loc[n, "optimal-wor"] if ran else rb["wor"]  # the bound where it was refused
            headroom = (f"{best - v.loc[n, 'rrsw']:+.4f}{'' if ran else ' (α* wor)'}" if "rrsw" in v
                        and n in v.index and v.loc[n, "rrsw"] == v.loc[n, "rrsw"] else "—")
            lines.append(f"| {dataset} | {n} | {rb['iid']:.4f} | {rb['wor']:.4f} | {rb['greedy']:.4f} | "
                         + " | ".join(cells) + f" | {headroom} |")
    refusal = (" Where optimal-wor was refused, the last column shows α\\*_wor − rrsw instead (what a verifier "
               "reaching the bound would add)." if refused_any else "")
    out += [f"*Expected: α\\* never decreases with n; verifiers gain less.* α\\* is non-decreasing in n for every "
            f"sampler and dataset: {verdict(monotone)}. Verifier columns: acceptance of each verifier on its own "
            "draft law (`greedy` = the greedy verifier); the last column is optimal-wor's gain over rrsw on the "
            f"same draft law.{refusal}", "", *lines, ""]
    return out
