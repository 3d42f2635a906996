"""``mdsd audit``: mdsd's verifiers pass with no false alarm, deliberately broken ones are caught and located,
the test's identities hold exactly, the function's failures are reported per case, and loading fails clearly."""

import io
import math
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mdsd_cli.audit import (
    adapt_callable,
    as_callable,
    audit_verifier,
    battery_cases,
    case_inputs,
    load_callable,
    make_case,
    random_cases,
    replay,
)
from mdsd_cli.audit.betting import DirectionalBettingTest
from mdsd_cli.audit.examples import _draw as draw
from mdsd_cli.audit.examples import (
    accept_confident_top,
    independent_tests,
    kseq_plain_residual,
    rrs,
    rrs_skipping_repeats,
    rrsw,
    rrsw_against_q,
)
from mdsd_cli.audit.strata import stratify
from mdsd_cli.cli.app import app
from mdsd_cli.errors import CallableError, InputError
from mdsd_cli.samplers import get_sampler
from mdsd_cli.verifiers import VERIFIERS

from .conftest import SUBPROCESS_TIMEOUT, sigint_default

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


# --- deliberately broken verifiers, written as a third party would: mdsd_cli.audit.examples ------------------

def has_repeat(drafts):
    return len(set(drafts)) < len(drafts)


#: Cases where a repeated draft can be rejected (so skipping its residual update changes the output law).
REPEATS_REJECTED = {"repeated-drafts", "target-zeros", "vocab-at-most-n", "dirichlet-5", "dirichlet-10"}
BROKEN = [
    # (function, sampler, n, the cases it may be caught on (None: any), what the named tuple must show)
    (accept_confident_top, "iid", 3, {"peaked-target"}, lambda d: 0 in d),
    (rrs_skipping_repeats, "iid", 3, REPEATS_REJECTED, has_repeat),
    (kseq_plain_residual, "iid", 3, None, lambda d: True),
    (independent_tests, "iid", 2, None, lambda d: True),
    (rrsw_against_q, "wor", 3, None, lambda d: len(d) == 3),
]


@pytest.mark.parametrize("fn, sampler, n, cases, shows", BROKEN,
                         ids=["accept-confident-top", "rrs-skipping-repeats", "kseq-plain-residual", "independent-tests",
                              "rrsw-against-q"])
def test_broken_verifiers_are_caught_with_the_case_and_tuple_named(fn, sampler, n, cases, shows):
    report = audit_verifier(fn, sampler=sampler, n=n, budget=1_000_000, seed=0, fail_fast=True)
    assert not report.passed and report.calls <= 1_000_000
    caught = report.lossy[0]
    assert cases is None or caught.case.name in cases, [c.case.name for c in report.lossy]
    # caught by the betting test: tv well above noise; by the exact constant-output test: sooner, so less so
    assert caught.pvalue <= report.level and caught.tv > (2 if caught.reason.startswith("all ") else 3) * caught.tv_noise
    head = f"case {caught.index} {caught.case.name}: "
    assert report.details()[0].startswith((head + "output law departs from p", head + "acceptance ",
                                           head + "all ")), report.details()
    worst = caught.evidence[0]
    assert shows(worst.drafts), worst
    assert worst.contribution > 0 and worst.calls > 0


def test_correct_plain_functions_pass_where_their_broken_versions_fail():
    for fn, sampler in ((rrs, "iid"), (rrsw, "wor")):
        report = audit_verifier(fn, sampler=sampler, n=3, budget=120_000, seed=1)
        assert report.passed, report.details()


def test_the_failing_tuple_replays_exactly():
    report = audit_verifier(rrs_skipping_repeats, sampler="iid", n=3, budget=60_000, seed=4)
    caught = report.lossy[0]
    assert caught.design == "tuples"
    for evidence in caught.evidence:
        counts = replay(rrs_skipping_repeats, caught.case, evidence.drafts, seed=evidence.seed, calls=evidence.calls)
        assert np.array_equal(counts, evidence.output_counts)


def rrs_triple(p, q, drafts, rng):
    """Broken: the residual is not updated after a draft that is the third copy of its token."""
    target, copies = p, {}
    for x in drafts:
        copies[int(x)] = copies.get(int(x), 0) + 1
        if rng.random() * q[x] < target[x]:
            return int(x)
        if copies[int(x)] < 3:
            residual = np.maximum(target - q, 0.0)
            target = residual / residual.sum()
    return draw(target, rng)


def rrs_triple_law(p, q, drafts):
    out, target, reach, copies = np.zeros(p.size), p, 1.0, {}
    for x in drafts.tolist():
        copies[x] = copies.get(x, 0) + 1
        accept = min(1.0, target[x] / q[x])
        out[x] += reach * accept
        reach *= 1.0 - accept
        if copies[x] < 3:
            residual = np.maximum(target - q, 0.0)
            target = residual / residual.sum()
    return out + reach * target


