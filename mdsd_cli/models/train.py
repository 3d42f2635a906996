"""Train the ``pystdlib`` pair: two small causal LMs on the Python standard library's source, from a seed.

Run as ``python -m mdsd_cli.models.train --out DIR [--seed 0]``. Everything is a
deterministic function of the seed and the running interpreter's standard library:

* **corpus** (:func:`corpus_files`): the ``.py`` files under
  ``sysconfig.get_paths()["stdlib"]``, sorted by relative path, leaving out any
  file below a directory named ``test``, ``tests``, ``idle_test`` or
  ``site-packages`` (:data:`EXCLUDED_DIRS`). A file is **held out** when the
  sha256 of its relative path (``asyncio/events.py``), read as an integer, is
  0 mod 20 (:func:`is_held_out`); the rest is training text. Each file's tokens
  are followed by ``<|endoftext|>``, in sorted order.
* **tokenizer**: byte-level BPE (the ``tokenizers`` library) of
  :attr:`TrainConfig.vocab_size` tokens, trained on the training files only.
* **models**: Llama-style causal LMs (RMSNorm, rotary positions, SwiGLU, tied
  embeddings) of a fixed context (:attr:`TrainConfig.context`): a **target**
  of a few million parameters and a **draft** about ten times smaller, each
  trained for a fixed number of steps of AdamW (linear warm-up, cosine decay)
  on next-token cross-entropy (the draft's loss can add the KL divergence
  from the target's next-token law, :attr:`TrainConfig.distill`; off by
  default).
  Batches are non-overlapping training windows in a seeded permutation per
  epoch; initial weights come from ``torch.manual_seed``.
* **evaluation** (:func:`evaluate_pair`): on the first
  :attr:`TrainConfig.eval_windows` non-overlapping windows of the held-out
  text, the token-level perplexity of each model and the mean draft
  acceptance at T = 1, :math:`\\frac1N \\sum_t \\sum_v \\min(p_t(v), q_t(v))`,
  over every position ``t`` of those windows; computed in float32 on the
  float16 weights as saved and loaded back.

The corpus, its split, the tokenizer and the windows are in :mod:`.train_corpus`.

``DIR`` receives ``target/`` and ``draft/`` (Hugging Face directories: config,
float16 safetensors, tokenizer), ``heldout.json`` (the first
:attr:`TrainConfig.shipped_windows` held-out windows, as token ids: the
built-in prompts and the tests' evaluation slice) and ``manifest.json``
(settings, versions, corpus digest, parameter counts, the evaluation,
seconds). The pair shipped in ``mdsd_cli/models/pystdlib/`` is this script's
output for seed 0 (1,564 s on 2 CPU cores, two torch threads); see ``docs/pystdlib.md``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataFileError, InputError, MdsdError
from .train_corpus import (
    END_OF_TEXT,
    EXCLUDED_DIRS,
    HELD_OUT_MODULUS,
    HELD_OUT_RULE,
    Corpus,
    corpus_files,
    is_held_out,
    read_corpus,
    stdlib_root,
    token_stream,
    train_tokenizer,
    windows,
)

#: Bumped when a change to this script changes what it trains.
SCRIPT_VERSION = 1


@dataclass(frozen=True)
class ModelShape:
    """A Llama-style decoder: width, depth, attention heads, SwiGLU width, and its training."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    steps: int
    #: windows per optimiser step (``batch * context`` tokens)
    batch: int
    learning_rate: float


@dataclass(frozen=True)
class TrainConfig:
    """Everything but the seed and the corpus that the trained pair depends on."""

    vocab_size: int = 4096
    context: int = 256
    target: ModelShape = field(default_factory=lambda: ModelShape(256, 4, 8, 768, 2000, 8, 2e-3))
    draft: ModelShape = field(default_factory=lambda: ModelShape(64, 2, 4, 192, 1500, 16, 3e-3))
    #: weight of KL(target || draft) in the draft's loss (0: plain next-token training)
    distill: float = 0.0
    warmup: float = 0.05
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    #: held-out windows of the evaluation recorded in the manifest
    eval_windows: int = 256
    #: held-out windows shipped in heldout.json (the tests' evaluation slice and the built-in prompts)
    shipped_windows: int = 32
    #: held-out windows of the loss printed while training
    monitor_windows: int = 8
    #: steps between two held-out losses while training
    monitor_every: int = 50


