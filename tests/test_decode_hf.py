"""Hugging Face models for `mdsd decode`: tree attention on the KV cache and the plain fallback.

Every model here is built locally from a config (Llama and GPT-2 style, a few
layers, random seeded weights); nothing is downloaded. The oracles are plain
forwards of each context through the model itself (``model(input_ids).logits``),
never the code under test:

* the tree pass (one forward, 4-D mask, cached prefix) and the fallback (one
  sequence per root-to-leaf path) give every node's logits within 1e-4 of a
  plain forward of its full context (float32), on fresh caches and on a cache
  carried across steps, for both families;
* a model that refuses or ignores a custom mask falls back, with a notice;
* generation is lossless: at T = 0 the ids equal the target's greedy decoding
  (plain forwards, argmax) for every verifier and tree shape of
  ``tests/test_decode.py``, and the first two tokens from a fixed prompt follow
  the target's exact two-token law (G-test, the family-wise level of
  ``tests/test_decode.py``), on both the tree pass and the fallback;
* seeded runs repeat; bad input through the command is one line, no file.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mdsd_cli.decode import grow_tree, parse_tree, plan_decode, run_decode  # noqa: E402
from mdsd_cli.decode.metrics import steps_table, summarize  # noqa: E402
from mdsd_cli.errors import DataFileError, InputError  # noqa: E402
from mdsd_cli.models import Prompt, load_hf_pair, tree_paths  # noqa: E402
from mdsd_cli.models.hf import HFModel  # noqa: E402
from mdsd_cli.models.tiny import build_tiny_pair  # noqa: E402
from mdsd_cli.samplers import get_sampler  # noqa: E402

from .test_decode import COMBOS, FAMILY_ALPHA, LAWS, RUNS, g_test, run_cli, shape  # noqa: E402

#: float32: tree-pass and fallback logits against plain forwards (absolute).
ATOL = 1e-4
TINY = dict(layers=2, hidden=32, heads=4, words=40, context=64)  # V = 44: optimal-wor runs at n = 3
PROMPTS = ["return the index of the first item", "the default value is", "if the object is a class"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: tiny models on a shared 2-core machine are fastest (and steadiest) that way."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-decode")
    out = {family: build_tiny_pair(root / family, family=family, seed=1, **TINY) for family in ("llama", "gpt2")}
    out["other"] = build_tiny_pair(root / "other", family="llama", seed=2, **{**TINY, "words": 50})
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    out["prompts"] = prompts
    return out


@pytest.fixture(scope="module")
def pairs(dirs):
    return {family: load_hf_pair(*map(str, dirs[family]), device="cpu") for family in ("llama", "gpt2")}


def plain_logits(model: HFModel, context) -> np.ndarray:
    """The oracle: one plain forward of the whole context, last position."""
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([list(context)]))
    return out.logits[0, -1, : model.vocab_size].float().numpy()


def random_tree(rng, V, size):
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, size)]
    tokens = [-1] + [int(t) for t in rng.integers(0, V, size - 1)]
    return parents, tokens


def check_nodes(model, prefix, parents, tokens, nodes, got):
    paths = tree_paths(parents, tokens, nodes)
    worst = max(float(np.abs(row - plain_logits(model, [*prefix, *path])).max()) for row, path in zip(got, paths))
    assert worst <= ATOL, worst
    return worst


# --- the tree pass and the fallback against plain forwards ------------------------------------------

@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("reuse", [True, False], ids=["cache-across-steps", "fresh-cache"])
def test_tree_logits_equal_plain_forwards(pairs, family, reuse):
    """Steps of draft-style calls (level by level) and a target-style call (all nodes), then a random path
    accepted plus one token; with the cache carried across steps or emptied before each call."""
    target = pairs[family].target
    assert target.scoring == "tree"
    rng = np.random.default_rng(7)
    V = target.vocab_size
    prefix = [int(t) for t in rng.integers(4, V, 5)]
    target.reset_cache()
    for _ in range(5):
        parents, tokens = random_tree(rng, V, int(rng.integers(3, 14)))
        depth = [0] * len(parents)
        for i in range(1, len(parents)):
            depth[i] = depth[parents[i]] + 1
        for d in range(max(depth) + 1):  # as a draft model is called: the frontier, one depth at a time
            if not reuse:
                target.reset_cache()
            nodes = [i for i in range(len(parents)) if depth[i] == d]
            fed = target._cache.fed
            check_nodes(target, prefix, parents, tokens, nodes, target.tree_logits(prefix, parents, tokens, nodes))
            if reuse and d > 0:  # only the new frontier was fed: its ancestors were cached
                assert target._cache.fed - fed == len(nodes)
        if not reuse:
            target.reset_cache()
        fed = target._cache.fed
        nodes = list(range(len(parents)))
        check_nodes(target, prefix, parents, tokens, nodes, target.tree_logits(prefix, parents, tokens, nodes))
        if reuse:
            assert target._cache.fed - fed == len(parents)  # the whole tree in one pass, the prefix from the cache
        end = int(rng.integers(0, len(parents)))
        prefix = prefix + tree_paths(parents, tokens, [end])[0] + [int(rng.integers(0, V))]
    if reuse:  # the cache holds the text and the last tree, never the dead branches of earlier steps
        assert target.cached_tokens <= len(prefix) + len(parents)


def test_the_accepted_path_is_kept_and_moved_down(pairs):
    """After a step, the next prefix's path through the tree comes from the cache: only the new token is fed."""
    target = pairs["llama"].target
    target.reset_cache()
    prefix = [5, 6, 7]
    parents, tokens = [-1, 0, 0, 1, 1, 2, 4], [-1, 8, 9, 10, 11, 12, 13]
    target.tree_logits(prefix, parents, tokens, range(7))
    assert target.cached_tokens == 3 + 6
    nxt = prefix + [8, 11, 13, 20]  # the path 1-4-6, then a token of the target's own
    fed = target._cache.fed
    got = target.tree_logits(nxt, [-1], [-1], [0])
    assert target._cache.fed - fed == 1 and target._cache.chain == nxt
    check_nodes(target, nxt, [-1], [-1], [0], got)


