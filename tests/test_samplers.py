"""Draft samplers: exact laws by enumeration, hit probabilities, sampling frequencies."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mdsd_cli import (
    draft_set_law,
    draft_tuple_law,
    hit_probability,
    hit_probability_chain,
    sample_drafts,
)
from mdsd_cli._wor_kernel import wor_hit_chain, wor_hit_chain_numpy
from mdsd_cli.bounds.subsets import _wor_set_law, _zeta
from mdsd_cli.errors import InputError, SizeLimitError
from mdsd_cli.samplers import SAMPLERS, ratio_order, top_tokens

from .conftest import random_pair


def wor_tuple_law_by_hand(q, n):
    """Sequential draws without replacement, written out directly."""
    support = [i for i in range(len(q)) if q[i] > 0]
    k = min(n, len(support))
    law = {}
    for tup in itertools.permutations(support, k):
        prob, used = 1.0, set()
        for x in tup:
            prob *= q[x] / sum(q[i] for i in support if i not in used)
            used.add(x)
        law[tup] = prob
    return law


def test_tuple_laws_sum_to_one_and_match_hand_enumeration():
    rng = np.random.default_rng(1)
    for _ in range(40):
        V = int(rng.integers(1, 6))
        _, q = random_pair(rng, V)
        n = int(rng.integers(1, 4))
        for name in ("iid", "wor", "greedy"):
            tuples, prob = draft_tuple_law(q, n, sampler=name)
            assert prob.sum() == pytest.approx(1.0, abs=1e-12)
            assert (prob > 0).all()
        tuples, prob = draft_tuple_law(q, n, sampler="wor")
        by_hand = wor_tuple_law_by_hand(q, n)
        assert {tuple(t): pr for t, pr in zip(tuples.tolist(), prob)} == pytest.approx(by_hand, abs=1e-14)
        tuples, prob = draft_tuple_law(q, n, sampler="iid")
        expected = {t: math.prod(q[i] for i in t) for t in itertools.product(range(V), repeat=n)}
        got = {tuple(t): pr for t, pr in zip(tuples.tolist(), prob)}
        assert got == pytest.approx({t: v for t, v in expected.items() if v > 0}, abs=1e-15)


def test_set_laws_merge_tuples():
    rng = np.random.default_rng(2)
    for _ in range(30):
        V = int(rng.integers(1, 6))
        _, q = random_pair(rng, V)
        for name, n in (("iid", 3), ("wor", 2), ("greedy", 3), ("hub", 2)):
            tuples, prob = draft_tuple_law(q, n, sampler=name)
            law = draft_set_law(q, n, sampler=name)
            assert law.prob.sum() == pytest.approx(1.0, abs=1e-12)
            merged = {}
            for t, pr in zip(tuples.tolist(), prob):
                key = tuple(sorted(set(t)))
                merged[key] = merged.get(key, 0.0) + pr
            got = {tuple(x for x in row if x >= 0): pr for row, pr in zip(law.members.tolist(), law.prob)}
            assert got == pytest.approx(merged, abs=1e-14)


def test_hub_draft_set_equals_greedy_at_two():
    rng = np.random.default_rng(3)
    for _ in range(20):
        _, q = random_pair(rng, 6)
        hub, greedy = draft_set_law(q, 2, sampler="hub"), draft_set_law(q, 2, sampler="greedy")
        assert hub.members.tolist() == greedy.members.tolist()
        np.testing.assert_allclose(hub.prob, greedy.prob, atol=1e-15)


@pytest.mark.parametrize("sampler,n", [("iid", 1), ("iid", 3), ("wor", 2), ("wor", 4), ("greedy", 3), ("hub", 2)])
def test_hit_probability_chain_matches_enumeration_on_random_orders(sampler, n):
    rng = np.random.default_rng(4)
    for _ in range(25):
        V = int(rng.integers(2, 7))
        _, q = random_pair(rng, V)
        order = rng.permutation(V)
        H = hit_probability_chain(q, n, order, sampler=sampler)
        tuples, prob = draft_tuple_law(q, n, sampler=sampler)
        for k in range(V + 1):
            in_a = np.zeros(V, dtype=bool)
            in_a[order[:k]] = True
            assert H[k] == pytest.approx(prob[in_a[tuples].any(axis=1)].sum(), abs=1e-13), (k, q)
        assert hit_probability(q, n, order[:2], sampler=sampler) == pytest.approx(H[2], abs=1e-15)


def test_wor_hit_chain_against_subset_dynamic_programme_at_sixteen_tokens():
    # An independent exact method at larger V: the subset DP of the brute-force solver.
    rng = np.random.default_rng(5)
    V = 14
    for n in (2, 4, 7):
        logits = rng.normal(0, 2, V)
        q = np.exp(logits) / np.exp(logits).sum()
        _assert_wor_chain_is_the_subset_dp(q, n, rng.permutation(V))


def _assert_wor_chain_is_the_subset_dp(q, n, order):
    """The wor hit chain along ``order`` against the subset dynamic programme (1e-12)."""
    V = q.size
    H = hit_probability_chain(q, n, order, sampler="wor")
    all_in = _zeta(_wor_set_law(q, n, V), V)
    full = (1 << V) - 1
    for k in range(V + 1):
        mask = sum(1 << int(i) for i in order[:k])
        assert H[k] == pytest.approx(1.0 - all_in[full ^ mask], abs=1e-12)


def test_wor_hit_chain_runs_of_one_mass_against_exact_oracles():
    """Runs of equal masses join the quadrature at once (``_join_run``: moments of the binomial law of the
    run). Against closed forms and enumeration, not the per-token reference: equal masses (zeros between
    them) give ``P(miss A) = C(N - a, n) / C(N, n)``; runs mixed with distinct masses at V = 14 against the
    subset dynamic programme; n-gram-like chains (a few dozen masses, long runs, singletons between them)
    against the per-token numpy sweep, at n = 3, 4 (the four-row path) and 8, 16 (the general rows)."""
    from mdsd_cli._wor_loops import RUN_MIN

    for N, n in ((5000, 3), (5000, 4), (3000, 8), (600, 16)):
        q = np.zeros(2 * N)
        q[1::2] = 1.0
        q /= q.sum()
        positive = np.concatenate(([0], np.cumsum(q > 0)))
        exact = np.array([1.0 - math.comb(N - a, n) / math.comb(N, n) for a in positive])
        np.testing.assert_allclose(wor_hit_chain(q, n), exact, rtol=0, atol=1e-13)
    rng = np.random.default_rng(17)
    V = 14
    a, b, c, d = rng.dirichlet(np.ones(4))
    for n, q in ((3, [a, a, 0, a, a, a, 0, a, a, a, a, b, c, d]), (4, [a] * 8 + [b] * 5 + [c]),
                 (4, [c, d] + [a] * 12), (5, [b, 0, 0] + [a] * 11), (3, [d, c] + [b] * 4 + [a] * 8)):
        q = np.array(q) / np.sum(q)
        positive = q[q > 0]  # the longest run of one mass along the chain (zeros between) takes the run's path
        starts = np.flatnonzero(np.r_[True, positive[1:] != positive[:-1], True])
        assert np.diff(starts).max() >= max(RUN_MIN, n + 1)
        for order in (np.arange(V), np.arange(V)[::-1]):
            _assert_wor_chain_is_the_subset_dp(q, n, order)
    for V, n in ((2400, 3), (2400, 4), (3000, 8), (1500, 16)):
        masses = rng.dirichlet(np.ones(30)) * rng.choice([1.0, 1e-3, 1e-8], 30)
        q = np.repeat(masses, rng.integers(1, 300, 30))[:V]
        q = np.concatenate((q, rng.random(V - q.size) * 1e-4)) if q.size < V else q
        q[rng.random(q.size) < 0.05] = 0.0
        q /= q.sum()
        np.testing.assert_allclose(wor_hit_chain(q, n), wor_hit_chain_numpy(q, n), rtol=0, atol=1e-13)


def test_wor_compiled_kernel_equals_pure_numpy():
    rng = np.random.default_rng(6)
    for V, n in ((50, 1), (300, 3), (2000, 8), (500, 16)):
        logits = rng.normal(0, 3, V)
        q = np.exp(logits - logits.max())
        q /= q.sum()
        np.testing.assert_allclose(wor_hit_chain(q, n), wor_hit_chain_numpy(q, n), rtol=0, atol=1e-12)


def test_wor_hit_chain_on_its_short_grid_against_a_fine_one():
    """The kernel's grid (left end raised by ``left_end``, step ``ln 2 / m``, ``e^{-q t}`` by doubling)
    against the numpy reference on a grid half as coarse from t = 1e-12, and ``_fill`` against direct
    exponentials: ``1 - e^{-q t}`` to relative precision, ``e^{-q t}`` to absolute."""
    from mdsd_cli._wor_kernel import _grid, default_step
    from mdsd_cli._wor_loops import _fill

    rng = np.random.default_rng(9)
    for V, n in ((400, 3), (1500, 4), (800, 8), (300, 16)):
        for q in (rng.dirichlet(np.full(V, 0.3)), np.exp(rng.normal(0, 3, V))):
            q = q / q.sum()
            fine = wor_hit_chain_numpy(q, n, h=default_step(n) / 2, t_lo=1e-12)
            np.testing.assert_allclose(wor_hit_chain(q, n), fine, rtol=0, atol=1e-13)
    t = _grid(1e6, 3, 1e-4)
    S, C = np.empty(t.size), np.empty(t.size)
    for a in np.geomspace(1e-6, 10.0, 60):
        _fill(a, t, 3, t.size, S, C)
        np.testing.assert_allclose(S, -np.expm1(-a * t), rtol=1e-14, atol=0)
        np.testing.assert_allclose(C, np.exp(-a * t), rtol=0, atol=1e-15)
        assert np.array_equal(t[3:], 2 * t[:-3])
    t = _grid(1e-100, 3, 1e-170)  # a t from the denormals up: relative precision wherever a t is normal
    S, C = np.empty(t.size), np.empty(t.size)
    for a in (1e-150, 3e-145, 1e-140):
        _fill(a, t, 3, t.size, S, C)
        y = a * t
        normal = y > 1e-290
        np.testing.assert_allclose(S[normal], -np.expm1(-y[normal]), rtol=1e-14, atol=0)


def test_wor_hit_chain_on_adversarial_chains_found_by_review():
    """Three cases an adversarial review found: (a) a total mass near the float64 floor (or far above 1) is
    rescaled by an exact power of two before the grid (it used to overflow ``t_lo``); (b) zeros at every
    64th position no longer stop the kernel's prefix weight from being recomputed every 64 drafted tokens
    (tied masses then added their roundings along the whole chain: 1.4e-12 at V = 100,000); (c) a pair's
    hit chain keeps its relative precision on a tiny prefix (``W (1 + R)``, no ``1 - P(miss)``)."""
    np.testing.assert_allclose(wor_hit_chain(np.array([5e-324, 5e-324, 5e-324]), 3), [0, 1, 1, 1], atol=1e-12)
    rng = np.random.default_rng(21)
    q = rng.dirichlet(np.ones(40))
    for n in (1, 3, 8):
        for scale in (-1000, -600, 600):  # totals 2^-1000 .. 2^600, every mass still a normal number
            np.testing.assert_allclose(wor_hit_chain(np.ldexp(q, scale), n), wor_hit_chain(q, n), rtol=0, atol=1e-13)
    V = 60000
    q = np.zeros(V)
    q[1::2] = 1.0
    q /= q.sum()
    np.testing.assert_allclose(wor_hit_chain(q, 4), wor_hit_chain_numpy(q, 4), rtol=0, atol=1e-13)
    V = 1 << 17  # q = 2^-17 exactly: H[1] = 2 / V
    H = wor_hit_chain(np.full(V, 1.0 / V), 2)
    assert abs(H[1] - 2.0 / V) <= 1e-9 * (2.0 / V) and H[0] == 0.0 and H[-1] == 1.0


def test_pair_hit_chain_in_closed_form_with_a_dominant_token():
    """n = 2 in closed form even where one token holds more than half the mass (its ``1 - q`` summed
    from the others): against the subset DP at V = 14 and the quadrature at V = 3,000, whatever the
    dominant token's place in the chain; masses so lopsided that ``r`` would overflow go to the quadrature."""
    from mdsd_cli._wor_kernel import pair_hit_chain

    rng = np.random.default_rng(8)
    V, full = 14, (1 << 14) - 1
    for top in (0.6, 0.9, 1 - 1e-9):
        q = rng.dirichlet(np.ones(V)) * (1 - top)
        q[rng.integers(V)] = top
        q /= q.sum()
        order = rng.permutation(V)
        H = pair_hit_chain(q[order])
        all_in = _zeta(_wor_set_law(q, 2, V), V)
        for k in range(V + 1):
            mask = sum(1 << int(i) for i in order[:k])
            assert H[k] == pytest.approx(1.0 - all_in[full ^ mask], abs=1e-13)
        big = rng.dirichlet(np.ones(3000) * 0.3) * (1 - top)
        big[rng.integers(3000)] = top
        big = big[rng.permutation(3000)]
        np.testing.assert_allclose(wor_hit_chain(big, 2), wor_hit_chain_numpy(big, 2), rtol=0, atol=1e-12)
        assert wor_hit_chain(big, 2)[0] == 0.0 and wor_hit_chain(np.concatenate(([0.0], big)), 2)[:2].max() == 0.0
    assert pair_hit_chain(np.array([1.0, 5e-324])) is None
    np.testing.assert_allclose(wor_hit_chain(np.array([1.0, 5e-324]), 2), [0.0, 1.0, 1.0], atol=1e-12)


