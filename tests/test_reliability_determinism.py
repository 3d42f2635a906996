"""Reliability, part 4: determinism.

Every command with a --seed gives byte-identical tables across runs (``bound``
and ``verify`` with --no-timing, which drops their wall-time column), and a
sweep gives byte-identical tables across --jobs values and executors. The
catalogue is docs/reliability.md.
"""

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from mdsd_cli.cli.app import app

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result


def twice(*args):
    return run(*args).stdout, run(*args).stdout


@pytest.mark.parametrize("args", [
    ["bound", "--synthetic", "zipf", "--pairs", "3", "--vocab", "300", "-s", "all", "-n", "2", "-n", "3",
     "-t", "0.5", "-t", "1"],
    ["bound", "--synthetic", "dirichlet", "--pairs", "2", "--vocab", "5", "-s", "wor", "--solver", "chain",
     "--solver", "primal-lp", "--solver", "subsets", "-f", "json"],
    ["verify", "--synthetic", "zipf", "--pairs", "2", "--vocab", "2000", "-n", "3", "--method", "monte-carlo",
     "--samples", "3000"],
    ["verify", "--synthetic", "dirichlet", "--pairs", "2", "--vocab", "6", "-n", "2", "-f", "table"],
])
def test_bound_and_verify_with_a_seed_are_byte_identical(args):
    a, b = twice(*args, "--seed", "7", "--no-timing", "-q")
    assert a == b and len(a.splitlines()) > 2
    assert "seconds" not in a
    with_timing = run(*args, "--seed", "7", "-q").stdout
    assert "seconds" in with_timing  # the column --no-timing drops


def test_the_seed_matters():
    args = ["verify", "--synthetic", "zipf", "--pairs", "1", "--vocab", "2000", "-n", "3", "--verifier", "rrsw",
            "--method", "monte-carlo", "--samples", "2000", "--no-timing", "-q"]
    assert run(*args, "--seed", "1").stdout != run(*args, "--seed", "2").stdout


def test_check_lossless_with_a_seed_is_byte_identical(tmp_path):
    args = ["check-lossless", "--verifier", "rrs", "--verifier", "kseq", "--cases", "2", "--trials", "2000",
            "--seed", "5", "-q"]
    a, b = twice(*args)
    assert a == b and len(a.splitlines()) == 1 + 2 * 2 * 3


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_table_files_are_identical(tmp_path, suffix):
    args = ["bound", "--synthetic", "zipf", "--pairs", "3", "--vocab", "100", "-s", "wor", "--seed", "3",
            "--no-timing", "-q"]
    run(*args, "--out", tmp_path / f"a.{suffix}")
    run(*args, "--out", tmp_path / f"b.{suffix}")
    if suffix == "csv":
        assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    else:  # the data and schema are identical; the embedded manifest records when each file was made, its run's
        # id and the files of its set
        a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
        assert a.equals(b)
        meta_a, meta_b = (json.loads(t.schema.metadata[b"mdsd"]) for t in (a, b))
        for key in ("created", "run_id", "outputs"):
            meta_a.pop(key), meta_b.pop(key)
        assert meta_a == meta_b


@pytest.mark.parametrize("suffix", ["npz", "parquet"])
def test_generated_pair_files_are_identical(tmp_path, suffix):
    for name in "ab":
        run("generate", "--synthetic", "zipf", "--pairs", "3", "--vocab", "50", "--seed", "11",
            "--out", tmp_path / f"{name}.{suffix}", "-q")
    assert (tmp_path / f"a.{suffix}").read_bytes() == (tmp_path / f"b.{suffix}").read_bytes()


SWEEP = """name = "same"
seed = 4
temperatures = [0.5, 1.0]
drafts = [2, 3]
samplers = ["iid", "wor", "greedy"]
verifiers = ["rrs", "rrsw", "kseq"]
method = "monte-carlo"
samples = 3000
[[datasets]]
name = "d"
synthetic = "dirichlet"
pairs = 3
vocab = 9
[[datasets]]
name = "z"
synthetic = "zipf"
pairs = 2
vocab = 500
"""
TABLES = ("pairs.csv", "summary.csv", "pairs.parquet", "summary.parquet")


def test_sweep_tables_are_identical_across_runs_jobs_and_executors(tmp_path):
    from dask.distributed import LocalCluster

    config = tmp_path / "same.toml"
    config.write_text(SWEEP)
    run("sweep", config, "--out", tmp_path / "serial", "-q")
    run("sweep", config, "--out", tmp_path / "again", "-q")
    run("sweep", config, "--out", tmp_path / "jobs", "--jobs", "2", "-q")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        run("sweep", config, "--out", tmp_path / "dask", "--executor", "dask", "--scheduler",
            cluster.scheduler_address, "--timeout", "10", "-q")
    for other in ("again", "jobs", "dask"):
        for name in TABLES:
            assert (tmp_path / "serial" / name).read_bytes() == (tmp_path / other / name).read_bytes(), (other, name)


def test_dumps_with_a_seed_are_byte_identical(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mdsd_cli.datasets.hf import dump

    from .hf_models import build_model

    target = build_model(tmp_path / "target", seed=0, layers=1, hidden=32)
    draft = build_model(tmp_path / "draft", seed=1, layers=1, hidden=32)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the draft model\nspeculative decoding\n")
    for name in "ab":
        dump(target=str(target), draft=str(draft), prompts_path=prompts, out=tmp_path / name, max_new_tokens=5,
             batch_size=2, rows_per_shard=4, seed=9, device="cpu")
    shards = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert shards == sorted(p.name for p in (tmp_path / "b").iterdir()) and len(shards) >= 2
    for name in shards:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
