"""The ``pystdlib`` pair set: the shipped neural pair scored on held-out standard-library code.

The pair of :mod:`mdsd_cli.models.trained` (a 4.5M-parameter target and a 0.37M
draft, V = 4,096) is run by :func:`mdsd_cli.datasets.hf.dump` — what ``mdsd dump
--mode score`` runs — on the first :data:`WINDOWS` shipped held-out windows: each
window's first :data:`PROMPT_TOKENS` tokens are the prompt and the next
:data:`REFERENCE_TOKENS` the reference, so the dump holds the target's and the
draft's next-token logits at 512 positions of real held-out text (teacher
forcing), stored in float32. The dump is written once into the cache directory
(``$MDSD_CACHE_DIR``, as ``pydoc-ngram``'s pairs; named by a hash of the weights,
the held-out windows and these settings) and read back like any dump. The same
dump by hand::

    mdsd dump --target mdsd_cli/models/pystdlib/target --draft mdsd_cli/models/pystdlib/draft \\
        --prompts windows.jsonl --mode score --max-new-tokens 32 --store-dtype float32 --out DIR

Building it needs torch and transformers (the ``hf`` extra); reading it only pyarrow.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from ..distributions import PairBatch, pairs_from_logits
from ..errors import DataFileError
from .dumps import dump_status, is_dump, load_dump_arrays
from .ngram import cache_dir

NAME = "pystdlib"
BUILDER_VERSION = 1
#: Held-out windows scored, tokens of prompt and of reference per window (16 x 32 = 512 positions).
WINDOWS, PROMPT_TOKENS, REFERENCE_TOKENS = 16, 32, 32


def fingerprint() -> str:
    """A hash of the shipped weights' manifest, the held-out windows and the settings above."""
    from ..models.trained import pystdlib_paths

    paths = pystdlib_paths()
    h = hashlib.sha256(f"{NAME}/{BUILDER_VERSION}/{WINDOWS}/{PROMPT_TOKENS}/{REFERENCE_TOKENS}".encode())
    for path in (paths.manifest, paths.heldout, paths.target / "model.safetensors", paths.draft / "model.safetensors"):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _prompts_file(path: Path) -> None:
    """The windows as ``mdsd dump --mode score`` prompts (JSONL: ``id``, ``prompt``, ``reference``)."""
    from ..models.hf import import_hf
    from ..models.trained import pystdlib_heldout, pystdlib_paths

    _, transformers = import_hf()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(pystdlib_paths().target))
    lines = []
    for i, row in enumerate(pystdlib_heldout()[:WINDOWS]):
        prompt = tokenizer.decode(row[:PROMPT_TOKENS].tolist())
        reference = tokenizer.decode(row[PROMPT_TOKENS : PROMPT_TOKENS + REFERENCE_TOKENS].tolist())
        lines.append(json.dumps({"id": i, "prompt": prompt, "reference": reference}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def dump_directory(*, build: bool = True, notify=None) -> Path:
    """The cached dump of the pair set (built on first use when ``build``)."""
    from ..models.trained import pystdlib_paths

    directory = cache_dir() / f"{NAME}-dump-{fingerprint()}"
    if is_dump(directory) and dump_status(directory).complete:
        return directory
    if not build:
        raise DataFileError(f"the {NAME} pair set has not been built yet ({directory})")
    from .hf import dump

    paths = pystdlib_paths()
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory.parent, prefix=f".{NAME}-build-") as work:
        prompts = Path(work) / "windows.jsonl"
        _prompts_file(prompts)
        out = Path(work) / "dump"
        dump(target=str(paths.target), draft=str(paths.draft), prompts_path=prompts, out=out, mode="score",
             max_new_tokens=REFERENCE_TOKENS, device="cpu", dtype="float32", store_dtype="float32",
             rows_per_shard=REFERENCE_TOKENS * WINDOWS, notify=notify)
        if is_dump(directory) and dump_status(directory).complete:  # another process built it meanwhile
            return directory
        shutil.rmtree(directory, ignore_errors=True)  # an incomplete earlier build
        try:
            out.rename(directory)  # whole or not at all
        except OSError:
            if not (is_dump(directory) and dump_status(directory).complete):  # not a concurrent build's result
                raise
    return directory


def load(*, temperature: float = 1.0) -> PairBatch:
    """The ``pystdlib`` pairs at ``temperature`` (dumped once, then read from the cache)."""
    directory = dump_directory()
    tl, dl, labels, manifest = load_dump_arrays(directory)
    metadata = {"dataset": NAME, "builder_version": BUILDER_VERSION, "dump": str(directory),
                "windows": WINDOWS, "prompt_tokens": PROMPT_TOKENS, "reference_tokens": REFERENCE_TOKENS,
                "vocab_size": int(manifest["vocab_size"]), "positions": int(tl.shape[0])}
    pairs = pairs_from_logits(tl, dl, temperature=temperature, source=NAME, metadata=metadata)
    return replace(pairs, labels=labels)


__all__ = ["NAME", "dump_directory", "fingerprint", "load"]