def test_wor_extreme_dynamic_range():
    # tokens 2 and 3 are drawn third with probability 1/2 each although q is ~1e-40
    q = np.array([1 - 1e-20, 1e-20, 1e-40, 1e-40])
    q /= q.sum()
    assert hit_probability(q, 3, [2], sampler="wor") == pytest.approx(0.5, abs=1e-12)
    assert hit_probability(q, 2, [2], sampler="wor") == pytest.approx(2e-20, abs=1e-12)


def test_sampling_frequencies_match_exact_laws():
    q = np.array([0.35, 0.25, 0.2, 0.12, 0.08, 0.0])
    draws = 40_000
    for name, n in (("iid", 2), ("wor", 3), ("greedy", 3), ("hub", 2)):
        tuples, prob = draft_tuple_law(q, n, sampler=name)
        sample = sample_drafts(q, n, sampler=name, rng=np.random.default_rng(99), size=draws)
        assert sample.shape == (draws, tuples.shape[1])
        index = {tuple(t): i for i, t in enumerate(tuples.tolist())}
        counts = np.zeros(len(index))
        for row in map(tuple, sample.tolist()):
            counts[index[row]] += 1  # KeyError = a tuple of probability zero was drawn
        if len(index) > 1:
            _, pvalue = stats.chisquare(counts, prob * draws)
            assert pvalue > 1e-4, (name, pvalue)


