"""optimal-wor at n = 2: the boundary-mark rule (exact law, its fallback, its aggregates at V = 20,000)."""

import numpy as np
import pytest

from mdsd_cli import optimal_acceptance, zipf_pairs
from mdsd_cli.verifiers import enumerated_rate, output_distribution
from mdsd_cli.verifiers.optimal import OptimalWOR

from .conftest import random_pair


@pytest.fixture(autouse=True)
def _boundary_rule(monkeypatch):
    """These tests are about the boundary-mark rule: pairs off the nested chords."""
    import mdsd_cli.verifiers.optimal.wor as optimal

    monkeypatch.setattr(optimal, "PAIR_CHORDS", False)


def _hard_pair(rng, kind):
    """Small pairs with ties, zeros, q near 1 and one-hot targets."""
    V = int(rng.integers(2, 9))
    p, q = random_pair(rng, V)
    if kind == 1:  # q near 1 on one token
        q = np.full(V, 1e-3 * rng.random())
        q[rng.integers(V)] = 1.0
        q /= q.sum()
    elif kind == 2:  # tied ratios p/q on a group
        k = int(rng.integers(1, V + 1))
        p[:k] = q[:k] * (p[:k].sum() / max(q[:k].sum(), 1e-300))
        p /= p.sum()
    elif kind == 3:  # one-hot target
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
    elif kind == 4:  # rounded masses: many exact ties in p and q
        p = np.round(p * 4) + 1e-9
        q = np.round(q * 4) + (q > 0) * 1e-9
        p, q = p / p.sum(), q / q.sum()
    return p, q


def test_boundary_rule_is_exact_and_optimal_on_hundreds_of_small_cases():
    rng = np.random.default_rng(2026)
    fast = fallback = cases = 0
    for trial in range(400):
        p, q = _hard_pair(rng, trial % 5)
        v = OptimalWOR(p, q, 2)
        if v.info["method"] != "boundary marks":  # one draft (q on a single token)
            continue
        cases += 1
        fast += v.info["fast_blocks"]
        fallback += v.info["fallback_blocks"]
        assert np.abs(output_distribution(v) - p).max() <= 1e-12, (p, q)
        bound = optimal_acceptance(p, q, 2, sampler="wor", solver="subsets")
        assert enumerated_rate(v) == pytest.approx(bound, abs=1e-9), (p, q, v.info)
    assert cases > 300
    assert fast >= 0.9 * (fast + fallback), (fast, fallback)


def test_boundary_choice_uses_the_order_of_the_drafts():
    """The first draft's mark decides: P(first wins) differs between (y, z) and (z, y)."""
    rng = np.random.default_rng(3)
    seen = False
    for _ in range(50):
        p, q = random_pair(rng, 6, zeros=False)
        v = OptimalWOR(p, q, 2)
        tuples, _ = v.draft_sampler.tuple_law(q, 2)
        z = v.choice(tuples)
        swapped = v.choice(tuples[:, ::-1])
        assert np.allclose(z.sum(axis=1), 1.0)
        same = v.block[tuples[:, 0]] == v.block[tuples[:, 1]]
        if same.any() and np.abs(z[same, 0] - swapped[same, 1]).max() > 1e-6:
            seen = True
    assert seen


@pytest.mark.parametrize("enumerable", [True, False])
def test_fallback_blocks_stay_exact(monkeypatch, enumerable):
    """Blocks whose check fails (here: forced on every other block) use Luce weights, by
    enumeration or (as at full vocabulary) by quadrature."""
    import mdsd_cli.verifiers.optimal.boundary as boundary
    import mdsd_cli.verifiers.optimal.wor as optimal

    if not enumerable:
        monkeypatch.setattr(optimal, "MAX_WOR_SETS", 0)

    real = boundary.build_block
    calls = {"n": 0}

    def every_other(*args, **kwargs):
        calls["n"] += 1
        return None if calls["n"] % 2 else real(*args, **kwargs)

    monkeypatch.setattr(boundary, "build_block", every_other)
    rng = np.random.default_rng(17)
    used = 0
    for trial in range(40):
        p, q = _hard_pair(rng, trial % 5)
        v = OptimalWOR(p, q, 2)
        if v.info["method"] != "boundary marks":
            continue
        used += v.info["fallback_blocks"]
        assert np.abs(output_distribution(v) - p).max() <= 1e-12
        assert enumerated_rate(v) == pytest.approx(optimal_acceptance(p, q, 2, sampler="wor", solver="subsets"),
                                                   abs=1e-9)
    assert used > 20


