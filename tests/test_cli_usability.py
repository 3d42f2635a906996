"""The rough edges of the command line: progress outside a terminal, --pairs with --data, skips and
ignored options said out loud, n above the support, --summary, and the small ones (short flags,
"did you mean", messages in the CLI's own terms, make help, figure labels and ticks)."""

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mdsd_cli import zipf_pairs
from mdsd_cli.cli.app import app
from mdsd_cli.errors import InputError
from mdsd_cli.io import save_pairs
from mdsd_cli.samplers import get_sampler
from mdsd_cli.summary import mean_interval
from mdsd_cli.verifiers import get_verifier

from .conftest import SUBPROCESS_TIMEOUT

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
LOG_LINE = re.compile(r"^verify: \d[\d,]*/\d[\d,]* \(\d+%\), [\d.e+-]+/s, elapsed \d+:\d\d, eta (\d+:\d\d|\?)$")


def run(*args, **kw):
    return runner.invoke(app, [str(a) for a in args], **kw)


@pytest.fixture
def pair_file(tmp_path):
    return save_pairs(zipf_pairs(12, 40, seed=2), tmp_path / "pairs.npz")


# --- 10. --progress auto|bar|log|none -------------------------------------------------------------------

SLOW_VERIFY = ["verify", "--synthetic", "zipf", "--vocab", "3000", "--pairs", "4", "-v", "rrsw", "-n", "3",
               "--samples", "100000"]


def test_progress_log_prints_count_rate_and_eta_on_stderr_and_keeps_stdout_clean(monkeypatch):
    monkeypatch.setenv("MDSD_PROGRESS_INTERVAL", "0.05")
    result = run(*SLOW_VERIFY, "--progress", "log")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("verify: ")]
    assert lines and all(LOG_LINE.match(line) for line in lines), result.stderr
    assert lines[-1].startswith("verify: 4/4 (100%)")  # a last line when the run printed any
    assert len(pd.read_csv(io.StringIO(result.stdout))) == 4  # data only on stdout


@pytest.mark.parametrize("flags", [["--progress", "none"], ["-q"], []])
def test_no_progress_with_none_quiet_or_auto_on_a_short_run(monkeypatch, flags):
    if flags:
        monkeypatch.setenv("MDSD_PROGRESS_INTERVAL", "0.05")
    result = run(*SLOW_VERIFY[:-2], "--samples", "20000", *flags)  # auto outside a terminal: log, every 5 s
    assert result.exit_code == 0 and "verify: " not in result.stderr


def test_every_long_running_command_takes_progress():
    for command in ("bound", "verify", "check-lossless", "audit", "sweep", "dump", "bench"):
        text = run(command, "--help").stdout
        assert "--progress" in text and "auto|bar|log|none" in text, command
    bad = run("bound", "--synthetic", "zipf", "--progress", "lgo")
    assert bad.exit_code == 2 and "did you mean 'log'?" in bad.stderr


# --- 11. --pairs and --pair-range with --data -----------------------------------------------------------------

def test_pairs_takes_the_first_n_of_data_and_pair_range_a_shard_with_its_indices(pair_file):
    full = pd.read_csv(io.StringIO(run("bound", "--data", pair_file, "-q", "--no-timing").stdout))
    assert len(full) == 12
    first = pd.read_csv(io.StringIO(run("bound", "--data", pair_file, "--pairs", "4", "-q", "--no-timing").stdout))
    pd.testing.assert_frame_equal(first, full.iloc[:4].reset_index(drop=True))
    shard = pd.read_csv(io.StringIO(run("bound", "--data", pair_file, "--pair-range", "5:9", "-q",
                                        "--no-timing").stdout))
    assert shard.pair.tolist() == [5, 6, 7, 8]
    pd.testing.assert_frame_equal(shard, full.iloc[5:9].reset_index(drop=True))
    mc = ["verify", "--synthetic", "zipf", "--vocab", "40", "--seed", "2", "-v", "rrsw", "--method", "monte-carlo",
          "--samples", "2000", "--no-timing", "-q"]
    whole = pd.read_csv(io.StringIO(run(*mc, "--pairs", "4").stdout))
    part = pd.read_csv(io.StringIO(run(*mc, "--pair-range", "2:4").stdout))
    assert part.pair.tolist() == [2, 3]  # the same pairs 2 and 3 as in a run of 4, with the same Monte Carlo draws
    pd.testing.assert_frame_equal(part, whole.iloc[2:4].reset_index(drop=True))
    both = run("bound", "--data", pair_file, "--pairs", "2", "--pair-range", "0:2")
    assert both.exit_code == 1 and "not both" in both.stderr


def test_options_that_do_nothing_are_named(pair_file):
    result = run("bound", "--data", pair_file, "--vocab", "100", "--seed", "3", "-q")
    assert result.exit_code == 0
    assert "Warning: --vocab, --seed do nothing with --data" in result.stderr
    more = run("bound", "--data", pair_file, "--pairs", "50", "-q")
    assert "holds 12 pairs; using all 12" in more.stderr and len(pd.read_csv(io.StringIO(more.stdout))) == 12
    cases = run("check-lossless", "-v", "rrs", "-n", "2", "--cases", "1", "--vocab", "50", "--trials", "200", "-q")
    assert "--vocab does nothing without --data or --synthetic" in cases.stderr


