"""Decoding with the verifiers on the device of the target's logits (``verify_on="device"``, issue 27).

The same oracles as tests/test_decode.py, on the device path (torch on the CPU
here; the same code runs on CUDA): (a) at T = 0 every verifier x tree gives the
target's greedy decoding; (b) the law of the first two generated tokens is the
target's, for every verifier and every tree shape;
(c) bad input is one clean error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mdsd_cli.decode import run_decode
from mdsd_cli.decode.device_walk import as_device_rows, resolve_verify_on, walk_on_device
from mdsd_cli.decode.drafting import grow_tree
from mdsd_cli.errors import InputError
from mdsd_cli.models import Prompt
from mdsd_cli.models.synthetic import synthetic_models
from mdsd_cli.samplers import get_sampler

from .test_decode import (
    COMBOS,
    FAMILY_ALPHA,
    PROMPT,
    RUNS,
    exact_two_token_law,
    g_test,
    greedy_decode,
    shape,
    small_pair,
    specs_for,
)


@pytest.fixture(params=["visited", "batched"])
def walk_mode(request, monkeypatch):
    """Both walks of the device path: the visited nodes only (the CPU's default) and the whole tree in one
    call (the GPU's), here on the CPU."""
    import mdsd_cli.decode.device_walk as device_walk

    monkeypatch.setattr(device_walk, "BATCH_ON_CPU", request.param == "batched")
    return request.param


@pytest.mark.parametrize("verifier,sampler,name", COMBOS)
def test_greedy_temperature_on_the_device_path_is_the_targets_greedy_decoding(verifier, sampler, name, walk_mode):
    target, draft = synthetic_models(12, seed=5, noise=1.0)
    prompts = [Prompt(i, tuple(np.random.default_rng(i).integers(0, 12, size=3))) for i in range(3)]
    run = run_decode(target, draft, prompts, specs_for(verifier, sampler, name, 0.0, V=12), max_new_tokens=10,
                     seed=0, verify_on="device")
    for r in run.runs:
        assert r.generated == greedy_decode(target, prompts[r.prompt].tokens, 10)
    assert sum(r.steps.shape[0] for r in run.runs) < 30  # and it did speculate


@pytest.mark.parametrize("verifier", ["select-block", "select-traversal", "select-race"])
def test_select_verifiers_on_the_device_path_are_verified_on_the_host_and_greedy_at_t0(verifier):
    """select-block, select-traversal and select-race have no device form: with --verify-on device their rows come to the
    host (T = 0 is still the target's greedy decoding; select-block's two-token law is in DEVICE_LAW_CASES)."""
    target, draft = synthetic_models(12, seed=5, noise=1.0)
    prompts = [Prompt(i, tuple(np.random.default_rng(i).integers(0, 12, size=3))) for i in range(3)]
    for sampler in ("iid", "wor"):
        run = run_decode(target, draft, prompts, specs_for(verifier, sampler, "2x2", 0.0, V=12),
                         max_new_tokens=10, seed=0, verify_on="device")
        for r in run.runs:
            assert r.generated == greedy_decode(target, prompts[r.prompt].tokens, 10)


#: Every verifier once and every tree shape at least once (all 44 combinations at 800 runs would take 3.5 min;
#: the batched laws are checked against the numpy verifiers' exact laws in tests/test_device_verifiers.py).
DEVICE_LAW_CASES = [("nss", "iid", "2x1"), ("rrs", "iid", "2x2"), ("kseq", "iid", "paths:3x2"),
                    ("optimal-iid", "iid", "sparse"), ("otm", "iid", "2x2"), ("rrsw", "wor", "3,1"),
                    ("optimal-wor", "wor", "2x1"), ("greedy", "greedy", "sparse"), ("hub", "hub", "2x2"),
                    ("topk", "topk", "paths:3x2"), ("rrsw", "wor", "sparse"), ("select-block", "wor", "2x2")]


@pytest.mark.parametrize("verifier,sampler,name", DEVICE_LAW_CASES)
def test_first_two_tokens_on_the_device_path_follow_the_target_law(verifier, sampler, name, walk_mode):
    from mdsd_cli.verifiers.device import HOST_VERIFIERS

    if walk_mode == "batched" and verifier in HOST_VERIFIERS:
        pytest.skip("verified on the host from the visited rows in either mode")
    target, draft = small_pair()
    prompts = [Prompt(i, PROMPT) for i in range(RUNS)]
    run = run_decode(target, draft, prompts, specs_for(verifier, sampler, name), max_new_tokens=2, seed=0,
                     node_metrics=False, verify_on="device")
    counts = np.zeros((target.vocab_size, target.vocab_size))
    for r in run.runs:
        counts[r.generated[0], r.generated[1]] += 1
    law = exact_two_token_law(target, PROMPT)
    pvalue = g_test(counts, law)
    assert pvalue >= FAMILY_ALPHA / (2 * len(DEVICE_LAW_CASES)), (pvalue, counts, law * RUNS)


def test_the_device_walk_is_reproducible_and_its_metrics_are_the_host_verifiers():
    """Same seed, same tokens; each visit's conditional acceptance is the numpy verifier's exact one."""
    from mdsd_cli.verifiers import get_verifier

    target, draft = synthetic_models(40, seed=2, noise=1.0)
    prompts = [Prompt(i, (1, 2, 3)) for i in range(4)]
    specs = specs_for("rrs", "iid", "2x2", 1.0, V=40)
    runs = [run_decode(target, draft, prompts, specs, max_new_tokens=8, seed=7, verify_on="device")
            for _ in range(2)]
    assert [r.generated for r in runs[0].runs] == [r.generated for r in runs[1].runs]
    rng = np.random.default_rng(0)
    tree = grow_tree(draft, [1, 2, 3], shape("2x2"), get_sampler("iid"), 1.0, rng)
    logits = torch.as_tensor(np.asarray(target.tree_logits([1, 2, 3], tree.parents, tree.tokens,
                                                           range(tree.size)), dtype=np.float64))
    for batched in (False, True):
        walk = walk_on_device(tree, logits, 1.0, "rrs", "iid", torch.Generator().manual_seed(3), batched=batched)
        assert walk.visits
        for v in walk.visits:
            want = get_verifier("rrs")(v.p, v.q, v.n, "iid").acceptance(v.drafts[None, :])[0]
            assert abs(v.acceptance - want) < 1e-12


def test_bad_input_on_the_device_path():
    target, _ = synthetic_models(12, seed=5, noise=1.0)
    with pytest.raises(InputError, match="unknown verify-on 'gpu'"):
        resolve_verify_on("gpu", target)
    assert resolve_verify_on("auto", target) == "host" and resolve_verify_on("device", target) == "device"
    with pytest.raises(InputError, match=r"returned logits of shape \(1, 12\) for 3 contexts; expected \(3, 12\)"):
        as_device_rows(target, torch.zeros(1, 12), 3, "cpu")
    with pytest.raises(InputError, match="returned logits of dtype int64"):
        as_device_rows(target, torch.zeros(3, 12, dtype=torch.int64), 3, "cpu")
    with pytest.raises(InputError, match="returned logits of dtype float32 on meta"):
        as_device_rows(target, torch.zeros(3, 12, device="meta"), 3, "cpu")


def test_the_cpu_walk_runs_torch_single_threaded_and_restores_the_thread_count():
    """On a busy 2-core machine torch's parallel ops stall on a descheduled worker (7.8 ms instead of 0.12 ms
    per verified node): the walk runs with one thread, and the caller's setting comes back, also after an
    error inside the block."""
    from mdsd_cli.decode.device_walk import one_thread_on_cpu

    before = torch.get_num_threads()
    seen = []
    with one_thread_on_cpu("cpu"):
        seen.append(torch.get_num_threads())
    with pytest.raises(RuntimeError), one_thread_on_cpu("cpu"):
        raise RuntimeError
    with one_thread_on_cpu("cuda:0"):
        seen.append(torch.get_num_threads())
    assert seen == [1, before] and torch.get_num_threads() == before
    target, draft = synthetic_models(50, seed=0)
    run_decode(target, draft, [Prompt(0, (1, 2))], specs_for("rrs", "iid", "2x2", 1.0, V=50), max_new_tokens=4, seed=0,
               verify_on="device")
    assert torch.get_num_threads() == before
