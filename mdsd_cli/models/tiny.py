"""Tiny Hugging Face causal LMs built from a config, with random weights: ``--target/--draft`` without a download.

:func:`build_tiny_pair` writes two model directories that ``mdsd decode
--target DIR/target --draft DIR/draft`` (and ``mdsd dump``) load like any
Hugging Face model:

* a word-level tokenizer over the Python documentation topics that ship with
  CPython (lower-cased words and punctuation, the most frequent ones);
* the **target**: a Llama- or GPT-2-style model with ``layers`` layers and seeded
  random weights. Its output embedding is scaled up (peaked next-token laws)
  and the residual branches of its upper layers are damped, so that
* the **draft**, the target's embedding, first ``draft_layers`` layers and head
  (an early-exit draft, as in self-speculative decoding), agrees with it often
  (sum of min(p, q) about 0.75 with the defaults) at a fraction of its cost.

The weights are random: the text is noise. The pair exists to run the real
machinery (tree attention on the KV cache, the walk, the timings) on any
machine in seconds, and for the tests. Run it as
``python -m mdsd_cli.models.tiny DIR [--family gpt2]``.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

from ..errors import InputError

FAMILIES = ("llama", "gpt2")
SPECIAL = ("[UNK]", "[PAD]", "[BOS]", "[EOS]")


def build_tokenizer(directory: Path, *, words: int = 1000):
    """A word-level tokenizer of the ``words`` most frequent tokens of the Python docs topics, saved in ``directory``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    from .ngram import corpus_documents, tokenize

    counts = Counter(w for doc in corpus_documents() for w in tokenize(doc))
    vocab = {w: i for i, w in enumerate([*SPECIAL, *sorted(w for w, _ in counts.most_common(words))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]",
                                 eos_token="[EOS]")
    hf.save_pretrained(directory)
    return hf


def _config(family: str, vocab: int, *, layers: int, hidden: int, heads: int, context: int, tokenizer):
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id}
    if family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                           max_position_embeddings=context, tie_word_embeddings=False, **ids)
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=context,
                      tie_word_embeddings=False, **ids)


def _residual_outputs(model, family: str, layer: int):
    """The weights writing a layer's attention and MLP into the residual stream."""
    if family == "llama":
        block = model.model.layers[layer]
        return [block.self_attn.o_proj.weight, block.mlp.down_proj.weight]
    block = model.transformer.h[layer]
    return [block.attn.c_proj.weight, block.mlp.c_proj.weight]


def build_tiny_pair(directory, *, family: str = "llama", seed: int = 0, layers: int = 8, hidden: int = 256,
                    heads: int = 8, draft_layers: int = 1, words: int = 1000, context: int = 512,
                    head_scale: float = 20.0, damping: float = 0.03) -> tuple[Path, Path]:
    """Write ``directory/target`` and ``directory/draft`` (see the module docstring); returns both paths.

    ``head_scale`` multiplies the output embedding; ``damping`` multiplies the
    residual outputs of the target's layers from ``draft_layers`` on (1: no
    damping, and the draft then rarely agrees with the target).
    """
    import torch

    if family not in FAMILIES:
        raise InputError(f"unknown model family {family!r}; choose {', '.join(FAMILIES)}")
    if not 1 <= draft_layers <= layers:
        raise InputError(f"the draft takes 1 to {layers} of the target's layers, not {draft_layers}")
    directory = Path(directory)
    target_dir, draft_dir = directory / "target", directory / "draft"
    target_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(target_dir, words=words)
    config = _config(family, len(tokenizer), layers=layers, hidden=hidden, heads=heads, context=context,
                     tokenizer=tokenizer)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    target = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(head_scale)
        for layer in range(draft_layers, layers):
            for weight in _residual_outputs(target, family, layer):
                weight.mul_(damping)
    target.save_pretrained(target_dir)
    draft_config = copy.deepcopy(config)
    if family == "llama":
        draft_config.num_hidden_layers = draft_layers
    else:
        draft_config.n_layer = draft_layers
    draft = AutoModelForCausalLM.from_config(draft_config).eval()
    missing, unexpected = draft.load_state_dict(target.state_dict(), strict=False)
    if missing:  # every draft weight is the target's
        raise RuntimeError(f"draft weights missing from the target: {missing[:3]}")
    draft_dir.mkdir(parents=True, exist_ok=True)
    draft.save_pretrained(draft_dir)
    tokenizer.save_pretrained(draft_dir)
    return target_dir, draft_dir


def main(argv=None) -> None:  # pragma: no cover - exercised through the documentation's example
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mdsd_cli.models.tiny",
                                     description="Write a tiny random target/draft pair of Hugging Face models.")
    parser.add_argument("directory")
    parser.add_argument("--family", choices=FAMILIES, default="llama")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from .hf import import_hf, quiet_transformers

    quiet_transformers(import_hf()[1])
    target, draft = build_tiny_pair(args.directory, family=args.family, seed=args.seed)
    print(f"wrote {target} and {draft}")


if __name__ == "__main__":  # pragma: no cover
    main()