def test_a_cache_that_keeps_the_wrong_path_is_caught(pairs, monkeypatch):
    """The equality checks can fail: a cache that keeps the first branch, whatever was accepted, is wrong."""
    from mdsd_cli.models import kv_tree

    target = pairs["llama"].target
    target.reset_cache()
    real = kv_tree.TreeCache._match

    def first_branch(self, prefix):
        lcp, path = real(self, prefix)
        if path:  # pretend the first child of the root was accepted
            path[0] = min(s for (parent, _), s in self.children.items() if parent == len(self.chain) - 1)
        return lcp, path

    monkeypatch.setattr(kv_tree.TreeCache, "_match", first_branch)
    prefix, parents, tokens = [5, 6, 7], [-1, 0, 0], [-1, 8, 9]
    target.tree_logits(prefix, parents, tokens, range(3))
    nxt = prefix + [9, 20]
    got = target.tree_logits(nxt, [-1], [-1], [0])
    assert np.abs(got[0] - plain_logits(target, nxt)).max() > 100 * ATOL
    target.reset_cache()


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_fallback_paths_equal_plain_forwards(pairs, family):
    model = pairs[family].target
    paths = HFModel(model.model, model.tokenizer, name="fallback", scoring="paths", max_batch_tokens=40)
    rng = np.random.default_rng(3)
    for size in (1, 5, 12):
        parents, tokens = random_tree(rng, model.vocab_size, size)
        prefix = [int(t) for t in rng.integers(4, model.vocab_size, int(rng.integers(1, 9)))]
        nodes = sorted(set(int(u) for u in rng.integers(0, size, 4))) if size > 1 else [0]
        check_nodes(model, prefix, parents, tokens, nodes, paths.tree_logits(prefix, parents, tokens, nodes))
    assert paths.cached_tokens == 0


