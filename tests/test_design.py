"""`mdsd design` and design_search: identity rows equal the plain bound, batched grids equal one-by-one
solves, the honest split, and one-line errors for bad specs and grids."""

import io

import numpy as np
import pytest
from typer.testing import CliRunner

from mdsd_cli import optimal_acceptance, zipf_pairs
from mdsd_cli.cli.app import app
from mdsd_cli.design import alpha_star_grid, design_search, parse_grid
from mdsd_cli.errors import InputError

runner = CliRunner()


@pytest.fixture(scope="module")
def pairs():
    return zipf_pairs(6, 300, seed=3)


@pytest.fixture(scope="module")
def table(pairs):
    grid = {"temperature": (0.7, 1.0, 1.3), "top-k": (10, 300), "top-p": (0.9, 1.0)}
    return design_search(pairs, [2, 3], grid=grid, samplers=["iid", "wor"], rng=5)


def test_identity_parameters_give_the_plain_bound(pairs, table):
    P, Q = pairs.target, pairs.draft
    for n in (2, 3):
        plain = {s: optimal_acceptance(P, Q, n, sampler=s).mean() for s in ("iid", "wor", "greedy")}
        rows = table[table.n == n]
        for _, row in rows.iterrows():
            base = row.sampler.split(":")[0]
            identity = (row.family == "plain"
                        or (row.family == "temperature" and row.parameter == 1.0)
                        or (row.family == "top-k" and row.parameter >= 300)
                        or (row.family == "top-p" and row.parameter == 1.0)
                        or (row.family == "hybrid" and row.parameter == 0))
            if identity:
                assert row.alpha_star == pytest.approx(plain[base if base != "hybrid" else "wor"], abs=1e-12), row
        assert rows[(rows.family == "hybrid") & (rows.parameter == n - 1)].alpha_star.item() == \
            pytest.approx(plain["greedy"], abs=1e-12)


def test_batched_grid_equals_one_solve_per_spec(pairs):
    P, Q = pairs.target, pairs.draft
    specs = ["iid:temperature=0.6", "iid:temperature=1.4", "iid:top_k=7", "wor:top_p=0.8", "hybrid:m=1",
             "hybrid:m=2", "greedy:temperature=0.9"]
    got = alpha_star_grid(P, Q, 3, specs)
    for spec in specs:
        expected = [optimal_acceptance(P[i], Q[i], 3, sampler=spec) for i in range(P.shape[0])]
        assert got[spec] == pytest.approx(expected, abs=1e-12), spec


def test_honest_split_and_gains(pairs, table):
    N = pairs.num_pairs
    half = (N + 1) // 2
    # the two halves partition the pairs: their weighted means give the overall mean
    both = (table.selection * half + table.heldout * (N - half)) / N
    assert np.allclose(both, table.alpha_star, atol=1e-12)
    assert (table.selection != table.heldout).any()
    for _, group in table[table.family != "plain"].groupby(["n", "family", table.sampler.str.split(":").str[0]]):
        assert group.selected.sum() == 1 and group.best_in_sample.sum() == 1
        assert group[group.selected].selection.item() == group.selection.max()
        assert group[group.best_in_sample].alpha_star.item() == group.alpha_star.max()
    plain = table[table.family == "plain"].set_index(["n", "sampler"])
    for n in (2, 3):
        assert plain.loc[(n, "wor"), "gain_vs_wor"] == 0.0 and plain.loc[(n, "iid"), "gain_vs_iid"] == 0.0
        assert plain.loc[(n, "iid"), "gain_vs_wor"] == pytest.approx(
            plain.loc[(n, "iid"), "alpha_star"] - plain.loc[(n, "wor"), "alpha_star"], abs=1e-12)
    other = design_search(pairs, 2, families=["temperature"], grid={"temperature": (0.7, 1.0)}, rng=6)
    mine = table[(table.n == 2) & (table.family == "temperature") & table.sampler.str.startswith("wor")
                 & table.parameter.isin([0.7, 1.0])]
    assert not np.allclose(other[other.family == "temperature"].selection.to_numpy(), mine.selection.to_numpy())


