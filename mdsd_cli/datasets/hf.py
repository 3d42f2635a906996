"""``mdsd dump``: record next-token logits of a target and a draft causal LM (Hugging Face).

Two modes:

``generate``
    The target samples a continuation at ``temperature`` (as in real decoding);
    at every step the next-token logits of both models are recorded, along
    with the sampled token. Each prompt has its own seeded random stream, so a
    prompt's continuation does not depend on batching or on resuming.
``score``
    A reference continuation is teacher-forced; the logits of both models
    before each reference token are recorded.

Needs torch and transformers (the ``hf`` extra). Models are loaded from a
local directory or a Hub name (which needs network access, or the local
Hugging Face cache with ``HF_HUB_OFFLINE=1``).

Two models with different tokenizers can be dumped with
``allow_vocab_mismatch=True``: the stored logits are cut to the shared prefix
of token ids (the ids whose tokens agree), and the draft model reads every
context in its own ids (the same tokens looked up in its vocabulary).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataFileError, InputError, option
from ..io import is_temporary
from ..models.hf import MODEL_DTYPES, quiet_transformers, resolve_device, vocabulary_difference
from ..models.hf import cache_kwarg as _cache_kwarg
from ..models.hf import cache_of as _cache_of
from ..models.hf import import_hf as _import_hf
from ..models.hf import load_causal_lm as _load
from ..models.hf import logit_dim as _logit_dim
from .dumps import (
    MANIFEST,
    ShardWriter,
    completed_prompts,
    is_dump,
    read_manifest,
    shard_paths,
    write_manifest,
)

MODES = ("generate", "score")
STORE_DTYPES = ("float16", "float32")
#: Settings that must match to resume into an existing dump.
RESUME_KEYS = ("mode", "temperature", "max_new_tokens", "seed", "store_dtype", "vocab_size", "prompts_sha256")


@dataclass(frozen=True)
class Prompt:
    id: int
    text: str
    reference: str | None = None


@dataclass(frozen=True)
class DumpSummary:
    directory: Path
    prompts_total: int
    prompts_done: int
    prompts_skipped: int
    rows_written: int
    vocab_size: int
    aligned: bool


def read_prompts(path, mode: str) -> list[Prompt]:
    """Prompts from a text file (one per line) or JSONL (``prompt``, optional ``id``,
    and ``reference`` for score mode)."""
    src = Path(path)
    if not src.exists():
        raise DataFileError(f"prompts file {src} not found")
    try:
        lines = src.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(f"cannot read prompts file {src} ({exc})") from None
    prompts: list[Prompt] = []
    if src.suffix.lower() in (".jsonl", ".json"):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise DataFileError(f"{src} line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
                raise DataFileError(f"{src} line {number} needs a string field 'prompt'")
            reference = record.get("reference", record.get("continuation"))
            if mode == "score" and not isinstance(reference, str):
                raise DataFileError(f"{src} line {number} needs a string field 'reference' in score mode")
            pid = record.get("id", len(prompts))
            if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
                raise DataFileError(f"{src} line {number}: 'id' must be a non-negative integer")
            prompts.append(Prompt(pid, record["prompt"], reference))
    else:
        if mode == "score":
            raise DataFileError(f"score mode needs references: give a JSONL file with 'prompt' and 'reference' "
                                f"fields, not {src.name}")
        prompts = [Prompt(i, line) for i, line in enumerate(x for x in lines if x.strip())]
    if not prompts:
        raise DataFileError(f"prompts file {src} has no prompts")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise DataFileError(f"prompts file {src} repeats prompt ids; ids must be unique")
    return prompts


def _align_vocab(tok_t, tok_d, model_t, model_d, allow: bool, notify) -> tuple[int, bool, np.ndarray | None]:
    """The stored vocabulary size, whether it was cut to a shared prefix, and (then) the map
    from target token ids to the draft's ids for the same tokens (-1 where the draft has none)."""
    vt, vd = tok_t.get_vocab(), tok_d.get_vocab()
    dim_t, dim_d = _logit_dim(model_t), _logit_dim(model_d)
    problem = vocabulary_difference(tok_t, tok_d, dim_t, dim_d)
    if problem is None:
        return dim_t, False, None
    if not allow:
        raise InputError(f"{problem}; use a draft with the target's tokenizer, or pass "
                         f"{option('--allow-vocab-mismatch', 'allow_vocab_mismatch=True')} "
                         "to align on the shared prefix of token ids")
    inv_t = {i: t for t, i in vt.items()}
    inv_d = {i: t for t, i in vd.items()}
    shared = 0
    while shared < min(dim_t, dim_d) and inv_t.get(shared) == inv_d.get(shared):
        shared += 1
    if shared == 0:
        raise InputError(f"{problem}, and not even token id 0 agrees; nothing to align")
    notify(f"{problem}: aligning on the shared prefix of ids 0..{shared - 1} (V = {shared:,}); "
           "logits beyond it are dropped, and the draft reads each context in its own token ids")
    to_draft = np.full(max(dim_t, max(vt.values(), default=0) + 1), -1, dtype=np.int64)
    for token, i in vt.items():
        j = vd.get(token)
        if j is not None and j < dim_d:
            to_draft[i] = j
    return shared, True, to_draft


