"""Hugging Face causal language models as next-token models, with tree attention on a KV cache.

:class:`HFModel` implements the model protocol of :mod:`.base` for any
``transformers`` causal LM:

* ``tree_logits`` scores a token tree below a prefix in **one forward pass**: every
  node at position ``len(prefix) + depth - 1`` with a 4-D attention mask (a node
  sees the prefix and its own ancestors), on top of the cached prefix; after a
  step the cache keeps only the accepted path (:mod:`.kv_tree`). A draft tree,
  grown level by level, costs one cached pass per depth over the new frontier.
* a **plain fallback** scores each root-to-leaf path as its own sequence, with no
  cache: for models that do not accept a custom 4-D mask. ``scoring="auto"``
  probes the model once (a small tree, two steps, against the fallback's plain
  forwards) and falls back with a notice if the mask is refused or ignored.

The logits are those of plain forwards of each node's full context to float
rounding: :data:`TREE_TOLERANCE` per dtype, relative to the logits' scale
(the tests check 1e-4 absolute in float32).

Loading (:func:`load_hf_pair`) follows ``mdsd dump``: a local directory or a Hub
name, ``revision``, an unreachable Hub gives one line naming ``HF_HUB_OFFLINE=1``,
and the target and draft must share one tokenizer; logits padded beyond it
(different embedding sizes of one tokenizer) are cut to the shared ids.
Needs torch and transformers (the ``hf`` extra).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from ..errors import DataFileError, InputError, MdsdError
from .base import NextTokenModel, tree_paths
from .kv_tree import TreeCache

MODEL_DTYPES = ("float32", "float16", "bfloat16")
SCORING = ("auto", "tree", "paths")
#: Largest difference between tree-pass and plain-forward logits the probe accepts, per model dtype, as a
#: fraction of max(1, largest |logit|): float rounding in a different order of operations.
TREE_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


# --- loading ------------------------------------------------------------------------------------

def import_hf():
    """``(torch, transformers)``, or an error saying how to install them."""
    try:
        import torch
        import transformers
    except ImportError:
        raise MdsdError("Hugging Face models need torch and transformers: install a torch build for your machine "
                        "(CPU only: pip install torch==2.13.0), then, from the mdsd clone, "
                        "pip install -e '.[hf]'") from None
    return torch, transformers


def quiet_transformers(transformers) -> None:
    """No download bars or library warnings: a failure is one line of ours."""
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with contextlib.suppress(ImportError):  # its retry messages are noise next to our one-line errors
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()


def resolve_device(device: str, torch) -> str:
    """``auto`` (CUDA if there is one), ``cpu`` or ``cuda``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise InputError(f"unknown device {device!r}; choose cpu, cuda or auto")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    return device


def _looks_like_path(name: str) -> bool:
    """Whether a model name is meant as a local path rather than a Hub id (``org/model``)."""
    if name in (".", "..") or name.startswith(("/", "./", "../", "~")) or "\\" in name:
        return True
    parts = name.split("/")
    # a Hub id has at most one slash; "models/x" is a path when ./models is a local directory
    return len(parts) > 2 or (len(parts) == 2 and Path(parts[0]).is_dir())


