"""optimal-wor, any n >= 2: nested chords and the flat segment rule, against enumeration and the LP."""

import itertools

import numpy as np
import pytest

from mdsd_cli import optimal_acceptance
from mdsd_cli.samplers import get_sampler
from mdsd_cli.verifiers import enumerated_rate, output_distribution
from mdsd_cli.verifiers.optimal import OptimalWOR
from mdsd_cli.verifiers.optimal._chord_kernels import _segment_rule
from mdsd_cli.verifiers.optimal.chords import ChordPlan, segment_rule_decimal


def _ordered_tuples(q, n):
    """Every ordered wor tuple with its probability (remaining mass summed, no 1 - used)."""
    support = [i for i in range(q.size) if q[i] > 0]
    out = []
    for tup in itertools.permutations(support, min(n, len(support))):
        prob, used = 1.0, set()
        for x in tup:
            prob *= q[x] / sum(q[j] for j in support if j not in used)
            used.add(x)
        out.append((tup, prob))
    return out


def _hit(tuples, A):
    return sum(prob for tup, prob in tuples if any(x in A for x in tup))


def _case(rng, V, mode):
    if mode == 0:
        return rng.dirichlet(np.ones(V) * 0.4), rng.dirichlet(np.ones(V) * 0.4)
    if mode == 1:  # ties in p and q
        p, q = rng.integers(1, 4, V).astype(float), rng.integers(1, 4, V).astype(float)
        return p / p.sum(), q / q.sum()
    if mode == 2:  # one draft token with q near 1
        q = rng.dirichlet(np.ones(V)) * 1e-3
        q[rng.integers(V)] = 1.0
        return rng.dirichlet(np.ones(V)), q / q.sum()
    if mode == 3:  # zeros in p and q
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        p[rng.integers(V)] = 0.0
        q[rng.integers(V)] = 0.0
        return p / p.sum(), q / q.sum()
    p = np.zeros(V)  # one-hot target
    p[rng.integers(V)] = 1.0
    return p, rng.dirichlet(np.ones(V) * 2)


def test_segment_rule_has_the_flat_law_below_any_missed_prefix():
    """The identity the construction rests on: for drafts that miss the chain above a segment G
    and hit G, the segment rule picks y in G with probability q_y (f(E u G) - f(E)) / q(G)."""
    rng = np.random.default_rng(5)
    for trial in range(60):
        V, n = int(rng.integers(4, 8)), 2 + trial % 4
        q = rng.dirichlet(np.ones(V) * [0.3, 1.0, 3.0][trial % 3])
        order = rng.permutation(V)
        tuples = _ordered_tuples(q, n)
        plan = ChordPlan(q, order, q.copy(), np.array([0, V]), np.zeros(V + 1))
        a = int(rng.integers(0, V - 1))
        b = int(rng.integers(a + 2, V + 1))
        E, G = set(order[:a].tolist()), set(order[a:b].tolist())
        law = np.zeros(V)
        for tup, prob in tuples:
            if any(x in E for x in tup) or not any(x in G for x in tup):
                continue
            drafts = np.array(sorted(tup))
            law[drafts] += prob * plan.rule(drafts, a, b)
        flat = (_hit(tuples, E | G) - _hit(tuples, E)) / q[list(G)].sum()
        np.testing.assert_allclose(law[list(G)], q[list(G)] * flat, rtol=0, atol=1e-14)
        assert law[[x for x in range(V) if x not in G]].max(initial=0.0) == 0.0


def test_segment_rule_recursion_equals_the_sum_over_orders():
    rng = np.random.default_rng(9)
    for trial in range(40):
        n = 2 + trial % 5
        qS = rng.dirichlet(np.ones(n + 2))[:n]
        inG = rng.random(n) < 0.6
        inG[rng.integers(n)] = True
        m0, kappa = 1.0 - qS.sum(), float(rng.exponential())
        base, slope = np.zeros(n), np.zeros(n)
        _segment_rule(qS, inG, m0, base, slope)
        brute, total = np.zeros(n), 0.0
        for perm in itertools.permutations(range(n)):
            prob, rem = 1.0, m0 + qS.sum()
            for i in perm:
                prob *= qS[i] / rem
                rem -= qS[i]
            total += prob
            first = next(i for i in perm if inG[i])
            brute[first] += prob
            if inG[perm[-1]] and perm[-1] != first:
                brute[first] += kappa * prob
                brute[perm[-1]] -= kappa * prob
        np.testing.assert_allclose(base + kappa * slope, brute / total, rtol=0, atol=1e-13)
        base, slope = segment_rule_decimal(qS, inG, m0, kappa)  # the decimal twin (large kappa, float floor)
        np.testing.assert_allclose(base + kappa * slope, brute / total, rtol=0, atol=1e-13)