def test_the_tuples_named_are_those_that_carry_the_failure_and_replay_it():
    """rrs_triple loses only on (x, x, x); ranking by the distance of each tuple's law from p named (1, 2, 2),
    (2, 1, 2), (1, 2, 3), the same tuples and scores a correct rrs gets. Measured against the lossless rrs, the
    tuples named are the carriers, with their exact shares of 2 TV."""
    case = [c for c in battery_cases(3) if c.name == "target-zeros"]
    p, q = case[0].p, case[0].q
    tuples, prob = get_sampler("iid").tuple_law(q, 3)
    reference = as_callable("rrs", 3)
    laws = np.array([rrs_triple_law(p, q, t) for t in tuples])
    sign = np.sign(prob @ laws - p)
    share = {tuple(t): prob[i] * (laws[i] - reference.output_law(p, q, t)) @ sign for i, t in enumerate(tuples.tolist())}
    assert max(share, key=share.get) == (2, 2, 2)
    assert sum(share.values()) == pytest.approx(np.abs(prob @ laws - p).sum(), abs=1e-12)  # = 2 TV, exactly
    for seed in (0, 1):
        caught = audit_verifier(rrs_triple, sampler="iid", n=3, cases=case, budget=100_000, seed=seed).lossy[0]
        named = [e.drafts for e in caught.evidence]
        assert named[0] == (2, 2, 2) and all(len(set(d)) == 1 and share[d] > 0 for d in named), caught.evidence
        assert caught.evidence[0].total == pytest.approx(2 * caught.tv, rel=1e-9)  # what all the shares add up to
        for e in caught.evidence:
            assert e.contribution == pytest.approx(share[e.drafts], abs=4 * e.stratum_weight / math.sqrt(e.calls))
            assert e.reference == "mdsd:rrs" and "(vs mdsd:rrs); replay: seed" in e.describe()
        worst = caught.evidence[0]  # replayed longer, the tuple's output law is the broken one, not rrs's
        counts = replay(rrs_triple, caught.case, worst.drafts, seed=worst.seed + 1, calls=4_000) / 4_000
        assert np.abs(counts - worst.reference_law).sum() > 0.2
        assert np.abs(counts - rrs_triple_law(p, q, np.array(worst.drafts))).sum() < 0.1


# --- mdsd's own verifiers, as plain callables: no false alarm ---------------------------------------------------

@pytest.mark.parametrize("name", list(VERIFIERS))
def test_every_mdsd_verifier_passes_across_seeds(name):
    cls = VERIFIERS[name]
    for seed, n in enumerate((2,) * 3 if name == "hub" else (2, 3, 1)):
        report = audit_verifier(as_callable(name, n), sampler=cls.default_sampler, n=n, budget=4_800, seed=seed)
        assert report.passed, (name, n, seed, report.details())
        for c in report.cases:
            assert c.alpha_star >= c.acceptance - 6 * c.acceptance_se - 1e-12, (name, c.case.name)


def test_exact_laws_prove_mdsd_verifiers_lossless_and_disprove_a_broken_law():
    for name, sampler in (("kseq", "iid"), ("rrsw", "wor"), ("hub", "hub")):
        fn = as_callable(name, 2)
        report = audit_verifier(fn, sampler=sampler, n=2, budget=4_800, seed=0, law=fn.output_law)
        assert report.passed
        exact = [c for c in report.cases if c.design != "sampled"]
        assert exact and all(c.exact_error <= 1e-12 and c.acceptance_se == 0.0 for c in exact)
        rate = VERIFIERS[name](exact[0].case.p, exact[0].case.q, 2).exact_rate()
        if rate is not None:
            assert exact[0].acceptance == pytest.approx(rate, abs=1e-12)

    def independent_law(p, q, drafts):  # the exact law of independent_tests
        out, reach = np.zeros(p.size), 1.0
        for x in drafts:
            a = min(1.0, p[x] / q[x])
            out[x] += reach * a
            reach *= 1.0 - a
        residual = np.maximum(p - q, 0.0)
        return out + reach * residual / residual.sum()

    report = audit_verifier(independent_tests, sampler="iid", n=2, budget=4_800, seed=0, law=independent_law)
    assert all("exact output law differs" in c.reason for c in report.lossy)
    assert len(report.lossy) >= 6 and max(c.exact_error for c in report.lossy) > 0.1
    for c in report.lossy:  # the tuples named carry their exact law, largest share of 2 TV first
        assert c.evidence and all(e.law is not None and e.calls == 0 for e in c.evidence)
        shares = [e.contribution for e in c.evidence]
        assert shares == sorted(shares, reverse=True) and shares[-1] > 0
        e = c.evidence[0]
        assert np.allclose(e.law, independent_law(c.case.p, c.case.q, np.array(e.drafts)), atol=1e-15)

    def skipping_law(p, q, drafts):  # the exact law of rrs_skipping_repeats: rrs's law on the distinct drafts
        return rrs_law(p, q, list(dict.fromkeys(drafts.tolist())))

    def rrs_law(p, q, drafts):
        out, target, reach = np.zeros(p.size), p, 1.0
        for x in drafts:
            accept = min(1.0, target[x] / q[x])
            out[x] += reach * accept
            reach *= 1.0 - accept
            if reach == 0.0:
                return out
            residual = np.maximum(target - q, 0.0)
            target = residual / residual.sum()
        return out + reach * target

    assert audit_verifier(rrs, sampler="iid", n=3, budget=4_800, law=rrs_law).passed
    report = audit_verifier(rrs_skipping_repeats, sampler="iid", n=3, budget=4_800, law=skipping_law)
    caught = {c.case.name: c for c in report.lossy}
    assert set(caught) <= REPEATS_REJECTED and "repeated-drafts" in caught and "dirichlet-10" in caught
    for c in caught.values():  # each named tuple's exact share of 2 TV, relative to the lossless rrs
        tuples, prob = get_sampler("iid").tuple_law(c.case.q, 3)
        laws = np.array([skipping_law(c.case.p, c.case.q, t) for t in tuples])
        sign = np.sign(prob @ laws - c.case.p)
        for e in c.evidence:
            x = np.array(e.drafts)
            share = np.prod(c.case.q[x]) * (skipping_law(c.case.p, c.case.q, x) - rrs_law(c.case.p, c.case.q, x)) @ sign
            assert has_repeat(e.drafts) and share > 0 and e.contribution == pytest.approx(share, abs=1e-12)
            assert e.reference == "mdsd:rrs" and np.allclose(e.reference_law, rrs_law(c.case.p, c.case.q, x))
    assert "(vs mdsd:rrs) (exact law)" in report.details()[1]


# --- the statistics --------------------------------------------------------------------------------------------