def _hub_reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """Whether the Hugging Face endpoint accepts a TCP connection within ``timeout`` seconds, and its host."""
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    url = urlparse(endpoint)
    host = url.hostname or endpoint
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, host
    except OSError:
        return False, host


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def load_causal_lm(name: str, *, revision, device, dtype, torch, transformers, trust_remote_code: bool = False):
    """``(tokenizer, model)`` from a local directory or a Hub name, in eval mode on ``device``."""
    local = Path(name).expanduser()
    if not local.exists() and _looks_like_path(name):
        raise DataFileError(f"cannot load model {name!r}: no such directory (a local path; Hugging Face names "
                            "look like org/model)")
    kwargs = {"revision": revision}
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    if not local.exists() and not _offline():
        reachable, host = _hub_reachable()
        if not reachable:  # no retries against an unreachable Hub: the local cache or a one-line error
            kwargs["local_files_only"] = True
            unreachable = (f"it is not a local directory, not in the Hugging Face cache, and {host} cannot be "
                           "reached (no network?); give a local model directory, or set HF_HUB_OFFLINE=1 to use "
                           "cached models without trying the network")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name, **kwargs)
        model, info = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype),
                                                                        output_loading_info=True, **kwargs)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged directory raises anything (OSError, ValueError,
        # TypeError for "vocab_size": "abc", safetensors' own error for a truncated file, RuntimeError for shapes)
        if kwargs.get("local_files_only"):
            raise DataFileError(f"cannot load model {name!r}: {unreachable}") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if len(first) > 300:
            first = first[:297] + "..."
        raise DataFileError(f"cannot load model {name!r}: {type(exc).__name__}: {first}") from None
    check_loading_info(name, info)
    model.to(device).eval()
    return tokenizer, model


def _keys(keys, limit: int = 3) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit:,} more" if len(keys) > limit else "")


def check_loading_info(name: str, info: dict) -> None:
    """Refuse a checkpoint that does not match its config: weights missing from it would be random (a config
    of 12 layers over a checkpoint of 8), weights it has that the model lacks are dropped (the reverse), and
    weights of another shape are re-initialised. transformers only logs these; numbers from such a model
    would describe no trained model."""
    missing, unexpected = list(info.get("missing_keys") or []), list(info.get("unexpected_keys") or [])
    mismatched = [k if isinstance(k, str) else str(k[0]) for k in (info.get("mismatched_keys") or [])]
    problems = []
    if missing:
        problems.append(f"{len(missing):,} weight(s) missing from the checkpoint, which would be random ({_keys(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected):,} weight(s) in the checkpoint that the config has no place for "
                        f"({_keys(unexpected)})")
    if mismatched:
        problems.append(f"{len(mismatched):,} weight(s) of another shape than the config's ({_keys(mismatched)})")
    if problems:
        raise DataFileError(f"model {name!r} does not match its checkpoint: " + "; ".join(problems)
                            + "; fix config.json or the weights")


def logit_dim(model) -> int:
    """Rows of the output embedding: the length of a logits row (may exceed the tokenizer, padded)."""
    return int(model.get_output_embeddings().weight.shape[0])


def vocabulary_difference(tok_t, tok_d, dim_t: int, dim_d: int) -> str | None:
    """How two models' vocabularies differ, as a phrase for an error message (None if they agree)."""
    vt, vd = tok_t.get_vocab(), tok_d.get_vocab()
    if vt == vd and dim_t == dim_d:
        return None
    return (f"target and draft vocabularies differ (tokenizers: {len(vt):,} vs {len(vd):,} tokens"
            f"{', different token ids' if len(vt) == len(vd) and vt != vd else ''}; "
            f"logits: {dim_t:,} vs {dim_d:,})")


def shared_vocabulary(tok_t, tok_d, model_t, model_d, notify) -> int:
    """``V`` for decoding: the tokenizers must agree; logits padded beyond them are cut to the shorter row."""
    dim_t, dim_d = logit_dim(model_t), logit_dim(model_d)
    problem = vocabulary_difference(tok_t, tok_d, dim_t, dim_d)
    if problem is None:
        return dim_t
    vocab = tok_t.get_vocab()
    if vocab != tok_d.get_vocab():
        raise InputError(f"{problem}; speculative decoding needs a draft with the target's tokenizer")
    V = min(dim_t, dim_d)
    top = max(vocab.values(), default=-1)
    if top >= V:
        raise InputError(f"{problem}: token id {top} has no logit in the {V:,}-entry model; "
                         "these models cannot be decoded together")
    notify(f"{problem}: one tokenizer of {len(vocab):,} tokens, logits padded beyond it; decoding over "
           f"ids 0..{V - 1} (the padding ids past {top} have no token)")
    return V