def test_plain_logits_of_contexts(pairs):
    model = pairs["gpt2"].target
    contexts = [[5], [5, 6, 7, 8], [9, 10]]
    for row, context in zip(model.logits(contexts), contexts):
        assert np.abs(row - plain_logits(model, context)).max() <= ATOL


class RefusesMasks(torch.nn.Module):
    """A causal LM whose forward refuses 4-D attention masks (as some attention kernels do)."""

    def __init__(self, model, *, ignore=False):
        super().__init__()
        self.inner, self.config, self.ignore = model, model.config, ignore

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=None,
                logits_to_keep=0):
        if attention_mask is not None and attention_mask.dim() == 4:
            if not self.ignore:
                raise ValueError("custom 4D attention masks are not supported by this attention implementation")
            attention_mask = None  # silently ignored: the worse failure
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          cache=cache, use_cache=use_cache, logits_to_keep=logits_to_keep)

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


@pytest.mark.parametrize("ignore,fragment", [(False, "does not accept a custom 4-D attention mask"),
                                             (True, "differ from plain forwards")])
def test_auto_falls_back_with_a_notice_when_masks_are_refused_or_ignored(pairs, ignore, fragment):
    inner = pairs["llama"].target.model
    notes = []
    model = HFModel(RefusesMasks(inner, ignore=ignore), name="odd", notify=notes.append)
    assert model.scoring == "paths" and len(notes) == 1
    assert fragment in notes[0] and "scoring each root-to-leaf path as its own sequence" in notes[0]
    parents, tokens = [-1, 0, 0, 2], [-1, 8, 9, 10]
    got = model.tree_logits([5, 6], parents, tokens, range(4))
    for row, path in zip(got, tree_paths(parents, tokens, range(4))):
        with torch.no_grad():
            want = inner(input_ids=torch.tensor([[5, 6, *path]])).logits[0, -1].numpy()
        assert np.abs(row - want).max() <= ATOL
    with pytest.raises(InputError, match="cannot score a tree in one pass"):
        HFModel(RefusesMasks(inner, ignore=ignore), name="odd", scoring="tree")


# --- loading -------------------------------------------------------------------------------------