# --- 12. every skip says why -----------------------------------------------------------------------------------------

def test_hub_left_out_at_other_n_is_said(tmp_path):
    verify = run("verify", "--synthetic", "dirichlet", "--vocab", "6", "--pairs", "1", "-n", "3", "-q")
    assert verify.exit_code == 0
    assert "skipping hub at n=3: hub is defined for n = 2 only" in verify.stderr
    assert "hub" not in pd.read_csv(io.StringIO(verify.stdout)).verifier.tolist()
    bound = run("bound", "--synthetic", "dirichlet", "--vocab", "6", "--pairs", "1", "-s", "all", "-n", "2", "-n",
                "3", "-q")
    assert "skipping sampler hub at n=3" in bound.stderr
    sweep = run("sweep", "--data", "dirichlet", "-s", "hub", "-s", "iid", "-n", "2", "-n", "4", "--out",
                tmp_path / "s", "-q")
    assert sweep.exit_code == 0 and "skipping sampler hub at n=4" in sweep.stderr


# --- 13. n above the number of tokens that can be drafted -------------------------------------------------------------

def test_n_above_the_support_is_warned_with_the_effective_number_of_drafts():
    result = run("bound", "--synthetic", "dirichlet", "--vocab", "6", "--pairs", "2", "-n", "10", "-s", "iid",
                 "-s", "wor", "-q")
    assert result.exit_code == 0
    assert ("n = 10 exceeds the 6 tokens of positive draft mass in all 2 pairs: wor drafts all of them "
            "(effective n = 6); iid drafts repeat tokens (at most 6 distinct)") in result.stderr
    df = pd.read_csv(io.StringIO(result.stdout))
    wor = df[df.sampler == "wor"]
    ten = run("bound", "--synthetic", "dirichlet", "--vocab", "6", "--pairs", "2", "-n", "6", "-s", "wor", "-q")
    np.testing.assert_allclose(wor.alpha_star, pd.read_csv(io.StringIO(ten.stdout)).alpha_star)  # n = 6 in effect
    fine = run("verify", "--synthetic", "dirichlet", "--vocab", "6", "--pairs", "2", "-n", "4", "-v", "rrsw", "-q")
    assert "exceeds" not in fine.stderr


# --- 14. --summary -------------------------------------------------------------------------------------------------------

def test_summary_gives_mean_std_and_95_interval_per_group_as_a_table(pair_file, tmp_path):
    rows = pd.read_csv(io.StringIO(run("verify", "--data", pair_file, "-v", "rrs", "-v", "kseq", "-n", "2", "-n",
                                       "3", "-q").stdout))
    table = run("verify", "--data", pair_file, "-v", "rrs", "-v", "kseq", "-n", "2", "-n", "3", "-q", "--summary")
    assert table.exit_code == 0 and table.stdout.split("\n")[0].split()[:6] == [
        "temperature", "verifier", "sampler", "n", "method", "pairs"]  # aligned text by default
    out = tmp_path / "summary.csv"
    assert run("verify", "--data", pair_file, "-v", "rrs", "-v", "kseq", "-n", "2", "-n", "3", "-q", "--summary",
               "--out", out).exit_code == 0
    summary = pd.read_csv(out)
    assert len(summary) == 4 and (summary.pairs == 12).all()
    for row in summary.itertuples():
        values = rows[(rows.verifier == row.verifier) & (rows.n == row.n)].acceptance.to_numpy()
        mean, sd, low, high = mean_interval(values)
        assert (row.mean, row.std, row.ci95_low, row.ci95_high) == pytest.approx((mean, sd, low, high), rel=1e-10)
        assert values.mean() == pytest.approx(row.mean) and low < row.mean < high
    bound = pd.read_csv(io.StringIO(run("bound", "--data", pair_file, "-s", "iid", "-s", "wor", "--summary", "-f",
                                        "csv", "-q").stdout))
    assert bound.columns.tolist()[:4] == ["temperature", "sampler", "n", "solver"] and len(bound) == 2


def test_mean_interval_is_students_t():
    mean, sd, low, high = mean_interval([1.0, 2.0, 3.0])
    assert (mean, sd) == (2.0, 1.0)
    assert high - mean == pytest.approx(4.302652729749464 / np.sqrt(3))  # t_{0.975, 2}
    assert mean_interval([0.5]) == (0.5, 0.0, 0.5, 0.5)


# --- 15. the small ones ----------------------------------------------------------------------------------------------------

def test_verify_has_a_short_flag_for_verifier():
    result = run("verify", "--synthetic", "zipf", "--vocab", "30", "--pairs", "1", "-v", "kseq", "-q")
    assert result.exit_code == 0 and pd.read_csv(io.StringIO(result.stdout)).verifier.tolist() == ["kseq"]


