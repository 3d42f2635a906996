"""Verifiers: exact losslessness, exact rates against references and α*, Monte Carlo, sampling."""

import re

import numpy as np
import pytest

from mdsd_cli import acceptance_rate, optimal_acceptance, output_law, verifier_names, verify
from mdsd_cli.errors import InputError, SizeLimitError
from mdsd_cli.verifiers import (
    VERIFIERS,
    enumerated_rate,
    exact_rate,
    monte_carlo_rate,
    output_distribution,
    prepare_verifier,
    sampled_output_test,
)
from mdsd_cli.verifiers.base import PreparedVerifier, drafted_mass
from mdsd_cli.verifiers.residual import ResidualFamily

from .conftest import random_pair, reference_cases

ALL = ["nss", "rrs", "rrsw", "kseq", "hub", "greedy", "otm", "optimal-iid", "optimal-wor", "topk"]


def ns_for(name):
    return (2,) if name == "hub" else (1, 2, 3)


def test_registry():
    assert verifier_names() == ALL
    defaults = {name: VERIFIERS[name].default_sampler for name in ALL}
    assert defaults == {"nss": "iid", "rrs": "iid", "rrsw": "wor", "kseq": "iid", "hub": "hub",
                        "greedy": "greedy", "otm": "iid", "optimal-iid": "iid", "optimal-wor": "wor", "topk": "topk"}


@pytest.mark.parametrize("case", reference_cases(), ids=lambda c: c["name"])
def test_reference_rates(case):
    for name, by_n in case["rate"].items():
        for n, expected in by_n.items():
            got = acceptance_rate(name, case["target"], case["draft"], int(n))
            assert got == pytest.approx(expected, abs=1e-9), (name, n)


@pytest.mark.parametrize("name", ALL)
def test_exactly_lossless_on_hundreds_of_random_cases(name):
    rng = np.random.default_rng(ALL.index(name))
    tol = 1e-6 if name == "otm" else 1e-12
    cases = 200
    for trial in range(cases):
        V = int(rng.integers(1, 7))
        p, q = random_pair(rng, V)
        ns = ns_for(name)
        n = ns[trial % len(ns)]
        v = prepare_verifier(name, p, q, n)
        law = output_distribution(v)
        assert np.abs(law - p).max() <= tol, (name, p, q, n, law)
        # the closed form (where there is one) equals exact enumeration
        closed = v.exact_rate()
        if closed is not None:
            assert closed == pytest.approx(enumerated_rate(v), abs=tol), (name, p, q, n)
        # no verifier beats the bound of its draft law
        assert exact_rate(v) <= optimal_acceptance(p, q, n, sampler=v.sampler) + max(tol, 1e-12)


def test_optimal_verifiers_reach_alpha_star():
    rng = np.random.default_rng(8)
    for trial in range(60):
        V = int(rng.integers(2, 7))
        p, q = random_pair(rng, V)
        n = 1 + trial % 3
        assert acceptance_rate("greedy", p, q, n) == pytest.approx(
            optimal_acceptance(p, q, n, sampler="greedy"), abs=1e-12)
        assert acceptance_rate("hub", p, q, 2) == pytest.approx(
            optimal_acceptance(p, q, 2, sampler="greedy"), abs=1e-12)
        for sampler in ("iid", "wor", "greedy"):
            assert acceptance_rate("otm", p, q, n, sampler=sampler) == pytest.approx(
                optimal_acceptance(p, q, n, sampler=sampler), abs=1e-6)


def test_existing_verifiers_fall_short_of_the_bound_somewhere():
    p, q = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])
    for name, sampler in (("rrs", "iid"), ("kseq", "iid"), ("rrsw", "wor")):
        assert acceptance_rate(name, p, q, 3) < optimal_acceptance(p, q, 3, sampler=sampler) - 0.01


@pytest.mark.parametrize("name", ALL)
def test_monte_carlo_agrees_with_exact_within_five_standard_errors(name):
    rng = np.random.default_rng(21)
    p, q = random_pair(rng, 7, zeros=False)
    n = 2 if name in ("hub", "otm") else 3
    v = prepare_verifier(name, p, q, n)
    mean, se = monte_carlo_rate(v, 40_000, np.random.default_rng(5))
    assert se > 0 or name in ("greedy", "topk")  # one draft tuple, or rates exact per tuple
    assert abs(mean - exact_rate(v)) <= 5 * se + 1e-12, (name, mean, se, exact_rate(v))


