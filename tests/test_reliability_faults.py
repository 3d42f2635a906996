"""Reliability, part 3: faults during long runs.

A sweep or a dump killed with SIGKILL (a real subprocess) keeps every finished
cell or shard, never leaves a half-written table, and a rerun completes it to
the same bytes as an uninterrupted run. A solver that does not prove its
optimum is an error, not a value. A full disk leaves the previous results
intact. The catalogue is docs/reliability.md.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from mdsd_cli import optimal_acceptance, solve_optimal_acceptance, zipf_pairs
from mdsd_cli.cli.app import app
from mdsd_cli.errors import OutputError, SolverError
from mdsd_cli.io import is_temporary, save_pairs
from mdsd_cli.sweep import SweepConfig, read_cell, run_sweep

from .conftest import SUBPROCESS_TIMEOUT, sigint_default

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
TABLES = ("pairs.csv", "summary.csv", "pairs.parquet", "summary.parquet")
SWEEP_TOML = """name = "killed"
seed = 3
temperatures = [0.5, 1.0]
drafts = [2, 3]
samplers = ["iid", "wor", "greedy"]
verifiers = ["rrs", "rrsw"]
method = "monte-carlo"
samples = 100000
[[datasets]]
name = "d"
synthetic = "dirichlet"
pairs = 4
vocab = 12
"""


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def mdsd_process(*args):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "mdsd_cli", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)


def kill_when(process, ready, *, timeout=float(SUBPROCESS_TIMEOUT)):
    """SIGKILL ``process`` as soon as ``ready()`` holds (or let it finish first)."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.002)
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()


def same_bytes(a: Path, b: Path, names=TABLES):
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


# --- SIGKILL ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    config = root / "killed.toml"
    config.write_text(SWEEP_TOML)
    run_sweep(SweepConfig.from_toml(config), root / "reference")
    return config, root / "reference"


def check_nothing_half_written(out: Path, config):
    keys = {c.key for c in SweepConfig.from_toml(config).cells()}
    for path in (out / "cells").glob("*"):
        if is_temporary(path):  # a kill mid-write leaves only a hidden temporary file, ignored on resume
            continue
        assert path.stem in keys
        frame, meta = read_cell(out, path.stem)  # every cell file is whole
        assert meta["status"] == "ok" and len(frame) == 4
    for name, rows in (("summary.csv", len(keys)), ("summary.parquet", len(keys))):
        if (out / name).exists():  # a table, if there is one, is complete
            table = pd.read_csv(out / name) if name.endswith(".csv") else pq.read_table(out / name).to_pandas()
            assert len(table) == rows


def test_sweep_killed_again_and_again_resumes_to_the_same_bytes(tmp_path, sweep_reference):
    config, reference = sweep_reference
    out = tmp_path / "s"
    cells = lambda: sum(1 for p in (out / "cells").glob("*.parquet") if not is_temporary(p))  # noqa: E731
    kept = []
    for ready in (lambda: cells() >= 2, lambda: cells() >= 9, lambda: (out / "summary.csv").exists()
                  or cells() >= 20):
        kill_when(mdsd_process("sweep", config, "--out", out, "-q"), ready)
        check_nothing_half_written(out, config)
        kept.append(cells())
    assert kept == sorted(kept) and kept[0] >= 2  # a rerun never loses a finished cell
    finished = run("sweep", config, "--out", out, "-q")
    assert finished.exit_code == 0, finished.stderr
    same_bytes(reference, out)


def test_sweep_killed_at_random_times(tmp_path, sweep_reference):
    config, reference = sweep_reference
    rng = np.random.default_rng(2024)
    for i, delay in enumerate(rng.uniform(1.0, 3.5, 2)):
        out = tmp_path / f"r{i}"
        process = mdsd_process("sweep", config, "--out", out, "-q")
        start = time.monotonic()
        kill_when(process, lambda: time.monotonic() - start > delay)  # noqa: B023
        if out.exists():
            check_nothing_half_written(out, config)
        summary = run_sweep(SweepConfig.from_toml(config), out)
        assert summary.computed + summary.reused == 20
        same_bytes(reference, out)


PROMPTS = [f"{a} {b}" for a in ("the draft model", "a lossless verifier", "speculative decoding", "the target")
           for b in ("proposes tokens", "keeps the output", "verifies them")]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .hf_models import build_model

    root = tmp_path_factory.mktemp("models")
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    return {"target": build_model(root / "target", seed=0, layers=2, hidden=64),
            "draft": build_model(root / "draft", seed=1, layers=1, hidden=32), "prompts": prompts}


