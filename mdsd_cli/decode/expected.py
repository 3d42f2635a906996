"""Expected tokens per target call on shared contexts: every configuration at every context.

:func:`run_expected` computes ``tau(c)`` (:mod:`.tau`: the exact recursion, the enumeration of draft
trees or Monte Carlo, at one context; the contexts of :func:`~.tau.sample_contexts`) for every
configuration at every context of its temperature, on local processes or a Dask cluster, each with its
own random stream; :mod:`.expected_tables` turns the run into the summary, the per-context table and
the paired comparisons. The public names of both are importable from here.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from collections.abc import Sequence

import numpy as np

from ..errors import InputError
from .engine import DecodeSpec
from .exact import ConditionalLaws
from .expected_tables import (
    Comparison,
    compare_expected,
    comparison_pairs,
    mean_interval,
    parse_comparison,
    per_context_table,
    summarize_expected,
)
from .sequence import SEQUENCE_VERIFIERS
from .tau import (
    DEFAULT_DRAFT_SAMPLES,
    DEFAULT_PRUNE,
    DEFAULT_REPEATS,
    DEFAULT_REPLICATES,
    DEFAULT_TAIL_SAMPLES,
    MAX_SEQUENCE_TREES,
    METHODS,
    Context,
    ContextValue,
    ExpectedRun,
    NoExactLaw,
    TauOptions,
    check_exact,
    context_tau,
    enumerated_tau,
    exact_tau,
    monte_carlo_tau,
    recursive_tau,
    sample_contexts,
)

_STATE: dict = {}


def _unit(ci: int) -> list:
    """Every configuration at one context (the models' laws there are shared between them)."""
    st = _STATE
    if "target" not in st:  # a Dask worker: load the pair once per process
        st.update(st["loader"]())
    context = st["contexts"][ci]
    target, draft = st["target"], st["draft"]
    P = ConditionalLaws(target, context.tokens, context.temperature)
    Q = ConditionalLaws(draft, context.tokens, context.temperature)
    out = []
    for si, spec in enumerate(st["specs"]):
        if spec.temperature != context.temperature:
            continue
        rng = np.random.default_rng([st["seed"], context.prompt, context.position, spec.stream])
        options = st["options"]
        if st["methods"][si] != options.method:
            from dataclasses import replace

            options = replace(options, method=st["methods"][si])
        value = context_tau(P, Q, spec, options, rng=rng, eos=target.eos_token_id)
        bound = None
        if st["sequence_bound"]:
            from .bounds import step_bound

            bound = step_bound(target, draft, context.tokens, spec.tree, spec.sampler, spec.temperature,
                               lp=True, laws={(tuple(context.tokens), context.temperature): (P, Q)})
        out.append((si, ci, value, bound))
    return out


class _RemoteUnit:
    """One context on a Dask worker: the run's settings travel with the task (an object, not a dict, which
    Dask would walk as part of its graph), the models are loaded once per worker process."""

    def __init__(self, state: dict):
        self.state = state

    def __call__(self, ci: int) -> list:
        if _STATE.get("key") != self.state["key"]:
            _STATE.clear()
            _STATE.update(self.state)
        return _unit(ci)


def run_expected(target, draft, contexts: Sequence[Context], specs: Sequence[DecodeSpec], *,
                 options: TauOptions = TauOptions(), seed: int = 0, jobs: int = 1, executor: str = "local",
                 client=None, loader=None, sequence_bound: bool = False, progress=None, notify=None) -> ExpectedRun:
    """``tau`` of every configuration at every context of its temperature (see :class:`TauOptions`).

    ``exact`` is refused, before any work, for a configuration without an exact law
    at this V; ``auto`` says through ``notify`` which configurations fall back to
    sampled draft tuples or Monte Carlo. Contexts are the units of work, on ``jobs``
    local processes or a Dask ``client`` (``executor="dask"``: ``loader()`` must
    return ``{"target": ..., "draft": ...}`` in the worker). Each (configuration,
    context) has its own random stream, seeded from ``(seed, prompt, position,
    configuration)``: results do not depend on ``jobs`` or the executor.
    ``progress(k)`` is called as contexts finish.
    """
    options = options.check()
    specs = [s for s in specs if not s.plain]
    if not specs:
        raise InputError("no draft tree configuration to evaluate (plain sampling has tau = 1)")
    if not contexts:
        raise InputError("no context to evaluate; give more --prompts or --contexts-per-prompt")
    notify = notify or (lambda message: None)
    methods = []
    for spec in specs:
        why = None if options.method == "monte-carlo" else check_exact(spec, target.vocab_size)
        if why is not None and options.method == "exact":
            raise InputError(f"{spec.label}: no exact law at this size ({why}); use --method auto, "
                             "sampled-drafts or monte-carlo")
        method = options.method
        if why is not None and method == "auto":
            if spec.verifier in SEQUENCE_VERIFIERS:
                method = "monte-carlo"
                notify(f"{spec.label}: Monte Carlo ({why})")
            else:
                notify(f"{spec.label}: node laws from {options.draft_samples} sampled draft tuples where there is "
                       f"no exact one ({why})")
        methods.append(method)
    state = {"target": target, "draft": draft, "contexts": list(contexts), "specs": list(specs), "seed": int(seed),
             "methods": methods, "options": options, "sequence_bound": sequence_bound}
    advance = progress or (lambda k=1: None)
    values: dict = {}
    bounds: dict = {}
    t0 = time.perf_counter()

    def take(rows):
        for si, ci, value, bound in rows:
            values[(si, ci)] = value
            if bound is not None:
                bounds[(si, ci)] = bound
        advance(1)

    units = range(len(contexts))
    if executor == "dask":
        if client is None or loader is None:
            raise InputError("the dask executor needs a client and a model loader")
        from dask.distributed import as_completed

        remote = {k: v for k, v in state.items() if k not in ("target", "draft")}
        remote.update(loader=loader, key=f"{time.time_ns()}-{id(state)}")
        task = _RemoteUnit(remote)
        futures = [client.submit(task, ci, pure=False) for ci in units]
        for future in as_completed(futures):
            take(future.result())
    elif executor != "local":
        raise InputError(f"unknown executor {executor!r}; choose local or dask")
    else:
        if not (getattr(target, "fork_safe", True) and getattr(draft, "fork_safe", True)):
            jobs = 1
        _STATE.clear()
        _STATE.update(state)
        try:
            if jobs > 1 and len(units) > 1:
                import multiprocessing

                with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                    futures = [pool.submit(_unit, ci) for ci in units]
                    try:
                        for fut in cf.as_completed(futures):
                            take(fut.result())
                    except BaseException:
                        for f in futures:
                            f.cancel()
                        raise
            else:
                for ci in units:
                    take(_unit(ci))
        finally:
            _STATE.clear()
    if sequence_bound:  # the workers could not say it: LP columns left empty, once per configuration
        for si, spec in enumerate(specs):
            if any(math.isnan(b[3]) for (i, _), b in bounds.items() if i == si):
                notify(f"{spec.label}: LP bounds left empty at some contexts (the LPs need every draft tree "
                       "enumerated, at tiny V, and a verified solution); 1 + sum_d alpha*_d is computed")
    return ExpectedRun(list(specs), list(contexts), values, options, int(seed), time.perf_counter() - t0, bounds)


__all__ = ["DEFAULT_DRAFT_SAMPLES", "DEFAULT_PRUNE", "DEFAULT_REPEATS", "DEFAULT_REPLICATES", "DEFAULT_TAIL_SAMPLES",
           "MAX_SEQUENCE_TREES", "METHODS", "TauOptions", "Comparison", "Context", "ContextValue", "ExpectedRun",
           "NoExactLaw", "check_exact", "compare_expected", "comparison_pairs", "context_tau", "enumerated_tau", "exact_tau",
           "recursive_tau",
           "mean_interval", "monte_carlo_tau", "parse_comparison", "per_context_table", "run_expected",
           "sample_contexts", "summarize_expected"]
