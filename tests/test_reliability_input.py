"""Reliability, part 2: hostile or broken input, each a clean error.

A clean error is: the documented exit code (1, or 2 for command-line usage),
exactly one line ``Error: ...`` on stderr, nothing on stdout, no traceback, and
no new file left behind. Property-based tests drive the CLI with random
malformed arrays, options, files and configs: the only outcomes allowed are a
correct result or a clean error. The catalogue is docs/reliability.md.
"""

import io
import os
import re
import socket
import subprocess
import sys
import threading
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mdsd_cli import optimal_acceptance, zipf_pairs
from mdsd_cli.cli.app import app
from mdsd_cli.datasets import load_data
from mdsd_cli.errors import InputError, MdsdError
from mdsd_cli.io import save_pairs
from mdsd_cli.sweep import SweepConfig

from .conftest import SUBPROCESS_TIMEOUT

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_clean_error(result, code=1, *fragments):
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def is_clean_error(result) -> bool:
    lines = result.stderr.splitlines()
    return (result.exit_code in (1, 2) and result.stdout == "" and len(lines) == 1
            and lines[0].startswith("Error: ") and "Traceback" not in result.stderr
            and (result.exception is None or isinstance(result.exception, SystemExit)))


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.fixture
def good_npz(tmp_path):
    return save_pairs(zipf_pairs(3, 50, seed=1), tmp_path / "good.npz")


@pytest.fixture
def good_parquet(tmp_path):
    return save_pairs(zipf_pairs(3, 50, seed=1), tmp_path / "good.parquet")


# --- truncated and corrupted files ---------------------------------------------------------------

def _flip(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:]


