"""Device (torch) verifiers: the numpy closed forms to 1e-12, lossless over the exact draft law, sampling,
batched rows equal to one-row calls, and refused inputs."""

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from mdsd_cli.decode.laws import tempered
from mdsd_cli.errors import InputError
from mdsd_cli.verifiers import VERIFIERS
from mdsd_cli.verifiers.base import sample_from_laws as numpy_sample_from_laws

from .conftest import SUBPROCESS_TIMEOUT, random_pair

torch = pytest.importorskip("torch")
device = pytest.importorskip("mdsd_cli.verifiers.device")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
#: Draft laws each verifier is checked on (None: its own), transforms of q included.
SAMPLERS = {
    "nss": [None, "wor", "greedy:top_k=3", "hybrid:m=1"],
    "topk": [None, "topk:temperature=2"],
    "rrs": [None, "iid:temperature=0.7"],
    "rrsw": [None, "wor:top_p=0.9"],
    "kseq": [None, "iid:top_k=4"],
    "greedy": [None, "greedy:temperature=1.5"],
    "hub": [None, "hub:top_k=3"],
}
KINDS = ("random", "ties", "onehot-p", "onehot-q", "equal", "zeros", "uniform-q")


def _pair(rng, V, kind):
    p, q = random_pair(rng, V)
    if kind == "ties":
        p, q = rng.integers(1, 3, V).astype(float), rng.integers(0, 3, V).astype(float)
        q[rng.integers(V)] = 2.0
        p, q = p / p.sum(), q / q.sum()
    elif kind == "onehot-p":
        p = np.eye(V)[rng.integers(V)]
    elif kind == "onehot-q":
        q = np.eye(V)[rng.integers(V)]
    elif kind == "equal":
        q = p.copy()
    elif kind == "zeros":
        p[rng.integers(V)] = 0.0
        q[rng.integers(V)] = 0.0
        p, q = p / p.sum(), q / q.sum()
    elif kind == "uniform-q":
        q = np.full(V, 1.0 / V)
    return p, q


def _atol(name, dev, p, q):
    """1e-12, except kseq off the CPU on rows with p = q, where numpy's own rho* = 1 + O(ulp^(1/n)) depends on
    the order sum(p) is added in (see the module docstring); ``p, q`` are ``[B, V]``."""
    loose = (name == "kseq") and dev != "cpu"
    return np.where(loose & (p == q).all(axis=1), 1e-3, 1e-12)[:, None]


def _padded(tuples, width):
    out = np.full((tuples.shape[0], width), -1, dtype=np.int64)
    out[:, : tuples.shape[1]] = tuples
    return out


def _tensors(dev, *arrays):
    return [torch.as_tensor(np.ascontiguousarray(a), device=dev) for a in arrays]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", device.DEVICE_VERIFIERS)
