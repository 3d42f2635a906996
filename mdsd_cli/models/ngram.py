"""Interpolated Kneser-Ney n-gram models on the Python documentation, as real models over contexts.

The corpus is the text of the Python documentation topics that ship with every
CPython (``pydoc_data.topics``, ~114,000 word and punctuation tokens). Topics
are split deterministically into training (9 in 10) and held-out (1 in 10)
text; the vocabulary is every lower-cased word, number or punctuation mark
seen at least twice in training, plus ``<unk>`` and the boundary ``<s>``.

.. math::

    P_k(w \\mid h) = \\frac{\\max(c_k(h w) - D_k, 0)}{c_k(h)}
                  + \\frac{D_k N_{1+}(h \\bullet)}{c_k(h)} P_{k-1}(w \\mid h'),

with raw counts at the highest order, continuation counts below it, Ney's
discounts ``D_k = n_1/(n_1 + 2 n_2)``, and a uniform distribution under the
unigram level (so every probability is positive).

``pydoc-ngram`` is the pair used throughout ``mdsd``: a 4-gram **target** and a
bigram **draft**, trained on the same text (the built-in dataset of the same
name evaluates them at held-out positions; :func:`pydoc_ngram_models` returns
them as :class:`NgramModel` objects for decoding).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import cache

import numpy as np

from .base import NextTokenModel, Prompt

TOKEN = re.compile(r"[a-z_]+|[0-9]+|[^\sa-z_0-9]")
BOUNDARY, UNKNOWN = "<s>", "<unk>"


def corpus_documents() -> list[str]:
    """The documentation topics of this Python, in a fixed (sorted) order."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class KneserNey:
    """Interpolated Kneser-Ney n-gram model over a fixed vocabulary (dense queries)."""

    def __init__(self, sentences: list[list[int]], order: int, vocab_size: int, boundary: int):
        self.order, self.V = order, vocab_size
        padded = [[boundary] * (order - 1) + s for s in sentences]
        # raw counts at the highest order
        raw: dict[tuple, Counter] = defaultdict(Counter)
        for s in padded:
            for i in range(order - 1, len(s)):
                raw[tuple(s[i - order + 1 : i])][s[i]] += 1
        self.counts: list[dict[tuple, tuple[np.ndarray, np.ndarray]]] = [dict() for _ in range(order + 1)]
        self.discount = [0.0] * (order + 1)
        levels: list[dict[tuple, Counter]] = [defaultdict(Counter) for _ in range(order + 1)]
        levels[order] = raw
        # continuation counts: N1+(. h w) for every lower order
        for k in range(order, 1, -1):
            for h, nxt in levels[k].items():
                for w in nxt:
                    levels[k - 1][h[1:]][w] += 1
        for k in range(1, order + 1):
            count_of_counts = Counter()
            for h, nxt in levels[k].items():
                words = np.fromiter(nxt.keys(), dtype=np.int64, count=len(nxt))
                values = np.fromiter(nxt.values(), dtype=np.float64, count=len(nxt))
                self.counts[k][h] = (words, values)
                count_of_counts.update(v for v in nxt.values() if v <= 2)
            n1, n2 = count_of_counts[1], count_of_counts[2]
            self.discount[k] = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5

    def distribution(self, history: list[int]) -> np.ndarray:
        """``P(. | history)`` over the vocabulary (uses the last ``order - 1`` tokens)."""
        p = np.full(self.V, 1.0 / self.V)
        for k in range(1, self.order + 1):
            h = tuple(history[len(history) - (k - 1):]) if k > 1 else ()
            entry = self.counts[k].get(h)
            if entry is None:
                continue  # unseen context: keep the lower order
            words, values = entry
            total = values.sum()
            D = self.discount[k]
            lower = p
            p = lower * (D * words.size / total)
            p[words] += np.maximum(values - D, 0.0) / total
        return p

    def log_likelihood(self, sentences: list[list[int]], boundary: int) -> tuple[float, int]:
        """Total log-probability of the tokens of ``sentences`` and their count."""
        total, count = 0.0, 0
        for s in sentences:
            padded = [boundary] * (self.order - 1) + s
            for i in range(self.order - 1, len(padded)):
                total += float(np.log(self.distribution(padded[:i])[padded[i]]))
                count += 1
        return total, count


