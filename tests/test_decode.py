"""`mdsd decode`: draft trees, the walk down, and losslessness in generation.

The heart of it: generation with any lossless per-node verifier on any tree
shape is distributed exactly as the target's own sampling. Checked three ways,
against oracles computed from the models directly (never from the engine):

(a) at T = 0 the generated ids equal the target's greedy decoding;
(b) the law of the first two generated tokens from one fixed prompt equals the
    target's exact two-token law p(y1) p(y2 | y1) (G-test; family-wise level
    0.001, Bonferroni over every (verifier, tree) check);
(c) a 1x1 tree's block efficiency equals 1 + the mean of sum(min(p, q)) over the
    visited nodes, within its 95% interval.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from mdsd_cli import softmax
from mdsd_cli.cli.app import app
from mdsd_cli.decode import parse_tree, plan_decode, run_decode, sparse_tree
from mdsd_cli.decode.metrics import ratio_interval, steps_table, summarize
from mdsd_cli.errors import DataFileError, InputError, SizeLimitError
from mdsd_cli.models import Prompt, load_model_pair
from mdsd_cli.models.synthetic import SyntheticModel, synthetic_models
from mdsd_cli.verifiers import VERIFIERS, acceptance_rate

runner = CliRunner()

#: A small pair for the statistical tests: V = 4, α(n = 1) = 0.67 at the prompt, where the draft often
#: repeats a token the target likes too (so a walk that peeks at equal-token subtrees shows, see below).
V_SMALL = 4
PROMPT = (0, 3)
#: A sparse tree of 7 nodes in the EAGLE/Medusa format: root width 3, a depth-1 leaf (bonus as 2nd token).
SPARSE = [[0], [1], [2], [0, 0], [0, 1], [1, 0]]
SHAPES = ["2x2", "2x1", "3,1", "paths:3x2", "sparse"]
#: Every verifier on its own draft law.
LAWS = [("nss", "iid"), ("rrs", "iid"), ("kseq", "iid"), ("optimal-iid", "iid"), ("otm", "iid"), ("rrsw", "wor"),
        ("optimal-wor", "wor"), ("greedy", "greedy"), ("hub", "hub"), ("topk", "topk")]


def small_pair():
    return synthetic_models(V_SMALL, seed=9, noise=1.5)


def shape(name):
    return sparse_tree(SPARSE, label="sparse") if name == "sparse" else parse_tree(name)


def combos():
    """Every (verifier, sampler, tree) that can run (hub needs two drafts at every node)."""
    out = []
    for verifier, sampler in LAWS:
        for name in SHAPES:
            tree = shape(name)
            if verifier == "hub" and tree.widths != [2]:
                continue
            out.append((verifier, sampler, name))
    return out


COMBOS = combos()


def specs_for(verifier, sampler, name, temperature=1.0, V=V_SMALL):
    specs, skipped = plan_decode([shape(name)], [f"{verifier}:{sampler}"], temperatures=[temperature],
                                 vocab_size=V, baselines=False)
    assert len(specs) == 1 and not skipped
    return specs


def greedy_decode(target, prompt, count):
    """The target's greedy decoding, one plain forward at a time (ties to the lowest id)."""
    context = list(prompt)
    for _ in range(count):
        context.append(int(np.argmax(target.logits([context])[0])))
    return context[len(prompt):]


# --- (a) T = 0 is the target's greedy decoding ------------------------------------------------

@pytest.mark.parametrize("verifier,sampler,name", COMBOS)
def test_greedy_temperature_reproduces_target_greedy_decoding(verifier, sampler, name):
    target, draft = synthetic_models(12, seed=5, noise=1.0)
    prompts = [Prompt(i, tuple(np.random.default_rng(i).integers(0, 12, size=3))) for i in range(3)]
    run = run_decode(target, draft, prompts, specs_for(verifier, sampler, name, 0.0, V=12), max_new_tokens=10,
                     seed=0, reuse_verifiers=True)
    for r in run.runs:
        assert r.generated == greedy_decode(target, prompts[r.prompt].tokens, 10)
    assert sum(r.steps.shape[0] for r in run.runs) < 30  # and it did speculate: fewer target calls than tokens


@pytest.mark.parametrize("name", ["4x3", "paths:4x4", "4,2,2,1"])
def test_greedy_temperature_on_pydoc_ngram(name):
    pair = load_model_pair("pydoc-ngram")
    prompts = pair.prompts(3)
    specs, _ = plan_decode([name], ["rrs", "optimal-iid", "rrsw", "greedy"], temperatures=[0.0],
                           vocab_size=pair.vocab_size, baselines=True)
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=12, seed=3, reuse_verifiers=True)
    for r in run.runs:
        assert r.generated == greedy_decode(pair.target, prompts[r.prompt].tokens, 12), run.specs[r.spec].label


@pytest.mark.parametrize("name", ["4x3", "4,2,2,1"])
def test_select_block_and_select_traversal_greedy_temperature_on_pydoc_ngram(name):
    pair = load_model_pair("pydoc-ngram")
    prompts = pair.prompts(3)
    specs, _ = plan_decode([name], ["select-block:iid", "select-block:wor", "select-traversal:iid",
                                    "select-traversal:wor", "select-race:iid", "select-race:wor"], temperatures=[0.0],
                           vocab_size=pair.vocab_size, baselines=False)
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=12, seed=3, reuse_verifiers=True)
    for r in run.runs:
        assert r.generated == greedy_decode(pair.target, prompts[r.prompt].tokens, 12), run.specs[r.spec].label


# --- (b) the two-token law ----------------------------------------------------------------------

RUNS = 800
#: Family-wise level of the two-token checks: Bonferroni over the (verifier, tree) checks and the high-power one.
FAMILY_ALPHA = 1e-3
CHECKS = len(COMBOS) + 1


def exact_two_token_law(target, prompt, temperature=1.0):
    """p(y1 | prompt) p(y2 | prompt, y1), enumerated from the model (plain softmax of its logits)."""
    V = target.vocab_size
    first = softmax(target.logits([list(prompt)]), temperature)[0]
    second = softmax(target.logits([[*prompt, y] for y in range(V)]), temperature)
    return first[:, None] * second