def test_target_temperatures_re_temper_the_pairs(pairs):
    df = design_search(pairs, 2, families=["hybrid"], temperatures=[0.5, 1.0])
    cold = pairs.at_temperature(0.5)
    wor = df[(df.temperature == 0.5) & (df.sampler == "wor")].alpha_star.item()
    assert wor == pytest.approx(optimal_acceptance(cold.target, cold.draft, 2, sampler="wor").mean(), abs=1e-12)


def test_grid_syntax():
    assert parse_grid("temperature=0.5:1.5:0.25") == ("temperature", (0.5, 0.75, 1.0, 1.25, 1.5))
    assert parse_grid("top_k=4,8") == ("top-k", (4.0, 8.0))
    for bad, message in [("temperature", "is not family=values"), ("beam=1,2", "unknown design family 'beam'"),
                         ("temperature=1:0.5:0.1", "step > 0 and stop >= start"),
                         ("top-p=a,b", "comma-separated"),
                         # its own message, not the syntax error's (issue 26: it was hidden)
                         ("temperature=0.001:1000:0.0001", "has 9,999,991 values \\(at most 10,000\\)")]:
        with pytest.raises(InputError, match=message):
            parse_grid(bad)


@pytest.mark.parametrize("args, message", [
    (["--grid", "temperature=-1,1"], "temperature=-1 in sampler 'wor:temperature=-1' is out of range; "
                                     "temperature must be > 0"),
    (["-n", "4", "--grid", "hybrid=9"], "hybrid:m=9 needs m in 0..3 for n = 4"),
    (["--family", "beam"], "unknown design family 'beam'"),
    (["-s", "wor:colour=2"], "unknown key 'colour'"),
    (["--grid", "top-k=0"], "top_k must be an integer >= 1"),
    (["--pairs", "1"], "the honest split needs at least 2 pairs"),
    (["-s", "iid:temperature=0.8"], "already sets temperature, which the temperature family varies"),
    (["--family", "hybrid", "--grid", "temperature=0.5,1"], "a grid is given for temperature, which is not searched"),
])
def test_cli_bad_input_is_one_line(tmp_path, args, message):
    out = tmp_path / "design.csv"
    result = runner.invoke(app, ["design", "--synthetic", "zipf", "--vocab", "50", "--pairs", "4", *args,
                                 "-o", str(out)])
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.stderr
    assert message in " ".join(lines[0].split()), result.stderr
    assert not out.exists()


