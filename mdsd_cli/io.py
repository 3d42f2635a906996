"""Reading and writing pairs and tables, atomically.

Pair files
----------
``.npz``
    Arrays ``target`` and ``draft`` (probabilities, ``[V]`` or ``[N, V]``), or
    ``target_logits`` and ``draft_logits`` (turned into probabilities at the
    requested temperature). An optional ``metadata`` array holds a JSON string.
``.parquet``
    One row per pair with list columns ``target`` and ``draft`` (or
    ``target_logits`` and ``draft_logits``); other columns are kept as per-pair
    labels; the file's key-value metadata ``mdsd`` holds a JSON string.

Every write goes to a temporary file in the destination directory and is
renamed into place only when complete, so a failure never leaves a partial
file and never touches an existing one.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import socket
import subprocess
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .distributions import (
    PairBatch,
    check_memory,
    check_temperature,
    pairs_from_logits,
    pairs_from_probabilities,
)
from .errors import DataFileError, InputError, MdsdError, OutputError, option

_FORMAT_OPTION = option("--format csv|parquet", "fmt='csv' or fmt='parquet'")
PAIR_SUFFIXES = (".npz", ".parquet", ".pq")
TABLE_FORMATS = ("csv", "parquet")
#: Parquet files that mdsd reads back (pair files, dump shards, sweep cells) carry page
#: checksums, verified on reading: a corrupted page is an error, not silently other numbers.
PARQUET_WRITE = {"write_page_checksum": True}
PARQUET_READ = {"page_checksum_verification": True}
#: Peak bytes per stored value while pairs are loaded (the array as read, its float64
#: copy, probabilities, temporaries): a file is refused before reading if its two
#: arrays would need more than 80% of physical memory at this rate.
LOAD_BYTES_PER_VALUE = 32


# --- output paths -------------------------------------------------------------------------

def check_output_path(path) -> Path:
    """Fail early (before any work) if ``path`` cannot be written."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        raise OutputError(f"cannot write {out}: directory {parent} does not exist; create it first")
    if not parent.is_dir():
        raise OutputError(f"cannot write {out}: {parent} is not a directory")
    if out.exists() and out.is_dir():
        raise OutputError(f"cannot write {out}: it is a directory; give a file name")
    if out.exists() and not os.access(out, os.W_OK):
        raise OutputError(f"cannot write {out}: the file is read-only; choose another path or fix its permissions")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write {out}: directory {parent} is not writable")
    return out


