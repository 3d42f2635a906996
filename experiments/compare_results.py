"""Compare regenerated result tables with the committed ones: same rows, same values within a tolerance.

Usage (from the repository root, after ``make reproduce`` or one experiment's target)::

    python experiments/compare_results.py [RESULTS] [--ref HEAD] [--tolerance 1e-9]

Every CSV under ``RESULTS`` (default ``results``) that git tracks is read twice, as committed at
``--ref`` and as it is now. Wall times are not results: ``timings.csv`` files and the columns that
hold seconds or rates per second (:data:`TIMING`) are left out. Text columns must be equal; a
number passes when ``|now - committed| <= tolerance * (1 + |committed|)`` (NaN equals NaN). One
line per table on stdout (``ok`` or what differs, the largest difference first); exit code 1 if
any table differs, 2 if the comparison cannot run. ``make check-results`` runs it.

Why a tolerance at all: the last digits of sums depend on the processor and the thread count
(BLAS, SIMD width), so a rerun on another machine can move a value by ~1e-16 relative. A
difference far above that means the computation took another path there (a random stream
steered by a rounding-level comparison), which this is meant to catch.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: Columns that hold wall times or rates per second: not results, never compared.
TIMING = re.compile(r"(^|_)seconds(_|$)|per_second|speedup_measured")
#: Tables that are wall times only: ``timings.csv`` and any ``<run>-timings.csv``.
TIMING_FILES = re.compile(r"(^|-)timings\.csv$")


def compare_tables(committed: pd.DataFrame, now: pd.DataFrame, tolerance: float) -> list[str]:
    """What differs between two versions of one table (empty if nothing beyond the tolerance)."""
    keep = [c for c in committed.columns if not TIMING.search(c)]
    new_columns = [c for c in now.columns if not TIMING.search(c)]
    if keep != new_columns:
        missing, added = sorted(set(keep) - set(new_columns)), sorted(set(new_columns) - set(keep))
        return [f"columns differ (missing {missing or 'none'}, new {added or 'none'})"]
    if len(committed) != len(now):
        return [f"{len(now)} rows, committed {len(committed)}"]
    problems = []
    for column in keep:
        a, b = committed[column], now[column]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
            both_nan = np.isnan(x) & np.isnan(y)
            gap = np.where(both_nan, 0.0, np.abs(y - x))
            limit = tolerance * (1.0 + np.abs(np.nan_to_num(x)))
            bad = ~(gap <= limit)  # a NaN on one side only is a difference
            if bad.any():
                i = int(np.argmax(np.where(bad, np.nan_to_num(gap, nan=np.inf), -1.0)))
                problems.append((float(np.nan_to_num(gap[i], nan=np.inf)),
                                 f"{column}: {int(bad.sum())} values differ, largest at row {i}: "
                                 f"{x[i]!r} committed, {y[i]!r} now"))
        else:
            differs = ~((a.astype(str) == b.astype(str)) | (a.isna() & b.isna()))
            if differs.any():
                i = int(np.flatnonzero(differs.to_numpy())[0])
                problems.append((np.inf, f"{column}: {int(differs.sum())} values differ, first at row {i}: "
                                         f"{a.iloc[i]!r} committed, {b.iloc[i]!r} now"))
    return [text for _, text in sorted(problems, key=lambda t: -t[0])]


def tracked_tables(results: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", f"{results.as_posix()}/*.csv"], capture_output=True, text=True,
                         check=True).stdout.split()
    return sorted(p for p in out if not TIMING_FILES.search(Path(p).name))


def committed_table(path: str, ref: str) -> pd.DataFrame:
    text = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, text=True, check=True).stdout
    return pd.read_csv(io.StringIO(text))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", default="results")
    ap.add_argument("--ref", default="HEAD", help="the commit to compare with (default HEAD)")
    ap.add_argument("--tolerance", type=float, default=1e-9, help="relative tolerance (default 1e-9)")
    args = ap.parse_args(argv)
    if not args.tolerance >= 0:
        print(f"Error: --tolerance must be >= 0, got {args.tolerance}", file=sys.stderr)
        return 2
    try:
        tables = tracked_tables(Path(args.results))
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"Error: cannot list the committed tables with git ({exc}); run from a clone of the repository",
              file=sys.stderr)
        return 2
    if not tables:
        print(f"Error: git tracks no CSV under {args.results}", file=sys.stderr)
        return 2
    failed = 0
    for path in tables:
        if not Path(path).exists():
            print(f"MISSING {path}: not regenerated")
            failed += 1
            continue
        try:
            problems = compare_tables(committed_table(path, args.ref), pd.read_csv(path), args.tolerance)
        except subprocess.CalledProcessError:
            print(f"new {path}: not in {args.ref}")
            continue
        if problems:
            failed += 1
            print(f"DIFFERS {path}: " + "; ".join(problems[:3]))
        else:
            print(f"ok {path}")
    print(f"{len(tables) - failed} of {len(tables)} tables match {args.ref} within {args.tolerance:g} "
          "(timings left out)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
