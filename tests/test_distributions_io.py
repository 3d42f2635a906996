"""Validation, temperature, synthetic families, and the pair/table files."""

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mdsd_cli import (
    DataFileError,
    InputError,
    OutputError,
    apply_temperature,
    check_pair,
    dirichlet_pairs,
    softmax,
    zipf_pairs,
)
from mdsd_cli.io import atomic_path, build_manifest, load_pairs, save_pairs, write_table

# --- validation -------------------------------------------------------------------------

@pytest.mark.parametrize("p,q,message", [
    ([0.5, np.nan], [0.5, 0.5], "non-finite"),
    ([0.5, np.inf], [0.5, 0.5], "non-finite"),
    ([1.1, -0.1], [0.5, 0.5], "negative"),
    ([0.5, 0.4], [0.5, 0.5], "sums to 0.9"),
    ([0.0, 0.0], [0.5, 0.5], "sums to 0"),
    ([0.5, 0.5], [0.5, 0.25, 0.25], "same number of pairs and the same vocabulary"),
    ([[0.5, 0.5]], [0.5, 0.5], "both as"),
    (["a", "b"], [0.5, 0.5], "dtype"),
    (np.array([0.5, 0.5], dtype=object), [0.5, 0.5], "dtype"),
    (np.zeros((1, 2, 2)), np.zeros((1, 2, 2)), "dimensions"),
    ([], [], "at least one"),
])
def test_invalid_pairs_are_refused_with_a_reason(p, q, message):
    with pytest.raises(InputError, match=message):
        check_pair(p, q)


def test_renormalize_rescales_and_names_the_flag_otherwise():
    with pytest.raises(InputError, match="renormalize=True") as error:
        check_pair([0.5, 0.4], [0.5, 0.5])
    assert "--renormalize" not in str(error.value)  # the library names its keyword, the CLI its flag
    assert "--renormalize" in error.value.cli_message() and "=True" not in error.value.cli_message()
    P, Q, batched = check_pair([0.5, 0.4], [0.5, 0.5], renormalize=True)
    np.testing.assert_allclose(P[0], [5 / 9, 4 / 9])
    assert not batched
    # within 1e-6 is accepted as is, then normalised exactly
    P, _, _ = check_pair([0.5, 0.5000005], [0.5, 0.5])
    assert P.sum() == pytest.approx(1.0, abs=1e-15)


# --- temperature ------------------------------------------------------------------------

def test_softmax_temperature_and_the_greedy_limit():
    logits = np.array([1.0, 3.0, 3.0, -np.inf])
    np.testing.assert_allclose(softmax(logits), np.exp(logits) / np.exp(logits).sum())
    assert softmax(logits, 0.0).tolist() == [0.0, 1.0, 0.0, 0.0]  # ties -> lowest index
    sharp = softmax(logits, 0.01)
    assert sharp[1] == pytest.approx(0.5) and sharp[3] == 0.0
    with pytest.raises(InputError, match="temperature"):
        softmax(logits, -1.0)
    with pytest.raises(InputError, match="NaN"):
        softmax([np.nan, 1.0])
    with pytest.raises(InputError, match="all -inf"):
        softmax([-np.inf, -np.inf])


def test_tempering_probabilities_equals_tempering_their_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (3, 50))
    for T in (0.3, 1.0, 2.5):
        np.testing.assert_allclose(apply_temperature(softmax(logits), T), softmax(logits, T), atol=1e-14)


# --- synthetic families ------------------------------------------------------------------

def test_synthetic_pairs_are_valid_seeded_and_prefix_stable():
    a = zipf_pairs(5, 100, seed=3)
    b = zipf_pairs(8, 100, seed=3)
    np.testing.assert_array_equal(a.target, b.target[:5])  # pair i depends on (seed, i) only
    assert not np.array_equal(a.target, zipf_pairs(5, 100, seed=4).target)
    for batch in (a, dirichlet_pairs(4, 30, concentration=0.5, seed=1)):
        check_pair(batch.target, batch.draft)
    # Zipf shape: sorted target logits are -s log(rank)
    srt = np.sort(a.target_logits[0])[::-1]
    np.testing.assert_allclose(srt, -np.log(np.arange(1, 101)), atol=1e-12)
    cold = a.at_temperature(0.5)
    np.testing.assert_allclose(cold.target, softmax(a.target_logits, 0.5))


def test_synthetic_parameters_are_checked():
    with pytest.raises(InputError, match="concentration"):
        dirichlet_pairs(2, 10, concentration=0.0)
    with pytest.raises(InputError, match="noise"):
        zipf_pairs(2, 10, noise=-1.0)
    with pytest.raises(InputError, match="pairs"):
        zipf_pairs(0, 10)
    # types too: 2.5 pairs, a string seed or concentration, a NaN noise, a bool size
    for call, what in [(lambda: dirichlet_pairs(2.5, 10), "number of pairs must be an integer"),
                       (lambda: dirichlet_pairs(2, 10, seed="1"), "seed must be an integer"),
                       (lambda: dirichlet_pairs(2, 10, concentration="1"), "concentration must be > 0"),
                       (lambda: zipf_pairs(2, 10, noise=float("nan")), "noise scale must be >= 0"),
                       (lambda: zipf_pairs(2, True), "vocabulary size must be an integer")]:
        with pytest.raises(InputError, match=what):
            call()
    # numpy integers are integers: the same pairs as plain ints
    np.testing.assert_array_equal(dirichlet_pairs(np.int64(2), 5, seed=np.int64(3)).target,
                                  dirichlet_pairs(2, 5, seed=3).target)


