"""Formulas of docs/theory.md that no other test checks directly, each against brute force.

The rest of the document names the test that checks each of its formulas; these
fill the gaps: the exponential-clock integral for ``wor`` as written (by adaptive
quadrature, not the trapezoid kernel), the exchange condition behind the chain
theorem and the greedy chain that puts the top set last, the orderings of hit probabilities that
make α*_wor >= α*_iid and α* non-decreasing in n, SpecHub's pair law, the
residual family of recursive rejection sampling, K-SEQ's ρ*, and ``nss``'s closed
forms on every draft law.
"""

import itertools

import numpy as np
import pytest
from scipy import integrate

from mdsd_cli import draft_tuple_law, hit_probability, hit_probability_chain, optimal_acceptance
from mdsd_cli.samplers import SAMPLERS, ratio_order
from mdsd_cli.verifiers import VERIFIERS, enumerated_rate, prepare_verifier

from .conftest import random_pair


def brute_hit(q, n, sampler, in_a):
    """P(X hits A) from the enumerated law of the draft tuple."""
    tuples, prob = draft_tuple_law(q, n, sampler=sampler)
    return float(prob[in_a[tuples].any(axis=1)].sum())


def all_sets(V):
    for mask in range(1 << V):
        yield np.array([(mask >> i) & 1 for i in range(V)], dtype=bool)


def below_n(rates, t, n):
    """P[N(t) < n] for independent clocks of the given rates (Poisson-binomial, exact DP)."""
    pmf = np.zeros(n)
    pmf[0] = 1.0
    for r in rates:
        s = -np.expm1(-r * t)
        pmf[1:] = pmf[1:] * (1 - s) + pmf[:-1] * s
        pmf[0] *= 1 - s
    return pmf.sum()


def clock_integrand(t, W, rates, n):
    return W * np.exp(-W * t) * below_n(rates, t, n)


def test_wor_hit_probability_is_the_exponential_clock_integral():
    # P(X hits A) = ∫ W e^{-Wt} P[N_B(t) < n] dt, evaluated by adaptive quadrature
    rng = np.random.default_rng(7)
    for _ in range(25):
        V = int(rng.integers(2, 6))
        _, q = random_pair(rng, V, zeros=False)
        n = int(rng.integers(1, V + 1))
        for in_a in all_sets(V):
            W = q[in_a].sum()
            if not in_a.any() or in_a.all():
                continue
            value, _ = integrate.quad(clock_integrand, 0, np.inf, args=(W, q[~in_a], n),
                                      epsabs=1e-13, epsrel=1e-12, limit=200)
            assert value == pytest.approx(brute_hit(q, n, "wor", in_a), abs=1e-9), (q, n, in_a)


def exchange_violation(q, n, sampler):
    """Largest q_j [H(B+j+i) - H(B+j)] - q_i [H(B+j) - H(B)] over sets B and tokens i, j outside B."""
    tuples, prob = draft_tuple_law(q, n, sampler=sampler)
    V = q.size
    masks = list(all_sets(V))
    H = {m.tobytes(): float(prob[m[tuples].any(axis=1)].sum()) for m in masks}
    worst = -np.inf
    for B in masks:
        for i, j in itertools.permutations(np.flatnonzero(~B), 2):
            Bj = B.copy()
            Bj[j] = True
            Bji = Bj.copy()
            Bji[i] = True
            gain_i = H[Bji.tobytes()] - H[Bj.tobytes()]
            gain_j = H[Bj.tobytes()] - H[B.tobytes()]
            worst = max(worst, q[j] * gain_i - q[i] * gain_j)
    return worst