def g_test(counts: np.ndarray, law: np.ndarray) -> float:
    """p-value of a G-test of ``counts`` against ``law`` (cells expecting < 5 pooled; impossible cells fail)."""
    counts, law = counts.ravel().astype(float), law.ravel()
    if counts[law == 0].sum() > 0:
        return 0.0
    expected = law * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.power_divergence(obs[keep], exp[keep], lambda_="log-likelihood").pvalue)


def two_token_counts(target, draft, specs, runs=RUNS, seed=0):
    prompts = [Prompt(i, PROMPT) for i in range(runs)]
    run = run_decode(target, draft, prompts, specs, max_new_tokens=2, seed=seed, node_metrics=False,
                     reuse_verifiers=True)
    counts = np.zeros((target.vocab_size, target.vocab_size))
    for r in run.runs:
        counts[r.generated[0], r.generated[1]] += 1
    return counts


@pytest.mark.parametrize("verifier,sampler,name", COMBOS)
def test_first_two_tokens_follow_the_target_law(verifier, sampler, name):
    target, draft = small_pair()
    counts = two_token_counts(target, draft, specs_for(verifier, sampler, name))
    law = exact_two_token_law(target, PROMPT)
    pvalue = g_test(counts, law)
    assert pvalue >= FAMILY_ALPHA / CHECKS, (pvalue, counts, law * RUNS)


def test_first_two_tokens_follow_the_target_law_with_many_runs():
    """The same check with 3,000 runs on an iid tree, where equal-token children are frequent."""
    target, draft = small_pair()
    counts = two_token_counts(target, draft, specs_for("rrs", "iid", "2x2"), runs=3000)
    assert g_test(counts, exact_two_token_law(target, PROMPT)) >= FAMILY_ALPHA / CHECKS


def test_two_token_test_catches_a_lossy_walk(monkeypatch):
    """The test above can fail: a verifier that always takes the first draft is rejected."""
    from mdsd_cli.verifiers.rrs import RRS

    monkeypatch.setattr(RRS, "sample", lambda self, drafts, rng: np.atleast_2d(drafts)[:, 0].copy())
    target, draft = small_pair()
    counts = two_token_counts(target, draft, specs_for("rrs", "iid", "2x2"))
    assert g_test(counts, exact_two_token_law(target, PROMPT)) < 1e-12


def test_two_token_test_catches_a_walk_that_peeks_at_subtrees(monkeypatch):
    """Choosing among equal-token children by their subtrees (here: the child whose own drafts hold the
    target's favourite next token) is lossy, and the two-token test sees it."""
    from mdsd_cli.decode import engine, walk

    def peeking(tree, logits, temperature, verifier_cls, sampler, rng, **kw):
        for u in range(tree.size):  # keep one child per token: the best-looking subtree
            best: dict[int, int] = {}
            for c in tree.children[u]:
                looks_good = tree.drafts[c] is not None and int(np.argmax(logits[c])) in tree.drafts[c]
                if tree.tokens[c] not in best or looks_good:
                    best[tree.tokens[c]] = c
            tree.children[u] = list(best.values())
        return walk.walk_per_node(tree, logits, temperature, verifier_cls, sampler, rng, **kw)

    monkeypatch.setattr(engine, "walk_per_node", peeking)
    target, draft = small_pair()
    counts = two_token_counts(target, draft, specs_for("rrs", "iid", "2x2"), runs=3000)
    assert g_test(counts, exact_two_token_law(target, PROMPT)) < FAMILY_ALPHA / CHECKS


@pytest.mark.parametrize("verifier,sampler", [(v, s) for v, s in LAWS if v != "hub"])
def test_reused_verifiers_give_identical_tokens(verifier, sampler):
    target, draft = small_pair()
    prompts = [Prompt(i, PROMPT) for i in range(12)]
    specs = specs_for(verifier, sampler, "paths:3x2" if verifier != "otm" else "2x2")
    fresh = run_decode(target, draft, prompts, specs, max_new_tokens=6, seed=1)
    reused = run_decode(target, draft, prompts, specs, max_new_tokens=6, seed=1, reuse_verifiers=True)
    assert [r.generated for r in fresh.runs] == [r.generated for r in reused.runs]
    assert all(np.array_equal(a.visits, b.visits, equal_nan=True) for a, b in zip(fresh.runs, reused.runs))


@pytest.mark.parametrize("sampler", ["iid", "wor"])
def test_select_block_reuses_its_per_node_verifiers_with_identical_tokens(sampler):
    target, draft = small_pair()
    prompts = [Prompt(i, PROMPT) for i in range(12)]
    specs = specs_for("select-block", sampler, "2x2")
    fresh = run_decode(target, draft, prompts, specs, max_new_tokens=6, seed=1)
    reused = run_decode(target, draft, prompts, specs, max_new_tokens=6, seed=1, reuse_verifiers=True)
    assert [r.generated for r in fresh.runs] == [r.generated for r in reused.runs]


# --- (c) and the identities ---------------------------------------------------------------------

def contexts_of_steps(run):
    """The context at the root of every step, rebuilt from the prompts and the generated ids."""
    return [[*run.prompts[r.prompt].tokens, *r.generated[:position]]
            for r in run.runs for position in r.steps[:, 0].astype(int)]


@pytest.mark.parametrize("verifier", ["rrs", "kseq", "rrsw", "greedy", "optimal-wor", "nss"])
def test_one_by_one_tree_block_efficiency_is_one_plus_sum_min(verifier):
    pair = load_model_pair("pydoc-ngram")
    prompts = pair.prompts(24)
    cls = VERIFIERS[verifier]
    specs, _ = plan_decode(["1x1"], [f"{verifier}:{cls.default_sampler}"], temperatures=[1.0],
                           vocab_size=pair.vocab_size, baselines=False)
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=24, seed=11, reuse_verifiers=True)
    contexts = contexts_of_steps(run)
    P = softmax(pair.target.logits(contexts))
    Q = softmax(pair.draft.logits(contexts))
    # the oracle: single-draft speculative sampling accepts with prob sum(min(p, q)); nss with sum(p q)
    accept = (P * Q).sum(axis=1) if verifier == "nss" else np.minimum(P, Q).sum(axis=1)
    row = summarize(run).iloc[0]
    predicted = 1.0 + accept.mean()
    assert row.block_efficiency_low <= predicted <= row.block_efficiency_high, (row.block_efficiency, predicted)
    assert row.block_efficiency_high - row.block_efficiency_low < 0.25  # and the interval is informative
    if verifier != "nss":  # α* at n = 1 is sum(min(p, q)) too
        assert row.alpha_star == pytest.approx(accept.mean(), abs=1e-9)


