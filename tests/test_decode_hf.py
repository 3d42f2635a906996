"""Hugging Face models for `mdsd decode`: tree attention on the KV cache and the plain fallback.

Every model here is built locally from a config (Llama and GPT-2 style, a few
layers, random seeded weights); nothing is downloaded. The oracles are plain
forwards of each context through the model itself (``model(input_ids).logits``),
never the code under test:

* the tree pass (one forward, 4-D mask, cached prefix) and the fallback (one
  sequence per root-to-leaf path) give every node's logits within 1e-4 of a
  plain forward of its full context (float32), on fresh caches and on a cache
  carried across steps, for both families;
* a model that refuses or ignores a custom mask falls back, with a notice.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mdsd_cli.decode import grow_tree, parse_tree  # noqa: E402
from mdsd_cli.errors import InputError  # noqa: E402
from mdsd_cli.models import load_hf_pair, tree_paths  # noqa: E402
from mdsd_cli.models.hf import HFModel  # noqa: E402
from mdsd_cli.models.tiny import build_tiny_pair  # noqa: E402
from mdsd_cli.samplers import get_sampler  # noqa: E402

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
