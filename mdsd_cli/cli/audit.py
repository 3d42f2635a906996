"""``mdsd audit``: is someone's verifier lossless, and how far is its acceptance from α*?"""

from __future__ import annotations

import contextlib
import sys
from enum import Enum
from pathlib import Path

import typer

from .._stdio import stdout_fd_to_stderr
from ..io import build_manifest, check_output_path
from .console import emit_table, info, show_progress, warn
from .options import (
    COMPUTE_PANEL,
    DATA_PANEL,
    FormatOpt,
    OutOpt,
    ProgressOpt,
    QuietOpt,
    SeedOpt,
    choice,
    metavar,
)

AUDIT_PANEL = "The function"


class AuditSampler(str, Enum):
    iid = "iid"
    wor = "wor"
    greedy = "greedy"
    hub = "hub"
    topk = "topk"


class AuditDtype(str, Enum):
    float64 = "float64"
    float32 = "float32"
    float16 = "float16"


def _cases(sources: list[str], n: int, *, seed: int, count: int, pairs: int | None, dtype: str):
    from ..audit import battery_cases, pair_cases, random_cases

    cases = []
    for source in dict.fromkeys(sources):
        if source == "battery":
            cases += battery_cases(n, dtype=dtype)
        elif source == "random":
            cases += random_cases(count, seed=seed)
        else:
            from ..datasets import load_data

            batch = load_data(source)
            if pairs is not None and pairs < batch.num_pairs:
                batch = batch.select(slice(0, pairs))
            cases += pair_cases(batch, prefix=Path(source).stem)
    return cases


