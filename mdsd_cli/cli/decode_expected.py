"""``mdsd decode --expected``: expected tokens per target call at shared contexts, exactly where possible."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..io import OutputSet, build_manifest
from .console import emit_table, info, show_progress, warn

EXPECTED_PANEL = "Expected tokens per call (--expected)"


class PairLoader:
    """Loads the run's model pair from its settings (a Dask worker calls it once per process)."""

    def __init__(self, settings: dict, trust_remote_code: bool):
        self.settings, self.trust_remote_code = dict(settings), trust_remote_code

    def __call__(self) -> dict:
        from .decode_pair import _load_pair

        pair = _load_pair(self.settings, trust_remote_code=self.trust_remote_code)
        return {"target": pair.target, "draft": pair.draft}


def run_expected_command(settings: dict, pair, specs, prompt_list, *, options, contexts_per_prompt: int,
                         compare: list[str], comparisons: Path | None, per_context: Path | None, jobs: int,
                         executor: str, scheduler: str | None, timeout: float, trust_remote_code: bool,
                         progress, quiet: bool, out, fmt, manifest_extra: dict) -> None:
    """Sample the contexts, compute tau at each for every configuration, write the tables."""
    from ..decode.expected import (
        compare_expected,
        comparison_pairs,
        parse_comparison,
        per_context_table,
        run_expected,
        sample_contexts,
        summarize_expected,
    )

    parsed = [parse_comparison(c) for c in compare]
    for comp in parsed:  # refused before the run, not after it
        comparison_pairs(specs, comp)
    if comparisons is not None and not parsed:
        raise InputError("--comparisons writes the --compare differences; give at least one --compare A,B")
    if executor not in ("local", "dask"):
        raise InputError(f"unknown executor {executor!r}; choose local or dask")
    if len(prompt_list) < 2:
        raise InputError(f"an interval over prompts needs at least 2 prompts, got {len(prompt_list)}; "
                         "give more --prompts")
    options = options.check()
    contexts = []
    temperatures = list(dict.fromkeys(s.temperature for s in specs if not s.plain))
    with show_progress("contexts", len(prompt_list) * len(temperatures), mode=progress, quiet=quiet) as advance:
        for T in temperatures:
            for prompt in prompt_list:
                contexts += sample_contexts(pair.target, [prompt], per_prompt=contexts_per_prompt,
                                            max_new_tokens=settings["max_new_tokens"], temperature=T,
                                            seed=settings["seed"])
                advance(1)
    client = None
    if executor == "dask":
        from ..sweep import _connect_dask

        client = _connect_dask(scheduler, timeout)
    try:
        with show_progress("expected", len(contexts), mode=progress, quiet=quiet) as advance:
            run = run_expected(pair.target, pair.draft, contexts, specs, options=options, seed=settings["seed"],
                               jobs=jobs, executor=executor, client=client,
                               loader=PairLoader(settings, trust_remote_code), progress=advance,
                               sequence_bound=settings["sequence_bound"], notify=None if quiet else info)
    finally:
        if client is not None:
            client.close()
    summary = summarize_expected(run, draft_cost=settings["draft_cost"], node_cost=settings["node_cost"])
    table = compare_expected(run, parsed) if parsed else None
    manifest = build_manifest("decode --expected", {
        **manifest_extra, "method": options.method, "prune": options.prune, "tail_samples": options.tail_samples,
        "replicates": options.replicates, "draft_samples": options.draft_samples, "repeats": options.repeats,
        "contexts_per_prompt": contexts_per_prompt, "contexts": len(contexts), "executor": executor,
        "compare": list(compare)}, models=pair.metadata, seconds=round(run.seconds, 3))
    outputs, wrote = OutputSet(manifest), []
    if per_context is not None:
        outputs.table(per_context_table(run), per_context)
        wrote.append(f"wrote per-context rows to {per_context}")
    if table is not None:
        if comparisons is not None:
            outputs.table(table, comparisons)
            wrote.append(f"wrote {len(table)} paired differences to {comparisons}")
        elif not quiet:
            cols = ["comparison", "temperature", "left", "difference", "difference_low", "difference_high", "t"]
            info("paired differences (95%, over prompts):\n" + table[cols].to_string(index=False))
    unresolved = summary[summary.method.str.contains("monte-carlo|sampled")]
    for row in unresolved.itertuples():
        if not quiet:
            info(f"{row.tree} {row.sampler}/{row.verifier} T={row.temperature:g}: {row.method} "
                 f"(per-context standard error {row.mc_stderr:.3g})")
    if summary.empty:
        warn("no configuration produced a value")
    emit_table(summary, out=out, fmt=fmt, quiet=quiet, also=outputs, wrote=tuple(wrote))


__all__ = ["EXPECTED_PANEL", "PairLoader", "run_expected_command"]