def test_law_equals_numpy_and_is_lossless(name, dev):
    """Every tuple of the exact draft law, one row each: numpy's output_law to 1e-12, and sum_X P(X) law = p."""
    rng = np.random.default_rng(sum(map(ord, name)))
    checked = 0
    for case in range(28):
        V, n = int(rng.integers(2, 9)), (2 if name == "hub" else int(rng.integers(1, 5)))
        p, q = _pair(rng, V, KINDS[case % len(KINDS)])
        sampler = SAMPLERS[name][case % len(SAMPLERS[name])]
        if sampler == "hybrid:m=1" and n < 2:
            sampler = None
        v = VERIFIERS[name](p, q, n, sampler)
        tuples, prob = v.draft_sampler.tuple_law(v.q, n)
        B = tuples.shape[0]
        P, Q, X = _tensors(dev, np.tile(p, (B, 1)), np.tile(q, (B, 1)), _padded(tuples, n))
        law = device.output_law(name, P, Q, X, sampler, n=n, validate=True)
        assert law.device.type == dev and law.dtype == torch.float64 and law.shape == (B, V)
        law = law.cpu().numpy()
        some = rng.choice(B, size=min(B, 200), replace=False)
        expected = np.stack([v.output_law(tuples[m]) for m in some])
        atol = _atol(name, dev, p[None, :], q[None, :])
        assert (np.abs(law[some] - expected) <= atol).all(), (name, sampler, p, q)
        np.testing.assert_allclose(prob @ law, p, rtol=0, atol=1e-12, err_msg=f"{name} {sampler} not lossless")
        checked += 1
    assert checked == 28


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", device.DEVICE_VERIFIERS)
def test_law_at_full_vocabulary(name, dev):
    """V = 152,064, n = 4 (2 for hub): the law at the drafts equals numpy's, and each row has mass 1."""
    rng = np.random.default_rng(7)
    V, n = 152_064, (2 if name == "hub" else 4)
    logits = rng.standard_normal((3, V)) * 3
    p = tempered(logits, 1.0)
    q = tempered(logits + rng.standard_normal((3, V)), 1.0)
    q[1, np.argsort(q[1])[: V // 2]] = 0.0  # half the vocabulary undraftable
    p[2, np.argsort(p[2])[: V // 3]] = 0.0  # and a third impossible for the target
    p, q = p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)
    sampler = VERIFIERS[name].default_sampler
    verifiers = [VERIFIERS[name](p[b], q[b], n, None) for b in range(3)]
    drafts = np.stack([v.draft_sampler.sample(v.q, n, rng, 1)[0] for v in verifiers])
    P, Q, X = _tensors(dev, p, q, drafts)
    law = device.output_law(name, P, Q, X, sampler, validate=True)
    at_drafts = torch.gather(law, 1, X).cpu().numpy()
    for b, v in enumerate(verifiers):
        np.testing.assert_allclose(at_drafts[b], v.law_at_drafts(drafts[b][None, :])[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(law.sum(dim=1).cpu().numpy(), 1.0, rtol=0, atol=1e-12)
    assert (law >= 0).all()


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", device.DEVICE_VERIFIERS)
def test_sampled_tokens_follow_the_law(name, dev):
    """20,000 rows of one node: a G test against the exact law (alpha 1e-4), never a token of probability 0,
    and the index of the first draft holding the token."""
    rng = np.random.default_rng(11)
    V, n = 6, (2 if name == "hub" else 3)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    p[4] = 0.0  # a token the law never gives
    p /= p.sum()
    v = VERIFIERS[name](p, q, n, None)
    drafts = v.draft_sampler.sample(v.q, n, rng, 1)[0]
    if name in ("rrs", "kseq"):
        drafts = np.array([drafts[0], drafts[0], drafts[1]])  # a repeated iid draft
    law = v.output_law(drafts)
    B = 20_000
    P, Q, X = _tensors(dev, np.tile(p, (B, 1)), np.tile(q, (B, 1)), np.tile(drafts, (B, 1)))
    g = torch.Generator(device=dev).manual_seed(2024)
    tokens, indices = device.verify_nodes(name, P, Q, X, g)
    tokens, indices = tokens.cpu().numpy(), indices.cpu().numpy()
    counts = np.bincount(tokens, minlength=V)
    assert counts[law == 0].sum() == 0
    live = law > 0
    test = stats.power_divergence(counts[live], B * law[live] / law[live].sum(), lambda_="log-likelihood")
    assert test.pvalue > 1e-4, (name, counts, B * law)
    first = {int(t): j for j, t in reversed(list(enumerate(drafts)))}
    np.testing.assert_array_equal(indices, [first.get(int(t), -1) for t in tokens])


@pytest.mark.parametrize("name", ["rrs", "rrsw", "kseq"])
def test_sequential_draws_on_the_cpu_follow_the_law(name):
    """The walk's one-node draws on the CPU (sequential rejection, device_visit): 3,000 draws per pair of every
    kind (ties, one-hot p or q, p = q, zeros, uniform q), drafts from the verifier's own law (an iid repeat
    included) and under a transformed draft law: G tests against the numpy law, never a token of probability 0."""
    from mdsd_cli.verifiers.device_visit import sample_visited

    rng = np.random.default_rng(5)
    V, n, M = 6, 3, 3000
    sampler = {"rrs": "iid:temperature=0.7", "rrsw": "wor:top_p=0.9", "kseq": "iid:top_k=4"}[name]
    cases = [(kind, None) for kind in KINDS] + [("random", sampler), ("zeros", sampler)]
    g = torch.Generator().manual_seed(7)
    for kind, spec in cases:
        p, q = _pair(rng, V, kind)
        v = VERIFIERS[name](p, q, n, spec)
        drafts = v.draft_sampler.sample(v.q, n, rng, 1)[0]
        if name != "rrsw" and kind == "random":
            drafts = np.array([drafts[0], drafts[0], drafts[1]])
        law = v.output_law(drafts)
        P, Q = _tensors("cpu", p, q)
        counts = np.bincount([sample_visited(name, P, Q, drafts, n, g, spec) for _ in range(M)], minlength=V)
        assert counts[law == 0].sum() == 0, (kind, spec, counts, law)
        live = law > 0
        if live.sum() > 1:
            test = stats.power_divergence(counts[live], M * law[live] / law[live].sum(), lambda_="log-likelihood")
            assert test.pvalue > 1e-5, (kind, spec, counts, M * law)


def test_sequential_kseq_decides_each_coin_as_the_exact_rho_would():
    """The one-node kseq draw stops rho*'s bisection as soon as its bracket decides a coin, and runs those steps
    without numpy's sort (checking each sign is beyond rounding): for the same
    uniforms, the token equals the one drawn with the fully bisected rho* (coins in order, then the residual),
    on every kind of pair, including uniforms placed at the coins themselves."""
    from mdsd_cli.verifiers.device_visit import _direct_search, _kseq, _TooClose, draw_inverse_cdf
    from mdsd_cli.verifiers.kseq import kseq_rho

    rng = np.random.default_rng(9)
    checked = 0
    for trial in range(300):
        V, n = int(rng.integers(2, 40)), int(rng.integers(1, 5))
        p, q = _pair(rng, V, KINDS[trial % len(KINDS)])
        drafts = [int(x) for x in rng.choice(V, size=n, p=q)]
        rho, s = kseq_rho(p, q, n)
        coins = [min(p[x] / (rho * q[x]), 1.0) for x in drafts]
        u = list(rng.random(n + 1))
        if trial % 3 == 0:  # a uniform exactly at a coin, and one a hair below it
            j = int(rng.integers(n))
            u[j] = coins[j] if trial % 2 else np.nextafter(coins[j], 0.0)
        P, Q = (torch.as_tensor(a) for a in (p, q))
        expected = next((x for x, c, uj in zip(drafts, coins, u) if uj < c), None)
        if expected is None:
            beta = s / rho
            scale = (1.0 - (1.0 - beta) ** n) / beta if beta > 0 else rho
            expected = draw_inverse_cdf(torch, (P - torch.minimum(Q, P / rho) * scale).clamp_min(0.0), P, u[n])
        assert _kseq(torch, P, Q, drafts, n, u) == expected, (trial, p, q, drafts, u)
        checked += 1
    assert checked == 300
    # the search without a sort hands over to numpy's where a sign could differ: p = q puts f(1) at rounding level
    p = np.full(7, 1 / 7)
    with pytest.raises(_TooClose):
        _direct_search(p, p.copy(), 3, 4e-16)


def _batch(name, rng, B, V, width=4):
    """B nodes with their own pairs, their own n (padded with -1) and drafts from the verifier's own law."""
    p = np.empty((B, V))
    q = np.empty((B, V))
    ns = np.full(B, 2) if name == "hub" else rng.integers(1, width + 1, B)
    drafts = np.full((B, width), -1, dtype=np.int64)
    verifiers = []
    for b in range(B):
        p[b], q[b] = _pair(rng, V, KINDS[b % len(KINDS)])
        v = VERIFIERS[name](p[b], q[b], int(ns[b]), None)
        row = v.draft_sampler.sample(v.q, int(ns[b]), rng, 1)[0]
        drafts[b, : row.size] = row
        verifiers.append((v, row))
    return p, q, drafts, ns, verifiers


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("V", [7, 3000])
@pytest.mark.parametrize("name", device.DEVICE_VERIFIERS)
def test_a_batch_equals_one_row_calls(name, V, dev):
    """85 nodes in one call: per row numpy's law (own n), the law of 85 one-row calls, and with the generator
    consumed the same way (one uniform per row, in row order) the same tokens. V = 3000 crosses CPU chunks."""
    rng = np.random.default_rng(V + len(name))
    p, q, drafts, ns, verifiers = _batch(name, rng, 85, V)
    P, Q, X, N = _tensors(dev, p, q, drafts, ns)
    law = device.output_law(name, P, Q, X, n=N, validate=True)
    singles = torch.cat([device.output_law(name, P[b : b + 1], Q[b : b + 1], X[b : b + 1], n=N[b : b + 1])
                         for b in range(85)])
    atol = _atol(name, dev, p, q)
    assert (np.abs((law - singles).cpu().numpy()) <= np.minimum(atol, 1e-15 if dev == "cpu" else 1)).all()
    expected = np.stack([v.output_law(row) for v, row in verifiers])
    assert (np.abs(law.cpu().numpy() - expected) <= atol).all()

    batched = device.verify_nodes(name, P, Q, X, torch.Generator(device=dev).manual_seed(5), n=N)
    u = torch.rand(85, generator=torch.Generator(device=dev).manual_seed(5), dtype=torch.float64, device=dev)
    assert torch.equal(batched.tokens, device.sample_from_laws(law, u))
    given = device.verify_nodes(name, P, Q, X, n=N, uniforms=u)
    assert torch.equal(batched.tokens, given.tokens) and torch.equal(batched.indices, given.indices)
    one_by_one = [device.verify_nodes(name, P[b : b + 1], Q[b : b + 1], X[b : b + 1], n=N[b : b + 1],
                                      uniforms=u[b : b + 1]) for b in range(85)]
    if dev == "cpu":  # the CPU generator hands out the same doubles one at a time (CUDA's Philox does not)
        g = torch.Generator().manual_seed(5)
        assert torch.equal(torch.stack([torch.rand(1, generator=g, dtype=torch.float64)[0] for _ in range(85)]), u)
        g = torch.Generator().manual_seed(5)
        by_generator = [device.verify_nodes(name, P[b : b + 1], Q[b : b + 1], X[b : b + 1], g, n=N[b : b + 1])
                        for b in range(85)]
        assert all(torch.equal(a.tokens, b.tokens) for a, b in zip(one_by_one, by_generator))
    # the same tokens wherever the laws agree to rounding (every row but kseq's p = q ones off the CPU): a sum over
    # a row may round differently in a batch than alone, which moves a token only for a uniform within 1e-15 of
    # a boundary
    same = torch.as_tensor(atol[:, 0] <= 1e-12, device=dev)
    assert torch.equal(batched.tokens[same], torch.cat([r.tokens for r in one_by_one])[same])
    assert torch.equal(batched.indices[same], torch.cat([r.indices for r in one_by_one])[same])


def test_inverse_cdf_never_gives_a_token_of_probability_zero():
    """Uniforms at the cumulative boundaries and just below 1: numpy's tokens, each of positive probability."""
    laws = np.array([[0.5, 0.0, 0.5, 0.0], [0.0, 0.25, 0.0, 0.75], [0.0, 0.0, 1.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    cdf = np.cumsum(laws, axis=1)
    uniforms = np.concatenate([cdf[:, j] / cdf[:, -1] for j in range(4)] + [np.zeros(4), np.full(4, 1 - 2**-53)])
    rows = np.tile(laws, (6, 1))

    class Fixed:
        def random(self, size):
            return uniforms[:size]

    tokens = device.sample_from_laws(torch.as_tensor(rows), torch.as_tensor(uniforms)).numpy()
    assert (rows[np.arange(rows.shape[0]), tokens] > 0).all()
    np.testing.assert_array_equal(tokens, numpy_sample_from_laws(rows, Fixed()))


@pytest.mark.parametrize("dev", DEVICES)
def test_bonus_tokens_and_tempering(dev):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 9))
    logits[1, 3] = logits[1, 6] = logits[1].max() + 1.0  # a tie for the arg max
    logits[2, :4] = -np.inf
    x = torch.as_tensor(logits, device=dev)
    for T in (0.0, 0.3, 1.0, 2.5):
        np.testing.assert_allclose(device.tempered_torch(x, T).cpu().numpy(), tempered(logits, T), rtol=0, atol=1e-15)
    assert device.tempered_torch(x, 0)[1].argmax().item() == 3  # the lowest index among ties
    one = device.tempered_torch(x[0].float(), 1.0)
    assert one.shape == (1, 9) and one.dtype == torch.float64
    with pytest.raises(InputError, match="row 1"):
        device.tempered_torch(torch.tensor([[0.0, 1.0], [np.nan, 0.0]], device=dev), 1.0, validate=True)
    p = device.tempered_torch(x, 1.0)
    tokens = device.sample_bonus(p, torch.Generator(device=dev).manual_seed(9))
    u = torch.rand(5, generator=torch.Generator(device=dev).manual_seed(9), dtype=torch.float64, device=dev)
    assert torch.equal(tokens, device.sample_from_laws(p, u))
    assert (torch.gather(p, 1, tokens[:, None]) > 0).all()


def _valid(name="rrs", B=2, V=5):
    p = torch.full((B, V), 1.0 / V, dtype=torch.float64)
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1, 0.0]] * B, dtype=torch.float64)
    drafts = torch.tensor([[0, 1]] * B)
    return p, q, drafts


@pytest.mark.parametrize("change, match", [
    (lambda p, q, d: (p.long(), q, d), "p has dtype int64"),
    (lambda p, q, d: (p, q.int(), d), "q has dtype int32"),
    (lambda p, q, d: (p, q, d.double()), "drafts has dtype float64"),
    (lambda p, q, d: (p, q, d.bool()), "drafts has dtype bool"),
    (lambda p, q, d: (p.numpy(), q, d), "p must be a torch tensor"),
    (lambda p, q, d: (p[0], q, d), r"p must be \[B, V\]"),
    (lambda p, q, d: (p, q[:, :4], d), "q has shape"),
    (lambda p, q, d: (p, q, d[:1]), "drafts must be"),
    (lambda p, q, d: (p, q.to("meta"), d), "q is on meta but p is on cpu"),
    (lambda p, q, d: (p, q, d.to("meta")), "drafts is on meta"),
])
def test_bad_tensors_are_refused_naming_them(change, match):
    p, q, d = change(*_valid())
    with pytest.raises(InputError, match=match):
        device.output_law("rrs", p, q, d)


def test_a_generator_on_another_device_is_refused():
    p, q, d = (t.to("meta") for t in _valid())
    with pytest.raises(InputError, match="generator is on cpu but p is on meta"):
        device.verify_nodes("rrs", p, q, d, torch.Generator())
    with pytest.raises(InputError, match="generator must be a torch.Generator"):
        device.verify_nodes("rrs", *_valid(), np.random.default_rng(0))
    with pytest.raises(InputError, match="not both"):
        device.verify_nodes("rrs", *_valid(), torch.Generator(), uniforms=torch.rand(2, dtype=torch.float64))
    with pytest.raises(InputError, match=r"uniforms must be a floating-point torch tensor \[B\] \(B = 2\)"):
        device.sample_bonus(_valid()[0], uniforms=torch.rand(3))


@pytest.mark.parametrize("name, sampler, drafts, match", [
    ("rrs", None, [[0, 5], [0, 1]], "row 0 holds token id 5, outside 0..4"),
    ("rrs", None, [[0, 1], [-1, 1]], "row 1 has -1 padding before a token id"),
    ("rrs", None, [[0, 1], [0, -1]], "row 1 has 1 drafts, but iid drafts of n = 2"),
    ("rrs", None, [[0, 4], [0, 1]], "draft token 4 of drafts row 0 has draft probability 0"),
    ("rrsw", None, [[0, 1], [2, 2]], r"draft tuple \(2, 2\) \(row 1\) repeats a token"),
    ("greedy", None, [[0, 1], [1, 2]], r"draft tuple \(1, 2\) \(row 1\) cannot come from greedy drafts"),
    ("topk", None, [[1, 0], [0, 1]], r"draft tuple \(1, 0\) \(row 0\) cannot come from topk drafts"),
    ("hub", None, [[1, 2], [0, 1]], r"the hub, token 0 .* is not among them"),
    ("rrs", "wor", [[0, 1], [0, 1]], "rrs is lossless for iid drafts only"),
    ("optimal-iid", None, [[0, 1], [0, 1]], "runs on the host only"),
    ("nss:x", None, [[0, 1], [0, 1]], "unknown verifier"),
])
def test_bad_values_are_refused_with_validate(name, sampler, drafts, match):
    p, q, _ = _valid()
    with pytest.raises(InputError, match=match):
        device.output_law(name, p, q, torch.tensor(drafts), sampler, validate=True)


def test_validate_checks_the_rows_and_n():
    p, q, d = _valid()
    with pytest.raises(InputError, match="p row 1 sums to 1.5"):
        device.output_law("rrs", torch.cat([p[:1], p[1:] * 1.5]), q, d, validate=True)
    with pytest.raises(InputError, match="q row 0 has a NaN"):
        device.output_law("rrs", p, torch.cat([q[:1] * np.nan, q[1:]]), d, validate=True)
    with pytest.raises(InputError, match="n must be an integer in 1..2"):
        device.output_law("rrs", p, q, d, n=3)
    with pytest.raises(InputError, match="defined for n = 2 only"):
        device.output_law("hub", p, q, d[:, :1])
    with pytest.raises(InputError, match="n for row 1 is 3"):
        device.output_law("rrs", p, q, d, n=torch.tensor([2, 3]), validate=True)
    law = device.output_law("rrs", p, q, d, validate=True)
    assert torch.equal(law, device.output_law("rrs", p, q, d))  # checking changes nothing


def test_importing_the_module_does_not_import_torch():
    code = "import sys, mdsd_cli.verifiers.device; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=SUBPROCESS_TIMEOUT)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", device.DEVICE_VERIFIERS)
def test_no_host_synchronisation_on_cuda(name):
    rng = np.random.default_rng(1)
    p, q, drafts, ns, _ = _batch(name, rng, 64, 1000)
    P, Q, X, N = _tensors("cuda", p, q, drafts, ns)
    g = torch.Generator(device="cuda").manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        result = device.verify_nodes(name, P, Q, X, g, n=N)
        device.sample_bonus(device.tempered_torch(P.log(), 0.7), g)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert result.tokens.shape == (64,)


def test_validate_names_the_fixed_n_of_hub():
    p, q, d = _valid()
    with pytest.raises(InputError, match="n for row 0 is 1; it must lie in 1..2 .* and equal 2"):
        device.output_law("hub", p, q, d, n=torch.tensor([1, 2]), validate=True)