@pytest.mark.parametrize("verifier,K", [("rrs", 2), ("kseq", 4), ("greedy", 3), ("hub", 2), ("nss", 3)])
def test_depth_one_acceptance_equals_the_single_step_rate(verifier, K):
    """A Kx1 tree accepts at depth 1 exactly as often as the verifier's exact single-step rate at those nodes."""
    pair = load_model_pair("pydoc-ngram")
    prompts = pair.prompts(40)
    specs, _ = plan_decode([f"{K}x1"], [verifier], temperatures=[1.0], vocab_size=pair.vocab_size,
                           baselines=False)
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=16, seed=5, node_metrics=False,
                     reuse_verifiers=True)
    contexts = contexts_of_steps(run)
    P = softmax(pair.target.logits(contexts))
    Q = softmax(pair.draft.logits(contexts))
    rates = acceptance_rate(verifier, P, Q, K)  # exact closed forms, one per visited node
    realised = summarize(run).iloc[0].accepted_ge_1
    se = np.sqrt((rates * (1 - rates)).sum()) / rates.size
    assert abs(realised - rates.mean()) <= 4 * se + 1e-12, (realised, rates.mean(), se)


def test_widening_a_tree_never_lowers_alpha_star_at_a_node():
    pair = load_model_pair("pydoc-ngram")
    prompts = pair.prompts(12)
    specs, _ = plan_decode(["1x1", "2x1", "4x1", "8x1"], ["rrs"], temperatures=[0.7], vocab_size=pair.vocab_size,
                           baselines=False)
    steps = steps_table(run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=4, seed=0))
    first = steps[steps.step == 0].pivot_table(index="prompt", columns="tree", values="alpha_star_root")
    widths = first[["1x1", "2x1", "4x1", "8x1"]].to_numpy()  # the same root context in every tree
    assert (np.diff(widths, axis=1) >= -1e-12).all()
    assert (np.diff(widths, axis=1) > 1e-6).any()


# --- trees ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,nodes,depth,widths", [
    ("2x4", 31, 4, [2]), ("1x5", 6, 5, [1]), ("4x3", 85, 3, [4]), ("4,2,2,1", 45, 4, [1, 2, 4]),
    ("paths:4x4", 17, 4, [1, 2, 3, 4]),
])
def test_tree_specs(spec, nodes, depth, widths):
    tree = parse_tree(spec)
    assert (tree.max_nodes, tree.depth, tree.widths, tree.label) == (nodes, depth, widths, spec)