def test_apply_temperature_refuses_rows_that_are_not_probabilities():
    """At T = 1 too (a no-op on good rows): NaN, infinities, negative entries and empty rows are refused."""
    for rows, what in [([0.5, np.nan, 0.5], "non-finite"), ([0.5, np.inf], "non-finite"),
                       ([0.5, -0.1, 0.6], "negative entry"), ([[0.5, 0.5], [0.0, 0.0]], "row 1 sums to 0")]:
        for T in (1.0, 0.5):
            with pytest.raises(InputError, match=what):
                apply_temperature(rows, T)
    np.testing.assert_array_equal(apply_temperature([0.2, 0.8], 1.0), [0.2, 0.8])


# --- pair files ---------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
@pytest.mark.parametrize("family", ["zipf", "dirichlet"])
def test_pairs_round_trip(tmp_path, suffix, family):
    batch = zipf_pairs(3, 64, seed=1) if family == "zipf" else dirichlet_pairs(3, 64, seed=1)
    path = save_pairs(batch, tmp_path / f"pairs{suffix}")
    back = load_pairs(path)
    np.testing.assert_allclose(back.target, batch.target, atol=1e-15)
    np.testing.assert_allclose(back.draft, batch.draft, atol=1e-15)
    assert back.metadata["family"] == family
    hot = load_pairs(path, temperature=2.0)
    np.testing.assert_allclose(hot.target, batch.at_temperature(2.0).target, atol=1e-14)


def test_npz_with_probabilities_and_float16(tmp_path):
    p = np.array([[0.25, 0.25, 0.5]], dtype=np.float16)
    np.savez(tmp_path / "a.npz", target=p, draft=p)
    back = load_pairs(tmp_path / "a.npz")
    assert back.target.dtype == np.float64


def test_parquet_list_columns_written_by_hand(tmp_path):
    table = pa.table({"prompt_id": [7, 8], "target": [[0.5, 0.5], [0.9, 0.1]],
                      "draft": [[0.4, 0.6], [0.1, 0.9]]})
    pq.write_table(table, tmp_path / "d.parquet")
    back = load_pairs(tmp_path / "d.parquet")
    assert back.target.shape == (2, 2)
    assert back.labels["prompt_id"].tolist() == [7, 8]


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "missing.npz", "not found"),
    (lambda d: (d / "x.txt").write_text("hi") and d / "x.txt", "unsupported"),
    (lambda d: (d / "bad.npz").write_bytes(b"not a zip") and d / "bad.npz", "not a readable .npz"),
    (lambda d: (d / "bad.parquet").write_bytes(b"PAR1garbage") and d / "bad.parquet", "not a readable Parquet"),
    (lambda d: np.savez(d / "other.npz", x=np.ones(3)) or d / "other.npz", "expected 'target' and 'draft'"),
    (lambda d: np.savez(d / "obj.npz", target=np.array([{}], dtype=object),
                        draft=np.ones(1)) or d / "obj.npz", "object arrays"),
    (lambda d: pq.write_table(pa.table({"target": [[0.5, 0.5], [1.0]], "draft": [[0.5, 0.5], [1.0]]}),
                              d / "ragged.parquet") or d / "ragged.parquet", "same vocabulary"),
    (lambda d: pq.write_table(pa.table({"target": ["a"], "draft": ["b"]}), d / "str.parquet")
     or d / "str.parquet", "list of floats"),
])
def test_malformed_files_give_clear_errors(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(DataFileError, match=message):
        load_pairs(path)


def test_truncated_npz(tmp_path):
    save_pairs(zipf_pairs(2, 500, seed=0), tmp_path / "full.npz")
    raw = (tmp_path / "full.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataFileError):
        load_pairs(tmp_path / "cut.npz")


# --- atomic output ------------------------------------------------------------------------

def test_failed_write_leaves_existing_file_untouched(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("precious\n")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_output_path_checks(tmp_path):
    df = pd.DataFrame({"a": [1]})
    with pytest.raises(OutputError, match="does not exist"):
        write_table(df, tmp_path / "nope" / "x.csv")
    ro = tmp_path / "ro.csv"
    ro.write_text("keep\n")
    os.chmod(ro, 0o444)
    if not os.access(ro, os.W_OK):  # root can write anyway
        with pytest.raises(OutputError, match="read-only"):
            write_table(df, ro)
        assert ro.read_text() == "keep\n"


def test_tables_carry_a_manifest(tmp_path):
    df = pd.DataFrame({"x": [1.0, 2.0]})
    manifest = build_manifest("test", {"k": 1})
    write_table(df, tmp_path / "t.parquet", manifest=manifest)
    meta = json.loads(pq.read_schema(tmp_path / "t.parquet").metadata[b"mdsd"])
    assert meta["config"] == {"k": 1} and "numpy" in meta["versions"]
    write_table(df, tmp_path / "t.csv", manifest=manifest)
    assert json.loads((tmp_path / "t.csv.manifest.json").read_text())["command"] == "test"
    assert pd.read_csv(tmp_path / "t.csv")["x"].tolist() == [1.0, 2.0]
