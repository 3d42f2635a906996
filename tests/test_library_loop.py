"""The library inside a decoding loop: torch tensors of any dtype, tolerances that follow the dtype,
the keywords the messages name, shape in = shape out, and verifiers that say which draft was accepted."""

import doctest
import math
from pathlib import Path

import numpy as np
import pytest

from mdsd_cli import (
    BatchVerification,
    InputError,
    Verification,
    acceptance_rate,
    apply_temperature,
    check_pair,
    draft_set_law,
    draft_tuple_law,
    hit_probability,
    hit_probability_chain,
    optimal_acceptance,
    output_law,
    prepare_verifier,
    sample_drafts,
    softmax,
    solve_optimal_acceptance,
    sum_tolerance,
    verifier_names,
    verify,
    verify_batch,
)

from .conftest import random_pair

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


# --- 1. the sum tolerance follows the dtype and the vocabulary -------------------------------------

def test_a_float32_softmax_row_at_152k_tokens_is_accepted_and_renormalised_in_float64():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(152_064) * 3, dim=-1)
    q = torch.softmax(torch.randn(152_064) * 3, dim=-1)
    off = abs(float(p.double().sum()) - 1.0)
    assert 1e-6 < off < sum_tolerance(2.0**-24, 152_064)  # refused by a fixed 1e-6, within float32 rounding
    P, Q, _ = check_pair(p, q)
    exact = p.double().numpy()
    np.testing.assert_array_equal(P[0], exact / exact.sum())  # float64, renormalised
    drafts = sample_drafts(q, 2, rng=0)
    assert verify("rrs", p, q, drafts, rng=0) in set(range(152_064))


def test_a_float32_pair_file_at_152k_tokens_goes_through_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from mdsd_cli.cli.app import app

    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(2, 152_064) * 3, dim=-1).numpy()  # float32 rows off by ~5e-6
    assert (np.abs(probs.astype(np.float64).sum(axis=1) - 1) > 1e-6).all()
    path = tmp_path / "f32.npz"
    np.savez(path, target=probs[:1], draft=probs[1:])
    result = CliRunner().invoke(app, ["bound", "--data", str(path), "-q"])
    assert result.exit_code == 0, result.stderr
    p64 = probs.astype(np.float64)
    expected = optimal_acceptance(p64[0] / p64[0].sum(), p64[1] / p64[1].sum(), 2)
    assert float(result.stdout.splitlines()[1].split(",")[5]) == pytest.approx(expected, rel=1e-11)


def test_rows_off_by_more_than_their_rounding_are_still_refused():
    V = 152_064
    p = torch.full((V,), 1.0 / V, dtype=torch.float32) * 0.998  # 0.2% missing: not rounding
    with pytest.raises(InputError, match=r"sums to 0\.99799.*float32 rows of V = 152,064.*renormalize=True"):
        check_pair(p, p)
    # float64 keeps 1e-6
    q = np.full(10, 0.1)
    q[0] += 3e-6
    with pytest.raises(InputError, match="tolerance 1e-06"):
        check_pair(q, q)
    # lower precision, larger V: a larger tolerance, never below 1e-6
    tolerances = [sum_tolerance(u, V) for u in (2.0**-53, 2.0**-24, 2.0**-8)]
    assert tolerances[0] == 1e-6 < tolerances[1] < tolerances[2] < 0.005
    assert sum_tolerance(2.0**-24, 1000) < sum_tolerance(2.0**-24, V)


# --- 2. the public functions take the keyword their messages name ------------------------------------