def test_wor_sampler_handles_concentrated_q_by_exact_fallback():
    q = np.array([1 - 3e-12, 1e-12, 1e-12, 1e-12])
    sample = sample_drafts(q, 4, sampler="wor", rng=0, size=50)
    assert all(sorted(row) == [0, 1, 2, 3] for row in sample.tolist())


def test_small_support_returns_the_whole_support():
    q = np.array([0.0, 0.7, 0.0, 0.3])
    for name in ("wor", "greedy"):
        tup = sample_drafts(q, 3, sampler=name, rng=0)
        assert sorted(tup.tolist()) == [1, 3]
    assert sample_drafts(q, 3, sampler="greedy", rng=0).tolist() == [1, 3]
    assert sample_drafts(np.array([0.0, 1.0]), 2, sampler="hub", rng=0).tolist() == [1]
    assert sample_drafts(q, 3, sampler="iid", rng=0).shape == (3,)


def test_top_tokens_breaks_ties_by_index_in_linear_time():
    q = np.array([0.1, 0.3, 0.1, 0.3, 0.2])
    assert top_tokens(q, 1).tolist() == [1]
    assert top_tokens(q, 2).tolist() == [1, 3]
    assert top_tokens(q, 4).tolist() == [1, 3, 4, 0]
    assert top_tokens(q, 9).tolist() == [1, 3, 4, 0, 2]


