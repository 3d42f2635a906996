"""Expected tokens per target call, tau(c): move laws, the exact recursion, its certificate, Monte Carlo, the CLI.

Oracles: every closed-form move law against the sum over every draft tuple; the
recursion against the brute-force law of a step (every draft tree enumerated, the
verifier's exact law at every node: :func:`mdsd_cli.decode.exact.per_node_output_law`);
depth-1 trees against the verifiers' exact acceptance rates; the identities
tau(KxD, rrs) >= tau(1xD), optimal >= others at depth 1, tau <= 1 + sum_d alpha*_d;
Monte Carlo and sampled draft tuples against the exact values within their errors.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from mdsd_cli.cli.app import app
from mdsd_cli.decode import parse_tree, plan_decode
from mdsd_cli.decode.bounds import step_bound
from mdsd_cli.decode.exact import ConditionalLaws, per_node_output_law, tree_law, tree_paths
from mdsd_cli.decode.expected import (
    Context,
    TauOptions,
    compare_expected,
    context_tau,
    enumerated_tau,
    exact_tau,
    monte_carlo_tau,
    parse_comparison,
    recursive_tau,
    run_expected,
    sample_contexts,
    summarize_expected,
)
from mdsd_cli.models import load_model_pair
from mdsd_cli.models.synthetic import synthetic_models
from mdsd_cli.verifiers import VERIFIERS, acceptance_rate
from mdsd_cli.verifiers.moves import enumerated_moves, poisson_binomial

from .conftest import SUBPROCESS_TIMEOUT

runner = CliRunner()

#: (verifier, draft law) pairs with a closed-form move law.
CLOSED = [("rrs", "iid"), ("kseq", "iid"), ("nss", "iid"), ("nss", "greedy"), ("nss", "hub"), ("greedy", "greedy"),
          ("hub", "hub"), ("optimal-iid", "iid"), ("optimal-wor", "wor"), ("rrsw", "wor"), ("topk", "topk"),
          ("nss", "topk")]


def hard_pairs(rng, count):
    """Small pairs with ties, zeros in p and q, one-hot rows and supports smaller than n."""
    for _ in range(count):
        V = int(rng.integers(2, 7))
        p = rng.dirichlet(np.full(V, rng.choice([0.3, 1.0, 3.0])))
        q = rng.dirichlet(np.full(V, rng.choice([0.3, 1.0, 3.0])))
        kind = rng.integers(6)
        if kind == 0:
            q[rng.integers(V)] = 0.0
        elif kind == 1:
            p[rng.integers(V)] = 0.0
        elif kind == 2:
            p = np.eye(V)[rng.integers(V)]
        elif kind == 3:
            q = np.eye(V)[rng.integers(V)]
        elif kind == 4:
            p[:] = 1.0
            q[: V // 2 + 1] = 0.3
        yield p / p.sum(), q / q.sum(), int(rng.integers(1, 5))


# --- move laws ---------------------------------------------------------------------------------

def test_poisson_binomial_matches_enumeration():
    rng = np.random.default_rng(0)
    b = rng.random((4, 3))
    law = poisson_binomial(b)
    import itertools

    for col in range(3):
        brute = np.zeros(5)
        for bits in itertools.product([0, 1], repeat=4):
            brute[sum(bits)] += np.prod([b[i, col] if x else 1 - b[i, col] for i, x in enumerate(bits)])
        np.testing.assert_allclose(law[:, col], brute, atol=1e-15)


@pytest.mark.parametrize("name,sampler", CLOSED)
def test_closed_form_move_laws_equal_the_sum_over_every_draft_tuple(name, sampler):
    rng = np.random.default_rng(sum(map(ord, name + sampler)))
    checked = 0
    for p, q, n in hard_pairs(rng, 60):
        n = 2 if sampler == "hub" else n
        v = VERIFIERS[name](p, q, n, sampler)
        for split in ("token", "position", "count"):
            closed = v.closed_moves(split)
            if closed is None and not (split != "token" and v.num_drafts <= 1):
                continue
            got = v.moves(split, max_tuples=0) if closed is None else closed
            if got is None:
                continue
            want = enumerated_moves(v, split)
            assert got.shape == want.shape, (split, got.shape, want.shape)
            np.testing.assert_allclose(got, want, atol=5e-14, err_msg=f"{name} {sampler} {split} n={n}")
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize("name,sampler", [("rrs", "iid"), ("rrsw", "wor"), ("kseq", "iid"), ("optimal-wor", "wor")])
def test_each_drafts_exact_law_and_sampled_move_laws_are_unbiased(name, sampler):
    rng = np.random.default_rng(7)
    for p, q, n in hard_pairs(rng, 12):
        v = VERIFIERS[name](p, q, n, sampler)
        tuples, _ = v.draft_sampler.tuple_law(v.q, v.n)
        np.testing.assert_allclose(v.law_at_drafts(tuples),
                                   np.take_along_axis(v.output_laws(tuples), tuples, axis=1), atol=1e-13)
        for split in ("token", "count"):
            want = enumerated_moves(v, split)
            draws = np.array([v.sampled_moves(split, 500, rng) for _ in range(40)])
            # each tuple's contribution lies in [0, 1]: its variance is at most the mean (rare moves too)
            bound = 6 * np.sqrt(np.maximum(want, 1e-12) / (500 * 40))
            assert (np.abs(draws.mean(axis=0) - want) <= bound).all(), (name, split)


def test_move_laws_sum_to_the_acceptance_rate():
    rng = np.random.default_rng(3)
    for p, q, n in hard_pairs(rng, 30):
        for name, sampler in (("rrs", "iid"), ("kseq", "iid"), ("optimal-iid", "iid"), ("greedy", "greedy")):
            v = VERIFIERS[name](p, q, n, sampler)
            assert abs(v.moves("token").sum() - acceptance_rate(name, p, q, n, sampler=sampler)) < 1e-12


# --- the recursion against brute force -------------------------------------------------------------

def brute_tau(target, draft, context, shape, sampler, verifier, T=1.0):
    """Every draft tree enumerated, the verifier's exact conditional law at every node."""
    P, Q = ConditionalLaws(target, context, T), ConditionalLaws(draft, context, T)
    total = 0.0
    for tree, prob in tree_law(shape, sampler, Q):
        law = per_node_output_law(tree, list(P.many(tree_paths(tree))), VERIFIERS[verifier], sampler)
        total += prob * sum(m * len(k) for k, m in law.items())
    return total


