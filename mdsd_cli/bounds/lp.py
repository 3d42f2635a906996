"""α* as a linear program (CVXPY): the primal transport problem and its dual.

Tuples of drafts with the same set of distinct tokens are merged (acceptance
``Y in X`` depends on the set only), giving the exact law ``P(S)`` of the draft
set. With one variable per (set, token in set) pair, the **primal** (flow form) is

.. math::

    \\alpha^* = \\max_{x \\ge 0} \\sum_{S, y \\in S} x_{S,y}
    \\quad\\text{s.t.}\\quad \\sum_{y \\in S} x_{S,y} \\le P(S),\\;
    \\sum_{S \\ni y} x_{S,y} \\le p(y),

and the **dual** is

.. math::

    \\alpha^* = \\min_{u, v \\ge 0} \\sum_S P(S) u_S + \\sum_y p(y) v_y
    \\quad\\text{s.t.}\\quad u_S + v_y \\ge 1 \\;\\; (y \\in S).

Indicator solutions ``v = 1_{A^c}``, ``u = 1[S hits A]`` give the min-cut form
``1 - p(A) + P(X hits A)``; a minimising set is recovered from ``v`` by
thresholding (every threshold is tried and scored exactly, so fractional
interior-point duals work too).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .._stdio import silence_stdout_fd
from ..errors import USE_CHAIN, SizeLimitError, SolverError, check_integer, option
from ..samplers import DraftSampler, DraftSetLaw
from .result import OptimalAcceptance, TransportPlan

#: LP back-ends by CLI name.
LP_SOLVERS = {"highs": "HIGHS", "clarabel": "CLARABEL"}
#: Tolerances passed to each back-end. Tighter than their defaults (1e-7, 1e-8):
#: at V = 500 HiGHS's defaults leave 6e-7 of error in α*, these leave ~1e-16 and
#: solve faster.
LP_OPTIONS = {
    "highs": {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    "clarabel": {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10},
}
#: Default cap on LP variables (set-token pairs for the primal).
MAX_LP_VARIABLES = 2_000_000


def estimate_lp_variables(sampler: DraftSampler, q: np.ndarray, n: int) -> int:
    """Number of (set, token) pairs of the flow LP, computed without enumerating."""
    q = sampler.draft_distribution(q)
    m = int(np.count_nonzero(q > 0))
    k = min(n, m)
    if sampler.kind == "iid":
        return sum(math.comb(m, j) * j for j in range(1, k + 1))
    if sampler.kind == "wor":
        return math.comb(m, k) * k
    if sampler.kind == "hybrid":
        return k if m < n else math.comb(m - sampler.base.m, n - sampler.base.m) * n
    if sampler.kind == "hub":
        return 1 if m < 2 else 2 * (m - 1)
    return k if m < n else (m - n + 1) * n  # greedy


def _set_law(sampler, q, n, solver_name, max_variables) -> DraftSetLaw:
    max_variables = check_integer(max_variables, "max_lp_variables", 1)  # nan or "1e6" would lift or break the limit
    need = estimate_lp_variables(sampler, q, n)
    if need > max_variables:
        raise SizeLimitError(
            f"{solver_name} for sampler {sampler.name} at V={q.size}, n={n} needs {need:,} LP variables "
            f"(limit {max_variables:,}); use {USE_CHAIN} (exact, O(V log V)) or raise "
            f"{option('--max-lp-variables', 'max_lp_variables')}"
        )
    return sampler.set_law(q, n, max_tuples=max(max_variables, 1))


def _edges(law: DraftSetLaw):
    set_idx, slot = np.nonzero(law.members >= 0)
    return set_idx.astype(np.int64), law.members[set_idx, slot].astype(np.int64)


def _incidence(rows: np.ndarray, num_rows: int):
    import scipy.sparse as sp

    E = rows.size
    return sp.csr_matrix((np.ones(E), (rows, np.arange(E))), shape=(num_rows, E))


def _other_lp_solver(key: str) -> str:
    other = "clarabel" if key == "highs" else "highs"
    return option(f"--lp-solver {other}", f"lp_solver={other!r}")


def _solve(problem, lp_solver: str, solver_name: str):
    import cvxpy as cp

    key = lp_solver.lower()
    if key not in LP_SOLVERS:
        raise SolverError(f"unknown LP solver {lp_solver!r}; choose one of: {', '.join(LP_SOLVERS)}")
    try:
        with silence_stdout_fd():
            problem.solve(solver=getattr(cp, LP_SOLVERS[key]), verbose=False, **LP_OPTIONS[key])
    except (cp.error.SolverError, ValueError) as exc:  # cvxpy raises ValueError when a solver returns no solution
        raise SolverError(f"{solver_name} ({key}) failed: {str(exc)[:200]}; try {_other_lp_solver(key)} or "
                          f"{USE_CHAIN}") from None
    if problem.status != cp.OPTIMAL:
        raise SolverError(
            f"{solver_name} ({key}) ended with status {problem.status!r}, not optimal; the value is not "
            f"trusted. Try {_other_lp_solver(key)} or {USE_CHAIN}"
        )


#: Absolute precision :func:`certified_max` guarantees: the returned value is within this of the LP's optimum.
CERTIFIED_GAP = 1e-9
#: Back-ends :func:`certified_max` tries in turn, with their options: HiGHS at its default tolerances first
#: (with the tight ones it stops some badly scaled sequence LPs early, 2e-5 to 2e-3 below the optimum,
#: while claiming optimality), then Clarabel (interior point) at 1e-12 (at 1e-10 its dual bound can stay
#: 2e-8 above its value at V = 44), then HiGHS at the tight tolerances (peaked laws, e.g. the `2x2` iid
#: lossless LP of synthetic-v4 at T = 0.6, leave both first answers 2e-9 to 5e-8 infeasible; the
#: certificate still judges every answer).
CERTIFIED_SOLVERS = (("highs", {}), ("clarabel", {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12}),
                     ("highs", LP_OPTIONS["highs"]))


@dataclass(frozen=True)
class CertifiedValue:
    """The value of ``max c·x`` and the proof of it: ``lower`` (a primal point's value, feasible to
    ``residual``) and ``upper`` (a dual bound, valid for any feasible ``x``); ``value`` is ``lower``."""

    value: float
    lower: float
    upper: float
    residual: float
    solver: str


def certified_max(c: np.ndarray, *, A_ub=None, b_ub=None, A_eq=None, b_eq=None, what: str = "LP",
                  gap: float = CERTIFIED_GAP) -> CertifiedValue:
    """``max c·x`` over ``x >= 0``, ``A_ub x <= b_ub``, ``A_eq x = b_eq`` (nonnegative sparse ``A``), to ``gap``.

    Each back-end of :data:`CERTIFIED_SOLVERS` is tried until one's answer is
    verified here, independently of the solver's own status: the primal point
    violates no constraint by more than ``gap``, and weak duality with the
    returned duals ``y >= 0``, ``z`` and the bounds ``x_j <= U_j = min_i b_i / A_ij``
    (every coefficient nonnegative) gives

    .. math::

        c \\cdot x^* \\le b_{ub} \\cdot y + b_{eq} \\cdot z + \\sum_j U_j \\max(0, c_j - (A_{ub}^T y + A_{eq}^T z)_j),

    within ``gap`` of the primal value. Raises :class:`SolverError` when no back-end's answer is verified.
    """
    import cvxpy as cp
    import scipy.sparse as sp

    c = np.asarray(c, dtype=float)
    blocks = [(sp.csr_matrix(A), np.asarray(b, dtype=float)) for A, b in ((A_ub, b_ub), (A_eq, b_eq)) if A is not None]
    if any(A.nnz and A.data.min() < 0 for A, _ in blocks):
        raise ValueError("certified_max needs nonnegative constraint coefficients")
    upper_x = np.full(c.size, np.inf)  # x_j <= b_i / A_ij for every row i (x >= 0, A >= 0)
    for A, b in blocks:
        coo = A.tocoo()
        keep = coo.data > 0
        np.minimum.at(upper_x, coo.col[keep], np.maximum(b[coo.row[keep]], 0.0) / coo.data[keep])
    x = cp.Variable(c.size, nonneg=True)
    ub = [blocks[0][0] @ x <= blocks[0][1]] if A_ub is not None else []
    eq = [blocks[-1][0] @ x == blocks[-1][1]] if A_eq is not None else []
    problem = cp.Problem(cp.Maximize(c @ x), ub + eq)
    failures = []
    for key, options in CERTIFIED_SOLVERS:
        try:
            with silence_stdout_fd(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "may be inaccurate": the certificate below is the judge
                problem.solve(solver=getattr(cp, LP_SOLVERS[key]), verbose=False, **options)
        except (cp.error.SolverError, ValueError) as exc:
            failures.append(f"{key}: {str(exc)[:80]}")
            continue
        if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or x.value is None:
            failures.append(f"{key}: status {problem.status}")
            continue
        xv = np.clip(np.asarray(x.value, dtype=float), 0.0, None)
        residual, reduced, bound = 0.0, c.copy(), 0.0
        for con, (A, b), is_eq in [(con, blocks[0], False) for con in ub] + [(con, blocks[-1], True) for con in eq]:
            Ax = A @ xv
            residual = max(residual, float(np.max(np.abs(Ax - b) if is_eq else np.maximum(Ax - b, 0.0), initial=0.0)))
            dual = np.asarray(con.dual_value, dtype=float).reshape(-1)
            dual = dual if is_eq else np.maximum(dual, 0.0)
            reduced -= A.T @ dual
            bound += float(b @ dual)
        excess = np.maximum(reduced, 0.0)
        bound += float(np.sum(np.where(excess > 0, excess * upper_x, 0.0)))
        lower = float(c @ xv)
        if residual <= gap and bound - lower <= gap:
            return CertifiedValue(lower, lower, bound, residual, key)
        failures.append(f"{key}: gap {bound - lower:.1e}, infeasibility {residual:.1e}")
    raise SolverError(f"{what}: no solver's answer could be verified to {gap:g} ({'; '.join(failures)})")


def set_objective(p: np.ndarray, law: DraftSetLaw, in_set: np.ndarray) -> float:
    """Exact ``1 - p(A) + P(X hits A)`` for a boolean token mask ``A`` under ``law``."""
    members = law.members
    hit = np.any(np.where(members >= 0, in_set[np.maximum(members, 0)], False), axis=1)
    return 1.0 - float(p[in_set].sum()) + float(law.prob[hit].sum())


def _best_threshold_set(p: np.ndarray, law: DraftSetLaw, v: np.ndarray) -> np.ndarray:
    # A = {y : v_y < theta}; an integral vertex gives the cut at once, a fractional
    # dual needs the best threshold (some threshold is optimal for bipartite covers).
    levels = np.unique(np.clip(v, 0.0, 1.0))
    thresholds = np.concatenate(([0.0], (levels[:-1] + levels[1:]) / 2.0 if levels.size > 1 else [], [1.0 + 1e-9]))
    best, best_mask = math.inf, np.zeros(p.size, dtype=bool)
    for theta in thresholds:
        mask = v < theta
        val = set_objective(p, law, mask)
        if val < best - 1e-15:
            best, best_mask = val, mask
    return np.flatnonzero(best_mask).astype(np.int64)


def primal_lp(p: np.ndarray, q: np.ndarray, n: int, sampler: DraftSampler, *, lp_solver: str = "highs",
              max_variables: int = MAX_LP_VARIABLES) -> OptimalAcceptance:
    """α* from the primal flow LP; returns the value, the plan and a minimising set."""
    import cvxpy as cp

    law = _set_law(sampler, q, n, "primal-lp", max_variables)
    edge_set, edge_token = _edges(law)
    x = cp.Variable(edge_set.size, nonneg=True)
    per_set = _incidence(edge_set, law.num_sets) @ x <= law.prob
    per_token = _incidence(edge_token, p.size) @ x <= p
    problem = cp.Problem(cp.Maximize(cp.sum(x)), [per_set, per_token])
    _solve(problem, lp_solver, "primal-lp")
    flow = np.clip(np.asarray(x.value, dtype=np.float64), 0.0, None)
    v = np.asarray(per_token.dual_value, dtype=np.float64).reshape(-1)
    plan = TransportPlan(law.members, law.prob, edge_set, edge_token, flow)
    return OptimalAcceptance(
        value=min(max(float(problem.value), 0.0), 1.0), token_set=_best_threshold_set(p, law, v),
        sampler=sampler.name, solver="primal-lp", n=n, plan=plan,
    )


def dual_lp(p: np.ndarray, q: np.ndarray, n: int, sampler: DraftSampler, *, lp_solver: str = "highs",
            max_variables: int = MAX_LP_VARIABLES) -> OptimalAcceptance:
    """α* from the dual (fractional min-cut) LP; returns the value and the set read off ``v``."""
    import cvxpy as cp

    law = _set_law(sampler, q, n, "dual-lp", max_variables)
    edge_set, edge_token = _edges(law)
    u = cp.Variable(law.num_sets, nonneg=True)
    v = cp.Variable(p.size, nonneg=True)
    cover = _incidence(edge_set, law.num_sets).T @ u + _incidence(edge_token, p.size).T @ v >= 1
    problem = cp.Problem(cp.Minimize(law.prob @ u + p @ v), [cover])
    _solve(problem, lp_solver, "dual-lp")
    token_set = _best_threshold_set(p, law, np.asarray(v.value, dtype=np.float64))
    return OptimalAcceptance(
        value=min(max(float(problem.value), 0.0), 1.0), token_set=token_set,
        sampler=sampler.name, solver="dual-lp", n=n,
    )
