"""mdsd: multi-draft speculative decoding experiments.

Public API::

    from mdsd_cli import optimal_acceptance, sample_drafts
    optimal_acceptance(p, q, n, sampler="iid", solver="chain") -> float
    sample_drafts(q, n, sampler="iid", rng=numpy.random.default_rng(0)) -> int array

    from mdsd_cli import verify, verify_batch, prepare_verifier, acceptance_rate, verifier_names
    verify(name, p, q, drafts, rng=rng) -> int
    verify(name, p, q, drafts, rng=rng, return_index=True) -> Verification(token, index)
    verify_batch(name, P, Q, drafts, rng=rng) -> BatchVerification(tokens, indices)
    prepare_verifier(name, p, q, n).verify(drafts, rng) -> Verification  (set-up once per pair)
    acceptance_rate(name, p, q, n, method="exact"|"monte-carlo", samples=..., rng=None)
    verifier_names() -> list[str]

    from mdsd_cli import audit_verifier
    audit_verifier(my_verify, sampler="iid", n=3, budget=1_000_000) -> AuditReport  (is *your* verifier lossless?)
"""

from .audit import AuditReport, audit_verifier
from .bounds import (
    LP_SOLVERS,
    SOLVERS,
    OptimalAcceptance,
    TransportPlan,
    optimal_acceptance,
    solve_optimal_acceptance,
)
from .distributions import (
    PairBatch,
    apply_temperature,
    check_pair,
    check_probabilities,
    dirichlet_pairs,
    pairs_from_logits,
    pairs_from_probabilities,
    softmax,
    sum_tolerance,
    zipf_pairs,
)
from .errors import (
    CallableError,
    DataFileError,
    InputError,
    MdsdError,
    OutputError,
    SizeLimitError,
    SolverError,
)
from .samplers import (
    SAMPLERS,
    DraftSetLaw,
    draft_set_law,
    draft_tuple_law,
    hit_probability,
    hit_probability_chain,
    sample_drafts,
    sampler_names,
)
from .verifiers import (
    BatchVerification,
    PreparedVerifier,
    Verification,
    acceptance_rate,
    output_law,
    prepare_verifier,
    verifier_names,
    verify,
    verify_batch,
)

__version__ = "0.1.0"

__all__ = [
    "LP_SOLVERS", "SAMPLERS", "SOLVERS", "DataFileError", "DraftSetLaw", "InputError", "MdsdError",
    "OptimalAcceptance", "OutputError", "PairBatch", "SizeLimitError", "SolverError", "TransportPlan",
    "apply_temperature", "check_pair", "check_probabilities", "dirichlet_pairs", "draft_set_law",
    "draft_tuple_law", "hit_probability", "hit_probability_chain", "optimal_acceptance",
    "pairs_from_logits", "pairs_from_probabilities", "sample_drafts", "sampler_names",
    "solve_optimal_acceptance", "softmax", "sum_tolerance", "zipf_pairs",
    "BatchVerification", "PreparedVerifier", "Verification", "acceptance_rate", "output_law", "prepare_verifier",
    "verifier_names", "verify", "verify_batch", "AuditReport", "CallableError", "audit_verifier",
]
