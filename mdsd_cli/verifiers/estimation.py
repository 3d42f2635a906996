"""Acceptance rates and losslessness: exact enumeration, Monte Carlo, statistical tests."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SizeLimitError, check_integer, count_text, option
from ..samplers import MAX_TUPLES
from .base import PreparedVerifier

USE_MONTE_CARLO = option("--method monte-carlo", "method='monte-carlo'")
#: Largest number of draft tuples enumerated for exact rates and lossless checks.
MAX_ENUMERATION = 200_000
#: Tuples per Monte Carlo chunk (bounds memory).
CHUNK = 65_536
#: Draft ids a chunk holds at most (128 MiB of int64): at n = 100,000 drafts a chunk of CHUNK tuples would be 52 GB.
CHUNK_IDS = 1 << 24


def _tuple_law(verifier: PreparedVerifier, max_tuples: int):
    count = verifier.draft_sampler.estimate_tuples(verifier.q, verifier.n)
    if count > max_tuples:
        raise SizeLimitError(
            f"exact {verifier.name} needs all {count_text(count)} {verifier.sampler} draft tuples at V={verifier.V}, "
            f"n={verifier.n} (limit {count_text(max_tuples)}); use {USE_MONTE_CARLO}"
        )
    return verifier.draft_sampler.tuple_law(verifier.q, verifier.n, max_tuples=max(max_tuples, MAX_TUPLES))


def enumerated_rate(verifier: PreparedVerifier, *, max_tuples: int = MAX_ENUMERATION) -> float:
    """``P(Y in X) = sum_x P(X = x) P(Y in x | X = x)`` over every draft tuple."""
    tuples, prob = _tuple_law(verifier, max_tuples)
    return float((prob * verifier.acceptance(tuples)).sum())


def output_distribution(verifier: PreparedVerifier, *, max_tuples: int = MAX_ENUMERATION) -> np.ndarray:
    """The exact law of ``Y``: ``sum_x P(X = x) P(Y = . | X = x)`` (equals ``p`` iff lossless)."""
    tuples, prob = _tuple_law(verifier, max_tuples)
    total = np.zeros(verifier.V)
    for start in range(0, tuples.shape[0], 4096):
        block = slice(start, start + 4096)
        total += prob[block] @ verifier.output_laws(tuples[block])
    return total


def exact_rate(verifier: PreparedVerifier, *, max_tuples: int = MAX_ENUMERATION) -> float:
    """Closed form when the verifier has one, else exact enumeration."""
    rate = verifier.exact_rate()
    return float(rate) if rate is not None else enumerated_rate(verifier, max_tuples=max_tuples)


def can_be_exact(verifier: PreparedVerifier, *, max_tuples: int = MAX_ENUMERATION) -> bool:
    """Whether :func:`exact_rate` would succeed without refusing the size."""
    return (verifier.exact_rate() is not None
            or verifier.draft_sampler.estimate_tuples(verifier.q, verifier.n) <= max_tuples)


def monte_carlo_rate(verifier: PreparedVerifier, samples: int, rng: np.random.Generator) -> tuple[float, float]:
    """Mean and standard error of the exact conditional acceptance over sampled draft tuples.

    Averaging ``P(Y in X | X)`` (not a 0/1 coin) removes the verifier's own
    randomness from the estimate.
    """
    samples = check_integer(samples, "samples", 2)  # Monte Carlo needs two for a standard error
    total = total_sq = 0.0
    done = 0
    chunk = max(1, min(CHUNK, CHUNK_IDS // max(verifier.n, 1)))  # tuples a chunk: at most CHUNK_IDS draft ids
    while done < samples:
        m = min(chunk, samples - done)
        drafts = verifier.draft_sampler.sample(verifier.q, verifier.n, rng, m)
        acc = verifier.acceptance(drafts)
        total += float(acc.sum())
        total_sq += float((acc * acc).sum())
        done += m
    mean = total / samples
    var = max(total_sq / samples - mean * mean, 0.0) * samples / (samples - 1)
    return mean, math.sqrt(var / samples)


@dataclass(frozen=True)
class LosslessTest:
    """Outcome of a statistical test of the sampled output law against ``p``."""

    statistic: float
    dof: int
    pvalue: float
    trials: int
    impossible: int  # outputs with p(y) = 0: any one of them is a failure

    def passed(self, alpha: float) -> bool:
        return self.impossible == 0 and self.pvalue >= alpha


def sampled_output_test(verifier: PreparedVerifier, trials: int, rng: np.random.Generator,
                        *, test: str = "chi2") -> LosslessTest:
    """Sample ``trials`` (drafts, output) pairs; test the output counts against ``p``.

    ``test`` is ``"chi2"`` (Pearson) or ``"g"`` (likelihood ratio). Tokens with
    small expected counts are pooled so that every cell expects at least 5; when that
    leaves one cell, the count outside the most probable token gets an exact binomial test.
    """
    from scipy import stats

    counts = np.zeros(verifier.V)
    done = 0
    while done < trials:
        m = min(CHUNK, trials - done)
        drafts = verifier.draft_sampler.sample(verifier.q, verifier.n, rng, m)
        counts += np.bincount(verifier.sample(drafts, rng), minlength=verifier.V)
        done += m
    p = verifier.p
    impossible = int(counts[p <= 0].sum())
    expected = p * trials
    order = np.argsort(expected)
    cells_obs, cells_exp, acc_obs, acc_exp = [], [], 0.0, 0.0
    for i in order:
        if expected[i] <= 0:
            continue
        acc_obs += counts[i]
        acc_exp += expected[i]
        if acc_exp >= 5.0:
            cells_obs.append(acc_obs)
            cells_exp.append(acc_exp)
            acc_obs = acc_exp = 0.0
    if acc_exp > 0:
        if cells_exp:
            cells_obs[-1] += acc_obs
            cells_exp[-1] += acc_exp
        else:
            cells_obs.append(acc_obs)
            cells_exp.append(acc_exp)
    obs, exp = np.array(cells_obs), np.array(cells_exp)
    exp = exp * obs.sum() / exp.sum() if obs.sum() > 0 else exp
    dof = max(obs.size - 1, 0)
    if dof == 0:
        # p too concentrated for a cell expecting 5 besides the top token: test the
        # other tokens' pooled count exactly (a binomial), which pooling would hide
        top = int(np.argmax(p))
        tail = float(p[:top].sum() + p[top + 1:].sum())
        if tail <= 0.0:
            return LosslessTest(0.0, 0, 1.0, trials, impossible)
        k = int(counts.sum() - counts[top])
        return LosslessTest(float(k), 1, float(stats.binomtest(k, int(counts.sum()), tail).pvalue), trials,
                            impossible)
    if test == "g":
        with np.errstate(divide="ignore", invalid="ignore"):
            stat = float(2.0 * np.sum(np.where(obs > 0, obs * np.log(obs / exp), 0.0)))
    else:
        stat = float(np.sum((obs - exp) ** 2 / exp))
    return LosslessTest(stat, dof, float(stats.chi2.sf(stat, dof)), trials, impossible)