@pytest.mark.parametrize("args,hint", [
    (["bound", "--synthetic", "zipf", "-s", "wro"], "unknown draft sampler 'wro'; choose one of: iid, wor, greedy, hub, topk, hybrid; did you mean 'wor'?"),
    (["bound", "--synthetic", "zipf", "--solver", "chian"], "did you mean 'chain'?"),
    (["verify", "--synthetic", "zipf", "-v", "rrsx"], "did you mean 'rrs'?"),
    (["verify", "--synthetic", "zipf", "--method", "exakt"], "did you mean 'exact'?"),
    (["bound", "--synthetic", "zipf", "-f", "tabel"], "did you mean 'table'?"),
    (["sweep", "--data", "dirichlet", "-v", "kseqq", "--out", "x"], "did you mean 'kseq'?"),
])
def test_mistyped_names_get_did_you_mean_without_library_internals(args, hint):
    result = run(*args)
    assert result.exit_code in (1, 2) and hint in result.stderr, result.stderr
    assert "Value error" not in result.stderr and result.stderr.count("\n") == 1


def test_library_names_get_did_you_mean_too():
    with pytest.raises(InputError, match="did you mean 'wor'"):
        get_sampler("wro")
    with pytest.raises(InputError, match="did you mean 'optimal-iid'"):
        get_verifier("optimal_iid")


def test_cli_messages_name_flags_and_library_messages_keywords(tmp_path):
    path = tmp_path / "off.npz"
    np.savez(path, target=np.array([[0.5, 0.4, 0.05]]), draft=np.array([[0.3, 0.3, 0.4]]))
    result = run("bound", "--data", path)
    assert result.exit_code == 1 and "pass --renormalize to rescale" in result.stderr
    assert "renormalize=True" not in result.stderr
    sized = run("bound", "--synthetic", "zipf", "--vocab", "400", "--solver", "primal-lp", "-n", "4")
    assert "use --solver chain" in sized.stderr and "solver='chain'" not in sized.stderr


def test_make_help_lists_every_target():
    makefile = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^([A-Z]+) :=(.*)$", makefile, re.M))

    def expand(words):
        out = []
        for w in words.split():
            m = re.fullmatch(r"\$\((\w+)\)", w)
            out += expand(variables[m.group(1)]) if m else [w]
        return out

    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1)
    targets = expand(phony)
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert out.returncode == 0
    listed = {line.split()[1] for line in out.stdout.splitlines() if line.strip().startswith("make ")}
    assert set(targets) <= listed, set(targets) - listed


def _svg_axis_labels(path: Path, axis: int) -> list[str]:
    """Tick labels of x (axis 1) or y (axis 2) axes in a matplotlib SVG (its text is kept as comments)."""
    svg = path.read_text()
    labels = []
    for block in svg.split(f'id="matplotlib.axis_{axis}"')[1:]:
        block = block.split('id="matplotlib.axis_')[0]
        labels += re.findall(r"<!-- (.*?) -->", block)
    return labels


def test_num_drafts_figure_has_integer_ticks_and_scaling_labels_verifiers_by_name(tmp_path):
    out = tmp_path / "s"
    assert run("sweep", "--data", "dirichlet", "-v", "rrs", "-v", "kseq", "-s", "iid", "-n", "1", "-n", "2", "-n",
               "4", "--out", out, "-q").exit_code == 0
    assert run("plot", out, "--figure", "num-drafts", "-q").exit_code == 0
    ticks = [t for t in _svg_axis_labels(next(out.glob("num-drafts-*.svg")), 1) if t != "drafts n"]
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks
    assert run("plot", out, "--figure", "scaling", "-q").exit_code == 0
    svg = (out / "scaling.svg").read_text()
    assert "verifier rrs (iid drafts)" in svg and "verifier kseq (iid drafts)" in svg and "chain, iid" in svg
    assert "auto, iid" not in svg


def test_install_advice_names_the_clone_not_a_package_index_name(monkeypatch):
    from mdsd_cli.datasets import hf

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if the extra were not installed
    with pytest.raises(Exception, match=r"pip install -e '\.\[hf\]'"):
        hf._import_hf()
    docs = "".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    assert "pip install 'mdsd[hf]'" not in docs and "pip install -e '.[hf]'" in (ROOT / "docs" / "data.md").read_text()


def test_verify_says_up_front_where_a_long_monte_carlo_run_goes(monkeypatch):
    from mdsd_cli.cli import verify as verify_command

    monkeypatch.setattr(verify_command, "SLOW_MONTE_CARLO", 100_000)
    result = run("verify", "--synthetic", "zipf", "--vocab", "500", "--pairs", "2", "-v", "rrsw", "-v", "rrs", "-n",
                 "3", "--samples", "50000")
    assert result.exit_code == 0
    assert ("rrsw at n=3: no closed form at V=500, so Monte Carlo over 50,000 draft tuples for each of 2 pairs "
            "(100,000 tuples, the slow part") in result.stderr
    assert "rrs at" not in result.stderr  # exact: not part of the note
