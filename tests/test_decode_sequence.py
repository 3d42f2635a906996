"""Sequence-level verifiers (`block`, `traversal`) and the sequence-level bounds.

Losslessness is checked as for the per-node verifiers (tests/test_decode.py):
exactly, on every draft tree of a tiny model (the law of a step's tokens,
continued by the target, equals the target's sequence law to 1e-12); at T = 0
(greedy decoding); and by the two-token G-test from a fixed prompt.
"""

from __future__ import annotations

import numpy as np
import pytest

from mdsd_cli.decode import parse_tree, plan_decode, run_decode, sparse_tree
from mdsd_cli.decode.exact import ConditionalLaws, sequence_law, stream_law, tree_law, tree_paths
from mdsd_cli.decode.sequence import SEQUENCE_VERIFIERS
from mdsd_cli.errors import InputError
from mdsd_cli.models import Prompt
from mdsd_cli.models.synthetic import synthetic_models

from .test_decode import (
    FAMILY_ALPHA,
    PROMPT,
    exact_two_token_law,
    g_test,
    greedy_decode,
    small_pair,
    two_token_counts,
)

SPARSE = [[0], [1], [0, 0], [0, 1], [1, 0]]


def shape(name):
    return sparse_tree(SPARSE, label="sparse") if name == "sparse" else parse_tree(name)


def step_law(verifier, name, sampler, target, draft, prefix, temperature):
    """The exact law of one step's appended tokens, mixed over every draft tree, and E[accepted drafts]."""
    P, Q = ConditionalLaws(target, prefix, temperature), ConditionalLaws(draft, prefix, temperature)
    total: dict = {}
    accepted = 0.0
    for tree, prob in tree_law(shape(name), sampler, Q):
        law = SEQUENCE_VERIFIERS[verifier].output_law(tree, list(P.many(tree_paths(tree))), sampler)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
        for tokens, mass in law.items():
            total[tokens] = total.get(tokens, 0.0) + prob * mass
            accepted += prob * mass * (len(tokens) - 1)
    return total, accepted, P


def stream_error(total, P, V, depth):
    return max(float(np.abs(stream_law(total, P, V, k) - sequence_law(P, V, k)).max()) for k in range(1, depth + 2))


EXACT = [("block", "1x2", "iid"), ("block", "1x3", "iid"), ("traversal", "1x3", "wor"), ("traversal", "2x2", "iid"),
         ("traversal", "2x2", "wor"), ("traversal", "2,1,2", "wor"), ("traversal", "sparse", "iid"),
         ("traversal", "3,1", "iid")]


@pytest.mark.parametrize("verifier,name,sampler", EXACT)
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_step_law_is_the_target_law_exactly(verifier, name, sampler, temperature):
    target, draft = synthetic_models(3, seed=9, noise=1.5)
    total, accepted, P = step_law(verifier, name, sampler, target, draft, (0, 2), temperature)
    assert stream_error(total, P, 3, shape(name).depth) < 1e-12
    assert accepted > 0.3  # and it does accept drafts


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("prefix", [(0, 2), (1, 1)])
def test_traversal_is_block_verification_on_a_chain(depth, prefix):
    target, draft = synthetic_models(3, seed=4, noise=2.0)
    P, Q = ConditionalLaws(target, prefix, 1.0), ConditionalLaws(draft, prefix, 1.0)
    for tree, _ in tree_law(parse_tree(f"1x{depth}"), "iid", Q):
        Ps = list(P.many(tree_paths(tree)))
        block = SEQUENCE_VERIFIERS["block"].output_law(tree, Ps, "iid")
        traversal = SEQUENCE_VERIFIERS["traversal"].output_law(tree, Ps, "iid")
        keys = set(block) | set(traversal)
        assert max(abs(block.get(k, 0.0) - traversal.get(k, 0.0)) for k in keys) < 1e-14


