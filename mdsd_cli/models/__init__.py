"""Models: next-token distributions for contexts, and the built-in draft/target pairs.

=================  ========================================================================
pair               target / draft
=================  ========================================================================
``pydoc-ngram``    Kneser-Ney 4-gram / bigram on the Python docs topics (V = 2,380, real
                   text; held-out prompts)
``pystdlib``       trained Llama-style LMs on the Python standard library's source, 4.5M /
                   0.37M parameters, byte-level BPE (V = 4,096); shipped weights
                   (:mod:`.trained`, trained by :mod:`.train`); held-out prompts
``synthetic``      context-hashed perturbed-Zipf logits at any V, seeded (no weights)
=================  ========================================================================

Any two Hugging Face causal LMs with one tokenizer make a pair too
(:func:`load_hf_pair`); :mod:`.tiny` writes a tiny random one locally.

The protocol (:class:`~.base.NextTokenModel`) is logits for a batch of
contexts, plus logits at the nodes of a token tree, which a model with a KV cache
can compute in one pass: :class:`~.hf.HFModel`, any Hugging Face causal LM
(:func:`load_hf_pair`; needs torch and transformers).
"""

from __future__ import annotations

from ..errors import InputError
from .base import ModelPair, NextTokenModel, Prompt, tree_paths
from .trained import pystdlib_paths

#: Built-in pairs: name -> one-line description.
MODEL_PAIRS = {
    "pydoc-ngram": "real text: Kneser-Ney 4-gram target, bigram draft on the Python docs topics (V = 2,380); "
                   "prompts from held-out topics",
    "pystdlib": "trained neural pair: Llama-style target (4.5M parameters) and draft (0.37M) on the Python "
                "standard library's source, byte-level BPE (V = 4,096); prompts from held-out files; needs torch",
    "synthetic": "context-hashed perturbed-Zipf logits at any V (--vocab), seeded; prompts of random ids",
}


def model_pair_names() -> list[str]:
    return list(MODEL_PAIRS)


def load_model_pair(name: str, *, vocab: int = 1000, seed: int = 0, order: int = 2, exponent: float = 1.0,
                    noise: float = 1.0) -> ModelPair:
    """A built-in pair by name; ``vocab``, ``seed``, ``order``, ``exponent`` and ``noise`` shape ``synthetic``.

    ``pystdlib`` is loaded as a Hugging Face pair (CUDA if there is one, float32
    compute); :func:`~mdsd_cli.models.trained.load_pystdlib_pair` takes its options.
    """
    if name == "pydoc-ngram":
        from .ngram import held_out_prompts, pydoc_ngram_models

        target, draft = pydoc_ngram_models()
        return ModelPair(name, target, draft, prompts=held_out_prompts,
                         metadata={"target": target.describe(), "draft": draft.describe()})
    if name == "pystdlib":
        from .trained import load_pystdlib_pair

        return load_pystdlib_pair()
    if name == "synthetic":
        from .synthetic import synthetic_models, synthetic_prompts

        target, draft = synthetic_models(vocab, seed=seed, order=order, exponent=exponent, noise=noise)
        return ModelPair(name, target, draft, prompts=lambda count: synthetic_prompts(count, vocab, seed=seed),
                         metadata={"target": target.describe(), "draft": draft.describe()})
    raise InputError(f"unknown model pair {name!r}; choose one of: {', '.join(MODEL_PAIRS)}")


def load_hf_pair(target: str, draft: str, **options) -> ModelPair:
    """Two Hugging Face causal LMs with one tokenizer; see :func:`mdsd_cli.models.hf.load_hf_pair`."""
    from .hf import load_hf_pair as load

    return load(target, draft, **options)


__all__ = ["MODEL_PAIRS", "ModelPair", "NextTokenModel", "Prompt", "load_hf_pair", "load_model_pair",
           "model_pair_names", "pystdlib_paths", "tree_paths"]