def test_sparse_tree_from_eagle_style_paths(tmp_path):
    eagle = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0],
             [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0],
             [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
    path = tmp_path / "eagle.json"
    path.write_text(json.dumps(eagle))
    tree = parse_tree(str(path))
    assert (tree.label, tree.max_nodes, tree.depth) == ("eagle", 26, 5)
    assert [len(c) for c in tree.children[:5]] == [4, 3, 2, 2, 1]  # root, then (0), (1), (2), (3)


def test_drafted_trees_follow_their_shape():
    target, draft = synthetic_models(50, seed=0)
    from mdsd_cli.decode import grow_tree
    from mdsd_cli.samplers import get_sampler

    rng = np.random.default_rng(0)
    tree = grow_tree(draft, [1, 2], parse_tree("3,2,1"), get_sampler("wor"), 1.0, rng)
    assert tree.size == 1 + 3 + 6 + 6 and tree.passes == 3
    assert [len(tree.children[u]) for u in range(4)] == [3, 2, 2, 2]
    assert all(len(set(tree.tokens[c] for c in tree.children[u])) == len(tree.children[u]) for u in range(tree.size))
    paths = grow_tree(draft, [1, 2], parse_tree("paths:6x3"), get_sampler("iid"), 1.0, rng)
    leaves = [u for u in range(paths.size) if not paths.children[u]]
    assert sum(paths.n[u] for u in paths.children[0]) == 6 and paths.n[0] == 6
    assert all(paths.depth[u] == 3 for u in leaves)
    # each node draws one token per path through it: a child's n is how often the parent drew its token
    for u in range(paths.size):
        for c in paths.children[u]:
            if paths.depth[c] < 3:
                assert paths.n[c] == int((paths.drafts[u] == paths.tokens[c]).sum())


@pytest.mark.parametrize("spec,error,fragment", [
    ("3y2", InputError, "unknown tree spec '3y2'"),
    ("paths:0x3", InputError, "K and L must be >= 1"),
    ("2,0,1", InputError, "every width must be >= 1"),
    ("8x6", SizeLimitError, "tree 8x6 has 299,593 nodes (limit 2,048)"),
    ("paths:1000x3", SizeLimitError, "3,001 nodes"),
    ("nothere.json", DataFileError, "tree file nothere.json not found"),
])
def test_bad_tree_specs(spec, error, fragment):
    with pytest.raises(error, match=None) as info:
        parse_tree(spec)
    assert fragment in str(info.value)


@pytest.mark.parametrize("paths,fragment", [
    ([[0], [0, 1]], "[0, 1] without its sibling [0, 0]"),
    ([[0], [1, 0]], "[1, 0] has no parent [1]"),
    ([[0], [0]], "appears twice"),
    ([[0], [-1]], "is not a path of child indices"),
    ({"nodes": 3}, "expected a non-empty list"),
])
def test_sparse_files_that_are_not_trees(paths, fragment):
    with pytest.raises(InputError) as info:
        sparse_tree(paths)
    assert fragment in str(info.value)


# --- models --------------------------------------------------------------------------------------

def test_pydoc_ngram_models_are_the_dataset_models():
    """At the dataset's held-out positions, the models over contexts give the dataset's logits exactly."""
    from mdsd_cli.datasets import ngram as dataset
    from mdsd_cli.models.ngram import corpus_split

    pair = load_model_pair("pydoc-ngram")
    data = dataset.load().select(np.arange(0, 512, 16))
    _, _, held = corpus_split()
    contexts = [held[d][:i] for d, i in zip(data.labels["document"], data.labels["position"])]
    assert np.array_equal(pair.target.logits(contexts), data.target_logits)
    assert np.array_equal(pair.draft.logits(contexts), data.draft_logits)
    text = "Return the index of the first item ( a string ) ."
    assert pair.target.decode(pair.target.encode(text)) == text.lower()


def test_synthetic_models_refuse_parameters_that_are_not_numbers_of_their_kind():
    """2.5 tokens were cut to 2, a string exponent or seed raised TypeError from a comparison: one-line InputErrors."""
    for kw, what in [(dict(vocab_size=2.5), "vocabulary size must be an integer >= 1, got 2.5"),
                     (dict(vocab_size=12, seed="1"), "seed must be an integer >= 0"),
                     (dict(vocab_size=12, order=-1), "context order must be an integer >= 0, got -1"),
                     (dict(vocab_size=12, exponent="1"), "Zipf exponent must be > 0, got '1'"),
                     (dict(vocab_size=12, noise=float("nan")), "draft noise must be >= 0, got nan")]:
        with pytest.raises(InputError, match=what):
            synthetic_models(**kw)


def test_synthetic_models_are_seeded_and_depend_on_the_last_tokens_only():
    a, b = SyntheticModel(152_064, seed=4, noise=1.0), SyntheticModel(152_064, seed=4, noise=1.0)
    la = a.logits([[5, 6, 7], [9, 6, 7], [6, 8]])
    assert np.array_equal(la, b.logits([[5, 6, 7], [9, 6, 7], [6, 8]]))
    assert np.array_equal(la[0], la[1]) and not np.array_equal(la[0], la[2])  # order 2: last two tokens
    target, draft = synthetic_models(1000, seed=4)
    p = softmax(target.logits([[1, 2]]))[0]
    assert np.allclose(np.sort(p)[::-1], softmax(-np.log(np.arange(1, 1001))))  # a Zipf law, re-ranked
    assert not np.array_equal(target.logits([[1, 2]]), draft.logits([[1, 2]]))
    assert not np.array_equal(target.logits([[1, 2]]), SyntheticModel(1000, seed=5).logits([[1, 2]]))


# --- the run -------------------------------------------------------------------------------------

def test_generation_ends_at_max_new_tokens_and_at_eos():
    target, draft = synthetic_models(20, seed=2)
    prompts = [Prompt(i, (i, 1)) for i in range(4)]
    specs, _ = plan_decode(["2x3"], ["rrs"], temperatures=[1.0], vocab_size=20)
    run = run_decode(target, draft, prompts, specs, max_new_tokens=17, seed=0)
    assert all(len(r.generated) == 17 for r in run.runs)
    target.eos_token_id = eos = int(np.argmax(target.logits([[3, 4]])[0]))  # a likely token
    run = run_decode(target, draft, prompts, specs, max_new_tokens=200, seed=0)
    for r in run.runs:
        assert (r.generated[-1] == eos and eos not in r.generated[:-1]) or (len(r.generated) == 200
                                                                            and eos not in r.generated)
    assert any(len(r.generated) < 200 for r in run.runs)


def test_a_draft_with_a_shorter_context_than_the_target_is_checked_too():
    """The draft reads the same contexts as the target: the shorter context of the two is checked, with the
    same one-line error (a GPT-2 draft of 24 positions beside a target of 64 gave a 108-line traceback)."""
    target, draft = synthetic_models(20, seed=2)
    target.max_context, draft.max_context = 64, 24
    specs, _ = plan_decode(["1x3"], ["rrs"], vocab_size=20, baselines=False)
    prompts = [Prompt(0, (1, 2, 3))]
    with pytest.raises(InputError, match=r"prompt 0 \(3 tokens\) \+ 30 new tokens \+ a tree of depth 3 exceed "
                                         r"the draft model's context of 24 tokens"):
        run_decode(target, draft, prompts, specs, max_new_tokens=30)
    with pytest.raises(InputError, match="longer than the draft model's context of 24 tokens"):
        run_decode(target, draft, [Prompt(0, tuple(range(20)) + (1,) * 5)], specs, max_new_tokens=1)
    assert len(run_decode(target, draft, prompts, specs, max_new_tokens=17).runs[0].generated) == 17  # 3+17+4 = 24
    target.max_context, draft.max_context = 24, 64
    with pytest.raises(InputError, match="exceed the model's context of 24 tokens"):
        run_decode(target, draft, prompts, specs, max_new_tokens=30)


def test_ratio_interval_against_a_direct_computation():
    tokens, steps = np.array([30.0, 50, 41, 20]), np.array([12.0, 20, 15, 10])
    tau, lo, hi = ratio_interval(tokens, steps)
    resid = tokens - tau * steps
    se = np.sqrt(4 / 3 * (resid ** 2).sum()) / steps.sum()
    assert tau == pytest.approx(141 / 57)
    assert (hi - tau) == pytest.approx(stats.t.ppf(0.975, 3) * se) and (tau - lo) == pytest.approx(hi - tau)


def test_block_efficiency_intervals_stay_in_the_possible_range():
    """Two prompts on a 2x2 tree: the t interval alone reached [-2.24, 6.24]; clipped to [1, D + 1]."""
    tau, lo, hi = ratio_interval(np.array([9.0, 2.0]), np.array([3.0, 2.0]), bounds=(1.0, 3.0))
    assert (lo, hi) == (1.0, 3.0) and tau == pytest.approx(11 / 5)
    pair = load_model_pair("pydoc-ngram")
    specs, _ = plan_decode(["2x2", "1x3"], ["rrs"], temperatures=[1.0], vocab_size=pair.vocab_size)
    df = summarize(run_decode(pair.target, pair.draft, pair.prompts(2), specs, max_new_tokens=6, seed=1),
                   timing=False)
    assert (df.block_efficiency_low >= 1).all() and (df.block_efficiency_high <= df.depth + 1).all()
    assert (df.block_efficiency_low <= df.block_efficiency).all() and (df.block_efficiency <= df.block_efficiency_high).all()


def test_summary_columns_and_cost_model():
    pair = load_model_pair("pydoc-ngram")
    specs, _ = plan_decode(["2x3", "paths:3x2"], ["rrs"], temperatures=[1.0], vocab_size=pair.vocab_size)
    run = run_decode(pair.target, pair.draft, pair.prompts(4), specs, max_new_tokens=16, seed=0)
    df = summarize(run, draft_cost=0.1, node_cost=0.01)
    assert list(df.tree) == ["plain", "2x3", "paths:3x2", "1x2", "1x3"]
    plain = df[df.tree == "plain"].iloc[0]
    assert plain.block_efficiency == 1.0 and plain.target_calls == plain.generated_tokens == 64
    trees = df[df.tree != "plain"]
    assert (trees.block_efficiency >= trees.generated_tokens / trees.target_calls - 1e-12).all()
    expected = trees.block_efficiency / (1 + 0.1 * trees.draft_passes + 0.01 * (trees.mean_nodes - 1))
    assert np.allclose(trees.speedup_model, expected)
    assert (trees.block_efficiency_low < trees.block_efficiency).all()
    assert (trees.block_efficiency < trees.block_efficiency_high).all()
    for k in (1, 2):  # accepted at least k drafts is rarer than at least k - 1
        assert (trees[f"accepted_ge_{k}"] <= (trees[f"accepted_ge_{k - 1}"] if k > 1 else 1)).all()
    # tau = 1 + sum_k P(accepted >= k) exactly (the last step's tokens are counted whole)
    ge = trees[[c for c in df.columns if c.startswith("accepted_ge_")]].fillna(0).sum(axis=1)
    assert np.allclose(trees.block_efficiency, 1 + ge)
    assert np.isnan(df.set_index("tree").loc["1x2", "accepted_ge_3"])
    assert trees.alpha_star.between(0.3, 1).all() and trees.acceptance.between(0.3, 1).all()


def test_plan_rules():
    specs, skipped = plan_decode(["2x4", "4x3", "paths:4x4"], ["hub", "rrs", "optimal-wor"], temperatures=[0.5, 1],
                                 vocab_size=2380)
    labels = {s.label for s in specs}
    assert "2x4 hub/hub T=0.5" in labels and "4x3 hub/hub T=0.5" not in labels
    assert "2x4 wor/optimal-wor T=1" in labels and "4x3 wor/optimal-wor T=1" in labels  # any n <= 16
    assert {"plain T=0.5", "1x4 iid/rrs T=1", "1x3 iid/rrs T=1"} <= labels
    assert any("skipping hub on hub drafts for tree 4x3" in m for m in skipped)
    specs, skipped = plan_decode(["17x1", "2x2"], ["optimal-wor"], vocab_size=2380)
    assert {s.label for s in specs} >= {"2x2 wor/optimal-wor T=1"}
    assert any("17x1" in m and "at most 16 drafts" in m for m in skipped)
    specs, _ = plan_decode(["2x2"], ["nss", "rrs"], samplers=["iid", "wor"], vocab_size=10, baselines=False)
    assert {(s.sampler, s.verifier) for s in specs} == {("iid", "nss"), ("wor", "nss"), ("iid", "rrs")}
    with pytest.raises(InputError, match="lossless for iid drafts only, not wor"):
        plan_decode(["2x2"], ["rrs"], samplers=["wor"], vocab_size=10)
    with pytest.raises(InputError, match="no verifier given for wor drafts"):
        plan_decode(["2x2"], ["rrs"], samplers=["iid", "wor"], vocab_size=10)
    with pytest.raises(InputError, match="tree 4x3 has nodes with 4 children"):
        plan_decode(["4x3"], ["hub"], vocab_size=10)
    with pytest.raises(SizeLimitError, match="optimal-wor cannot run on tree 17x1"):
        plan_decode(["17x1"], ["optimal-wor"], vocab_size=2380)
    with pytest.raises(InputError, match="unknown verifier 'rss'"):
        plan_decode(["2x2"], ["rss"], vocab_size=10)


# --- the command ---------------------------------------------------------------------------------

def run_cli(*args):
    return runner.invoke(app, ["decode", *[str(a) for a in args]])


def test_cli_table_files_and_seeding(tmp_path):
    common = ["--models", "synthetic", "--vocab", 50, "--prompts", 6, "--max-new-tokens", 12, "--tree", "2x2",
              "--tree", "paths:3x2", "--verifier", "rrs", "--verifier", "greedy", "-t", 0.7, "--seed", 4]
    one = run_cli(*common, "--no-timing", "--quiet")
    two = run_cli(*common, "--no-timing", "--quiet", "--jobs", 2)
    assert one.exit_code == 0 and two.exit_code == 0, one.stderr
    assert one.stdout == two.stdout and one.stderr == ""  # seeded per prompt: --jobs does not matter
    df = pd.read_csv(__import__("io").StringIO(one.stdout))
    assert set(df.tree) == {"plain", "2x2", "paths:3x2", "1x2"} and set(df.verifier) == {"-", "rrs", "greedy"}
    out, steps, text, timings = (tmp_path / n for n in ("s.csv", "steps.parquet", "gen.jsonl", "t.csv"))
    res = run_cli(*common, "--out", out, "--steps", steps, "--text", text, "--timings", timings)
    assert res.exit_code == 0 and res.stdout == "", res.stderr
    summary = pd.read_csv(out)
    assert summary.drop(columns=[]).equals(df)  # the timing columns went to --timings
    assert {"tokens_per_second", "speedup_measured", "verify_seconds"} <= set(pd.read_csv(timings).columns)
    manifest = json.loads((tmp_path / "s.csv.manifest.json").read_text())
    assert manifest["command"] == "decode" and manifest["config"]["prompt_count"] == 6
    per_step = pd.read_parquet(steps)
    assert per_step.groupby(["tree", "sampler", "verifier"]).tokens.sum().min() >= 6 * 12
    records = [json.loads(line) for line in text.read_text().splitlines()]
    assert len(records) == len(df) * 6 and all(len(r["ids"]) == 12 for r in records)


def test_cli_config_file_and_prompts_file(tmp_path):
    (tmp_path / "trees").mkdir()
    (tmp_path / "trees" / "tiny.json").write_text("[[0], [1], [0, 0]]")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": 7, "prompt": "the string"}\n{"id": 9, "prompt": "return a list of"}\n')
    config = tmp_path / "run.toml"
    config.write_text(f'models = "pydoc-ngram"\nprompts = "{prompts}"\nmax_new_tokens = 8\n'
                      'trees = ["trees/tiny.json", "2x2"]\nverifiers = ["kseq", "nss:wor"]\ntemperatures = [0.7]\n')
    res = run_cli("--config", config, "--no-timing", "-q", "--max-new-tokens", 5, "--text", tmp_path / "g.jsonl")
    assert res.exit_code == 0, res.stderr
    df = pd.read_csv(__import__("io").StringIO(res.stdout))
    assert set(df.tree) == {"plain", "tiny", "2x2", "1x2"} and (df.prompts == 2).all()
    assert set(zip(df.sampler, df.verifier)) >= {("iid", "kseq"), ("wor", "nss")}
    records = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert {r["prompt"] for r in records} == {7, 9} and all(len(r["ids"]) == 5 for r in records)
    assert records[0]["prompt_text"] == "the string"


@pytest.mark.parametrize("args,code,fragment", [
    (["--tree", "2y4"], 1, "unknown tree spec '2y4'"),
    (["--tree", "BAD_TREE"], 1, "is not a tree: [0, 1] without its sibling [0, 0]"),
    (["--sampler", "wor", "--verifier", "rrs"], 1, "verifier rrs is lossless for iid drafts only, not wor"),
    (["--tree", "4x3", "--verifier", "hub"], 1, "tree 4x3 has nodes with 4 children"),
    (["--tree", "8x6"], 1, "tree 8x6 has 299,593 nodes (limit 2,048)"),
    (["--tree", "10x5000"], 1, "tree 10x5000 has more than 10^15 nodes (limit 2,048)"),
    (["--tree", "10000000x10000000"], 1, "has more than 10^15 nodes"),  # refused at once, not after minutes
    (["--tree", "9" * 5000 + "x2"], 1, "a number of 5,000 digits"),
    (["--max-new-tokens", "99999999999999999999"], 2, "--max-new-tokens"),
    (["--steps", "SAME_AS_OUT"], 1, "--out and --steps both write"),
    (["--tree", "17x1", "--verifier", "optimal-wor"], 1, "optimal-wor takes at most 16 drafts"),
    (["--verifier", "nope"], 1, "unknown verifier 'nope'"),
    (["--prompts", "missing.txt"], 1, "prompts file missing.txt not found"),
    (["--models", "gpt5"], 1, "unknown model pair 'gpt5'"),
    (["--vocab", "100"], 1, "use them with --models synthetic"),
    (["--max-new-tokens", "0"], 2, "--max-new-tokens"),
])
def test_cli_bad_input_is_one_clean_line_and_no_file(tmp_path, args, code, fragment):
    bad_tree = tmp_path / "bad.json"
    bad_tree.write_text("[[0], [0, 1]]")
    out = tmp_path / "out.csv"
    given = [str(bad_tree) if a == "BAD_TREE" else str(out) if a == "SAME_AS_OUT" else a for a in args]
    res = run_cli("--prompts", "2", "--max-new-tokens", "4", *given, "--out", out)
    assert res.exit_code == code, (res.exit_code, res.stderr)
    assert res.stdout == "" and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("Error: ")
    assert fragment in " ".join(res.stderr.split()), res.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [bad_tree]


@pytest.mark.parametrize("line,fragment", [
    ("seed = -1", "seed = -1 is out of range; it must be >= 0 (as --seed)"),
    ("draft_cost = -0.5", "draft_cost = -0.5 is out of range"),
    ("node_cost = -1", "node_cost = -1 is out of range"),
    ('models = "synthetic"\nvocab = 1', "vocab = 1 is out of range; it must be >= 2"),
    ("max_new_tokens = 100000000000", "must be between 1 and 1,000,000"),
    ("temperatures = [0.7, -1.0]", "temperatures must be numbers >= 0, got -1.0"),
    ("noise = nan", "noise = nan is out of range"),
])
def test_config_values_get_the_command_line_ranges(tmp_path, line, fragment):
    config = tmp_path / "run.toml"
    config.write_text(line + "\n")
    res = run_cli("--config", config, "--prompts", "1", "--max-new-tokens", "2", "--out", tmp_path / "out.csv")
    assert res.exit_code == 1 and res.stdout == "" and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and fragment in " ".join(res.stderr.split()), res.stderr
    assert not (tmp_path / "out.csv").exists()


def test_cli_warns_on_stderr_when_a_combination_is_skipped():
    res = run_cli("--models", "synthetic", "--vocab", 30, "--prompts", 2, "--max-new-tokens", 4, "--tree", "2x2",
                  "--tree", "3x1", "--verifier", "hub", "--no-baselines", "--no-timing")
    assert res.exit_code == 0
    assert "Warning: skipping hub on hub drafts for tree 3x1" in res.stderr
    assert list(pd.read_csv(__import__("io").StringIO(res.stdout)).tree) == ["2x2"]


def test_plot_draws_a_decode_summary(tmp_path):
    res = run_cli("--models", "synthetic", "--vocab", 40, "--prompts", 3, "--max-new-tokens", 6, "--tree", "2x2",
                  "--tree", "paths:2x3", "--verifier", "rrs", "--verifier", "hub", "-t", 0.5, "-t", 1, "-q",
                  "--out", tmp_path / "summary.csv")
    assert res.exit_code == 0, res.stderr
    plotted = runner.invoke(app, ["plot", str(tmp_path), "--quiet"])
    assert plotted.exit_code == 0, plotted.stderr
    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".png", ".svg"))
    assert names == sorted(f"{stem}.{ext}" for stem in ("block-efficiency", "acceptance-by-depth-T0.5",
                                                        "acceptance-by-depth-T1") for ext in ("png", "svg"))
    wrong = runner.invoke(app, ["plot", str(tmp_path), "--figure", "samplers"])
    assert wrong.exit_code == 1 and "its figure is tree-decode" in wrong.stderr


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (ROOT / "results" / "tree-decode" / "summary.csv").exists(), reason="no committed results")
def test_committed_tree_decode_results_match_a_rerun():
    """Configurations of the committed generation check, decoded again: the same numbers, prompt by prompt.

    ``rrs`` is among them: its draws once depended on numpy's argsort tie order, which differs between
    AVX2 and AVX-512 processors (the residual family's order is canonical now)."""
    from mdsd_cli.cli.decode import read_config
    from mdsd_cli.decode.metrics import prompts_table

    cfg = read_config(ROOT / "experiments" / "tree-decode.toml")
    pair = load_model_pair(cfg["models"])
    specs, _ = plan_decode(["2x4"], ["rrs", "kseq"], temperatures=[1.0], vocab_size=pair.vocab_size,
                           baselines=False)
    run = run_decode(pair.target, pair.draft, pair.prompts(cfg["prompts"]), specs,
                     max_new_tokens=cfg["max_new_tokens"], seed=cfg["seed"], reuse_verifiers=True)
    fresh = summarize(run, draft_cost=cfg["draft_cost"], timing=False)
    committed = pd.read_csv(ROOT / "results" / "tree-decode" / "summary.csv")
    keys = ["tree", "sampler", "verifier", "temperature"]
    merged = fresh.merge(committed, on=keys, suffixes=("", "_committed"))
    assert len(merged) == 2
    for column in ("target_calls", "generated_tokens", "block_efficiency", "block_efficiency_low", "accepted_ge_3",
                   "acceptance", "alpha_star", "acceptance_d2"):
        assert np.allclose(merged[column], merged[f"{column}_committed"], rtol=1e-10, atol=1e-12), column
    per_prompt = pd.read_csv(ROOT / "results" / "tree-decode" / "prompts.csv")
    mine = prompts_table(run).merge(per_prompt, on=[*keys, "prompt"], suffixes=("", "_committed"))
    assert len(mine) == 2 * cfg["prompts"] and (mine.walk_tokens == mine.walk_tokens_committed).all()