P_OFF, Q_OK = [0.5, 0.4, 0.05], [0.3, 0.3, 0.4]  # p sums to 0.95
CALLS = {
    "verify": lambda **kw: verify("rrs", P_OFF, Q_OK, [0, 1], rng=0, **kw),
    "verify_batch": lambda **kw: verify_batch("rrs", [P_OFF], [Q_OK], [[0, 1]], rng=0, **kw),
    "acceptance_rate": lambda **kw: acceptance_rate("kseq", P_OFF, Q_OK, 2, **kw),
    "output_law": lambda **kw: output_law("rrs", P_OFF, Q_OK, [0, 1], **kw),
    "prepare_verifier": lambda **kw: prepare_verifier("rrs", P_OFF, Q_OK, 2, **kw),
    "optimal_acceptance": lambda **kw: optimal_acceptance(P_OFF, Q_OK, 2, **kw),
    "solve_optimal_acceptance": lambda **kw: solve_optimal_acceptance(P_OFF, Q_OK, 2, **kw),
    "sample_drafts": lambda **kw: sample_drafts(P_OFF, 2, rng=0, **kw),
    "hit_probability": lambda **kw: hit_probability(P_OFF, 2, [0], **kw),
    "hit_probability_chain": lambda **kw: hit_probability_chain(P_OFF, 2, [0, 1, 2], **kw),
    "draft_tuple_law": lambda **kw: draft_tuple_law(P_OFF, 2, **kw),
    "draft_set_law": lambda **kw: draft_set_law(P_OFF, 2, **kw),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_public_function_takes_the_keyword_its_error_names(name):
    with pytest.raises(InputError, match="pass renormalize=True to rescale") as error:
        CALLS[name]()
    assert "--renormalize" not in str(error.value)
    CALLS[name](renormalize=True)  # the advice works


def test_renormalised_results_equal_those_of_the_normalised_input():
    p = np.array(P_OFF) / sum(P_OFF)
    assert acceptance_rate("kseq", P_OFF, Q_OK, 2, renormalize=True) == acceptance_rate("kseq", p, Q_OK, 2)
    np.testing.assert_array_equal(output_law("rrs", P_OFF, Q_OK, [0, 1], renormalize=True),
                                  output_law("rrs", p, Q_OK, [0, 1]))


# --- 3. torch tensors of any float dtype ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_torch_tensors_of_any_float_dtype_give_the_results_of_their_values_in_float64(dtype):
    torch.manual_seed(1)
    logits = torch.randn(2, 300) * 2
    probs = torch.softmax(logits, dim=-1).to(getattr(torch, dtype)).requires_grad_()
    p, q = probs[0], probs[1]  # views of a tensor that requires grad: detached on the way in
    p64, q64 = (x.detach().double().numpy() for x in (p, q))
    p64, q64 = p64 / p64.sum(), q64 / q64.sum()
    assert optimal_acceptance(p, q, 3) == optimal_acceptance(p64, q64, 3)
    assert acceptance_rate("kseq", p, q, 3) == acceptance_rate("kseq", p64, q64, 3)
    drafts = torch.as_tensor(sample_drafts(q, 3, rng=5))
    np.testing.assert_array_equal(drafts.numpy(), sample_drafts(q64, 3, rng=5))
    assert verify("rrs", p, q, drafts, rng=7, return_index=True) == verify("rrs", p64, q64, drafts.numpy(), rng=7,
                                                                           return_index=True)


def test_torch_logits_of_any_dtype_go_through_softmax():
    logits = torch.randn(5, 40)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        got = softmax(logits.to(dtype), 0.7)
        np.testing.assert_allclose(got, softmax(logits.to(dtype).float().numpy(), 0.7), rtol=1e-12)
    with pytest.raises(InputError, match="floating-point"):
        check_pair(torch.ones(3, dtype=torch.complex64), torch.ones(3))


# --- 4. shape in, shape out ---------------------------------------------------------------------------------

def test_softmax_and_apply_temperature_keep_the_shape():
    row = torch.randn(40)
    p = softmax(row)
    assert p.shape == (40,) and softmax(row[None, :].repeat(3, 1)).shape == (3, 40)
    assert apply_temperature(p, 0.5).shape == (40,) and apply_temperature(np.stack([p, p]), 0.5).shape == (2, 40)
    q = softmax(torch.randn(40))
    drafts = sample_drafts(q, 2, rng=0)  # the [V] outputs go straight into the rest of the API
    assert verify("kseq", p, q, drafts, rng=0) in range(40)


# --- 5. which draft was accepted; batches; a prepared verifier in a loop ----------------------------------------

@pytest.mark.parametrize("name", verifier_names())
def test_the_accepted_index_names_a_draft_holding_the_token_or_none_and_its_rate_is_the_acceptance_rate(name):
    rng = np.random.default_rng(3)
    p, q = random_pair(rng, 5, zeros=False)
    n = 2  # hub is defined for n = 2 only
    v = prepare_verifier(name, p, q, n)
    trials = 4000
    drafts = v.draft_sampler.sample(v.q, n, rng, trials)
    batch = v.verify_batch(drafts, rng)
    assert isinstance(batch, BatchVerification) and len(batch) == trials
    hit = batch.indices >= 0
    np.testing.assert_array_equal(drafts[hit, batch.indices[hit]], batch.tokens[hit])  # the token is that draft
    assert not (drafts[~hit] == batch.tokens[~hit, None]).any()  # none of the drafts when None
    first = np.argmax(drafts[hit] == batch.tokens[hit, None], axis=1)
    np.testing.assert_array_equal(batch.indices[hit], first)  # the first draft with that token
    rate = acceptance_rate(name, p, q, n)  # P(Y in X), exact
    assert abs(hit.mean() - rate) <= 5 * math.sqrt(rate * (1 - rate) / trials) + 1e-9
    one = v.verify(drafts[0], rng)
    assert isinstance(one, Verification) and one.accepted == (one.index is not None)


def test_rrs_names_the_draft_it_accepted():
    # p(0) = 0: draft 0 is always rejected, so whenever a draft is accepted it is draft 1 (token 1)
    p, q = [0.0, 0.7, 0.3], [0.5, 0.25, 0.25]
    rng = np.random.default_rng(0)
    seen = {verify("rrs", p, q, [0, 1], rng=rng, return_index=True) for _ in range(300)}
    assert Verification(1, 1) in seen and all(r.index in (1, None) for r in seen)
    assert all(r.token == 2 for r in seen if r.index is None)  # rejected: the residual's only token


def test_a_torch_generator_is_a_random_source_and_anything_else_is_refused_in_one_line():
    """A decoding loop in torch passes its torch.Generator: the same state gives the same tokens, and the
    token frequencies follow the exact output law. A string, a float or a negative seed: InputError."""
    p, q = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64), torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    one = [verify("rrs", p, q, [0, 2], rng=torch.Generator().manual_seed(3)) for _ in range(3)]
    assert len(set(one)) == 1
    g = torch.Generator().manual_seed(4)
    tokens = np.array([verify("rrs", p, q, [0, 2], rng=g) for _ in range(4000)])
    law = output_law("rrs", p, q, [0, 2])
    counts = np.bincount(tokens, minlength=3)
    assert np.all(np.abs(counts / 4000 - law) < 5 * np.sqrt(law * (1 - law) / 4000) + 1e-12), (counts, law)
    drafts = sample_drafts(q, 2, rng=torch.Generator().manual_seed(5))
    assert drafts.shape == (2,)
    assert verify_batch("kseq", p[None], q[None], [[0, 2]], rng=torch.Generator().manual_seed(6)).tokens.shape == (1,)
    for bad in ("seed", 1.5, -3):
        with pytest.raises(InputError, match="rng must be") as info:
            verify("rrs", p, q, [0, 2], rng=bad)
        assert "\n" not in str(info.value)


