"""Reliability, part 1: numerical edge cases, each checked against an independent oracle.

Oracles: brute force over all token sets with the draft law enumerated tuple by
tuple (:func:`enumerated_alpha`), the ``subsets`` solver (its own subset dynamic
programme), the LPs, and closed forms. The catalogue these tests back is
docs/reliability.md.
"""

import io
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mdsd_cli import (
    InputError,
    check_pair,
    draft_tuple_law,
    optimal_acceptance,
    sample_drafts,
    softmax,
    solve_optimal_acceptance,
)
from mdsd_cli._wor_kernel import wor_hit_chain, wor_hit_chain_numpy
from mdsd_cli.cli.app import app
from mdsd_cli.samplers import ratio_order
from mdsd_cli.verifiers import VERIFIERS, exact_rate, monte_carlo_rate, output_distribution

runner = CliRunner()
SAMPLER_NS = [(s, n) for s in ("iid", "wor", "greedy") for n in (1, 2, 3, 5)] + [("hub", 2)]
#: Decimal exponents of the extreme entries: down to the float64 floor (4.9e-324).
EXPONENTS = [0, 1, 5, 30, 100, 200, 300, 305, 310, 315, 320, 323]


def enumerated_alpha(p, q, n, sampler):
    """Brute force: min over every token set A of 1 - p(A) + P(X hits A), the law of X enumerated."""
    tuples, prob = draft_tuple_law(q, n, sampler=sampler)
    V = p.size
    masks = (np.arange(1 << V)[:, None] >> np.arange(V)) & 1 == 1  # [2^V, V]
    hit = masks[:, tuples].any(axis=2)  # [2^V, M]: does tuple m hit set A?
    return float((1.0 - masks.astype(float) @ p + hit.astype(float) @ prob).min())


def all_values(p, q, n, sampler):
    """α* from chain, subsets and the enumeration oracle."""
    return (optimal_acceptance(p, q, n, sampler=sampler),
            optimal_acceptance(p, q, n, sampler=sampler, solver="subsets"),
            enumerated_alpha(p, q, n, sampler))


def check_against_oracles(p, q, n, sampler, *, lp=False):
    chain, subsets, brute = all_values(p, q, n, sampler)
    assert 0.0 <= chain <= 1.0
    assert chain == pytest.approx(brute, abs=1e-12), (p, q, n, sampler)
    assert subsets == pytest.approx(brute, abs=1e-12), (p, q, n, sampler)
    if lp:
        for solver in ("primal-lp", "dual-lp"):
            assert optimal_acceptance(p, q, n, sampler=sampler, solver=solver) == pytest.approx(brute, abs=1e-6)
    return chain


def extreme_vectors(V):
    """Probability vectors whose entries span the whole float64 range, zeros and denormals included."""
    entry = st.one_of(
        st.just(0.0),
        st.tuples(st.floats(0.05, 1.0), st.sampled_from(EXPONENTS)).map(lambda m: m[0] * 10.0 ** -m[1]),
        st.sampled_from([5e-324, 1e-323, 2.2250738585072014e-308, 1e-300]),
    )
    return st.lists(entry, min_size=V, max_size=V).filter(lambda x: sum(x) > 0).map(
        lambda x: np.array(x) / np.sum(x))


extreme_pairs = st.integers(1, 5).flatmap(lambda V: st.tuples(extreme_vectors(V), extreme_vectors(V)))


# --- V = 1, V = 2; n = 1, n = V, n > V ----------------------------------------------------

@pytest.mark.parametrize("sampler,n", SAMPLER_NS)
def test_one_and_two_token_vocabularies(sampler, n):
    assert optimal_acceptance([1.0], [1.0], n, sampler=sampler) == 1.0  # V = 1: the only token is drafted
    rng = np.random.default_rng(n)
    for p, q in [([0.3, 0.7], [0.9, 0.1]), ([1.0, 0.0], [0.0, 1.0]), ([0.5, 0.5], [1.0, 0.0]),
                 ([0.0, 1.0], [0.25, 0.75])] + [tuple(rng.dirichlet([0.5, 0.5], 2)) for _ in range(6)]:
        check_against_oracles(np.array(p), np.array(q), n, sampler, lp=True)


