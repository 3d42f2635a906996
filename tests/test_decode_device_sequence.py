"""The sequence-level verifiers on the device (``block``, ``traversal``: mdsd_cli/decode/device_sequence.py).

Torch on the CPU here; the same code runs on CUDA. (a) For one fixed drawn tree
of a tiny model per case, the empirical law of the step's tokens over many
device steps is the numpy verifier's exact ``output_law`` for that tree (a
G-test, Bonferroni over the cases; a lossy reference law is rejected by the same
test), the visits are the host walk's, and T = 0 gives the target's greedy
tokens; (b) generation with ``verify_on="device"``: at T = 0 the target's
greedy decoding, at T = 1 the first two tokens follow the target's law;
(c) a seed gives the same tokens; (d) bad input is one clean error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mdsd_cli.decode import parse_tree, run_decode
from mdsd_cli.decode.device_sequence import walk_sequence_on_device
from mdsd_cli.decode.drafting import DraftTree, grow_tree
from mdsd_cli.decode.laws import tempered
from mdsd_cli.decode.sequence import SEQUENCE_VERIFIERS
from mdsd_cli.errors import InputError
from mdsd_cli.models import Prompt
from mdsd_cli.models.synthetic import synthetic_models
from mdsd_cli.samplers import get_sampler

from .test_decode import (
    FAMILY_ALPHA,
    PROMPT,
    RUNS,
    exact_two_token_law,
    g_test,
    greedy_decode,
    small_pair,
    specs_for,
)

#: (verifier, tree, sampler, temperature): chains and small trees, iid and wor where they differ. On a paths
#: tree traversal is lossy in generation (merged subtrees), but its law given the tree is still checked here.
LAW_CASES = [("block", "1x1", "iid", 1.0), ("block", "1x2", "iid", 1.0), ("block", "1x3", "iid", 1.0),
             ("block", "1x3", "iid", 0.6), ("traversal", "1x2", "iid", 1.0), ("traversal", "1x3", "wor", 1.0),
             ("traversal", "2x2", "iid", 1.0), ("traversal", "2x2", "wor", 1.0), ("traversal", "2x2", "wor", 0.6),
             ("traversal", "3,1", "iid", 1.0), ("traversal", "3,1", "wor", 1.0), ("traversal", "paths:2x2", "iid", 1.0)]
DRAWS = 3000


def rows(target, prefix, tree):
    """The target's logits at every node of ``tree`` below ``prefix``, float64 ``[tree.size, V]``."""
    return np.asarray(target.tree_logits(list(prefix), tree.parents, tree.tokens, range(tree.size)), dtype=np.float64)


def rich_tree(verifier, name, sampler, temperature, target, draft):
    """Of the trees drawn with seeds 0..19, the one whose step has the most outcomes, then the highest entropy;
    returns it, its exact step law and the target's laws at its nodes."""
    best, score = None, None
    for seed in range(20):
        tree = grow_tree(draft, PROMPT, parse_tree(name), get_sampler(sampler), temperature,
                         np.random.default_rng(seed))
        P = tempered(rows(target, PROMPT, tree), temperature)
        law = SEQUENCE_VERIFIERS[verifier].output_law(tree, list(P), sampler)
        mass = np.array(list(law.values()))
        if score is None or (len(law), -(mass * np.log(mass)).sum()) > score:
            best, score = (tree, law, P), (len(law), -(mass * np.log(mass)).sum())
    return best


def summary(walk):
    """Everything a walk reports but the time and the rows."""
    return (tuple(walk.tokens), walk.accepted, walk.leaf,
            tuple((v.node, v.depth, v.n, tuple(v.drafts), v.output, v.accepted) for v in walk.visits))


def g_test_against(counts: dict, law: dict) -> float:
    keys = sorted(set(law) | set(counts))
    return g_test(np.array([counts.get(k, 0) for k in keys]), np.array([law.get(k, 0.0) for k in keys]))