TREES = [("1x3", "iid", ["rrs", "kseq"]), ("2x2", "iid", ["rrs", "kseq", "optimal-iid", "nss"]),
         ("2,3", "wor", ["rrsw", "optimal-wor", "nss"]), ("3x2", "greedy", ["greedy", "nss"]),
         ("3x2", "topk", ["topk"]), ("sparse", "topk", ["topk"]),
         ("2x2", "hub", ["hub"]), ("paths:3x2", "iid", ["rrs", "kseq", "optimal-iid"]),
         ("paths:2x3", "wor", ["rrsw", "optimal-wor"]), ("sparse", "iid", ["rrs", "kseq", "optimal-iid"]),
         ("sparse", "wor", ["rrsw", "optimal-wor"])]
SPARSE = [[0], [1], [2], [0, 0], [0, 1], [1, 0]]  # children with different subtrees: the position split


@pytest.mark.parametrize("tree,sampler,verifiers", TREES, ids=lambda x: str(x))
def test_recursion_equals_every_draft_tree_enumerated(tree, sampler, verifiers):
    from mdsd_cli.decode.trees import sparse_tree

    target, draft = synthetic_models(4, seed=9, noise=1.5)
    shape = sparse_tree(SPARSE) if tree == "sparse" else parse_tree(tree)
    for context in [(0, 1), (2, 3), (3, 3)]:
        P, Q = ConditionalLaws(target, context, 1.0), ConditionalLaws(draft, context, 1.0)
        for v in verifiers:
            got = exact_tau(P, Q, shape, sampler, v, prune=0.0)
            want = brute_tau(target, draft, context, shape, sampler, v)
            assert got.lower == got.upper == got.value
            assert abs(got.value - want) < 1e-12, (tree, v, context, got.value, want)