def cache_kwarg(model) -> str:
    """Name of the KV-cache argument: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _max_context(config) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


# --- the model ----------------------------------------------------------------------------------

class HFModel(NextTokenModel):
    """A ``transformers`` causal LM as a next-token model (see the module docstring).

    Parameters
    ----------
    model : transformers PreTrainedModel
        A causal LM in eval mode, on its device.
    tokenizer : optional
        Its tokenizer (for ``encode``/``decode`` and the end-of-sequence token).
    name : str
    vocab_size : int, optional
        ``V``: logits are cut to their first ``V`` entries (default: all of them).
    scoring : {"auto", "tree", "paths"}
        ``tree``: one pass with a tree mask on the KV cache; ``paths``: the plain
        fallback; ``auto``: ``tree`` if the model passes the probe, else ``paths``
        with a notice.
    dtype : str
        The model's dtype name (sets the probe's tolerance).
    chat_template : bool
        ``encode`` wraps text as one user message in the tokenizer's chat template.
    stop_at_eos : bool
        Generation stops after the tokenizer's end-of-sequence token (False: never).
    notify : callable, optional
        Receives the fallback notice.
    max_batch_tokens : int
        The fallback runs its sequences in batches of at most this many tokens.
    """

    #: tree_logits returns a tensor on the model's device (True, while mdsd verifies there) or a host array
    logits_on_device = False

    fork_safe = False

    def __init__(self, model, tokenizer=None, *, name: str, vocab_size: int | None = None, scoring: str = "auto",
                 dtype: str = "float32", chat_template: bool = False, stop_at_eos: bool = True, notify=None,
                 max_batch_tokens: int = 8192, revision: str | None = None):
        torch, _ = import_hf()
        if scoring not in SCORING:
            raise InputError(f"unknown scoring {scoring!r}; choose {', '.join(SCORING)}")
        self._torch = torch
        self.model, self.tokenizer, self.name, self.revision = model, tokenizer, str(name), revision
        self.dtype_name = dtype
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.logit_dim = logit_dim(model)
        self.vocab_size = int(vocab_size or self.logit_dim)
        self.eos_token_id = getattr(tokenizer, "eos_token_id", None) if stop_at_eos else None
        self.max_context = _max_context(model.config)
        self.chat_template = chat_template
        if chat_template and (tokenizer is None or not getattr(tokenizer, "chat_template", None)):
            raise InputError(f"model {self.name} has no chat template in its tokenizer; drop the chat template "
                             "option or use a chat model")
        self.max_batch_tokens = int(max_batch_tokens)
        params = inspect.signature(model.forward).parameters
        self._cache_arg = cache_kwarg(model)
        self._keep_arg = "logits_to_keep" in params
        self.forward_seconds = 0.0
        self.cache_seconds = 0.0
        self._cache = TreeCache(self._forward_tree, self._new_cache, self._move)
        self.fallback_reason: str | None = None
        if scoring == "paths":
            self.scoring = "paths"
        else:
            reason = self._tree_unsupported(params) or self._probe()
            if reason and scoring == "tree":
                raise InputError(f"model {self.name} cannot score a tree in one pass: {reason}")
            self.scoring = "paths" if reason else "tree"
            self.fallback_reason = reason
            if reason and notify is not None:
                notify(f"model {self.name}: {reason}; scoring each root-to-leaf path as its own sequence, "
                       "without a cache (slower, the same logits)")
        self.forward_seconds = self.cache_seconds = 0.0

    # --- the protocol -----------------------------------------------------------------------------
    def logits(self, contexts):
        contexts = [[int(t) for t in c] for c in contexts]
        if any(not c for c in contexts):
            raise InputError(f"model {self.name} needs at least one token of context; give non-empty prompts")
        rows = self._sequences(contexts, [[len(c) - 1] for c in contexts])
        return np.concatenate(rows) if rows else np.zeros((0, self.vocab_size), dtype=np.float32)

    def tree_logits(self, prefix, parents, tokens, nodes):
        if len(prefix) == 0:
            raise InputError(f"model {self.name} needs at least one token of context; give non-empty prompts")
        start, forward = time.perf_counter(), self.forward_seconds
        if self.scoring == "tree":
            with self._torch.inference_mode():
                out = self._cache.score(prefix, parents, tokens, nodes)
        else:
            out = self._path_logits(prefix, parents, tokens, nodes)
        self.cache_seconds += (time.perf_counter() - start) - (self.forward_seconds - forward)
        return out

    def reset_cache(self) -> None:
        self._cache.reset()

    @property
    def cached_tokens(self) -> int:
        """Slots in the KV cache now (the chain and the tree below it)."""
        return self._cache.size

    # --- text -------------------------------------------------------------------------------------
    def encode(self, text):
        if self.tokenizer is None:
            return super().encode(text)
        tok = self.tokenizer
        if self.chat_template:
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                          tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
        else:
            ids = tok(text)["input_ids"]
        ids = [int(i) for i in ids]
        if not ids:
            bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
            if bos is None:
                raise InputError("an empty prompt needs a tokenizer with a BOS or EOS token")
            ids = [int(bos)]
        return ids

    def decode(self, ids):
        if self.tokenizer is None:
            return super().decode(ids)
        return self.tokenizer.decode([int(i) for i in ids])

    def describe(self):
        config = self.model.config
        return {"name": self.name, "class": type(self.model).__name__,
                "revision": self.revision or getattr(config, "_commit_hash", None), "logit_dim": self.logit_dim,
                "vocab_size": self.vocab_size, "dtype": self.dtype_name, "device": str(self.device),
                "attention": getattr(config, "_attn_implementation", None), "scoring": self.scoring,
                "fallback_reason": self.fallback_reason, "max_context": self.max_context}

    # --- tree attention: the forward pass the cache asks for ---------------------------------------
    def _sync(self):
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _move(self, cache, start: int, slots: list[int]) -> None:
        torch = self._torch
        m = len(slots)
        contiguous = slots == list(range(start, start + m))
        index = None if contiguous else torch.tensor(slots, dtype=torch.long, device=self.device)
        for layer in cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            if index is not None:
                layer.keys[..., start:start + m, :] = layer.keys.index_select(-2, index)
                layer.values[..., start:start + m, :] = layer.values.index_select(-2, index)
            layer.keys = layer.keys[..., :start + m, :]
            layer.values = layer.values[..., :start + m, :]

    def _forward_tree(self, ids, positions, mask, cache, keep):
        torch = self._torch
        self._sync()
        start = time.perf_counter()
        kwargs = {self._cache_arg: cache, "use_cache": True,
                  "position_ids": torch.tensor([positions], dtype=torch.long, device=self.device)}
        if mask is not None:
            allowed = torch.from_numpy(mask).to(self.device)
            additive = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
            additive.masked_fill_(~allowed, torch.finfo(self.dtype).min)
            kwargs["attention_mask"] = additive[None, None]
        rows = sorted(set(keep))
        if self._keep_arg:
            kwargs["logits_to_keep"] = torch.tensor(rows or [len(ids) - 1], dtype=torch.long, device=self.device)
        out = self.model(input_ids=torch.tensor([ids], dtype=torch.long, device=self.device), **kwargs)
        logits = out.logits[0]
        if not self._keep_arg:
            logits = logits[rows] if rows else logits[:0]
        at = {r: j for j, r in enumerate(rows)}
        picked = logits[[at[r] for r in keep], : self.vocab_size].float() if keep else None
        if picked is not None and not self.logits_on_device:
            picked = picked.cpu().numpy()
        self._sync()
        self.forward_seconds += time.perf_counter() - start
        return picked, cache_of(out)

    def _tree_unsupported(self, params) -> str | None:
        """Why this model cannot take a tree mask on a cache, from its signature and cache type (None: it may)."""
        missing = [p for p in ("attention_mask", "position_ids") if p not in params]
        if missing or self._cache_arg not in params:
            return f"its forward takes no {missing[0] if missing else 'cache'} argument"
        try:
            from transformers.cache_utils import DynamicLayer

            layers = getattr(self._new_cache(), "layers", None)
        except Exception as exc:  # noqa: BLE001 - any failure here means: no tree cache
            return f"no dynamic cache for it ({type(exc).__name__})"
        if layers is None:
            return "this transformers version keeps no per-layer cache tensors (the tree cache needs >= 4.56)"
        odd = [type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer]
        if odd:
            return f"its cache has {odd[0]} layers (sliding-window or recurrent), which a tree cannot be cut from"
        return None

    def _probe(self) -> str | None:
        """Score a small tree on two steps with the cache and compare with plain forwards (None: they agree)."""
        V = self.vocab_size
        t = [(7 * i + 3) % V for i in range(12)]
        parents, tokens = [-1, 0, 0, 1, 1, 3, 2], [-1, t[3], t[4], t[5], t[4], t[6], t[7]]
        prefixes = [t[:3], t[:3] + [tokens[1], tokens[3], tokens[5], t[8]]]  # step 2: the path 1-3-5 accepted
        nodes = list(range(len(parents)))
        got = []
        try:
            with self._torch.inference_mode():
                for prefix in prefixes:
                    got.append(self._cache.score(prefix, parents, tokens, nodes))
        except Exception as exc:  # noqa: BLE001 - whatever the model raises on a custom mask: fall back
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            return f"it does not accept a custom 4-D attention mask ({type(exc).__name__}: {first})"
        finally:
            self._cache.reset()
        want = [self._path_logits(prefix, parents, tokens, nodes) for prefix in prefixes]
        error = max(float(np.max(np.abs(a - b))) for a, b in zip(got, want))
        scale = max(1.0, max(float(np.max(np.abs(b))) for b in want))
        tolerance = TREE_TOLERANCE.get(self.dtype_name, TREE_TOLERANCE["float16"]) * scale
        if not error <= tolerance:
            return (f"its logits with a custom 4-D attention mask differ from plain forwards by {error:.3g} "
                    f"(tolerance {tolerance:.3g}): the mask is not applied")
        return None

    # --- the plain fallback: one sequence per root-to-leaf path -------------------------------------
    def _path_logits(self, prefix, parents, tokens, nodes):
        n = len(parents)
        nodes = [int(u) for u in nodes]
        inside = [False] * n
        for u in nodes:
            v = u
            while v >= 0 and not inside[v]:
                inside[v] = True
                v = int(parents[v]) if v > 0 else -1
        has_child = [False] * n
        for i in range(1, n):
            if inside[i]:
                has_child[int(parents[i])] = True
        leaves = [i for i in range(n) if inside[i] and not has_child[i]]
        paths = tree_paths(parents, tokens, leaves)
        base = [int(t) for t in prefix]
        where: dict[int, tuple[int, int]] = {}  # node -> (sequence, position)
        for s, leaf in enumerate(leaves):
            v, depth = leaf, len(paths[s])
            while v >= 0 and v not in where:
                where[v] = (s, len(base) - 1 + depth)
                v, depth = (int(parents[v]), depth - 1) if v > 0 else (-1, 0)
        seqs = [base + path for path in paths]
        wanted = [[] for _ in seqs]
        for u in nodes:
            wanted[where[u][0]].append(where[u][1])
        rows = self._sequences(seqs, [sorted(set(w)) or [len(seqs[i]) - 1] for i, w in enumerate(wanted)])
        out = np.empty((len(nodes), self.vocab_size), dtype=np.float32)
        for j, u in enumerate(nodes):
            s, position = where[u]
            positions = sorted(set(wanted[s]))
            out[j] = rows[s][positions.index(position)]
        # the fallback assembles its rows on the host: one upload when the caller verifies on the device
        return self._torch.from_numpy(out).to(self.device) if self.logits_on_device else out

    def _sequences(self, seqs: list[list[int]], wanted: list[list[int]]) -> list[np.ndarray]:
        """Logits at the ``wanted`` positions of each sequence: right-padded batches, no cache, causal masks."""
        torch = self._torch
        out: list[np.ndarray | None] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        i = 0
        self._sync()
        start = time.perf_counter()
        with torch.inference_mode():
            while i < len(order):
                length = len(seqs[order[i]])
                j = i + 1
                while j < len(order) and len(seqs[order[j]]) * (j + 1 - i) <= self.max_batch_tokens:
                    j += 1
                chunk = order[i:j]
                length = len(seqs[chunk[-1]])
                ids = torch.zeros((len(chunk), length), dtype=torch.long)
                for row, s in enumerate(chunk):
                    ids[row, : len(seqs[s])] = torch.tensor(seqs[s], dtype=torch.long)
                low = min(min(wanted[s]) for s in chunk)
                kwargs = {"use_cache": False}
                if self._keep_arg:
                    kwargs["logits_to_keep"] = length - low
                logits = self.model(input_ids=ids.to(self.device), **kwargs).logits
                offset = length - logits.shape[1]
                for row, s in enumerate(chunk):
                    at = [w - offset for w in wanted[s]]
                    out[s] = logits[row, at, : self.vocab_size].float().cpu().numpy()
                i = j
        self._sync()
        self.forward_seconds += time.perf_counter() - start
        return out


# --- a pair -------------------------------------------------------------------------------------

def load_hf_pair(target: str, draft: str, *, device: str = "auto", dtype: str = "float32",
                 revision: str | None = None, draft_revision: str | None = None, trust_remote_code: bool = False,
                 chat_template: bool = False, scoring: str = "auto", threads: int | None = None, notify=None):
    """A :class:`~mdsd_cli.models.ModelPair` of two causal LMs (local directories or Hub names).

    The tokenizers must agree (else :class:`~mdsd_cli.errors.InputError` with the
    difference); ``notify(message)`` receives notices (padded logits, the
    fallback). Prompts come from a file (the pair has no built-in ones).
    ``threads`` sets torch's CPU threads for the whole process
    (``torch.set_num_threads``); on a busy or small machine one thread avoids
    oversubscription, which slows small models' passes tenfold or more.
    """
    from .base import ModelPair

    notify = notify or (lambda message: None)
    if dtype not in MODEL_DTYPES:
        raise InputError(f"unknown model dtype {dtype!r}; choose {', '.join(MODEL_DTYPES)}")
    if scoring not in SCORING:
        raise InputError(f"unknown scoring {scoring!r}; choose {', '.join(SCORING)}")
    if threads is not None and int(threads) < 1:
        raise InputError(f"threads must be >= 1, got {threads}")
    torch, transformers = import_hf()
    quiet_transformers(transformers)
    device = resolve_device(device, torch)
    if threads is not None:
        torch.set_num_threads(int(threads))
    loaded = {}
    for role, name, rev in (("target", target, revision), ("draft", draft, draft_revision)):
        loaded[role] = load_causal_lm(name, revision=rev, device=device, dtype=dtype, torch=torch,
                                      transformers=transformers, trust_remote_code=trust_remote_code)
    (tok_t, model_t), (tok_d, model_d) = loaded["target"], loaded["draft"]
    V = shared_vocabulary(tok_t, tok_d, model_t, model_d, notify)
    models = {role: HFModel(model, tok, name=name, vocab_size=V, scoring=scoring, dtype=dtype,
                            chat_template=chat_template and role == "target", notify=notify, revision=rev)
              for role, (tok, model), name, rev in (("target", loaded["target"], target, revision),
                                                    ("draft", loaded["draft"], draft, draft_revision))}
    metadata = {"target": models["target"].describe(), "draft": models["draft"].describe(),
                "tokenizer": {"name": str(target), "size": len(tok_t), "class": type(tok_t).__name__},
                "threads": torch.get_num_threads(),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    return ModelPair(f"{target} / {draft}", models["target"], models["draft"], prompts=None, metadata=metadata)


__all__ = ["MODEL_DTYPES", "SCORING", "TREE_TOLERANCE", "HFModel", "cache_kwarg", "cache_of", "import_hf", "load_causal_lm", "load_hf_pair",
           "logit_dim", "quiet_transformers", "resolve_device", "shared_vocabulary", "vocabulary_difference"]