def test_padded_logits_are_cut_to_the_shared_vocabulary(dirs, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir, draft_dir = dirs["llama"]
    padded = tmp_path / "padded"
    model = AutoModelForCausalLM.from_pretrained(draft_dir)
    model.resize_token_embeddings(model.config.vocab_size + 8)  # more logits than tokens, as some releases have
    model.save_pretrained(padded)
    AutoTokenizer.from_pretrained(draft_dir).save_pretrained(padded)
    notes = []
    pair = load_hf_pair(str(target_dir), str(padded), device="cpu", notify=notes.append)
    V = len(AutoTokenizer.from_pretrained(target_dir))
    assert pair.vocab_size == V and pair.draft.logits([[5, 6]]).shape == (1, V)
    assert "logits padded beyond it" in notes[0] and f"ids 0..{V - 1}" in notes[0]


def test_chat_template_wraps_the_prompt(dirs, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir, draft_dir = dirs["llama"]
    chat = tmp_path / "chat"  # the target, with a chat template in its tokenizer
    tok = AutoTokenizer.from_pretrained(target_dir)
    tok.chat_template = "{% for m in messages %}[BOS] the {{ m['content'] }} is{% endfor %}"
    tok.save_pretrained(chat)
    AutoModelForCausalLM.from_pretrained(target_dir).save_pretrained(chat)
    pair = load_hf_pair(str(chat), str(draft_dir), device="cpu", chat_template=True)
    assert pair.target.decode(pair.target.encode("value")) == "[BOS] the value is"
    with pytest.raises(InputError, match="no chat template"):
        load_hf_pair(str(target_dir), str(draft_dir), device="cpu", chat_template=True)


def test_drafted_tree_costs_one_cached_pass_per_depth(pairs):
    pair = pairs["llama"]
    draft = pair.draft
    draft.reset_cache()
    tree = grow_tree(draft, pair.target.encode(PROMPTS[0]), parse_tree("2x3"), get_sampler("iid"), 1.0,
                     np.random.default_rng(0))
    assert tree.passes == 3 and draft._cache.passes == 3
    assert draft._cache.fed == len(pair.target.encode(PROMPTS[0])) + 2 + 4  # the prompt, then each new frontier


# --- generation is lossless ---------------------------------------------------------------------

def greedy_oracle(model: HFModel, prompt, count):
    """The target's greedy decoding: a plain forward of the whole text per token, argmax (ends after EOS)."""
    context = list(prompt)
    for _ in range(count):
        context.append(int(np.argmax(plain_logits(model, context))))
        if context[-1] == model.tokenizer.eos_token_id:
            break
    return context[len(prompt):]


def hf_specs(verifier, sampler, name, temperature, V):
    specs, skipped = plan_decode([shape(name)], [f"{verifier}:{sampler}"], temperatures=[temperature],
                                 vocab_size=V, baselines=False)
    assert len(specs) == 1 and not skipped
    return specs


@pytest.fixture(scope="module")
def greedy_runs(pairs):
    """Every (verifier, tree) of tests/test_decode.py at T = 0 on the Llama pair; a law per verifier on GPT-2."""
    out = {}
    for family in ("llama", "gpt2"):
        pair = pairs[family]
        prompts = [Prompt(i, tuple(pair.target.encode(text))) for i, text in enumerate(PROMPTS[:2])]
        combos = COMBOS if family == "llama" else [(v, s, "2x2" if v in ("hub", "otm") else "paths:3x2")
                                                    for v, s in LAWS]
        specs = [spec for v, s, name in combos for spec in hf_specs(v, s, name, 0.0, pair.vocab_size)]
        specs = plan_decode(["1x1"], ["rrs"], temperatures=[0.0], vocab_size=pair.vocab_size)[0][:1] + specs
        assert specs[0].plain
        run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=10, seed=0, node_metrics=False,
                         reuse_verifiers=True)
        want = {i: greedy_oracle(pair.target, p.tokens, 10) for i, p in enumerate(prompts)}
        out[family] = (run, want)
    return out


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_greedy_temperature_reproduces_the_targets_greedy_decoding(greedy_runs, family):
    run, want = greedy_runs[family]
    assert len(run.specs) == 1 + (len(COMBOS) if family == "llama" else len(LAWS))
    for r in run.runs:
        assert r.generated == want[r.prompt], run.specs[r.spec].label
    speculative = [r for r in run.runs if not run.specs[r.spec].plain]
    assert sum(r.steps.shape[0] for r in speculative) < 0.6 * sum(len(r.generated) for r in speculative)


def test_select_block_and_select_traversal_at_t0_are_the_targets_greedy_decoding(pairs):
    """The sequence-level tree verifiers on the Llama pair (iid and wor drafts, a 2x2 and a 3,1 tree)."""
    pair = pairs["llama"]
    prompts = [Prompt(i, tuple(pair.target.encode(text))) for i, text in enumerate(PROMPTS[:2])]
    specs = [spec for v in ("select-block", "select-traversal", "select-race") for s, name in (("iid", "2x2"), ("wor", "3,1"))
             for spec in hf_specs(v, s, name, 0.0, pair.vocab_size)]
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=10, seed=0, node_metrics=False)
    for r in run.runs:
        assert r.generated == greedy_oracle(pair.target, prompts[r.prompt].tokens, 10), run.specs[r.spec].label
    assert sum(r.steps.shape[0] for r in run.runs) < 0.6 * sum(len(r.generated) for r in run.runs)