@pytest.mark.parametrize("verifier,name,sampler,temperature", LAW_CASES)
def test_step_tokens_follow_the_numpy_output_law_of_the_tree(verifier, name, sampler, temperature):
    target, draft = small_pair()
    tree, law, P = rich_tree(verifier, name, sampler, temperature, target, draft)
    assert len(law) >= 4
    logits = torch.as_tensor(rows(target, PROMPT, tree))
    generator = torch.Generator().manual_seed(11)
    counts: dict = {}
    seen: dict = {}
    for _ in range(DRAWS):
        walk = walk_sequence_on_device(verifier, tree, logits, temperature, sampler, generator)
        counts[tuple(walk.tokens)] = counts.get(tuple(walk.tokens), 0) + 1
        key = summary(walk)
        seen[key] = seen.get(key, 0) + 1
        for v in walk.visits:
            assert np.abs(v.p - P[v.node]).max() < 1e-12 and v.q is tree.q[v.node] and np.isnan(v.acceptance)
    pvalue = g_test_against(counts, law)
    assert pvalue >= FAMILY_ALPHA / len(LAW_CASES), (pvalue, counts, {k: m * DRAWS for k, m in law.items()})
    # the visits, accepted counts and leaves are the host walk's (every outcome either walk gives often)
    host: dict = {}
    for seed in range(600):
        walk = SEQUENCE_VERIFIERS[verifier].walk(tree, rows(target, PROMPT, tree), temperature, sampler,
                                                 np.random.default_rng(seed))
        host[summary(walk)] = host.get(summary(walk), 0) + 1
    assert {k for k, c in seen.items() if c >= 0.02 * DRAWS} <= set(host)
    assert {k for k, c in host.items() if c >= 0.02 * 600} <= set(seen)


def test_the_law_check_rejects_a_lossy_reference(monkeypatch):
    """The same draws tested against traversal without the parent's weight update (lossy): rejected."""
    from mdsd_cli.decode import sequence

    target, draft = small_pair()
    tree, law, P = rich_tree("traversal", "2x2", "iid", 1.0, target, draft)
    logits = torch.as_tensor(rows(target, PROMPT, tree))
    generator = torch.Generator().manual_seed(11)
    counts: dict = {}
    for _ in range(DRAWS):
        tokens = tuple(walk_sequence_on_device("traversal", tree, logits, 1.0, "iid", generator).tokens)
        counts[tokens] = counts.get(tokens, 0) + 1
    assert g_test_against(counts, law) >= FAMILY_ALPHA / len(LAW_CASES)
    monkeypatch.setattr(sequence, "_after_rejection",
                        lambda w, P, Q: (w, np.maximum(P - Q, 0) / np.maximum(P - Q, 0).sum()))
    lossy = SEQUENCE_VERIFIERS["traversal"].output_law(tree, list(P), "iid")
    assert g_test_against(counts, lossy) < FAMILY_ALPHA / len(LAW_CASES)


@pytest.mark.parametrize("verifier,name,sampler", [("block", "1x3", "iid"), ("traversal", "2x2", "iid"),
                                                   ("traversal", "2x2", "wor"), ("traversal", "3,1", "wor")])
def test_greedy_temperature_gives_the_targets_greedy_tokens(verifier, name, sampler):
    target, draft = synthetic_models(12, seed=5, noise=1.0)
    generator = torch.Generator().manual_seed(0)
    accepted = 0
    for i in range(8):
        prompt = tuple(int(t) for t in np.random.default_rng(i).integers(0, 12, size=3))
        tree = grow_tree(draft, prompt, parse_tree(name), get_sampler(sampler), 0.0, np.random.default_rng(i))
        walk = walk_sequence_on_device(verifier, tree, torch.as_tensor(rows(target, prompt, tree)), 0.0, sampler,
                                       generator)
        assert walk.tokens == greedy_decode(target, prompt, len(walk.tokens))
        assert len(walk.tokens) == walk.accepted + 1
        accepted += walk.accepted
    assert accepted > 0  # and drafts were accepted


def test_walk_stops_at_an_accepted_eos_inside_the_path():
    """A chain EOS -> 0 where target = draft: the walk accepts EOS and stops there, as the host walk does."""
    q, eos = np.array([0.2, 0.3, 0.5]), 2
    tree = DraftTree()
    a = tree.add(0, eos)
    tree.add(a, 0)
    tree.q[0], tree.drafts[0], tree.n[0] = q, np.array([eos]), 1
    tree.q[a], tree.drafts[a], tree.n[a] = q, np.array([0]), 1
    logits = torch.as_tensor(np.log(np.tile(q, (3, 1))))
    for name in ("block", "traversal"):
        generator = torch.Generator().manual_seed(1)
        for _ in range(5):
            walk = walk_sequence_on_device(name, tree, logits, 1.0, "iid", generator, eos_token_id=eos)
            assert walk.tokens == [eos] and walk.accepted == 1 and walk.leaf is None
            assert [(v.node, v.output, v.accepted) for v in walk.visits] == [(0, eos, True)]


# --- (b) generation on the device path ------------------------------------------------------------