def test_the_score_has_mean_zero_whenever_the_mixture_is_p():
    """E[Z] = sum_g pi_g sum_y L_g(y) Z(g, y) = 0 for any conditional laws mixing to p, for any plan."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        G, V = int(rng.integers(2, 8)), int(rng.integers(2, 7))
        w = rng.dirichlet(np.ones(G))
        laws = rng.dirichlet(np.full(V, 0.5), size=G)
        p = w @ laws
        test = DirectionalBettingTest(p, w)
        counts = rng.integers(0, 30, size=(G, V))
        plan = test.plan(counts, counts.sum(axis=1))
        if plan.direction is None:
            continue
        mean = sum(plan.allocation[g] * laws[g, y] * plan.scores(np.array([g]), np.array([y]))[0]
                   for g in range(G) for y in range(V))
        assert abs(mean) < 1e-12
        every = plan.scores(np.repeat(np.arange(G), V), np.tile(np.arange(V), G))
        assert (1.0 + plan.bets.max() * every).min() >= 0.5 - 1e-12  # every factor stays positive


def test_the_p_value_is_valid_under_the_null():
    """A function that outputs p exactly, on 300 random cases: P(p-value <= a) <= a (here far below)."""
    cases = random_cases(300, seed=3)

    def exact_sampler(p, q, drafts, rng):
        return draw(p, rng)

    report = audit_verifier(exact_sampler, sampler="iid", n=2, cases=cases, budget=300 * 400, seed=0, alpha=0.9)
    pvalues = np.array([c.pvalue for c in report.cases])
    for a in (0.05, 0.2, 0.5):
        assert (pvalues <= a).mean() <= a


def test_strata_weights_are_the_exact_draft_law_and_members_follow_it():
    q = np.array([0.5, 0.3, 0.15, 0.05])
    for name, n in (("iid", 3), ("wor", 3), ("greedy", 3), ("hub", 2)):
        sampler = get_sampler(name)
        fine = stratify(sampler, q, n, max_strata=10_000)
        tuples, prob = sampler.tuple_law(q, n)
        assert fine.kind == "tuples" and fine.stratum_weight.sum() == pytest.approx(1.0, abs=1e-15)
        assert sorted(map(tuple, fine.tuples.tolist())) == sorted(map(tuple, tuples[prob > 0].tolist()))
    coarse = stratify(get_sampler("iid"), q, 3, max_strata=30)
    assert coarse.kind == "multisets" and coarse.num_strata == 20 and coarse.num_tuples == 64
    members = coarse.draw_members(np.full(200_000, 1), np.random.default_rng(0))
    lo, hi = coarse.start[1], coarse.start[2]
    assert ((members >= lo) & (members < hi)).all()
    freq = np.bincount(members - lo, minlength=hi - lo) / members.size
    expected = coarse.weight[lo:hi] / coarse.stratum_weight[1]
    assert np.abs(freq - expected).max() < 0.01
    assert stratify(get_sampler("iid"), np.full(30, 1 / 30), 4, max_strata=100).kind == "sampled"


def test_an_impossible_output_is_proof_at_once_with_the_tuple_named():
    def leaks(p, q, drafts, rng):  # outputs its first draft when the target says 0 to it, on one tuple only
        if tuple(drafts) == (4, 4):
            return int(drafts[0])
        return rrs(p, q, drafts, rng)

    report = audit_verifier(leaks, sampler="iid", n=2, budget=120_000, seed=0)
    caught = {c.case.name: c for c in report.lossy}
    assert "target-zeros" in caught and caught["target-zeros"].impossible > 0
    assert caught["target-zeros"].pvalue == 0.0 or caught["target-zeros"].reason.startswith(
        f"{caught['target-zeros'].impossible} output(s) of target probability 0")
    assert caught["target-zeros"].evidence[0].drafts == (4, 4)


# --- the function's own failures, per case --------------------------------------------------------------------

def test_exceptions_and_bad_outputs_are_reported_per_case_and_the_rest_is_audited():
    def fussy(p, q, drafts, rng):
        if p.size == 4:
            raise ZeroDivisionError("no 4-token vocabularies here")
        return rrs(p, q, drafts, rng)

    report = audit_verifier(fussy, sampler="iid", n=2, budget=12_000, seed=0)
    errors = {c.case.name: c.reason for c in report.errors}
    assert set(errors) == {"one-hot-target", "one-hot-draft", "float-floor"}
    assert all(r.startswith("the function raised ZeroDivisionError: no 4-token vocabularies here on drafts (")
               for r in errors.values())
    assert not report.lossy and not report.passed and "failed on 3 of 12 cases" in report.verdict()
    cases = [make_case("one", [0.5, 0.5], [0.5, 0.5])]
    for bad, fragment in ((lambda p, q, d, r: 2.5, "returned 2.5, not a token id"),
                          (lambda p, q, d, r: None, "returned None, not a token id"),
                          (lambda p, q, d, r: 7, "returned token 7, outside 0..1"),
                          (lambda p, q, d, r: (int(d[0]), 1), "with accepted index 1, but draft 1 of"),
                          (lambda p, q, d, r: (0, 1, 2), "of length 3")):
        report = audit_verifier(bad, sampler="iid", n=2, cases=cases, budget=400, seed=0)
        assert report.errors and fragment in report.errors[0].reason, report.errors[0].reason
    writes = audit_verifier(lambda p, q, d, r: p.__setitem__(0, 1.0), sampler="iid", n=2, cases=cases, budget=400)
    assert "read-only" in writes.errors[0].reason


def test_too_small_a_budget_is_refused_and_the_minimum_has_power():
    """With 200 calls a case only learned where to look: a function always returning token 0 (TV 0.5) passed."""
    const = [make_case("half", [0.5, 0.5], [0.5, 0.5])]
    with pytest.raises(InputError, match="give at least 400$"):
        audit_verifier(lambda p, q, d, r: 0, sampler="iid", n=2, cases=const, budget=399)
    caught = audit_verifier(lambda p, q, d, r: 0, sampler="iid", n=2, cases=const, budget=400).cases[0]
    assert caught.status == "lossy" and caught.pvalue <= 0.01


def test_acceptance_above_alpha_star_proves_a_loss_and_never_alarms_for_a_lossless_function():
    # rrs on greedy drafts: lossy, and it accepts far more often than any lossless verifier can
    report = audit_verifier(rrs, sampler="greedy", n=2, budget=4_800, seed=0)
    above = [c for c in report.lossy if c.reason.startswith("acceptance ")]
    assert above and all(c.acceptance > c.alpha_star and "which no lossless verifier exceeds" in c.reason
                         for c in above)
    # the bound under the null: hits of rate exactly alpha* (the optimum a lossless verifier reaches)
    from mdsd_cli.audit.betting import AcceptanceBoundTest

    rng = np.random.default_rng(0)
    pvalues = []
    for _ in range(400):
        alpha_star, ratio = rng.uniform(0.05, 0.95), rng.choice([0.5, 2.0], size=2_000)
        test = AcceptanceBoundTest(alpha_star)
        test.observe(ratio, (rng.random(2_000) < alpha_star / ratio).astype(float))  # E[ratio * hit] = alpha*
        pvalues.append(test.pvalue)
    pvalues = np.array(pvalues)
    assert all((pvalues <= a).mean() <= a for a in (0.05, 0.2, 0.5))
    test = AcceptanceBoundTest(0.5)
    test.observe(np.ones(400), (rng.random(400) < 0.6).astype(float))
    assert test.pvalue < 1e-3  # and it has power: acceptance 0.6 against alpha* = 0.5


def test_a_function_that_exits_is_an_error_of_its_case_and_the_call_replays():
    def exits(p, q, drafts, rng):
        if p.size == 4:
            sys.exit(0)
        return rrs(p, q, drafts, rng)

    report = audit_verifier(exits, sampler="iid", n=2, budget=12_000, seed=0)
    assert {c.case.name for c in report.errors} == {"one-hot-target", "one-hot-draft", "float-floor"}
    assert all(c.reason.startswith("the function raised SystemExit: 0 on drafts (") for c in report.errors)

    def flaky(p, q, drafts, rng):  # fails at random, on one tuple only
        if tuple(drafts) == (1, 1) and rng.random() < 0.05:
            raise RuntimeError("flaky")
        return rrs(p, q, drafts, rng)

    cases = [make_case("three", [0.2, 0.5, 0.3], [0.3, 0.4, 0.3])]
    failed = audit_verifier(flaky, sampler="iid", n=2, cases=cases, budget=4_000, seed=0).errors[0]
    seed, calls = (int(x.replace(",", "")) for x in re.search(r"replay: seed (\d+), ([\d,]+) calls\)$",
                                                               failed.reason).groups())
    assert calls > 1
    replay(flaky, failed.case, (1, 1), seed=seed, calls=calls - 1)  # the calls before it pass
    with pytest.raises(RuntimeError, match="flaky"):
        replay(flaky, failed.case, (1, 1), seed=seed, calls=calls)


def test_library_input_errors():
    for kwargs, fragment in (({"n": 0}, "number of drafts must be >= 1"),
                             ({"n": 3, "sampler": "hub"}, "n = 2 only"),
                             ({"n": 2, "alpha": 1.5}, "alpha must lie strictly between 0 and 1"),
                             ({"n": 2, "budget": 4_799}, "give at least 4,800"),
                             ({"n": 2, "cases": "every"}, "unknown cases 'every'"),
                             ({"n": 2, "dtype": "bfloat16"}, "unknown dtype 'bfloat16'")):
        with pytest.raises(InputError, match=fragment):
            audit_verifier(rrs, **{"sampler": "iid", **kwargs})
    with pytest.raises(InputError, match="must be callable"):
        audit_verifier(42, n=2)


# --- adapters and loading -------------------------------------------------------------------------------------

def test_torch_functions_on_batched_tensors_are_audited_like_numpy_ones():
    torch = pytest.importorskip("torch")

    def torch_rrs(p, q, drafts, generator):  # wants [1, V] and [1, k], returns a [1] tensor
        target = p[0]
        for x in drafts[0]:
            if torch.rand(1, generator=generator, dtype=p.dtype) * q[0, x] < target[x]:
                return x.reshape(1)
            residual = torch.clamp(target - q[0], min=0)
            target = residual / residual.sum()
        return torch.multinomial(target, 1, generator=generator)

    fn = adapt_callable(torch_rrs, framework="torch", batched=True)
    cases = battery_cases(2, dtype="float32")[:3]
    report = audit_verifier(fn, sampler="iid", n=2, cases=cases, budget=6_000, seed=0, dtype="float32")
    assert report.passed, report.details()
    seen_p, _, tested_p, _ = case_inputs(cases[0], "float32")
    assert seen_p.dtype == np.float32 and tested_p.sum() == pytest.approx(1.0, abs=1e-15)
    broken = adapt_callable(lambda p, q, d, g: d[0, :1], framework="torch", batched=True)  # always the first draft
    assert not audit_verifier(broken, sampler="iid", n=2, cases=cases, budget=6_000, dtype="float32").passed


def test_a_torch_function_that_rewrites_its_inputs_gets_fresh_ones_and_is_told():
    """MCSD-style code turns p into the residual in place; with shared tensors every later call of the case
    would see a wrong p and the audit would call a lossless function lossy."""
    torch = pytest.importorskip("torch")

    def rewriting_rrs(p, q, drafts, generator):
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        token = rrs(p.numpy().copy(), q.numpy(), drafts.numpy(), rng)
        p.sub_(q).clamp_(min=0.0)  # the residual, written into the caller's p
        p.div_(p.sum().clamp(min=1e-300))
        return token

    fn = adapt_callable(rewriting_rrs, framework="torch")
    report = audit_verifier(fn, sampler="iid", n=2, cases=battery_cases(2)[:4], budget=8_000, seed=0)
    assert report.passed, report.details()
    assert fn.mutated == ["p"] and any("writes into its input p in place" in note for note in report.notes)
    plain = adapt_callable(lambda p, q, d, g: rrs(p.numpy(), q.numpy(), d.numpy(), np.random.default_rng(0)),
                           framework="torch")
    audit_verifier(plain, sampler="iid", n=2, cases=battery_cases(2)[:2], budget=4_000)
    assert plain.mutated == []


def top_when_peaked(p, q, drafts, rng):
    """Returns the target's top token whenever p(top) > 0.999, rrs otherwise: lossy by 1 - p(top)."""
    top = int(np.argmax(p))
    return top if p[top] > 0.999 else rrs(p, q, drafts, rng)