@pytest.mark.parametrize("sampler", ["wor", "greedy", "hub"])
def test_when_n_reaches_the_support_the_drafts_are_the_support(sampler):
    rng = np.random.default_rng(7)
    for V in (2, 3, 5):
        for _ in range(5):
            p = rng.dirichlet(np.ones(V))
            q = rng.dirichlet(np.ones(V))
            q[rng.random(V) < 0.3] = 0.0
            if q.sum() == 0:
                q[0] = 1.0
            q /= q.sum()
            support = int(np.count_nonzero(q))
            for n in ((2,) if sampler == "hub" else (support, support + 1, V, V + 3)):
                if n < support:
                    continue
                alpha = optimal_acceptance(p, q, n, sampler=sampler)
                assert alpha == pytest.approx(p[q > 0].sum(), abs=1e-12)  # every token of q is drafted
                assert sorted(set(sample_drafts(q, n, sampler=sampler, rng=0).tolist())) == np.flatnonzero(q).tolist()


def test_wor_drafts_up_to_the_quadratures_limit_match_the_hypergeometric_law_and_past_it_are_refused():
    """Found by review: the wor quadrature lost digits past ~130 drafts below the support (3e-11 at n = 140 of
    150 tokens, a wrong 0.84 for 0.9975 at n = 399 of 400) and from n = 170 took ``(n + 1)!`` as a float
    (OverflowError). Uniform q has a closed form, ``P(X misses k tokens) = C(V - k, n) / C(V, n)``: exact to
    1e-13 up to ``MAX_WOR_DRAFTS``; past it and below the support a one-line SizeLimitError; at or above the
    support (every token drafted, n up to 500) exact again."""
    import math

    from mdsd_cli._wor_kernel import MAX_WOR_DRAFTS
    from mdsd_cli.errors import SizeLimitError
    from mdsd_cli.samplers import hit_probability_chain

    V = 400
    q = np.full(V, 1.0 / V)
    p = np.random.default_rng(3).dirichlet(np.ones(V))
    for n in (64, MAX_WOR_DRAFTS, V, 500):
        H = hit_probability_chain(q, n, np.arange(V), sampler="wor")
        exact = np.array([1.0 - math.comb(V - k, min(n, V)) / math.comb(V, min(n, V)) for k in range(V + 1)])
        np.testing.assert_allclose(H, exact, rtol=0, atol=1e-13)
        best = min(1.0 - p[np.argsort(-p)][:k].sum() + exact[k] for k in range(V + 1))  # p/q order = p order here
        assert optimal_acceptance(p, q, n, sampler="wor") == pytest.approx(best, abs=1e-12)
    for n in (MAX_WOR_DRAFTS + 1, 170, V - 1):
        for call in (lambda n=n: hit_probability_chain(q, n, np.arange(V), sampler="wor"),
                     lambda n=n: optimal_acceptance(p, q, n, sampler="wor")):
            with pytest.raises(SizeLimitError, match=f"use at most {MAX_WOR_DRAFTS} wor drafts") as info:
                call()
            assert "\n" not in str(info.value)


def test_iid_with_more_drafts_than_tokens():
    rng = np.random.default_rng(8)
    for V in (2, 3, 4):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        for n in (V, V + 1, V + 3):
            check_against_oracles(p, q, n, "iid")


# --- one-hot, p = q, disjoint supports, zeros on either side -------------------------------

@pytest.mark.parametrize("sampler,n", SAMPLER_NS)
def test_one_hot_equal_and_disjoint_pairs(sampler, n):
    rng = np.random.default_rng(11)
    V = 5
    q = rng.dirichlet(np.ones(V))
    for j in range(V):  # one-hot p at j: α* = P(j is drafted)
        p = np.eye(V)[j]
        inclusion = float(sum(pr for t, pr in zip(*draft_tuple_law(q, n, sampler=sampler)) if j in t))
        assert optimal_acceptance(p, q, n, sampler=sampler) == pytest.approx(inclusion, abs=1e-12)
        check_against_oracles(p, q, n, sampler)
        # one-hot q at j: every draft is j, α* = p(j)
        assert optimal_acceptance(q, p, n, sampler=sampler) == pytest.approx(q[j], abs=1e-15)
    assert optimal_acceptance(q, q, n, sampler=sampler) == 1.0  # p = q
    res = solve_optimal_acceptance(q, q, n, sampler=sampler)
    assert res.value == 1.0 and res.set_size == 0
    disjoint_p, disjoint_q = np.array([0.5, 0.5, 0, 0, 0]), np.array([0, 0, 0.2, 0.3, 0.5])
    assert optimal_acceptance(disjoint_p, disjoint_q, n, sampler=sampler) == 0.0
    check_against_oracles(disjoint_p, disjoint_q, n, sampler)


