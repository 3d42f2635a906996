"""Built-in datasets: the offline real-text n-gram pair, names behind --data, mdsd datasets."""

import io
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mdsd_cli import optimal_acceptance
from mdsd_cli.cli.app import app
from mdsd_cli.datasets import BUILTIN, describe, load_data, ngram
from mdsd_cli.errors import DataFileError

runner = CliRunner()


@pytest.fixture(scope="module")
def built():
    return ngram.build()


def test_ngram_models_are_distributions_and_the_target_is_better(built):
    tl, dl, labels, meta = built
    V = meta["vocab_size"]
    assert 1000 < V < 10000 and tl.shape == dl.shape == (512, V)
    np.testing.assert_allclose(np.exp(tl).sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.exp(dl).sum(axis=1), 1.0, atol=1e-12)
    assert np.isfinite(tl).all() and np.isfinite(dl).all()  # Kneser-Ney with a uniform floor: all > 0
    assert meta["target_perplexity"] < meta["draft_perplexity"]
    # the recorded next tokens are the held-out text: the target puts more mass on them
    rows = np.arange(tl.shape[0])
    assert tl[rows, labels["token"]].mean() > dl[rows, labels["token"]].mean()


def test_kneser_ney_matches_a_hand_computed_bigram():
    # corpus "a b a b a c": check P(b | a) by the interpolated KN formula by hand
    model = ngram.KneserNey([[1, 2, 1, 2, 1, 3]], order=2, vocab_size=4, boundary=0)
    D2, D1 = model.discount[2], model.discount[1]
    # bigram counts after a: b x2, c x1; unigram continuation counts: a 2 (after <s>, b), b 1, c 1
    lower = np.full(4, 1 / 4) * (D1 * 3 / 4)
    lower[[1, 2, 3]] += np.maximum(np.array([2, 1, 1]) - D1, 0) / 4
    expected_b = (2 - D2) / 3 + D2 * 2 / 3 * lower[2]
    p = model.distribution([1])
    assert p[2] == pytest.approx(expected_b, abs=1e-15)
    assert p.sum() == pytest.approx(1.0, abs=1e-15)


def test_ngram_dataset_is_identical_across_runs_and_cached(built, tmp_path, monkeypatch):
    monkeypatch.setenv("MDSD_CACHE_DIR", str(tmp_path))
    again = ngram.build()
    np.testing.assert_array_equal(built[0], again[0])
    np.testing.assert_array_equal(built[1], again[1])
    first = load_data("pydoc-ngram")
    assert list(tmp_path.glob("pydoc-ngram-*.npz"))
    second = load_data("pydoc-ngram")  # from the cache
    np.testing.assert_array_equal(first.target, second.target)
    np.testing.assert_allclose(first.target_logits, built[0])
    hot = load_data("pydoc-ngram", temperature=2.0)
    np.testing.assert_allclose(hot.target, first.at_temperature(2.0).target)
    # a corrupted cache entry is rebuilt, not fatal
    next(tmp_path.glob("pydoc-ngram-*.npz")).write_bytes(b"garbage")
    np.testing.assert_array_equal(load_data("pydoc-ngram").target, first.target)


def test_real_text_bounds_behave(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSD_CACHE_DIR", str(tmp_path))
    pairs = load_data("pydoc-ngram")
    a2 = optimal_acceptance(pairs.target, pairs.draft, 2)
    a4 = optimal_acceptance(pairs.target, pairs.draft, 4)
    assert (a4 >= a2 - 1e-12).all() and 0.3 < a2.mean() < 1.0


def test_builtin_names_and_errors(tmp_path):
    assert set(BUILTIN) == {"pydoc-ngram", "pystdlib", "zipf", "dirichlet"}
    assert load_data("dirichlet").num_pairs == 64
    with pytest.raises(DataFileError, match="built-in dataset"):
        load_data("pydoc-ngarm")
    with pytest.raises(DataFileError, match="not found"):
        load_data(tmp_path / "nothing-here")
    with pytest.raises(DataFileError, match="without a dump manifest"):
        load_data(tmp_path)
    info = describe("dirichlet")
    assert info["kind"] == "built-in" and info["vocab"] == 1000


def test_datasets_command(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSD_CACHE_DIR", str(tmp_path))
    listing = runner.invoke(app, ["datasets", "-f", "csv"])
    assert listing.exit_code == 0
    assert list(pd.read_csv(io.StringIO(listing.stdout)).name) == ["pydoc-ngram", "pystdlib", "zipf", "dirichlet"]
    info = json.loads(runner.invoke(app, ["datasets", "pydoc-ngram"]).stdout)
    assert info["pairs"] == 512 and info["stored"] == "logits" and "token" in info["labels"]
    bound = runner.invoke(app, ["bound", "--data", "pydoc-ngram", "-n", "2", "-q"])
    assert bound.exit_code == 0
    df = pd.read_csv(io.StringIO(bound.stdout))
    assert len(df) == 512 and {"document", "position", "token"} <= set(df.columns)
