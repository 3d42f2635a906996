"""Dump directories: next-token logits of a target and a draft model, in Parquet shards.

Layout of a dump directory::

    manifest.json        models, revisions, tokenizer, vocabulary, mode, temperature, seed...
    shard-00000.parquet  one row per recorded position
    shard-00001.parquet
    ...

Each row has ``prompt_id``, ``position`` (index of the next token within the
generated or reference continuation), ``context_length`` (tokens before it),
``token`` (the next token: sampled in ``generate`` mode, the reference in
``score`` mode) and the list columns ``target_logits`` and ``draft_logits``
(float16 or float32, length V). A shard holds whole prompts only and is
written atomically, so an interrupted dump loses at most the prompts of the
shard being filled; the prompt ids found in the shards are skipped on resume.
A dump that ran to the end has ``"complete": true`` in its manifest; one that was
interrupted holds fewer prompts than its ``prompt_count`` (see :func:`dump_status`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataFileError
from ..io import PARQUET_READ, PARQUET_WRITE, atomic_path, atomic_write_text

FORMAT = "mdsd-dump/1"
MANIFEST = "manifest.json"


def is_dump(path) -> bool:
    """Whether ``path`` is a dump directory."""
    p = Path(path)
    return p.is_dir() and (p / MANIFEST).exists()


def shard_paths(directory) -> list[Path]:
    return sorted(Path(directory).glob("shard-*.parquet"))


def read_manifest(directory) -> dict:
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataFileError(f"{path} is not a readable dump manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise DataFileError(f"{path} is not an mdsd dump manifest (not a JSON object)")
    if manifest.get("format") != FORMAT:
        raise DataFileError(f"{path} is not an mdsd dump manifest (format {manifest.get('format')!r})")
    return manifest


def completed_prompts(directory) -> set[int]:
    """Prompt ids already stored in the shards of ``directory``."""
    import pyarrow.parquet as pq

    done: set[int] = set()
    for shard in shard_paths(directory):
        try:
            done.update(int(x) for x in pq.read_table(shard, columns=["prompt_id"], **PARQUET_READ).column(0).to_pylist())
        except Exception as exc:  # noqa: BLE001 - report any unreadable shard the same way
            raise DataFileError(f"{shard} is not a readable shard ({str(exc).splitlines()[0]}); "
                                "delete it and rerun to redo its prompts") from None
    return done


@dataclass(frozen=True)
class DumpStatus:
    """How much of a dump is there: prompts stored in its shards out of the prompts it was run on."""

    prompts_total: int
    prompts_stored: int
    complete: bool

    @property
    def note(self) -> str:
        """A one-line description of an incomplete dump (empty when complete)."""
        if self.complete:
            return ""
        return (f"incomplete dump: {self.prompts_stored} of {self.prompts_total} prompts stored (interrupted?); "
                "rerun the same mdsd dump command to finish it")


def dump_status(directory, *, manifest: dict | None = None, stored=None) -> DumpStatus:
    """Whether the dump in ``directory`` ran to the end.

    Complete means the manifest says so (a finished run marks it), or, for dumps
    written before that mark, that every prompt id is in the shards. ``stored``
    (prompt ids of the rows) saves reading the shards again when already at hand.
    """
    manifest = read_manifest(directory) if manifest is None else manifest
    ids = completed_prompts(directory) if stored is None else {int(x) for x in stored}
    total = int(manifest.get("prompt_count", len(ids)))
    complete = bool(manifest.get("complete")) or len(ids) >= total
    return DumpStatus(total, len(ids), complete)


class ShardWriter:
    """Buffers rows and writes them as atomic Parquet shards of whole prompts."""

    def __init__(self, directory, *, vocab_size: int, store_dtype: str, rows_per_shard: int, metadata: dict):
        self.dir = Path(directory)
        self.V = vocab_size
        self.dtype = np.float16 if store_dtype == "float16" else np.float32
        self.rows_per_shard = max(1, rows_per_shard)
        self.metadata = metadata
        self.buffer: list[dict] = []
        self.rows = 0
        existing = shard_paths(self.dir)
        self.next_index = 1 + max((int(p.stem.split("-")[1]) for p in existing), default=-1)

    def add_prompt(self, prompt_id: int, positions, context_lengths, tokens, target_logits, draft_logits):
        """Queue one prompt's rows; flushes a shard when enough rows are buffered."""
        k = len(tokens)
        if k == 0:
            return
        self.buffer.append({
            "prompt_id": np.full(k, prompt_id, dtype=np.int64), "position": np.asarray(positions, dtype=np.int32),
            "context_length": np.asarray(context_lengths, dtype=np.int32), "token": np.asarray(tokens, dtype=np.int64),
            "target_logits": np.asarray(target_logits, dtype=self.dtype).reshape(k, self.V),
            "draft_logits": np.asarray(draft_logits, dtype=self.dtype).reshape(k, self.V),
        })
        self.rows += k
        if self.rows >= self.rows_per_shard:
            self.flush()

    def flush(self) -> Path | None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.buffer:
            return None
        cols = {name: np.concatenate([b[name] for b in self.buffer]) for name in self.buffer[0]}
        arrays = {}
        for name, values in cols.items():
            if values.ndim == 2:
                arrays[name] = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), self.V)
            else:
                arrays[name] = pa.array(values)
        table = pa.table(arrays).replace_schema_metadata({b"mdsd": json.dumps(self.metadata).encode()})
        path = self.dir / f"shard-{self.next_index:05d}.parquet"
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, **PARQUET_WRITE)
        self.next_index += 1
        self.buffer, self.rows = [], 0
        return path


