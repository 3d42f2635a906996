"""``mdsd dump`` and ``mdsd datasets``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from ..errors import InputError
from .console import emit_table, err_console, info, warn
from .options import FormatOpt, ProgressOpt, QuietOpt

DUMP_PANEL = "Models"
RUN_PANEL = "Decoding"
STORE_PANEL = "Storage"


def dump(
    target: str = typer.Option(..., "--target", help="Target causal LM: local directory or Hugging Face name.",
                               rich_help_panel=DUMP_PANEL),
    draft: str = typer.Option(..., "--draft", help="Draft causal LM: local directory or Hugging Face name.",
                              rich_help_panel=DUMP_PANEL),
    prompts: Path = typer.Option(..., "--prompts", help="Prompts: a text file (one per line) or JSONL with a "
                                 "'prompt' field (and 'reference' for --mode score, optional 'id').",
                                 rich_help_panel=DUMP_PANEL, dir_okay=False),
    out: Path = typer.Option(..., "--out", "-o", help="Dump directory (created with its parents; an existing dump "
                             "is resumed; a first run that fails leaves nothing behind).",
                             rich_help_panel=STORE_PANEL),
    mode: str = typer.Option("generate", "--mode", help="generate: the target samples a continuation; "
                             "score: teacher-force the JSONL 'reference'.", rich_help_panel=RUN_PANEL),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", min=1, help="Positions per prompt.",
                                       rich_help_panel=RUN_PANEL),
    temperature: float = typer.Option(1.0, "--temperature", "-t", min=0.0,
                                      help="Sampling temperature of the target in generate mode (0 = greedy). "
                                      "Logits are stored untempered.", rich_help_panel=RUN_PANEL),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed; each prompt has its own stream.",
                             rich_help_panel=RUN_PANEL),
    device: str = typer.Option("auto", "--device", help="cpu, cuda or auto.", rich_help_panel=RUN_PANEL),
    dtype: str = typer.Option("float32", "--dtype", help="Model compute dtype: float32, float16, bfloat16.",
                              rich_help_panel=RUN_PANEL),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="Prompts per forward pass.",
                                   rich_help_panel=RUN_PANEL),
    store_dtype: str = typer.Option("float16", "--store-dtype", help="Logit storage: float16 or float32.",
                                    rich_help_panel=STORE_PANEL),
    rows_per_shard: int = typer.Option(256, "--rows-per-shard", min=1,
                                       help="Positions per Parquet shard (bounds memory).",
                                       rich_help_panel=STORE_PANEL),
    allow_vocab_mismatch: bool = typer.Option(False, "--allow-vocab-mismatch",
                                              help="Align different vocabularies on their shared prefix of ids.",
                                              rich_help_panel=DUMP_PANEL),
    revision: str | None = typer.Option(None, "--revision", help="Target revision (Hub).",
                                        rich_help_panel=DUMP_PANEL),
    draft_revision: str | None = typer.Option(None, "--draft-revision", help="Draft revision (Hub).",
                                              rich_help_panel=DUMP_PANEL),
    quiet: QuietOpt = False,
    progress: ProgressOpt = "auto",
) -> None:
    """Record the next-token logits of a target and a draft model at every step.

    Streams Parquet shards of whole prompts into the --out directory with a
    manifest.json (models, revisions, tokenizer, vocabulary, seed...). Rerunning
    the same command resumes an interrupted dump. Any command's --data reads the
    directory. Needs torch and transformers: install a torch build, then pip install -e '.[hf]'
    from the mdsd clone. A model name that is a local path must exist; a Hub name needs the network
    (or HF_HUB_OFFLINE=1 and the local Hugging Face cache).
    """
    from ..datasets.hf import dump as run_dump
    from .console import show_progress

    with show_progress("tokens", 0, mode=progress, quiet=quiet) as advance:
        def on_event(event, **data):
            if event == "start":
                advance.set_total(data["total"])
            elif event == "tokens":
                advance(data["count"])

        try:
            summary = run_dump(target=target, draft=draft, prompts_path=prompts, out=out, mode=mode,
                               max_new_tokens=max_new_tokens, temperature=temperature, device=device, dtype=dtype,
                               batch_size=batch_size, store_dtype=store_dtype, rows_per_shard=rows_per_shard,
                               seed=seed, allow_vocab_mismatch=allow_vocab_mismatch, revision=revision,
                               draft_revision=draft_revision, notify=warn, progress=on_event)
        except KeyboardInterrupt:
            if out.exists():
                message = f"Interrupted: the shards already in {out} are kept; rerun the same command to resume."
            else:
                message = "Interrupted before any prompt was stored; nothing was written."
            err_console().print(message, markup=False)
            raise typer.Exit(130) from None
    info(f"dumped {summary.rows_written} positions of {summary.prompts_done} prompts "
         f"({summary.prompts_skipped} already done) to {summary.directory} (V={summary.vocab_size})", quiet=quiet)


def datasets(
    data: str | None = typer.Argument(None, help="A built-in name, a pair file or a dump directory to describe."),
    fmt: FormatOpt = None,
) -> None:
    """List the built-in datasets, or describe one dataset, file or dump.

    Without an argument: one row per built-in dataset. With one: a JSON object
    with its shape, stored dtype, vocabulary, positions, labels and metadata.
    """
    from ..datasets import BUILTIN, describe

    if data is None:
        import pandas as pd

        rows = [{"name": d.name, "description": d.description} for d in BUILTIN.values()]
        emit_table(pd.DataFrame(rows), fmt=fmt or "table", quiet=True)
        return
    if fmt is not None and getattr(fmt, "value", fmt) not in ("json",):
        raise InputError("describing a dataset prints JSON; drop --format")
    sys.stdout.write(json.dumps(describe(data), indent=2, default=str) + "\n")
