"""Section 6 of FINDINGS.md: the draft-law design (tempered, hybrid and truncated drafts, held out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .common import TOL, verdict


def draft_design(results: Path) -> list[str]:
    d = pd.read_csv(results / "draft-design" / "summary.csv")
    out = ["## 6. Draft-law design (`draft-design`)", "",
           "`mdsd design` on each (dataset, target T, n): the parameter of each family is selected on one half "
           "of the pairs and its α\\* reported on the other (held out); α\\* of the plain samplers beside.", ""]
    plain = d[d.family == "plain"].pivot_table(index=["dataset", "temperature", "n"], columns="sampler",
                                               values="heldout")
    sel = d[d.selected].set_index(["dataset", "temperature", "n", "family"])
    lines = ["| dataset | T | n | wor (held out) | greedy (held out) | best temperature x (held out) | best hybrid m (held out) | "
             "best top-k / top-p (held out) |", "|---|---|---|---|---|---|---|---|"]
    temp_beats, hyb_beats_both, trunc_helps, cells = 0, 0, 0, 0
    tracks, hotter_cold = [], 0
    for key, row in plain.iterrows():
        t, h = sel.loc[(*key, "temperature")], sel.loc[(*key, "hybrid")]
        k, p = sel.loc[(*key, "top-k")], sel.loc[(*key, "top-p")]
        wor, greedy, iid = row["wor"], row["greedy"], row["iid"]
        cells += 1
        temp_beats += t.heldout > wor + TOL
        hyb_beats_both += (h.heldout > max(wor, greedy) + TOL) and 0 < h.parameter < key[2] - 1
        trunc_helps += max(k.heldout, p.heldout) > iid + TOL
        tracks.append(t.parameter)
        hotter_cold += key[1] == d.temperature.min() and t.parameter > 1
        lines.append(f"| {key[0]} | {key[1]:g} | {key[2]} | {wor:.4f} | {greedy:.4f} | x = {t.parameter:g} "
                     f"(drafting T = {t.parameter * key[1]:.3g}): {t.heldout:.4f} | m = {h.parameter:g}: "
                     f"{h.heldout:.4f} | {max(k.heldout, p.heldout):.4f} |")
    ver = d[d.verifier.notna()]
    gap = (ver.verifier_heldout - ver.heldout).abs().max()
    tracks = np.array(tracks)
    cold = d.temperature.min()
    out += [f"*Question: does the best drafting temperature track the target's?* The selected iid draft "
            f"temperature, relative to the target's, is x = {tracks.min():g} to {tracks.max():g} over {cells} "
            f"(dataset, T, n) cells (x = 1 tracks the target exactly); {int(np.sum(np.abs(tracks - 1) <= 0.05))} "
            f"of {cells} lie within 0.05 of 1. At the coldest target (T = {cold:g}) the best drafter is hotter "
            f"than the target in {hotter_cold} of {cells // d.temperature.nunique()} cells. Tempered iid drafts "
            f"beat plain wor on the held-out half in {temp_beats} of {cells} cells (mostly at T ≥ 1).", "",
            f"*Question: when do hybrids beat both pure laws?* A hybrid with 0 < m < n − 1 selected on one half "
            f"beats both wor and greedy on the other in {hyb_beats_both} of {cells} cells.", "",
            f"*Truncation:* the best top-k / top-p draft beats plain iid on the held-out half in {trunc_helps} "
            f"of {cells} cells: {verdict(trunc_helps == 0, partial=trunc_helps <= cells // 4)} that truncating q "
            "does not help (it removes tokens the target may want).", "",
            f"*Expected: the selected iid designs' α\\* is reached by a real verifier.* `optimal-iid` on the held-out "
            f"half of {len(ver)} selected iid designs: largest |acceptance − α\\*| = {gap:.1e}: "
            f"{verdict(gap < 1e-9)}.", "", *lines, ""]
    return out
