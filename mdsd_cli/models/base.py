"""The model protocol: next-token logits for a batch of contexts.

A *model* maps token contexts (lists of ids over a fixed vocabulary of ``V``
tokens) to next-token logits ``[B, V]``. :mod:`mdsd_cli.decode` asks it for two
things only:

* :meth:`NextTokenModel.logits` — logits after each of a batch of contexts;
* :meth:`NextTokenModel.tree_logits` — logits at chosen nodes of a token tree
  hanging below a prefix. The default builds every node's full context and
  calls :meth:`~NextTokenModel.logits`; a model with a key/value cache (a
  Hugging Face causal LM) overrides it to score all the nodes in one forward
  pass with a tree attention mask on top of the cached prefix.

Contexts are always given in full, so a cache is an optimisation a model may
keep between calls, never something the caller must manage. Such a model may
also offer ``reset_cache()`` (decoding calls it at the start of each prompt, so
that results do not depend on what ran before) and a ``cache_seconds`` counter
(wall seconds of cache bookkeeping so far, which the timings report apart from
the forward passes). Logits may be
``-inf`` (probability 0); :func:`mdsd_cli.distributions.softmax` turns them into
probabilities at a temperature.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class Prompt:
    """A prompt: an id (seeds its random stream), its token ids, and its text if known."""

    id: int
    tokens: tuple[int, ...]
    text: str | None = None


def tree_paths(parents: Sequence[int], tokens: Sequence[int], nodes: Sequence[int]) -> list[list[int]]:
    """The tokens from the root down to each of ``nodes`` (node 0 is the root: an empty path).

    ``parents[i] < i`` is node ``i``'s parent (``parents[0] = -1``) and ``tokens[i]``
    its token.
    """
    out = []
    for node in nodes:
        path = []
        while node > 0:
            path.append(int(tokens[node]))
            node = parents[node]
        out.append(path[::-1])
    return out


class NextTokenModel:
    """Base class of the models: next-token logits over ``vocab_size`` tokens.

    Attributes
    ----------
    name : str
        What the model is, for tables and manifests.
    vocab_size : int
        ``V``; every row of logits has this length.
    eos_token_id : int or None
        Generation stops after this token (None: never).
    max_context : int or None
        Longest context the model accepts (None: unbounded).
    cache_seconds : float
        Wall seconds spent on cache bookkeeping so far (0 without a cache).
    """

    name: str = ""
    vocab_size: int = 0
    eos_token_id: int | None = None
    max_context: int | None = None
    cache_seconds: float = 0.0

    def logits(self, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token logits after each context, float ``[len(contexts), V]``."""
        raise NotImplementedError

    def tree_logits(self, prefix: Sequence[int], parents: Sequence[int], tokens: Sequence[int],
                    nodes: Sequence[int]) -> np.ndarray:
        """Logits after ``prefix`` + the path to each of ``nodes`` of a token tree, ``[len(nodes), V]``.

        The tree is given by ``parents`` (``parents[0] = -1`` for the root, which
        is the prefix itself; ``parents[i] < i``) and ``tokens`` (node ``i``'s
        token; ``tokens[0]`` is unused).
        """
        base = list(prefix)
        return self.logits([base + path for path in tree_paths(parents, tokens, nodes)])

    def reset_cache(self) -> None:
        """Forget any cached state (a no-op without a cache)."""

    # --- text ----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (models without a tokenizer read whitespace-separated ids)."""
        try:
            ids = [int(x) for x in text.split()]
        except ValueError:
            raise InputError(f"model {self.name} has no tokenizer: give prompts as whitespace-separated "
                             f"token ids, not {text[:40]!r}") from None
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise InputError(f"prompt token {bad[0]} is outside the vocabulary 0..{self.vocab_size - 1}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids (models without a tokenizer write the ids)."""
        return " ".join(str(int(i)) for i in ids)

    def describe(self) -> dict:
        """Plain data for manifests."""
        return {"name": self.name, "vocab_size": self.vocab_size}


@dataclass(frozen=True)
class ModelPair:
    """A target and a draft model over one vocabulary, with their built-in prompts."""

    name: str
    target: NextTokenModel
    draft: NextTokenModel
    #: ``prompts(count)`` gives ``count`` built-in prompts (held-out text, or random ids).
    prompts: object = None
    metadata: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size


__all__ = ["ModelPair", "NextTokenModel", "Prompt", "tree_paths"]
