"""The command-line interface: output, conventions, and every bad input as a clean error."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mdsd_cli import optimal_acceptance, zipf_pairs
from mdsd_cli.cli.app import app
from mdsd_cli.io import save_pairs

from .conftest import SUBPROCESS_TIMEOUT

runner = CliRunner()
COMMANDS = ["bound", "verify", "check-lossless", "audit", "generate", "decode"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_clean_error(result, code, *fragments):
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture
def pair_file(tmp_path):
    return save_pairs(zipf_pairs(3, 40, seed=2), tmp_path / "pairs.npz")


# --- help -------------------------------------------------------------------------------

def test_every_command_has_help_and_is_listed():
    top = run("--help")
    assert top.exit_code == 0
    for command in COMMANDS:
        assert command in top.stdout
        sub = run(command, "--help")
        assert sub.exit_code == 0 and "Usage" in sub.stdout and len(sub.stdout) > 200


def test_verifier_help_lists_every_registered_verifier():
    from mdsd_cli.verifiers import VERIFIERS

    text = " ".join(run("verify", "--help").stdout.split())  # rich wraps the help text
    for name in VERIFIERS:
        assert name in text


def test_commands_are_documented_in_the_readme():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for command in COMMANDS:
        assert f"mdsd {command}" in readme


# --- results ------------------------------------------------------------------------------

def test_bound_csv_matches_the_library(pair_file):
    result = run("bound", "--data", pair_file, "-s", "iid", "-s", "wor", "-n", "1", "-n", "3", "-q")
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert list(df.columns) == ["pair", "temperature", "sampler", "n", "solver", "alpha_star", "set_size",
                                "seconds"]
    assert len(df) == 3 * 2 * 2
    batch = zipf_pairs(3, 40, seed=2)
    for row in df.itertuples():
        expected = optimal_acceptance(batch.target[row.pair], batch.draft[row.pair], row.n, sampler=row.sampler)
        assert row.alpha_star == pytest.approx(expected, abs=1e-11)
        assert 0 <= row.set_size <= 40 and row.seconds >= 0


def test_bound_all_solvers_agree_and_all_skips_hub_for_other_n(tmp_path):
    result = run("bound", "--synthetic", "dirichlet", "--pairs", "2", "--vocab", "5", "-s", "all",
                 "-n", "2", "-n", "3", "--solver", "chain", "--solver", "primal-lp", "--solver", "dual-lp",
                 "--solver", "subsets")
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert set(df[df.sampler == "hub"].n) == {2}
    spread = df.groupby(["pair", "sampler", "n"]).alpha_star.agg(lambda x: x.max() - x.min())
    assert (spread < 1e-6).all()


def test_temperatures_and_synthetic_equal_generated_file(tmp_path):
    out = tmp_path / "gen.parquet"
    gen = run("generate", "--synthetic", "zipf", "--pairs", "2", "--vocab", "30", "--seed", "5", "--out", out)
    assert gen.exit_code == 0 and out.exists() and "wrote 2 pairs" in gen.stderr
    a = run("bound", "--data", out, "-t", "0.5", "-t", "2", "-q")
    b = run("bound", "--synthetic", "zipf", "--pairs", "2", "--vocab", "30", "--seed", "5", "-t", "0.5", "-t", "2",
            "-q")
    da, db = pd.read_csv(io.StringIO(a.stdout)), pd.read_csv(io.StringIO(b.stdout))
    np.testing.assert_allclose(da.alpha_star, db.alpha_star, atol=1e-12)
    assert sorted(set(da.temperature)) == [0.5, 2.0]


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_out_files_and_manifest(tmp_path, pair_file, suffix):
    out = tmp_path / f"res.{suffix}"
    result = run("bound", "--data", pair_file, "--out", out)
    assert result.exit_code == 0 and result.stdout == ""
    df = pd.read_csv(out) if suffix == "csv" else pd.read_parquet(out)
    assert len(df) == 3
    if suffix == "csv":
        manifest = json.loads(Path(f"{out}.manifest.json").read_text())
        assert manifest["config"]["data"] == str(pair_file)


def test_json_and_table_formats(pair_file):
    js = run("bound", "--data", pair_file, "-f", "json")
    records = [json.loads(line) for line in js.stdout.splitlines()]
    assert len(records) == 3 and {"alpha_star", "sampler"} <= set(records[0])
    table = run("bound", "--data", pair_file, "-f", "table")
    assert "alpha_star" in table.stdout.splitlines()[0]


# --- bad input ------------------------------------------------------------------------------

def _npz(tmp_path, name, target, draft):
    path = tmp_path / name
    np.savez(path, target=np.asarray(target), draft=np.asarray(draft))
    return path


@pytest.mark.parametrize("target,draft,fragment", [
    ([[0.5, np.nan]], [[0.5, 0.5]], "non-finite"),
    ([[1.2, -0.2]], [[0.5, 0.5]], "negative"),
    ([[0.5, 0.4]], [[0.5, 0.5]], "--renormalize"),
    ([[0.5, 0.5]], [[0.2, 0.3, 0.5]], "same vocabulary size"),
    ([[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5]], "same number of pairs"),
])
def test_bad_distributions(tmp_path, target, draft, fragment):
    path = _npz(tmp_path, "bad.npz", target, draft)
    assert_clean_error(run("bound", "--data", path), 1, "Error:", fragment)


def test_renormalize_flag_fixes_unnormalised_rows(tmp_path):
    path = _npz(tmp_path, "off.npz", [[0.5, 0.4]], [[0.5, 0.5]])
    result = run("bound", "--data", path, "--renormalize", "-n", "1")
    assert result.exit_code == 0
    # p becomes [5/9, 4/9]; n = 1 gives sum(min(p, q))
    assert pd.read_csv(io.StringIO(result.stdout)).alpha_star[0] == pytest.approx(0.5 + 4 / 9, abs=1e-11)


@pytest.mark.parametrize("args,code,fragment", [
    (["-n", "0"], 2, "--drafts"),
    (["-s", "beam"], 2, "--sampler"),
    (["--solver", "magic"], 2, "--solver"),
    (["--lp-solver", "gurobi"], 2, "--lp-solver"),
    (["-t", "-1"], 2, "--temperature"),
    (["-s", "hub", "-n", "3"], 1, "n = 2 only"),
    (["--solver", "primal-lp", "-n", "4"], 1, "--solver chain"),
    (["--solver", "subsets"], 1, "--solver chain"),
    (["-f", "parquet"], 1, "--out"),
])
def test_bad_options(args, code, fragment):
    result = run("bound", "--synthetic", "zipf", "--vocab", "400", *args)
    assert_clean_error(result, code, "Error", fragment)


def test_bad_files_and_paths(tmp_path, pair_file):
    assert_clean_error(run("bound", "--data", tmp_path / "missing.npz"), 1, "not found")
    np.savez(tmp_path / "other.npz", logits=np.ones(3))
    assert_clean_error(run("bound", "--data", tmp_path / "other.npz"), 1, "expected 'target' and 'draft'")
    assert_clean_error(run("bound"), 1, "no pairs given: pass --data")
    assert_clean_error(run("bound", "--data", pair_file, "--synthetic", "zipf"), 1, "not both")
    assert_clean_error(run("bound", "--data", pair_file, "--out", tmp_path / "no" / "x.csv"), 1, "does not exist")
    assert_clean_error(run("generate"), 1, "--out")


def test_failure_leaves_existing_output_untouched_and_writes_nothing_partial(tmp_path):
    out = tmp_path / "keep.csv"
    out.write_text("old results\n")
    # refused after the output path was checked: the LP is too large
    result = run("bound", "--synthetic", "zipf", "--vocab", "400", "-n", "4", "--solver", "dual-lp", "--out", out)
    assert_clean_error(result, 1, "LP variables")
    assert out.read_text() == "old results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.csv"]


# --- real processes --------------------------------------------------------------------------

def _mdsd():
    return [sys.executable, "-m", "mdsd_cli"]


def test_subprocess_pipes_clean_csv_and_errors_have_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    ok = subprocess.run([*_mdsd(), "bound", "--synthetic", "zipf", "--vocab", "100", "--pairs", "2",
                         "-s", "wor", "-n", "4"], capture_output=True, text=True, env=env, timeout=SUBPROCESS_TIMEOUT)
    assert ok.returncode == 0, ok.stderr
    df = pd.read_csv(io.StringIO(ok.stdout))
    assert len(df) == 2 and df.alpha_star.between(0, 1).all()
    bad = subprocess.run([*_mdsd(), "bound", "--data", str(tmp_path / "nope.npz")], capture_output=True,
                         text=True, env=env, timeout=SUBPROCESS_TIMEOUT)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [f"Error: data file {tmp_path / 'nope.npz'} not found"]


def test_help_does_not_import_heavy_libraries():
    code = ("import sys; from mdsd_cli.cli.app import app; "
            "print(','.join(m for m in ('cvxpy', 'numba', 'pandas', 'pyarrow', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert out.returncode == 0 and out.stdout.strip() == ""


# --- verifiers ------------------------------------------------------------------------------

def test_verify_rows_match_the_library(pair_file):
    from mdsd_cli import acceptance_rate

    result = run("verify", "--data", pair_file, "--verifier", "rrs", "--verifier", "kseq", "--verifier", "greedy",
                 "-n", "2", "-n", "3", "-q")
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert {"acceptance", "stderr", "alpha_star", "gap", "method", "sampler"} <= set(df.columns)
    assert len(df) == 3 * 3 * 2 and (df.method == "exact").all()
    batch = zipf_pairs(3, 40, seed=2)
    for row in df.itertuples():
        expected = acceptance_rate(row.verifier, batch.target[row.pair], batch.draft[row.pair], row.n)
        assert row.acceptance == pytest.approx(expected, abs=1e-11)
        assert row.gap == pytest.approx(row.alpha_star - row.acceptance, abs=1e-11)
        assert row.gap >= -1e-12
    greedy = df[df.verifier == "greedy"]
    assert (greedy.gap.abs() < 1e-12).all()


def test_verify_all_monte_carlo_is_seeded_and_skips_otm_when_too_large():
    args = ["verify", "--synthetic", "zipf", "--pairs", "1", "--vocab", "2000", "-n", "2", "--method", "auto",
            "--samples", "4000", "--seed", "3"]
    a, b = run(*args), run(*args)
    assert a.exit_code == 0
    df = pd.read_csv(io.StringIO(a.stdout))
    same = pd.read_csv(io.StringIO(b.stdout))
    pd.testing.assert_frame_equal(df.drop(columns="seconds"), same.drop(columns="seconds"))
    assert "otm" not in set(df.verifier) and "skipping otm" in a.stderr
    assert {"optimal-iid", "optimal-wor"} <= set(df.verifier)  # both run at V = 2000, n = 2
    opt = df[df.verifier == "optimal-iid"].iloc[0]
    assert abs(opt.gap) < 1e-9
    rrsw = df[df.verifier == "rrsw"].iloc[0]
    assert rrsw.method == "monte-carlo" and rrsw.stderr > 0
    assert abs(rrsw.gap) < rrsw.alpha_star


@pytest.mark.parametrize("args,code,fragment", [
    (["--verifier", "spec"], 2, "--verifier"),
    (["--verifier", "hub", "-n", "3"], 1, "n = 2 only"),
    (["--verifier", "otm", "--vocab", "5000"], 1, "small vocabularies"),
    (["--verifier", "optimal-wor", "-n", "17", "--vocab", "3000"], 1, "at most 16 drafts"),
    (["--verifier", "rrsw", "--method", "exact", "--vocab", "5000"], 1, "monte-carlo"),
    (["--verifier", "rrs", "--draft-law", "wor"], 1, "lossless for iid"),
    (["--method", "guess"], 2, "--method"),
])
def test_verify_bad_options(args, code, fragment):
    result = run("verify", "--synthetic", "zipf", "--pairs", "1", *args)
    assert_clean_error(result, code, "Error", fragment)


def test_check_lossless_passes_for_every_verifier():
    from mdsd_cli import verifier_names

    result = run("check-lossless", "--verifier", "all", "--cases", "3", "--trials", "20000", "-q")
    assert result.exit_code == 0, result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    assert set(df.verifier) == set(verifier_names())
    assert df.passed.all() and (df.exact_error.dropna() < 1e-6).all()


def test_check_lossless_catches_a_wrong_verifier(monkeypatch):
    from mdsd_cli.verifiers import VERIFIERS

    from .test_verifiers import RRSWithoutResidualUpdate

    monkeypatch.setitem(VERIFIERS, "broken-rrs", RRSWithoutResidualUpdate)
    result = run("check-lossless", "--verifier", "broken-rrs", "--verifier", "rrs", "-n", "3", "--cases", "4")
    assert result.exit_code == 1
    df = pd.read_csv(io.StringIO(result.stdout))
    assert not df[df.verifier == "broken-rrs"].passed.any()
    assert df[df.verifier == "rrs"].passed.all()
    assert "FAILED" in result.stderr and "broken-rrs" in result.stderr


def test_a_table_named_txt_is_csv_and_says_so(tmp_path):
    """Issue 26, item 10: ``-o x.txt`` is written as CSV with a warning naming the file (it was silent);
    ``--format csv`` says so on purpose, and ``.csv`` needs no word."""
    result = run("bound", "--synthetic", "zipf", "--pairs", "2", "--vocab", "30", "-n", "2", "-o", tmp_path / "x.txt")
    assert result.exit_code == 0
    assert "x.txt is written as CSV" in result.stderr and ".parquet for Parquet" in result.stderr
    assert list(pd.read_csv(tmp_path / "x.txt").pair) == [0, 1]
    for args in (["-o", tmp_path / "y.txt", "--format", "csv"], ["-o", tmp_path / "z.csv"]):
        result = run("bound", "--synthetic", "zipf", "--pairs", "2", "--vocab", "30", "-n", "2", *args)
        assert result.exit_code == 0 and "written as CSV" not in result.stderr


def test_out_of_memory_is_one_line_not_a_traceback(monkeypatch):
    """An allocation the memory checks could not foresee (issue 26, item 9) ends in one line, exit code 1."""
    import mdsd_cli.cli.data as data

    def no_memory(*args, **kw):
        raise MemoryError

    monkeypatch.setattr(data, "zipf_pairs", no_memory)
    result = run("bound", "--synthetic", "zipf", "--pairs", "2", "--vocab", "30", "-n", "2")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: out of memory; use fewer pairs") and result.stderr.count("\n") == 1