# --- models ------------------------------------------------------------------------------------

def build_model(shape: ModelShape, config: TrainConfig, tokenizer):
    """A freshly initialised Llama-style causal LM of ``shape`` (seed torch first)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = tokenizer.eos_token_id
    llama = LlamaConfig(vocab_size=len(tokenizer), hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                        num_key_value_heads=shape.heads, max_position_embeddings=config.context,
                        tie_word_embeddings=True, bos_token_id=ids, eos_token_id=ids, pad_token_id=ids)
    return LlamaForCausalLM(llama)


def parameter_count(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def learning_rate(step: int, steps: int, peak: float, *, warmup: float, min_ratio: float) -> float:
    r"""Linear warm-up over the first ``warmup`` fraction of steps, then cosine decay to ``min_ratio * peak``:

    .. math:: \eta_s = \eta_{\min} + \tfrac12 (\eta - \eta_{\min}) (1 + \cos(\pi (s - w)/(S - w))), \quad s \ge w.
    """
    w = max(1, int(round(warmup * steps)))
    if step < w:
        return peak * (step + 1) / w
    t = (step - w) / max(1, steps - w)
    low = min_ratio * peak
    return low + 0.5 * (peak - low) * (1.0 + math.cos(math.pi * min(1.0, t)))


def _optimizer(model, shape: ModelShape, config: TrainConfig):
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=shape.learning_rate, betas=(0.9, 0.95), eps=1e-8)


def _loss(model, batch):
    import torch.nn.functional as F

    logits = model(input_ids=batch[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1)), logits


def train_model(model, train_windows: np.ndarray, monitor: np.ndarray, shape: ModelShape, config: TrainConfig, *,
                seed: int, teacher=None, progress=None) -> list[dict]:
    """Train ``model`` in place for ``shape.steps`` steps; returns the monitored losses.

    Batches of :attr:`ModelShape.batch` windows follow a permutation of
    ``train_windows`` per epoch, drawn from a generator seeded with ``seed``. With a ``teacher`` (the trained target), the
    loss is :math:`(1 - \\lambda)\\,\\mathrm{CE} + \\lambda\\,\\mathrm{KL}(p_\\text{teacher} \\| q)`,
    ``λ`` = :attr:`TrainConfig.distill`. Every :attr:`TrainConfig.monitor_every`
    steps (and at the end) the held-out loss on ``monitor`` is computed, and
    ``progress(step, train_loss, held_out_loss)`` called; between those it gets
    the step's own loss and ``held_out_loss=None``. Each returned entry has
    ``step``, ``train_loss`` (the mean since the previous entry),
    ``held_out_loss`` and ``seconds`` (since training began).
    """
    import torch
    import torch.nn.functional as F

    data = torch.from_numpy(train_windows)
    device = next(model.parameters()).device
    monitor_t = torch.from_numpy(monitor).to(device)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(data), generator=generator)
    at = 0
    optimizer = _optimizer(model, shape, config)
    history = []
    running, counted = 0.0, 0
    start = time.perf_counter()
    model.train()
    for step in range(shape.steps):
        if at + shape.batch > len(order):
            order, at = torch.randperm(len(data), generator=generator), 0
        batch = data[order[at:at + shape.batch]].to(device)
        at += shape.batch
        lr = learning_rate(step, shape.steps, shape.learning_rate, warmup=config.warmup,
                           min_ratio=config.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        ce, logits = _loss(model, batch)
        loss = ce
        if teacher is not None and config.distill > 0:
            with torch.no_grad():
                p_log = F.log_softmax(teacher(input_ids=batch[:, :-1]).logits.float(), dim=-1)
            q_log = F.log_softmax(logits.float(), dim=-1)
            kl = F.kl_div(q_log.reshape(-1, q_log.shape[-1]), p_log.reshape(-1, p_log.shape[-1]),
                          log_target=True, reduction="batchmean")
            loss = (1.0 - config.distill) * ce + config.distill * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        running += float(ce.detach())
        counted += 1
        last = step + 1 == shape.steps
        if (step + 1) % config.monitor_every == 0 or last:
            held = _mean_loss(model, monitor_t)
            model.train()
            entry = {"step": step + 1, "train_loss": running / counted, "held_out_loss": held,
                     "seconds": round(time.perf_counter() - start, 1)}
            history.append(entry)
            running, counted = 0.0, 0
            if progress is not None:
                progress(step + 1, entry["train_loss"], held)
        elif progress is not None:
            progress(step + 1, float(ce.detach()), None)
    model.eval()
    return history


def _mean_loss(model, batch, chunk: int = 8) -> float:
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(batch), chunk):
            part = batch[i:i + chunk]
            loss, _ = _loss(model, part)
            n = part[:, 1:].numel()
            total += float(loss) * n
            count += n
    return total / count


# --- evaluation --------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairEvaluation:
    """Held-out numbers of a target/draft pair over ``tokens`` predicted positions."""

    windows: int
    tokens: int
    target_perplexity: float
    draft_perplexity: float
    #: mean over positions of sum_v min(p, q) at T = 1: one draft's acceptance rate
    acceptance: float

    def as_dict(self) -> dict:
        return asdict(self)


def evaluate_pair(target, draft, held_out: np.ndarray, *, chunk: int = 8) -> PairEvaluation:
    r"""Token-level perplexity of each model and mean draft acceptance on held-out windows.

    For windows of ``context + 1`` token ids, every model predicts positions
    ``1..context`` of each from the tokens before it (float32 compute):

    .. math::
        \mathrm{ppl} = \exp\Big(-\frac1N \sum_t \log m(x_t \mid x_{<t})\Big), \qquad
        \bar\alpha = \frac1N \sum_t \sum_v \min\big(p(v \mid x_{<t}), q(v \mid x_{<t})\big),

    ``p`` the target, ``q`` the draft, at T = 1, over the ``N`` positions; ``\bar\alpha``
    is the acceptance rate of one draft token. Exact up to float32 rounding.
    Both models must be ``transformers`` causal LMs over one vocabulary.
    """
    import torch
    import torch.nn.functional as F

    data = torch.as_tensor(np.asarray(held_out, dtype=np.int64))
    if data.ndim != 2 or data.shape[1] < 2:
        raise InputError("held-out windows must be a 2-D array of at least 2 token ids per row")
    nll_t = nll_d = accept = 0.0
    count = 0
    target.eval()
    draft.eval()
    with torch.no_grad():
        for i in range(0, len(data), chunk):
            part = data[i:i + chunk]
            inputs, labels = part[:, :-1], part[:, 1:].reshape(-1)
            lt = target(input_ids=inputs.to(target.device)).logits.float().cpu()
            ld = draft(input_ids=inputs.to(draft.device)).logits.float().cpu()
            V = min(lt.shape[-1], ld.shape[-1])
            lt = F.log_softmax(lt[..., :V], dim=-1).reshape(-1, V)
            ld = F.log_softmax(ld[..., :V], dim=-1).reshape(-1, V)
            nll_t -= float(lt.gather(1, labels[:, None]).double().sum())
            nll_d -= float(ld.gather(1, labels[:, None]).double().sum())
            accept += float(torch.minimum(lt.exp(), ld.exp()).sum(dim=-1).double().sum())
            count += labels.numel()
    return PairEvaluation(len(data), count, math.exp(nll_t / count), math.exp(nll_d / count), accept / count)


# --- the whole run -----------------------------------------------------------------------------

def _versions() -> dict:
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__}


def _git_commit() -> str | None:
    """The commit of the mdsd checkout this module runs from (None outside a git checkout)."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _save(model, tokenizer, directory: Path, torch) -> None:
    model.to(torch.float16).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    # the class name transformers 4.x knows too (5.x writes its own alias, TokenizersBackend)
    config_file = directory / "tokenizer_config.json"
    settings = json.loads(config_file.read_text(encoding="utf-8"))
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    model.to(torch.float32)