@pytest.mark.parametrize("sampler,n", SAMPLER_NS)
def test_zeros_in_q_where_p_is_positive_and_the_reverse(sampler, n):
    rng = np.random.default_rng(13)
    for _ in range(15):
        V = int(rng.integers(3, 7))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        q[rng.choice(V, 2, replace=False)] = 0.0  # q(i) = 0 < p(i)
        p[rng.integers(V)] = 0.0  # p(i) = 0 < q(i) (or both 0)
        if q.sum() == 0 or p.sum() == 0:
            continue
        check_against_oracles(p / p.sum(), q / q.sum(), n, sampler)


# --- entries down to 1e-300 and denormals ------------------------------------------------------

@settings(max_examples=60)
@given(extreme_pairs, st.sampled_from(SAMPLER_NS))
@pytest.mark.filterwarnings("error")  # no overflow/underflow warning either
def test_extreme_magnitudes_and_denormals_match_the_oracles(pq, sampler_n):
    p, q = pq
    sampler, n = sampler_n
    check_against_oracles(p, q, n, sampler)


def random_extreme_vector(rng, V):
    x = rng.random(V) * 10.0 ** -rng.choice(EXPONENTS, V).astype(float)
    x[rng.random(V) < 0.2] = 0.0
    if x.sum() == 0:
        x[rng.integers(V)] = 1.0
    return x / x.sum()


@pytest.mark.filterwarnings("error")
def test_extreme_magnitudes_on_many_random_pairs():
    rng = np.random.default_rng(37)
    for _ in range(250):
        V = int(rng.integers(1, 7))
        p, q = random_extreme_vector(rng, V), random_extreme_vector(rng, V)
        for sampler, n in [("iid", 2), ("wor", 2), ("wor", 3), ("greedy", 3), ("hub", 2)]:
            check_against_oracles(p, q, n, sampler)


@pytest.mark.parametrize("q,n,expected", [
    # wor drafts token 0, then one of the two denormal tokens with equal odds: p(1) + p(2) are always reached
    ([1.0, 5e-311, 5e-311], 2, 1.0),
    # the third draft is token 0 (1e-323) or 3 (2e-323) with odds 1 : 2; p(0) can be reached a third of the time
    ([1e-323, 5e-101, 1.0, 2e-323], 3, 0.5075351777731789 + 1 / 3),
])
def test_wor_clocks_near_the_float64_floor(q, n, expected):
    # These needed the hit-probability grid beyond t = 1e300 (it used to be clamped there and gave 0.5).
    p = np.array([0.2, 0.3, 0.5]) if len(q) == 3 else np.array([0.4924648222268211, 0.5075351777731789, 0, 0])
    q = np.array(q) / np.sum(q)
    assert optimal_acceptance(p, q, n, sampler="wor") == pytest.approx(expected, abs=1e-12)
    check_against_oracles(p, q, n, "wor")


def test_wor_kernel_rescaling_is_exact_and_the_numpy_fallback_agrees():
    rng = np.random.default_rng(17)
    for _ in range(60):  # P(X hits each prefix) against the enumerated draft law
        V = int(rng.integers(2, 7))
        qs = random_extreme_vector(rng, V)
        for n in (1, 2, 3):
            tuples, prob = draft_tuple_law(qs, n, sampler="wor")
            exact = [prob[(tuples < k).any(axis=1)].sum() for k in range(V + 1)]
            np.testing.assert_allclose(wor_hit_chain(qs, n), exact, rtol=0, atol=1e-12)
            np.testing.assert_allclose(wor_hit_chain_numpy(qs, n), exact, rtol=0, atol=1e-12)
    for _ in range(20):
        V = int(rng.integers(2, 300))
        qs = rng.random(V) * 10.0 ** -rng.choice(EXPONENTS, V).astype(float)
        qs[rng.random(V) < 0.1] = 0.0
        qs[0] = max(qs[0], 1e-320)
        qs /= qs.sum()
        for n in (1, 2, 4):
            fast = wor_hit_chain(qs, n)
            assert np.isfinite(fast).all() and (np.diff(fast) >= -1e-12).all()  # P(hit A_k) grows with k
            np.testing.assert_allclose(wor_hit_chain_numpy(qs, n), fast, rtol=0, atol=1e-12)
            # P(X hits A) depends on rate x time only: scaling q by a power of two changes nothing
            np.testing.assert_allclose(wor_hit_chain(np.ldexp(qs, -200), n), fast, rtol=0, atol=1e-12)