def test_ratio_order_is_canonical():
    p = np.array([0.2, 0.1, 0.2, 0.0, 0.5, 0.0])
    q = np.array([0.1, 0.05, 0.1, 0.0, 0.0, 0.75])
    # ratios: 2, 2, 2, (0/0 -> last), inf, 0
    assert ratio_order(p, q).tolist() == [4, 0, 1, 2, 5, 3]
    batch = ratio_order(np.stack([p, p]), np.stack([q, q]))
    assert batch.tolist() == [[4, 0, 1, 2, 5, 3]] * 2
    # the lexicographic order (key, index), on rows full of ties, zeros and 0/0 (a few ties repaired in place,
    # many by a stable sort of the row)
    rng = np.random.default_rng(12)
    for V, many in ((50, True), (5000, True), (20000, True), (50, False), (5000, False)):
        if many:
            P, Q = rng.integers(0, 4, (3, V)).astype(float), rng.integers(0, 4, (3, V)).astype(float)
        else:  # a few ties, and one 0/0
            P, Q = rng.random((3, V)), rng.random((3, V))
            P[:, 1::97], Q[:, 1::97] = P[:, 0:1], Q[:, 0:1]
            P[:, 5], Q[:, 5] = 0.0, 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.abs(Q / P)
        want = np.stack([np.lexsort((np.arange(V), np.where(np.isnan(k), np.inf, k), np.isnan(k))) for k in key])
        assert np.array_equal(ratio_order(P, Q), want)
        assert all(np.array_equal(ratio_order(P[i], Q[i]), want[i]) for i in range(3))