def test_cli_writes_rows_and_best(tmp_path):
    out = tmp_path / "design.csv"
    result = runner.invoke(app, ["design", "--synthetic", "zipf", "--vocab", "100", "--pairs", "6", "-n", "2",
                                 "-t", "0.7", "--grid", "temperature=0.8:1.2:0.2", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    import pandas as pd

    df = pd.read_csv(out)
    assert len(df) == 3 + 3 + 8 + 5 + 2  # plain, temperature, top-k, top-p, hybrid m = 0, 1
    assert set(df.temperature) == {0.7}
    best = runner.invoke(app, ["design", "--synthetic", "zipf", "--vocab", "100", "--pairs", "6", "-n", "2",
                               "-t", "0.7", "--grid", "temperature=0.8:1.2:0.2", "--best", "-f", "csv", "-q"])
    assert best.exit_code == 0
    rows = best.stdout.strip().splitlines()
    assert len(rows) == 1 + 3 + 4 and all(",True," in r for r in rows[4:])


def test_a_base_sampler_with_parameters_keeps_them(pairs):
    """``-s wor:top_k=50`` searches temperatures within the top 50 (found by review: the spec
    was glued into ``wor:top_k=50:temperature=...`` and every row failed)."""
    df = design_search(pairs, 2, families=["temperature", "hybrid"], grid={"temperature": (0.8,)},
                       samplers=["wor:top_k=50"], rng=0)
    specs = set(df.sampler)
    assert "wor:top_k=50,temperature=0.8" in specs and "hybrid:m=1,top_k=50" not in specs
    row = df[df.sampler == "wor:top_k=50,temperature=0.8"].iloc[0]
    want = np.mean([optimal_acceptance(p, q, 2, sampler="wor:top_k=50,temperature=0.8")
                    for p, q in zip(pairs.target, pairs.draft)])
    assert row.alpha_star == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("line, message", [
    ('drafts = ["a"]', "number of drafts must be an integer, got 'a'"),
    ("drafts = [2.7]", "number of drafts must be an integer, got 2.7"),
    ('temperatures = ["x"]', "temperature must be a number, got 'x'"),
    ("split_seed = -1", "the split seed must be an integer >= 0"),
])
def test_cli_config_values_are_checked_not_converted(tmp_path, line, message):
    config = tmp_path / "design.toml"
    config.write_text(f'{line}\nfamilies = ["hybrid"]\n[[datasets]]\nname = "z"\nsynthetic = "zipf"\n'
                      'pairs = 4\nvocab = 8\n')
    out = tmp_path / "design.csv"
    result = runner.invoke(app, ["design", "--config", str(config), "-q", "-o", str(out)])
    assert result.exit_code == 1
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not out.exists()


def test_library_refuses_an_empty_grid_and_a_negative_seed(pairs):
    with pytest.raises(InputError, match="the grid of temperature is empty"):
        design_search(pairs, 2, families=["temperature"], grid={"temperature": []})
    with pytest.raises(InputError, match="split seed must be an integer >= 0"):
        design_search(pairs, 2, families=["hybrid"], rng=-1)


def test_library_reads_a_bare_name_as_one_and_refuses_empty_lists(pairs):
    """A bare string is one family or sampler (it was iterated by character: "unknown design family 'h'"), a bare
    number one grid value (it raised TypeError), and an empty list of n, samplers or temperatures is refused (it gave
    an empty table)."""
    one = design_search(pairs, 2, families="hybrid", samplers="wor")
    listed = design_search(pairs, 2, families=["hybrid"], samplers=["wor"])
    assert one["sampler"].tolist() == listed["sampler"].tolist()
    np.testing.assert_allclose(one["alpha_star"], listed["alpha_star"], rtol=0, atol=0)
    bare = design_search(pairs, 2, families="temperature", grid={"temperature": 0.5})  # a number: one grid value
    assert bare["sampler"].tolist() == design_search(pairs, 2, families=["temperature"],
                                                     grid={"temperature": [0.5]})["sampler"].tolist()
    for kw, what in [(dict(n=[]), "n .the numbers of drafts. is empty"), (dict(n=2, samplers=[]), "samplers is empty"),
                     (dict(n=2, temperatures=[]), "temperatures is empty")]:
        with pytest.raises(InputError, match=what):
            design_search(pairs, families=["hybrid"], **kw)


def test_cli_says_when_n_exceeds_what_the_draft_can_draft():
    result = runner.invoke(app, ["design", "--synthetic", "dirichlet", "--vocab", "5", "--pairs", "4", "-n", "8",
                                 "--family", "temperature", "-q"])
    assert result.exit_code == 0, result.output
    assert "n = 8 exceeds the 5 tokens of positive draft mass in all 4 pairs: wor drafts all of them" in \
        " ".join(result.stderr.split())
    import pandas as pd  # with 4 pairs the t interval of a mean alpha* near 1 once reached 1.12

    result = runner.invoke(app, ["design", "--synthetic", "dirichlet", "--vocab", "5", "--pairs", "4", "-n", "8",
                                 "--family", "temperature", "-q", "-f", "csv"])
    df = pd.read_csv(io.StringIO(result.stdout))
    assert (df.ci95_low >= 0).all() and (df.ci95_high <= 1).all() and (df.ci95_high > df.alpha_star).any()
