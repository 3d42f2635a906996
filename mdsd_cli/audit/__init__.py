"""Audit anyone's verifier: is its output distributed as the target, and how far is its acceptance from α*?

::

    from mdsd_cli.audit import audit_verifier, load_callable
    report = audit_verifier(my_verify, sampler="iid", n=3, budget=1_000_000)
    report.passed, report.to_frame(), report.details()

The function is called on draft tuples chosen by stratifying the exact draft law
(:mod:`.strata`), over an adversarial battery of cases (:mod:`.cases`), and an
anytime-valid sequential test (:mod:`.betting`) decides, case by case at a
family-wise level, whether its output law departs from ``p``.
"""

from .callables import MdsdVerifierCallable, adapt_callable, as_callable, load_callable
from .calls import case_inputs, replay, tuple_seed
from .cases import AuditCase, battery_cases, make_case, pair_cases, random_cases
from .report import AuditReport, CaseResult, TupleEvidence
from .run import audit_verifier

__all__ = [
    "AuditCase", "AuditReport", "CaseResult", "MdsdVerifierCallable", "TupleEvidence", "adapt_callable",
    "as_callable", "audit_verifier", "battery_cases", "case_inputs", "load_callable", "make_case", "pair_cases",
    "random_cases", "replay", "tuple_seed",
]