def _check_draft_can_read(prompts: list[Prompt], tokenizer, to_draft: np.ndarray, mode: str, max_new_tokens: int):
    """Refuse, before any work, a prompt (or reference) with a token the draft's vocabulary lacks."""
    inv = {i: t for t, i in tokenizer.get_vocab().items()}
    for p in prompts:
        ids = _prompt_ids(tokenizer, p.text)
        if mode == "score":
            ids = ids + list(tokenizer(p.reference, add_special_tokens=False)["input_ids"])[:max_new_tokens]
        missing = [i for i in ids if i >= to_draft.size or to_draft[i] < 0]
        if missing:
            raise InputError(f"prompt {p.id} holds the token {inv.get(missing[0], '?')!r} (target id {missing[0]}), "
                             "which the draft's tokenizer does not have; with different vocabularies every prompt "
                             "token must exist in both: reword or remove that prompt")


def _hash_prompts(prompts: list[Prompt]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps([p.id, p.text, p.reference]).encode())
    return h.hexdigest()


def _model_info(name, model, revision) -> dict:
    return {"name": str(name), "revision": revision or getattr(model.config, "_commit_hash", None),
            "class": type(model).__name__, "logit_dim": _logit_dim(model)}


def dump(*, target: str, draft: str, prompts_path, out, mode: str = "generate", max_new_tokens: int = 32,
         temperature: float = 1.0, device: str = "auto", dtype: str = "float32", batch_size: int = 4,
         store_dtype: str = "float16", rows_per_shard: int = 256, seed: int = 0,
         allow_vocab_mismatch: bool = False, revision: str | None = None, draft_revision: str | None = None,
         notify=None, progress=None) -> DumpSummary:
    """Dump next-token logits of ``target`` and ``draft`` at every step of every prompt into ``out``.

    ``progress(event, **info)`` is called with ``("start", total=...)`` and
    ``("tokens", count=...)``; ``notify(message)`` receives warnings. Resumes an
    existing dump in ``out`` written with the same settings, skipping its prompts.
    """
    notify = notify or (lambda message: None)
    progress = progress or (lambda event, **info: None)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; choose generate or score")
    if store_dtype not in STORE_DTYPES:
        raise InputError(f"unknown storage dtype {store_dtype!r}; choose float16 or float32")
    if dtype not in MODEL_DTYPES:
        raise InputError(f"unknown model dtype {dtype!r}; choose {', '.join(MODEL_DTYPES)}")
    if max_new_tokens < 1 or batch_size < 1:
        raise InputError("--max-new-tokens and --batch-size must be >= 1")
    if not (temperature >= 0):
        raise InputError(f"temperature must be >= 0, got {temperature}")
    prompts = read_prompts(prompts_path, mode)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataFileError(f"--out {out} exists and is not a directory; a dump is a directory")
    if out.exists() and any(not is_temporary(x) for x in out.iterdir()) and not is_dump(out):
        raise DataFileError(f"--out {out} is a non-empty directory that is not a dump; choose a new directory")
    blocker = next((a for a in out.parents if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise DataFileError(f"cannot create {out}: {blocker} is a file, not a directory")

    torch, transformers = _import_hf()
    quiet_transformers(transformers)
    device = resolve_device(device, torch)
    tok_t, model_t = _load(target, revision=revision, device=device, dtype=dtype, torch=torch,
                           transformers=transformers)
    tok_d, model_d = _load(draft, revision=draft_revision, device=device, dtype=dtype, torch=torch,
                           transformers=transformers)
    V, aligned, to_draft = _align_vocab(tok_t, tok_d, model_t, model_d, allow_vocab_mismatch, notify)

    manifest = {
        "mode": mode, "target": _model_info(target, model_t, revision),
        "draft": _model_info(draft, model_d, draft_revision),
        "tokenizer": {"name": str(target), "size": len(tok_t), "class": type(tok_t).__name__},
        "vocab_size": V, "aligned_vocab": aligned, "temperature": float(temperature),
        "max_new_tokens": int(max_new_tokens), "seed": int(seed), "store_dtype": store_dtype,
        "model_dtype": dtype, "device": device, "prompts": str(prompts_path), "prompt_count": len(prompts),
        "prompts_sha256": _hash_prompts(prompts),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    done: set[int] = set()
    resuming = is_dump(out)
    if resuming:
        old = read_manifest(out)
        changed = [k for k in RESUME_KEYS if old.get(k) != manifest.get(k)]
        changed += [f"{role} model" for role in ("target", "draft") if old.get(role, {}).get("name") != manifest[role]["name"]]
        if changed:
            raise DataFileError(f"{out} holds a dump with different settings ({', '.join(changed)}); "
                                "choose a new --out directory to start another dump")
        done = completed_prompts(out)
    todo = [p for p in prompts if p.id not in done]
    if to_draft is not None:
        _check_draft_can_read(todo, tok_t, to_draft, mode, max_new_tokens)
        to_draft = torch.as_tensor(np.maximum(to_draft, 0), device=device)  # -1: never read (checked above)
    created = [] if resuming else _make_directories(out)
    try:
        if not resuming:
            write_manifest(out, manifest)
        writer = ShardWriter(out, vocab_size=V, store_dtype=store_dtype, rows_per_shard=rows_per_shard,
                             metadata={"target": manifest["target"]["name"], "draft": manifest["draft"]["name"],
                                       "mode": mode, "temperature": float(temperature), "seed": int(seed)})
        progress("start", total=len(todo) * max_new_tokens, prompts=len(todo))
        rows = 0
        step_fn = _generate_batch if mode == "generate" else _score_batch
        with torch.no_grad():
            for start in range(0, len(todo), batch_size):
                batch = todo[start : start + batch_size]
                for prompt, record in zip(batch, step_fn(batch, tok_t, model_t, model_d, V, device, torch,
                                                         temperature, max_new_tokens, seed, progress, to_draft)):
                    writer.add_prompt(prompt.id, **record)
                    rows += len(record["tokens"])
        writer.flush()
        write_manifest(out, {**read_manifest(out), "complete": True})
    except BaseException:
        if not resuming and not shard_paths(out):  # nothing to resume: leave nothing behind
            _remove_new_dump(out, created)
        raise
    return DumpSummary(out, len(prompts), len(todo), len(prompts) - len(todo), rows, V, aligned)


def _make_directories(out: Path) -> list[Path]:
    """Create ``out`` and its missing parents; return the ones created, outermost first."""
    missing = [d for d in (out, *out.parents) if not d.exists()][::-1]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataFileError(f"cannot create {out}: {exc.strerror or exc}") from None
    return missing


def _remove_new_dump(out: Path, created: list[Path]) -> None:
    """Remove what a failed first run left (its manifest, temporary files) and the directories it made
    (an empty directory that was there before stays)."""
    with contextlib.suppress(OSError):
        (out / MANIFEST).unlink(missing_ok=True)
        for leftover in out.iterdir():
            if is_temporary(leftover):
                leftover.unlink()
        for directory in reversed(created):
            directory.rmdir()


def _prompt_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer(text)["input_ids"]
    if not ids:
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if bos is None:
            raise InputError("an empty prompt needs a tokenizer with a BOS or EOS token")
        ids = [bos]
    return list(ids)


def _left_pad(seqs, pad_id, torch, device):
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s, dtype=torch.long)
        att[i, L - len(s):] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), att.to(device), pos.to(device)


def _prompt_generator(torch, seed: int, prompt_id: int):
    g = torch.Generator(device="cpu")
    g.manual_seed(int.from_bytes(hashlib.sha256(f"{seed}/{prompt_id}".encode()).digest()[:8], "little") >> 1)
    return g


def _sample(logits_row, temperature, generator, torch) -> int:
    if temperature == 0:
        return int(torch.argmax(logits_row))
    probs = torch.softmax(logits_row.double() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def _draft_ids(ids, to_draft):
    """The draft's ids for target ids (the same ones when the vocabularies agree)."""
    return ids if to_draft is None else to_draft[ids]


def _generate_batch(batch, tokenizer, model_t, model_d, V, device, torch, temperature, max_new_tokens, seed,
                    progress, to_draft=None):
    seqs = [_prompt_ids(tokenizer, p.text) for p in batch]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids, att, pos = _left_pad(seqs, pad, torch, device)
    gens = [_prompt_generator(torch, seed, p.id) for p in batch]
    eos = tokenizer.eos_token_id
    records = [{"positions": [], "context_lengths": [], "tokens": [], "target_logits": [], "draft_logits": []}
               for _ in batch]
    out_t = model_t(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
    out_d = model_d(input_ids=_draft_ids(ids, to_draft), attention_mask=att, position_ids=pos, use_cache=True)
    active = [True] * len(batch)
    for step in range(max_new_tokens):
        lt = out_t.logits[:, -1, :V].float().cpu()
        ld = out_d.logits[:, -1, :V].float().cpu()
        nxt = []
        recorded = 0
        for i in range(len(batch)):
            if not active[i]:
                nxt.append(pad)
                continue
            recorded += 1
            token = _sample(lt[i], temperature, gens[i], torch)
            rec = records[i]
            rec["positions"].append(step)
            rec["context_lengths"].append(len(seqs[i]) + step)
            rec["tokens"].append(token)
            rec["target_logits"].append(lt[i].numpy())
            rec["draft_logits"].append(ld[i].numpy())
            nxt.append(token)
            if eos is not None and token == eos:
                active[i] = False
        progress("tokens", count=recorded)
        if step == max_new_tokens - 1 or not any(active):
            break
        step_ids = torch.tensor(nxt, dtype=torch.long, device=device)[:, None]
        att = torch.cat([att, torch.ones((len(batch), 1), dtype=att.dtype, device=device)], dim=1)
        pos = pos[:, -1:] + 1
        out_t = model_t(input_ids=step_ids, attention_mask=att, position_ids=pos, use_cache=True,
                        **{_cache_kwarg(model_t): _cache_of(out_t)})
        out_d = model_d(input_ids=_draft_ids(step_ids, to_draft), attention_mask=att, position_ids=pos,
                        use_cache=True, **{_cache_kwarg(model_d): _cache_of(out_d)})
    return [_stack(r, V) for r in records]


def _score_batch(batch, tokenizer, model_t, model_d, V, device, torch, temperature, max_new_tokens, seed,
                 progress, to_draft=None):
    records = []
    for p in batch:  # teacher forcing: one forward pass per prompt and model
        context = _prompt_ids(tokenizer, p.text)
        reference = list(tokenizer(p.reference, add_special_tokens=False)["input_ids"])[:max_new_tokens]
        if not reference:
            records.append(_stack({"positions": [], "context_lengths": [], "tokens": [], "target_logits": [],
                                   "draft_logits": []}, V))
            continue
        full = torch.tensor([context + reference[:-1]], dtype=torch.long, device=device)
        start = len(context) - 1
        lt = model_t(input_ids=full).logits[0, start:, :V].float().cpu().numpy()
        ld = model_d(input_ids=_draft_ids(full, to_draft)).logits[0, start:, :V].float().cpu().numpy()
        k = len(reference)
        records.append({"positions": list(range(k)), "context_lengths": [len(context) + j for j in range(k)],
                        "tokens": reference, "target_logits": lt[:k], "draft_logits": ld[:k]})
        progress("tokens", count=k)
    return records


def _stack(record, V):
    k = len(record["tokens"])
    for name in ("target_logits", "draft_logits"):
        record[name] = np.asarray(record[name], dtype=np.float32).reshape(k, V)
    return record