#: The law pair: V = 8, a Llama target and a GPT-2 draft of another seed (one tokenizer), sum min(p, q) ~ 0.7.
LAW_TINY = dict(layers=2, hidden=32, heads=4, words=4, context=64, head_scale=10.0)
LAW_PROMPT = (2, 5, 7)
#: (verifier, sampler, tree, scoring): every verifier and every tree shape of tests/test_decode.py at least once
#: (all 42 combinations at 800 runs would take 2.5 min; the verifiers' own laws are tested there on every shape).
LAW_CASES = [("nss", "iid", "2x1", "tree"), ("rrs", "iid", "2x2", "tree"), ("kseq", "iid", "paths:3x2", "tree"),
             ("optimal-iid", "iid", "sparse", "tree"), ("otm", "iid", "2x2", "paths"), ("rrsw", "wor", "3,1", "tree"),
             ("optimal-wor", "wor", "2x1", "paths"), ("greedy", "greedy", "2x2", "paths"), ("hub", "hub", "2x2", "tree"),
             ("select-block", "wor", "2x2", "tree"), ("select-traversal", "iid", "3,1", "tree"),
             ("select-race", "wor", "2,1,2", "tree")]
LAW_CHECKS = len(LAW_CASES) + 1


@pytest.fixture(scope="module")
def law_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-law")
    target, _ = build_tiny_pair(root / "a", family="llama", seed=1, **LAW_TINY)
    _, draft = build_tiny_pair(root / "b", family="gpt2", seed=2, **LAW_TINY)
    pairs = {scoring: load_hf_pair(str(target), str(draft), device="cpu", scoring=scoring)
             for scoring in ("tree", "paths")}
    for pair in pairs.values():
        pair.target.eos_token_id = None  # two tokens always, even after an end-of-sequence token
    target_model = pairs["tree"].target
    V = target_model.vocab_size
    first = torch.softmax(torch.from_numpy(plain_logits(target_model, LAW_PROMPT)).double(), -1).numpy()
    second = np.stack([torch.softmax(torch.from_numpy(plain_logits(target_model, [*LAW_PROMPT, y])).double(),
                                     -1).numpy() for y in range(V)])
    return pairs, first[:, None] * second  # the exact two-token law, from plain forwards


def two_token_counts(pair, specs, runs=RUNS):
    prompts = [Prompt(i, LAW_PROMPT) for i in range(runs)]
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=2, seed=0, node_metrics=False,
                     reuse_verifiers=True)
    counts = np.zeros((pair.vocab_size, pair.vocab_size))
    for r in run.runs:
        counts[r.generated[0], r.generated[1]] += 1
    return counts