def test_exchange_condition_of_the_chain_theorem():
    # (*) q_j [H(B+j+i) - H(B+j)] <= q_i [H(B+j) - H(B)]: holds for iid and wor drafts, so some
    # p/q prefix minimises the dual; fails for greedy drafts (the top set is hit with certainty).
    rng = np.random.default_rng(14)
    for _ in range(40):
        V = int(rng.integers(2, 6))
        _, q = random_pair(rng, V)
        for n in range(1, V + 1):
            for sampler in ("iid", "wor"):
                assert exchange_violation(q, n, sampler) <= 1e-15, (q, n, sampler)
    assert exchange_violation(np.full(5, 0.2), 2, "greedy") > 0.1


def test_greedy_chain_puts_the_top_set_last():
    # Scanning the chain with T last gives the closed form; the plain p/q chain need not.
    rng = np.random.default_rng(15)
    for _ in range(100):
        V = int(rng.integers(2, 9))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, V + 1))
        order = SAMPLERS["greedy"].chain_order(p, q, n)
        H = hit_probability_chain(q, n, order, sampler="greedy")
        scanned = 1.0 + (H - np.concatenate(([0.0], np.cumsum(p[order])))).min()
        assert scanned == pytest.approx(optimal_acceptance(p, q, n, sampler="greedy"), abs=1e-12)
    p, q = np.array([0.4, 0.3, 0.1, 0.1, 0.1]), np.full(5, 0.2)  # the top token has the largest ratio
    plain = ratio_order(p, q)
    H = hit_probability_chain(q, 2, plain, sampler="greedy")
    assert 1.0 + (H - np.concatenate(([0.0], np.cumsum(p[plain])))).min() == 1.0
    assert optimal_acceptance(p, q, 2, sampler="greedy") == pytest.approx(0.95, abs=1e-15)


def test_hit_probabilities_order_the_samplers_and_grow_with_n():
    # For every token set A: P_wor(X hits A) >= P_iid(X hits A), and each sampler's
    # P(X hits A) is non-decreasing in n. Hence α*_wor >= α*_iid and α* grows with n.
    rng = np.random.default_rng(8)
    for _ in range(30):
        V = int(rng.integers(2, 6))
        _, q = random_pair(rng, V)
        for in_a in all_sets(V):
            for n in (1, 2, 3):
                wor, iid = brute_hit(q, n, "wor", in_a), brute_hit(q, n, "iid", in_a)
                assert wor >= iid - 1e-15
                for sampler in ("iid", "wor", "greedy"):
                    assert brute_hit(q, n + 1, sampler, in_a) >= brute_hit(q, n, sampler, in_a) - 1e-15
            # the library's hit probability is the same number
            tokens = np.flatnonzero(in_a)
            assert hit_probability(q, 2, tokens, sampler="greedy") == pytest.approx(
                brute_hit(q, 2, "greedy", in_a), abs=1e-15)


def test_hub_pair_law_by_hand():
    # (i, a) with probability q(i); (a, i) with probability q(a) q(i) / (1 - q(a)); a = argmax q
    rng = np.random.default_rng(9)
    for _ in range(30):
        V = int(rng.integers(2, 7))
        _, q = random_pair(rng, V)
        if np.count_nonzero(q) < 2:
            continue
        a = int(np.lexsort((np.arange(V), -q))[0])
        expected = {}
        for i in np.flatnonzero(q):
            if i != a:
                expected[(int(i), a)] = q[i]
                expected[(a, int(i))] = q[a] * q[i] / (1 - q[a])
        tuples, prob = draft_tuple_law(q, 2, sampler="hub")
        assert {tuple(t): pr for t, pr in zip(tuples.tolist(), prob)} == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", ["rrs", "rrsw"])