def test_optimal_wor_nested_chords_hundreds_of_small_cases():
    """Exactly lossless and exactly optimal: output law = p, acceptance = α*_wor (subsets, and
    the LP on every tenth case), with ties, zeros, one-hot targets and q near 1."""
    rng = np.random.default_rng(18)
    for trial in range(240):
        V = int(rng.integers(4, 8))
        n = 2 + trial % 3
        p, q = _case(rng, V, trial % 5)
        v = OptimalWOR(p, q, n)
        if min(n, int((q > 0).sum())) >= 2:
            assert v.info["method"] == "nested chords"
        assert np.abs(output_distribution(v) - p).max() <= 1e-12, (p, q, n)
        bound = optimal_acceptance(p, q, n, sampler="wor", solver="subsets")
        assert enumerated_rate(v) == pytest.approx(bound, abs=1e-12), (p, q, n)
        assert v.exact_rate() == pytest.approx(bound, abs=1e-12)
        if trial % 10 == 0:
            lp = optimal_acceptance(p, q, n, sampler="wor", solver="primal-lp")
            assert enumerated_rate(v) == pytest.approx(lp, abs=1e-9)


def _tied_pair(rng, V, groups):
    """An n-gram-like pair: ``q`` takes a few masses; on each of ``groups`` sets of tokens ``p = lambda q``
    (exactly tied ratios whose draft masses differ), elsewhere ``p`` is its own."""
    q = rng.choice(rng.dirichlet(np.ones(5)), V) * rng.choice([1.0, 0.5], V)
    q /= q.sum()
    p = rng.dirichlet(np.ones(V))
    label = rng.integers(0, groups + 1, V)
    for g in range(1, groups + 1):
        p[label == g] = q[label == g] * rng.uniform(0.5, 2.0)
    return p / p.sum(), q