def test_sampler_input_errors():
    with pytest.raises(InputError, match="unknown draft sampler"):
        sample_drafts([0.5, 0.5], 2, sampler="beam", rng=0)
    with pytest.raises(InputError, match="shape"):
        sample_drafts([[0.5, 0.5]], 2, rng=0)
    with pytest.raises(InputError, match="permutation"):
        hit_probability_chain([0.5, 0.5], 2, [0, 0])
    with pytest.raises(SizeLimitError, match="chain"):
        draft_tuple_law(np.full(60, 1 / 60), 5, sampler="iid")
    assert set(SAMPLERS) == {"iid", "wor", "greedy", "hub", "topk"}


def test_hit_probability_accepts_sets_and_masks_and_refuses_floats():
    q = np.array([0.5, 0.3, 0.1, 0.1])
    assert hit_probability(q, 1, np.array([True, False, False, False])) == pytest.approx(0.5)
    assert hit_probability(q, 1, np.zeros(4, dtype=bool)) == 0.0
    assert hit_probability(q, 1, {1, 2}) == pytest.approx(0.4)
    with pytest.raises(InputError, match="integer token ids"):
        hit_probability(q, 1, [0.0, 1.5])
    with pytest.raises(InputError, match="length V"):
        hit_probability(q, 1, np.array([True, False]))


def test_iid_tuple_law_takes_more_than_32_drafts_and_keeps_its_order():
    """numpy's meshgrid stops at 32 axes: `audit mdsd:rrs -n 40` once crashed on a one-hot q (1 tuple of 40)."""
    tuples, prob = SAMPLERS["iid"].tuple_law(np.array([0.0, 1.0, 0.0]), 40)
    assert tuples.shape == (1, 40) and (tuples == 1).all() and prob.tolist() == [1.0]
    q = np.array([0.2, 0.0, 0.5, 0.3])
    tuples, prob = SAMPLERS["iid"].tuple_law(q, 3)
    expected = [(a, b, c) for a in (0, 2, 3) for b in (0, 2, 3) for c in (0, 2, 3)]  # first draft slowest
    assert [tuple(t) for t in tuples.tolist()] == expected
    assert np.allclose(prob, [q[a] * q[b] * q[c] for a, b, c in expected], atol=1e-15)