def test_rejection_residuals_are_one_family(name):
    # Rejecting x_k turns p_k = (p - C_k q)_+ / G(C_k) into the same form with
    # C_{k+1} = C_k + G(C_k) / s_k, s_k the draft mass not yet drafted (1 for iid).
    rng = np.random.default_rng(10)
    sampler = "iid" if name == "rrs" else "wor"
    checked = 0
    for _ in range(200):
        V = int(rng.integers(2, 8))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, V + 1))
        verifier = prepare_verifier(name, p, q, n)
        drafts = verifier.draft_sampler.sample(q, n, rng, 1)[0]
        target, C, available = p.copy(), 0.0, np.ones(V, dtype=bool)
        rejected_all = True
        for x in drafts:
            undrafted = q[available].sum() if sampler == "wor" else 1.0
            q_k = np.where(available, q, 0.0) / undrafted
            if target[x] >= q_k[x]:  # accepted for sure: the path ends
                rejected_all = False
                break
            G = np.maximum(p - C * q, 0.0).sum()
            C += G / undrafted
            residual = np.maximum(target - q_k, 0.0)
            target = residual / residual.sum()
            family = np.maximum(p - C * q, 0.0)
            np.testing.assert_allclose(target, family / family.sum(), rtol=0, atol=1e-12)
            checked += 1
            if sampler == "wor":
                available[x] = False
        if rejected_all and np.maximum(p - C * q, 0.0).sum() > 1e-9:
            assert verifier.path(drafts[None, :])[1][0] == pytest.approx(C, rel=1e-12)
    assert checked > 100


def test_rrs_rate_telescopes():
    # 1 - prod_k (1 - sum_i min(p_k(i), q(i))) = 1 - G(C_{n+1})
    rng = np.random.default_rng(11)
    for _ in range(100):
        V = int(rng.integers(1, 9))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, 5))
        target, rejected = p.copy(), 1.0
        for _ in range(n):
            rejected *= 1.0 - np.minimum(target, q).sum()
            residual = np.maximum(target - q, 0.0)
            if residual.sum() <= 0:
                break
            target = residual / residual.sum()
        assert VERIFIERS["rrs"](p, q, n).exact_rate() == pytest.approx(1.0 - rejected, abs=1e-12)


def kseq_slack(rho, p, q, n):
    """rho beta(rho) - (1 - (1 - beta(rho))^n), beta(rho) = sum_i min(q_i, p_i / rho)."""
    beta = np.minimum(q, p / rho).sum()
    return rho * beta - (1 - (1 - beta) ** n)


def test_kseq_rho_is_the_smallest_feasible_one():
    # rho* = smallest rho in [1, n] with 1 - (1 - beta(rho))^n <= rho beta(rho); the rate is
    # 1 - (1 - beta)^n = rho* beta(rho*) = sum_i min(rho* q_i, p_i)
    rng = np.random.default_rng(12)
    for _ in range(200):
        V = int(rng.integers(2, 9))
        p, q = random_pair(rng, V)
        n = int(rng.integers(2, 6))
        v = VERIFIERS["kseq"](p, q, n)
        assert 1.0 <= v.rho <= n
        assert kseq_slack(v.rho, p, q, n) == pytest.approx(0.0, abs=1e-12)  # an equality at rho*, so
        assert v.exact_rate() == pytest.approx(np.minimum(v.rho * q, p).sum(), abs=1e-12)
        if v.rho > 1.0 + 1e-9:
            assert kseq_slack(v.rho * (1 - 1e-7), p, q, n) < 0


def test_nss_closed_forms_on_every_draft_law():
    # nss accepts with probability sum_i p(i) P(i in X); closed forms for iid, greedy and hub
    rng = np.random.default_rng(13)
    for trial in range(60):
        V = int(rng.integers(1, 7))
        p, q = random_pair(rng, V)
        for sampler, n in (("iid", 1 + trial % 3), ("greedy", 1 + trial % 3), ("hub", 2)):
            v = prepare_verifier("nss", p, q, n, sampler=sampler)
            tuples, prob = draft_tuple_law(q, n, sampler=sampler)
            inclusion = np.array([prob[(tuples == i).any(axis=1)].sum() for i in range(V)])
            assert v.exact_rate() == pytest.approx(float((p * inclusion).sum()), abs=1e-12), (sampler, p, q, n)
            assert v.exact_rate() == pytest.approx(enumerated_rate(v), abs=1e-12)