def is_temporary(path) -> bool:
    """Whether ``path`` is a temporary file of :func:`atomic_path` (left behind only by a hard kill)."""
    name = Path(path).name
    return name.startswith(".") and name.endswith(".tmp")


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    On any exception the temporary file is removed and ``path`` is untouched.
    """
    out = check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent if str(out.parent) else ".")
    os.close(fd)
    try:
        yield Path(tmp)
        if out.exists():  # keep the permissions of the file we replace
            os.chmod(tmp, out.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"cannot write {out}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        _write_text(tmp, text)


def _write_text(path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


# --- manifests ----------------------------------------------------------------------------

def git_commit() -> str | None:
    """The git commit of the mdsd source tree, if it is a checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def package_versions() -> dict[str, str]:
    """Versions of mdsd and the libraries whose numbers it reports."""
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for name in ("mdsd", "numpy", "scipy", "cvxpy", "highspy", "clarabel", "pandas", "pyarrow", "numba"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def build_manifest(command: str, config: dict, **extra) -> dict:
    """Provenance of an output: command, config, versions, git commit, host, time."""
    return {
        "command": command,
        "config": config,
        "versions": package_versions(),
        "git_commit": git_commit(),
        "host": {"name": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


# --- tables -------------------------------------------------------------------------------

def table_format(path, fmt: str | None = None) -> str:
    """``csv`` or ``parquet``, from ``fmt`` or else the file extension."""
    if fmt:
        fmt = fmt.lower()
        if fmt not in TABLE_FORMATS:
            raise InputError(f"unknown table format {fmt!r}; choose csv or parquet")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".txt", ""):
        return "csv"
    raise InputError(f"cannot tell the table format of {path} from its extension; pass {_FORMAT_OPTION}")


def write_table(df, path, *, fmt: str | None = None, manifest: dict | None = None) -> Path:
    """Write a pandas DataFrame as CSV or Parquet, atomically.

    The manifest goes into the Parquet key-value metadata (key ``mdsd``) or, for
    CSV, into ``<path>.manifest.json`` next to it (a set of one: see :class:`OutputSet`).
    """
    outputs = OutputSet(manifest)
    out = outputs.table(df, path, fmt=fmt)
    outputs.write()
    return out


class OutputSet:
    """The output files of one run, written so that a reader can tell a complete set from a mixed one.

    Every file is written in full to a temporary file beside its destination first; then the
    data files are renamed into place, and the CSV tables' manifests (``<path>.manifest.json``)
    last. With a manifest, every manifest of the set (the side-car files and the one embedded in
    each Parquet table) carries the run's id ``run_id`` and lists the set under ``outputs``: each
    file's name and, for files that cannot carry the id (CSV tables, text), its SHA-256. A kill
    between two renames leaves some new files beside old ones; :func:`check_output_set` tells
    which. A failure before the renames leaves every existing file untouched.
    """

    def __init__(self, manifest: dict | None = None):
        import uuid

        self.manifest = manifest
        self.run_id = uuid.uuid4().hex
        self.items: list[tuple[str, Path, object]] = []

    def _add(self, kind: str, path, payload) -> Path:
        out = check_output_path(path)
        if any(os.path.abspath(p) == os.path.abspath(out) for _, p, _ in self.items):
            raise InputError(f"two outputs of one run both write {out}; give each its own file")
        self.items.append((kind, out, payload))
        return out

    def table(self, df, path, *, fmt: str | None = None) -> Path:
        """Add a table, written as CSV or Parquet (from ``fmt`` or the extension)."""
        return self._add(table_format(path, fmt), path, df)

    def text(self, path, text: str) -> Path:
        """Add a text file (UTF-8)."""
        return self._add("text", path, text)

    def _manifest(self, hashes: dict) -> dict | None:
        if self.manifest is None:
            return None
        outputs = [{"file": p.name, "kind": kind, **({"sha256": hashes[p]} if p in hashes else {})}
                   for kind, p, _ in self.items]
        return {**self.manifest, "run_id": self.run_id, "outputs": outputs}

    def write(self) -> list[Path]:
        """Write every file of the set (see the class docstring); the paths written, in order added."""
        import hashlib

        if not self.items:
            return []
        import pyarrow as pa
        import pyarrow.parquet as pq

        with contextlib.ExitStack() as stack:
            temps: dict[Path, Path] = {}
            # an ExitStack renames in reverse order of entry: the manifests are entered first, to land last
            csv_tables = [(p, df) for kind, p, df in self.items if kind == "csv"]
            if self.manifest is not None:
                sidecars = {p: stack.enter_context(atomic_path(f"{p}.manifest.json")) for p, _ in csv_tables}
            for _, p, _ in self.items:
                temps[p] = stack.enter_context(atomic_path(p))
            hashes = {}
            for kind, p, payload in self.items:  # files that cannot carry the run's id: hashed
                if kind == "csv":
                    payload.to_csv(temps[p], index=False, float_format="%.12g")
                elif kind == "text":
                    _write_text(temps[p], payload)
                else:
                    continue
                hashes[p] = hashlib.sha256(temps[p].read_bytes()).hexdigest()
            manifest = self._manifest(hashes)
            for kind, p, payload in self.items:
                if kind == "parquet":
                    table = pa.Table.from_pandas(payload, preserve_index=False)
                    if manifest is not None:
                        meta = dict(table.schema.metadata or {})
                        meta[b"mdsd"] = json.dumps(manifest).encode()
                        table = table.replace_schema_metadata(meta)
                    pq.write_table(table, temps[p])
            if manifest is not None:
                for p, _ in csv_tables:
                    _write_text(sidecars[p], json.dumps(manifest, indent=2) + "\n")
        return [p for _, p, _ in self.items]


def read_manifest(path) -> dict:
    """The manifest of an output table: embedded (Parquet) or its ``.manifest.json`` side-car (CSV)."""
    path = Path(path)
    try:
        if table_format(path) == "parquet":
            import pyarrow.parquet as pq

            meta = pq.read_schema(path).metadata or {}
            if b"mdsd" not in meta:
                raise DataFileError(f"{path} carries no mdsd manifest")
            return json.loads(meta[b"mdsd"])
        return json.loads(Path(f"{path}.manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DataFileError(f"cannot read the manifest of {path}: {exc.filename} does not exist") from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, MdsdError):
            raise
        raise DataFileError(f"cannot read the manifest of {path}: {_first_line(exc)}") from None


def check_output_set(path) -> list[str]:
    """Whether the output set ``path`` belongs to is whole: one line per file that is not of its run.

    Reads the manifest of ``path`` (see :class:`OutputSet`) and checks each file it lists, in
    ``path``'s directory: a Parquet table must carry the same ``run_id``, a CSV table's side-car
    manifest too, and every hashed file must have its SHA-256. An empty list: the set is whole.
    """
    import hashlib

    path = Path(path)
    manifest = read_manifest(path)
    run_id = manifest.get("run_id")
    if run_id is None:
        return [f"{path}: its manifest has no run_id (written before output sets had one)"]
    problems = []
    for entry in manifest.get("outputs", []):
        other = path.parent / entry["file"]
        if not other.exists():
            problems.append(f"{other}: missing")
            continue
        if "sha256" in entry and hashlib.sha256(other.read_bytes()).hexdigest() != entry["sha256"]:
            problems.append(f"{other}: not what run {run_id} wrote (its contents differ)")
        elif entry.get("kind") in ("csv", "parquet"):
            try:
                theirs = read_manifest(other).get("run_id")
            except DataFileError as exc:
                problems.append(str(exc))
                continue
            if theirs != run_id:
                problems.append(f"{other}: its manifest is of run {theirs}, not {run_id}")
    return problems


# --- pair files ---------------------------------------------------------------------------

def _pair_kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return "npz"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise DataFileError(f"unsupported pair file type {suffix or '(none)'!r} for {path}; use .npz or .parquet")


def load_pairs(path, *, temperature: float = 1.0, renormalize: bool = False) -> PairBatch:
    """Read target/draft pairs from ``.npz`` or ``.parquet`` at ``temperature``.

    Logits are turned into ``softmax(l / T)``; stored probabilities are
    re-tempered as ``p^(1/T)`` renormalised (a no-op at ``T = 1``).

    Raises
    ------
    DataFileError
        Missing, unreadable or malformed file, or one without the expected arrays.
    InputError
        Invalid probabilities (see :func:`~mdsd_cli.distributions.check_probabilities`).
    """
    src = Path(path)
    t = check_temperature(temperature)
    if not src.exists():
        raise DataFileError(f"data file {src} not found")
    if src.is_dir():
        raise DataFileError(f"data file {src} is a directory; give a .npz or .parquet file")
    kind = _pair_kind(src)
    arrays, metadata, labels = _read_npz(src) if kind == "npz" else _read_parquet(src)
    if "target_logits" in arrays and "draft_logits" in arrays:
        pairs = pairs_from_logits(arrays["target_logits"], arrays["draft_logits"], temperature=t,
                                  source=str(src), metadata=metadata)
    else:
        pairs = pairs_from_probabilities(arrays["target"], arrays["draft"], renormalize=renormalize,
                                         source=str(src), metadata=metadata)
        if t != 1.0:
            pairs = pairs.at_temperature(t)
    if labels:
        from dataclasses import replace

        pairs = replace(pairs, labels=labels)
    return pairs


_EXPECTED = "'target' and 'draft' (probabilities) or 'target_logits' and 'draft_logits'"


def _pick(names, src) -> tuple[str, str]:
    if "target_logits" in names and "draft_logits" in names:
        return "target_logits", "draft_logits"
    if "target" in names and "draft" in names:
        return "target", "draft"
    raise DataFileError(f"{src} has {sorted(names) or 'no arrays'}; expected {_EXPECTED}")


def check_load_size(values: int, src) -> None:
    """Refuse to load ``values`` stored numbers from ``src`` if they would not fit in memory."""
    check_memory(float(values) * LOAD_BYTES_PER_VALUE, f"loading the {values:,} values of {src}",
                 "use a smaller file (fewer pairs) or a machine with more memory")


def _npz_values(src: Path, names) -> int:
    """Number of values the ``.npy`` headers of ``names`` declare, read without loading the arrays."""
    total = 0
    with zipfile.ZipFile(src) as archive:
        for name in names:
            with archive.open(f"{name}.npy") as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, _, _ = np.lib.format.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, _, _ = np.lib.format.read_array_header_2_0(fh)
                else:  # other header versions: no estimate, np.load decides
                    continue
            total += math.prod(shape)
    return total


def _read_npz(src: Path):
    if not zipfile.is_zipfile(src):
        raise DataFileError(f"{src} is not a readable .npz file (not a zip archive; truncated or another format?)")
    try:
        with np.load(src, allow_pickle=False) as data:
            a, b = _pick(set(data.files), src)
            check_load_size(_npz_values(src, (a, b)), src)
            arrays = {a: data[a], b: data[b]}
            meta = {}
            if "metadata" in data.files:
                with contextlib.suppress(ValueError, TypeError):
                    meta = json.loads(str(data["metadata"]))
    except MdsdError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise DataFileError(f"{src} holds object arrays; save numeric arrays (no pickles)") from None
        raise DataFileError(f"{src} is not a readable .npz file ({_first_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - a damaged archive can fail anywhere in zipfile/zlib/numpy
        raise DataFileError(f"{src} is not a readable .npz file ({_first_line(exc)})") from None
    return arrays, meta, {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _list_column_to_matrix(column, name: str, src: Path) -> np.ndarray:
    import pyarrow as pa

    col = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
            or pa.types.is_fixed_size_list(col.type)):
        raise DataFileError(f"{src}: column {name!r} has type {col.type}; expected a list of floats per pair")
    if col.null_count:
        raise DataFileError(f"{src}: column {name!r} has {col.null_count} missing rows")
    inner = col.flatten().null_count if len(col) else 0
    if inner:
        raise DataFileError(f"{src}: column {name!r} has {inner} missing values inside its lists; "
                            "every pair needs a number for every token")
    value_type = col.type.value_type
    if not (pa.types.is_floating(value_type) or pa.types.is_integer(value_type)):
        raise DataFileError(f"{src}: column {name!r} holds {value_type}, not numbers")
    lengths = np.asarray(col.value_lengths()) if len(col) else np.zeros(0, dtype=int)
    if lengths.size == 0:
        raise DataFileError(f"{src} has no rows")
    if (lengths != lengths[0]).any():
        row = int(np.argmax(lengths != lengths[0]))
        raise DataFileError(
            f"{src}: column {name!r} row {row} has {lengths[row]} entries but row 0 has {lengths[0]}; "
            "every pair needs the same vocabulary size"
        )
    values = col.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(len(col), int(lengths[0]))


def parquet_list_values(metadata, names) -> int:
    """Number of leaf values in the list columns ``names``, from Parquet file metadata."""
    total = 0
    schema = metadata.schema
    leaves = [i for i in range(metadata.num_columns) if schema.column(i).path.split(".")[0] in set(names)]
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        total += sum(group.column(i).num_values for i in leaves)
    return total


def _read_parquet(src: Path):
    try:
        return _parquet_contents(src)
    except MdsdError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged file can fail anywhere inside pyarrow
        raise DataFileError(f"{src} is not a readable Parquet file ({_first_line(exc)})") from None


def _parquet_contents(src: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    metadata = pq.read_metadata(src)
    a, b = _pick(set(metadata.schema.to_arrow_schema().names), src)
    check_load_size(parquet_list_values(metadata, (a, b)), src)
    table = pq.read_table(src, **PARQUET_READ)
    a, b = _pick(set(table.column_names), src)
    arrays = {a: _list_column_to_matrix(table.column(a), a, src),
              b: _list_column_to_matrix(table.column(b), b, src)}
    meta = {}
    raw = (table.schema.metadata or {}).get(b"mdsd")
    if raw:
        with contextlib.suppress(ValueError):
            meta = json.loads(raw)
    labels = {}
    for name in table.column_names:
        if name in ("target", "draft", "target_logits", "draft_logits"):
            continue
        col = table.column(name)
        if pa.types.is_nested(col.type):
            continue
        labels[name] = col.to_numpy(zero_copy_only=False)
    return arrays, meta, labels


def save_pairs(pairs: PairBatch, path) -> Path:
    """Write pairs to ``.npz`` or ``.parquet`` atomically.

    Logits are saved when the batch has them (so any temperature can be applied
    on reading), else probabilities.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = check_output_path(path)
    kind = _pair_kind(out)
    if pairs.target_logits is not None and pairs.draft_logits is not None:
        arrays = {"target_logits": pairs.target_logits, "draft_logits": pairs.draft_logits}
    else:
        arrays = {"target": pairs.target, "draft": pairs.draft}
    meta = {"source": pairs.source, **pairs.metadata}
    if kind == "npz":
        with atomic_path(out) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays, metadata=np.array(json.dumps(meta)))
        return out
    V = pairs.vocab_size
    columns = {"pair": pa.array(np.arange(pairs.num_pairs))}
    for name, arr in arrays.items():
        flat = pa.array(np.ascontiguousarray(arr).reshape(-1))
        columns[name] = pa.FixedSizeListArray.from_arrays(flat, V)
    for name, values in pairs.labels.items():
        columns.setdefault(name, pa.array(values))
    table = pa.table(columns).replace_schema_metadata({b"mdsd": json.dumps(meta).encode()})
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp, **PARQUET_WRITE)
    return out


__all__ = [
    "PAIR_SUFFIXES", "TABLE_FORMATS", "atomic_path", "atomic_write_text", "build_manifest",
    "OutputSet", "check_output_path", "check_output_set", "is_temporary", "load_pairs", "read_manifest",
    "save_pairs", "table_format", "write_table",
]
