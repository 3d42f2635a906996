"""experiments/findings.py: the verifier tables show the bound's headroom over rrsw where optimal-wor is refused."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["dataset", "vocab", "temperature", "n", "kind", "name", "sampler", "method", "status", "pairs", "mean",
           "std", "ci95_low", "ci95_high", "alpha_star_mean", "gap_mean", "stderr_mean", "note"]


def _findings():
    spec = importlib.util.spec_from_file_location("findings", ROOT / "experiments" / "findings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(n, kind, name, sampler, mean, star=None, status="ok"):
    ok = status == "ok"
    return {"dataset": "toy", "vocab": 50, "temperature": 1.0, "n": n, "kind": kind, "name": name,
            "sampler": sampler, "method": "auto", "status": status, "pairs": 4 if ok else 0,
            "mean": mean if ok else None, "std": 0.0, "ci95_low": mean, "ci95_high": mean,
            "alpha_star_mean": star if ok else None, "gap_mean": (star - mean) if ok and star else 0.0,
            "stderr_mean": 0.0, "note": "" if ok else "refused"}


def _write(results: Path, name: str, rows: list[dict]) -> None:
    (results / name).mkdir(parents=True)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(results / name / "summary.csv", index=False)


def test_refused_optimal_wor_cells_show_the_bound_and_its_gain_over_rrsw(tmp_path):
    f = _findings()
    verify = [_row(3, "verify", "optimal-iid", "iid", 0.80, 0.80), _row(3, "verify", "kseq", "iid", 0.75, 0.80),
              _row(3, "verify", "rrs", "iid", 0.70, 0.80), _row(3, "verify", "rrsw", "wor", 0.72, 0.85),
              _row(3, "verify", "optimal-wor", "wor", None, status="refused")]
    _write(tmp_path, "verifier-gap", verify)
    text = "\n".join(f.verifier_gap(tmp_path))
    assert "| toy | 1 | 3 | 0.8000 | 0.7500 | 0.7000 | +0.0500 | refused (α\\* 0.8500) | 0.7200 | +0.1300 to α\\* |" in text

    bounds = [_row(n, "bound", s, s, a, a) for n, (i, w) in ((1, (0.5, 0.5)), (2, (0.6, 0.65)))
              for s, a in (("iid", i), ("wor", w), ("greedy", i))]
    runs = [_row(n, "verify", v, "wor" if v == "rrsw" else "iid", m) for n, m in ((1, 0.5), (2, 0.58))
            for v in ("rrs", "rrsw", "kseq")]
    runs += [_row(1, "verify", "optimal-wor", "wor", 0.5, 0.5), _row(2, "verify", "optimal-wor", "wor", None,
                                                                    status="refused")]
    _write(tmp_path, "num-drafts", bounds + runs)
    text = f.num_drafts(tmp_path)
    table = [line for line in text if line.startswith("| toy |")]
    # measured where optimal-wor ran (n = 1), the bound where it was refused (n = 2)
    assert [line.rsplit("|", 2)[-2].strip() for line in table] == ["+0.0000", "+0.0700 (α* wor)"]
    assert [line.split("|")[-3].strip() for line in table] == ["0.5000", "refused"]  # the optimal-wor column
    assert "Where optimal-wor was refused" in "\n".join(text)


def _compare_results():
    spec = importlib.util.spec_from_file_location("compare_results", ROOT / "experiments" / "compare_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerated_tables_are_compared_with_the_committed_ones_timings_left_out():
    compare = _compare_results().compare_tables
    committed = pd.DataFrame({"tree": ["2x4", "4x3"], "block_efficiency": [2.5, float("nan")],
                              "verify_seconds": [0.1, 0.2], "tokens_per_second": [10.0, 20.0]})
    now = committed.copy()
    now["verify_seconds"] = [9.0, 9.0]  # wall times are not results
    now["tokens_per_second"] = [1.0, 1.0]
    assert compare(committed, now, 1e-9) == []
    now.loc[0, "block_efficiency"] = 2.5 * (1 + 1e-13)  # a processor's last digits
    assert compare(committed, now, 1e-9) == []
    now.loc[0, "block_efficiency"] = 2.598  # another random trajectory
    assert compare(committed, now, 1e-9)[0].startswith("block_efficiency: 1 values differ, largest at row 0")
    now.loc[0, "block_efficiency"] = 2.5
    now.loc[1, "block_efficiency"] = 3.0  # NaN on one side only
    assert compare(committed, now, 1e-9) and compare(committed, now, 1e-9)[0].startswith("block_efficiency")
    now.loc[1, "block_efficiency"] = float("nan")
    now.loc[1, "tree"] = "4x4"
    assert compare(committed, now, 1e-9) == ["tree: 1 values differ, first at row 1: '4x3' committed, '4x4' now"]
    assert compare(committed, now.iloc[:1], 1e-9) == ["1 rows, committed 2"]
    assert compare(committed, now.drop(columns="tree"), 1e-9)[0].startswith("columns differ (missing ['tree']")


def test_the_script_lists_the_committed_tables_and_refuses_a_bad_tolerance(monkeypatch, capsys):
    module = _compare_results()
    monkeypatch.chdir(ROOT)
    tables = module.tracked_tables(Path("results"))
    assert "results/tree-decode/expected.csv" in tables and not [t for t in tables if t.endswith("timings.csv")]
    assert module.main(["results", "--tolerance", "-1"]) == 2
    assert "--tolerance must be >= 0" in capsys.readouterr().err
