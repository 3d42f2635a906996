"""Datasets: built-in named pair sets, pair files, and model dumps behind one ``--data`` value.

``--data`` takes a built-in name (see :data:`BUILTIN`), a pair file (``.npz``
or ``.parquet``), a single dump shard, or a dump directory (``mdsd dump``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..distributions import PairBatch, dirichlet_pairs, pairs_from_logits, zipf_pairs
from ..errors import DataFileError
from ..io import load_pairs
from . import ngram, pystdlib
from .dumps import dump_status, is_dump, load_dump_arrays


@dataclass(frozen=True)
class BuiltinDataset:
    name: str
    description: str
    loader: Callable[[], PairBatch]


BUILTIN: dict[str, BuiltinDataset] = {
    d.name: d for d in (
        BuiltinDataset("pydoc-ngram", "real text: Kneser-Ney 4-gram target vs bigram draft on the Python docs "
                       "topics shipped with CPython; 512 held-out positions, V ~ 2,400", lambda: ngram.load()),
        BuiltinDataset("pystdlib", "real code: the shipped neural pair (Llama-style 4.5M target, 0.37M draft) "
                       "on held-out Python stdlib code; 512 positions, V = 4,096",
                       lambda: pystdlib.load()),
        BuiltinDataset("zipf", "synthetic: 64 perturbed-Zipf pairs, V = 32,000, noise 1, seed 0",
                       lambda: zipf_pairs(64, 32_000, seed=0)),
        BuiltinDataset("dirichlet", "synthetic: 64 Dirichlet(1) pairs, V = 1,000, seed 0",
                       lambda: dirichlet_pairs(64, 1_000, seed=0)),
    )
}


def dataset_names() -> list[str]:
    return list(BUILTIN)


def load_data(spec, *, temperature: float = 1.0, renormalize: bool = False) -> PairBatch:
    """Pairs from a built-in name, a pair file, a shard or a dump directory, at ``temperature``."""
    text = str(spec)
    path = Path(text)
    if not path.exists() and text in BUILTIN:
        pairs = BUILTIN[text].loader()
        return pairs if temperature == 1.0 else pairs.at_temperature(temperature)
    if is_dump(path):
        tl, dl, labels, manifest = load_dump_arrays(path)
        status = dump_status(path, manifest=manifest, stored=np.unique(labels["prompt_id"]))
        metadata = {**manifest, "complete": status.complete, "prompts_stored": status.prompts_stored}
        pairs = pairs_from_logits(tl, dl, temperature=temperature, source=str(path), metadata=metadata)
        return replace(pairs, labels=labels)
    if not path.exists():
        if path.suffix or "/" in text:
            raise DataFileError(f"data file {path} not found")
        raise DataFileError(f"data {text!r} is neither a file nor a built-in dataset "
                            f"({', '.join(BUILTIN)}); check the name or path")
    if path.is_dir():
        raise DataFileError(f"{path} is a directory without a dump manifest.json; give a pair file or a dump")
    return load_pairs(path, temperature=temperature, renormalize=renormalize)


def describe(spec) -> dict:
    """Shape, dtype, vocabulary, positions and metadata of a dataset, file or dump."""
    import numpy as np

    text = str(spec)
    path = Path(text)
    info: dict = {"data": text}
    if not path.exists() and text in BUILTIN:
        pairs = BUILTIN[text].loader()
        info.update(kind="built-in", description=BUILTIN[text].description)
    elif is_dump(path):
        from .dumps import read_manifest, shard_paths

        manifest = read_manifest(path)
        shards = shard_paths(path)
        pairs = load_data(path)
        info.update(kind="dump", shards=len(shards), complete=pairs.metadata["complete"],
                    prompt_count=int(manifest.get("prompt_count", 0)), manifest=manifest)
    else:
        pairs = load_data(path)
        info.update(kind="file", format=path.suffix.lstrip("."))
    info.update(pairs=pairs.num_pairs, vocab=pairs.vocab_size,
                stored="logits" if pairs.target_logits is not None else "probabilities",
                labels=sorted(pairs.labels))
    if info["kind"] != "dump":
        info["metadata"] = pairs.metadata
    if "prompt_id" in pairs.labels:
        info["prompts"] = int(np.unique(pairs.labels["prompt_id"]).size)
    return info
