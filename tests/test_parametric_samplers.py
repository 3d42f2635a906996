"""Parametric draft samplers (temperature, top-k, top-p, hybrid): exact laws, the chain against
brute force and the LP, sampling frequencies, and lossless verifiers on them."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mdsd_cli import (
    draft_tuple_law,
    hit_probability,
    optimal_acceptance,
    sample_drafts,
    solve_optimal_acceptance,
)
from mdsd_cli.errors import InputError
from mdsd_cli.samplers import get_sampler, truncate_top_k, truncate_top_p
from mdsd_cli.verifiers import exact_rate, prepare_verifier

from .conftest import random_pair

#: One spec maker per family: (n, rng) -> spec. Parameters are drawn per case.
FAMILIES = {
    "temperature": lambda n, rng: f"{['iid', 'wor', 'greedy'][int(rng.integers(3))]}:temperature="
                                  f"{float(rng.choice([0.3, 0.6, 0.85, 1.4, 2.5]))}",
    "top-k": lambda n, rng: f"{['iid', 'wor'][int(rng.integers(2))]}:top_k={int(rng.integers(1, 6))}",
    "top-p": lambda n, rng: f"{['iid', 'wor'][int(rng.integers(2))]}:top_p={float(rng.choice([0.5, 0.8, 0.95]))}",
    "hybrid": lambda n, rng: f"hybrid:m={int(rng.integers(0, n))}"
                             + (",temperature=0.7" if rng.random() < 0.3 else ""),
}


def brute_force_alpha_star(p, q, n, spec):
    """min over all token sets A of 1 - p(A) + P(X hits A), P from the enumerated tuple law of ``spec``."""
    tuples, prob = draft_tuple_law(q, n, sampler=spec)
    V = len(p)
    best = 1.0
    for r in range(1, V + 1):
        for A in itertools.combinations(range(V), r):
            hits = np.isin(tuples, A).any(axis=1)
            best = min(best, 1.0 - p[list(A)].sum() + prob[hits].sum())
    return best


@pytest.mark.parametrize("family", list(FAMILIES))
def test_chain_equals_subsets_and_brute_force_on_hundreds_of_cases(family):
    rng = np.random.default_rng(16 + list(FAMILIES).index(family))
    for trial in range(250):
        V = int(rng.integers(2, 8))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, 5))
        spec = FAMILIES[family](n, rng)
        chain = optimal_acceptance(p, q, n, sampler=spec)
        subsets = optimal_acceptance(p, q, n, sampler=spec, solver="subsets")
        assert chain == pytest.approx(subsets, abs=1e-12), (spec, p, q, n)
        if trial % 5 == 0 and V <= 6:  # the tuple law enumerated, every set scored: independent of both
            assert chain == pytest.approx(brute_force_alpha_star(p, q, n, spec), abs=1e-12), (spec, p, q, n)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_chain_equals_primal_lp(family):
    rng = np.random.default_rng(160 + list(FAMILIES).index(family))
    for _ in range(60):
        V = int(rng.integers(2, 7))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, 4))
        spec = FAMILIES[family](n, rng)
        lp = solve_optimal_acceptance(p, q, n, sampler=spec, solver="primal-lp")
        assert optimal_acceptance(p, q, n, sampler=spec) == pytest.approx(lp.value, abs=1e-8), (spec, p, q, n)
        assert lp.sampler == get_sampler(spec).name


def test_transforms_by_hand():
    q = np.array([0.1, 0.4, 0.2, 0.2, 0.1])
    # top_k = 2: tokens 1 and then 2 (tied with 3; the lower index wins)
    assert truncate_top_k(q, 2).tolist() == pytest.approx([0, 0.4 / 0.6, 0.2 / 0.6, 0, 0])
    # top_p = 0.6: 0.4 is below 0.6, 0.4 + 0.2 reaches it: tokens 1 and 2; top_p = 0.61 adds token 3
    assert truncate_top_p(q, 0.6).tolist() == pytest.approx([0, 0.4 / 0.6, 0.2 / 0.6, 0, 0])
    assert truncate_top_p(q, 0.61).tolist() == pytest.approx([0, 0.5, 0.25, 0.25, 0])
    tempered = q ** 2 / (q ** 2).sum()
    law = get_sampler("wor:temperature=0.5").draft_distribution(q)
    assert law == pytest.approx(tempered, abs=1e-15)
    # composition order: temperature, then top-k, then top-p
    both = get_sampler("iid:temperature=0.5,top_k=3,top_p=0.5").draft_distribution(q)
    kept = truncate_top_p(truncate_top_k(tempered, 3), 0.5)
    assert both == pytest.approx(kept, abs=1e-15)
    # batches transform row by row
    Q = np.stack([q, q[::-1]])
    assert get_sampler("iid:top_k=2").draft_distribution(Q)[1] == pytest.approx(truncate_top_k(q[::-1], 2))


def test_tempered_wor_law_by_hand():
    q = np.array([0.5, 0.3, 0.2])
    r = q ** (1 / 0.7)
    r /= r.sum()
    tuples, prob = draft_tuple_law(q, 2, sampler="wor:temperature=0.7")
    law = dict(zip(map(tuple, tuples.tolist()), prob))
    for i, j in itertools.permutations(range(3), 2):
        assert law[(i, j)] == pytest.approx(r[i] * r[j] / (1 - r[i]), abs=1e-15)


def test_hybrid_law_by_hand_and_its_end_points():
    q = np.array([0.1, 0.4, 0.2, 0.3])
    tuples, prob = draft_tuple_law(q, 3, sampler="hybrid:m=1")
    assert (tuples[:, 0] == 1).all()  # the top token is always drafted first
    rest = np.array([0.1, 0, 0.2, 0.3]) / 0.6
    law = dict(zip(map(tuple, tuples[:, 1:].tolist()), prob))
    for i, j in itertools.permutations([0, 2, 3], 2):
        assert law[(i, j)] == pytest.approx(rest[i] * rest[j] / (1 - rest[i]), abs=1e-15)
    # hit probability: 1 when A holds the top token, else the wor hit of the rest with 2 draws
    assert hit_probability(q, 3, [1], sampler="hybrid:m=1") == 1.0
    assert hit_probability(q, 3, [0], sampler="hybrid:m=1") == pytest.approx(
        hit_probability(rest, 2, [0], sampler="wor"), abs=1e-12)
    rng = np.random.default_rng(3)
    for _ in range(40):
        V = int(rng.integers(2, 9))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, 5))
        wor, greedy = optimal_acceptance(p, q, n, sampler="wor"), optimal_acceptance(p, q, n, sampler="greedy")
        assert optimal_acceptance(p, q, n, sampler="hybrid:m=0") == pytest.approx(wor, abs=1e-12)
        assert optimal_acceptance(p, q, n, sampler=f"hybrid:m={n - 1}") == pytest.approx(greedy, abs=1e-12)


def test_hybrid_needs_its_top_set_last_in_the_chain():
    # n = 3, m = 1, q uniform: token 0 is the top token (lowest index among ties) and has the
    # largest ratio, so every plain ratio prefix hits it and scores >= 0; the truth is A = {1}:
    # 1 - 0.35 + P(two draws without replacement from the other 7 tokens hit token 1) = 0.65 + 2/7
    p, q = np.array([0.35, 0.35] + [0.05] * 6), np.full(8, 0.125)
    s = get_sampler("hybrid:m=1")
    plain = s.hit_probability_chain(q, 3, np.arange(8)) - np.concatenate(([0.0], np.cumsum(p)))
    assert 1.0 + plain.min() == pytest.approx(1.0)
    truth = brute_force_alpha_star(p, q, 3, "hybrid:m=1")
    assert truth == pytest.approx(0.65 + 2 / 7, abs=1e-12)
    assert optimal_acceptance(p, q, 3, sampler="hybrid:m=1") == pytest.approx(truth, abs=1e-12)


SPECS = ["iid:temperature=0.6", "wor:temperature=1.7", "iid:top_k=3", "wor:top_p=0.7", "greedy:temperature=0.5",
         "hybrid:m=1", "hybrid:m=2,top_k=4"]


@pytest.mark.parametrize("spec", SPECS)
def test_sampled_tuples_follow_the_exact_law(spec):
    rng = np.random.default_rng(SPECS.index(spec))
    q = rng.dirichlet(np.ones(6))
    n = 3
    tuples, prob = draft_tuple_law(q, n, sampler=spec)
    draws = sample_drafts(q, n, sampler=spec, rng=rng, size=40_000)
    index = {t: i for i, t in enumerate(map(tuple, tuples.tolist()))}
    counts = np.zeros(len(index))
    for row in map(tuple, draws.tolist()):
        counts[index[row]] += 1  # a KeyError here is a tuple the exact law says is impossible
    expected = prob * draws.shape[0]
    keep = expected >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    wanted = np.append(expected[keep], expected[~keep].sum())
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    assert stats.chisquare(observed, wanted).pvalue > 1e-4, spec


#: Every verifier that accepts each spec (by its base law).
ACCEPTING = {
    "iid:temperature=0.6": ["nss", "rrs", "kseq", "otm", "optimal-iid"],
    "iid:top_p=0.8": ["rrs", "kseq", "optimal-iid"],
    "wor:temperature=1.7": ["nss", "rrsw", "otm", "optimal-wor"],
    "wor:top_k=3": ["rrsw", "optimal-wor"],
    "greedy:temperature=0.5": ["greedy", "otm"],
    "hub:top_k=4": ["hub"],
    "hybrid:m=1": ["nss", "otm"],
    "hybrid:m=1,temperature=1.5": ["otm"],
}


@pytest.mark.parametrize("spec", list(ACCEPTING))
def test_verifiers_are_exactly_lossless_on_the_law_the_drafts_come_from(spec):
    rng = np.random.default_rng(list(ACCEPTING).index(spec))
    law_sampler = get_sampler(spec)
    for trial in range(12):
        V = int(rng.integers(2, 7))
        p, q = random_pair(rng, V)
        n = 2 if law_sampler.kind == "hub" else (2 + trial % 2 if law_sampler.kind == "hybrid" else 1 + trial % 3)
        # the tuple law of the spec applied to the raw q: independent of the verifier's own q'
        tuples, prob = draft_tuple_law(q, n, sampler=spec)
        alpha = optimal_acceptance(p, q, n, sampler=spec)
        for name in ACCEPTING[spec]:
            tol = 1e-6 if name == "otm" else 1e-12
            v = prepare_verifier(name, p, q, n, sampler=spec)
            assert v.sampler == law_sampler.name
            law = prob @ v.output_laws(tuples)
            assert np.abs(law - p).max() <= tol, (name, spec, p, q, n)
            rate = float(prob @ v.acceptance(tuples))
            assert rate <= alpha + tol
            if name in ("otm", "optimal-iid", "optimal-wor") or (name == "greedy" and law_sampler.kind == "greedy"):
                assert rate == pytest.approx(alpha, abs=tol), (name, spec)
            assert exact_rate(v) == pytest.approx(rate, abs=tol)


def test_a_verifier_on_the_untransformed_q_is_not_lossless_for_tempered_drafts():
    # the reason verifiers take the spec: rrs told "iid" while drafts come from q^(1/0.5)
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    tuples, prob = draft_tuple_law(q, 2, sampler="iid:temperature=0.5")
    wrong = prob @ prepare_verifier("rrs", p, q, 2, sampler="iid").output_laws(tuples)
    right = prob @ prepare_verifier("rrs", p, q, 2, sampler="iid:temperature=0.5").output_laws(tuples)
    assert np.abs(wrong - p).max() > 1e-3
    assert np.abs(right - p).max() < 1e-12


@pytest.mark.parametrize("spec, message", [
    ("wor:temperature=-1", "temperature must be > 0"),
    ("wor:temperature=nan", "temperature must be > 0"),
    ("iid:top_k=0", "top_k must be an integer >= 1"),
    ("iid:top_k=2.5", "top_k must be an integer >= 1"),
    ("wor:top_p=1.5", r"top_p must be in \(0, 1\]"),
    ("wor:colour=1", "unknown key 'colour'.*valid keys for wor: temperature"),
    ("beam:top_k=3", "unknown draft sampler 'beam'"),
    ("hybrid", "needs m"),
    ("iid:m=1", "unknown key 'm'"),
    ("wor:temperature=0.5,temperature=0.6", "appears twice"),
    ("wor:temperature", "is not key=value"),
])
def test_bad_specs_name_the_valid_range(spec, message):
    with pytest.raises(InputError, match=message):
        get_sampler(spec)


def test_hybrid_m_is_checked_against_n():
    with pytest.raises(InputError, match=r"hybrid:m=9 needs m in 0..3 for n = 4"):
        optimal_acceptance([0.5, 0.5], [0.5, 0.5], 4, sampler="hybrid:m=9")


def test_identity_parameters_are_the_plain_sampler():
    for spec, plain in [("wor:temperature=1", "wor"), ("iid:top_p=1", "iid"), ("greedy:temperature=1.0", "greedy")]:
        assert get_sampler(spec) is get_sampler(plain)
    assert get_sampler("wor:top_p=0.95,temperature=0.8").name == "wor:temperature=0.8,top_p=0.95"
    rng = np.random.default_rng(0)
    p, q = random_pair(rng, 50, zeros=False)
    for n in (2, 4):  # k >= V leaves q as it is
        assert optimal_acceptance(p, q, n, sampler="wor:top_k=50") == optimal_acceptance(p, q, n, sampler="wor")
    assert math.isclose(optimal_acceptance(p, q, 3, sampler="iid:temperature=1.0000001"),
                        optimal_acceptance(p, q, 3, sampler="iid"), abs_tol=1e-5)