# --- ties ------------------------------------------------------------------------------------

def test_ties_in_ratios_give_one_documented_minimising_set():
    # p/q ties are broken by token index (lowest first), on every code path, so the
    # reported set is a function of the input alone.
    rng = np.random.default_rng(19)
    for _ in range(30):
        V = int(rng.integers(2, 7))
        levels = np.array([1.0, 2.0, 3.0])
        p = levels[rng.integers(0, 3, V)]
        q = levels[rng.integers(0, 3, V)]
        p, q = p / p.sum(), q / q.sum()
        for sampler, n in [("iid", 2), ("wor", 2), ("iid", 3), ("greedy", 2)]:
            check_against_oracles(p, q, n, sampler)
            a = solve_optimal_acceptance(p, q, n, sampler=sampler)
            b = solve_optimal_acceptance(p, q, n, sampler=sampler)
            assert a.token_set.tolist() == b.token_set.tolist()
    order = ratio_order(np.array([0.25, 0.25, 0.25, 0.25]), np.array([0.25, 0.25, 0.25, 0.25]))
    assert order.tolist() == [0, 1, 2, 3]


def test_tie_break_is_the_same_on_the_packed_sort_path():
    # From V = 4,096 the iid chain orders tokens by a packed value sort; ties must still go to the lower index.
    rng = np.random.default_rng(23)
    V = 5000
    p = rng.integers(1, 4, V).astype(float)
    q = rng.integers(1, 4, V).astype(float)
    p, q = p / p.sum(), q / q.sum()
    batched = solve_optimal_acceptance(np.stack([p, p]), np.stack([q, q]), 2, sampler="iid")
    single = solve_optimal_acceptance(p, q, 2, sampler="iid")
    reference = ratio_order(p, q)[: single.set_size]
    assert single.token_set.tolist() == sorted(reference.tolist())
    assert [r.token_set.tolist() for r in batched] == [single.token_set.tolist()] * 2
    assert single.value == pytest.approx(optimal_acceptance(p, q, 2, sampler="iid"), abs=1e-10)


def test_ties_in_q_pick_the_lowest_indices_for_greedy_and_hub():
    q = np.full(5, 0.2)
    p = np.array([0.1, 0.1, 0.1, 0.1, 0.6])
    assert sample_drafts(q, 3, sampler="greedy", rng=0)[:2].tolist() == [0, 1]  # top set {0, 1}
    # closed form with T = {0, 1}: 1 - sum over the rest of (p - q / (1 - q(T)))_+
    assert optimal_acceptance(p, q, 3, sampler="greedy") == pytest.approx(1 - (0.6 - 0.2 / 0.6), abs=1e-15)
    assert {int(t[1]) for t in (sample_drafts(q, 2, sampler="hub", rng=s) for s in range(20)) if t[0] != 0} == {0}
    check_against_oracles(p, q, 3, "greedy")
    check_against_oracles(p, q, 2, "hub")


# --- float16 and float32 inputs ----------------------------------------------------------------

def test_float16_and_float32_inputs_are_computed_exactly_in_float64():
    rng = np.random.default_rng(29)
    for dtype in (np.float16, np.float32):
        for _ in range(10):
            V = int(rng.integers(2, 6))
            p = rng.dirichlet(np.ones(V)).astype(dtype)
            q = rng.dirichlet(np.ones(V)).astype(dtype)
            p64 = p.astype(np.float64) / p.astype(np.float64).sum()
            q64 = q.astype(np.float64) / q.astype(np.float64).sum()
            for sampler in ("iid", "wor", "greedy"):
                got = optimal_acceptance(p, q, 2, sampler=sampler, renormalize=True)
                assert got == optimal_acceptance(p64, q64, 2, sampler=sampler)
                assert got == pytest.approx(enumerated_alpha(p64, q64, 2, sampler), abs=1e-12)