def _load(directory: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()


def _prepare_out(out: Path) -> None:
    """``out`` may be absent, empty, or an earlier run's output (it has manifest.json); else refuse."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "manifest.json").is_file())):
        raise InputError(f"{out} exists and is not an earlier output of this script (no manifest.json); "
                         "give a new directory")


def train_pair(out: Path | str, *, seed: int = 0, config: TrainConfig | None = None,
               root: Path | str | None = None, progress=None) -> dict:
    """Train the pair (module docstring) and write it to ``out``; returns the manifest.

    ``progress(event, **fields)`` is called with ``event`` one of ``"stage"``
    (``name``), ``"start"`` (``role``, ``steps``, ``parameters``) and ``"step"``
    (``role``, ``step``, ``train_loss``, ``held_out_loss`` or None). The
    directory is written beside ``out`` and renamed into place at the end; an
    earlier output there is replaced.
    """
    import torch

    config = config or TrainConfig()
    out = Path(out)
    _prepare_out(out)
    report = progress or (lambda event, **fields: None)
    seconds: dict[str, float] = {}
    start = time.perf_counter()

    report("stage", name="reading the corpus")
    corpus = read_corpus(root)
    report("stage", name=f"training the tokenizer ({config.vocab_size:,} tokens, {len(corpus.train):,} files)")
    tick = time.perf_counter()
    tokenizer = train_tokenizer(corpus.train, config.vocab_size, context=config.context)
    train_stream = token_stream(tokenizer, corpus.train)
    held_stream = token_stream(tokenizer, corpus.held_out)
    seconds["tokenizer"] = time.perf_counter() - tick
    train_windows = windows(train_stream, config.context)
    held_windows = windows(held_stream, config.context, config.eval_windows)
    monitor = held_windows[: config.monitor_windows]

    trained = {}
    counts = {}
    histories = {}
    for role, shape, offset in (("target", config.target, 0), ("draft", config.draft, 1)):
        torch.manual_seed(seed * 2 + offset)
        model = build_model(shape, config, tokenizer)
        counts[role] = parameter_count(model)
        report("start", role=role, steps=shape.steps, parameters=counts[role])
        tick = time.perf_counter()
        teacher = trained.get("target") if role == "draft" and config.distill > 0 else None
        histories[role] = train_model(
            model, train_windows, monitor, shape, config, seed=seed * 2 + offset, teacher=teacher,
            progress=lambda step, train, held, role=role: report("step", role=role, step=step, train_loss=train,
                                                                 held_out_loss=held))
        seconds[role] = time.perf_counter() - tick
        trained[role] = model

    report("stage", name="saving (float16) and evaluating the saved pair on held-out text")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for role in ("target", "draft"):
            _save(trained[role], tokenizer, work / role, torch)
        tick = time.perf_counter()
        target, draft = _load(work / "target"), _load(work / "draft")
        evaluation = evaluate_pair(target, draft, held_windows)
        shipped = held_windows[: config.shipped_windows]
        slice_evaluation = evaluate_pair(target, draft, shipped)
        seconds["evaluation"] = time.perf_counter() - tick
        heldout = {"context": config.context, "rule": HELD_OUT_RULE,
                   "description": f"the first {len(shipped)} non-overlapping windows of {config.context + 1} "
                                  "token ids of the held-out text (held-out files in sorted order, each followed "
                                  "by <|endoftext|>)",
                   "windows": shipped.tolist()}
        (work / "heldout.json").write_text(json.dumps(heldout) + "\n", encoding="utf-8")
        seconds["total"] = time.perf_counter() - start
        manifest = {
            "name": "pystdlib",
            "script": "mdsd_cli.models.train", "script_version": SCRIPT_VERSION, "seed": seed,
            "command": f"python -m mdsd_cli.models.train --out DIR --seed {seed}",
            "versions": _versions(), "git_commit": _git_commit(), "platform": platform.platform(), "threads": torch.get_num_threads(),
            "corpus": {"source": "the .py files of the Python standard library (sysconfig stdlib path)",
                       "python": platform.python_version(), "files": corpus.files,
                       "held_out_files": corpus.held_out_files, "excluded_dirs": list(EXCLUDED_DIRS),
                       "held_out_rule": HELD_OUT_RULE,
                       "sha256": corpus.sha256,
                       "sha256_of": "lines '<relative path>\\t<sha256 of the file>\\n' in sorted order",
                       "train_tokens": int(len(train_stream)), "held_out_tokens": int(len(held_stream))},
            "config": asdict(config),
            "parameters": counts,
            "tokenizer": {"kind": "byte-level BPE", "vocab_size": len(tokenizer), "end_of_text": END_OF_TEXT},
            "training": histories,
            "evaluation": {**evaluation.as_dict(), "dtype": "float16 weights, float32 compute"},
            "test_slice": {**slice_evaluation.as_dict(), "file": "heldout.json"},
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
        }
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        work.chmod(0o755)
        _replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


def _replace(work: Path, out: Path) -> None:
    """Rename ``work`` to ``out``, replacing an earlier output there."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    work.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def compare_manifests(new: dict, reference: dict, *, tolerance: float = 0.02) -> list[str]:
    """Why a retrained pair does not reproduce ``reference`` (empty: it does): the corpus digest must
    match, and each model's held-out perplexity must be within ``tolerance`` (relative)."""
    problems = []
    if new["corpus"]["sha256"] != reference["corpus"]["sha256"]:
        problems.append(f"the corpus differs from the reference's (Python {new['corpus']['python']} vs "
                        f"{reference['corpus']['python']}): retrain with the reference's Python version")
        return problems
    for key in ("target_perplexity", "draft_perplexity"):
        got, want = new["evaluation"][key], reference["evaluation"][key]
        if not abs(got - want) <= tolerance * want:
            problems.append(f"{key.replace('_', ' ')} {got:.4f} differs from the reference's {want:.4f} by more "
                            f"than {tolerance:.0%}")
    return problems


def main(argv=None) -> None:  # pragma: no cover - run by hand and by make train-pystdlib-check
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mdsd_cli.models.train",
                                     description="Train the pystdlib target/draft pair on the Python standard "
                                                 "library's source (deterministic from --seed).")
    parser.add_argument("--out", required=True, type=Path, help="output directory (replaced if an earlier output)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--check", type=Path, default=None, metavar="MANIFEST",
                        help="after training, compare held-out perplexities with this manifest (within 2%%); "
                             "exit 1 if they differ")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    # Threads that wait at a barrier sleep rather than spin: on a machine whose cores other processes share,
    # spinning OpenMP threads made training steps 5x slower (2 threads beside a busy test run, 2 cores).
    # Read when torch loads its OpenMP runtime, hence before the import.
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True, highlight=False, soft_wrap=True, quiet=args.quiet)
    try:
        import torch

        from .hf import import_hf, quiet_transformers

        quiet_transformers(import_hf()[1])
        if args.threads is not None:
            if args.threads < 1:
                raise InputError(f"--threads must be >= 1, got {args.threads}")
            torch.set_num_threads(args.threads)
        reference = None
        if args.check is not None:
            if not args.check.is_file():
                raise DataFileError(f"reference manifest {args.check} not found")
            reference = json.loads(args.check.read_text(encoding="utf-8"))
        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[loss]}"),
                       console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
        tasks = {}

        def progress(event, **fields):
            if event == "stage":
                console.print(fields["name"], markup=False)
            elif event == "start":
                console.print(f"{fields['role']}: {fields['parameters']:,} parameters, {fields['steps']:,} steps",
                              markup=False)
                tasks[fields["role"]] = bar.add_task(fields["role"], total=fields["steps"], loss="")
            elif event == "step":
                task = tasks[fields["role"]]
                bar.update(task, completed=fields["step"], loss=f"loss {fields['train_loss']:.3f}")
                if fields["held_out_loss"] is not None:
                    console.print(f"{fields['role']} step {fields['step']:,}: train loss {fields['train_loss']:.3f}, "
                                  f"held-out loss {fields['held_out_loss']:.3f}", markup=False)

        with bar:
            manifest = train_pair(args.out, seed=args.seed, progress=progress)
        ev = manifest["evaluation"]
        console.print(f"wrote {args.out}: held-out perplexity target {ev['target_perplexity']:.3f}, draft "
                      f"{ev['draft_perplexity']:.3f}; mean acceptance {ev['acceptance']:.3f} over {ev['tokens']:,} "
                      f"tokens; {manifest['seconds']['total']:.0f} s", markup=False)
        if reference is not None:
            problems = compare_manifests(manifest, reference)
            if problems:
                raise DataFileError(f"the retrained pair does not match {args.check}: " + "; ".join(problems))
            console.print(f"matches {args.check} within 2%", markup=False)
    except MdsdError as exc:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"Error: {exc}", markup=False)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["EXCLUDED_DIRS", "HELD_OUT_MODULUS", "HELD_OUT_RULE", "SCRIPT_VERSION", "Corpus", "ModelShape",
           "PairEvaluation", "TrainConfig", "build_model", "compare_manifests", "corpus_files", "evaluate_pair",
           "is_held_out", "learning_rate", "parameter_count", "read_corpus", "stdlib_root", "token_stream",
           "train_model", "train_pair", "train_tokenizer", "windows"]