def _aggregate_check(rule, t_block):
    """From the windows alone: the marks' r-mass below each b_i is b_i (sum_j r_j pi_j = mu),
    and r_j (L_q + a_j) + q_j (L_r + b_j) - r_j q_j = t_j."""
    m = rule.tokens.size
    v = np.concatenate(([0.0], np.cumsum(rule.q)))
    R = float(rule.r.sum())
    C = np.concatenate(([0.0], rule.b, [R]))
    IC = np.concatenate(([0.0], np.cumsum(v * np.diff(C))))
    owner = np.repeat(np.arange(m), np.diff(rule.ptr))
    width = rule.hi - rule.lo
    length = np.bincount(owner, weights=width, minlength=m)
    np.testing.assert_allclose(length, rule.r, rtol=1e-9)
    integral = np.interp(rule.hi, C, IC) - np.interp(rule.lo, C, IC)
    a = np.bincount(owner, weights=integral, minlength=m) / length
    # marks below s: each piece carries r_j / length_j per unit of s
    density = rule.r[owner] / length[owner]
    below = np.array([(density * np.clip(np.minimum(rule.hi, s) - rule.lo, 0.0, None)).sum() for s in rule.b])
    np.testing.assert_allclose(below, rule.b, rtol=1e-9, atol=1e-12 * R)
    c = rule.r * (rule.later_q + a) + rule.q * (rule.later_r + rule.b) - rule.r * rule.q
    assert np.abs(c - t_block).sum() <= 1e-9 * t_block.sum() + 1e-15


def test_boundary_rule_at_twenty_thousand_tokens_without_enumeration():
    for seed in (4, 5):
        pair = zipf_pairs(1, 20_000, seed=seed)
        p, q = pair.target[0], pair.draft[0]
        v = OptimalWOR(p, q, 2)
        assert v.info["method"] == "boundary marks"
        assert v.info["fallback_blocks"] == 0, v.info
        big = [rule for rule in v._rule if rule is not None and rule.tokens.size > 1]
        assert big
        for rule in big:
            if rule.tokens.size <= 3000:  # the O(m * pieces) check below
                _aggregate_check(rule, v.target[rule.tokens])
        assert np.abs(v.candidate - v.target).sum() <= 1e-9
        assert v.exact_rate() == pytest.approx(optimal_acceptance(p, q, 2, sampler="wor"), abs=1e-9)


def test_boundary_rule_sampled_frequencies_match_the_exact_choice():
    from scipy import stats

    rng = np.random.default_rng(9)
    p, q = random_pair(np.random.default_rng(21), 6, zeros=False)
    v = OptimalWOR(p, q, 2)
    assert v.info["fallback_blocks"] == 0
    tuples, _ = v.draft_sampler.tuple_law(q, 2)
    first = v.choice(tuples)[:, 0]
    mixed = tuples[(first > 0.05) & (first < 0.95)]
    assert len(mixed) >= 4
    for drafts in mixed[:6]:
        law = v.output_law(drafts)
        out = v.sample(np.tile(drafts, (20_000, 1)), rng)
        counts = np.bincount(out, minlength=v.V)
        keep = law > 0
        assert counts[~keep].sum() == 0
        assert stats.chisquare(counts[keep], law[keep] * 20_000).pvalue > 1e-4