def test_wor_chain_orders_tied_ratios_by_mass_and_stays_exact():
    """From three drafts without replacement the chain puts exactly tied ratios in decreasing ``q`` (runs of
    one mass for the hit chain's quadrature): the compiled order is :func:`wor_chain_order`, the candidate
    law and ``A*`` are those of the index-tied order (they do not depend on ties), and the verifier stays
    exactly lossless and optimal on small tied cases (enumeration, the subset bound)."""
    from mdsd_cli.samplers import ratio_order
    from mdsd_cli.verifiers.optimal.candidate import (
        chain_targets,
        chain_targets_numpy,
        wor_chain_order,
    )

    rng = np.random.default_rng(29)
    sampler = get_sampler("wor")
    # found by review: -0.0 and +0.0 are one mass (numpy's order keeps their index order); unnormalised p ties
    # a subnormal q with the zeros
    p, q = np.array([4.0, 4, 4, 4, 4, 1, 1, 1]), np.array([0.0, 5e-324, -0.0, 0.0, -0.0, 0.3, 0.2, 0.5])
    assert np.array_equal(chain_targets(p, q, 3, sampler)[0], wor_chain_order(p, q))
    # the pairs (ratio, mass) counted in one pass up to V / 4 distinct ones (_few_argsort), sorted past it: both
    # sides, and the special values (zeros of both signs, p = 0, p = q = 0) among many ties
    p, q = np.tile(np.append(p, [0.0, 0.0, 2.0, 2.0]), 10), np.tile(np.append(q, [0.1, 0.0, 0.4, 0.4]), 10)
    assert np.array_equal(chain_targets(p, q, 3, sampler)[0], wor_chain_order(p, q))
    sides = set()
    for groups in (1, 2, 3, 4, 6, 8):
        p, q = _tied_pair(rng, 2380, groups)
        key = np.abs(q / p)
        sides.add(len(set(zip(key.tolist(), q.tolist()))) <= 2380 // 4)
        assert np.array_equal(chain_targets(p, q, 4, sampler)[0], wor_chain_order(p, q))
    assert sides == {True, False}
    for trial in range(40):
        V = int(rng.integers(600, 2500))
        p, q = _tied_pair(rng, V, 3)
        n = 3 + trial % 3
        order, K, t, cuts, H = chain_targets(p, q, n, sampler, hits=True)
        assert np.array_equal(order, wor_chain_order(p, q))
        key = q[order] / p[order]
        tied = key[1:] == key[:-1]
        assert tied.sum() > V // 4 and (q[order][1:][tied] <= q[order][:-1][tied]).all()
        plain = ratio_order(p, q)
        _, K2, t2, _ = chain_targets_numpy(p, q, plain, sampler.hit_probability_chain(q, n, plain))
        np.testing.assert_allclose(t, t2, rtol=0, atol=1e-13)
        assert set(order[:K]) == set(plain[:K2])
    for trial in range(60):
        V = int(rng.integers(5, 9))
        p, q = _tied_pair(rng, V, 1 + trial % 2)
        n = 3 + trial % 2
        v = OptimalWOR(p, q, n)
        assert np.abs(output_distribution(v) - p).max() <= 1e-12, (p, q, n)
        bound = optimal_acceptance(p, q, n, sampler="wor", solver="subsets")
        assert enumerated_rate(v) == pytest.approx(bound, abs=1e-12), (p, q, n)


def test_fused_set_up_is_the_step_by_step_one(monkeypatch):
    """``optimal-wor``'s set-up in one compiled call (the chain, hit chain, candidate law, block index and the
    chords' arrays) against the same steps one call each: the same chain, blocks, law and picks, n = 2 to 5,
    n-gram-like ties and continuous laws."""
    from mdsd_cli._jit import numba_enabled
    from mdsd_cli.verifiers.optimal import wor

    if not numba_enabled():
        pytest.skip("numba is off: there is no fused set-up")
    rng = np.random.default_rng(31)
    for trial in range(24):
        V = int(rng.integers(50, 1500))
        p, q = _tied_pair(rng, V, 2) if trial % 2 else (rng.dirichlet(np.ones(V) * 0.3), rng.dirichlet(np.ones(V)))
        n = 2 + trial % 4
        fused = OptimalWOR(p, q, n)
        monkeypatch.setattr(wor, "FUSED", False)
        plain = OptimalWOR(p, q, n)
        monkeypatch.setattr(wor, "FUSED", True)
        assert np.array_equal(fused._chords.order, plain._chords.order) and np.array_equal(fused.block, plain.block)
        np.testing.assert_array_equal(fused.candidate, plain.candidate)
        np.testing.assert_array_equal(fused.target, plain.target)
        assert fused.info == plain.info
        tuples = get_sampler("wor").sample(q, n, np.random.default_rng(trial), 40)
        a, b = np.random.default_rng(trial), np.random.default_rng(trial)
        assert [fused.pick_one(x, a) for x in tuples] == [plain.pick_one(x, b) for x in tuples]
    # a pair whose closed form declines (found by the hypothesis test): the general path, exactly lossless
    v = OptimalWOR(np.array([0.0, 1.0]), np.array([1.0, 5e-324]), 2)
    assert v.info["method"] == "nested chords" and np.abs(output_distribution(v) - [0.0, 1.0]).max() <= 1e-12


def test_chord_mixture_is_the_candidate_law_at_larger_vocabulary():
    """Without enumeration (V = 3,000, n = 2, 4 and 8): every block's tree of splits mixes the
    flat chord laws into exactly t, and every level's weight is a probability."""
    from mdsd_cli import zipf_pairs
    from mdsd_cli.verifiers.optimal.candidate import chain_targets

    pair = zipf_pairs(1, 3000, seed=12)
    p, q = pair.target[0], pair.draft[0]
    for n in (2, 4, 8):
        order, K, t, cuts, H = chain_targets(p, q, n, get_sampler("wor"), hits=True)
        plan = ChordPlan(q, order, t, cuts, H)
        law = np.zeros(q.size)
        for i in range(len(cuts) - 1):
            A, (Qh, Ql), (na, nb, nrho, nc, nl, nr) = plan._block(i)
            Q = Qh + Ql
            ceiling = np.ones(na.size)
            ceiling[nl[nc >= 0]] = nrho[nc >= 0]
            ceiling[nr[nc >= 0]] = nrho[nc >= 0]
            weight = ceiling - np.where(nc >= 0, nrho, 0.0)
            assert weight.min() >= 0.0 and ceiling.max() <= 1.0
            HB = H[A:A + Q.size] - H[A]
            for a, b, w in zip(na, nb, weight):
                slope = (HB[b] - HB[a]) / (Q[b] - Q[a])
                law[order[A + a:A + b]] += w * slope * q[order[A + a:A + b]]
        assert np.abs(law - t).max() <= 1e-12
        assert sum(len(plan._block(i)[2][0]) for i in range(len(cuts) - 1)) >= 2 * (len(cuts) - 1)


def test_pairs_by_nested_chords_on_the_hard_small_cases():
    """n = 2 by nested chords (the default): output law = p to 1e-12 and acceptance = α*_wor on
    the boundary rule's hard cases (ties, zeros, q near 1, one-hot targets, rounded masses)."""
    from .test_wor_boundary import _hard_pair

    rng = np.random.default_rng(2027)
    for trial in range(300):
        p, q = _hard_pair(rng, trial % 5)
        v = OptimalWOR(p, q, 2)
        if int((q > 0).sum()) >= 2:
            assert v.info["method"] == "nested chords"
        assert np.abs(output_distribution(v) - p).max() <= 1e-12, (p, q)
        assert enumerated_rate(v) == pytest.approx(optimal_acceptance(p, q, 2, sampler="wor", solver="subsets"),
                                                   abs=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_fast_splits_equal_the_scans(n):
    """The splits found by the hulls (both anchors) and by branch and bound are the scan's: on random
    segments of every block of zipf and Gaussian pairs, the same largest relative tightness (to 1e-9,
    where it is above the rounding of the sums, 1e-7), and whole trees that mix into t either way."""
    from mdsd_cli import zipf_pairs
    from mdsd_cli.bench.common import random_pairs
    from mdsd_cli.verifiers.optimal._chord_kernels import (
        _mixture_law,
        _prefix2,
        _split,
        _split_bounded,
        _tree_hull,
    )
    from mdsd_cli.verifiers.optimal.candidate import chain_targets

    rng = np.random.default_rng(n)
    zipf = zipf_pairs(1, 4000, seed=n)
    P, Q = random_pairs(1, 4000, n, spread=2.2, noise=1.1)
    for p, q in ((zipf.target[0], zipf.draft[0]), (P[0], Q[0])):
        order, K, t, cuts, H = chain_targets(p, q, n, get_sampler("wor"), hits=True)
        for i in range(len(cuts) - 1):
            A, B = int(cuts[i]), int(cuts[i + 1])
            tok, m = order[A:B], B - A
            if m < 3:
                continue
            T = np.concatenate(([0.0], np.cumsum(t[tok])))
            Qc = np.concatenate(([0.0], np.cumsum(q[tok])))
            Hb = H[A:B + 1] - H[A]
            for _ in range(150):
                a = int(rng.integers(0, m - 1))
                b = int(rng.integers(a + 2, m + 1))
                r1, _ = _split(T, Hb, Qc, a, b)
                r2, c2 = _split_bounded(T, Hb, Qc, a, b)
                if r1 > 1e-7:
                    assert r2 == pytest.approx(r1, rel=1e-9), (a, b)
                if c2 >= 0:
                    assert a < c2 < b
            Qh, Ql = _prefix2(np.ascontiguousarray(q[tok]))
            for use_hull in (True, False):
                law = np.empty(m)
                _mixture_law(*_tree_hull(T, Hb, Qc, use_hull), Hb, Qh, Ql, q[tok], law)
                assert np.abs(law - t[tok]).max() <= 1e-12


def test_sampled_choices_follow_the_exact_choice_law():
    """pick() (a level U, then a draw in the segment) against choice() on fixed tuples."""
    from scipy.stats import chisquare

    from mdsd_cli import zipf_pairs

    pair = zipf_pairs(1, 400, seed=3)
    p, q = pair.target[0], pair.draft[0]
    v = OptimalWOR(p, q, 4)
    rng = np.random.default_rng(1)
    tuples = get_sampler("wor").sample(q, 4, rng, 6)
    for row in tuples:
        law = v.choice(row[None, :])[0]
        assert law.sum() == pytest.approx(1.0, abs=1e-12) and law.min() >= 0.0
        picks = [v._chords.pick(np.unique(row), *rng.random(2)) for _ in range(4000)]
        counts = np.array([picks.count(x) for x in row])
        keep = law > 0
        if keep.sum() > 1:
            assert chisquare(counts[keep], 4000 * law[keep]).pvalue > 1e-4
        assert counts[~keep].sum() == 0


@pytest.mark.parametrize("n", [3, 4, 8])
def test_compiled_pick_is_the_segment_rule_and_draw(n):
    """pick() on a block without its tree (one compiled call: the bridge, the segment rule, the draw) against
    segment() + rule() + the draw in numpy on a second plan, on zipf, Gaussian and cold real-text pairs: the same
    token for every tuple and pair of uniforms, through the switch to the trees after TREE_AFTER steps."""
    from mdsd_cli import zipf_pairs
    from mdsd_cli.bench.common import random_pairs
    from mdsd_cli.datasets import load_data

    rng = np.random.default_rng(60 + n)
    zipf = zipf_pairs(1, 3000, seed=n)
    P, Q = random_pairs(1, 3000, n, spread=2.2, noise=1.1)
    cold = load_data("pydoc-ngram", temperature=0.25)
    compared = 0
    for p, q in [(zipf.target[0], zipf.draft[0]), (P[0], Q[0]), (cold.target[76], cold.draft[76])]:
        fast, slow = OptimalWOR(p, q, n)._chords, OptimalWOR(p, q, n)._chords
        for row in get_sampler("wor").sample(q, n, rng, 300):
            drafts = np.unique(row)
            u, v = rng.random(2)
            a, b = slow.segment(int(slow.pos[drafts].min()), u)
            w = slow.rule(drafts, a, b)
            want = drafts[min(int(np.searchsorted(np.cumsum(w), v * w.sum(), side="right")), drafts.size - 1)]
            assert fast.pick(drafts, u, v) == want
            compared += 1
    assert compared == 900


def test_a_draft_alone_in_the_earliest_block_is_chosen_without_the_tree():
    """choice() gives the draft alone in the earliest block its drafts reach probability 1 without building that
    block's tree: the same law as the tree's path (to 1e-15) on every tuple of zipf, Gaussian and cold real-text
    pairs, both kinds of tuples met."""
    from mdsd_cli import zipf_pairs
    from mdsd_cli.bench.common import random_pairs
    from mdsd_cli.datasets import load_data

    rng = np.random.default_rng(71)
    zipf = zipf_pairs(1, 2000, seed=5)
    P, Q = random_pairs(1, 2000, 7, spread=2.2, noise=1.1)
    cold = load_data("pydoc-ngram", temperature=0.25)
    alone = shared = 0
    for n in (2, 4):
        for p, q in [(zipf.target[0], zipf.draft[0]), (P[0], Q[0]), (cold.target[76], cold.draft[76])]:
            plan = OptimalWOR(p, q, n)._chords
            for row in get_sampler("wor").sample(q, n, rng, 60):
                drafts = np.unique(row)
                where = plan.pos[drafts]
                j = int(where.min())
                i = plan.block_of(j)
                got = plan.choice(drafts)
                np.testing.assert_allclose(got, plan._path_choice(drafts, j, i), rtol=0, atol=1e-15)
                if np.count_nonzero(where < plan.cuts[i + 1]) == 1:
                    alone += 1
                    assert got.max() == 1.0 and got.sum() == 1.0
                else:
                    shared += 1
    assert alone >= 10 and shared >= 10, (alone, shared)


def test_chain_order_of_the_tuples_does_not_matter():
    """The rule sees the drafted set: the same tuple in another order gets the same choice law."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30) * 0.5)
    v = OptimalWOR(p, q, 5)
    row = get_sampler("wor").sample(q, 5, rng, 1)[0]
    law = dict(zip(row, v.choice(row[None, :])[0]))
    shuffled = rng.permutation(row)
    again = dict(zip(shuffled, v.choice(shuffled[None, :])[0]))
    for x in row:
        assert again[x] == pytest.approx(law[x], abs=1e-15)


def test_segment_rule_keeps_its_precision_under_a_huge_kappa():
    """A segment of mass ~1e-15 under mass ~1: the swap correction is kappa ~1e15 times a difference
    of sums that cancel (it once gave -0.025 and raised); decimal arithmetic keeps the law exact."""
    p = np.array([0.9999657874400342, 3.391068488362371e-05, 3.018750820156415e-07, 7.007152637865371e-21,
                  1.7945021088759195e-18, 1.0263824116010281e-16, 9.085044441398355e-18])
    q = np.array([0.7742021331056911, 0.21917215126778322, 0.0066257156265179164, 4.807008358101719e-19,
                  1.2310544784458344e-16, 7.041132234672944e-15, 6.232472278045233e-16])
    for n in (3, 4):
        v = OptimalWOR(p, q, n)
        assert np.abs(output_distribution(v) - p).max() <= 1e-12
        bound = optimal_acceptance(p, q, n, sampler="wor", solver="subsets")
        assert enumerated_rate(v) == pytest.approx(bound, abs=1e-12)


@pytest.mark.parametrize("pair,n", [(76, 8), (377, 8)])
def test_cold_real_text_pairs_whose_hit_curve_rounding_steers_a_split(tmp_path, monkeypatch, pair, n):
    """pydoc-ngram at T = 0.1: masses from 1e-33 to 0.5 in one block, where the hit curve's rounding
    once steered the hull to a wrong split (pair 76: token 2151 sampled 1e-5 of the time instead of
    0.025). The trees are checked against t at set-up; a block they miss gets the law they give."""
    from mdsd_cli.datasets import load_data
    from mdsd_cli.verifiers import sampled_output_test

    monkeypatch.setenv("MDSD_CACHE_DIR", str(tmp_path))
    data = load_data("pydoc-ngram", temperature=0.1)
    p, q = data.target[pair], data.draft[pair]
    v = OptimalWOR(p, q, n)
    assert v.exact_rate() == pytest.approx(optimal_acceptance(p, q, n, sampler="wor"), abs=1e-9)
    assert sampled_output_test(v, 40_000, np.random.default_rng(pair)).pvalue > 1e-4
    law = v._chords.law
    assert abs(law.sum() - v.target.sum()) <= 1e-9 and law.min() >= 0.0


def test_block_index_is_the_priority_blocks():
    """The array form of the priority blocks (one pass, no per-block loop) numbers them as the list does."""
    from mdsd_cli.verifiers.optimal.candidate import block_index, chain_targets, priority_blocks

    rng = np.random.default_rng(3)
    for trial in range(60):
        p, q = _case(rng, int(rng.integers(2, 40)), trial % 5)
        if trial % 2:  # many one-token blocks: rounded masses tie the chain into tight cuts
            p, q = np.round(p * 8) + 1e-12, np.round(q * 8) + (q > 0) * 1e-12
            p, q = p / p.sum(), q / q.sum()
        order, K, t, cuts = chain_targets(p, q, 2 + trial % 3, get_sampler("wor"))
        blocks, first_tail = priority_blocks(order, K, cuts, q)
        block, count, tail = block_index(order, K, cuts, q)
        expected = np.full(q.size, np.iinfo(np.int64).max, dtype=np.int64)
        for i, (tokens, _) in enumerate(blocks):
            expected[tokens] = i
        assert np.array_equal(block, expected) and count == len(blocks) and tail == first_tail


def test_compiled_chain_targets_equal_numpy():
    """The compiled pass of ``chain_targets`` and ``block_index`` against their numpy references on
    every kind of case (ties, zeros, one-hot targets, a dominant draft token, masses down to 1e-300,
    rounded masses that tie the chain into tight cuts): the same ``K``, cuts and blocks, ``t`` to 1e-15."""
    from mdsd_cli._jit import numba_enabled
    from mdsd_cli.samplers import ratio_order
    from mdsd_cli.verifiers.optimal.candidate import (
        block_index,
        block_index_numpy,
        chain_targets,
        chain_targets_numpy,
        wor_chain_order,
    )

    if not numba_enabled():
        pytest.skip("numba is off: chain_targets is the numpy version")
    rng = np.random.default_rng(41)
    sampler = get_sampler("wor")
    for trial in range(300):
        V = int(rng.integers(2, 60)) if trial % 10 else int(rng.integers(500, 3000))
        p, q = _case(rng, V, trial % 5)
        if trial % 7 == 3:  # masses spread over 300 decades
            p = rng.random(V) * 10.0 ** -rng.integers(0, 300, V).astype(float)
            q = rng.random(V) * 10.0 ** -rng.integers(0, 300, V).astype(float)
            p, q = p / p.sum(), q / q.sum()
        if trial % 2:
            p, q = np.round(p * 8) + 1e-12, np.round(q * 8) + (q > 0) * 1e-12
            p, q = p / p.sum(), q / q.sum()
        n = 2 + trial % 4
        order, K, t, cuts, H = chain_targets(p, q, n, sampler, hits=True)  # one compiled call (n = 2: closed form)
        # n >= 3: exactly tied ratios by decreasing mass (the hit chain's runs)
        assert np.array_equal(order, wor_chain_order(p, q) if min(n, np.count_nonzero(q > 0)) >= 3
                              else ratio_order(p, q))
        np.testing.assert_allclose(H, sampler.hit_probability_chain(q, n, order), rtol=1e-14, atol=1e-15)
        order2, K2, t2, cuts2, H2 = chain_targets_numpy(p, q, order, H, hits=True)
        assert K == K2 and np.array_equal(cuts, cuts2), (trial, K, K2)
        np.testing.assert_allclose(t, t2, rtol=0, atol=1e-15)
        got, want = block_index(order, K, cuts, q), block_index_numpy(order, K, cuts, q)
        assert np.array_equal(got[0], want[0]) and got[1:] == want[1:]
    p, q = np.array([0.5, 0.5]), np.array([1.0, 5e-324])  # the pair's closed form declines: the quadrature
    order, K, t, cuts, H = chain_targets(p, q, 2, sampler, hits=True)
    np.testing.assert_allclose(H, sampler.hit_probability_chain(q, 2, order), rtol=0, atol=1e-15)
    assert (H >= 0).all() and (H <= 1).all() and K == chain_targets_numpy(p, q, order, H)[1]


def _block_data(p, q, n):
    """Every block of two or more tokens of ``(p, q, n)``: ``(plan, i, A, T, H, Q)``."""
    from mdsd_cli.verifiers.optimal.candidate import chain_targets

    order, K, t, cuts, H = chain_targets(p, q, n, get_sampler("wor"), hits=True)
    plan = ChordPlan(q, order, t, cuts, H)
    for i in range(len(cuts) - 1):
        if cuts[i + 1] - cuts[i] >= 2:
            A, T, Hb, Qc, _, _ = plan._block_arrays(i)
            yield plan, i, A, T, Hb, Qc


@pytest.mark.parametrize("n", [2, 4, 8])
def test_majorant_bridges_are_the_trees_segments(n):
    """A step's segment without the tree: the edge over the drafts' first position of the concave
    majorant of ``T - u H`` is the segment the tree's walk gives, on every block of zipf, Gaussian and
    cold real-text pairs, at random positions and levels."""
    from mdsd_cli import zipf_pairs
    from mdsd_cli.bench.common import random_pairs
    from mdsd_cli.datasets import load_data
    from mdsd_cli.verifiers.optimal._chord_kernels import _bridge, _walk

    rng = np.random.default_rng(40 + n)
    zipf = zipf_pairs(1, 4000, seed=n)
    P, Q = random_pairs(1, 4000, n, spread=2.2, noise=1.1)
    cold = load_data("pydoc-ngram", temperature=0.25)
    pairs = [(zipf.target[0], zipf.draft[0]), (P[0], Q[0])] + [(cold.target[i], cold.draft[i]) for i in (7, 76, 377)]
    checked = same = 0
    for k, (p, q) in enumerate(pairs):
        for plan, i, _, T, Hb, Qc in _block_data(p, q, n):
            (na, nb, nrho, nc, nl, nr), trusted = plan._tree(i)
            assert trusted
            stack = np.empty(T.size, np.int64)
            for _ in range(300):
                j, u = int(rng.integers(0, T.size - 1)), float(rng.random())
                node = _walk(nrho, nc, nl, nr, j, u)
                a, b = _bridge(T, Hb, Qc, u, j, stack)
                assert a <= j < b
                checked += 1
                if (a, b) == (na[node], nb[node]):
                    same += 1
                    continue
                assert k >= 2, "zipf and Gaussian pairs have no ties: the very same segments"
                # else only points collinear with the segment (equal t/q, and hit slopes equal up to the hit
                # curve's rounding, which then decides whether they are vertices) may differ: the flat law
                # q_j * slope of H gives token j the same probability to 1e-15; or the ends differ by tokens
                # whose hit increments are the hit curve's rounding itself (draft mass ~1e-10 where H is
                # within 1e-12 of its block's end: their vertex levels are known to ~1e-6 only)
                a2, b2 = na[node], nb[node]
                slope, slope2 = (Hb[b] - Hb[a]) / (Qc[b] - Qc[a]), (Hb[b2] - Hb[a2]) / (Qc[b2] - Qc[a2])
                if (Qc[j + 1] - Qc[j]) * abs(slope - slope2) <= 1e-15:
                    continue
                for x, y in (sorted((a, a2)), sorted((b, b2))):
                    assert np.abs(np.diff(Hb[x:y + 1])).max(initial=0.0) <= 4 * np.spacing(1.0), \
                        (i, j, u, (a, b), (a2, b2))
    assert checked >= 2000 and same >= 0.8 * checked


def test_majorant_law_is_the_bridges_law_on_any_data():
    """The set-up's law (majorant of ``T`` minus majorant of ``T - H``) against the bridge rule's law
    integrated exactly over ``U`` (constant between the levels where three points turn collinear), on
    random data that need not be concave nor below ``H``: the identity holds for any data."""
    from mdsd_cli.verifiers.optimal._chord_kernels import _bridge, _majorant_laws

    rng = np.random.default_rng(8)
    for trial in range(120):
        m = int(rng.integers(2, 9))
        q = rng.dirichlet(np.ones(m))
        Qc = np.concatenate(([0.0], np.cumsum(q)))
        if trial % 2:  # the verifier's case: T concave, under a concave H, equal at the ends (a random
            H = 1.0 - (1.0 - Qc) ** 3  # mixture of chord interpolants of H on random partitions)
            T = np.zeros(m + 1)
            for w in rng.dirichlet(np.ones(3)):
                cut = np.flatnonzero(np.concatenate(([True], rng.random(m - 1) < 0.4, [True])))
                T += w * np.interp(Qc, Qc[cut], H[cut])
            t = np.diff(T)
        else:  # anything
            H = np.concatenate(([0.0], np.cumsum(rng.random(m))))
            t = rng.random(m) - 0.2
        T = np.concatenate(([0.0], np.cumsum(t)))
        levels = {0.0, 1.0}
        for a, b, c in itertools.combinations(range(m + 1), 3):
            w = (Qc[b] - Qc[a]) / (Qc[c] - Qc[a])
            gH = (H[b] - H[a]) - w * (H[c] - H[a])
            if gH != 0.0:
                levels.add(((T[b] - T[a]) - w * (T[c] - T[a])) / gH)
        levels = np.array(sorted(x for x in levels if 0.0 <= x <= 1.0))
        stack = np.empty(m + 1, np.int64)
        brute = np.zeros(m)
        for lo, hi in zip(levels[:-1], levels[1:]):
            for j in range(m):
                a, b = _bridge(T, H, Qc, 0.5 * (lo + hi), j, stack)
                brute[j] += (hi - lo) * q[j] * (H[b] - H[a]) / (Qc[b] - Qc[a])
        law, err = np.zeros(m), np.zeros(1)
        _majorant_laws(t, q, H, np.array([0, m]), law, err, -1.0)  # the two majorants, always
        np.testing.assert_allclose(law, brute, rtol=0, atol=1e-12)
        assert err[0] == pytest.approx(np.abs(law - t).max(), abs=1e-15)
        fast, bound = np.zeros(m), np.zeros(1)  # as set-up calls it: t itself where T is concave and under H
        _majorant_laws(t, q, H, np.array([0, m]), fast, bound, 1e-9)
        assert np.abs(fast - brute).max() <= bound[0] + 1e-12
        if trial % 2:
            assert np.abs(law - t).max() <= 1e-12 and bound[0] <= 1e-12 and np.array_equal(fast, t)
        elif np.abs(law - t).max() > 1e-9:
            np.testing.assert_allclose(fast, law, rtol=0, atol=1e-15)  # the data break the premises: majorants


def test_untrusted_trees_give_way_to_the_bridges(monkeypatch):
    """A tree whose law misses ``t`` is never walked: steps go on by bridges, and the exact choice
    probabilities come from the path found by bisection over the bridges - the same rule, so the
    output law is still ``p`` and the choices equal the trusted tree's."""
    from mdsd_cli.verifiers.optimal import chords

    rng = np.random.default_rng(21)
    cases = [(_case(rng, int(rng.integers(4, 7)), k % 5), 2 + k % 3) for k in range(40)]
    trusted = [OptimalWOR(p, q, n) for (p, q), n in cases]
    real_tree = chords.ChordPlan._tree
    monkeypatch.setattr(chords.ChordPlan, "_tree", lambda self, i: (real_tree(self, i)[0], False))
    for ((p, q), n), good in zip(cases, trusted):
        v = OptimalWOR(p, q, n)
        assert np.abs(output_distribution(v) - p).max() <= 1e-12, (p, q, n)
        for row in get_sampler("wor").sample(q, n, rng, 4):
            np.testing.assert_allclose(v.choice(row[None, :]), good.choice(row[None, :]), rtol=0, atol=1e-12)
    from mdsd_cli import zipf_pairs

    pair = zipf_pairs(1, 400, seed=3)
    p, q = pair.target[0], pair.draft[0]
    good, v = OptimalWOR(p, q, 4), None
    monkeypatch.setattr(chords, "TREE_AFTER", 0)
    v = OptimalWOR(p, q, 4)
    for row in get_sampler("wor").sample(q, 4, rng, 20):
        np.testing.assert_allclose(v.choice(row[None, :]), good.choice(row[None, :]), rtol=0, atol=1e-12)
        for u in rng.random(10):
            j = int(v._chords.pos[row].min())
            i = v._chords.block_of(j)
            A, T, H, Qc, _, stack = v._chords._block_arrays(i)
            bridge = v._chords.k._bridge(T, H, Qc, u, j - A, stack)
            assert v._chords.segment(j, u) == (A + bridge[0], A + bridge[1])


def test_set_up_builds_no_tree_and_a_block_gets_one_after_many_steps(monkeypatch):
    """Lazy: set-up computes the chain and the checked law only; a block's tree is built after
    TREE_AFTER steps into it (and for exact choice probabilities), and sampled outputs follow p either way."""
    from mdsd_cli.bench.common import random_pairs
    from mdsd_cli.verifiers import sampled_output_test
    from mdsd_cli.verifiers.optimal import chords

    monkeypatch.setattr(chords, "TREE_AFTER", 8)
    P, Q = random_pairs(1, 3000, 5, spread=2.2, noise=1.1)
    v = OptimalWOR(P[0], Q[0], 4)
    plan = v._chords
    assert not plan._trees and v.info["steered_blocks"] == 0
    assert v.exact_rate() == pytest.approx(optimal_acceptance(P[0], Q[0], 4, sampler="wor"), abs=1e-12)
    rng = np.random.default_rng(2)
    v.sample(get_sampler("wor").sample(Q[0], 4, rng, 8), rng)
    assert not plan._trees
    assert sampled_output_test(v, 20_000, rng).pvalue > 1e-4
    assert plan._trees and all(trusted for _, trusted in plan._trees.values())
