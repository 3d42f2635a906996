"""Performance plumbing: batched = unbatched, compiled = pure numpy, and the bench command runs.

Speed itself is measured by ``mdsd bench`` (ratios in one run), never asserted here.
"""

import io

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mdsd_cli import acceptance_rate, optimal_acceptance
from mdsd_cli._malloc import tune_allocator
from mdsd_cli._wor_kernel import pair_hit_chain, wor_hit_chain
from mdsd_cli.bench import FIGURES, BenchConfig, random_pairs, run_benchmarks
from mdsd_cli.cli.app import app

from .conftest import random_pair


def test_batched_acceptance_rate_equals_row_by_row():
    rng = np.random.default_rng(0)
    P, Q = zip(*(random_pair(rng, 30, zeros=False) for _ in range(6)))
    P, Q = np.array(P), np.array(Q)
    for name, n in (("rrs", 3), ("kseq", 3), ("nss", 2), ("greedy", 3), ("hub", 2)):
        batch = acceptance_rate(name, P, Q, n)
        assert batch.shape == (6,)
        np.testing.assert_allclose(batch, [acceptance_rate(name, P[i], Q[i], n) for i in range(6)], atol=0)
    means, errors = acceptance_rate("rrsw", P, Q, 3, method="monte-carlo", samples=3000, rng=4)
    streams = np.random.default_rng(4).spawn(6)
    for i in range(6):
        m, e = acceptance_rate("rrsw", P[i], Q[i], 3, method="monte-carlo", samples=3000, rng=streams[i])
        assert (means[i], errors[i]) == (m, e)


def test_compiled_kernels_equal_pure_numpy(monkeypatch):
    P, Q = random_pairs(5, 3000, seed=1)
    compiled = {s: optimal_acceptance(P, Q, 4, sampler=s) for s in ("iid", "wor", "greedy")}
    order = np.argsort(-P[0] / Q[0])
    hit = wor_hit_chain(Q[0][order], 8)
    lopsided = Q[1] * 1e-3
    lopsided[7] = 1.0
    lopsided /= lopsided.sum()
    pairs = [pair_hit_chain(Q[1][order]), pair_hit_chain(lopsided[order]), pair_hit_chain(np.array([1.0, 5e-324]))]
    monkeypatch.setenv("MDSD_DISABLE_NUMBA", "1")
    for s, values in compiled.items():
        np.testing.assert_allclose(optimal_acceptance(P, Q, 4, sampler=s), values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(wor_hit_chain(Q[0][order], 8), hit, rtol=0, atol=1e-12)
    for got, qs in zip(pairs[:2], (Q[1][order], lopsided[order])):  # the same sums in the same order
        np.testing.assert_allclose(pair_hit_chain(qs), got, rtol=0, atol=1e-15)
    assert pairs[2] is None and pair_hit_chain(np.array([1.0, 5e-324])) is None


@pytest.mark.parametrize("case", ["random", "ties", "specials", "denormal", "tiny", "large", "equal", "clusters",
                                  "clusters-large", "race", "few-at-limit", "few-past-limit", "few-specials"])
def test_radix_argsort_is_numpys_stable_argsort(case):
    from mdsd_cli._radix import stable_argsort

    rng = np.random.default_rng(7)
    keys = {"random": rng.standard_normal(5000),
            "ties": np.round(rng.random(4000), 2) * rng.choice([-1.0, 1.0], 4000),
            "specials": rng.choice([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 5e-324, -5e-324], 3000),
            "denormal": rng.random(2000) * 1e-310 - 5e-311,
            "tiny": np.array([2.0, 1.0]),
            "large": rng.random(200_000) ** 3,
            "equal": np.full(1000, 0.25),
            # far-apart clusters: the top digits leave one cluster in long runs of distinct keys (finished by
            # their lower digits), the other in short ones (by insertion)
            "clusters": np.where(rng.random(5000) < 0.5, 1e-300 * rng.random(5000), 1.0 + rng.random(5000) * 1e-9),
            "clusters-large": np.where(rng.random(30_000) < 0.5, -3.0, 1.0 + rng.random(30_000) * 1e-12),
            # a race table's keys (four children at V = 2,380): ~130 values tied by the hundred, two top digits
            "race": rng.permutation(np.repeat(-rng.random(130) * 10.0 ** rng.integers(-3, 3, 130), 74))[:9520],
            # counted rather than radix-sorted up to n / 4 distinct keys (_few_argsort), radix-sorted past it
            "few-at-limit": rng.random(595)[rng.permutation(np.concatenate((np.arange(595), rng.integers(595, size=1785))))],
            "few-past-limit": rng.random(596)[rng.permutation(np.concatenate((np.arange(596), rng.integers(596, size=1784))))],
            "few-specials": rng.choice([0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, -5e-324, 1.0, -1.0, 2.0], 500)}[case]
    got = stable_argsort(keys)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))