def test_acceptance_is_the_output_law_mass_on_the_drafts_at_larger_vocabulary():
    # the O(n log V) acceptance paths agree with the dense output laws
    rng = np.random.default_rng(4)
    logits = rng.normal(0, 2, 300)
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp(logits + rng.normal(0, 1, 300))
    q /= q.sum()
    for name, n in (("rrs", 4), ("rrsw", 4), ("kseq", 4), ("greedy", 4), ("hub", 2), ("nss", 3)):
        v = prepare_verifier(name, p, q, n)
        drafts = v.draft_sampler.sample(q, n, rng, 50)
        laws = v.output_laws(drafts)
        np.testing.assert_allclose(laws.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(v.acceptance(drafts), drafted_mass(laws, drafts), atol=1e-12)


def test_rrsw_undrafted_mass_survives_concentrated_drafts():
    # after drafting token 0, only 1e-12 of draft mass is left: no cancellation allowed
    q = np.array([1 - 3e-12, 1e-12, 1e-12, 1e-12])
    p = np.array([0.25, 0.25, 0.25, 0.25])
    v = prepare_verifier("rrsw", p, q, 3)
    assert np.abs(output_distribution(v) - p).max() < 1e-12
    s = v._undrafted(np.array([[0, 1, 2]]))
    np.testing.assert_allclose(s[0], [1.0, 3e-12, 2e-12], rtol=1e-9)


def test_residual_family_sampling_matches_its_law():
    from scipy import stats

    rng = np.random.default_rng(0)
    p, q = random_pair(rng, 12, zeros=False)
    fam = ResidualFamily(p, q)
    for C in (0.0, 0.7, 1.5):
        law = fam.law(C)
        assert fam.G(C) == pytest.approx(np.maximum(p - C * q, 0).sum(), abs=1e-15)
        draws = fam.sample(np.full(60_000, C), rng)
        counts = np.bincount(draws, minlength=12)
        assert counts[law == 0].sum() == 0
        keep = law > 0
        assert stats.chisquare(counts[keep], law[keep] * draws.size).pvalue > 1e-4
    # many distinct C in one batch (a Monte Carlo check of rrsw) take the ratio-order search: the mixture's law
    Cs = rng.uniform(0.0, 1.5, size=200)
    mixture = np.mean([fam.law(c) for c in Cs], axis=0)
    draws = fam.sample(np.repeat(Cs, 300), rng)
    counts = np.bincount(draws, minlength=12)
    assert counts[mixture == 0].sum() == 0
    keep = mixture > 0
    assert stats.chisquare(counts[keep], mixture[keep] * draws.size).pvalue > 1e-4



def test_residual_draws_do_not_move_when_tied_ratios_come_out_an_ulp_apart():
    """The same uniforms give the same tokens when p is off by an ulp (another processor's exp/log).

    Smoothed n-gram laws have many tokens with the same ratio p/q; an AVX2 and an AVX-512 ``exp`` round
    them an ulp apart in either direction. A draw along the ratio order followed those ulps (a committed
    generation run did not reproduce on another machine); along the token ids it does not."""
    rng = np.random.default_rng(5)
    V = 400
    q = rng.dirichlet(np.ones(V))
    p = q * np.where(np.arange(V) % 3 == 0, 2.0, 0.5)  # two ratios, 133 and 267 tokens tied
    p /= p.sum()
    nudged = p.copy()
    flip = rng.random(V) < 0.5
    nudged[flip] = np.nextafter(nudged[flip], np.where(rng.random(flip.sum()) < 0.5, 0.0, 1.0))
    C = np.array([0.0, 0.3, 0.9, 1.2, 1.9] * 400)
    first = ResidualFamily(p, q).sample(C, np.random.default_rng(11))
    second = ResidualFamily(nudged, q).sample(C, np.random.default_rng(11))
    assert (first == second).all()

@pytest.mark.parametrize("name", ALL)
def test_sampled_outputs_pass_the_statistical_test(name):
    rng = np.random.default_rng(13)
    p, q = random_pair(rng, 6)
    v = prepare_verifier(name, p, q, 2)
    result = sampled_output_test(v, 60_000, np.random.default_rng(3))
    assert result.impossible == 0 and result.pvalue > 1e-4, result


class RRSWithoutResidualUpdate(PreparedVerifier):
    """A deliberately wrong verifier: RRS that keeps p as the target after a rejection."""

    name = "broken-rrs"
    default_sampler = "iid"
    samplers = ("iid",)

    def output_law(self, drafts):
        out = np.zeros(self.V)
        reach = 1.0
        for x in drafts:
            a = min(1.0, self.p[x] / self.q[x])
            out[x] += reach * a
            reach *= 1.0 - a
        residual = np.maximum(self.p - self.q, 0.0)
        return out + reach * residual / residual.sum()


def test_a_wrong_verifier_is_caught_exactly_and_statistically():
    p, q = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])
    v = RRSWithoutResidualUpdate(p, q, 3)
    assert np.abs(output_distribution(v) - p).max() > 1e-3
    assert sampled_output_test(v, 100_000, np.random.default_rng(0)).pvalue < 1e-6