def test_float16_rounding_is_tolerated_but_a_float16_row_summing_to_0_995_is_refused_with_the_way_out():
    p = np.full(7, 1 / 7, dtype=np.float16)  # sums to 0.99976 in float16: its own rounding error
    P, _, _ = check_pair(p, p)
    assert P.sum() == pytest.approx(1.0, abs=1e-15)
    low = (np.full(7, 1 / 7) * 0.995).astype(np.float16)
    with pytest.raises(InputError, match=r"sums to 0\.99.*float16 values carry only ~3 significant digits.*"
                                         r"renormalize=True"):
        check_pair(low, p)
    P, _, _ = check_pair(low, p, renormalize=True)
    assert P.sum() == pytest.approx(1.0, abs=1e-15)


# --- logits of large magnitude, temperatures from 0.01 to 100 ------------------------------------

@pytest.mark.parametrize("scale", [1.0, 1e10, 1e100, 1e300])
@pytest.mark.parametrize("temperature", [0.01, 0.05, 1.0, 100.0])
def test_huge_logits_and_temperatures(scale, temperature):
    # softmax(s l / T) = softmax(l / (T / s)): the scaled logits must give the probabilities of the small ones
    rng = np.random.default_rng(31)
    base = rng.uniform(-5, 5, (3, 6))
    base[:, 0] = 5.0  # a clear maximum
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        big = softmax(scale * base, temperature)
    assert np.isfinite(big).all() and np.allclose(big.sum(axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(big, softmax(base, temperature / scale), rtol=1e-9, atol=1e-300)
    q = softmax(scale * base[::-1], temperature)
    for i in range(3):
        for sampler, n in [("iid", 2), ("wor", 3), ("greedy", 2)]:
            check_against_oracles(big[i], q[i], n, sampler)


def test_logits_at_the_float64_limits():
    top = np.finfo(np.float64).max
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hot = softmax([top, -top], 1e308)  # (l - max) overflows, (l - max) / T does not
        cold = softmax([top, -top, 0.0, -np.inf], 0.01)
    e = np.exp(-2 * (top / 1e308))
    np.testing.assert_allclose(hot, [1 / (1 + e), e / (1 + e)], rtol=1e-12)
    assert cold.tolist() == [1.0, 0.0, 0.0, 0.0]


# --- every α* in [0, 1], every verifier at most α*, no NaN anywhere -------------------------------------

@settings(max_examples=40)
@given(extreme_pairs.filter(lambda pq: pq[0].size >= 2), st.integers(1, 3))
def test_every_verifier_stays_lossless_and_below_alpha_star(pq, n):
    p, q = pq
    for name, cls in VERIFIERS.items():
        if cls.fixed_n is not None and n != cls.fixed_n:
            continue
        v = cls(p, q, n, None)
        alpha = optimal_acceptance(p, q, n, sampler=v.sampler)
        rate = exact_rate(v)
        assert np.isfinite(rate) and -1e-15 <= rate <= alpha + 1e-12, (name, rate, alpha)
        law = output_distribution(v)
        assert np.abs(law - p).max() <= 1e-10, name  # lossless, exactly
        mean, se = monte_carlo_rate(v, 64, np.random.default_rng(0))
        assert np.isfinite(mean) and np.isfinite(se) and 0.0 <= mean <= 1.0


def test_no_acceptance_above_one_when_the_target_adds_up_to_one_plus_an_ulp():
    """Found by the hypothesis test above: ``p = (1, 0.005) / 1.005`` adds up to 1 + an ulp in floats, and
    ``topk`` accepted the drafted pair with that probability; a drafted mass is at most 1."""
    from mdsd_cli.verifiers.estimation import monte_carlo_rate

    p, q = np.array([1.0, 0.005]) / 1.005, np.array([0.5, 0.5])
    assert p[0] + p[1] > 1.0
    for name, cls in VERIFIERS.items():
        if cls.fixed_n is not None and cls.fixed_n != 2:
            continue
        v = cls(p, q, 2, None)
        mean, _ = monte_carlo_rate(v, 64, np.random.default_rng(0))
        assert 0.0 <= mean <= 1.0, name


@pytest.mark.filterwarnings("error")
def test_no_verifier_warns_at_the_float64_floor():
    rng = np.random.default_rng(41)
    for _ in range(40):
        V = int(rng.integers(2, 6))
        p, q = random_extreme_vector(rng, V), random_extreme_vector(rng, V)
        for name in VERIFIERS:
            cls = VERIFIERS[name]
            for n in (2,) if cls.fixed_n else (1, 2, 3):
                v = cls(p, q, n)
                assert np.isfinite(exact_rate(v)) and np.isfinite(output_distribution(v)).all()
                assert np.isfinite(monte_carlo_rate(v, 32, np.random.default_rng(0))).all()


def test_verifiers_at_the_float64_floor():
    # rrsw's constants C_k grow like 1 / (undrafted mass): 1e310 here, computed in extended precision.
    p = np.array([2.26559378e-302, 1.11482371e-200, 1.25119734e-005, 0.0, 9.99987488e-001])
    q = np.array([0.0, 1.0, 5.53524203e-311, 7.80641725e-311, 5.18768928e-322])
    p, q = p / p.sum(), q / q.sum()
    for n in (2, 3):
        v = VERIFIERS["rrsw"](p, q, n)
        alpha = optimal_acceptance(p, q, n, sampler="wor")
        assert exact_rate(v) <= alpha + 1e-12
        assert np.abs(output_distribution(v) - p).max() <= 1e-12
    # otm: a draft set whose probability underflows to 0 is not in the LP; it still has an output law
    otm = VERIFIERS["otm"](np.array([6.34783e-318, 1.0]), np.array([1.0, 1.6464581e-309]), 2)
    assert np.abs(output_distribution(otm) - otm.p).max() <= 1e-12
    assert exact_rate(otm) <= optimal_acceptance(otm.p, otm.q, 2) + 1e-12


def test_no_nan_reaches_a_table_on_the_hardest_pairs(tmp_path):
    top = np.finfo(np.float64).max
    target = np.array([[1, 0, 0, 0], [0.25] * 4, [0.5, 0.5, 0, 0], [1 - 3e-300, 1e-300, 1e-300, 1e-300],
                       [0.2, 0.3, 0.5, 0.0], [0.4, 0.6, 0, 0]])
    draft = np.array([[0.25] * 4, [0.25] * 4, [0, 0, 0.5, 0.5], [1e-323, 1.0, 5e-324, 0.0],
                      [1.0, 5e-311, 5e-311, 0.0], [1.0, 0, 0, 0]])
    path = tmp_path / "hard.npz"
    np.savez(path, target=target, draft=draft)
    logits = tmp_path / "logits.npz"
    np.savez(logits, target_logits=np.array([[top, -top, 0, 1e300]]), draft_logits=np.array([[0, -np.inf, 5, -top]]))
    for data, temps in ((path, ["1"]), (logits, ["0", "0.01", "1", "100"])):
        t_args = [a for t in temps for a in ("-t", t)]
        bound = runner.invoke(app, ["bound", "--data", str(data), "-s", "all", "-n", "1", "-n", "2", "-n", "3",
                                    *t_args, "--no-timing", "-q"])
        assert bound.exit_code == 0, bound.stderr
        # no warnings either, but the two that name what was asked and not done: hub at n != 2, n above the support
        assert all(re.match(r"Warning: (skipping sampler hub at n=1, 3|n = \d exceeds the )", line)
                   for line in bound.stderr.splitlines()), bound.stderr
        df = pd.read_csv(io.StringIO(bound.stdout))
        assert not df.isna().any().any() and df.alpha_star.between(0, 1).all()
        verify = runner.invoke(app, ["verify", "--data", str(data), "-n", "1", "-n", "2", "-n", "3", *t_args,
                                     "--method", "exact", "--no-timing", "-q"])
        assert verify.exit_code == 0, verify.stderr
        rates = pd.read_csv(io.StringIO(verify.stdout))
        assert not rates.isna().any().any()
        assert (rates.acceptance <= rates.alpha_star + 1e-12).all() and (rates.gap >= -1e-12).all()