def test_per_node_laws_and_walks_take_any_verifier_factory():
    """Found by running ``make sequence-level``: the exact per-node law and the per-node walk set verifiers up
    through any callable (the experiment passes a closure over a :class:`~mdsd_cli.decode.walk.VerifierCache`),
    not only a verifier class; the law is the same either way."""
    from mdsd_cli.decode.walk import VerifierCache, walk_per_node

    target, draft = synthetic_models(4, seed=9, noise=1.5)
    P, Q = ConditionalLaws(target, (0, 1), 1.0), ConditionalLaws(draft, (0, 1), 1.0)
    for tree, _ in list(tree_law(parse_tree("2x2"), "wor", Q))[:5]:
        rows = list(P.many(tree_paths(tree)))
        cache = VerifierCache(VERIFIERS["optimal-wor"], "wor")
        by_class = per_node_output_law(tree, rows, VERIFIERS["optimal-wor"], "wor")
        by_factory = per_node_output_law(tree, rows, lambda p, q, n, s, c=cache: c(p, q, n), "wor")
        assert by_class.keys() == by_factory.keys()
        assert all(abs(by_class[k] - by_factory[k]) <= 1e-15 for k in by_class)
        logits = np.log(np.maximum(np.array(rows), 1e-300))
        a = walk_per_node(tree, logits, 1.0, VERIFIERS["optimal-wor"], "wor", np.random.default_rng(1))
        b = walk_per_node(tree, logits, 1.0, lambda p, q, n, s: VERIFIERS["optimal-wor"](p, q, n, s), "wor",
                          np.random.default_rng(1))
        assert a.tokens == b.tokens


def test_sequence_level_experiment_values_are_reproduced():
    """The exact column of the committed sequence-level experiment, by the recursion (to the CSV's 12
    significant digits; :func:`test_recursion_equals_every_draft_tree_enumerated` checks the experiment's own
    method, every tree enumerated, to 1e-12)."""
    import pandas as pd

    from tests.test_decode import ROOT

    table = pd.read_csv(ROOT / "results" / "sequence-level" / "summary.csv")
    exact = table[(table.dataset == "synthetic-v4") & (table.method == "exact")]
    target, draft = synthetic_models(4, seed=9, noise=1.5)
    contexts = [(a, b) for a in range(4) for b in range(4)][::2]
    from mdsd_cli.decode.sequence import SEQUENCE_VERIFIERS

    checked = 0
    for row in exact.itertuples():
        if row.verifier in SEQUENCE_VERIFIERS or row.verifier == "two-level-lp":
            continue  # no recursion: every tree enumerated (checked elsewhere, the reference rule in its own test)
        shape = parse_tree(row.tree)
        temp = float(getattr(row, "temperature", 1.0))
        values = [exact_tau(ConditionalLaws(target, c, temp), ConditionalLaws(draft, c, temp), shape, row.sampler,
                            row.verifier, prune=0.0).value for c in contexts]
        assert abs(np.mean(values) - row.block_efficiency) < 1e-11, row
        checked += 1
    assert checked >= 8


def test_depth_one_trees_are_one_plus_the_exact_acceptance_rate():
    pair = load_model_pair("pydoc-ngram")
    context = pair.prompts(3)[2].tokens
    P, Q = ConditionalLaws(pair.target, context, 0.7), ConditionalLaws(pair.draft, context, 0.7)
    p, q = P(()), Q(())
    shape = parse_tree("4x1")
    values = {}
    for name, sampler in (("rrs", "iid"), ("kseq", "iid"), ("optimal-iid", "iid"), ("optimal-wor", "wor")):
        values[name] = exact_tau(P, Q, shape, sampler, name).value
        assert abs(values[name] - 1 - acceptance_rate(name, p, q, 4, sampler=sampler)) < 1e-12
    assert values["optimal-iid"] >= values["kseq"] - 1e-12 and values["optimal-iid"] >= values["rrs"] - 1e-12


def test_identities_hold_on_every_context():
    """tau(KxD, rrs) >= tau(1xD), also on a sparse tree whose first child carries the chain (a drafted token
    moves the walk to the first child holding it: the deep one); optimal-iid >= kseq, rrs at depth 1;
    tau <= 1 + sum_d alpha*_d."""
    from mdsd_cli.decode.trees import sparse_tree

    target, draft = synthetic_models(12, seed=4, noise=1.0)
    sparse = sparse_tree(SPARSE)
    for context in [(1, 2), (5, 5), (0, 11), (7, 3)]:
        P, Q = ConditionalLaws(target, context, 1.0), ConditionalLaws(draft, context, 1.0)
        tau = {(t, v): exact_tau(P, Q, parse_tree(t), "iid", v, prune=0.0).value
               for t in ("1x2", "2x2", "3x2", "3x1") for v in ("rrs", "kseq", "optimal-iid")}
        for v in ("rrs",):
            assert tau[("2x2", v)] >= tau[("1x2", v)] - 1e-12 and tau[("3x2", v)] >= tau[("2x2", v)] - 1e-12
            assert exact_tau(P, Q, sparse, "iid", v, prune=0.0).value >= tau[("1x2", v)] - 1e-12
        assert tau[("3x1", "optimal-iid")] >= max(tau[("3x1", "kseq")], tau[("3x1", "rrs")]) - 1e-12
        for t in ("2x2", "1x2", "3x2"):
            bound = 1 + step_bound(target, draft, context, parse_tree(t), "iid", 1.0, lp=False)[0]
            assert max(tau[(t, v)] for v in ("rrs", "kseq", "optimal-iid")) <= bound + 1e-12, (t, context)


