"""``mdsd decode``: multi-draft speculative decoding with draft trees, end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from ..errors import DataFileError, InputError
from ..io import OutputSet, build_manifest, check_output_path
from .console import emit_table, show_progress, warn
from .decode_expected import EXPECTED_PANEL
from .decode_pair import HF_DEFAULTS, _check_model_settings, _load_pair, _prompts, _prompts_file
from .options import FormatOpt, OutOpt, ProgressOpt, QuietOpt, executor_options

MODEL_PANEL = "Models and prompts"
HF_PANEL = "Hugging Face models"
DECODE_PANEL = "Decoding"
COST_PANEL = "Cost model"
OUTPUT_PANEL = "Output"

#: The most tokens a prompt may ask for (a typo's 10^20 is refused, not run).
MAX_NEW_TOKENS = 1_000_000
#: Keys a --config TOML file may set (the long option names, with underscores).
CONFIG_KEYS = {
    "name": str, "description": str, "models": str, "vocab": int, "model_seed": int, "noise": (int, float),
    "prompts": (int, str), "max_new_tokens": int, "trees": list, "samplers": list, "verifiers": list,
    "temperatures": list, "seed": int, "draft_cost": (int, float), "node_cost": (int, float), "baselines": bool,
    "node_metrics": bool, "reuse_verifiers": bool, "sequence_bound": bool, "target": str, "draft": str,
    "device": str, "dtype": str, "revision": str, "draft_revision": str, "chat_template": bool, "scoring": str,
    "threads": int, "expected": bool, "contexts_per_prompt": int, "method": str, "prune": (int, float),
    "tail_samples": int, "replicates": int, "draft_samples": int, "repeats": int, "compare": list,
    "verify_on": str,
}
#: The command line's ranges, applied to --config values too: key -> (lowest, highest), None = unbounded.
CONFIG_RANGES = {"vocab": (2, None), "model_seed": (0, None), "noise": (0, None), "max_new_tokens": (1, MAX_NEW_TOKENS),
                 "seed": (0, None), "draft_cost": (0, None), "node_cost": (0, None), "threads": (1, None),
                 "contexts_per_prompt": (1, None), "prompts": (1, None)}
#: Settings of --expected runs (left out of a generation run's manifest).
EXPECTED_KEYS = ("expected", "contexts_per_prompt", "method", "prune", "tail_samples", "replicates", "draft_samples",
                 "repeats", "compare")
DEFAULTS = {"models": "pydoc-ngram", "vocab": 1000, "model_seed": 0, "noise": 1.0, "prompts": "16",
            "max_new_tokens": 64, "trees": ["2x4"], "samplers": [], "verifiers": ["rrs"], "temperatures": [1.0],
            "seed": 0, "draft_cost": 0.05, "node_cost": 0.0, "baselines": True, "node_metrics": True,
            "reuse_verifiers": False, "sequence_bound": False, "expected": False, "contexts_per_prompt": 4,
            "method": "auto", "prune": 1e-3, "tail_samples": 8, "replicates": 4, "draft_samples": 256, "repeats": 64,
            "compare": [], "verify_on": "auto"}

ExecutorOpt, SchedulerOpt, TimeoutOpt = executor_options(
    EXPECTED_PANEL, executor_help="With --expected: local (--jobs processes) or dask (contexts as tasks on --scheduler).")


def read_config(path: Path) -> dict:
    """A decode config (TOML): keys of :data:`CONFIG_KEYS`; tree files resolve against the config's directory."""
    from ..sweep_config import read_toml

    data = read_toml(path, missing=DataFileError)
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(CONFIG_KEYS))}")
    for key, value in data.items():
        kind = CONFIG_KEYS[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise InputError(f"{path}: {key} has the wrong type ({type(value).__name__})")
        if key in CONFIG_RANGES and not isinstance(value, str):
            low, high = CONFIG_RANGES[key]
            if not (math.isfinite(value) and value >= low and (high is None or value <= high)):
                span = f">= {low}" if high is None else f"between {low} and {high:,}"
                raise InputError(f"{path}: {key} = {value} is out of range; it must be {span} (as --{key.replace('_', '-')})")
    for t in data.get("temperatures", []):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t >= 0):
            raise InputError(f"{path}: temperatures must be numbers >= 0, got {t!r}")
    base = path.parent
    if "trees" in data:
        data["trees"] = [str(base / t) if str(t).lower().endswith(".json") and not Path(t).is_absolute() else str(t)
                         for t in data["trees"]]
    if isinstance(data.get("prompts"), str) and not data["prompts"].isdigit() and not Path(data["prompts"]).is_absolute():
        data["prompts"] = str(base / data["prompts"])
    return data