@pytest.mark.skipif(not (ROOT / "results" / "tree-decode" / "contexts.parquet").exists(),
                    reason="no committed results")
def test_committed_expected_tokens_match_a_rerun():
    """tau(c) of the committed tree-decode-expected run at a few of its contexts, evaluated again: ``rrsw``
    (sampled draft tuples, so the random stream is on the path) and ``rrs`` (exact recursion, sampled tails)."""
    from mdsd_cli.cli.decode import read_config
    from mdsd_cli.decode.expected import TauOptions, run_expected, sample_contexts

    cfg = read_config(ROOT / "experiments" / "tree-decode-expected.toml")
    pair = load_model_pair(cfg["models"])
    specs, _ = plan_decode(["4x3"], ["rrs", "rrsw"], temperatures=[1.0], vocab_size=pair.vocab_size,
                           baselines=False)
    prompts = pair.prompts(cfg["prompts"])[:4]
    contexts = [c for prompt in prompts
                for c in sample_contexts(pair.target, [prompt], per_prompt=cfg["contexts_per_prompt"],
                                         max_new_tokens=cfg["max_new_tokens"], temperature=1.0, seed=cfg["seed"])]
    options = TauOptions(prune=cfg["prune"], tail_samples=cfg["tail_samples"], replicates=cfg["replicates"],
                         draft_samples=cfg["draft_samples"])
    run = run_expected(pair.target, pair.draft, contexts, specs, options=options, seed=cfg["seed"])
    committed = pd.read_parquet(ROOT / "results" / "tree-decode" / "contexts.parquet")
    checked = 0
    for (si, ci), value in run.values.items():
        spec, context = run.specs[si], run.contexts[ci]
        row = committed[(committed.tree == "4x3") & (committed.verifier == spec.verifier)
                        & (committed.temperature == 1.0) & (committed.prompt == context.prompt)
                        & (committed.position == context.position)]
        assert len(row) == 1, (spec.label, context.prompt, context.position)
        for column, mine in (("tau", value.value), ("tau_low", value.lower), ("tau_high", value.upper)):
            assert np.isclose(mine, row[column].iloc[0], rtol=1e-10, atol=1e-12, equal_nan=True), (spec.label, column)
        checked += 1
    assert checked == 2 * len(contexts)