def test_the_device_path_at_t0_is_the_targets_greedy_decoding_and_keeps_logits_on_the_device(pairs, dirs):
    """Issue 27: --verify-on device with a Hugging Face pair (on the CPU here): the tree's logits stay a torch
    tensor from the model to the verifiers, and T = 0 gives the target's greedy ids for every verifier."""
    pair = pairs["llama"]
    prompts = [Prompt(i, tuple(pair.target.encode(text))) for i, text in enumerate(PROMPTS[:2])]
    specs = [spec for v, s in LAWS for spec in hf_specs(v, s, "2x2" if v in ("hub", "otm") else "paths:3x2", 0.0,
                                                        pair.vocab_size)]
    seen = []
    original = pair.target.tree_logits

    def spy(*args):
        out = original(*args)
        seen.append(type(out).__name__)
        return out

    pair.target.tree_logits = spy
    try:
        run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=10, seed=0, node_metrics=False,
                         verify_on="device")
    finally:
        del pair.target.tree_logits
    assert set(seen) == {"Tensor"} and pair.target.logits_on_device is False  # switched back afterwards
    for r in run.runs:
        assert r.generated == greedy_oracle(pair.target, prompts[r.prompt].tokens, 10), run.specs[r.spec].label
    text = dirs["prompts"].parent / "device.jsonl"
    result = run_cli("--target", dirs["llama"][0], "--draft", dirs["llama"][1], "--prompts",
                     dirs["prompts"], "--tree", "2x2", "-t", "0", "--max-new-tokens", "6", "--verify-on", "device",
                     "--text", text, "--no-baselines", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    records = [__import__("json").loads(line) for line in text.read_text().splitlines()]
    assert len(records) == len(PROMPTS)
    for record in records:
        assert record["ids"] == greedy_oracle(pair.target, pair.target.encode(PROMPTS[record["prompt"]]), 6)


@pytest.mark.parametrize("verifier,sampler,name", [("rrs", "iid", "2x2"), ("kseq", "iid", "paths:3x2"),
                                                   ("hub", "hub", "2x2"), ("rrsw", "wor", "3,1")])
def test_first_two_tokens_on_the_device_path_follow_the_target_law(law_pair, verifier, sampler, name):
    pairs, law = law_pair
    pair = pairs["tree"]
    prompts = [Prompt(i, LAW_PROMPT) for i in range(RUNS)]
    run = run_decode(pair.target, pair.draft, prompts, hf_specs(verifier, sampler, name, 1.0, pair.vocab_size),
                     max_new_tokens=2, seed=0, node_metrics=False, verify_on="device")
    counts = np.zeros((pair.vocab_size, pair.vocab_size))
    for r in run.runs:
        counts[r.generated[0], r.generated[1]] += 1
    pvalue = g_test(counts, law)
    assert pvalue >= FAMILY_ALPHA / 4, (pvalue, counts, law * RUNS)


def test_the_law_pair_is_a_real_test(law_pair):
    pairs, law = law_pair
    pair = pairs["tree"]
    p, q = (torch.softmax(torch.from_numpy(m.logits([list(LAW_PROMPT)])[0]), -1).numpy()
            for m in (pair.target, pair.draft))
    assert pair.vocab_size == 8 and np.minimum(p, q).sum() < 0.8 and law.max() < 0.1


@pytest.mark.parametrize("verifier,sampler,name,scoring", LAW_CASES)
def test_first_two_tokens_follow_the_target_law(law_pair, verifier, sampler, name, scoring):
    pairs, law = law_pair
    pair = pairs[scoring]
    counts = two_token_counts(pair, hf_specs(verifier, sampler, name, 1.0, pair.vocab_size))
    pvalue = g_test(counts, law)
    assert pvalue >= FAMILY_ALPHA / LAW_CHECKS, (pvalue, counts, law * RUNS)


def test_two_token_test_catches_a_lossy_verifier(law_pair, monkeypatch):
    from mdsd_cli.verifiers.rrs import RRS

    monkeypatch.setattr(RRS, "sample", lambda self, drafts, rng: np.atleast_2d(drafts)[:, 0].copy())
    pairs, law = law_pair
    counts = two_token_counts(pairs["tree"], hf_specs("rrs", "iid", "2x2", 1.0, 8))
    assert g_test(counts, law) < FAMILY_ALPHA / LAW_CHECKS


# --- seeds, timings ------------------------------------------------------------------------------

def test_same_seed_same_ids_and_timings_split(pairs):
    pair = pairs["gpt2"]
    prompts = [Prompt(i, tuple(pair.target.encode(text))) for i, text in enumerate(PROMPTS)]
    specs, _ = plan_decode(["2x2"], ["rrs"], temperatures=[1.0], vocab_size=pair.vocab_size)
    runs = [run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=8, seed=seed) for seed in (4, 4, 5)]
    ids = [[r.generated for r in run.runs] for run in runs]
    assert ids[0] == ids[1] and ids[0] != ids[2]
    steps = steps_table(runs[0])
    timed = ["draft_seconds", "tree_seconds", "target_seconds", "verify_seconds", "cache_seconds"]
    assert (steps[timed] >= 0).all().all()
    spec = steps[steps.tree == "2x2"]
    assert (spec.cache_seconds > 0).all() and (spec.draft_seconds > 0).all()
    summary = summarize(runs[0])
    assert np.allclose(summary.seconds, summary[timed].sum(axis=1))
    assert np.allclose(summary.tokens_per_second, summary.generated_tokens / summary.seconds)
    plain = summary.tokens_per_second[summary.tree == "plain"].iloc[0]
    assert np.allclose(summary.speedup_measured, summary.tokens_per_second / plain)