@pytest.mark.parametrize("damage", ["empty", "header", "half", "almost", "flipped-data", "flipped-footer"])
@pytest.mark.parametrize("kind", ["npz", "parquet"])
def test_truncated_or_corrupted_pair_files(tmp_path, good_npz, good_parquet, kind, damage):
    raw = (good_npz if kind == "npz" else good_parquet).read_bytes()
    cut = {"empty": b"", "header": raw[:30], "half": raw[: len(raw) // 2], "almost": raw[:-3],
           "flipped-data": _flip(raw, len(raw) // 3), "flipped-footer": _flip(raw, len(raw) - 6)}[damage]
    bad = tmp_path / "out" / f"bad.{kind}"
    bad.parent.mkdir()
    bad.write_bytes(cut)
    before = listing(tmp_path)
    result = run("bound", "--data", bad, "--out", tmp_path / "out" / "alpha.csv")
    assert_clean_error(result, 1, str(bad))
    assert listing(tmp_path) == before  # no partial output


def test_npz_whose_member_is_not_an_array(tmp_path):
    path = tmp_path / "junk.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("target.npy", b"\x93NUMPY garbage")
        archive.writestr("draft.npy", b"")
    assert_clean_error(run("bound", "--data", path), 1, "not a readable .npz")


def test_corrupted_dump_shard(tmp_path):
    from mdsd_cli.datasets.dumps import ShardWriter, write_manifest

    dump = tmp_path / "dump"
    dump.mkdir()
    write_manifest(dump, {"mode": "score", "vocab_size": 4})
    writer = ShardWriter(dump, vocab_size=4, store_dtype="float16", rows_per_shard=1, metadata={})
    writer.add_prompt(0, [0], [3], [1], np.zeros((1, 4)), np.ones((1, 4)))
    assert run("bound", "--data", dump, "-q").exit_code == 0
    shard = next(dump.glob("shard-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:40])
    assert_clean_error(run("bound", "--data", dump), 1, "not a readable shard")
    pq.write_table(pa.table({"x": [1]}), shard)  # a foreign Parquet file among the shards
    assert_clean_error(run("bound", "--data", dump), 1, "not an mdsd dump shard")
    (dump / "manifest.json").write_text("[1, 2]")
    assert_clean_error(run("bound", "--data", dump), 1, "not a JSON object")


# --- wrong dtypes and shapes --------------------------------------------------------------------------

HALF = np.ones(2) / 2


@pytest.mark.parametrize("target,draft,fragment", [
    (np.array(["0.5", "0.5"]), HALF, "dtype <U3"),
    (np.array([b"a", b"b"]), HALF, "dtype |S1"),
    (np.array([0.5, 0.5], dtype=object), HALF, "object arrays"),
    (np.array([True, False]), HALF, "dtype bool"),
    (np.array([0.5, 0.5], dtype=complex), HALF, "dtype complex128"),
    (np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"), HALF, "datetime64"),
    (np.array(0.5), np.array(0.5), "0 dimensions"),
    (np.zeros((1, 2, 2)), np.zeros((1, 2, 2)), "3 dimensions"),
    (np.zeros((0, 2)), np.zeros((0, 2)), "at least one pair"),
    (np.ones((3, 2)) / 2, np.ones((2, 2)) / 2, "same number of pairs"),
    (np.ones((2, 3)) / 3, np.ones((2, 2)) / 2, "same vocabulary size"),
    (HALF, np.ones((2, 2)) / 2, "both as [V] or both as [N, V]"),
])
def test_wrong_dtypes_and_shapes_in_npz(tmp_path, target, draft, fragment):
    path = tmp_path / "bad.npz"
    np.savez(path, target=target, draft=draft, allow_pickle=True)
    assert_clean_error(run("bound", "--data", path), 1, fragment)


@pytest.mark.parametrize("column,fragment", [
    (pa.array([["a", "b"]]), "holds string, not numbers"),
    (pa.array([[True, False]]), "holds bool"),
    (pa.array(["0.5"]), "expected a list of floats"),
    (pa.array([[0.5, None]]), "missing values inside its lists"),
    (pa.array([None], type=pa.list_(pa.float64())), "missing rows"),
    (pa.array([[0.5, 0.25, 0.25]]), "same vocabulary size"),
])
def test_wrong_types_in_parquet(tmp_path, column, fragment):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"target": column, "draft": pa.array([[0.5, 0.5]])}), path)
    assert_clean_error(run("bound", "--data", path), 1, fragment)


def test_logit_shapes_that_disagree(tmp_path):
    path = tmp_path / "logits.npz"
    np.savez(path, target_logits=np.zeros((2, 5)), draft_logits=np.zeros((3, 5)))
    assert_clean_error(run("bound", "--data", path), 1, "same number of pairs")


# --- sizes that would not fit in memory: refused before allocating --------------------------------------

def _npz_claiming(path, shape):
    with zipfile.ZipFile(path, "w") as archive:
        for name in ("target", "draft"):
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
            archive.writestr(f"{name}.npy", header.getvalue() + b"\0" * 64)


def test_a_file_declaring_a_huge_array_is_refused_before_reading_it(tmp_path):
    path = tmp_path / "huge.npz"
    _npz_claiming(path, (1_000_000, 1_000_000))  # 8 TB each, in a 300-byte file
    tracemalloc.start()
    try:
        result = run("bound", "--data", path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_clean_error(result, 1, "2,000,000,000,000 values", "would need about")
    assert peak < 50 * 2**20
    _npz_claiming(path, (3, 5))  # a small claim whose data is missing
    assert_clean_error(run("bound", "--data", path), 1, "not a readable .npz")


@pytest.mark.parametrize("args,fragment", [
    (["--synthetic", "zipf", "--vocab", "100000000000"], "V=100000000000 would need about"),
    (["--synthetic", "dirichlet", "--pairs", "1000000", "--vocab", "1000000"], "would need about"),
])
def test_synthetic_sizes_beyond_memory(args, fragment):
    assert_clean_error(run("bound", *args), 1, fragment, "use fewer pairs or a smaller vocabulary")


def test_files_and_dumps_beyond_memory(tmp_path, good_parquet, good_npz, monkeypatch):
    import mdsd_cli.distributions as distributions

    monkeypatch.setattr(distributions, "physical_memory", lambda: 1024)  # pretend: a 1 KiB machine
    for path in (good_parquet, good_npz):
        assert_clean_error(run("bound", "--data", path), 1, "300 values", "would need about")
    from mdsd_cli.datasets.dumps import ShardWriter, write_manifest

    dump = tmp_path / "dump"
    dump.mkdir()
    write_manifest(dump, {"mode": "score", "vocab_size": 4096})
    ShardWriter(dump, vocab_size=4096, store_dtype="float16", rows_per_shard=1, metadata={}).add_prompt(
        0, [0], [1], [1], np.zeros((1, 4096)), np.zeros((1, 4096)))
    assert_clean_error(run("bound", "--data", dump), 1, "8,192 values", "would need about")


def test_the_memory_guard_counts_jobs_and_each_limit(monkeypatch):
    """Issue 26, item 9: the guard used to check one process against 80% of physical memory; --jobs processes
    each hold a tree, and a cgroup or ulimit -v can be far below the machine."""
    import mdsd_cli.distributions as distributions
    from mdsd_cli.errors import SizeLimitError

    gib = 2.0**30
    monkeypatch.setattr(distributions, "memory_limits", lambda: [("this machine has", 24 * gib, False)])
    distributions.check_memory(7.2 * gib, "a tree", "use a smaller tree", processes=2)  # 14.4 <= 19.2
    with pytest.raises(SizeLimitError, match=r"about 21.6 GiB \(3 processes at 7.2 GiB each\) \(this machine has "
                                             r"24.0 GiB\); use a smaller tree; or fewer --jobs"):
        distributions.check_memory(7.2 * gib, "a tree", "use a smaller tree", processes=3)
    monkeypatch.setattr(distributions, "memory_limits", lambda: [("this machine has", 24 * gib, False),
                                                                 ("the cgroup memory limit is", 8 * gib, False),
                                                                 ("ulimit -v leaves this process", 4 * gib, True)])
    with pytest.raises(SizeLimitError, match="the cgroup memory limit is 8.0 GiB"):
        distributions.check_memory(3.0 * gib, "x", "y", processes=3)
    with pytest.raises(SizeLimitError, match="ulimit -v leaves this process 4.0 GiB"):  # per process: not x jobs
        distributions.check_memory(3.5 * gib, "x", "y", processes=1)
    distributions.check_memory(3.0 * gib, "x", "y", processes=2)  # 6 <= 6.4 and 3 <= 3.2


def test_a_tree_beyond_ulimit_is_refused_in_a_real_process(tmp_path):
    """``ulimit -v 4000000``, V = 300,000, a 2,047-node tree: was an ``_ArrayMemoryError`` traceback."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4_000_000 * 1024, resource.RLIM_INFINITY))

    done = subprocess.run([sys.executable, "-m", "mdsd_cli", "decode", "--models", "synthetic", "--vocab", "300000",
                           "--tree", "2x10", "--prompts", "1", "--max-new-tokens", "4", "-o", tmp_path / "s.csv"],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, preexec_fn=limit)
    assert done.returncode == 1 and done.stdout == "" and not (tmp_path / "s.csv").exists(), done.stderr
    assert re.fullmatch(r"Error: a tree of 2,047 nodes at V=300,000 would need about 13.7 GiB \(ulimit -v leaves "
                        r"this process \d+\.\d GiB\); use a smaller tree\n", done.stderr), done.stderr


def test_memory_limits_read_this_machine():
    from mdsd_cli.distributions import memory_limits, physical_memory

    limits = memory_limits()
    assert limits[0] == ("this machine has", float(physical_memory()), False)
    assert all(limit > 0 for _, limit, _ in limits)


# --- sweep configs ---------------------------------------------------------------------------------------

TOP = 'name = "t"\nsamplers = ["iid"]\n'
DATASET = '[[datasets]]\nname = "d"\nsynthetic = "dirichlet"\npairs = 2\nvocab = 4\n'


def toml(top="", dataset="", *, base_top=TOP, base_dataset=DATASET):
    return base_top + top + base_dataset + dataset


@pytest.mark.parametrize("text,fragment", [
    (toml("colour = 1\n"), "unknown key(s) colour"),
    (toml(dataset="vocabulary = 4\n"), "unknown key(s) vocabulary"),
    (toml(base_top='name = "t"\nsamplers = "iid"\n'), "'samplers' must be list"),
    (toml(base_top='name = "t"\nsamplers = [1]\n'), "must be a string"),
    (toml("drafts = [2.5]\n"), "must be an integer"),
    (toml('temperatures = ["hot"]\n'), "must be a number"),
    (toml("temperatures = [nan]\n"), "temperatures must be"),
    (toml("seed = -1\n"), "seed must be an integer >= 0"),
    (toml("seed = 1.5\n"), "'seed' must be int"),
    (toml("seed = true\n"), "not a boolean"),
    (toml('samples = "many"\n'), "'samples' must be int"),
    (toml("max_lp_variables = 0\n"), "max_lp_variables must be >= 1"),
    (toml(dataset="seed = -3\n"), "seed must be an integer >= 0"),
    (toml(base_dataset=DATASET.replace("vocab = 4", 'vocab = "4"')), "'vocab' must be int/list"),
    (toml(base_dataset=DATASET.replace("pairs = 2", "pairs = 0")), "pairs must be >= 1"),
    (TOP + 'datasets = "pydoc-ngram"\n', "'datasets' must be list"),
    (TOP + "datasets = [1]\n", "must be a table"),
    ("name = \n", "not valid TOML"),
    ("[[datasets]\n", "not valid TOML"),
])
def test_bad_sweep_configs_are_refused_before_any_work(tmp_path, text, fragment):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    result = run("sweep", config, "--out", tmp_path / "out")
    assert_clean_error(result, 1, fragment)
    assert not (tmp_path / "out").exists()


def test_a_config_that_is_not_utf8(tmp_path):
    config = tmp_path / "latin.toml"
    config.write_bytes(b'name = "caf\xe9"\n')
    assert_clean_error(run("sweep", config, "--out", tmp_path / "out"), 1, "not valid TOML")


toml_values = st.recursive(
    st.one_of(st.integers(-3, 5), st.floats(allow_nan=True), st.booleans(), st.text(max_size=6),
              st.sampled_from(["iid", "wor", "rrs", "chain", "zipf", "dirichlet", "pydoc-ngram", "auto"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["name", "synthetic", "pairs", "vocab", "seed", "noise", "builtin", "path", "colour"]),
        inner, max_size=4)),
    max_leaves=8)
config_keys = st.sampled_from(["name", "seed", "datasets", "temperatures", "drafts", "samplers", "solvers",
                               "verifiers", "method", "samples", "max_lp_variables", "figure", "colour"])


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(config_keys, toml_values, max_size=6))
def test_random_configs_give_a_config_or_a_clear_error(data):
    try:
        config = SweepConfig.from_dict(data)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert config.cells()  # a config that is accepted has work to do


# --- output paths ------------------------------------------------------------------------------------------

OUT_COMMANDS = {
    "bound": ["bound", "--synthetic", "zipf", "--vocab", "20", "--pairs", "1"],
    "verify": ["verify", "--synthetic", "zipf", "--vocab", "20", "--pairs", "1", "--verifier", "rrs"],
    "check-lossless": ["check-lossless", "--verifier", "rrs", "--cases", "1", "--trials", "200", "-n", "2"],
    "audit": ["audit", "mdsd:rrs", "-n", "2", "--cases", "random", "--count", "1", "--budget", "400"],
    "generate": ["generate", "--synthetic", "zipf", "--vocab", "20", "--pairs", "1"],
}


@pytest.mark.parametrize("command", list(OUT_COMMANDS))
def test_unwritable_output_paths(tmp_path, command, monkeypatch):
    suffix = ".npz" if command == "generate" else ".csv"
    args = OUT_COMMANDS[command]
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    for out, code, fragment in [(tmp_path / "missing" / f"x{suffix}", 1, "does not exist"),
                                (tmp_path / "a-file" / f"x{suffix}", 1, "is not a directory"),
                                (tmp_path / "a-dir", 2, "is a directory")]:  # 2: refused while parsing options
        before = listing(tmp_path)
        assert_clean_error(run(*args, "--out", out), code, fragment)
        assert listing(tmp_path) == before
    read_only = tmp_path / f"old{suffix}"
    read_only.write_text("previous results\n")
    os.chmod(read_only, 0o444)
    if os.access(read_only, os.W_OK):  # root ignores file modes: emulate what everyone else sees
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == read_only and mode == os.W_OK
                            else real_access(p, mode, **kw))
    before = listing(tmp_path)
    assert_clean_error(run(*args, "--out", read_only), 1, "read-only")
    assert read_only.read_text() == "previous results\n" and listing(tmp_path) == before


def test_unwritable_sweep_and_dump_directories(tmp_path):
    (tmp_path / "a-file").write_text("x")
    assert_clean_error(run("sweep", "--data", "dirichlet", "-s", "iid", "--out", tmp_path / "a-file" / "s"), 1,
                       "cannot create the sweep directory", "Not a directory")
    assert_clean_error(run("sweep", "--data", "dirichlet", "-s", "iid", "--out", tmp_path / "a-file"), 1,
                       "is a file")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    # a missing parent is created, but only once the models have loaded: a failure leaves nothing behind
    assert_clean_error(run("dump", "--target", "./t", "--draft", "./d", "--prompts", prompts, "--out",
                           tmp_path / "missing" / "dump"), 1, "cannot load model './t': no such directory")
    assert not (tmp_path / "missing").exists()
    assert_clean_error(run("dump", "--target", "t", "--draft", "d", "--prompts", prompts, "--out",
                           tmp_path / "a-file"), 1, "not a directory")
    assert_clean_error(run("dump", "--target", "t", "--draft", "d", "--prompts", prompts, "--out",
                           tmp_path / "a-file" / "dump"), 1, "a-file is a file")


# --- a Dask scheduler that does not answer --------------------------------------------------------------------

@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never says anything."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


def test_dask_scheduler_that_does_not_answer(tmp_path, silent_server):
    result = run("sweep", "--data", "dirichlet", "-s", "iid", "--executor", "dask", "--scheduler",
                 f"tcp://127.0.0.1:{silent_server}", "--timeout", "1", "--out", tmp_path / "s")
    assert_clean_error(result, 1, "cannot reach the Dask scheduler", "within 1 s")  # gave up at --timeout
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("address,fragment", [
    ("not-an-address", "give its address as tcp://HOST:PORT"),
    ("tcp://127.0.0.1:9", "cannot reach the Dask scheduler"),  # nothing listens on the discard port
])
def test_dask_scheduler_addresses_that_cannot_work(tmp_path, address, fragment):
    result = run("sweep", "--data", "dirichlet", "-s", "iid", "--executor", "dask", "--scheduler", address,
                 "--timeout", "1", "--out", tmp_path / "s")
    assert_clean_error(result, 1, fragment)


# --- property-based: random malformed arrays and options through the CLI -----------------------------------

SPECIALS = [np.nan, np.inf, -np.inf, -1.0, 0.0, 5e-324, 1e-300, 1e300]
DTYPES = ["float64", "float32", "float16", "int64", "uint8", "bool", "complex128", "<U3", "object"]


@st.composite
def malformed_arrays(draw):
    names = draw(st.sampled_from([("target", "draft"), ("target_logits", "draft_logits"), ("target",),
                                  ("target", "draft", "target_logits"), ("p", "q")]))
    arrays = {}
    for name in names:
        shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
        values = np.asarray(draw(st.lists(st.floats(0, 1), min_size=int(np.prod(shape)),
                                          max_size=int(np.prod(shape))))).reshape(shape)
        if values.ndim and values.size and draw(st.booleans()):
            with np.errstate(all="ignore"):
                values = values / values.sum(axis=-1, keepdims=True)
        if values.size and draw(st.booleans()):
            values.flat[draw(st.integers(0, values.size - 1))] = draw(st.sampled_from(SPECIALS))
        dtype = draw(st.sampled_from(DTYPES))
        with np.errstate(all="ignore"):
            arrays[name] = values.astype(dtype)
    return arrays


cli_options = st.fixed_dictionaries({
    "command": st.sampled_from(["bound", "verify"]),
    "sampler": st.sampled_from(["iid", "wor", "greedy", "hub", "all", "beam"]),
    "n": st.sampled_from(["1", "2", "3", "0", "-1", "x"]),
    "t": st.sampled_from(["1", "0", "0.01", "100", "-1", "nan", "inf", "hot"]),
    "renormalize": st.booleans(),
    "solver": st.sampled_from(["chain", "subsets", "primal-lp", "magic"]),
})


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(arrays=malformed_arrays(), options=cli_options)
def test_random_malformed_arrays_and_options(tmp_path, arrays, options):
    path = tmp_path / "random.npz"
    np.savez(path, allow_pickle=True, **arrays)
    args = [options["command"], "--data", path, "-n", options["n"], "-t", options["t"], "-q", "--no-timing"]
    if options["renormalize"]:
        args.append("--renormalize")
    if options["command"] == "bound":
        args += ["-s", options["sampler"], "--solver", options["solver"]]
    result = run(*args)
    if result.exit_code != 0:
        assert is_clean_error(result), (result.exit_code, result.stderr, result.exception)
        return
    # a result: it must be the library's answer on the same input, within [0, 1], without NaN
    df = pd.read_csv(io.StringIO(result.stdout))
    assert len(df) and not df.isna().any().any() and df.alpha_star.between(0, 1).all()
    pairs = load_data(path, renormalize=options["renormalize"]).at_temperature(float(options["t"]))
    for row in df.itertuples():
        expected = optimal_acceptance(pairs.target[row.pair], pairs.draft[row.pair], row.n, sampler=row.sampler)
        tol = 1e-6 if getattr(row, "solver", "chain").endswith("lp") else 1e-11
        assert row.alpha_star == pytest.approx(expected, abs=tol)
        if options["command"] == "verify":
            assert row.acceptance <= row.alpha_star + 1e-12


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["npz", "parquet"]), edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)),
                                                                   min_size=1, max_size=4),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def test_random_corruption_of_pair_files(tmp_path, kind, edits, cut):
    src = save_pairs(zipf_pairs(2, 12, seed=3), tmp_path / f"src.{kind}")
    raw = bytearray(src.read_bytes())
    for where, value in edits:
        raw[min(int(where * len(raw)), len(raw) - 1)] = value
    if cut is not None:
        raw = raw[: int(cut * len(raw))]
    path = tmp_path / f"damaged.{kind}"
    path.write_bytes(bytes(raw))
    result = run("bound", "--data", path, "-s", "wor", "-q", "--no-timing")
    if result.exit_code != 0:
        assert is_clean_error(result), (result.stderr, result.exception)
        return
    df = pd.read_csv(io.StringIO(result.stdout))  # the bytes still decode: the answer for what they hold
    pairs = load_data(path)
    assert not df.isna().any().any()
    for row in df.itertuples():
        assert row.alpha_star == pytest.approx(
            optimal_acceptance(pairs.target[row.pair], pairs.draft[row.pair], 2, sampler="wor"), abs=1e-11)


def test_library_errors_are_one_line(tmp_path):
    # every message a user can see is a single line, also through the library
    with pytest.raises(MdsdError) as info:
        load_data(tmp_path / "nothing.npz")
    assert "\n" not in str(info.value)


_GOOD = np.array([0.5, 0.3, 0.2])


@pytest.mark.parametrize("p,q,fragment", [
    (np.array([np.nan, 0.5, 0.5]), _GOOD, "non-finite value"),
    (_GOOD, np.array([0.5, np.inf, 0.5]), "non-finite value"),
    (_GOOD, np.array([0.6, -0.1, 0.5]), "negative entry"),
    (2 * _GOOD, _GOOD, "sums to 2, not 1"),
    (_GOOD, np.zeros(3), "sums to 0"),
    (_GOOD, np.array([0.5, 0.5]), "same vocabulary size"),
    (_GOOD[None, :], _GOOD[None, :], "one pair"),
    (np.array(["a", "b", "c"]), _GOOD, "expected a floating-point array"),
])
def test_verifier_classes_check_their_pair(p, q, fragment):
    """The class interface a decoding loop calls (``get_verifier(name)(p, q, n)``) refuses the pairs
    ``prepare_verifier`` refuses, for every registered verifier, with one line (it used to set up on them:
    a negative or NaN mass gave a verifier of nonsense, or a numba typing error)."""
    from mdsd_cli.verifiers import get_verifier, verifier_names

    for name in verifier_names():
        with pytest.raises(InputError, match=fragment) as info:
            get_verifier(name)(p, q, 2)
        assert "\n" not in str(info.value), name


_P4, _Q4 = [0.3, 0.4, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1]


@pytest.mark.parametrize("call,fragment", [
    (lambda: __import__("mdsd_cli").acceptance_rate("kseq", _P4, _Q4, 2, method="monte-carlo", samples=2.7),
     "samples must be an integer >= 2, got 2.7"),
    (lambda: __import__("mdsd_cli").acceptance_rate("kseq", _P4, _Q4, 2, method="monte-carlo", samples="100"),
     "samples must be an integer"),
    (lambda: __import__("mdsd_cli").acceptance_rate("kseq", _P4, _Q4, 2, max_tuples=float("nan")),
     "max_tuples must be an integer >= 1"),
    (lambda: __import__("mdsd_cli").acceptance_rate("kseq", _P4, _Q4, 2, max_tuples=-1), "max_tuples must be"),
    (lambda: __import__("mdsd_cli").sample_drafts(_Q4, 2, size=2.5), "size must be an integer >= 0, got 2.5"),
    (lambda: __import__("mdsd_cli").verify("rrs", _P4, _Q4, 0, rng=0), "drafts must be a 1-D array"),
    (lambda: __import__("mdsd_cli").check_probabilities([1e308, 1e308, 0, 0], renormalize=True),
     "sums past the largest float64"),
    (lambda: __import__("mdsd_cli.samplers", fromlist=["x"]).draft_tuple_law([0.5, 0.5], 20000),
     r"more than 10\^6020 tuples"),
    (lambda: __import__("mdsd_cli").optimal_acceptance([0.5, 0.5], [0.5, 0.5], 20000, solver="primal-lp"),
     "use the chain solver"),
    (lambda: __import__("mdsd_cli").acceptance_rate("otm", [0.5, 0.5], [0.5, 0.5], 20000), "more than 10"),
    (lambda: __import__("mdsd_cli").optimal_acceptance(_P4, _Q4, 2, solver="primal-lp", max_lp_variables=float("nan")),
     "max_lp_variables must be an integer >= 1, got nan"),
    (lambda: __import__("mdsd_cli.bounds", fromlist=["x"]).check_problem_size(_Q4, 2, sampler="iid", solver="dual-lp",
                                                                           max_lp_variables="1e6"),
     "max_lp_variables must be an integer"),
    (lambda: __import__("mdsd_cli").optimal_acceptance(_P4, _Q4, 2, renormalize="no"),
     "renormalize must be True or False, got 'no'"),
    (lambda: __import__("mdsd_cli").check_pair(_P4, _Q4, renormalize="false"), "renormalize must be True or False"),
])
def test_library_arguments_that_were_cut_ignored_or_crashed(call, fragment):
    """Found by review: ``samples=2.7`` ran 2 samples and ``"100"`` ran at all, ``max_tuples=nan`` lifted the limit,
    ``size=2.5`` drew 2 tuples, a scalar ``drafts`` raised IndexError, a row of two 1e308 renormalised to zeros
    (its sum overflowed), a size limit's message printed a 6,000-digit count (ValueError from Python's
    integer printing), and the LPs and otm at n = 20,000 built a multiset table of 20,001 x 20,000 ids (the count
    of multisets passed the limit; their ids did not), ``max_lp_variables=nan`` lifted the LP limit, and
    ``renormalize="no"`` read as True: each is a one-line InputError or SizeLimitError now."""
    with pytest.raises(MdsdError, match=fragment) as info:
        call()
    assert "\n" not in str(info.value)


def test_monte_carlo_at_the_largest_number_of_drafts_fits_in_memory():
    """Found by review: Monte Carlo drew 65,536 tuples a chunk whatever n, 52 GB of ids at n = 100,000 (MemoryError);
    a chunk now holds at most 2^24 ids. Two tokens drafted 100,000 times are both drafted: acceptance 1."""
    from mdsd_cli import acceptance_rate

    assert acceptance_rate("rrs", [0.5, 0.5], [0.5, 0.5], 100_000, method="monte-carlo", samples=8, rng=0) == (1.0, 0.0)


def test_verifier_classes_take_what_prepare_verifier_takes():
    """Lists and float32 rows are converted and normalised as ``check_pair`` does, ``renormalize=True`` rescales
    a row, and ``unchecked`` (mdsd's own loops, on validated rows) sets up the same verifier: the same exact
    output law for every registered verifier."""
    from mdsd_cli.samplers import get_sampler
    from mdsd_cli.verifiers import get_verifier, prepare_verifier, verifier_names

    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    for name in verifier_names():
        cls = get_verifier(name)
        n = cls.fixed_n or 2
        drafts = get_sampler(cls.default_sampler).sample(q, n, np.random.default_rng(1), 1)[0]
        want = prepare_verifier(name, p, q, n).output_law(drafts)
        for got in (cls(list(p), list(q), n), cls.unchecked(p, q, n), cls(3 * p, q, n, renormalize=True)):
            np.testing.assert_allclose(got.output_law(drafts), want, rtol=0, atol=1e-12, err_msg=name)
        low = cls(p.astype(np.float32), q.astype(np.float32), n)  # float32 rows: within their rounding, normalised
        assert abs(low.p.sum() - 1.0) <= 1e-12 and abs(low.q.sum() - 1.0) <= 1e-12


# --- a damaged sweep directory for mdsd plot ------------------------------------------------------------------

@pytest.mark.parametrize("damage,fragment", [
    (lambda d: (d / "summary.csv").write_text('dataset,"unclosed\n'), "not a readable sweep table"),
    (lambda d: (d / "summary.csv").write_text(""), "not a readable sweep table"),
    (lambda d: (d / "summary.csv").write_text("a,b\n1,2\n"), "it is not a sweep summary"),
    (lambda d: (d / "summary.csv").unlink(), "has no summary.csv"),
    (lambda d: (d / "manifest.json").write_text('{"config": 5}'), "names no figure"),
])
def test_plot_on_a_damaged_sweep_directory(tmp_path, damage, fragment):
    out = tmp_path / "s"
    assert run("sweep", "--data", "dirichlet", "-s", "iid", "-n", "2", "--out", out, "-q").exit_code == 0
    damage(out)
    assert_clean_error(run("plot", out), 1, fragment)