def dump_args(models, out):
    return ["dump", "--target", models["target"], "--draft", models["draft"], "--prompts", models["prompts"],
            "--out", out, "--max-new-tokens", "6", "--batch-size", "1", "--rows-per-shard", "1",
            "--store-dtype", "float32", "--device", "cpu", "-q"]


def test_dump_killed_mid_run_resumes_to_the_same_dump(tmp_path, tiny_models):
    from mdsd_cli.datasets import load_data
    from mdsd_cli.datasets.dumps import completed_prompts, shard_paths

    reference = tmp_path / "reference"
    assert run(*dump_args(tiny_models, reference)).exit_code == 0
    out = tmp_path / "killed"
    for at_least in (2, 6):
        kill_when(mdsd_process(*dump_args(tiny_models, out)), lambda: len(shard_paths(out)) >= at_least)  # noqa: B023
        done = completed_prompts(out)  # every shard left behind is whole and readable
        assert len(done) >= at_least and json.loads((out / "manifest.json").read_text())["format"]
    resumed = run(*dump_args(tiny_models, out))
    assert resumed.exit_code == 0, resumed.stderr
    a, b = load_data(reference), load_data(out)
    for key in ("prompt_id", "position", "context_length", "token"):
        np.testing.assert_array_equal(a.labels[key], b.labels[key])
    np.testing.assert_array_equal(a.target_logits, b.target_logits)
    np.testing.assert_array_equal(a.draft_logits, b.draft_logits)


def test_a_dump_killed_before_its_manifest_landed_can_be_rerun(tmp_path, tiny_models):
    out = tmp_path / "early"
    out.mkdir()
    (out / ".manifest.json.x1y2.tmp").write_text('{"form')  # what a kill during the first write leaves
    result = run(*dump_args(tiny_models, out))
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "manifest.json").read_text())["format"] == "mdsd-dump/1"


# --- solvers that do not prove their optimum ----------------------------------------------------------

@pytest.fixture
def inaccurate_lp(monkeypatch):
    import cvxpy as cp

    def solve(self, *args, **kwargs):
        self._status = cp.OPTIMAL_INACCURATE  # a value came back, but without a proof
        return 0.5

    monkeypatch.setattr(cp.Problem, "solve", solve)


@pytest.fixture
def failing_lp(monkeypatch):
    import cvxpy as cp

    def solve(self, *args, **kwargs):
        raise cp.error.SolverError("Solver 'HIGHS' failed. Try another solver.")

    monkeypatch.setattr(cp.Problem, "solve", solve)


P, Q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])


@pytest.mark.parametrize("solver", ["primal-lp", "dual-lp"])
def test_an_inaccurate_lp_is_an_error_not_a_value(solver, inaccurate_lp):
    with pytest.raises(SolverError, match="optimal_inaccurate.*not optimal"):
        solve_optimal_acceptance(P, Q, 2, solver=solver)
    result = run("bound", "--synthetic", "dirichlet", "--vocab", "4", "--solver", solver)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: ") and "optimal_inaccurate" in result.stderr
    verify = run("verify", "--synthetic", "dirichlet", "--vocab", "4", "--verifier", "otm")
    assert verify.exit_code == 1 and "not optimal" in verify.stderr and verify.stdout == ""


def test_a_failing_lp_is_an_error_not_a_value(failing_lp):
    with pytest.raises(SolverError, match="failed.*lp_solver='clarabel'"):
        optimal_acceptance(P, Q, 2, solver="primal-lp")
    result = run("bound", "--synthetic", "dirichlet", "--vocab", "4", "--solver", "dual-lp")
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1 and "failed" in result.stderr


def test_a_sweep_stops_on_an_unproven_lp_and_resumes_once_it_solves(tmp_path, monkeypatch):
    config = SweepConfig.from_dict({"name": "lp", "samplers": ["iid"], "solvers": ["chain", "primal-lp"],
                                    "drafts": [1, 2], "datasets": [{"name": "d", "synthetic": "dirichlet",
                                                                    "pairs": 2, "vocab": 4}]})
    reference = tmp_path / "reference"
    run_sweep(config, reference)
    import cvxpy as cp

    real_solve = cp.Problem.solve
    with monkeypatch.context() as patch:
        def solve(self, *args, **kwargs):
            self._status = cp.OPTIMAL_INACCURATE
            return 0.5

        patch.setattr(cp.Problem, "solve", solve)
        with pytest.raises(SolverError, match="not optimal"):
            run_sweep(config, tmp_path / "s")
    assert cp.Problem.solve is real_solve
    assert not (tmp_path / "s" / "summary.csv").exists()  # no table with a made-up value
    resumed = run_sweep(config, tmp_path / "s")
    assert resumed.reused >= 1
    same_bytes(reference, tmp_path / "s")


# --- a full disk --------------------------------------------------------------------------------------------