@pytest.mark.parametrize("verifier,sampler,name", [("block", "iid", "1x3"), ("traversal", "iid", "2x2"),
                                                   ("traversal", "wor", "3,1")])
def test_device_generation_at_greedy_temperature_is_the_targets_greedy_decoding(verifier, sampler, name):
    target, draft = synthetic_models(12, seed=5, noise=1.0)
    prompts = [Prompt(i, tuple(np.random.default_rng(i).integers(0, 12, size=3))) for i in range(3)]
    run = run_decode(target, draft, prompts, specs_for(verifier, sampler, name, 0.0, V=12), max_new_tokens=10,
                     seed=0, verify_on="device")
    for r in run.runs:
        assert r.generated == greedy_decode(target, prompts[r.prompt].tokens, 10)
        assert r.visits.shape[0] > 0 and not np.isnan(r.visits[:, 5]).any()  # alpha* from the copied rows
    assert sum(r.steps.shape[0] for r in run.runs) < 30  # and it did speculate


GENERATION_CASES = [("block", "iid", "1x3"), ("traversal", "wor", "2x2")]


@pytest.mark.parametrize("verifier,sampler,name", GENERATION_CASES)
def test_first_two_generated_tokens_on_the_device_path_follow_the_target_law(verifier, sampler, name):
    """Every step a new tree and a reseeded generator: the first two tokens follow the target's law (G-test)."""
    target, draft = small_pair()
    run = run_decode(target, draft, [Prompt(i, PROMPT) for i in range(RUNS)], specs_for(verifier, sampler, name),
                     max_new_tokens=2, seed=0, node_metrics=False, verify_on="device")
    counts = np.zeros((target.vocab_size, target.vocab_size))
    for r in run.runs:
        counts[r.generated[0], r.generated[1]] += 1
    law = exact_two_token_law(target, PROMPT)
    assert g_test(counts, law) >= FAMILY_ALPHA / len(GENERATION_CASES), (counts, law * RUNS)


# --- (c) reproducibility, (d) bad input ---------------------------------------------------------------

def test_a_seed_gives_the_same_tokens():
    target, draft = small_pair()
    tree, _, _ = rich_tree("traversal", "2x2", "wor", 1.0, target, draft)
    logits = torch.as_tensor(rows(target, PROMPT, tree))

    def tokens(seed):
        generator = torch.Generator().manual_seed(seed)
        return [walk_sequence_on_device("traversal", tree, logits, 1.0, "wor", generator).tokens for _ in range(30)]

    assert tokens(4) == tokens(4) and tokens(4) != tokens(5)
    prompts = [Prompt(i, PROMPT) for i in range(4)]
    for verifier, sampler, name in [("block", "iid", "1x2"), ("traversal", "wor", "2x2")]:
        specs = specs_for(verifier, sampler, name)
        runs = [run_decode(target, draft, prompts, specs, max_new_tokens=6, seed=seed, verify_on="device",
                           node_metrics=False) for seed in (7, 7, 8)]
        generated = [[r.generated for r in run.runs] for run in runs]
        assert generated[0] == generated[1] and generated[0] != generated[2]


def test_bad_input():
    target, draft = small_pair()
    chain = grow_tree(draft, PROMPT, parse_tree("1x2"), get_sampler("iid"), 1.0, np.random.default_rng(0))
    wide = grow_tree(draft, PROMPT, parse_tree("2x2"), get_sampler("iid"), 1.0, np.random.default_rng(0))
    logits = torch.as_tensor(rows(target, PROMPT, wide))
    generator = torch.Generator()
    with pytest.raises(InputError, match="unknown sequence verifier 'blok'.*did you mean 'block'"):
        walk_sequence_on_device("blok", chain, logits[:3], 1.0, "iid", generator)
    with pytest.raises(InputError, match="block verifies one chain"):
        walk_sequence_on_device("block", wide, logits, 1.0, "iid", generator)
    with pytest.raises(InputError, match=r"logits must be a torch tensor \[tree.size, V\] = \[3, V\], got \(7, 4\)"):
        walk_sequence_on_device("block", chain, logits, 1.0, "iid", generator)
    with pytest.raises(InputError, match="generator must be a torch.Generator, got Generator"):
        walk_sequence_on_device("traversal", wide, logits, 1.0, "iid", np.random.default_rng(0))
    with pytest.raises(InputError, match="traversal verifies iid or wor drafts, not 'greedy'"):
        walk_sequence_on_device("traversal", wide, logits, 1.0, "greedy", generator)
