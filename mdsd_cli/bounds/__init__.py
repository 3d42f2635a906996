"""The optimal acceptance rate α*: one entry point, four solvers.

=============  =====================================================  =================
solver         method                                                 exactness
=============  =====================================================  =================
``chain``      sorted-prefix scan (default), ``O(V log V)``            exact (~1e-13)
``primal-lp``  CVXPY flow LP over the exact draft-set law             LP tolerance 1e-6
``dual-lp``    CVXPY dual (fractional min-cut) LP                     LP tolerance 1e-6
``subsets``    brute force over all 2^V sets, V <= 20                 exact
=============  =====================================================  =================
"""

from __future__ import annotations

import numpy as np

from ..distributions import as_array, check_pair
from ..errors import USE_CHAIN, check_integer, option, unknown_choice
from ..samplers import get_sampler
from .chain import chain_solve
from .lp import LP_SOLVERS, MAX_LP_VARIABLES, dual_lp, estimate_lp_variables, primal_lp
from .result import OptimalAcceptance, TransportPlan
from .subsets import MAX_SUBSET_VOCAB, subsets_solve

#: Solvers by CLI name.
SOLVERS = ("chain", "primal-lp", "dual-lp", "subsets")

__all__ = [
    "LP_SOLVERS", "MAX_LP_VARIABLES", "MAX_SUBSET_VOCAB", "SOLVERS", "OptimalAcceptance",
    "TransportPlan", "check_problem_size", "estimate_lp_variables", "optimal_acceptance",
    "solve_optimal_acceptance",
]


def _check_solver(solver: str) -> str:
    if solver not in SOLVERS:
        raise unknown_choice("solver", solver, SOLVERS)
    return solver


def _check_lp_solver(lp_solver: str) -> str:
    if not isinstance(lp_solver, str) or lp_solver.lower() not in LP_SOLVERS:
        raise unknown_choice("LP solver", lp_solver, LP_SOLVERS)
    return lp_solver.lower()


def solve_optimal_acceptance(p, q, n: int, *, sampler: str = "iid", solver: str = "chain",
                             lp_solver: str = "highs", renormalize: bool = False,
                             max_lp_variables: int = MAX_LP_VARIABLES):
    """α* with its minimising set (and transport plan for ``primal-lp``).

    .. math::

        \\alpha^* = \\max_{\\pi \\in \\Pi(\\text{law of } X,\\, p)} P_\\pi(Y \\in X)
                 = \\min_{A} \\; 1 - p(A) + P(X \\text{ hits } A)

    Parameters
    ----------
    p, q : array_like ``[V]`` or ``[N, V]``
        Target and draft distributions: lists, numpy arrays or torch tensors of any
        float dtype and device (copied to the CPU and computed in float64).
    n : int
        Number of drafts (``hub``: 2 only).
    sampler : {"iid", "wor", "greedy", "hub"}
    solver : {"chain", "primal-lp", "dual-lp", "subsets"}
    lp_solver : {"highs", "clarabel"}
        Back-end of the LP solvers.
    renormalize : bool
        Rescale rows whose sum is off by more than rounding explains (1e-6 for
        float64, see :func:`~mdsd_cli.distributions.sum_tolerance`) instead of refusing them.
    max_lp_variables : int
        LP size above which the LP solvers refuse (and point to ``chain``).

    Returns
    -------
    OptimalAcceptance, or a list of them for ``[N, V]`` inputs.

    Raises
    ------
    InputError, SizeLimitError, SolverError

    Examples
    --------
    >>> r = solve_optimal_acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], 2)
    >>> round(r.value, 12), r.token_set.tolist()
    (0.89, [2])
    """
    s = get_sampler(sampler)
    n = s.check_n(n)
    _check_solver(solver)
    _check_lp_solver(lp_solver)
    max_lp_variables = check_integer(max_lp_variables, "max_lp_variables", 1)
    P, Q, batched = check_pair(p, q, renormalize=renormalize)
    if solver == "chain":
        values, _, sets = chain_solve(P, Q, n, sampler=s.name, want_sets=True)
        results = [OptimalAcceptance(float(v), a, s.name, "chain", n) for v, a in zip(values, sets)]
    else:
        results = []
        for i in range(P.shape[0]):
            if solver == "subsets":
                results.append(subsets_solve(P[i], Q[i], n, s))
            else:
                fn = primal_lp if solver == "primal-lp" else dual_lp
                results.append(fn(P[i], Q[i], n, s, lp_solver=lp_solver, max_variables=max_lp_variables))
    return results if batched else results[0]


def optimal_acceptance(p, q, n: int, *, sampler: str = "iid", solver: str = "chain",
                       lp_solver: str = "highs", renormalize: bool = False,
                       max_lp_variables: int = MAX_LP_VARIABLES):
    """The optimal acceptance rate α* (a float, or an ``[N]`` array for ``[N, V]`` inputs).

    See :func:`solve_optimal_acceptance` for the parameters; this returns the
    value only, and for ``chain`` on batches skips building the minimising sets.

    Examples
    --------
    >>> round(optimal_acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], 2, sampler="greedy"), 12)
    0.95
    """
    if solver == "chain":
        s = get_sampler(sampler)
        n = s.check_n(n)
        _check_lp_solver(lp_solver)
        P, Q, batched = check_pair(p, q, renormalize=renormalize)
        values, _, _ = chain_solve(P, Q, n, sampler=s.name, want_sets=False)
        return values if batched else float(values[0])
    res = solve_optimal_acceptance(p, q, n, sampler=sampler, solver=solver, lp_solver=lp_solver,
                                   renormalize=renormalize, max_lp_variables=max_lp_variables)
    if isinstance(res, list):
        return np.array([r.value for r in res])
    return res.value


def check_problem_size(q, n: int, *, sampler: str, solver: str,
                       max_lp_variables: int = MAX_LP_VARIABLES) -> None:
    """Raise :class:`SizeLimitError` now if ``solver`` would refuse this problem later.

    ``q`` is ``[V]`` or ``[N, V]``; cheap (no enumeration), so commands can fail
    before doing any work.
    """
    from ..errors import SizeLimitError

    s = get_sampler(sampler)
    n = s.check_n(n)
    _check_solver(solver)
    max_lp_variables = check_integer(max_lp_variables, "max_lp_variables", 1)
    Q = np.atleast_2d(as_array(q))
    V = Q.shape[1]
    if solver == "subsets" and V > MAX_SUBSET_VOCAB:
        raise SizeLimitError(
            f"subsets enumerates 2^V sets and accepts V <= {MAX_SUBSET_VOCAB}, got V={V}; "
            f"use {USE_CHAIN} (exact, O(V log V))"
        )
    if solver in ("primal-lp", "dual-lp"):
        need = max(estimate_lp_variables(s, row, n) for row in Q)
        if need > max_lp_variables:
            raise SizeLimitError(
                f"{solver} for sampler {s.name} at V={V}, n={n} needs {need:,} LP variables "
                f"(limit {max_lp_variables:,}); use {USE_CHAIN} (exact, O(V log V)) "
                f"or raise {option('--max-lp-variables', 'max_lp_variables')}"
            )