def test_a_concentrated_target_is_still_tested():
    """p on one token up to 1e-12: pooling leaves one cell, so the mass that lands
    elsewhere gets an exact binomial test instead of a vacuous pass."""
    p = np.array([1.0 - 1e-12, 5e-13, 5e-13])
    q = np.array([0.2, 0.3, 0.5])
    good = VERIFIERS["rrs"](p, q, 2)
    result = sampled_output_test(good, 20_000, np.random.default_rng(0))
    assert result.dof == 1 and result.pvalue > 0.5

    class OffTop(RRSWithoutResidualUpdate):  # 10% of its output off the top token
        def output_law(self, drafts):
            return np.array([0.9, 0.05, 0.05])

    assert sampled_output_test(OffTop(p, q, 2), 20_000, np.random.default_rng(0)).pvalue < 1e-12


def test_verify_and_output_law_api():
    p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    tokens = [verify("rrs", p, q, [0, 1], rng=seed) for seed in range(200)]
    assert set(tokens) <= {0, 1, 2} and len(set(tokens)) > 1
    law = output_law("kseq", p, q, [0, 0])
    assert law.sum() == pytest.approx(1.0)
    assert isinstance(verify("greedy", p, q, [0, 2], rng=0), int)
    with pytest.raises(InputError, match="draft probability 0"):
        verify("rrs", [0.5, 0.5], [1.0, 0.0], [1], rng=0)
    with pytest.raises(InputError, match="unknown verifier"):
        verify("spec", p, q, [0], rng=0)
    with pytest.raises(InputError, match="n = 2 only"):
        acceptance_rate("hub", p, q, 3)
    with pytest.raises(InputError, match="lossless for"):
        acceptance_rate("rrs", p, q, 2, sampler="wor")


def test_sizes_are_refused_with_a_reason():
    rng = np.random.default_rng(1)
    p, q = random_pair(rng, 3000, zeros=False)
    with pytest.raises(SizeLimitError, match="monte-carlo"):
        acceptance_rate("rrsw", p, q, 4)
    with pytest.raises(SizeLimitError, match="LP variables"):
        acceptance_rate("otm", p, q, 3)
    mean, se = acceptance_rate("rrsw", p, q, 4, method="monte-carlo", samples=2000, rng=0)
    assert 0 < mean < 1 and se > 0
    auto = acceptance_rate("rrsw", p, q, 4, method="auto", samples=2000, rng=0)
    assert auto == (mean, se)


@pytest.mark.parametrize("name,drafts,fragment", [
    ("rrsw", [0, 0], "draft tuple (0, 0) repeats a token, which wor drafts never do"),
    ("optimal-wor", [1, 1], "repeats a token"),
    ("nss:wor", [2, 2], "repeats a token"),
    ("greedy", [1, 0], "cannot come from greedy drafts: greedy drafts begin with q's most likely token, 0"),
    ("greedy", [2, 1, 0], "begin with q's 2 most likely tokens, (0, 2), in that order"),
    ("hub", [1, 3], "the hub, token 0 (the most likely under q), is not among them"),
    ("topk", [0, 1], "cannot come from topk drafts"),
])
def test_tuples_the_draft_law_cannot_produce_are_refused(name, drafts, fragment):
    """A verifier is lossless for its law's tuples: rrsw given repeated (iid) drafts would answer, silently lossy."""
    p, q = [0.3, 0.4, 0.2, 0.1], [0.5, 0.1, 0.3, 0.1]
    verifier, _, sampler = name.partition(":")
    with pytest.raises(InputError, match=re.escape(fragment)):
        verify(verifier, p, q, drafts, rng=0, sampler=sampler or None)
    v = prepare_verifier(verifier, p, q, len(drafts), sampler=sampler or None)
    with pytest.raises(InputError, match="cannot come from|repeats a token"):
        v.verify_batch(np.array([drafts]), rng=0)
    # every tuple the law does produce is accepted
    tuples, _ = v.draft_sampler.tuple_law(v.q, v.n)
    for row in tuples:
        v.verify(row, rng=0)
    assert verify("rrs", p, q, [0, 0], rng=0) in range(4)  # iid drafts repeat: fine


def test_an_absurd_number_of_drafts_is_refused_before_any_work():
    with pytest.raises(InputError, match="number of drafts 1,000,000,000 is above the limit of 100,000"):
        acceptance_rate("rrs", [0.3, 0.4, 0.3], [0.6, 0.3, 0.1], 10**9)
    with pytest.raises(InputError, match="above the limit"):
        optimal_acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], 10**6)