def test_block_beats_token_by_token_verification_on_the_papers_example():
    """Sun et al.'s example: context-free p = (1/3, 2/3), q = (2/3, 1/3), two drafts: 10/9 tokens accepted
    by token verification, 11/9 by block verification."""
    from mdsd_cli.models.base import NextTokenModel

    class Fixed(NextTokenModel):
        vocab_size = 2

        def __init__(self, probs):
            self.row = np.log(probs)

        def logits(self, contexts):
            return np.tile(self.row, (len(contexts), 1))

    target, draft = Fixed([1 / 3, 2 / 3]), Fixed([2 / 3, 1 / 3])
    _, accepted, _ = step_law("block", "1x2", "iid", target, draft, (0,), 1.0)
    assert accepted == pytest.approx(11 / 9, abs=1e-12)
    # token verification on the same chain: P(accept 1st) + P(accept both) = 2/3 + 4/9
    assert 2 / 3 + 4 / 9 == pytest.approx(10 / 9)


def test_exact_check_catches_lossy_variants(monkeypatch):
    """The exact check can fail: traversal on a paths tree (equal-token paths merged into one subtree) is
    lossy, and so is traversal without the parent's weight update."""
    target, draft = synthetic_models(3, seed=9, noise=1.5)
    total, _, P = step_law("traversal", "paths:2x2", "iid", target, draft, (0, 2), 1.0)
    assert stream_error(total, P, 3, 2) > 1e-2
    from mdsd_cli.decode import sequence

    monkeypatch.setattr(sequence, "_after_rejection", lambda w, P, Q: (w, np.maximum(P - Q, 0) / np.maximum(P - Q, 0).sum()))
    total, _, P = step_law("traversal", "2x2", "iid", target, draft, (0, 2), 1.0)
    assert stream_error(total, P, 3, 2) > 1e-3


SEQ_COMBOS = [("block", "iid", "1x3"), ("traversal", "iid", "2x2"), ("traversal", "wor", "2x2"),
              ("traversal", "iid", "sparse"), ("traversal", "wor", "3,1")]


def specs_for(verifier, sampler, name, temperature=1.0, V=4):
    specs, skipped = plan_decode([shape(name)], [f"{verifier}:{sampler}"], temperatures=[temperature],
                                 vocab_size=V, baselines=False)
    assert len(specs) == 1 and not skipped
    return specs


@pytest.mark.parametrize("verifier,sampler,name", SEQ_COMBOS)
def test_greedy_temperature_reproduces_target_greedy_decoding(verifier, sampler, name):
    target, draft = synthetic_models(12, seed=5, noise=1.0)
    prompts = [Prompt(i, tuple(np.random.default_rng(i).integers(0, 12, size=3))) for i in range(3)]
    run = run_decode(target, draft, prompts, specs_for(verifier, sampler, name, 0.0, V=12), max_new_tokens=10, seed=0)
    for r in run.runs:
        assert r.generated == greedy_decode(target, prompts[r.prompt].tokens, 10)
    assert sum(r.steps.shape[0] for r in run.runs) < 30


@pytest.mark.parametrize("verifier,sampler,name", SEQ_COMBOS)
def test_first_two_tokens_follow_the_target_law(verifier, sampler, name):
    target, draft = small_pair()
    counts = two_token_counts(target, draft, specs_for(verifier, sampler, name))
    pvalue = g_test(counts, exact_two_token_law(target, PROMPT))
    assert pvalue >= FAMILY_ALPHA / len(SEQ_COMBOS), pvalue


def test_plan_refuses_what_the_sequence_verifiers_cannot_do():
    with pytest.raises(InputError, match="block verifies one chain; tree 2x2 has nodes with 2 children"):
        plan_decode(["2x2"], ["block"], vocab_size=10)
    with pytest.raises(InputError, match="traversal needs a static tree"):
        plan_decode(["paths:3x2"], ["traversal"], vocab_size=10)
    with pytest.raises(InputError, match="lossless for iid/wor drafts only, not greedy"):
        plan_decode(["2x2"], ["traversal:greedy"], vocab_size=10)
    specs, skipped = plan_decode(["1x3", "2x3"], ["block", "traversal"], vocab_size=10, baselines=False)
    assert {s.label for s in specs} == {"1x3 iid/block T=1", "1x3 iid/traversal T=1", "2x3 iid/traversal T=1"}
    assert any("skipping block on iid drafts for tree 2x3" in m for m in skipped)