# --- pruning, sampling, Monte Carlo ------------------------------------------------------------

def test_pruning_gives_a_certified_interval_and_an_unbiased_point():
    target, draft = synthetic_models(12, seed=4, noise=1.0)
    context = (3, 1)
    P, Q = ConditionalLaws(target, context, 1.0), ConditionalLaws(draft, context, 1.0)
    shape = parse_tree("2x3")
    exact = exact_tau(P, Q, shape, "iid", "kseq", prune=0.0).value
    rng = np.random.default_rng(0)
    points = []
    for prune in (0.003, 0.01, 0.03):
        r = exact_tau(P, Q, shape, "iid", "kseq", prune=prune, rng=rng, replicates=4)
        assert r.lower <= exact + 1e-12 <= r.upper + 2e-12 and r.upper > r.lower  # certified, and something pruned
        assert abs(r.value - exact) <= 5 * r.stderr + 1e-9
    for _ in range(30):
        points.append(exact_tau(P, Q, shape, "iid", "kseq", prune=0.03, rng=rng, replicates=2).value)
    assert abs(np.mean(points) - exact) <= 4 * np.std(points) / np.sqrt(len(points))


@pytest.mark.parametrize("verifier,sampler", [("rrs", "iid"), ("rrsw", "wor"), ("optimal-iid", "iid"),
                                              ("traversal", "iid"), ("block", "iid")])
def test_monte_carlo_and_sampled_drafts_agree_with_the_exact_value(verifier, sampler):
    target, draft = synthetic_models(4, seed=9, noise=1.5)
    shape = parse_tree("1x3" if verifier == "block" else "2x2")
    rng = np.random.default_rng(1)
    for context in [(0, 0), (2, 1)]:
        P, Q = ConditionalLaws(target, context, 1.0), ConditionalLaws(draft, context, 1.0)
        if verifier in ("block", "traversal"):
            exact = enumerated_tau(P, Q, shape, sampler, verifier).value
        else:
            exact = exact_tau(P, Q, shape, sampler, verifier, prune=0.0).value
            forced = recursive_tau(P, Q, shape, sampler, verifier, prune=0.0, draft_samples=400, replicates=6,
                                   rng=rng, memo={"force-sampled": True})
            assert forced.method == "sampled-drafts" and abs(forced.value - exact) <= 5 * forced.stderr + 1e-9
        mc = monte_carlo_tau(P, Q, shape, sampler, verifier, repeats=400, rng=rng)
        assert abs(mc.value - exact) <= 5 * mc.stderr, (verifier, context, mc.value, exact)


def test_results_do_not_depend_on_jobs_and_are_seeded():
    target, draft = synthetic_models(30, seed=2, noise=1.0)
    prompts = load_model_pair("synthetic", vocab=30, seed=2).prompts(3)
    contexts = sample_contexts(target, prompts, per_prompt=2, max_new_tokens=8, temperature=1.0, seed=5)
    assert len(contexts) == 6 and all(isinstance(c, Context) for c in contexts)
    specs, _ = plan_decode(["2x2"], ["rrs", "rrsw"], vocab_size=30, baselines=False)
    options = TauOptions(prune=0.01, draft_samples=16)
    one = run_expected(target, draft, contexts, specs, options=options, jobs=1)
    two = run_expected(target, draft, contexts, specs, options=options, jobs=2)
    assert {k: v.value for k, v in one.values.items()} == {k: v.value for k, v in two.values.items()}


# --- pydoc-ngram: paired, resolved, consistent with generation --------------------------------------