def test_outputs_that_never_vary_are_caught_by_the_exact_test_and_tv_noise_is_not_zero():
    report = audit_verifier(top_when_peaked, sampler="iid", n=3, budget=100_000, seed=0)
    caught = {c.case.name: c for c in report.lossy}
    assert set(caught) == {"peaked-target"}, report.details()
    c = caught["peaked-target"]
    assert c.reason.startswith("all ") and "token 0" in c.reason and c.pvalue <= report.level
    assert c.tv_noise > 0 and c.tv > 0
    # a lossless function whose outputs rarely vary is not called lossy for it, at any budget or seed
    for seed in range(3):
        assert audit_verifier(rrs, sampler="iid", n=3, cases=battery_cases(3)[:1], budget=20_000, seed=seed).passed
    # too small a budget for that case is said, with what it would take
    small = audit_verifier(rrs, sampler="iid", n=3, budget=12_000, seed=0)
    assert any(note.startswith("case peaked-target: 1,000 calls cannot detect") for note in small.notes)
    assert not audit_verifier(rrs, sampler="iid", n=3, budget=200_000, seed=0).notes


@pytest.mark.parametrize("w, m, p0", [((0.3, 0.7), (5, 5), 0.9), ((0.5, 0.5), (10, 1), 0.6),
                                      ((0.2, 0.8), (3, 30), 0.95), ((0.9, 0.1), (1, 40), 0.5),
                                      ((0.2, 0.3, 0.5), (4, 0, 9), 0.7)])
