"""Per-group summaries of per-pair tables: mean, standard deviation and a 95% interval.

The interval is Student's t over the pairs of a group,

.. math:: \\bar x \\pm t_{0.975,\\, m-1}\\, s / \\sqrt{m},

an interval for the mean over the population the pairs were drawn from (the
positions of a dataset, the seeds of a synthetic family); Monte Carlo standard
errors of single rows are not folded in (see ``stderr`` per row).
"""

from __future__ import annotations

import math

import numpy as np


def mean_interval(values) -> tuple[float, float, float, float]:
    """``(mean, std, low, high)`` of ``values``: sample std (ddof 1) and the 95% Student t interval.

    One value gives a zero-width interval; none gives NaN.
    """
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    n = values.size
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return mean, 0.0, mean, mean
    sd = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def summarize(df, value: str, by: list[str], *, means: tuple[str, ...] = ()):
    """One row per group of ``by``: ``pairs``, ``mean``, ``std``, ``ci95_low``, ``ci95_high`` of ``value``,
    and ``<column>_mean`` for each of ``means``. Groups keep their first-appearance order."""
    import pandas as pd

    rows = []
    for key, group in df.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        mean, sd, low, high = mean_interval(group[value].to_numpy())
        row = dict(zip(by, key))
        row.update(pairs=len(group), mean=mean, std=sd, ci95_low=low, ci95_high=high)
        row.update({f"{column}_mean": float(group[column].mean()) for column in means})
        rows.append(row)
    return pd.DataFrame(rows, columns=[*by, "pairs", "mean", "std", "ci95_low", "ci95_high",
                                       *(f"{c}_mean" for c in means)])
