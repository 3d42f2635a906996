"""Tiny causal LMs built locally from configs (no download), for testing ``mdsd dump``."""

from __future__ import annotations

from pathlib import Path

TEXT = [
    "the draft model proposes tokens and the target model verifies them in one pass",
    "a lossless verifier keeps the output distributed exactly as the target",
    "with multiple drafts the acceptance rate depends on the sampler and the verifier",
    "the optimal acceptance rate is the value of an optimal transport problem",
    "speculative decoding speeds up a large language model with a small draft model",
]


def build_tokenizer(directory: Path, *, extra_words: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[BOS]", "[EOS]"])
    tok.train_from_iterator(TEXT + [" ".join(extra_words)], trainer)
    from tokenizers.processors import TemplateProcessing

    tok.post_processor = TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", tok.token_to_id("[BOS]"))])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]",
                                 eos_token="[EOS]")
    hf.save_pretrained(directory)
    return hf


def build_model(directory: Path, *, seed: int, layers: int = 2, hidden: int = 64, extra_words=()) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(directory, extra_words=extra_words)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger random output weights give less uniform next-token laws
        model.lm_head.weight.mul_(20.0)
    model.save_pretrained(directory)
    return directory