def test_radix_sorts_leave_what_they_do_not_sort_to_numpy():
    """Found by review: int64 keys above 2^53 are not float64 keys, and negative words sort last as unsigned
    ones; both go to numpy's sorts."""
    from mdsd_cli._radix import sort_words, stable_argsort

    np.testing.assert_array_equal(stable_argsort(np.array([2**53 + 1, 2**53])), [1, 0])
    words = np.array([5, -1, 3, -(2**62)], dtype=np.int64)
    sort_words(words)
    np.testing.assert_array_equal(words, [-(2**62), -1, 3, 5])


def test_float_words_sort_as_numpy_sorts_the_floats():
    """The word map the radix sorts use (in place for the chain's set-up, on a copy elsewhere): words in numpy's
    order of the floats, signed zeros as one word, NaN last as one word, denormals and infinities in order, compiled
    or not; the copy leaves its keys as they were."""
    from mdsd_cli._radix import _float_words, _float_words_into

    rng = np.random.default_rng(4)
    x = np.concatenate(([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1.0, -1.0, np.nan],
                        rng.standard_normal(500) * 10.0 ** rng.integers(-300, 300, 500)))
    keep = x.copy()
    words = _float_words(x)
    np.testing.assert_array_equal(x, keep)  # the copy's keys untouched (NaN compares equal here)
    assert words[0] == words[1] and words[4] == words[9] == words.max()
    order = np.argsort(x + 0.0, kind="stable")
    assert np.array_equal(np.argsort(words, kind="stable"), order)
    assert (np.diff(words[order][:-2].astype(np.float64)) >= 0).all()
    for fn in (_float_words_into, getattr(_float_words_into, "py_func", _float_words_into)):
        np.testing.assert_array_equal(fn(x.copy()), words)


