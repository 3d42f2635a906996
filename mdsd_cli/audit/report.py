"""What an audit reports: one :class:`CaseResult` per case, the evidence behind a failure, the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .cases import AuditCase

#: An exact output law within this of p (largest absolute difference) is p: the function is proven lossless.
EXACT_TOLERANCE = 1e-9
#: Default threshold below which an exact law's departure from p is rounding (the function's own float
#: arithmetic, e.g. a renormalisation in float32), reported as ``rounding``, not as a loss.
ROUNDING_THRESHOLD = 1e-6

#: Statuses of a case. ``rounding``: the exact output law departs from p, by no more than the rounding
#: threshold (not a loss); ``stopped``: not finished, because ``fail_fast`` stopped the audit at another case.
PASSED, LOSSY, ERROR, ROUNDING, STOPPED = "pass", "lossy", "error", "rounding", "stopped"


@dataclass(frozen=True)
class TupleEvidence:
    """A draft tuple behind a failure, and how to reproduce what the audit saw there.

    Attributes
    ----------
    drafts : tuple of int
        The draft tuple (for a ``multisets`` stratum: its member the audit called most).
    stratum_weight : float
        Exact probability of the tuple's stratum under the draft law.
    contribution : float
        How much of the failure this stratum carries: ``w (L - R) . s``, with ``L`` the stratum's
        observed output law (with a law function: the tuple's exact law), ``R`` the exact law of
        the lossless reference verifier (``reference``) on the same tuples, ``s = sign(D)`` and
        ``D = sum_g w_g L_g - p`` the estimated (or exact) departure of the output law from ``p``.
        As ``sum_g w_g R_g = p``, the contributions of all strata add up to ``D . s = 2 TV``
        (``total``) exactly; a stratum where the function behaves as the reference carries 0
        (up to sampling noise). For impossible outputs: the stratum's weighted frequency of them.
    output_counts : ndarray int64 ``[V]``
        What the function returned on this stratum.
    calls : int
        Calls the audit made with exactly ``drafts`` (0 for evidence from the exact law).
    seed : int
        ``numpy.random.default_rng(seed)`` is the generator those calls received, in order:
        :func:`~mdsd_cli.audit.replay` with ``seed`` and ``calls`` repeats them (-1: no calls).
    law : ndarray float64 ``[V]`` or None
        The function's exact conditional law on ``drafts``, when a law function was given.
    total : float
        ``2 TV``, what the contributions of all strata add up to (for impossible outputs: their
        frequency).
    reference : str
        The lossless verifier the contribution is measured against (``mdsd:rrs`` for iid drafts,
        ``mdsd:rrsw`` wor, ``mdsd:greedy`` greedy, ``mdsd:hub`` hub); empty for impossible outputs.
    reference_law : ndarray float64 ``[V]`` or None
        Its exact conditional law on the stratum (what ``output_counts / calls`` would approach
        if the function behaved as the reference there).
    """

    drafts: tuple
    stratum_weight: float
    contribution: float
    output_counts: np.ndarray
    calls: int
    seed: int
    law: np.ndarray | None = None
    total: float = math.nan
    reference: str = ""
    reference_law: np.ndarray | None = None

    def describe(self) -> str:
        text = f"drafts {self.drafts} (P = {self.stratum_weight:.3g}) "
        if self.reference:
            text += f"carries {self.contribution:+.3g} of 2 TV = {self.total:.3g} (vs {self.reference})"
        else:
            text += f"gives outputs of target probability 0 ({self.contribution:.3g} of all outputs)"
        if self.law is not None:
            return text + " (exact law)"
        return text + f"; replay: seed {self.seed}, {self.calls:,} calls"


@dataclass(frozen=True)
class CaseResult:
    """The audit of one case.

    Attributes
    ----------
    case : AuditCase
    status : {"pass", "lossy", "error", "rounding", "stopped"}
        ``lossy``: losslessness rejected at the family-wise level (the output law departs from
        ``p``, the acceptance rate is above α*, or the outputs never vary where ``p`` says they
        must; or an impossible output, or an exact law that departs from ``p`` by more than the
        rounding threshold); ``error``: the function raised or returned something that is not a
        token; ``rounding``: the exact law departs from ``p`` by more than 1e-9 but within the
        rounding threshold (the size is in ``exact_error`` and ``reason``), not counted as a loss;
        ``stopped``: not finished, because ``fail_fast`` stopped the audit at another case's
        failure (``calls`` says how far it got).
    reason : str
        Why the case failed or errored (empty when it passed).
    design : {"tuples", "multisets", "sampled"}
        How the draft law was stratified (see :mod:`mdsd_cli.audit.strata`).
    strata : int
    calls : int
        Calls made (fewer than the case's budget when it failed early).
    tv, tv_noise : float
        Total variation between the stratified estimate of the output law and ``p``, and the
        value sampling noise alone would typically give with these calls (a lossless function
        shows ``tv`` near ``tv_noise``).
    statistic, pvalue : float
        Log of the largest wealth of the betting test on the output law, and the case's
        anytime-valid p-value ``min(1, exp(-statistic) / 0.9, p_acceptance / 0.1)``, with
        ``p_acceptance`` the p-value of the test that the acceptance rate exceeds α* (which no
        lossless verifier does; see :mod:`mdsd_cli.audit.betting`).
    impossible : int
        Outputs of target probability 0 (any one is proof of a loss).
    acceptance, acceptance_se : float
        The acceptance rate, stratified estimate and standard error: ``P(accepted_index >= 0)`` when
        the function returns ``(token, accepted_index)``, else ``P(Y in X)`` (the output is one of
        the drafts). With a law function, ``P(Y in X)`` exact (standard error 0).
    alpha_star : float
        α* of the draft law (exact), so ``gap = alpha_star - acceptance``.
    exact_error : float
        With a law function: ``max |sum_x P(x) law(x) - p|`` over every tuple; NaN otherwise.
    evidence : list of TupleEvidence
        For a failure: the strata contributing most, largest first.
    """

    case: AuditCase
    index: int
    status: str
    reason: str
    design: str
    strata: int
    calls: int
    tv: float
    tv_noise: float
    statistic: float
    pvalue: float
    impossible: int
    acceptance: float
    acceptance_se: float
    alpha_star: float
    exact_error: float = math.nan
    evidence: list = field(default_factory=list)

    @property
    def gap(self) -> float:
        return self.alpha_star - self.acceptance

    def row(self) -> dict:
        """The case as one table row."""
        worst = self.evidence[0] if self.evidence else None
        return {
            "case": self.index, "name": self.case.name, "vocab": self.case.vocab_size, "design": self.design,
            "strata": self.strata, "calls": self.calls, "tv": self.tv, "tv_noise": self.tv_noise,
            "statistic": self.statistic, "pvalue": self.pvalue, "impossible": self.impossible,
            "acceptance": self.acceptance, "acceptance_se": self.acceptance_se, "alpha_star": self.alpha_star,
            "gap": self.gap, "exact_error": self.exact_error, "status": self.status,
            "worst_drafts": " ".join(map(str, worst.drafts)) if worst else "",
            "replay_seed": worst.seed if worst else -1, "replay_calls": worst.calls if worst else 0,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class AuditReport:
    """The verdict of an audit and its cases.

    Attributes
    ----------
    cases : list of CaseResult
    sampler : str
    n : int
    alpha : float
        Family-wise significance level.
    level : float
        Per-case level, ``alpha / number of cases`` (Bonferroni).
    budget : int
        Calls allowed in all; each case gets an equal share.
    seed : int
    rounding_threshold : float
        Exact-law departures from p up to this size are reported as ``rounding``, not as losses.
    notes : list of str
        Warnings about the audit's power: cases whose share of the budget cannot detect a function
        that always returns the likeliest token.
    """

    cases: list
    sampler: str
    n: int
    alpha: float
    level: float
    budget: int
    seed: int
    rounding_threshold: float = ROUNDING_THRESHOLD
    notes: list = field(default_factory=list)
    #: Ctrl-C stopped the audit: the unfinished cases are ``stopped``, with what they found so far.
    interrupted: bool = False

    @property
    def lossy(self) -> list:
        """The cases where a loss of losslessness was detected."""
        return [c for c in self.cases if c.status == LOSSY]

    @property
    def errors(self) -> list:
        """The cases where the function raised or returned something that is not a token."""
        return [c for c in self.cases if c.status == ERROR]

    @property
    def stopped(self) -> list:
        """The cases ``fail_fast`` or Ctrl-C left unfinished."""
        return [c for c in self.cases if c.status == STOPPED]

    @property
    def rounding(self) -> list:
        """The cases whose exact output law departs from p at rounding level only."""
        return [c for c in self.cases if c.status == ROUNDING]

    @property
    def proven(self) -> list:
        """The cases whose exact output law (a law function, every draft tuple enumerated) equals p to 1e-9."""
        return [c for c in self.cases if c.status == PASSED and c.exact_error <= EXACT_TOLERANCE]

    @property
    def passed(self) -> bool:
        """No loss detected and no error (which, without an exact law, does not prove the function lossless)."""
        return not self.lossy and not self.errors

    @property
    def calls(self) -> int:
        return sum(c.calls for c in self.cases)

    def to_frame(self):
        """One row per case (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame([c.row() for c in self.cases])

    def verdict(self) -> str:
        """One line: what was found, at which level."""
        total = len(self.cases)
        rounding = ""
        if self.rounding:
            worst = max(c.exact_error for c in self.rounding)
            rounding = (f"; on {len(self.rounding)} the exact output law departs from p by up to {worst:.2g}, "
                        f"rounding level (at most {self.rounding_threshold:g}), not counted as a loss")
        if self.passed and self.interrupted:
            return (f"interrupted (Ctrl-C) after {self.calls:,} calls: nothing found so far; {len(self.stopped)} of "
                    f"{total} cases not finished (status 'stopped')" + rounding)
        if self.passed:
            proven = len(self.proven) + len(self.rounding)
            if proven == total:
                return (f"proven lossless on all {total} cases: the exact output law, summed over every draft tuple, "
                        f"equals p to {EXACT_TOLERANCE:g}" + (" or to rounding" if self.rounding else "")
                        + f"; {self.calls:,} calls found nothing either" + rounding)
            head = (f"proven lossless on {proven} of {total} cases by the exact law; on the other {total - proven} "
                    if proven else "")
            return (head + f"no loss of losslessness detected in {total - proven} cases "
                    f"({self.calls:,} calls, family-wise alpha {self.alpha:g}); a test cannot prove a function "
                    "lossless" + rounding)
        parts = []
        if self.lossy:
            parts.append(f"LOSSY on {len(self.lossy)} of {total} cases at family-wise alpha {self.alpha:g}: "
                         + ", ".join(c.case.name for c in self.lossy))
        if self.errors:
            parts.append(f"the function failed on {len(self.errors)} of {total} cases: "
                         + ", ".join(c.case.name for c in self.errors))
        if self.stopped:
            why = "interrupted" if self.interrupted else "--fail-fast stopped the audit"
            parts.append(f"{len(self.stopped)} cases not finished ({why}; status 'stopped')")
        return "; ".join(parts) + rounding

    def details(self) -> list[str]:
        """One line per failed or errored case, and one per tuple of evidence."""
        lines = []
        for c in self.cases:
            if c.status in (PASSED, STOPPED):
                continue
            lines.append(f"case {c.index} {c.case.name}: {c.reason}")
            lines.extend(f"  {e.describe()}" for e in c.evidence)
        return lines