def test_verify_batch_sets_up_each_row_and_matches_a_loop_over_prepared_verifiers():
    rng = np.random.default_rng(11)
    pairs = [random_pair(rng, 6, zeros=False) for _ in range(40)]
    P = torch.tensor(np.array([p for p, _ in pairs]), dtype=torch.float32)
    Q = torch.tensor(np.array([q for _, q in pairs]), dtype=torch.float32)
    drafts = np.stack([sample_drafts(Q[i], 3, rng=rng) for i in range(40)])
    batch = verify_batch("kseq", P, Q, torch.as_tensor(drafts), rng=5)
    loop = np.random.default_rng(5)
    expected = [prepare_verifier("kseq", P[i], Q[i], 3).verify(drafts[i], loop) for i in range(40)]
    assert [batch[i] for i in range(40)] == expected
    assert batch.accepted.sum() == sum(r.accepted for r in expected) > 0


def test_verify_batch_takes_rows_with_fewer_drafts_padded_with_minus_one():
    P = [[0.2, 0.3, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]]
    Q = [[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]]  # row 0 has only two tokens to draft
    drafts = [[1, 0, -1], [3, 0, 2]]
    batch = verify_batch("rrsw", P, Q, drafts, rng=0)
    assert batch.tokens.shape == batch.indices.shape == (2,)
    with pytest.raises(InputError, match="pad on the right"):
        verify_batch("rrsw", P, Q, [[-1, 1, 0], [3, 0, 2]], rng=0)
    with pytest.raises(InputError, match="one row per pair"):
        verify_batch("rrsw", P, Q, [[1, 0, -1]], rng=0)


@pytest.mark.parametrize("page,examples", [("docs/library.md", 30), ("README.md", 5)])
def test_the_documented_loops_run_and_print_what_they_show(page, examples):
    result = doctest.testfile(str(ROOT / page), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= examples and result.failed == 0
