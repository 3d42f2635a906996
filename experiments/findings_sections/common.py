"""What every section shares: the tolerance, reading an experiment's tables, the verdict words."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

#: Slack allowed where a finding compares exact values (α* against α*, a bound against a bound).
TOL = 1e-9


def load(results: Path, name: str) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The experiment's ``summary.csv`` and its ``pairs.parquet``, or None where no run has left one."""
    base = results / name
    summary = pd.read_csv(base / "summary.csv")
    # full precision for per-pair differences (the CSVs carry 12 significant digits)
    pairs = pd.read_parquet(base / "pairs.parquet") if (base / "pairs.parquet").exists() else None
    return summary, pairs


def verdict(ok: bool, partial: bool = False) -> str:
    """The bold word that ends a finding."""
    return "**confirmed**" if ok else ("**partly confirmed**" if partial else "**not confirmed**")
