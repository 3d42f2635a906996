"""What the ``pystdlib`` pair is trained on: the standard library's source, split by a fixed rule into
training and held-out files, a byte-level BPE tokenizer trained on the training files, and the token
windows cut from the text. The training itself: :mod:`.train`, whose docstring states the rules.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataFileError

#: Files below a directory of one of these names are left out of the corpus.
EXCLUDED_DIRS = ("test", "tests", "idle_test", "site-packages")
#: A file is held out when int(sha256(relative path), 16) % HELD_OUT_MODULUS == 0.
HELD_OUT_MODULUS = 20
HELD_OUT_RULE = (f"int(sha256(relative path as UTF-8, '/'-separated).hexdigest(), 16) % {HELD_OUT_MODULUS} == 0")
END_OF_TEXT = "<|endoftext|>"


# --- the corpus ---------------------------------------------------------------------------------

def stdlib_root() -> Path:
    """The running interpreter's standard library (``sysconfig.get_paths()["stdlib"]``)."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path | str | None = None) -> list[tuple[str, Path]]:
    """``(relative path, path)`` of every corpus file under ``root``, sorted by relative path.

    The ``.py`` files below ``root`` (default: :func:`stdlib_root`), none below a
    directory named in :data:`EXCLUDED_DIRS`.
    """
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise DataFileError(f"corpus directory {root} not found")
    out = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if set(rel.parts[:-1]) & set(EXCLUDED_DIRS) or not path.is_file():
            continue
        out.append((rel.as_posix(), path))
    out.sort(key=lambda item: item[0])
    if not out:
        raise DataFileError(f"no .py files under {root} (the corpus is the standard library's source)")
    return out


def is_held_out(relative_path: str) -> bool:
    """Whether a corpus file is held out: :data:`HELD_OUT_RULE`."""
    return int(hashlib.sha256(relative_path.encode("utf-8")).hexdigest(), 16) % HELD_OUT_MODULUS == 0


@dataclass(frozen=True)
class Corpus:
    """The corpus files' texts, split, and a digest of exactly what was read."""

    train: list[str]
    held_out: list[str]
    files: int
    held_out_files: int
    sha256: str
    root: str


def read_corpus(root: Path | str | None = None) -> Corpus:
    """Read and split the corpus (:func:`corpus_files`, :func:`is_held_out`).

    ``sha256`` is the digest of the lines ``"<relative path>\\t<sha256 of the file's bytes>\\n"`` in
    sorted order. Bytes that are not UTF-8 are replaced (U+FFFD) in the text.
    """
    files = corpus_files(root)
    listing = hashlib.sha256()
    train, held = [], []
    for rel, path in files:
        data = path.read_bytes()
        listing.update(f"{rel}\t{hashlib.sha256(data).hexdigest()}\n".encode())
        (held if is_held_out(rel) else train).append(data.decode("utf-8", errors="replace"))
    if not train or not held:
        raise DataFileError(f"the corpus of {len(files)} files has no {'training' if not train else 'held-out'} "
                            f"file under the rule {HELD_OUT_RULE}")
    return Corpus(train, held, len(files), len(held), listing.hexdigest(),
                  str(Path(root) if root is not None else stdlib_root()))


# --- the tokenizer and the token streams ------------------------------------------------------------

def train_tokenizer(texts: list[str], vocab_size: int, *, context: int | None = None):
    """A byte-level BPE tokenizer of ``vocab_size`` tokens (``<|endoftext|>`` is id 0), as a
    ``transformers`` fast tokenizer (``context``: its ``model_max_length``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT], min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT,
                                   pad_token=END_OF_TEXT, unk_token=None, model_max_length=context)


def token_stream(tokenizer, texts: list[str]) -> np.ndarray:
    """The texts' token ids, each text followed by the end-of-text id, as one int64 array."""
    eos = tokenizer.eos_token_id
    encoded = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    parts = []
    for enc in encoded:
        parts.append(np.asarray(enc.ids, dtype=np.int64))
        parts.append(np.asarray([eos], dtype=np.int64))
    return np.concatenate(parts)


def windows(stream: np.ndarray, context: int, count: int | None = None) -> np.ndarray:
    """The first ``count`` (default: all) non-overlapping windows of ``context + 1`` tokens of ``stream``:
    window ``i`` is ``stream[i * context : (i + 1) * context + 1]`` (inputs and their next tokens)."""
    available = (len(stream) - 1) // context
    count = available if count is None else min(int(count), available)
    if count < 1:
        raise DataFileError(f"a stream of {len(stream):,} tokens has no window of {context + 1} tokens")
    index = np.arange(count)[:, None] * context + np.arange(context + 1)[None, :]
    return stream[index]


__all__ = ["END_OF_TEXT", "EXCLUDED_DIRS", "HELD_OUT_MODULUS", "HELD_OUT_RULE", "Corpus", "corpus_files", "is_held_out",
           "read_corpus", "stdlib_root", "token_stream", "train_tokenizer", "windows"]