def write_manifest(directory, manifest: dict) -> None:
    atomic_write_text(Path(directory) / MANIFEST, json.dumps({"format": FORMAT, **manifest}, indent=2) + "\n")


def load_dump_arrays(directory):
    """All shards of a dump: ``(target_logits, draft_logits, labels, manifest)``, rows by (prompt, position)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io import _list_column_to_matrix, check_load_size, parquet_list_values

    manifest = read_manifest(directory)
    shards = shard_paths(directory)
    if not shards:
        raise DataFileError(f"dump {directory} has no shards yet; run mdsd dump to fill it")
    values = 0
    for shard in shards:  # refuse a dump too large for memory before reading any of it
        try:
            values += parquet_list_values(pq.read_metadata(shard), ("target_logits", "draft_logits"))
        except Exception as exc:  # noqa: BLE001 - a damaged shard can fail anywhere inside pyarrow
            raise DataFileError(f"{shard} is not a readable shard ({str(exc).splitlines()[0]})") from None
    check_load_size(values, directory)
    tables = []
    expected = {"prompt_id", "position", "target_logits", "draft_logits"}
    for shard in shards:
        try:
            tables.append(pq.read_table(shard, **PARQUET_READ))
        except Exception as exc:  # noqa: BLE001
            raise DataFileError(f"{shard} is not a readable shard ({str(exc).splitlines()[0]})") from None
        missing = sorted(expected - set(tables[-1].column_names))
        if missing:
            raise DataFileError(f"{shard} is not an mdsd dump shard (no column {', '.join(missing)}); "
                                "remove it from the dump directory")
    try:
        table = pa.concat_tables(tables).sort_by([("prompt_id", "ascending"), ("position", "ascending")])
    except pa.ArrowException as exc:
        raise DataFileError(f"the shards of {directory} do not fit together ({str(exc).splitlines()[0]})") from None
    tl = _list_column_to_matrix(table.column("target_logits"), "target_logits", Path(directory))
    dl = _list_column_to_matrix(table.column("draft_logits"), "draft_logits", Path(directory))
    labels = {name: table.column(name).to_numpy() for name in ("prompt_id", "position", "context_length", "token")
              if name in table.column_names}
    return tl, dl, labels, manifest