@pytest.mark.parametrize("V", [2, 3, 2380, 152_064])
def test_radix_word_sort_is_numpys_sort(V, monkeypatch):
    from mdsd_cli._radix import sort_words
    from mdsd_cli.samplers import packed_ratio_order

    rng = np.random.default_rng(V)
    words = rng.integers(0, 2**63 - 1, size=V, dtype=np.int64)
    words[: V // 3] = words[0]  # ties
    words[V // 3 : V // 2] = 2**62 + rng.integers(0, 2**20, size=V // 2 - V // 3)  # a narrow cluster: long runs
    got = words.copy()
    sort_words(got)
    np.testing.assert_array_equal(got, np.sort(words))
    P, Q = rng.dirichlet(np.ones(V), size=3), rng.dirichlet(np.ones(V), size=3)
    P[:, : V // 2] = Q[:, : V // 2]  # tied ratios, and p = q = 0 tokens (NaN keys) below
    P[0, -1] = Q[0, -1] = 0.0
    rows = packed_ratio_order(P, Q)
    for r in range(3):
        key = np.abs(Q[r] / np.where(P[r] > 0, P[r], 1.0))
        key[P[r] == 0] = np.inf
        assert sorted(rows[r].tolist()) == list(range(V))
        assert (np.diff(key[rows[r]]) >= -1e-12 * key[rows[r]][1:]).all()  # ascending up to the packed bits
    monkeypatch.setenv("MDSD_DISABLE_NUMBA", "1")  # numpy's sort: the very same words
    np.testing.assert_array_equal(packed_ratio_order(P, Q), rows)


def test_iid_scan_kernel_keeps_canonical_prefixes_under_ties():
    # p/q ties at the minimising boundary: the reported prefix is the canonical one
    p = np.array([0.3, 0.3, 0.2, 0.2])
    q = np.array([0.25, 0.25, 0.25, 0.25])
    from mdsd_cli import solve_optimal_acceptance

    res = solve_optimal_acceptance(p, q, 1)
    assert res.value == pytest.approx(0.9, abs=1e-15)
    assert res.token_set.tolist() == [0, 1]


def test_run_benchmarks_quick_gives_every_figure():
    config = BenchConfig.quick()
    from dataclasses import replace

    config = replace(config, repeats=1, vocab=3000, batch_vocab=500, batch_pairs=8, mc_samples=2000,
                     mc_vocab=500, lp_vocab=12, memory_pairs=4)
    rows = run_benchmarks(config)
    figures = [r["figure"] for r in rows]
    assert figures[:3] == ["alpha* iid chain", "alpha* greedy", "alpha* wor chain"]
    assert {"exact rate rrs", "exact rate kseq", "exact rate nss", "exact rate greedy", "rrsw monte-carlo",
            "chain vs primal-lp", "peak memory, alpha* iid batch", "alpha* iid chain, batch"} <= set(figures)
    for r in rows:
        assert r["ratio"] > 0 and r["status"] in ("pass", "short") and r["median_s"] >= 0
    lp = next(r for r in rows if r["figure"] == "chain vs primal-lp")
    assert "|alpha_lp - alpha_chain| = " in lp["note"]  # the agreement of the two values is reported
    assert FIGURES == ("iid", "greedy", "wor", "batch", "rates", "rrsw", "lp", "memory", "optimal", "decode",
                       "expected", "audit", "device")
    expected = [r for r in rows if r["figure"].startswith("expected tau(c)")]
    assert [r["figure"].split(", ")[1] for r in expected] == ["exact", "exact", "sampled drafts",
                                                              "monte-carlo"]
    for r in expected:  # the whole cost of one context against one decode step timed in the same run
        assert r["baseline"] == "one decode step" and r["baseline_s"] > 0 and "per-context standard error" in r["note"]
    audit = {r["figure"]: r for r in rows if "audit" in r["figure"]}
    assert list(audit) == ["audit overhead, numpy rrs", "audit harness, trivial callable"]
    for r in audit.values():  # the harness against the same calls made in a plain loop, in the same run
        assert r["baseline"] == "the same calls in a loop" and r["baseline_s"] > 0 and "calls/s" in r["note"]
    assert audit["audit harness, trivial callable"]["ratio"] == pytest.approx(
        1 / audit["audit harness, trivial callable"]["median_s"])
    decode = [r for r in rows if r["figure"].startswith("decode overhead")]
    assert [(r["figure"].split()[2], r["vocab"]) for r in decode] == [
        (v, V) for V in (2380, 3000) for v in ("rrs,", "kseq,", "optimal-iid,")]
    assert all("models excluded" in r["note"] and r["pairs"] > 0 for r in decode)
    trees = [r for r in rows if r["figure"].startswith("tree verifier")]
    assert [r["figure"].split(",")[0] for r in trees] == [
        f"tree verifier {v}:{s}" for _ in ("synthetic", "pydoc-ngram") for _ in ("2x4", "4x3") for s in ("iid", "wor")
        for v in ("select-block", "select-traversal", "select-race")]
    assert [r["figure"].split(", ")[2] for r in trees] == ["synthetic"] * 12 + ["pydoc-ngram"] * 12
    for r in trees:  # against traversal's time per step, measured in the same run
        assert r["baseline"] == "traversal per step" and r["baseline_s"] > 0
        assert r["ratio"] == pytest.approx(r["median_s"] / r["baseline_s"])
    optimal = [r for r in rows if r["figure"].startswith("optimal")]
    assert [(r["figure"].split(" per pair")[0], r["n"]) for r in optimal] == [
        ("optimal-iid", 2), ("optimal-iid", 4), ("optimal-iid", 8), *[("optimal-wor", n) for n in (2, 4, 8)
                                                                      for _ in range(7)],
        ("optimal-iid", 4), ("optimal-iid", 4), ("optimal-iid", 4), ("optimal-iid", 5), ("optimal-iid", 5),
        ("optimal-iid", 5)]
    wor = [r for r in optimal if r["figure"].startswith("optimal-wor")]
    for n in (2, 4, 8):  # six shapes against alpha*_wor of the same pair, then the worst of them
        rows_n = [r for r in wor if r["n"] == n]
        assert all(r["baseline"] == "alpha*_wor of the same pair" for r in rows_n)
        assert rows_n[-1]["figure"] == "optimal-wor per pair, worst of 6 shapes"
        assert rows_n[-1]["ratio"] == max(r["ratio"] for r in rows_n[:-1])
        assert all("x one argsort" in r["note"] for r in rows_n)
    for r in optimal:  # the whole cost per pair, split into set-up and step, and the rate at alpha*
        assert "set-up" in r["note"] and "step" in r["note"] and r["baseline_s"] > 0
        gap = float(r["note"].split("alpha* - rate = ")[1].split(";")[0])
        assert abs(gap) < 1e-9


def test_bench_command_table_and_bad_figure():
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "--quick", "--only", "iid", "--only", "rates", "--repeats", "1",
                                 "--vocab", "2000"])
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert list(df.figure) == ["alpha* iid chain", "exact rate rrs", "exact rate kseq", "exact rate nss",
                               "exact rate greedy"]
    assert "cores" in result.stderr
    bad = runner.invoke(app, ["bench", "--only", "everything"])
    assert bad.exit_code == 2 and "unknown figure" in bad.stderr


def test_allocator_tuning_is_idempotent():
    first = tune_allocator()
    assert tune_allocator() == first


def test_packed_value_sort_gives_the_canonical_ratio_order():
    from mdsd_cli.samplers import packed_ratio_order, ratio_order

    P, Q = random_pairs(3, 5000, seed=2)
    P[:, :10] = Q[:, :10] * 2.0  # exact ties in p/q
    Q[:, 10:20] = 0.0  # q = 0 < p: first
    P[:, 20:30] = 0.0  # p = 0: last
    P[:, 30:40] = Q[:, 30:40] = 0.0  # 0/0: very last
    P /= P.sum(axis=1, keepdims=True)
    Q /= Q.sum(axis=1, keepdims=True)
    packed, exact = packed_ratio_order(P, Q), ratio_order(P, Q)
    for r in range(3):
        assert sorted(packed[r]) == list(range(5000))
        key = np.abs(Q[r] / np.where(P[r] > 0, P[r], np.nan))
        key = np.where(np.isnan(key) & (Q[r] > 0), np.inf, key)
        along = key[packed[r]]
        finite = np.isfinite(along)
        # sorted up to the 2^-(52 - 13) relative precision the packing keeps
        assert (np.diff(along[finite]) >= -1e-11 * along[finite][1:]).all()
        # the special tokens are where the canonical order puts them
        assert set(packed[r][:10]) == set(exact[r][:10]) == set(range(10, 20))
        assert set(packed[r][-10:]) == set(range(30, 40))


def test_negative_zero_entries_behave_like_zero():
    rng = np.random.default_rng(9)
    for V in (50, 5000):
        p, q = random_pair(rng, V, zeros=False)
        p[:3] = 0.0
        q[3:6] = 0.0
        p /= p.sum()
        q /= q.sum()
        neg_p, neg_q = p.copy(), q.copy()
        neg_p[:3] = -0.0
        neg_q[3:6] = -0.0
        for sampler in ("iid", "wor", "greedy"):
            assert optimal_acceptance(neg_p, neg_q, 3, sampler=sampler) == optimal_acceptance(p, q, 3, sampler=sampler)
        for name in ("rrs", "kseq"):
            assert acceptance_rate(name, neg_p, neg_q, 3) == pytest.approx(acceptance_rate(name, p, q, 3), abs=1e-15)


def test_the_device_figure_times_torch_against_numpy_in_the_same_run():
    """Issue 27: torch verification on the CPU per verified node, against numpy's walk timed in the same run."""
    from dataclasses import replace

    config = replace(BenchConfig.quick(), repeats=1, vocab=3000, decode_tokens=6)
    rows = run_benchmarks(config, figures=("device",))
    cpu = [r for r in rows if r["figure"].startswith("torch verification on CPU")]
    assert [(r["figure"].split(", ")[1], r["vocab"]) for r in cpu] == [
        (v, V) for V in (2380, 3000) for v in ("rrs", "kseq", "rrsw")]
    for r in cpu:
        assert r["baseline"] == "numpy walk (same run)" and r["baseline_s"] > 0 and r["pairs"] > 0
        assert r["ratio"] == pytest.approx(r["median_s"] / r["baseline_s"])
        assert "first device decode of the process" in r["note"]
