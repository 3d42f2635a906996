"""The ``decode`` figure of ``mdsd bench``: what decoding costs beyond the models.

For the synthetic pair at V = 2,380 (``pydoc-ngram``'s size) and V = 152,064,
a ``4x3`` tree (85 nodes, 21 of them drafting) is decoded with ``rrs``, ``kseq``
and ``optimal-iid`` at T = 1, and the time outside the two models is measured
per generated token, per tree node and per verified node:

* drafting bookkeeping: tempering the draft logits, drawing every node's
  drafts, building the tree;
* verification: tempering the target logits on the walk, each visited node's
  verifier set-up and its step, the bonus token.

Baseline: one ``numpy.argsort`` of a length-V vector, timed in the same run.
Targets (issue "mdsd decode"): per tree node at most 3x the argsort for
``rrs`` and ``kseq``; for ``optimal-iid`` the per-pair target of "Optimal
verifiers at decoding speed" (set-up + one step <= 5x the argsort) per verified
node. The median over steps is reported, with the range. The same figure times the sequence-level tree
verifiers (``select-block``, ``select-traversal``, ``select-race``) per step against ``traversal``, on the synthetic pair
and on ``pydoc-ngram`` (:func:`tree_verifier_rows`).

The module also holds the figures ``expected`` (the cost of tau(c), :func:`expected_rows`) and
``device`` (verification with torch, :func:`device_rows`), described with their functions.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from ..decode.metrics import VI, S
from .common import bench_row, timed


def decode_overhead_rows(config) -> list[dict]:
    """Rows of the ``decode`` figure (see the module docstring)."""
    from ..decode import plan_decode, run_decode
    from ..distributions import softmax
    from ..models.synthetic import synthetic_models, synthetic_prompts
    from ..verifiers.optimal import OptimalIID

    R = config.repeats
    rows = []
    small = np.random.default_rng(config.seed).dirichlet(np.ones(64), size=2)
    OptimalIID(small[0], small[1], 4)  # compile the kernels before any timing
    for V in dict.fromkeys((config.decode_vocab, config.vocab)):
        target, draft = synthetic_models(V, seed=config.seed)
        prompts = synthetic_prompts(config.decode_prompts, V, seed=config.seed)
        context = [list(prompts[0].tokens)]
        p, q = softmax(target.logits(context))[0], softmax(draft.logits(context))[0]
        base = timed(lambda p=p, q=q: np.argsort(p / q), R)
        for verifier in ("rrs", "kseq", "optimal-iid"):
            tokens = config.decode_tokens
            if verifier == "optimal-iid" and V > config.decode_vocab:
                tokens = config.decode_optimal_tokens
            specs, _ = plan_decode(["4x3"], [verifier], temperatures=[1.0], vocab_size=V, baselines=False)
            run = run_decode(target, draft, prompts, specs, max_new_tokens=tokens, seed=config.seed,
                             node_metrics=False)
            steps = np.concatenate([r.steps for r in run.runs])
            per_step_visits = np.concatenate([np.bincount(r.visits[:, VI["step"]].astype(int),
                                                          minlength=r.steps.shape[0]) for r in run.runs])
            visits = int(per_step_visits.sum())
            generated = sum(len(r.generated) for r in run.runs)
            drafting, verifying = steps[:, S["tree_seconds"]], steps[:, S["verify_seconds"]]
            per_node = (drafting + verifying) / steps[:, S["nodes"]]
            stats = (statistics.median(per_node), float(per_node.min()), float(per_node.max()))
            per_token = (drafting.sum() + verifying.sum()) / generated
            per_pair = verifying.sum() / visits
            tau = steps[:, S["tokens"]].mean()
            note = (f"per token {per_token * 1e3:.2f} ms (drafting {drafting.sum() / generated * 1e3:.2f} + "
                    f"verification {verifying.sum() / generated * 1e3:.2f}); per verified node "
                    f"{per_pair * 1e3:.2f} ms = {per_pair / base[0]:.1f}x argsort; {steps.shape[0]} steps, "
                    f"{visits} verified nodes, tau {tau:.2f}; models excluded")
            if verifier == "optimal-iid":  # the statistics are per verified node here
                verified = per_step_visits > 0
                each = verifying[verified] / per_step_visits[verified]
                stats = (statistics.median(each), float(each.min()), float(each.max()))
                ratio, target_text, passed = stats[0] / base[0], "<= 5x per verified node", stats[0] <= 5 * base[0]
            else:
                ratio, target_text, passed = stats[0] / base[0], "<= 3x per tree node", stats[0] <= 3 * base[0]
            rows.append(bench_row(f"decode overhead {verifier}, 4x3 tree", 4, V, visits, stats, "numpy.argsort",
                                  base, target=target_text, ratio=ratio, passed=passed, note=note))
    return rows + tree_verifier_rows(config)


def tree_verifier_rows(config) -> list[dict]:
    """The sequence-level tree verifiers' cost per step against ``traversal``'s, the baseline timed in the same
    run (issue "optimal tree verifier": within 5x): the synthetic pair at ``decode_vocab`` (V = 2,380 by
    default, ``pydoc-ngram``'s size) and the built-in ``pydoc-ngram`` pair itself, ``2x4`` and ``4x3`` trees,
    iid and wor drafts, T = 1; the verification time per step (tempering the target's rows on the walk, every
    set-up, the coins and the bonus token; models and drafting excluded). Four times the figure's prompts, in
    up to three rounds, each one decode of the four verifiers prompt by prompt in turn (a busy machine's drift
    falls on all four alike, within seconds of each other), after one short untimed decode of each (the first
    decode of a process runs slower, which would flatter the baseline): a round's figure is the median over its steps, the ratio the median over rounds of
    the round's ratio to ``traversal``. The note also has the whole step's ratio, the models' calls and the
    drafting included."""
    from ..decode import plan_decode, run_decode
    from ..models import load_model_pair
    from ..models.synthetic import synthetic_models, synthetic_prompts

    V = config.decode_vocab
    # four times the figure's prompts: a round's medians are over 50-70 steps (a step's cost varies with the walk)
    ngram = load_model_pair("pydoc-ngram")
    pairs = [("synthetic", *synthetic_models(V, seed=config.seed), synthetic_prompts(4 * config.decode_prompts, V,
                                                                                     seed=config.seed), V),
             ("pydoc-ngram", ngram.target, ngram.draft, ngram.prompts(4 * config.decode_prompts), ngram.vocab_size)]
    rounds = max(1, min(3, config.repeats))
    names = ("traversal", "select-block", "select-traversal", "select-race")
    rows = []
    for label, target, draft, prompts, vocab in pairs:
        for tree in ("2x4", "4x3"):
            for sampler in ("iid", "wor"):
                specs = {v: plan_decode([tree], [f"{v}:{sampler}"], temperatures=[1.0], vocab_size=vocab,
                                        baselines=False)[0] for v in names}
                for verifier in names:  # warm-up, untimed
                    run_decode(target, draft, prompts[:1], specs[verifier], max_new_tokens=4, seed=config.seed,
                               node_metrics=False)
                medians, whole = {v: [] for v in names}, {v: [] for v in names}
                every, tau = {v: [] for v in names}, {}
                for _ in range(rounds):  # the four verifiers in one decode: prompt by prompt, each in turn
                    run = run_decode(target, draft, prompts, [specs[v][0] for v in names],
                                     max_new_tokens=config.decode_tokens, seed=config.seed, node_metrics=False)
                    for si, verifier in enumerate(names):
                        steps = np.concatenate([r.steps for r in run.runs if r.spec == si])
                        medians[verifier].append(statistics.median(steps[:, S["verify_seconds"]]))
                        parts = [S[c] for c in ("draft_seconds", "tree_seconds", "target_seconds", "verify_seconds",
                                                "cache_seconds")]
                        whole[verifier].append(statistics.median(steps[:, parts].sum(axis=1)))  # models, drafting too
                        every[verifier].append(steps[:, S["verify_seconds"]])
                        tau[verifier] = float(steps[:, S["tokens"]].mean())
                base_all = np.concatenate(every["traversal"])
                base = (statistics.median(medians["traversal"]), float(base_all.min()), float(base_all.max()))
                for verifier in names[1:]:
                    each = np.concatenate(every[verifier])
                    stats = (statistics.median(medians[verifier]), float(each.min()), float(each.max()))
                    ratios = [m / b for m, b in zip(medians[verifier], medians["traversal"])]
                    ratio = statistics.median(ratios)
                    step = statistics.median(whole[verifier]) / statistics.median(whole["traversal"])
                    note = (f"{each.size // rounds} steps a round, rounds' ratios "
                            f"{', '.join(f'{x:.2f}' for x in ratios)}; whole step with the {label} models "
                            f"{statistics.median(whole[verifier]) * 1e3:.1f} ms = {step:.2f}x traversal's; "
                            f"tau {tau[verifier]:.2f} (traversal {tau['traversal']:.2f}; short runs, not a comparison "
                            "of tau); models and drafting excluded")
                    width = int(tree.split("x")[0])
                    rows.append(bench_row(f"tree verifier {verifier}:{sampler}, {tree} tree, {label}, per step", width,
                                          vocab, each.size // rounds, stats, "traversal per step", base,
                                          target="<= 5x traversal", ratio=ratio, passed=ratio <= 5, note=note))
    return rows


def expected_rows(config) -> list[dict]:
    """Rows of the ``expected`` figure: the whole cost of tau(c) at one context of ``pydoc-ngram`` (V = 2,380)
    on a ``4x3`` tree, the models' laws included (each context starts with empty memos), against one decode
    step of the same configuration from the same context, timed in the same run.

    Three ways: the exact recursion (``rrs``; prune 0.01 with sampled tails, as the ``tree-decode``
    experiment runs it, and the default 0.001), sampled draft tuples (``rrsw``), and 64 repeated steps
    (Monte Carlo, ``rrs``). No target: the rows say how many decode steps one context costs, and the note
    the per-context standard error each buys (the interval a generation run would need that many steps for).
    """
    from ..decode import plan_decode
    from ..decode.drafting import grow_tree
    from ..decode.exact import ConditionalLaws
    from ..decode.expected import TauOptions, context_tau, sample_contexts
    from ..decode.walk import walk_per_node
    from ..models import load_model_pair
    from ..samplers import get_sampler
    from ..verifiers import get_verifier

    pair = load_model_pair("pydoc-ngram")
    contexts = sample_contexts(pair.target, pair.prompts(max(2, config.decode_prompts)), per_prompt=1,
                               max_new_tokens=32, temperature=1.0, seed=config.seed)
    rows = []
    cases = [("rrs", "exact, prune 0.01", TauOptions(prune=0.01, replicates=2)),
             ("rrs", "exact, prune 0.001", TauOptions(prune=0.001)),
             ("rrsw", "sampled drafts", TauOptions(prune=0.01, replicates=2, draft_samples=64)),
             ("rrs", "monte-carlo, 64 steps", TauOptions(method="monte-carlo", repeats=64))]
    for verifier, label, options in cases:
        spec = plan_decode(["4x3"], [verifier], vocab_size=pair.vocab_size, baselines=False)[0][0]
        sampler, cls = get_sampler(spec.sampler), get_verifier(verifier)
        context = list(contexts[0].tokens)
        rng = np.random.default_rng(config.seed)

        def one_step(context=context, spec=spec, sampler=sampler, cls=cls, rng=rng):
            tree = grow_tree(pair.draft, context, spec.tree, sampler, 1.0, rng)
            logits = pair.target.tree_logits(context, tree.parents, tree.tokens, range(tree.size))
            walk_per_node(tree, logits, 1.0, cls, spec.sampler, rng, conditional_acceptance=False)

        errors: list[float] = []

        def per_context(spec=spec, options=options, rng=rng, errors=errors):
            for c in contexts:
                P = ConditionalLaws(pair.target, c.tokens, 1.0)
                Q = ConditionalLaws(pair.draft, c.tokens, 1.0)
                errors.append(context_tau(P, Q, spec, options, rng=rng).stderr)

        base = timed(one_step, config.repeats)
        whole = timed(per_context, max(1, config.repeats // 2))
        each = tuple(x / len(contexts) for x in whole)
        se = float(np.sqrt(np.mean(np.square(errors))))
        rows.append(bench_row(f"expected tau(c) {verifier}, {label}, 4x3 tree", 4, pair.vocab_size, len(contexts),
                              each, "one decode step", base, target="report", ratio=each[0] / base[0], passed=True,
                              note=f"per context {each[0] * 1e3:.0f} ms = {each[0] / base[0]:.0f} decode steps; "
                                   f"per-context standard error {se:.3f} (one generated step: about 1)"))
    return rows


__all__ = ["decode_overhead_rows", "device_rows", "expected_rows", "tree_verifier_rows"]


def device_rows(config) -> list[dict]:
    """Rows of the ``device`` figure: verification with torch (``--verify-on device``) against numpy.

    On the CPU, per verified node on the synthetic ``4x3`` tree at V = 2,380 and V, for ``rrs``,
    ``kseq`` and ``rrsw``: torch's walk (the visited nodes, one call each) against numpy's, both
    timed in the same run (target: torch no slower, ratio <= 1). The first device decode of the
    process (torch's one-time warm-up) is timed apart and stated. With CUDA, also: one batched call
    verifying every internal node of a ``4x3`` tree (21) at V on the GPU, per node, against one
    ``torch.argsort`` of V there; and on the tiny Hugging Face pair on the GPU, the share of a
    decode step spent verifying.
    """
    import torch

    from ..decode import plan_decode, run_decode
    from ..models.synthetic import synthetic_models, synthetic_prompts

    rows = []
    for V in dict.fromkeys((config.decode_vocab, config.vocab)):
        target, draft = synthetic_models(V, seed=config.seed)
        prompts = synthetic_prompts(config.decode_prompts, V, seed=config.seed)
        for verifier in ("rrs", "kseq", "rrsw"):
            specs, _ = plan_decode(["4x3"], [verifier], temperatures=[1.0], vocab_size=V, baselines=False)
            t0 = time.perf_counter()
            run_decode(target, draft, prompts[:1], specs, max_new_tokens=2, seed=config.seed, node_metrics=False,
                       verify_on="device")
            first = time.perf_counter() - t0
            per_node = {}
            for where in ("host", "device"):
                run = run_decode(target, draft, prompts, specs, max_new_tokens=config.decode_tokens,
                                 seed=config.seed, node_metrics=False, verify_on=where)
                steps = np.concatenate([r.steps for r in run.runs])
                visits = sum(r.visits.shape[0] for r in run.runs)
                each = steps[:, S["verify_seconds"]] / np.maximum(steps[:, S["accepted"]] + 1, 1)
                per_node[where] = (float(steps[:, S["verify_seconds"]].sum() / max(visits, 1)),
                                   float(each.min()), float(each.max()), visits)
            host, device = per_node["host"], per_node["device"]
            ratio = device[0] / host[0]
            rows.append(bench_row(f"torch verification on CPU, {verifier}, 4x3 tree", 4, V, device[3], device[:3],
                                  "numpy walk (same run)", host[:3], target="<= 1x numpy per verified node",
                                  ratio=ratio, passed=ratio <= 1.0,
                                  note=f"per verified node: torch {device[0] * 1e3:.3f} ms, numpy "
                                       f"{host[0] * 1e3:.3f} ms; first device decode of the process "
                                       f"(torch warm-up included) {first:.2f} s"))
    if torch.cuda.is_available():
        rows += _cuda_rows(config)
    return rows


def _cuda_rows(config) -> list[dict]:
    """The GPU section of the ``device`` figure (see :func:`device_rows`)."""
    import tempfile
    from pathlib import Path

    import torch

    from ..decode import parse_tree, plan_decode, run_decode
    from ..decode.drafting import grow_tree
    from ..models import Prompt, load_hf_pair
    from ..models.synthetic import synthetic_models
    from ..models.tiny import build_tiny_pair
    from ..samplers import get_sampler
    from ..verifiers import device as dv

    rows = []
    V = config.vocab
    target, draft = synthetic_models(V, seed=config.seed)
    rng = np.random.default_rng(config.seed)
    tree = grow_tree(draft, [1, 2, 3], parse_tree("4x3"), get_sampler("iid"), 1.0, rng)
    internal = [u for u in range(tree.size) if tree.children[u]]
    logits = torch.as_tensor(np.asarray(target.tree_logits([1, 2, 3], tree.parents, tree.tokens,
                                                           range(tree.size)))[internal], device="cuda")
    Q = torch.as_tensor(np.stack([tree.q[u] for u in internal]), device="cuda")
    X = torch.as_tensor(np.stack([tree.drafts[u] for u in internal]).astype(np.int64), device="cuda")
    P = dv.tempered_torch(logits, 1.0)
    g = torch.Generator(device="cuda").manual_seed(config.seed)
    key = torch.rand(V, device="cuda")

    def argsort():
        torch.argsort(key)
        torch.cuda.synchronize()

    base = timed(argsort, config.repeats)
    for verifier in ("rrs", "kseq", "rrsw"):
        sampler = "wor" if verifier == "rrsw" else "iid"

        def verify(verifier=verifier, sampler=sampler):
            dv.verify_nodes(verifier, P, Q, X, g, sampler).tokens.cpu()

        stats = timed(verify, config.repeats)
        each = tuple(s / len(internal) for s in stats)
        rows.append(bench_row(f"torch verification on CUDA, {verifier}, 4x3 tree (21 nodes, one call)", 4, V,
                              len(internal), each, "torch.argsort on the GPU", base, target="report",
                              ratio=each[0] / base[0], passed=True,
                              note=f"one call for the tree's 21 internal nodes: {stats[0] * 1e3:.2f} ms "
                                   f"({torch.cuda.get_device_name()})"))
    with tempfile.TemporaryDirectory() as root:
        t_dir, d_dir = build_tiny_pair(Path(root), family="llama", seed=1)
        pair = load_hf_pair(str(t_dir), str(d_dir), device="cuda")
        prompts = [Prompt(i, tuple(pair.target.encode(text))) for i, text in
                   enumerate(["def main():", "import numpy as np", "for i in range(10):"])]
        specs, _ = plan_decode(["4x3"], ["rrs"], temperatures=[1.0], vocab_size=pair.vocab_size, baselines=False)
        run_decode(pair.target, pair.draft, prompts[:1], specs, max_new_tokens=4, seed=0, verify_on="device")
        run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=32, seed=0, node_metrics=False,
                         verify_on="device")
        steps = np.concatenate([r.steps for r in run.runs])
        parts = ("draft_seconds", "tree_seconds", "target_seconds", "verify_seconds", "cache_seconds")
        total = sum(steps[:, S[c]].sum() for c in parts)
        share = steps[:, S["verify_seconds"]].sum() / total
        per_step = tuple(float(x) for x in (np.median(steps[:, S["verify_seconds"]]),
                                            steps[:, S["verify_seconds"]].min(), steps[:, S["verify_seconds"]].max()))
        rows.append(bench_row("share of a decode step verifying, tiny HF pair on CUDA, 4x3 rrs", 4,
                              pair.vocab_size, steps.shape[0], per_step, "-", None, target="report", ratio=share,
                              passed=True, note=f"verification {share:.1%} of a step's time ({steps.shape[0]} steps)"))
    return rows
