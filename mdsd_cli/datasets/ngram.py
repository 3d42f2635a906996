"""``pydoc-ngram``: a real-text draft/target pair that needs no download.

The corpus is the text of the Python documentation topics that ship with every
CPython (``pydoc_data.topics``, ~114,000 word and punctuation tokens). Topics
are split deterministically into training (9 in 10) and held-out (1 in 10)
text; the vocabulary is every lower-cased word, number or punctuation mark
seen at least twice in training, plus ``<unk>`` and the boundary ``<s>``.

Two interpolated Kneser-Ney models are trained on the same text: the **draft**
is a bigram model, the **target** a 4-gram model. At held-out positions both
give a full next-token distribution over the vocabulary; their logarithms are
stored as logits, so any temperature can be applied.

.. math::

    P_k(w \\mid h) = \\frac{\\max(c_k(h w) - D_k, 0)}{c_k(h)}
                  + \\frac{D_k N_{1+}(h \\bullet)}{c_k(h)} P_{k-1}(w \\mid h'),

with raw counts at the highest order, continuation counts below it, Ney's
discounts ``D_k = n_1/(n_1 + 2 n_2)``, and a uniform distribution under the
unigram level (so every probability is positive).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ..distributions import PairBatch, pairs_from_logits

NAME = "pydoc-ngram"
BUILDER_VERSION = 1
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


def _corpus_split():
    docs = [tokenize(d) for d in corpus_documents()]
    train = [d for i, d in enumerate(docs) if i % 10 != 3]
    held = [d for i, d in enumerate(docs) if i % 10 == 3]
    counts = Counter(w for d in train for w in d)
    words = sorted(w for w, c in counts.items() if c >= 2)
    vocab = [BOUNDARY, UNKNOWN, *words]
    index = {w: i for i, w in enumerate(vocab)}
    encode = lambda doc: [index.get(w, 1) for w in doc]  # noqa: E731
    return vocab, [encode(d) for d in train], [encode(d) for d in held]


def corpus_fingerprint() -> str:
    """A hash of the corpus text and the builder, naming the cache file."""
    h = hashlib.sha256(f"{NAME}/{BUILDER_VERSION}".encode())
    for doc in corpus_documents():
        h.update(doc.encode())
    return h.hexdigest()[:16]


def build(positions: int = 512, *, target_order: int = 4, draft_order: int = 2):
    """Train both models and evaluate them at ``positions`` held-out positions.

    Returns ``(target_logits, draft_logits, labels, metadata)``; logits are
    natural logarithms of the probabilities.
    """
    vocab, train, held = _corpus_split()
    V = len(vocab)
    target = KneserNey(train, target_order, V, boundary=0)
    draft = KneserNey(train, draft_order, V, boundary=0)
    # every held-out position, then an even subsample
    pad = target_order - 1
    candidates = [(d, i) for d, doc in enumerate(held) for i in range(len(doc))]
    pick = np.linspace(0, len(candidates) - 1, num=min(positions, len(candidates))).round().astype(int)
    tl = np.empty((pick.size, V))
    dl = np.empty((pick.size, V))
    doc_id = np.empty(pick.size, dtype=np.int64)
    pos = np.empty(pick.size, dtype=np.int64)
    token = np.empty(pick.size, dtype=np.int64)
    for row, c in enumerate(pick):
        d, i = candidates[c]
        history = [0] * pad + held[d][:i]
        tl[row] = np.log(target.distribution(history))
        dl[row] = np.log(draft.distribution(history))
        doc_id[row], pos[row], token[row] = d, i, held[d][i]
    t_ll, count = target.log_likelihood(held, 0)
    d_ll, _ = draft.log_likelihood(held, 0)
    metadata = {
        "dataset": NAME, "builder_version": BUILDER_VERSION, "corpus": "pydoc_data.topics",
        "corpus_fingerprint": corpus_fingerprint(), "vocab_size": V, "positions": int(pick.size),
        "target": f"interpolated Kneser-Ney {target_order}-gram", "draft": f"interpolated Kneser-Ney {draft_order}-gram",
        "held_out_tokens": count, "target_perplexity": float(np.exp(-t_ll / count)),
        "draft_perplexity": float(np.exp(-d_ll / count)),
        "train_tokens": sum(len(s) for s in train),
    }
    return tl, dl, {"document": doc_id, "position": pos, "token": token}, metadata


def cache_dir() -> Path:
    """``$MDSD_CACHE_DIR``, else ``$XDG_CACHE_HOME/mdsd``, else ``~/.cache/mdsd``."""
    if os.environ.get("MDSD_CACHE_DIR"):
        return Path(os.environ["MDSD_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mdsd"


def load(*, temperature: float = 1.0) -> PairBatch:
    """The ``pydoc-ngram`` pairs at ``temperature`` (built once, then read from the cache)."""
    import json

    from ..io import atomic_path

    path = cache_dir() / f"{NAME}-{corpus_fingerprint()}.npz"
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as data:
                tl, dl = data["target_logits"], data["draft_logits"]
                labels = {k: data[k] for k in ("document", "position", "token")}
                metadata = json.loads(str(data["metadata"]))
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)  # a broken cache entry is rebuilt
            return load(temperature=temperature)
    else:
        tl, dl, labels, metadata = build()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                with open(tmp, "wb") as fh:
                    np.savez(fh, target_logits=tl, draft_logits=dl, metadata=np.array(json.dumps(metadata)),
                             **labels)
        except Exception:  # noqa: BLE001 - an unwritable cache only costs a rebuild next time
            pass
    from dataclasses import replace

    pairs = pairs_from_logits(tl, dl, temperature=temperature, source=NAME, metadata=metadata)
    return replace(pairs, labels=labels)