@pytest.fixture(scope="module")
def pydoc_run():
    pair = load_model_pair("pydoc-ngram")
    prompts = pair.prompts(12)
    contexts = sample_contexts(pair.target, prompts, per_prompt=2, max_new_tokens=32, temperature=1.0, seed=0)
    specs, _ = plan_decode(["2x3"], ["rrs", "kseq", "optimal-iid", "rrsw"], temperatures=[1.0],
                           vocab_size=pair.vocab_size, baselines=True)
    run = run_expected(pair.target, pair.draft, contexts, specs, options=TauOptions(prune=0.01, draft_samples=64,
                                                                                   replicates=2), jobs=2)
    return pair, run


def test_on_pydoc_the_tree_beats_its_chain_on_every_context(pydoc_run):
    _, run = pydoc_run
    labels = [s.label for s in run.specs]
    tree, chain = labels.index("2x3 iid/rrs T=1"), labels.index("1x3 iid/rrs T=1")
    for ci in range(len(run.contexts)):
        # certified: the tree's upper bound can only be below the chain's lower bound by a bug
        assert run.values[(tree, ci)].upper >= run.values[(chain, ci)].lower
    summary = summarize_expected(run)
    assert set(summary.method) == {"exact", "sampled-drafts"}
    assert (summary.block_efficiency_low >= 1).all() and (summary.block_efficiency_high <= summary.depth + 1).all()
    assert (summary.certified_low <= summary.certified_high).all()
    comp = compare_expected(run, [parse_comparison("2x3/rrs,1x3/rrs"), parse_comparison("optimal-iid,rrs")])
    assert len(comp) == 2 and comp.resolved.all() and (comp.difference > 0).all()


def test_a_certified_interval_never_excludes_the_monte_carlo_estimate(pydoc_run):
    pair, run = pydoc_run
    spec = next(s for s in run.specs if s.label == "2x3 iid/kseq T=1")
    rng = np.random.default_rng(4)
    for context in run.contexts[:4]:
        P, Q = ConditionalLaws(pair.target, context.tokens, 1.0), ConditionalLaws(pair.draft, context.tokens, 1.0)
        exact = context_tau(P, Q, spec, TauOptions(prune=0.01), rng=rng)
        mc = monte_carlo_tau(P, Q, spec.tree, spec.sampler, spec.verifier, repeats=200, rng=rng)
        assert exact.lower - 4 * mc.stderr <= mc.value <= exact.upper + 4 * mc.stderr


# --- command line --------------------------------------------------------------------------------

def test_cli_expected_writes_the_summary_comparisons_and_per_context_rows(tmp_path):
    import pandas as pd

    out, comp, per = tmp_path / "s.csv", tmp_path / "c.csv", tmp_path / "p.parquet"
    result = runner.invoke(app, ["decode", "--expected", "--models", "synthetic", "--vocab", "20", "--prompts", "3",
                                 "--contexts-per-prompt", "2", "--max-new-tokens", "8", "--tree", "2x2",
                                 "--verifier", "rrs", "--verifier", "kseq", "--compare", "kseq,rrs",
                                 "--comparisons", str(comp), "--per-context", str(per), "--out", str(out),
                                 "--progress", "none"])
    assert result.exit_code == 0, result.stderr
    summary = pd.read_csv(out)
    assert list(summary.verifier) == ["rrs", "kseq", "rrs"] and list(summary.tree) == ["2x2", "2x2", "1x2"]
    assert {"block_efficiency", "certified_low", "generation_estimate", "method", "accepted_ge_2"} <= set(summary)
    assert len(pd.read_csv(comp)) == 1 and len(pd.read_parquet(per)) == 3 * 6
    assert (tmp_path / "s.csv.manifest.json").exists()


@pytest.mark.parametrize("args,fragment", [
    (["--method", "exact", "--verifier", "rrsw", "--models", "pydoc-ngram"], "no exact law"),
    (["--prune", "1.5"], "--prune must be in [0, 1)"),
    (["--prune", "nan"], "--prune must be in [0, 1)"),
    (["--prompts", "1"], "at least 2 prompts"),
    (["--compare", "kseq"], "give two configurations as A,B"),
    (["--compare", "kseq,rrs"], "no pair of configurations matches"),
    (["--replicates", "1"], "--replicates must be an integer >= 2"),
    (["--method", "fastest"], "unknown method"),
    (["--steps", "x.csv"], "--steps describes a generation run"),
])
def test_cli_expected_refuses_bad_input_in_one_line(tmp_path, args, fragment):
    base = ["decode", "--expected", "--models", "synthetic", "--vocab", "300", "--prompts", "3",
            "--max-new-tokens", "4", "--tree", "2x2", "--progress", "none", "--out", str(tmp_path / "o.csv")]
    if "--models" in args:
        base = [a for a in base if a not in ("--models", "synthetic", "--vocab", "300")]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 1, result.stdout
    assert result.stderr.startswith("Error:") and result.stderr.count("\n") == 1, result.stderr
    assert fragment in result.stderr, result.stderr
    assert not (tmp_path / "o.csv").exists()