def disk_full_after(nbytes):
    """A writer that puts ``nbytes`` into the file, then fails as a full disk does."""
    def write(data, where, *args, **kwargs):  # DataFrame.to_csv(self, path), pq.write_table(table, path)
        if isinstance(where, (str, Path)):
            Path(where).write_bytes(b"x" * nbytes)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return write


def test_disk_full_while_writing_a_table_keeps_the_previous_one(tmp_path, monkeypatch):
    for suffix in ("csv", "parquet"):
        out = tmp_path / f"alpha.{suffix}"
        first = run("bound", "--synthetic", "zipf", "--vocab", "30", "--out", out, "-q")
        assert first.exit_code == 0
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        with monkeypatch.context() as patch:
            patch.setattr(pd.DataFrame, "to_csv", disk_full_after(10))
            patch.setattr(pq, "write_table", disk_full_after(10))
            result = run("bound", "--synthetic", "zipf", "--vocab", "30", "--seed", "9", "--out", out)
        assert result.exit_code == 1 and result.stderr.strip() == f"Error: cannot write {out}: No space left on device"
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing replaced, nothing left over


def test_disk_full_when_the_csv_manifest_is_written_keeps_both_old_files(tmp_path, monkeypatch):
    out = tmp_path / "alpha.csv"
    assert run("bound", "--synthetic", "zipf", "--vocab", "30", "--out", out, "-q").exit_code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    import mdsd_cli.io as mio

    def half_a_manifest(path, text):
        Path(path).write_text(text[:5])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(mio, "_write_text", half_a_manifest)
        result = run("bound", "--synthetic", "zipf", "--vocab", "30", "--seed", "4", "--out", out)
    assert result.exit_code == 1 and "No space left on device" in result.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_disk_full_during_a_sweep_keeps_the_previous_results(tmp_path, sweep_reference, monkeypatch):
    config, reference = sweep_reference
    out = tmp_path / "s"
    run_sweep(SweepConfig.from_toml(config), out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    grown = SweepConfig.from_toml(config)
    grown.drafts = [2, 3, 4]  # new cells to compute
    for broken in ("cell", "tables"):
        with monkeypatch.context() as patch:
            if broken == "cell":
                patch.setattr(pq, "write_table", disk_full_after(100))
            else:
                patch.setattr(pd.DataFrame, "to_csv", disk_full_after(100))
            with pytest.raises(OutputError, match="No space left on device"):
                run_sweep(grown, out)
        after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        assert {k: v for k, v in after.items() if k in before} == before  # old results untouched
        assert all(k.parts[0] == "cells" for k in set(after) - set(before))  # only whole new cells added
    same_bytes(reference, out)


def test_disk_full_while_dumping_keeps_the_finished_shards(tmp_path, tiny_models, monkeypatch):
    from mdsd_cli.datasets.dumps import shard_paths

    out = tmp_path / "dump"
    calls = {"n": 0}
    real = pq.write_table

    def fill_up(table, where, **kwargs):
        calls["n"] += 1
        if calls["n"] > 3:
            return disk_full_after(50)(table, where)
        return real(table, where, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(pq, "write_table", fill_up)
        result = run(*dump_args(tiny_models, out))
    assert result.exit_code == 1 and "No space left on device" in result.stderr and "Traceback" not in result.stderr
    assert len(shard_paths(out)) == 3 and not [p for p in out.iterdir() if is_temporary(p)]
    assert run(*dump_args(tiny_models, out)).exit_code == 0  # and it resumes once there is room


def test_a_real_full_filesystem(tmp_path):
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        small = save_pairs(zipf_pairs(1, 100, seed=0), mount / "pairs.npz")
        previous = small.read_bytes()
        result = run("generate", "--synthetic", "zipf", "--pairs", "8", "--vocab", "20000", "--out", small)
        assert result.exit_code == 1 and "No space left on device" in result.stderr
        assert small.read_bytes() == previous and sorted(p.name for p in mount.iterdir()) == ["pairs.npz"]
        table = mount / "alpha.csv"
        assert run("bound", "--data", small, "--out", table, "-q").exit_code == 0
        kept = table.read_bytes()
        fh = open(mount / "filler", "wb", buffering=0)  # fill what is left
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
        finally:
            fh.close()
        result = run("bound", "--synthetic", "zipf", "--vocab", "3000", "--pairs", "50", "--out", table)
        assert result.exit_code == 1 and "No space left on device" in result.stderr
        assert table.read_bytes() == kept
    finally:
        subprocess.run(["umount", str(mount)], check=False)


KILL_AFTER_RENAMES = """
import os, sys
real, done, kill_after = os.replace, [0], int(sys.argv[1])
def replace(src, dst):
    if done[0] == kill_after:
        os._exit(9)  # a hard kill between two renames of one output set
    done[0] += 1
    real(src, dst)
os.replace = replace
sys.argv = ["mdsd", *sys.argv[2:]]
from mdsd_cli.cli.app import main
main()
"""
OUTPUT_SET = ("s.csv", "st.parquet", "pp.csv", "t.jsonl")


def test_a_kill_between_renames_leaves_a_set_a_reader_can_tell_is_mixed(tmp_path):
    """Issue 26, item 7: decode's outputs are written as one set (data files first, the CSV manifests last,
    the run's id in every manifest, the hashes of the files that cannot carry it); a kill after k of the
    set's 6 renames (4 files, then 2 manifests) leaves a mixture that every file's manifest exposes."""
    from mdsd_cli.io import check_output_set

    def decode(seed, kill_after):
        args = ["decode", "--models", "synthetic", "--vocab", "40", "--tree", "2x2", "--max-new-tokens", "6",
                "--prompts", "2", "--seed", seed, "--no-timing", "-o", "s.csv", "--steps", "st.parquet",
                "--per-prompt", "pp.csv", "--text", "t.jsonl"]
        return subprocess.run([sys.executable, "-c", KILL_AFTER_RENAMES, str(kill_after), *map(str, args)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)

    assert decode(0, -1).returncode == 0
    assert all(check_output_set(tmp_path / f) == [] for f in ("s.csv", "st.parquet", "pp.csv"))
    for seed, kill_after in [(1, 1), (2, 3), (3, 4), (4, 5)]:
        before = {f: (tmp_path / f).read_bytes() for f in OUTPUT_SET}
        assert decode(seed, kill_after).returncode == 9
        changed = [f for f in OUTPUT_SET if (tmp_path / f).read_bytes() != before[f]]
        assert len(changed) == min(kill_after, len(OUTPUT_SET))  # the data files land first
        for f in ("s.csv", "st.parquet", "pp.csv"):  # from any file of the set, the mixture shows
            problems = check_output_set(tmp_path / f)
            assert problems, (kill_after, f)
        known = {*OUTPUT_SET, "s.csv.manifest.json", "pp.csv.manifest.json"}
        assert all(p.name in known or is_temporary(p) for p in tmp_path.iterdir())  # the kill's leftovers: hidden
    assert decode(5, -1).returncode == 0  # a whole rerun makes a whole set again
    assert all(check_output_set(tmp_path / f) == [] for f in ("s.csv", "st.parquet", "pp.csv"))


@pytest.mark.parametrize("command", [
    ["decode", "--models", "synthetic", "--vocab", "300", "--tree", "4x3", "--prompts", "64",
     "--max-new-tokens", "400", "-o", "out.csv"],
    ["design", "--synthetic", "dirichlet", "--pairs", "400", "--vocab", "4000", "-n", "4", "--family", "top-k",
     "--grid", "top-k=2:4000:1", "-o", "out.csv"],
])
def test_ctrl_c_is_one_line_exit_130_and_no_file(tmp_path, command):
    """Issue 26, item 6: SIGINT in the middle of decode or design used to exit 130 without a word; now one line
    says that nothing was written (and nothing was), no traceback."""
    env = {**os.environ, "MDSD_PROGRESS_INTERVAL": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "mdsd_cli", *command, "--progress", "log"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=sigint_default)
    first = proc.stderr.readline()  # the first progress line: the run is under way
    assert first and proc.poll() is None, first
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
    assert proc.returncode == 130, err
    assert "Interrupted: no output file was written or changed" in err and "Traceback" not in err, err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_ctrl_c_inside_a_ctypes_callback_is_deferred_to_the_next_progress_update():
    """A SIGINT that lands in llvmlite's ctypes callback (numba loading a cached kernel) used to be printed as
    "Exception ignored" and lost, so the run went on and exited 0; now it is raised at the next progress
    update (in the main thread), and one anywhere else is raised at once."""
    import sys as _sys

    from mdsd_cli.cli import interrupt
    from mdsd_cli.cli.console import Progress

    space: dict = {}
    exec(compile("import sys\ndef grab():\n    return sys._getframe()\n", "/x/site-packages/llvmlite/binding/fake.py",
                 "exec"), space)
    callback_frame = space["grab"]()
    interrupt._on_sigint(signal.SIGINT, callback_frame)  # deferred: no exception here
    progress = Progress(3)
    with pytest.raises(KeyboardInterrupt):
        progress.advance()
    progress.advance()  # raised once only
    with pytest.raises(KeyboardInterrupt):
        interrupt._on_sigint(signal.SIGINT, _sys._getframe())
    progress.advance()
    assert progress.done == 3