def test_the_constant_output_p_value_is_the_largest_chance_over_every_lossless_law(w, m, p0):
    """Brute force over a grid of stratum laws mixing to p: sup prod_g L_g(y)^m_g, summed over the two tokens."""
    from types import SimpleNamespace

    from mdsd_cli.audit.run import CaseRun

    run_ = object.__new__(CaseRun)
    run_.varied, run_.only_token = False, 0
    run_.strata = SimpleNamespace(stratum_weight=np.array(w))
    run_.stratum_calls = np.array(m)
    run_.p = np.array([p0, 1.0 - p0])
    w, m = np.array(w), np.array(m)

    def sup(target):  # a grid over all strata but one, that one solved from the constraint (each in turn)
        grid = np.linspace(0.0, 1.0, 401)
        best = 0.0
        for solved in range(len(w)):
            others = [g for g in range(len(w)) if g != solved]
            laws = np.stack(np.meshgrid(*[grid] * len(others), indexing="ij"), -1).reshape(-1, len(others))
            last = (target - laws @ w[others]) / w[solved]
            ok = (last >= -1e-12) & (last <= 1 + 1e-12)
            full = np.empty((int(ok.sum()), len(w)))
            full[:, others], full[:, solved] = laws[ok], np.clip(last[ok], 0.0, 1.0)
            if ok.any():
                best = max(best, float(np.max(np.prod(full ** m, axis=1))))
        return best

    brute = min(1.0, sup(p0) + sup(1.0 - p0))
    got = run_._constant_pvalue()
    assert brute - 1e-12 <= got <= brute + 0.02  # the grid can only miss the maximum from below


def test_exact_laws_off_by_rounding_are_told_apart_from_losses():
    fn = as_callable("rrs", 2)

    def law_off_by(size):
        def law(p, q, drafts):
            out = fn.output_law(p, q, drafts).copy()
            j = int(np.argmax(out))  # at least 1/V: moving `size` from it keeps a distribution
            out[j] -= size
            out[(j + 1) % out.size] += size
            return out
        return law

    exact = audit_verifier(fn, sampler="iid", n=2, budget=4_800, law=fn.output_law)
    assert exact.passed and exact.verdict().startswith("proven lossless on ")
    rounding = audit_verifier(fn, sampler="iid", n=2, budget=4_800, law=law_off_by(8.5e-9))
    assert rounding.passed and rounding.rounding and not rounding.lossy
    assert all("rounding level" in c.reason and 1e-9 < c.exact_error <= 8.5e-9 * 1.001 for c in rounding.rounding)
    assert "rounding level (at most 1e-06)" in rounding.verdict()
    strict = audit_verifier(fn, sampler="iid", n=2, budget=4_800, law=law_off_by(8.5e-9), rounding=0.0)
    assert not strict.passed and strict.lossy and "8.5e-09" in strict.lossy[0].reason
    assert not audit_verifier(fn, sampler="iid", n=2, budget=4_800, law=law_off_by(1e-4)).passed
    sampled_only = audit_verifier(fn, sampler="iid", n=2, budget=4_800)
    assert sampled_only.verdict().startswith("no loss of losslessness detected")