def audit(
    function: str = typer.Argument(..., metavar="FUNCTION", help="The verifier to audit: PATH.py:function, "
                                   "module:function, or mdsd:NAME for one of mdsd's own (e.g. mdsd:rrs). It is "
                                   "called as function(p, q, drafts, rng) and returns a token or (token, "
                                   "accepted_index)."),
    sampler: str = typer.Option("iid", "--sampler", "-s", help="The draft law the function is meant for; the "
                                "audit draws the drafts from it.", callback=choice(AuditSampler),
                                metavar=metavar(AuditSampler), rich_help_panel=AUDIT_PANEL),
    drafts: int = typer.Option(..., "--drafts", "-n", min=1, help="Number of drafts.", rich_help_panel=AUDIT_PANEL),
    law: str | None = typer.Option(None, "--law", metavar="FUNCTION", help="The function's exact conditional law, "
                                   "law(p, q, drafts) -> probabilities [V]: on cases whose draft tuples can be "
                                   "enumerated the output law is then computed exactly (a proof, or disproof).",
                                   rich_help_panel=AUDIT_PANEL),
    use_torch: bool = typer.Option(False, "--torch", help="The function takes torch tensors (p, q in --dtype, "
                                   "drafts int64) and a torch.Generator.", rich_help_panel=AUDIT_PANEL),
    batched: bool = typer.Option(False, "--batched", help="The function wants a batch of one: p, q [1, V], "
                                 "drafts [1, k].", rich_help_panel=AUDIT_PANEL),
    device: str = typer.Option("cpu", "--device", help="torch device of the tensors (with --torch).",
                               rich_help_panel=AUDIT_PANEL),
    dtype: str = typer.Option("float64", "--dtype", help="Float type of the p and q the function receives "
                              "(the audit tests against those values).", callback=choice(AuditDtype),
                              metavar=metavar(AuditDtype), rich_help_panel=AUDIT_PANEL),
    cases: list[str] | None = typer.Option(None, "--cases", metavar="battery|random|FILE", help="Where to audit: "
                                           "the adversarial battery, random small pairs, or pairs from a file "
                                           "(.npz, .parquet, a dump, a built-in dataset). Repeat to combine. "
                                           "(default: battery)", rich_help_panel=DATA_PANEL),
    count: int = typer.Option(10, "--count", min=1, help="Number of random cases (--cases random).",
                              rich_help_panel=DATA_PANEL),
    pairs: int | None = typer.Option(None, "--pairs", min=1, help="Only the first N pairs of each file.",
                                     rich_help_panel=DATA_PANEL),
    budget: int = typer.Option(1_000_000, "--budget", min=1, help="Calls of the function in all, shared equally "
                               "by the cases.", rich_help_panel=COMPUTE_PANEL),
    alpha: float = typer.Option(0.01, "--alpha", min=0.0, max=1.0, help="Family-wise significance level: a "
                                "lossless function is reported lossy with probability at most alpha "
                                "(Bonferroni over the cases).", rich_help_panel=COMPUTE_PANEL),
    fail_fast: bool = typer.Option(False, "--fail-fast", help="Stop at the first case found lossy or failing; "
                                   "the cases left unfinished are reported 'stopped'.",
                                   rich_help_panel=COMPUTE_PANEL),
    rounding: float = typer.Option(1e-6, "--rounding", min=0.0, max=0.5, help="With --law: an exact output law "
                                   "within this of p (but not within 1e-9) is reported 'rounding', with its size, "
                                   "not 'lossy'; 0 counts every departure as a loss.", rich_help_panel=COMPUTE_PANEL),
    timeout: float = typer.Option(60.0, "--timeout", min=0.0, metavar="SECONDS", help="A call of the function "
                                  "(or the law) still running after between SECONDS and twice that is its case's "
                                  "error, with the drafts that replay it; 0: no limit. Loading the function gets "
                                  "the same time.", rich_help_panel=COMPUTE_PANEL),
    seed: SeedOpt = 0,
    out: OutOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Audit a verifier: is its output distributed as p, and how far is its acceptance from α*?

    The function is called on draft tuples drawn from the exact draft law, stratified
    (each tuple, or multiset, with its exact probability; more calls where the outputs
    vary), over an adversarial battery of cases. Per case: the total variation of the
    estimated output law to p, an anytime-valid sequential test (statistic, p-value),
    the acceptance rate ± standard error, α* of the draft law (exact) and the gap; for
    a failure, the draft tuples contributing most, with the seed that replays them.
    Exit code 1 if any case is found lossy at the family-wise level --alpha, or the
    function fails on one; 0 otherwise, which does not prove it lossless. What the
    function prints or writes to file descriptor 1 goes to stderr: stdout holds only
    the table. Ctrl-C stops the audit after the round in progress and writes the table
    of what it found (unfinished cases 'stopped'), with exit code 130.
    """
    from ..audit import adapt_callable, audit_verifier, load_callable
    from ..audit.guards import loading_deadline
    from ..errors import InputError

    if out is not None:
        check_output_path(out)
    if not 0.0 < alpha < 1.0:
        raise InputError(f"--alpha must lie strictly between 0 and 1, got {alpha}")
    sampler_name, dtype_name = sampler.value, dtype.value
    limit = timeout if timeout > 0 else None
    # stdout is for the table: what the user's code prints or writes to fd 1, on import or in its calls,
    # goes to stderr
    with contextlib.redirect_stdout(sys.stderr), stdout_fd_to_stderr(), loading_deadline(limit, function):
        fn = load_callable(function, n=drafts, sampler=sampler_name)
        law_fn = load_callable(law, n=drafts, sampler=sampler_name, law=True) if law is not None else None
    if use_torch or batched:
        fn = adapt_callable(fn, framework="torch" if use_torch else "numpy", batched=batched, device=device)
    sources = list(cases or ["battery"])
    case_list = _cases(sources, drafts, seed=seed, count=count, pairs=pairs, dtype=dtype_name)
    per_case = budget // max(len(case_list), 1)
    with show_progress("audit", per_case * len(case_list), mode=progress, quiet=quiet) as advance, \
            contextlib.redirect_stdout(sys.stderr), stdout_fd_to_stderr():
        report = audit_verifier(fn, sampler=sampler_name, n=drafts, cases=case_list, budget=budget, alpha=alpha,
                                seed=seed, law=law_fn, dtype=dtype_name, fail_fast=fail_fast, progress=advance,
                                rounding=rounding, timeout=limit)
    df = report.to_frame()
    if law is None:
        df = df.drop(columns="exact_error")
    config = {"function": function, "law": law, "sampler": sampler_name, "n": drafts, "cases": sources,
              "count": count, "pairs": pairs, "budget": budget, "alpha": alpha, "seed": seed, "dtype": dtype_name,
              "torch": use_torch, "batched": batched, "fail_fast": fail_fast, "rounding": rounding,
              "timeout": limit, "interrupted": report.interrupted}
    emit_table(df, out=out, fmt=fmt, manifest=build_manifest("audit", config), quiet=quiet)
    for note in report.notes:
        warn(note)
    for line in report.details():
        info(line)
    if report.interrupted:
        info(report.verdict())
        raise typer.Exit(130)
    if not report.passed:
        info(report.verdict())
        raise typer.Exit(1)
    info(report.verdict(), quiet=quiet)


__all__ = ["audit"]