def corpus_split():
    """``(vocabulary, training documents, held-out documents)``, documents as token ids."""
    docs = [tokenize(d) for d in corpus_documents()]
    train = [d for i, d in enumerate(docs) if i % 10 != 3]
    held = [d for i, d in enumerate(docs) if i % 10 == 3]
    counts = Counter(w for d in train for w in d)
    words = sorted(w for w, c in counts.items() if c >= 2)
    vocab = [BOUNDARY, UNKNOWN, *words]
    index = {w: i for i, w in enumerate(vocab)}
    encode = lambda doc: [index.get(w, 1) for w in doc]  # noqa: E731
    return vocab, [encode(d) for d in train], [encode(d) for d in held]


class NgramModel(NextTokenModel):
    """A :class:`KneserNey` model as a next-token model: logits are log-probabilities.

    A context is the text so far; it is padded on the left with the boundary
    token, as at the start of a document. The tokenizer lower-cases and splits
    words, numbers and punctuation; unknown words become ``<unk>``.
    """

    def __init__(self, model: KneserNey, vocab: Sequence[str], *, name: str):
        self.model = model
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.name = name
        self.pad = [self.index[BOUNDARY]] * (model.order - 1)

    def logits(self, contexts):
        out = np.empty((len(contexts), self.vocab_size))
        for row, context in enumerate(contexts):
            out[row] = self.model.distribution(self.pad + list(context))
        return np.log(out, out=out)

    def encode(self, text):
        unknown = self.index[UNKNOWN]
        return [self.index.get(w, unknown) for w in tokenize(text)]

    def decode(self, ids):
        return " ".join(self.vocab[int(i)] for i in ids)

    def describe(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "order": self.model.order,
                "kind": "interpolated Kneser-Ney", "corpus": "pydoc_data.topics"}


@cache
def pydoc_ngram_models(target_order: int = 4, draft_order: int = 2) -> tuple[NgramModel, NgramModel]:
    """The ``pydoc-ngram`` target (4-gram) and draft (bigram) models, trained once per process (~0.5 s)."""
    vocab, train, _ = corpus_split()
    V = len(vocab)
    target = NgramModel(KneserNey(train, target_order, V, boundary=0), vocab,
                        name=f"pydoc-ngram target (Kneser-Ney {target_order}-gram)")
    draft = NgramModel(KneserNey(train, draft_order, V, boundary=0), vocab,
                       name=f"pydoc-ngram draft (Kneser-Ney {draft_order}-gram)")
    return target, draft


def held_out_prompts(count: int, *, length: int = 32) -> list[Prompt]:
    """``count`` prompts from the held-out documents: the ``length`` tokens before evenly spaced positions.

    Positions are spread over all held-out tokens as the dataset's are; a
    position near the start of a document gives a shorter prompt (possibly
    empty: the start of a document).
    """
    vocab, _, held = corpus_split()
    candidates = [(d, i) for d, doc in enumerate(held) for i in range(len(doc))]
    count = min(int(count), len(candidates))
    pick = np.linspace(0, len(candidates) - 1, num=count).round().astype(int)
    prompts = []
    for pid, c in enumerate(pick):
        d, i = candidates[c]
        ids = tuple(held[d][max(0, i - length):i])
        prompts.append(Prompt(pid, ids, " ".join(vocab[t] for t in ids)))
    return prompts


__all__ = ["BOUNDARY", "UNKNOWN", "KneserNey", "NgramModel", "corpus_documents", "corpus_split",
           "held_out_prompts", "pydoc_ngram_models", "tokenize"]
