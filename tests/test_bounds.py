"""α* from four solvers against each other, the reference cases, closed forms and identities."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdsd_cli import SOLVERS, optimal_acceptance, solve_optimal_acceptance
from mdsd_cli.bounds.lp import set_objective
from mdsd_cli.errors import InputError, SizeLimitError
from mdsd_cli.samplers import SAMPLERS, draft_set_law

from .conftest import random_pair, reference_cases

SAMPLER_NS = [("iid", n) for n in (1, 2, 3)] + [("wor", n) for n in (1, 2, 3)] + \
    [("greedy", n) for n in (1, 2, 3)] + [("hub", 2)] + [("topk", n) for n in (1, 2, 3)]


def brute_force_alpha(p, q, n, sampler):
    """Independent oracle: every token set A, P(X hits A) from the enumerated tuple law."""
    tuples, prob = SAMPLERS[sampler].tuple_law(q, n)
    V = p.size
    best = np.inf
    for mask in range(1 << V):
        in_a = np.array([(mask >> i) & 1 for i in range(V)], dtype=bool)
        hit = prob[in_a[tuples].any(axis=1)].sum()
        best = min(best, 1.0 - p[in_a].sum() + hit)
    return best


@pytest.mark.parametrize("case", reference_cases(), ids=lambda c: c["name"])
def test_reference_alpha_star_every_solver(case):
    for sampler, by_n in case["alpha_star"].items():
        for n, expected in by_n.items():
            for solver in SOLVERS:
                got = optimal_acceptance(case["target"], case["draft"], int(n), sampler=sampler, solver=solver)
                tol = 1e-6 if solver.endswith("lp") else 1e-9  # reference values carry 12 digits
                assert got == pytest.approx(expected, abs=tol), (sampler, n, solver)


def test_worked_example_of_the_theory_document():
    p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    res = solve_optimal_acceptance(p, q, 2, sampler="iid")
    assert res.value == pytest.approx(0.89, abs=1e-14)
    assert res.token_set.tolist() == [2]
    assert optimal_acceptance(p, q, 2, sampler="wor") == pytest.approx(139 / 140, abs=1e-12)
    assert optimal_acceptance(p, q, 2, sampler="greedy") == pytest.approx(0.95, abs=1e-14)


@pytest.mark.parametrize("sampler", ["iid", "wor", "greedy", "hub"])
def test_hundreds_of_random_cases_all_solvers_agree(sampler):
    rng = np.random.default_rng(["iid", "wor", "greedy", "hub"].index(sampler) + 100)
    for trial in range(200):
        V = int(rng.integers(1, 7))
        n = 2 if sampler == "hub" else 1 + trial % 3
        p, q = random_pair(rng, V)
        chain = optimal_acceptance(p, q, n, sampler=sampler, solver="chain")
        subsets = optimal_acceptance(p, q, n, sampler=sampler, solver="subsets")
        assert chain == pytest.approx(subsets, abs=1e-12), (p, q, n)
        for solver in ("primal-lp", "dual-lp"):
            lp = optimal_acceptance(p, q, n, sampler=sampler, solver=solver)
            assert lp == pytest.approx(chain, abs=1e-6), (p, q, n, solver)


@settings(max_examples=80)
@given(
    st.integers(1, 6).flatmap(lambda V: st.tuples(
        st.lists(st.floats(0, 1), min_size=V, max_size=V).filter(lambda x: sum(x) > 1e-3),
        st.lists(st.floats(0, 1), min_size=V, max_size=V).filter(lambda x: sum(x) > 1e-3),
    )),
    st.integers(1, 3),
    st.sampled_from(["iid", "wor", "greedy"]),
)
def test_chain_equals_subsets_on_arbitrary_vectors(pq, n, sampler):
    p = np.array(pq[0]) / sum(pq[0])
    q = np.array(pq[1]) / sum(pq[1])
    chain = optimal_acceptance(p, q, n, sampler=sampler)
    assert 0.0 <= chain <= 1.0
    assert chain == pytest.approx(optimal_acceptance(p, q, n, sampler=sampler, solver="subsets"), abs=1e-12)


def test_chain_matches_brute_force_over_enumerated_tuples():
    rng = np.random.default_rng(11)
    for trial in range(120):
        V = int(rng.integers(2, 6))
        sampler, n = SAMPLER_NS[trial % len(SAMPLER_NS)]
        p, q = random_pair(rng, V)
        expected = brute_force_alpha(p, q, n, sampler)
        assert optimal_acceptance(p, q, n, sampler=sampler) == pytest.approx(expected, abs=1e-12)


def test_minimising_sets_attain_the_value():
    rng = np.random.default_rng(3)
    for trial in range(80):
        V = int(rng.integers(2, 7))
        sampler, n = SAMPLER_NS[trial % len(SAMPLER_NS)]
        p, q = random_pair(rng, V)
        law = draft_set_law(q, n, sampler=sampler)
        for solver in ("chain", "subsets", "dual-lp", "primal-lp"):
            res = solve_optimal_acceptance(p, q, n, sampler=sampler, solver=solver)
            mask = np.zeros(V, dtype=bool)
            mask[res.token_set] = True
            tol = 1e-6 if solver.endswith("lp") else 1e-12
            assert set_objective(p, law, mask) == pytest.approx(res.value, abs=tol), solver


def test_primal_plan_is_a_feasible_coupling_with_the_optimal_value():
    rng = np.random.default_rng(5)
    for trial in range(30):
        V = int(rng.integers(2, 7))
        sampler, n = SAMPLER_NS[trial % len(SAMPLER_NS)]
        p, q = random_pair(rng, V)
        res = solve_optimal_acceptance(p, q, n, sampler=sampler, solver="primal-lp")
        plan = res.plan
        assert (plan.flow >= 0).all()
        per_set = np.bincount(plan.edge_set, weights=plan.flow, minlength=plan.set_prob.size)
        assert (per_set <= plan.set_prob + 1e-7).all()
        assert (plan.accepted_mass(V) <= p + 1e-7).all()
        assert plan.value == pytest.approx(res.value, abs=1e-7)
        # every edge joins a set to one of its own tokens
        assert all(t in plan.members[s] for s, t in zip(plan.edge_set, plan.edge_token))


@pytest.mark.parametrize("lp_solver", ["highs", "clarabel"])
def test_both_lp_backends(lp_solver):
    case = reference_cases()[1]
    for sampler in ("iid", "wor", "greedy"):
        for solver in ("primal-lp", "dual-lp"):
            got = optimal_acceptance(case["target"], case["draft"], 2, sampler=sampler, solver=solver,
                                     lp_solver=lp_solver)
            assert got == pytest.approx(case["alpha_star"][sampler]["2"], abs=1e-6)


def test_single_draft_gives_one_minus_total_variation():
    rng = np.random.default_rng(17)
    for _ in range(50):
        V = int(rng.integers(1, 300))
        p, q = random_pair(rng, V)
        overlap = np.minimum(p, q).sum()
        for sampler in ("iid", "wor", "greedy"):
            assert optimal_acceptance(p, q, 1, sampler=sampler) == pytest.approx(overlap, abs=1e-12)


def test_wor_dominates_iid_and_alpha_grows_with_n():
    rng = np.random.default_rng(23)
    for _ in range(40):
        V = int(rng.integers(2, 400))
        p, q = random_pair(rng, V)
        previous = {s: 0.0 for s in ("iid", "wor", "greedy")}
        for n in range(1, 7):
            values = {s: optimal_acceptance(p, q, n, sampler=s) for s in previous}
            assert values["wor"] >= values["iid"] - 1e-12
            for s, v in values.items():
                assert v >= previous[s] - 1e-12, (s, n)
                assert 0.0 <= v <= 1.0
            previous = values


def test_greedy_closed_form_and_hub_equal_greedy_at_two():
    rng = np.random.default_rng(29)
    for _ in range(60):
        V = int(rng.integers(2, 50))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, min(V, 6) + 1))
        top = np.lexsort((np.arange(V), -q))[: n - 1]
        rest = np.setdiff1d(np.arange(V), top)
        if np.count_nonzero(q > 0) >= n:
            r = q[rest] / q[rest].sum()
            expected = 1.0 - np.maximum(p[rest] - r, 0.0).sum()
            assert optimal_acceptance(p, q, n, sampler="greedy") == pytest.approx(expected, abs=1e-12)
        assert optimal_acceptance(p, q, 2, sampler="hub") == pytest.approx(
            optimal_acceptance(p, q, 2, sampler="greedy"), abs=1e-15)


def test_greedy_needs_its_own_chain_order():
    # The plain p/q order puts the top token (ratio 2) first; every prefix then hits T.
    p = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    q = np.full(5, 0.2)
    assert optimal_acceptance(p, q, 2, sampler="greedy") == pytest.approx(0.95, abs=1e-15)
    assert optimal_acceptance(p, q, 2, sampler="greedy", solver="subsets") == pytest.approx(0.95, abs=1e-15)


def test_batched_equals_unbatched():
    rng = np.random.default_rng(31)
    P, Q = zip(*(random_pair(rng, 40) for _ in range(12)))
    P, Q = np.array(P), np.array(Q)
    for sampler in ("iid", "wor", "greedy"):
        batch = optimal_acceptance(P, Q, 3, sampler=sampler)
        single = [optimal_acceptance(P[i], Q[i], 3, sampler=sampler) for i in range(12)]
        assert batch.shape == (12,)
        np.testing.assert_allclose(batch, single, rtol=0, atol=1e-15)
        results = solve_optimal_acceptance(P, Q, 3, sampler=sampler)
        assert [r.value for r in results] == pytest.approx(single, abs=1e-15)


def test_float32_and_float16_inputs_are_computed_in_float64():
    p = np.array([0.25, 0.25, 0.5], dtype=np.float16)
    q = np.array([0.5, 0.25, 0.25], dtype=np.float32)
    assert optimal_acceptance(p, q, 1) == pytest.approx(0.75, abs=1e-15)


def test_bad_arguments_raise_clear_errors():
    p, q = [0.5, 0.5], [0.5, 0.5]
    with pytest.raises(InputError, match="unknown solver"):
        optimal_acceptance(p, q, 2, solver="magic")
    with pytest.raises(InputError, match="unknown draft sampler"):
        optimal_acceptance(p, q, 2, sampler="nope")
    with pytest.raises(InputError, match=">= 1"):
        optimal_acceptance(p, q, 0)
    with pytest.raises(InputError, match="n = 2 only"):
        optimal_acceptance(p, q, 3, sampler="hub")
    with pytest.raises(InputError, match="unknown LP solver"):
        optimal_acceptance(p, q, 2, solver="dual-lp", lp_solver="gurobi")


def test_sizes_that_would_not_finish_are_refused_with_the_way_out():
    rng = np.random.default_rng(0)
    p, q = random_pair(rng, 400, zeros=False)
    with pytest.raises(SizeLimitError, match="solver='chain'"):
        optimal_acceptance(p, q, 4, solver="primal-lp")
    with pytest.raises(SizeLimitError, match="solver='chain'"):
        optimal_acceptance(p, q, 2, solver="subsets")
    # raising the cap is the other way out
    small_p, small_q = random_pair(rng, 30, zeros=False)
    with pytest.raises(SizeLimitError, match="max_lp_variables"):
        optimal_acceptance(small_p, small_q, 3, solver="dual-lp", max_lp_variables=100)


@pytest.mark.parametrize("sampler,n", [("iid", 4), ("wor", 4), ("greedy", 4)])
def test_subsets_handles_twenty_tokens(sampler, n):
    rng = np.random.default_rng(41)
    p, q = random_pair(rng, 12)
    assert optimal_acceptance(p, q, n, sampler=sampler, solver="subsets") == pytest.approx(
        optimal_acceptance(p, q, n, sampler=sampler), abs=1e-12)


def test_every_solver_is_exercised_on_every_sampler():
    # guard against a solver silently ignoring the sampler argument
    p, q = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])
    for solver in SOLVERS:
        vals = {s: optimal_acceptance(p, q, 2, sampler=s, solver=solver) for s in ("iid", "wor", "greedy")}
        assert len({round(v, 6) for v in vals.values()}) == 3, (solver, vals)
    assert list(itertools.islice(SOLVERS, 4)) == ["chain", "primal-lp", "dual-lp", "subsets"]


def test_topk_alpha_star_is_the_target_mass_of_the_top_set_and_target_sampling_reaches_it():
    """Deterministic top-k drafts: alpha*_topk = p(T) (closed form, independent of the chain), every solver agrees,
    and the topk verifier (Y ~ p) accepts exactly that."""
    from mdsd_cli.verifiers import acceptance_rate

    rng = np.random.default_rng(8)
    for _ in range(60):
        V = int(rng.integers(1, 7))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, 5))
        support = np.flatnonzero(q > 0)
        top = support[np.lexsort((support, -q[support]))][:n]  # most probable first, ties by lower index
        want = float(p[top].sum())
        for solver in ("chain", "primal-lp", "subsets"):
            got = optimal_acceptance(p, q, n, sampler="topk", solver=solver)
            assert got == pytest.approx(want, abs=1e-7 if solver.endswith("lp") else 1e-12), (solver, p, q, n)
        assert acceptance_rate("topk", p, q, n) == pytest.approx(want, abs=1e-12)
        assert acceptance_rate("topk", p, q, n, method="monte-carlo", samples=2_000)[0] == pytest.approx(want)
