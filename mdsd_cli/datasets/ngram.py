"""``pydoc-ngram``: a real-text draft/target pair that needs no download.

The pairs are the next-token distributions, at held-out positions, of the two Kneser-Ney models of
:mod:`mdsd_cli.models.ngram`: a bigram **draft** and a 4-gram **target** trained on the Python
documentation (the corpus, the tokenizer and the formula are described there). Their logarithms are
stored as logits, so any temperature can be applied; ``mdsd decode`` runs the same models over whole
contexts.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from ..distributions import PairBatch, pairs_from_logits
from ..models.ngram import (  # noqa: F401  (re-exported: the models live in mdsd_cli.models.ngram)
    BOUNDARY,
    TOKEN,
    UNKNOWN,
    KneserNey,
    corpus_documents,
    corpus_split,
    tokenize,
)

NAME = "pydoc-ngram"
BUILDER_VERSION = 1


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
    vocab, train, held = corpus_split()
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