# --- the command ---------------------------------------------------------------------------------

def test_cli_decodes_a_hugging_face_pair(dirs, tmp_path):
    target, draft = dirs["llama"]
    out = tmp_path / "summary.csv"
    res = run_cli("--target", target, "--draft", draft, "--prompts", dirs["prompts"], "--max-new-tokens", 6,
                  "--tree", "2x2", "--verifier", "rrs", "-t", 0, "--device", "cpu", "--threads", 1, "-q",
                  "--out", out, "--text", tmp_path / "text.jsonl")
    assert res.exit_code == 0, res.stderr
    assert res.stdout == "" and res.stderr == ""
    import pandas as pd

    summary = pd.read_csv(out)
    assert list(summary.tree) == ["plain", "2x2", "1x2"] and (summary.prompts == len(PROMPTS)).all()
    assert {"cache_seconds", "speedup_measured"} <= set(summary.columns)
    manifest = __import__("json").loads((tmp_path / "summary.csv.manifest.json").read_text())
    assert manifest["config"]["target"] == str(target) and manifest["models"]["target"]["scoring"] == "tree"
    records = [__import__("json").loads(line) for line in (tmp_path / "text.jsonl").read_text().splitlines()]
    pair = load_hf_pair(str(target), str(draft), device="cpu")
    for record in records:
        assert record["ids"] == greedy_oracle(pair.target, pair.target.encode(record["prompt_text"]), 6)


@pytest.mark.parametrize("case,fragment", [
    ("missing", "cannot load model"),
    ("vocab", "target and draft vocabularies differ"),
    ("tree", "exceed the model's context of 64 tokens"),
    ("long", "longer than the model's context of 64 tokens"),
    ("count", "Hugging Face models have no built-in prompts"),
    ("models", "drop it when giving --target and --draft"),
    ("device", "--device applies to Hugging Face models"),
    ("dtype", "unknown model dtype 'float8'"),
])
def test_cli_bad_input_is_one_clean_line_and_no_file(dirs, tmp_path, case, fragment):
    target, draft = dirs["llama"]
    long_prompts = tmp_path / "long.txt"
    long_prompts.write_text(" ".join(["the"] * 70) + "\n")
    args = {"missing": ["--target", tmp_path / "nope", "--draft", draft],
            "vocab": ["--target", target, "--draft", dirs["other"][1]],
            "tree": ["--target", target, "--draft", draft, "--tree", "1x40", "--max-new-tokens", 20],
            "long": ["--target", target, "--draft", draft, "--prompts", long_prompts],
            "count": ["--target", target, "--draft", draft, "--prompts", 4],
            "models": ["--target", target, "--draft", draft, "--models", "synthetic"],
            "device": ["--device", "cpu", "--prompts", 2],
            "dtype": ["--target", target, "--draft", draft, "--dtype", "float8"]}[case]
    out = tmp_path / "out.csv"
    res = run_cli("--prompts", dirs["prompts"], "--max-new-tokens", 4, *args, "--out", out)
    assert res.exit_code == 1, (res.exit_code, res.stderr)
    assert res.stdout == "" and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("Error: "), res.stderr
    assert fragment in " ".join(res.stderr.split()), res.stderr
    assert not out.exists()