def test_a_side_without_a_sampler_is_compared_law_by_law():
    """``select-race,traversal`` with both laws run: one pair per law (the sides were ambiguous and refused, after
    the whole run); a side pinned to a law, or a verifier of one law, pairs with that law only."""
    from mdsd_cli.decode.expected import Comparison, comparison_pairs
    from mdsd_cli.errors import InputError

    specs, _ = plan_decode(["2x2"], ["traversal", "traversal:wor", "select-race", "select-race:wor", "optimal-wor"],
                           temperatures=[1.0], vocab_size=50, baselines=False)
    label = lambda pairs: sorted((specs[a].label, specs[b].label) for _, a, b in pairs)  # noqa: E731
    assert label(comparison_pairs(specs, Comparison("select-race", "traversal"))) == sorted(
        [(specs[2].label, specs[0].label), (specs[3].label, specs[1].label)])
    assert label(comparison_pairs(specs, Comparison("select-race", "optimal-wor"))) == [(specs[3].label,
                                                                                         specs[4].label)]
    assert label(comparison_pairs(specs, Comparison("select-race:iid", "traversal"))) == [(specs[2].label,
                                                                                           specs[0].label)]
    with pytest.raises(InputError, match="no pair of configurations"):
        comparison_pairs(specs, Comparison("select-race", "kseq"))