def test_more_prompts_than_the_built_in_set_says_so(capsys):
    """--prompts 100000 on a pair with fewer prompts runs them all and says how many, on stderr."""
    from mdsd_cli.cli.decode import _prompts

    pair = load_model_pair("pydoc-ngram")
    available = len(pair.prompts(10**6))
    got = _prompts(pair, str(available + 5))
    assert len(got) == available
    err = capsys.readouterr().err
    assert f"the built-in set has {available} prompts" in " ".join(err.split())
    _prompts(pair, "3")
    assert capsys.readouterr().err == ""


def test_verifier_kernels_are_loaded_before_the_clock_starts():
    """optimal-iid/optimal-wor load compiled kernels on first use (about 2 s): run_decode warms every
    verifier up before timing, so the first configuration is not charged for it. In a fresh interpreter:
    no kernel before, every kernel those verifiers use compiled after, and no run's stream touched."""
    import subprocess
    import sys

    from tests.conftest import SUBPROCESS_TIMEOUT

    code = (
        "from mdsd_cli import _jit\n"
        "from mdsd_cli.verifiers.optimal import _curtain_kernels as k\n"
        "from mdsd_cli.decode import plan_decode\n"
        "from mdsd_cli.decode.engine import warm_up_verifiers\n"
        "kernels = [f for f in vars(k).values() if hasattr(f, 'signatures')]\n"
        "before = sum(bool(f.signatures) for f in kernels)\n"
        "specs, _ = plan_decode(['2x2'], ['optimal-iid', 'optimal-wor', 'rrs'], vocab_size=50, baselines=False)\n"
        "warm_up_verifiers(specs)\n"
        "print(_jit.numba_enabled(), before, sum(bool(f.signatures) for f in kernels))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    enabled, before, after = res.stdout.split()
    if enabled == "True":
        assert int(before) == 0 and int(after) > 0, res.stdout


@pytest.mark.parametrize("returned,fragment", [
    (lambda n, V: np.zeros((1, V)), "returned logits of shape (1, 7) for"),  # one row for several contexts
    (lambda n, V: np.zeros((n, V + 1)), "one row of V = 7 per context"),
    (lambda n, V: np.full((n, V), "a"), "returned logits that are not numbers"),
])
def test_a_custom_model_returning_the_wrong_logits_is_told_what_is_wrong(returned, fragment):
    from mdsd_cli.errors import InputError
    from mdsd_cli.models import NextTokenModel

    class Broken(NextTokenModel):
        name, vocab_size = "broken", 7

        def logits(self, contexts):
            return returned(len(contexts), self.vocab_size)

    class Fine(NextTokenModel):
        name, vocab_size = "fine", 7

        def logits(self, contexts):
            return np.zeros((len(contexts), self.vocab_size))

    specs, _ = plan_decode(["2x2"], ["rrs"], vocab_size=7, baselines=False)
    for target, draft in ((Fine(), Broken()), (Broken(), Fine())):
        with pytest.raises(InputError, match=re.escape(fragment)):
            run_decode(target, draft, [Prompt(0, (1, 2))], specs, max_new_tokens=4, seed=0)


def test_library_arguments_of_the_wrong_kind_are_input_errors():
    from mdsd_cli.errors import InputError

    target, draft = small_pair()
    for vocab_size in (0, -1, "x", True):
        with pytest.raises(InputError, match="vocab_size must be an integer >= 1"):
            plan_decode(["2x2"], ["rrs"], vocab_size=vocab_size)
    specs, _ = plan_decode(["2x2"], ["rrs"], vocab_size=V_SMALL)
    for seed in ("abc", -1, 1.5, pytest.importorskip("torch").Generator()):
        with pytest.raises(InputError, match="seed must be an integer >= 0"):
            run_decode(target, draft, [Prompt(0, (1, 2))], specs, max_new_tokens=3, seed=seed)
    for tokens in (0, "x", 2.0):
        with pytest.raises(InputError, match="max_new_tokens must be an integer >= 1"):
            run_decode(target, draft, [Prompt(0, (1, 2))], specs, max_new_tokens=tokens)


def test_a_denormal_temperature_is_the_limit_without_a_numpy_warning():
    """Issue 26, item 10: ``-t 1e-320`` printed numpy's overflow warning; the law is the T -> 0 limit
    (one-hot on the maximum; ties share it), silently."""
    import subprocess
    import sys
    import warnings

    from mdsd_cli.decode.laws import tempered
    from tests.conftest import SUBPROCESS_TIMEOUT

    logits = np.array([[0.5, 2.0, -1.0, 2.0], [3.0, 1.0, 0.0, -np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = tempered(logits, 1e-320)
    np.testing.assert_array_equal(p, [[0, 0.5, 0, 0.5], [1, 0, 0, 0]])
    done = subprocess.run([sys.executable, "-m", "mdsd_cli", "decode", "--expected", "--models", "synthetic",
                           "--vocab", "30", "--tree", "2x2", "--prompts", "2", "-t", "1e-320", "--progress", "none"],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr


@pytest.mark.parametrize("temperature", [1.0, 0.6, 0.0, 1e-320])
def test_tempered_rows_are_the_tempered_rows_read_on_demand(temperature):
    """The sequence walks temper a row when they first read it: the same floats as tempering all rows, rows
    never read are never tempered, and a bad row is still refused up front (with tempered's error)."""
    from mdsd_cli.decode import sequence as sq
    from mdsd_cli.decode.laws import TemperedRows, tempered

    rng = np.random.default_rng(3)
    logits = rng.standard_normal((7, 50)) * 3
    logits[2, 5] = -np.inf
    rows, eager = TemperedRows(logits, temperature), tempered(logits, temperature)
    assert len(rows) == 7 and not rows._rows
    np.testing.assert_array_equal(rows[3], eager[3])
    np.testing.assert_array_equal(rows[[0, 2, 6]], eager[[0, 2, 6]])
    np.testing.assert_array_equal(rows[-1], eager[6])
    assert sorted(rows._rows) == [0, 2, 3, 6]
    transposed = np.asfortranarray(logits)  # found by review: a column-major array's rows summed in another order
    np.testing.assert_array_equal(TemperedRows(transposed, temperature)[5], tempered(transposed, temperature)[5])
    np.testing.assert_array_equal(tempered(transposed, temperature), eager)
    with pytest.raises(ValueError):
        rows[3][0] = 1.0  # kept rows are read-only
    bad = logits.copy()
    bad[4] = np.nan
    with pytest.raises(InputError, match="row 4"):
        TemperedRows(bad, temperature)
    # a walk on rows read on demand draws what it draws on the rows tempered at once, step for step
    target, draft = synthetic_models(40, seed=1)
    spec = plan_decode(["2x3"], ["select-race:wor"], temperatures=[1.0], vocab_size=40, baselines=False)[0][0]
    from mdsd_cli.decode.drafting import grow_tree
    from mdsd_cli.samplers import get_sampler

    for seed in range(5):
        tree = grow_tree(draft, [1, 2], spec.tree, get_sampler("wor"), 1.0, np.random.default_rng(seed))
        L = np.asarray(target.tree_logits([1, 2], tree.parents, tree.tokens, range(tree.size)), dtype=float)
        for name in ("traversal", "select-block", "select-race"):
            a = sq._SAMPLES[name](tree, TemperedRows(L, 1.0), "wor", np.random.default_rng(seed), None)
            b = sq._SAMPLES[name](tree, tempered(L, 1.0), "wor", np.random.default_rng(seed), None)
            assert a == b
