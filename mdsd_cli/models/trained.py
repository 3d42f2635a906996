"""The trained pair that ships with mdsd: ``pystdlib``, two small Llama-style LMs on the Python standard library.

``mdsd_cli/models/pystdlib/`` holds what ``python -m mdsd_cli.models.train
--out DIR --seed 0`` wrote (:mod:`.train`; ``docs/pystdlib.md``):

* ``target/`` and ``draft/``: Hugging Face model directories (config, float16
  safetensors, the shared byte-level BPE tokenizer), loaded through
  :func:`~mdsd_cli.models.hf.load_hf_pair` like any other pair;
* ``heldout.json``: the first windows of held-out text as token ids, the
  source of the built-in prompts and of the tests' evaluation slice;
* ``manifest.json``: how they were trained, and their held-out perplexities and
  mean acceptance.

``mdsd decode --models pystdlib`` loads them by name; :func:`pystdlib_paths` gives
the directories for ``--target`` and ``--draft``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataFileError
from .base import Prompt

#: Where the shipped pair lives (package data).
PYSTDLIB_DIR = Path(__file__).resolve().parent / "pystdlib"
#: Tokens of held-out text before each built-in prompt's continuation.
PROMPT_LENGTH = 32


@dataclass(frozen=True)
class PystdlibPaths:
    """The files of the shipped pair."""

    directory: Path
    target: Path
    draft: Path
    manifest: Path
    heldout: Path


def pystdlib_paths(directory: Path | str | None = None) -> PystdlibPaths:
    """The shipped pair's directories and files (``directory``: another output of the training script).

    Raises :class:`~mdsd_cli.errors.DataFileError` if a file is missing (an
    install without the package data).
    """
    root = Path(directory) if directory is not None else PYSTDLIB_DIR
    paths = PystdlibPaths(root, root / "target", root / "draft", root / "manifest.json", root / "heldout.json")
    for path in (paths.target / "config.json", paths.target / "model.safetensors", paths.draft / "config.json",
                 paths.draft / "model.safetensors", paths.manifest, paths.heldout):
        if not path.is_file():
            raise DataFileError(f"the pystdlib pair is incomplete: {path} is missing (reinstall mdsd, or retrain it "
                                "with python -m mdsd_cli.models.train --out DIR)")
    return paths


def pystdlib_manifest(directory: Path | str | None = None) -> dict:
    """The shipped pair's ``manifest.json``: settings, corpus digest, parameter counts, held-out numbers."""
    return json.loads(pystdlib_paths(directory).manifest.read_text(encoding="utf-8"))


def pystdlib_heldout(directory: Path | str | None = None) -> np.ndarray:
    """The shipped held-out windows: int64 token ids, one row of ``context + 1`` tokens per window."""
    data = json.loads(pystdlib_paths(directory).heldout.read_text(encoding="utf-8"))
    return np.asarray(data["windows"], dtype=np.int64)


def pystdlib_prompts(count: int, *, decode=None, directory: Path | str | None = None,
                     length: int = PROMPT_LENGTH) -> list[Prompt]:
    """Up to ``count`` prompts: the first ``length`` tokens of each shipped held-out window, in order.

    ``decode(ids)`` gives each prompt's text (None: no text).
    """
    held = pystdlib_heldout(directory)
    out = []
    for pid, row in enumerate(held[: max(0, int(count))]):
        ids = tuple(int(t) for t in row[:length])
        out.append(Prompt(pid, ids, decode(ids) if decode is not None else None))
    return out


def load_pystdlib_pair(*, device: str = "auto", dtype: str = "float32", scoring: str = "auto",
                       threads: int | None = None, notify=None, directory: Path | str | None = None):
    """The shipped pair as a :class:`~mdsd_cli.models.ModelPair` named ``pystdlib``, with built-in prompts.

    Loaded by :func:`~mdsd_cli.models.hf.load_hf_pair` (its options; float16
    weights computed in ``dtype``); needs torch and transformers.
    """
    from .base import ModelPair
    from .hf import load_hf_pair

    paths = pystdlib_paths(directory)
    pair = load_hf_pair(str(paths.target), str(paths.draft), device=device, dtype=dtype, scoring=scoring,
                        threads=threads, notify=notify)
    manifest = pystdlib_manifest(directory)
    summary = {key: manifest.get(key) for key in ("script_version", "seed", "parameters", "evaluation")}
    summary["corpus"] = {key: manifest["corpus"].get(key) for key in ("python", "files", "sha256")}
    target = pair.target
    metadata = json.loads(json.dumps(pair.metadata))
    if directory is None:  # name the package data, not this machine's install path (manifests are committed)
        for role, path in (("target", paths.target), ("draft", paths.draft), ("tokenizer", paths.target)):
            if isinstance(metadata.get(role), dict) and metadata[role].get("name") == str(path):
                metadata[role]["name"] = f"pystdlib/{path.name}"
    return ModelPair("pystdlib", pair.target, pair.draft,
                     prompts=lambda count: pystdlib_prompts(count, decode=target.decode, directory=directory),
                     metadata={**metadata, "pair": {"name": "pystdlib", **summary}})


__all__ = ["PROMPT_LENGTH", "PYSTDLIB_DIR", "PystdlibPaths", "load_pystdlib_pair", "pystdlib_heldout",
           "pystdlib_manifest", "pystdlib_paths", "pystdlib_prompts"]