def test_an_unmatched_comparison_is_refused_before_the_run(tmp_path, monkeypatch):
    import mdsd_cli.decode.expected as expected

    def no_run(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(expected, "run_expected", no_run)
    result = runner.invoke(app, ["decode", "--expected", "--models", "synthetic", "--vocab", "30", "--prompts", "2",
                                 "--max-new-tokens", "4", "--tree", "2x2", "--verifier", "rrs", "--compare",
                                 "rrs,kseq", "--progress", "none", "--out", str(tmp_path / "o.csv")])
    assert result.exit_code == 1 and "no pair of configurations matches" in result.stderr, result.stderr
    assert not (tmp_path / "o.csv").exists()


def test_expected_options_without_expected_are_refused(tmp_path):
    result = runner.invoke(app, ["decode", "--models", "synthetic", "--compare", "kseq,rrs", "--progress", "none"])
    assert result.exit_code == 1 and "--compare applies to --expected" in result.stderr


def test_cli_expected_in_a_real_subprocess_writes_csv_to_stdout(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mdsd_cli", "decode", "--expected", "--models", "synthetic",
                          "--vocab", "16", "--prompts", "2", "--max-new-tokens", "4", "--tree", "2x1",
                          "--progress", "none"], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("tree,nodes,depth,sampler,verifier") and len(lines) == 3


def test_dask_gives_the_values_of_local_processes(tmp_path):
    pytest.importorskip("dask.distributed")
    from dask.distributed import Client, LocalCluster

    from mdsd_cli.cli.decode_expected import PairLoader

    settings = {"models": "synthetic", "vocab": 25, "model_seed": 1, "noise": 1.0, "target": None}
    loader = PairLoader(settings, False)
    models = loader()
    pair = load_model_pair("synthetic", vocab=25, seed=1)
    contexts = sample_contexts(models["target"], pair.prompts(2), per_prompt=2, max_new_tokens=6, temperature=1.0,
                               seed=0)
    specs, _ = plan_decode(["2x2"], ["rrs", "rrsw"], vocab_size=25, baselines=False)
    options = TauOptions(prune=0.02, draft_samples=8)
    local = run_expected(models["target"], models["draft"], contexts, specs, options=options)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        remote = run_expected(models["target"], models["draft"], contexts, specs, options=options, executor="dask",
                              client=client, loader=loader)
    assert {k: v.value for k, v in local.values.items()} == {k: v.value for k, v in remote.values.items()}


def test_sequence_verifiers_expected_tokens_are_the_mean_length_of_their_law():
    from mdsd_cli.decode.sequence import SEQUENCE_VERIFIERS

    target, draft = synthetic_models(5, seed=3, noise=1.0)
    P, Q = ConditionalLaws(target, (1, 2), 1.0), ConditionalLaws(draft, (1, 2), 1.0)
    for tree, verifier, sampler in (("1x3", "block", "iid"), ("2x2", "traversal", "iid"), ("2,2", "traversal", "wor")):
        for drawn, _ in tree_law(parse_tree(tree), sampler, Q)[:40]:
            Ps = list(P.many(tree_paths(drawn)))
            law = SEQUENCE_VERIFIERS[verifier].output_law(drawn, Ps, sampler)
            for eos in (None, 0, 2):
                want = sum(m * (k.index(eos) + 1 if eos in k else len(k)) for k, m in law.items())
                got = SEQUENCE_VERIFIERS[verifier].expected_tokens(drawn, Ps, sampler, eos)
                assert abs(got - want) < 1e-12


@pytest.mark.parametrize("verifier,sampler", [("rrs", "iid:temperature=0.8"), ("kseq", "iid:top_k=3"),
                                              ("rrsw", "wor:temperature=1.5"), ("optimal-iid", "iid:top_p=0.9")])
def test_decode_runs_parametric_draft_laws_and_their_step_law_is_the_target_law(verifier, sampler):
    """What `mdsd design` recommends must be decodable (issue: parametric laws were refused), and losslessly:
    the exact law of a step over every draft tree, continued by the target, is the target's sequence law."""
    from mdsd_cli.decode.exact import sequence_law, stream_law

    target, draft = synthetic_models(4, seed=5, noise=1.5)
    specs, _ = plan_decode(["2x2"], [f"{verifier}:{sampler}"], vocab_size=4, baselines=False)
    assert specs[0].sampler == sampler
    P, Q = ConditionalLaws(target, (1, 3), 1.0), ConditionalLaws(draft, (1, 3), 1.0)
    total: dict = {}
    for tree, prob in tree_law(parse_tree("2x2"), sampler, Q):
        for tokens, mass in per_node_output_law(tree, list(P.many(tree_paths(tree))), VERIFIERS[verifier],
                                                sampler).items():
            total[tokens] = total.get(tokens, 0.0) + prob * mass
    for k in (1, 2, 3):
        assert np.abs(stream_law(total, P, 4, k) - sequence_law(P, 4, k)).max() < 1e-12
    tau = exact_tau(P, Q, parse_tree("2x2"), sampler, verifier, prune=0.0).value
    assert abs(tau - sum(m * len(k) for k, m in total.items())) < 1e-12


def test_sequence_bound_is_paired_with_tau_at_every_context_and_empty_lps_are_said(monkeypatch):
    """--expected --sequence-bound: at each context tau(c) <= lossless LP <= 1 + sum_d alpha*_d (V = 4, every tree
    enumerable); where the LPs cannot run the columns are empty and the run says so, once per configuration."""
    from mdsd_cli.decode import bounds as db

    target, draft = synthetic_models(4, seed=9, noise=1.5)
    contexts = [Context(i, 0, (a, b), 1.0) for i, (a, b) in enumerate([(0, 1), (2, 3), (1, 1)])]
    specs, _ = plan_decode(["2x2"], ["rrs", "optimal-iid"], vocab_size=4, baselines=False)
    run = run_expected(target, draft, contexts, specs, options=TauOptions(prune=0.0), jobs=1, sequence_bound=True)
    for (si, ci), value in run.values.items():
        total, exact, coupling, lossless = run.bounds[(si, ci)]
        assert value.value <= 1.0 + lossless + 1e-7 <= 1.0 + coupling + 2e-7 <= 1.0 + total + 3e-7
    table = summarize_expected(run)
    assert (table.block_efficiency <= table.lossless_bound + 1e-7).all()
    assert (table.gap_to_sequence_bound > 0).all()
    monkeypatch.setattr(db, "MAX_LP_SEQUENCES", 8)
    messages: list = []
    run = run_expected(target, draft, contexts, specs, options=TauOptions(prune=0.0), jobs=1, sequence_bound=True,
                       notify=messages.append)
    assert summarize_expected(run).lossless_bound.isna().all()
    assert len([m for m in messages if "LP bounds left empty" in m]) == 2