@pytest.mark.parametrize("damage,fragment", [
    ("more-layers", "does not match its checkpoint: 36 weight(s) missing from the checkpoint, which would be random"),
    ("fewer-layers", "weight(s) in the checkpoint that the config has no place for (model.layers.1."),
    ("vocab-abc", "cannot load model"),
    ("truncated", "cannot load model"),
])
def test_a_checkpoint_that_does_not_match_its_config_or_is_damaged_is_refused(dirs, tmp_path, damage, fragment):
    """transformers only logs these (and mdsd quiets its logs): four random layers, or trained ones dropped,
    would give numbers about no trained model."""
    import json
    import shutil

    target, draft = dirs["llama"]
    bad = tmp_path / "bad"
    shutil.copytree(target, bad)
    config = json.loads((bad / "config.json").read_text())
    if damage == "more-layers":
        config["num_hidden_layers"] += 4
    elif damage == "fewer-layers":
        config["num_hidden_layers"] = 1
    elif damage == "vocab-abc":
        config["vocab_size"] = "abc"
    (bad / "config.json").write_text(json.dumps(config))
    if damage == "truncated":
        weights = bad / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(DataFileError, match=re.escape(fragment)):
        load_hf_pair(str(bad), str(draft), device="cpu")
    out = tmp_path / "out.csv"
    res = run_cli("--target", bad, "--draft", draft, "--prompts", dirs["prompts"], "--max-new-tokens", 2,
                  "--out", out)
    assert res.exit_code == 1 and "Traceback" not in res.stderr and not out.exists(), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("Error: "), res.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run by benchmarks/gpu_check.py)")
def test_on_cuda_the_device_path_is_greedy_at_t0_and_lossless(tmp_path):
    """Issue 27 on a GPU: the pair on CUDA, --verify-on auto verifies there (the whole tree in one call); T = 0
    gives the target's greedy ids for every verifier, and the two-token law holds for rrs, kseq and rrsw."""
    target_dir, _ = build_tiny_pair(tmp_path / "a", family="llama", seed=1, **LAW_TINY)
    _, draft_dir = build_tiny_pair(tmp_path / "b", family="gpt2", seed=2, **LAW_TINY)
    pair = load_hf_pair(str(target_dir), str(draft_dir), device="cuda")
    pair.target.eos_token_id = None
    assert str(pair.target.device).startswith("cuda")
    prompts = [Prompt(i, LAW_PROMPT) for i in range(3)]
    specs = [spec for v, s in LAWS for spec in hf_specs(v, s, "2x2" if v in ("hub", "otm") else "paths:3x2", 0.0,
                                                        pair.vocab_size)]
    run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=8, seed=0, node_metrics=False)
    for r in run.runs:
        assert r.generated == greedy_oracle(pair.target, LAW_PROMPT, 8), run.specs[r.spec].label
    V = pair.vocab_size
    first = torch.softmax(torch.from_numpy(plain_logits_on(pair.target, LAW_PROMPT)).double(), -1).numpy()
    second = np.stack([torch.softmax(torch.from_numpy(plain_logits_on(pair.target, [*LAW_PROMPT, y])).double(),
                                     -1).numpy() for y in range(V)])
    law = first[:, None] * second
    for verifier, sampler, name in [("rrs", "iid", "2x2"), ("kseq", "iid", "paths:3x2"), ("rrsw", "wor", "3,1")]:
        many = [Prompt(i, LAW_PROMPT) for i in range(RUNS)]
        run = run_decode(pair.target, pair.draft, many, hf_specs(verifier, sampler, name, 1.0, V), max_new_tokens=2,
                         seed=0, node_metrics=False)
        counts = np.zeros((V, V))
        for r in run.runs:
            counts[r.generated[0], r.generated[1]] += 1
        assert g_test(counts, law) >= FAMILY_ALPHA / 3, (verifier, counts, law * RUNS)


def plain_logits_on(model: HFModel, context) -> np.ndarray:
    """:func:`plain_logits` for a model on any device."""
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([list(context)], device=model.device))
    return out.logits[0, -1, : model.vocab_size].float().cpu().numpy()