def test_fail_fast_reports_the_cases_it_cut_short_as_stopped():
    report = audit_verifier(top_when_peaked, sampler="iid", n=3, budget=400_000, seed=0, fail_fast=True)
    assert [c.case.name for c in report.lossy] == ["peaked-target"]
    stopped = report.stopped
    assert stopped and all(c.calls < report.budget // len(report.cases) for c in stopped)
    assert not [c for c in report.cases if c.status == "pass" and c.calls < report.budget // len(report.cases)]
    assert "11 cases not finished (--fail-fast stopped the audit; status 'stopped')" in report.verdict()
    assert all(not line.startswith(f"case {c.index} ") for c in stopped for line in report.details())


def test_float16_inputs_are_audited():
    report = audit_verifier(as_callable("rrs", 2), sampler="iid", n=2, budget=6_000, dtype="float16")
    assert report.passed, report.details()
    seen_p, _, _, _ = case_inputs(battery_cases(2, dtype="float16")[-1], "float16")
    assert seen_p.dtype == np.float16


def test_loading_names_what_is_wrong(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("import numpy as np\nVALUE = 3\n\ndef verify(p, q, drafts, rng):\n    return int(drafts[0])\n")
    assert load_callable(f"{good}:verify")(None, None, np.array([2]), None) == 2
    assert load_callable("mdsd_cli.audit.examples:rrs").__name__ == "rrs"
    assert load_callable("mdsd:kseq", n=2)(np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.array([0, 1]),
                                          np.random.default_rng(0))[0] in (0, 1)
    (tmp_path / "syntax.py").write_text("def verify(p, q, drafts, rng)\n    return 0\n")
    (tmp_path / "raises.py").write_text("import numpy\nraise RuntimeError('needs a GPU')\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "parses.py").write_text("import argparse\nargparse.ArgumentParser().parse_args(['--nope'])\n")
    for spec, fragment in ((f"{tmp_path / 'missing.py'}:verify", "missing.py not found"),
                           (f"{tmp_path / 'exits.py'}:verify", "exits.py raised SystemExit: 0 (it exits when "
                            "imported: put the code that runs it under if __name__ == '__main__')"),
                           (f"{tmp_path / 'parses.py'}:verify", "parses.py raised SystemExit: 2"),
                           (f"{good}:verfy", "has no 'verfy'; the functions it defines: verify"),
                           (f"{good}:VALUE", "is a int, not a function"),
                           (f"{tmp_path / 'syntax.py'}:verify", "syntax.py, line 1: SyntaxError:"),
                           (f"{tmp_path / 'raises.py'}:verify", "raises.py raised RuntimeError: needs a GPU"),
                           ("no_such_module_xyz:verify", "no module named 'no_such_module_xyz'"),
                           ("mdsd_cli.audit.examples:nothing", "module mdsd_cli.audit.examples has no 'nothing'"),
                           ("verify", "cannot tell the function from 'verify'"),
                           ("mdsd:rrs", "need the number of drafts")):
        with pytest.raises(CallableError, match=re.escape(fragment)):
            load_callable(spec)
    with pytest.raises(InputError, match="unknown verifier 'rss'"):
        load_callable("mdsd:rss", n=2)
    with pytest.raises(InputError, match="lossless for iid drafts only, not 'wor'"):
        load_callable("mdsd:rrs", n=2, sampler="wor")


# --- the command ----------------------------------------------------------------------------------------------

EXAMPLES = "mdsd_cli.audit.examples"


def test_cli_flags_a_broken_function_with_exit_1_and_writes_the_report(tmp_path):
    out = tmp_path / "audit.csv"
    result = run("audit", f"{EXAMPLES}:rrs_skipping_repeats", "-n", "3", "--budget", "60000", "--out", out,
                 "--progress", "none")
    assert result.exit_code == 1 and result.stdout == ""
    df = pd.read_csv(out)
    assert len(df) == 12 and set(df.status) == {"pass", "lossy"}
    assert df.loc[df.name == "repeated-drafts", "status"].item() == "lossy"
    assert (out.parent / "audit.csv.manifest.json").exists()
    assert "case 2 repeated-drafts: output law departs from p" in result.stderr
    assert "LOSSY on" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr


def test_cli_passes_a_correct_function_with_exit_0_and_data_only_on_stdout():
    result = run("audit", f"{EXAMPLES}:rrs", "-n", "2", "--budget", "24000", "--cases", "battery", "--cases",
                 "random", "--count", "3")
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert len(df) == 15 and (df.status == "pass").all() and "exact_error" not in df.columns
    assert (df.alpha_star - df.gap - df.acceptance).abs().max() < 1e-12
    assert result.stderr.strip().splitlines()[-1].startswith("no loss of losslessness detected in 15 cases")


def test_cli_exact_law_and_pair_files(tmp_path):
    from mdsd_cli import zipf_pairs
    from mdsd_cli.io import save_pairs

    pairs = save_pairs(zipf_pairs(2, 6, seed=1), tmp_path / "pairs.npz")
    result = run("audit", "mdsd:kseq", "--law", "mdsd:kseq", "-n", "2", "--cases", pairs, "--budget", "2000", "-q")
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert list(df.name) == ["pairs-0", "pairs-1"] and (df.exact_error < 1e-12).all()


@pytest.mark.parametrize("args, code, fragment", [
    (["nope.py:verify", "-n", "2"], 1, "Error: file nope.py not found"),
    (["mdsd:rrs", "-n", "2", "-s", "wor"], 1, "Error: mdsd's rrs is lossless for iid drafts only, not 'wor'; "
     "audit it with --sampler iid"),
    (["mdsd:rrs", "-n", "2", "--budget", "4799"], 1, "399 per case for 12 cases, too few for the test to detect "
     "anything (its first 200 calls only learn where to look); give at least 4,800"),
    (["mdsd:rrs", "-n", "2", "--cases", "nothing.npz"], 1, "data file nothing.npz not found"),
    (["mdsd:rrs", "-n", "2", "--alpha", "0"], 1, "--alpha must lie strictly between 0 and 1"),
    (["mdsd:rrs", "-n", "2", "-s", "wro"], 2, "did you mean 'wor'?"),
    (["mdsd:rrs"], 2, "Missing option '--drafts'"),
])
def test_cli_errors_are_one_line(args, code, fragment, tmp_path):
    result = run("audit", *args, "--out", tmp_path / "x.csv")
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert fragment in " ".join(result.stderr.split()) and result.stdout == "" and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # no partial output


def test_a_crashing_function_in_a_real_process_gives_no_traceback(tmp_path):
    (tmp_path / "crash.py").write_text("def verify(p, q, drafts, rng):\n    return 1 // 0\n")
    done = subprocess.run([sys.executable, "-m", "mdsd_cli", "audit", f"{tmp_path / 'crash.py'}:verify", "-n", "2",
                           "--budget", "4800", "--progress", "none"], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "the function raised ZeroDivisionError: integer division or modulo by zero on drafts (" in done.stderr
    df = pd.read_csv(io.StringIO(done.stdout))
    assert (df.status == "error").all() and df.calls.max() == 1 and math.isnan(df.acceptance[0])


def test_what_the_function_prints_goes_to_stderr_and_stdout_stays_a_table(tmp_path):
    (tmp_path / "noisy.py").write_text(
        "from mdsd_cli.audit.examples import rrs\nprint('loading noisy')\n\n"
        "def verify(p, q, drafts, rng):\n    print('called with', drafts)\n    return rrs(p, q, drafts, rng)\n\n"
        "def quits(p, q, drafts, rng):\n    raise SystemExit(0)\n")
    done = subprocess.run([sys.executable, "-m", "mdsd_cli", "audit", f"{tmp_path / 'noisy.py'}:verify", "-n", "2",
                           "--budget", "4800", "--progress", "none"], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    df = pd.read_csv(io.StringIO(done.stdout))
    assert len(df) == 12 and (df.status == "pass").all()
    assert "loading noisy" in done.stderr and "called with [" in done.stderr
    quits = run("audit", f"{tmp_path / 'noisy.py'}:quits", "-n", "2", "--budget", "4800", "--progress", "none")
    assert quits.exit_code == 1 and "loading noisy" in quits.stderr and "loading noisy" not in quits.stdout
    assert (pd.read_csv(io.StringIO(quits.stdout)).status == "error").all()
    assert "the function failed on 12 of 12 cases" in quits.stderr.splitlines()[-1]
    argv = run("audit", f"{tmp_path / 'noisy.py'}:nothing", "-n", "2")
    assert argv.exit_code == 1 and argv.stdout == "" and argv.stderr.startswith("loading noisy\nError: ")


def test_acceptance_counts_the_given_index_else_an_output_among_the_drafts():
    cases = [make_case("one", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5])]

    def from_p(p, q, drafts, rng):  # lossless, never "accepts", though its output is often a draft
        return draw(p, rng)

    said = audit_verifier(lambda p, q, d, r: (from_p(p, q, d, r), None), n=2, cases=cases, budget=4_000)
    seen = audit_verifier(from_p, n=2, cases=cases, budget=4_000)
    assert said.passed and seen.passed
    assert said.cases[0].acceptance == 0.0
    # P(Y in X) for Y ~ p independent of two iid drafts from q: sum_y p_y (1 - (1 - q_y)^2) = 0.483
    assert abs(seen.cases[0].acceptance - 0.483) < 5 * seen.cases[0].acceptance_se


def test_the_same_seed_gives_a_byte_identical_table_and_another_seed_other_calls():
    args = ["audit", f"{EXAMPLES}:rrs_skipping_repeats", "-n", "3", "--budget", "24000", "--progress", "none"]
    first, again, other = run(*args, "--seed", "5"), run(*args, "--seed", "5"), run(*args, "--seed", "6")
    assert first.exit_code == again.exit_code == 1 and first.stdout == again.stdout
    assert first.stdout != other.stdout


def test_cli_fail_fast_rounding_and_float16():
    result = run("audit", "mdsd_cli.audit.examples:accept_confident_top", "-n", "3", "--budget", "200000",
                 "--fail-fast", "-q")
    assert result.exit_code == 1, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert set(df.status) == {"lossy", "stopped"} and (df[df.status == "stopped"].calls < 200_000 // 12).all()
    result = run("audit", "mdsd:rrs", "--law", "mdsd:rrs", "-n", "2", "--budget", "4800", "--rounding", "0",
                 "--dtype", "float16")
    assert result.exit_code == 0, result.stderr
    assert "proven lossless on all 12 cases" in result.stderr and "cannot detect" in result.stderr
    result = run("audit", "mdsd:rrs", "-n", "2", "--rounding", "0.9")
    assert result.exit_code == 2 and "Traceback" not in result.stderr


def test_a_function_that_sets_numpy_errors_to_raise_does_not_crash_the_harness():
    def strict_rrs(p, q, drafts, rng):
        np.seterr(all="raise")  # global state the harness must not inherit
        return rrs(p, q, drafts, rng)

    before = np.geterr()
    try:
        report = audit_verifier(strict_rrs, sampler="iid", n=2, budget=4_800, seed=0)
    finally:
        np.seterr(**before)
    assert report.passed, report.details()
    assert np.geterr() == before


def test_a_bool_is_not_a_token():
    report = audit_verifier(lambda p, q, d, rng: bool(d[0] % 2), sampler="iid", n=2, cases=battery_cases(2)[:2],
                            budget=800, seed=0)
    assert report.errors and all("a bool, not a token id" in c.reason for c in report.errors)


@pytest.mark.parametrize("ending", ["os._exit(0)", "os._exit(3)", "os.abort()"])
def test_a_function_that_ends_the_process_is_its_cases_failure_not_a_silent_pass(tmp_path, ending):
    """os._exit(0) inside the audited function once ended mdsd with exit code 0 and no output: a CI job read
    that as "no loss detected". In a real process: exit code 1, the table, the case and the call named."""
    (tmp_path / "dies.py").write_text("import os\n\n\ndef verify(p, q, drafts, rng):\n"
                                      f"    if drafts[0] == 1:\n        {ending}\n    return int(drafts[0])\n")
    done = subprocess.run([sys.executable, "-m", "mdsd_cli", "audit", f"{tmp_path / 'dies.py'}:verify", "-n", "2",
                           "--budget", "4800", "--progress", "none"], capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT)
    assert done.returncode == 1 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    assert f"the function raised ProcessExit: called {ending}" in done.stderr
    df = pd.read_csv(io.StringIO(done.stdout))
    assert (df.status == "error").any() and "which would end the audit itself" in " ".join(df.reason.fillna(""))


def _audit_process(*args, **kw):
    return subprocess.run([sys.executable, "-m", "mdsd_cli", "audit", *map(str, args), "--progress", "none"],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, **kw)


def test_what_the_function_writes_to_file_descriptor_1_goes_to_stderr(tmp_path):
    """Issue 26, item 6: os.write(1, ...) and a subprocess's output, on import and in calls, used to land in the
    CSV on stdout; they go to stderr, and stdout parses as the table."""
    (tmp_path / "fd.py").write_text(
        "import os, subprocess, sys\nfrom mdsd_cli.audit import as_callable\nos.write(1, b'import-noise\\n')\n"
        "RRS = as_callable('rrs', 2)\n\n\n"
        "def verify(p, q, drafts, rng):\n"
        "    if drafts[0] == 0 and drafts[1] == 0:\n"
        "        os.write(1, b'call-noise\\n')\n"
        "        subprocess.run([sys.executable, '-c', 'print(\"child-noise\")'])\n"
        "    return RRS(p, q, drafts, rng)\n")
    done = _audit_process(f"{tmp_path / 'fd.py'}:verify", "-n", "2", "--budget", "4800", "--cases", "random",
                          "--count", "2")
    assert done.returncode == 0, done.stderr
    for noise in ("import-noise", "call-noise", "child-noise"):
        assert noise not in done.stdout and noise in done.stderr
    df = pd.read_csv(io.StringIO(done.stdout))
    assert len(df) == 2 and set(df.status) == {"pass"}


def test_a_call_that_hangs_is_its_cases_error_after_the_timeout(tmp_path):
    """A function that never returns on one tuple used to block the audit forever: with --timeout 1 the
    case is an error naming the drafts and the replay seed, the other cases are audited, exit code 1."""
    (tmp_path / "hangs.py").write_text(
        "import time\n\n\ndef verify(p, q, drafts, rng):\n"
        "    if drafts[0] == 1 and drafts[1] == 1:\n        time.sleep(1000)\n"
        "    return int(drafts[0])\n")
    done = _audit_process(f"{tmp_path / 'hangs.py'}:verify", "-n", "2", "--budget", "4800", "--timeout", "1",
                          "--cases", "random", "--count", "2")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "did not return within 1 s (--timeout) on drafts (1, 1)" in done.stderr and "replay: seed" in done.stderr
    df = pd.read_csv(io.StringIO(done.stdout))
    assert len(df) == 2 and "error" in set(df.status)


def test_a_module_whose_import_hangs_is_a_clean_error(tmp_path):
    (tmp_path / "stuck.py").write_text("import time\ntime.sleep(1000)\n\n\ndef verify(p, q, d, rng):\n    return 0\n")
    done = _audit_process(f"{tmp_path / 'stuck.py'}:verify", "-n", "2", "--timeout", "1")
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: loading {tmp_path / 'stuck.py'}:verify did not finish within 1 s (--timeout); does importing it wait "
        "for something? Raise --timeout, or 0 for no limit"]


def test_the_timeout_in_the_library_and_its_bad_values():
    import time

    def slow(p, q, drafts, rng):
        if drafts[0] == drafts[1] == 0:
            time.sleep(1000)
        return int(drafts[0])

    report = audit_verifier(slow, sampler="iid", n=2, cases=battery_cases(2)[:1], budget=800, seed=0, timeout=0.5)
    assert [c.status for c in report.cases] == ["error"]
    assert "did not return within 0.5 s" in report.cases[0].reason
    for bad in (0, -1, float("nan"), "1"):
        with pytest.raises(InputError, match="timeout must be a positive number"):
            audit_verifier(slow, sampler="iid", n=2, cases=battery_cases(2)[:1], budget=800, timeout=bad)


def test_ctrl_c_writes_the_table_of_what_was_found(tmp_path):
    """SIGINT used to end the audit with exit code 130 and nothing; now the round in progress ends, the table
    of every case is written (unfinished ones 'stopped', with their calls so far) and the verdict says why."""
    import signal
    import time

    marker = tmp_path / "started"
    (tmp_path / "slow.py").write_text(
        "import pathlib, time\n\n\ndef verify(p, q, drafts, rng):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n    time.sleep(0.002)\n    return int(drafts[0])\n")
    proc = subprocess.Popen([sys.executable, "-m", "mdsd_cli", "audit", f"{tmp_path / 'slow.py'}:verify", "-n", "2",
                             "--progress", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
    assert proc.returncode == 130 and "Traceback" not in err, err
    df = pd.read_csv(io.StringIO(out))
    assert len(df) > 1 and "stopped" in set(df.status)
    assert df.reason.fillna("").str.contains("interrupted \\(Ctrl-C\\)").any()
    assert "interrupted" in err