def decode(
    models: str | None = typer.Option(None, "--models", "-m", help="Model pair: pydoc-ngram (4-gram target, "
                                      "bigram draft; real text), pystdlib (the shipped neural pair: Llama-style "
                                      "4.5M target, 0.37M draft, trained on Python's standard library; needs torch "
                                      "and transformers; takes --device, --dtype, --scoring, --threads) or "
                                      "synthetic (context-hashed perturbed Zipf at --vocab). (default: pydoc-ngram)", rich_help_panel=MODEL_PANEL),
    target: str | None = typer.Option(None, "--target", help="Target causal LM instead of --models: a local "
                                      "directory or a Hugging Face name (needs torch and transformers).",
                                      rich_help_panel=HF_PANEL),
    draft: str | None = typer.Option(None, "--draft", help="Draft causal LM with the target's tokenizer: a local "
                                     "directory or a Hugging Face name.", rich_help_panel=HF_PANEL),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda or auto. (default: auto)",
                                      rich_help_panel=HF_PANEL),
    dtype: str | None = typer.Option(None, "--dtype", help="Model dtype: float32, float16, bfloat16. "
                                     "(default: float32)", rich_help_panel=HF_PANEL),
    revision: str | None = typer.Option(None, "--revision", help="Target revision (Hub).", rich_help_panel=HF_PANEL),
    draft_revision: str | None = typer.Option(None, "--draft-revision", help="Draft revision (Hub).",
                                              rich_help_panel=HF_PANEL),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Run model code shipped with the "
                                           "models (off by default; only for models you trust).",
                                           rich_help_panel=HF_PANEL),
    chat_template: bool = typer.Option(False, "--chat-template", help="Wrap each prompt as a user message in the "
                                       "target tokenizer's chat template.", rich_help_panel=HF_PANEL),
    scoring: str | None = typer.Option(None, "--scoring", help="auto: the whole tree in one pass with a tree "
                                       "attention mask on the KV cache if the model passes a check, else one "
                                       "sequence per root-to-leaf path (with a notice); tree or paths force one. "
                                       "(default: auto)", rich_help_panel=HF_PANEL),
    threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: torch's).",
                                       rich_help_panel=HF_PANEL),
    prompts: str | None = typer.Option(None, "--prompts", help="A number of built-in prompts (held-out text for "
                                       "pydoc-ngram), or a prompts file: one per line, or JSONL with 'prompt' (and "
                                       "'id'). (default: 16)", rich_help_panel=MODEL_PANEL),
    vocab: int | None = typer.Option(None, "--vocab", "-V", min=2, help="V of the synthetic pair. (default: 1000)",
                                     rich_help_panel=MODEL_PANEL),
    model_seed: int | None = typer.Option(None, "--model-seed", min=0, help="Seed of the synthetic pair.",
                                          rich_help_panel=MODEL_PANEL),
    noise: float | None = typer.Option(None, "--noise", min=0.0, help="Draft noise of the synthetic pair. "
                                       "(default: 1)", rich_help_panel=MODEL_PANEL),
    tree: list[str] | None = typer.Option(None, "--tree", help="Draft tree(s): KxD (2x4), per-depth widths "
                                          "(4,2,2,1), paths:KxL (paths:4x4) or a JSON file of child-index paths. "
                                          "Repeat for several. (default: 2x4)", rich_help_panel=DECODE_PANEL),
    sampler: list[str] | None = typer.Option(None, "--sampler", "-s", help="Draft sampler(s): iid, wor, greedy, "
                                             "hub, topk; each verifier runs on those it is lossless for. (default: each "
                                             "verifier's own)", rich_help_panel=DECODE_PANEL),
    verifier: list[str] | None = typer.Option(None, "--verifier", help="Verifier(s): per node nss, rrs, rrsw, kseq, "
                                              "hub, greedy, otm, optimal-iid, optimal-wor, topk; sequence-level block "
                                              "(chains), traversal, select-block, select-traversal and select-race (static trees, iid or "
                                              "wor); "
                                              "NAME:SAMPLER pins "
                                              "the draft law (nss:wor). Repeat for several. (default: rrs)",
                                              rich_help_panel=DECODE_PANEL),
    temperature: list[float] | None = typer.Option(None, "--temperature", "-t", min=0.0, help="Temperature(s) of "
                                                   "both models (0 = greedy). (default: 1)", rich_help_panel=DECODE_PANEL),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", min=1, max=MAX_NEW_TOKENS, help="Tokens to generate per prompt. "
                                              "(default: 64)", rich_help_panel=DECODE_PANEL),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Seed; each (configuration, prompt) has its own "
                                    "stream, so results do not depend on --jobs. (default: 0)",
                                    rich_help_panel=DECODE_PANEL),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Worker processes.", rich_help_panel=DECODE_PANEL),
    no_baselines: bool = typer.Option(False, "--no-baselines", help="Leave out plain target sampling and the "
                                      "single-draft chain 1xD.", rich_help_panel=DECODE_PANEL),
    no_node_metrics: bool = typer.Option(False, "--no-node-metrics", help="Skip α* and the verifier's exact "
                                         "acceptance at the visited nodes (saves their computation; those columns "
                                         "are empty).", rich_help_panel=DECODE_PANEL),
    verify_on: str | None = typer.Option(None, "--verify-on", metavar="auto|device|host", help="Where the "
                                         "per-node verifiers run: device verifies every node of a tree in one "
                                         "batched torch call where the target's logits are (also on the CPU), "
                                         "host in numpy node by node; auto: device when the logits are on an "
                                         "accelerator. Same law, other random streams. (default: auto)",
                                         rich_help_panel=DECODE_PANEL),
    reuse_verifiers: bool = typer.Option(False, "--reuse-verifiers", help="Reuse a verifier's set-up when the "
                                         "same (p, q, n) comes back (n-gram contexts repeat): the same tokens, "
                                         "less time, but verification times no longer show one set-up per node.",
                                         rich_help_panel=DECODE_PANEL),
    sequence_bound: bool = typer.Option(False, "--sequence-bound", help="Also report the sequence-level bounds at "
                                        "every step's root: 1 + sum_d α*_d (exact for chains, paths:KxL with iid "
                                        "drafts and depth 1; an upper bound elsewhere) and, where every tree can be "
                                        "enumerated (tiny V), the LP optimum over all lossless verifiers; plus the "
                                        "per-node α* figure. Costs V^(d-1) model calls per depth d and, where the "
                                        "LPs run, seconds per step (2-3 s at V = 4, depth 2); Ctrl-C while they run "
                                        "writes the table without them.",
                                        rich_help_panel=DECODE_PANEL),
    config: Path | None = typer.Option(None, "--config", help="A TOML file setting any of the options above "
                                       "(models, prompts, trees, samplers, verifiers, temperatures, ...); "
                                       "options given on the command line win.", dir_okay=False,
                                       rich_help_panel=DECODE_PANEL),
    draft_cost: float | None = typer.Option(None, "--draft-cost", min=0.0, help="Cost of one draft pass in target "
                                            "passes, c. (default: 0.05)", rich_help_panel=COST_PANEL),
    node_cost: float | None = typer.Option(None, "--node-cost", min=0.0, help="Extra cost of each scored tree node "
                                           "beyond the root, in target passes (0: a target pass costs the same "
                                           "whatever the tree's size). (default: 0)", rich_help_panel=COST_PANEL),
    out: OutOpt = None,
    fmt: FormatOpt = None,
    steps: Path | None = typer.Option(None, "--steps", help="Also write one row per step to this file "
                                      "(.csv or .parquet).", dir_okay=False, rich_help_panel=OUTPUT_PANEL),
    per_prompt: Path | None = typer.Option(None, "--per-prompt", help="Also write one row per (configuration, "
                                           "prompt) to this file (.csv or .parquet), for paired comparisons.",
                                           dir_okay=False, rich_help_panel=OUTPUT_PANEL),
    text: Path | None = typer.Option(None, "--text", help="Also write the generated text, one JSON record per "
                                     "(configuration, prompt), to this file.", dir_okay=False,
                                     rich_help_panel=OUTPUT_PANEL),
    timings: Path | None = typer.Option(None, "--timings", help="Write the wall-time columns to this file instead "
                                        "of the summary (which is then the same for the same seed).",
                                        dir_okay=False, rich_help_panel=OUTPUT_PANEL),
    no_timing: bool = typer.Option(False, "--no-timing", help="Leave out the wall-time columns.",
                                   rich_help_panel=OUTPUT_PANEL),
    expected: bool = typer.Option(False, "--expected", help="Instead of generating, compute tau(c), the expected "
                                  "tokens of one step, at shared contexts (positions in a target continuation of "
                                  "each prompt): exactly by recursion over the accepted tokens where the verifier "
                                  "has an exact law (a certified interval where pruned), else from sampled draft "
                                  "tuples or repeated steps; every configuration on the same contexts, so "
                                  "differences are paired (--compare).", rich_help_panel=EXPECTED_PANEL),
    contexts_per_prompt: int | None = typer.Option(None, "--contexts-per-prompt", min=1, help="Positions per prompt "
                                            "(drawn from 0..max-new-tokens-1 of its target continuation). (default: 4)",
                                            rich_help_panel=EXPECTED_PANEL),
    method: str | None = typer.Option(None, "--method", help="auto (exact where it can be, else sampled draft tuples or "
                               "Monte Carlo), exact (refused where there is no exact law), sampled-drafts, "
                               "monte-carlo (repeat the step). (default: auto)", rich_help_panel=EXPECTED_PANEL),
    prune: float | None = typer.Option(None, "--prune", help="Path probability under which the exact recursion stops "
                                "(in [0, 1); 0: nothing pruned): what is pruned widens the certified interval and "
                                "is sampled (--tail-samples) for the point estimate. (default: 0.001)", rich_help_panel=EXPECTED_PANEL),
    tail_samples: int | None = typer.Option(None, "--tail-samples", help="Pruned children expanded per level, drawn in "
                                     "proportion to their probability. (default: 8)", rich_help_panel=EXPECTED_PANEL),
    replicates: int | None = typer.Option(None, "--replicates", help="Independent draws of the sampled parts per context "
                                   "(for its standard error; >= 2). (default: 4)", rich_help_panel=EXPECTED_PANEL),
    draft_samples: int | None = typer.Option(None, "--draft-samples", help="Draft tuples per node where a verifier's law "
                                      "is estimated (sampled-drafts). (default: 256)", rich_help_panel=EXPECTED_PANEL),
    repeats: int | None = typer.Option(None, "--repeats", help="Steps per context for --method monte-carlo (>= 2). "
                                       "(default: 64)",
                                rich_help_panel=EXPECTED_PANEL),
    compare: list[str] | None = typer.Option(None, "--compare", help="A paired difference tau(A) - tau(B) to "
                                             "report: A,B with each side VERIFIER[:SAMPLER] (on every tree) or "
                                             "TREE/VERIFIER[:SAMPLER], e.g. kseq,rrs or 4x3/rrs,1x3/rrs. Repeat for "
                                             "several.", rich_help_panel=EXPECTED_PANEL),
    comparisons: Path | None = typer.Option(None, "--comparisons", help="Write the --compare differences to this "
                                            "file (.csv or .parquet; else they are shown on stderr).",
                                            dir_okay=False, rich_help_panel=EXPECTED_PANEL),
    per_context: Path | None = typer.Option(None, "--per-context", help="Also write one row per (configuration, "
                                            "context) to this file.", dir_okay=False, rich_help_panel=EXPECTED_PANEL),
    executor: ExecutorOpt = "local",
    scheduler: SchedulerOpt = None,
    timeout: TimeoutOpt = 10.0,
    progress: ProgressOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Generate with draft trees: tokens per target call, acceptance by depth, time and speed-up.

    Each step drafts a tree level by level (one draft pass per depth, each node's
    children drawn jointly by the draft sampler), scores every node with one
    target pass, and walks down with the verifier at each node: a child's token
    moves to that child, any other token ends the step, a leaf adds a bonus token
    from the target. Lossless for every lossless verifier.

    One summary row per (tree, sampler, verifier, temperature), plus plain target
    sampling and the single-draft chain 1xD as baselines: block efficiency with
    its 95% interval, the fraction of steps accepting at depth >= k, realised
    acceptance next to α* of the visited nodes, time split into draft model,
    drafting bookkeeping, target model and verification, tokens/s, and the
    speed-up under the cost model tau / (1 + c D + b (N - 1)).

    Models: a built-in pair (--models), or any two Hugging Face causal LMs with
    one tokenizer (--target, --draft; prompts from a file): the draft grows the
    tree with one cached pass per depth, the target scores it in one pass with a
    tree attention mask on its KV cache, and both caches keep the accepted path.

    --expected computes instead tau(c), the expected tokens of one step, at the
    same contexts for every configuration (see docs/decode.md): no sampling noise
    where the verifier's law is exact, and paired differences (--compare).
    """
    from ..decode import plan_decode, run_decode
    from ..decode.metrics import prompts_table, steps_table, summarize, text_records, timings_table

    outputs = {"--out": out, "--steps": steps, "--per-prompt": per_prompt, "--text": text, "--timings": timings,
               "--comparisons": comparisons, "--per-context": per_context}
    seen: dict = {}
    for option, path in outputs.items():
        if path is None:
            continue
        check_output_path(path)
        key = Path(path).resolve()
        if key in seen:  # one file would silently overwrite the other
            raise InputError(f"{seen[key]} and {option} both write {path}; give each output its own file")
        seen[key] = option

    settings = {**DEFAULTS, **HF_DEFAULTS}
    from_file = read_config(config) if config is not None else {}
    settings.update(from_file)
    given = {"models": models, "vocab": vocab, "model_seed": model_seed, "noise": noise, "prompts": prompts,
             "max_new_tokens": max_new_tokens, "trees": tree, "samplers": sampler, "verifiers": verifier,
             "temperatures": temperature, "seed": seed, "draft_cost": draft_cost, "node_cost": node_cost,
             "target": target, "draft": draft, "device": device, "dtype": dtype, "revision": revision,
             "draft_revision": draft_revision, "scoring": scoring, "threads": threads, "verify_on": verify_on,
             "contexts_per_prompt": contexts_per_prompt, "method": method, "prune": prune,
             "tail_samples": tail_samples, "replicates": replicates, "draft_samples": draft_samples,
             "repeats": repeats, "compare": compare}
    settings.update({k: v for k, v in given.items() if v not in (None, [])})
    if chat_template:
        settings["chat_template"] = True
    _check_model_settings(settings, given_models=models is not None or "models" in from_file)
    hf = settings.get("target") is not None
    if jobs > 1 and hf:
        warn("Hugging Face models run in one process; --jobs is ignored")
    if no_baselines:
        settings["baselines"] = False
    if no_node_metrics:
        settings["node_metrics"] = False
    if reuse_verifiers:
        settings["reuse_verifiers"] = True
    if sequence_bound:
        settings["sequence_bound"] = True
    if expected:
        settings["expected"] = True
    expected = settings["expected"]
    if expected:
        given_generation = {"--steps": steps, "--per-prompt": per_prompt, "--text": text, "--timings": timings}
        clash = [name for name, value in given_generation.items() if value is not None]
        if clash:
            raise InputError(f"{clash[0]} describes a generation run; --expected writes --per-context and "
                             "--comparisons instead")
    else:
        given_expected = {"--compare": compare, "--comparisons": comparisons, "--per-context": per_context,
                          "--executor": executor if executor != "local" else None, "--scheduler": scheduler,
                          "--method": method, "--prune": prune, "--contexts-per-prompt": contexts_per_prompt}
        clash = [name for name, value in given_expected.items() if value not in (None, [])]
        if clash:
            raise InputError(f"{clash[0]} applies to --expected; add --expected")
    if settings["models"] != "synthetic" and (vocab is not None or model_seed is not None or noise is not None):
        raise InputError("--vocab, --model-seed and --noise shape the synthetic pair; use them with --models synthetic")

    if hf:  # a missing prompts file is reported before the models load
        _prompts_file(str(settings["prompts"]))
    pair = _load_pair(settings, trust_remote_code=trust_remote_code, quiet=quiet)
    specs, skipped = plan_decode(settings["trees"], settings["verifiers"], samplers=settings["samplers"],
                                 temperatures=settings["temperatures"], vocab_size=pair.vocab_size,
                                 baselines=settings["baselines"])
    for message in skipped:
        warn(message)
    prompt_list = _prompts(pair, str(settings["prompts"]))
    if expected:
        from ..decode.expected import TauOptions
        from .decode_expected import run_expected_command

        dropped = (("models", "vocab", "model_seed", "noise") if hf else ("vocab", "model_seed", "noise",
                                                                          *HF_DEFAULTS, "target", "draft"))
        dropped = (*dropped, *EXPECTED_KEYS, "reuse_verifiers", "node_metrics")
        run_expected_command(
            settings, pair, specs, prompt_list,
            options=TauOptions(method=settings["method"], prune=settings["prune"],
                               tail_samples=settings["tail_samples"], replicates=settings["replicates"],
                               draft_samples=settings["draft_samples"], repeats=settings["repeats"]),
            contexts_per_prompt=settings["contexts_per_prompt"], compare=list(settings["compare"]),
            comparisons=comparisons,
            per_context=per_context, jobs=jobs, executor=executor, scheduler=scheduler, timeout=timeout,
            trust_remote_code=trust_remote_code, progress=progress, quiet=quiet, out=out, fmt=fmt,
            manifest_extra={**{k: v for k, v in settings.items() if k not in dropped},
                            "prompts": str(settings["prompts"]), "prompt_count": len(prompt_list), "jobs": jobs,
                            "config_file": str(config) if config else None,
                            "trees": {s.tree.label: s.tree.describe() for s in specs if not s.plain},
                            "skipped": skipped})
        return
    units = len(specs) * len(prompt_list)
    with show_progress("decode", units, mode=progress, quiet=quiet) as advance:
        run = run_decode(pair.target, pair.draft, prompt_list, specs, max_new_tokens=settings["max_new_tokens"],
                         seed=settings["seed"], jobs=jobs, node_metrics=settings["node_metrics"],
                         reuse_verifiers=settings["reuse_verifiers"], progress=advance,
                         verify_on=settings["verify_on"])
    bounds = None
    if settings["sequence_bound"]:
        from ..decode.bounds import run_bounds

        try:
            with show_progress("bounds", len(run.runs), mode=progress, quiet=quiet) as advance:
                bounds = run_bounds(run, pair.target, pair.draft, progress=advance, notify=warn)
        except KeyboardInterrupt:  # the generation is done: keep it
            warn("interrupted while computing the sequence-level bounds; writing the table without them")
            bounds = None
    summary = summarize(run, draft_cost=settings["draft_cost"], node_cost=settings["node_cost"],
                        timing=not no_timing, bounds=bounds)
    dropped = ("models", "vocab", "model_seed", "noise") if hf else ("vocab", "model_seed", "noise", *HF_DEFAULTS,
                                                                     "target", "draft")
    dropped = (*dropped, *EXPECTED_KEYS)
    manifest = build_manifest("decode", {
        **{k: v for k, v in settings.items() if k not in dropped},
        **({"vocab": settings["vocab"], "model_seed": settings["model_seed"], "noise": settings["noise"]}
           if settings["models"] == "synthetic" and not hf else {}),
        **({"trust_remote_code": trust_remote_code} if hf else {}),
        "prompts": str(settings["prompts"]), "prompt_count": len(prompt_list), "jobs": jobs,
        "config_file": str(config) if config else None,
        "trees": {s.tree.label: s.tree.describe() for s in specs if not s.plain},
        "skipped": skipped,
    }, models=pair.metadata, seconds=round(run.seconds, 3))
    outputs, wrote = OutputSet(manifest), []
    if steps is not None:
        outputs.table(steps_table(run, timing=not no_timing), steps)
        wrote.append(f"wrote per-step rows to {steps}")
    if per_prompt is not None:
        outputs.table(prompts_table(run), per_prompt)
        wrote.append(f"wrote per-prompt rows to {per_prompt}")
    if text is not None:
        outputs.text(text, "".join(json.dumps(r) + "\n" for r in text_records(run, pair.target)))
        wrote.append(f"wrote generated text to {text}")
    if timings is not None and not no_timing:
        outputs.table(timings_table(summary), timings)
        summary = summary.drop(columns=[c for c in timings_table(summary).columns
                                        if c not in ("tree", "sampler", "verifier", "temperature")])
        wrote.append(f"wrote wall times to {timings}")
    emit_table(summary, out=out, fmt=fmt, quiet=quiet, also=outputs, wrote=tuple(wrote))

__all__ = ["decode", "read_config"]
