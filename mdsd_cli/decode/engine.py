"""The decoding loop: draft a tree, score it with the target in one pass, walk down, repeat.

One *configuration* (:class:`DecodeSpec`) is a tree shape, a draft sampler, a
verifier and a temperature (or plain target sampling, the baseline). Every
(configuration, prompt) is one unit of work with its own random stream,
seeded from ``(seed, prompt id, configuration)``, so results do not depend on
``jobs`` or on which other configurations run beside it.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..distributions import check_memory, check_temperature
from ..errors import InputError, SizeLimitError, option
from ..samplers import get_sampler
from ..verifiers import get_verifier
from ..verifiers.base import sample_from_law
from .drafting import grow_tree
from .laws import model_rows, tempered
from .sequence import SEQUENCE_VERIFIERS
from .trees import TreeShape, parse_tree
from .walk import VerifierCache, walk_per_node


def _verifier(name: str):
    """A per-node verifier class (:data:`mdsd_cli.verifiers.VERIFIERS`) or a sequence-level verifier
    (:data:`~.sequence.SEQUENCE_VERIFIERS`); :class:`InputError` for unknown names."""
    if name in SEQUENCE_VERIFIERS:
        return SEQUENCE_VERIFIERS[name]
    try:
        return get_verifier(name)
    except InputError:
        from ..errors import unknown_choice
        from ..verifiers import VERIFIERS

        raise unknown_choice("verifier", name, [*VERIFIERS, *SEQUENCE_VERIFIERS]) from None


@dataclass(frozen=True)
class DecodeSpec:
    """One configuration: ``tree`` drafted by ``sampler`` and walked with ``verifier`` at ``temperature``.

    ``tree is None`` is plain target sampling (no speculation), the baseline.
    """

    tree: TreeShape | None
    sampler: str | None
    verifier: str | None
    temperature: float

    @property
    def plain(self) -> bool:
        return self.tree is None

    @property
    def label(self) -> str:
        if self.plain:
            return f"plain T={self.temperature:g}"
        return f"{self.tree.label} {self.sampler}/{self.verifier} T={self.temperature:g}"

    @property
    def stream(self) -> int:
        """A stable 32-bit key of the configuration (part of every unit's seed)."""
        text = "plain" if self.plain else f"{self.tree.describe()}|{self.sampler}|{self.verifier}"
        return zlib.crc32(f"{text}|{self.temperature!r}".encode())


# --- planning --------------------------------------------------------------------------------

def parse_verifier(text: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:SAMPLER`` (pins the draft law, e.g. ``nss:wor``)."""
    name, _, sampler = str(text).partition(":")
    _verifier(name)
    if sampler:
        get_sampler(sampler)
    return name, (sampler or None)


def _check_combination(tree: TreeShape, verifier: str, sampler: str, vocab_size: int) -> None:
    """Raise the reason ``verifier`` on ``sampler`` drafts cannot run on ``tree`` at this V (else None)."""
    cls = _verifier(verifier)
    if verifier in SEQUENCE_VERIFIERS:
        cls.check_tree(tree)
        if get_sampler(sampler).name != get_sampler(sampler).kind:
            raise InputError(f"{verifier} verifies plain iid or wor drafts, not the parametric law {sampler}; use a "
                             "per-node verifier (rrs, kseq, optimal-iid, rrsw, optimal-wor) for parametric laws")
    if cls.samplers is not None and get_sampler(sampler).kind not in cls.samplers:  # parametric laws by family
        raise InputError(f"verifier {verifier} is lossless for {'/'.join(cls.samplers)} drafts only, not "
                         f"{sampler}; pick --sampler {cls.samplers[0]} or pin it as {verifier}:{cls.samplers[0]}")
    fixed = cls.fixed_n or get_sampler(sampler).fixed_n
    if fixed is not None:
        other = [w for w in tree.widths if w != fixed]
        if other:
            what = (f"a random number of children (1 to {tree.paths})" if tree.kind == "paths"
                    else f"nodes with {other[0]} {'child' if other[0] == 1 else 'children'}")
            raise InputError(f"{verifier} on {sampler} drafts needs exactly {fixed} drafts at every node, but tree "
                             f"{tree.label} has {what}; use a tree whose nodes all have {fixed} children, such as "
                             f"{fixed}x{tree.depth}")
    uniform = np.full(vocab_size, 1.0 / vocab_size)
    for n in tree.widths:
        try:
            cls.check_size(uniform, n, sampler)
        except SizeLimitError as exc:
            raise SizeLimitError(f"{verifier} cannot run on tree {tree.label} (a node draws {n} drafts): {exc}") from None


def plan_decode(trees: Sequence, verifiers: Sequence[str], *, samplers: Sequence[str] = (),
                temperatures: Sequence[float] = (1.0,), vocab_size: int, baselines: bool = True):
    """Expand trees x verifiers (x samplers) x temperatures into :class:`DecodeSpec` s, checking each now.

    Each verifier runs on its pinned draft law (``NAME:SAMPLER``), else on each
    of ``samplers`` it is lossless for, else on its own default law. A
    combination that cannot run on some trees (``hub`` on a node with other than
    two children; ``optimal-wor`` at ``n >= 3`` at large V) is skipped there with
    its reason; if it can run on none, that reason is raised. With
    ``baselines``, plain target sampling and the single-draft chain ``1xD``
    (``rrs`` on ``iid``: speculative sampling) are added for every depth D.

    Returns ``(specs, skipped)`` — ``skipped`` is a list of messages.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise InputError(f"vocab_size must be an integer >= 1 (the models' V), got {vocab_size!r}")
    shapes = [t if isinstance(t, TreeShape) else parse_tree(t) for t in trees]
    if not shapes:
        raise InputError("no tree given; pass --tree (e.g. --tree 2x4)")
    labels = [s.label for s in shapes]
    if len(set(labels)) != len(labels):
        raise InputError(f"tree {next(x for x in labels if labels.count(x) > 1)} is given twice")
    temps = [check_temperature(t) for t in dict.fromkeys(temperatures)]
    if not temps:
        raise InputError("no temperature given")
    samplers = list(dict.fromkeys(samplers))
    for s in samplers:
        get_sampler(s)
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for text in dict.fromkeys(verifiers):
        name, pinned = parse_verifier(text)
        cls = _verifier(name)
        if pinned:
            laws = [pinned]
        elif samplers:
            laws = [s for s in samplers if cls.samplers is None or get_sampler(s).kind in cls.samplers]
            if not laws:
                raise InputError(f"verifier {name} is lossless for {'/'.join(cls.samplers)} drafts only, not "
                                 f"{'/'.join(samplers)}; add --sampler {cls.samplers[0]} or drop --verifier {name}")
        else:
            laws = [cls.default_sampler]
        for law in laws:
            if (name, law) not in pairs:
                pairs.append((name, law))
            used.add(law)
    if not pairs:
        raise InputError("no verifier given; pass --verifier (e.g. --verifier rrs)")
    unused = [s for s in samplers if s not in used]
    if unused:
        raise InputError(f"no verifier given for {unused[0]} drafts; add a verifier for them "
                         f"(e.g. --verifier {'rrsw' if unused[0] == 'wor' else unused[0] if unused[0] in ('greedy', 'hub', 'topk') else 'rrs'})")
    runs: list[tuple[TreeShape, str, str]] = []
    skipped: list[str] = []
    for name, law in pairs:
        failed = []
        for shape in shapes:
            try:
                _check_combination(shape, name, law, vocab_size)
            except (InputError, SizeLimitError) as exc:
                failed.append((shape, exc))
                continue
            runs.append((shape, law, name))
        if len(failed) == len(shapes):
            raise failed[0][1]
        skipped += [f"skipping {name} on {law} drafts for tree {shape.label}: {exc}" for shape, exc in failed]
    if baselines:
        present = {s.label for s, law, name in runs if s.kind == "static" and set(s.widths) == {1}}
        for depth in sorted({s.depth for s in shapes}):
            label = f"1x{depth}"
            if label not in present:
                runs.append((parse_tree(label), "iid", "rrs"))
    specs = []
    for T in temps:
        if baselines:
            specs.append(DecodeSpec(None, None, None, T))
        specs += [DecodeSpec(shape, law, name, T) for shape, law, name in runs]
    check_tree_memory(specs, vocab_size)
    return specs, skipped


#: Peak bytes per tree node and vocabulary entry while a step is verified: the target's and the
#: draft's float64 rows of every node and one temporary (a 2,047-node tree at V = 152,064 peaked at
#: 7.2 GB per process).
TREE_BYTES_PER_ENTRY = 8.0 * 3


def check_tree_memory(specs, vocab_size: int, *, processes: int = 1) -> None:
    """Refuse, before any work, trees whose rows would not fit: ``processes`` decoding at once, under the
    machine's memory, a cgroup limit and ``ulimit -v`` (see :func:`~mdsd_cli.distributions.check_memory`)."""
    nodes = max((s.tree.max_nodes for s in specs if not s.plain), default=0)
    if nodes:
        check_memory(nodes * vocab_size * TREE_BYTES_PER_ENTRY, f"a tree of {nodes:,} nodes at V={vocab_size:,}",
                     "use a smaller tree", processes=processes)


# --- one prompt --------------------------------------------------------------------------------

@dataclass
class PromptRun:
    """What one (configuration, prompt) produced."""

    spec: int
    prompt: int
    generated: list[int]
    #: one row per step: position, tokens (the walk's, before truncation), accepted, nodes, passes,
    #: draft model / tree bookkeeping / target model / verification / KV-cache bookkeeping seconds
    steps: np.ndarray = field(default_factory=lambda: np.zeros((0, 10)))
    #: one row per verification: step, depth, n, accepted, conditional acceptance, alpha*
    visits: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))


STEP_COLUMNS = ("position", "tokens", "accepted", "nodes", "draft_passes", "draft_seconds", "tree_seconds",
                "target_seconds", "verify_seconds", "cache_seconds")
VISIT_COLUMNS = ("step", "depth", "n", "accepted", "acceptance", "alpha_star")


def _node_alpha_star(visit, sampler: str) -> float:
    from ..bounds.chain import chain_solve

    return float(chain_solve(visit.p[None, :], visit.q[None, :], visit.n, sampler=sampler, want_sets=False)[0][0])


def decode_prompt(target, draft, prompt: Sequence[int], spec: DecodeSpec, *, max_new_tokens: int,
                  rng: np.random.Generator, node_metrics: bool = True, cache: VerifierCache | None = None,
                  verify_on: str = "host") -> tuple[list[int], np.ndarray, np.ndarray]:
    """Generate up to ``max_new_tokens`` tokens after ``prompt``; returns ``(ids, steps, visits)`` arrays.

    Per step: grow the draft tree (:func:`~.drafting.grow_tree`), score all its
    nodes with one ``target.tree_logits`` call, walk down
    (:func:`~.walk.walk_per_node`) and append the walk's tokens (the last step's
    are cut at ``max_new_tokens``; generation also ends after the target's
    end-of-sequence token). Plain sampling (``spec.plain``) draws one token per
    target call (with a KV cache: one new token fed per call, as ``generate``
    does). ``alpha_star`` adds α* of each visited node's own draft law.

    ``verify_on="device"`` verifies every node of a tree in one batched call on
    the device of the target's logits (:func:`~.device_walk.walk_on_device`; the
    sequence-level verifiers by :func:`~.device_sequence.walk_sequence_on_device`);
    ``"host"`` walks in numpy.

    Both models' caches are emptied first (``reset_cache``), so a prompt's
    tokens do not depend on what ran before. Time a model spends on its KV-cache
    bookkeeping (its ``cache_seconds`` counter: matching the prefix, cutting the
    cache to the accepted path, building the tree mask) is moved out of the
    draft and target columns into ``cache_seconds``.
    """
    eos = target.eos_token_id
    context = list(prompt)
    generated: list[int] = []
    steps, visits = [], []
    T = spec.temperature
    for model in (target, draft):
        model.reset_cache()
    if spec.plain:
        while len(generated) < max_new_tokens:
            c0 = target.cache_seconds
            t0 = time.perf_counter()
            logits = model_rows(target, target.tree_logits(context, [-1], [-1], [0]), 1)
            t1 = time.perf_counter()
            y = int(sample_from_law(tempered(logits[0], T)[0], 1, rng)[0])
            t2 = time.perf_counter()
            cache_seconds = target.cache_seconds - c0
            steps.append((len(generated), 1, 0, 1, 0, 0.0, 0.0, t1 - t0 - cache_seconds, t2 - t1, cache_seconds))
            generated.append(y)
            context.append(y)
            if eos is not None and y == eos:
                break
        return generated, np.array(steps, dtype=float).reshape(-1, len(STEP_COLUMNS)), np.zeros((0, 6))
    sampler = get_sampler(spec.sampler)
    sequence = SEQUENCE_VERIFIERS.get(spec.verifier)
    verifier_cls = None if sequence else get_verifier(spec.verifier)
    on_device = verify_on == "device"
    if on_device:
        import torch

        from .device_sequence import DEVICE_SEQUENCE_VERIFIERS, walk_sequence_on_device
        from .device_walk import as_device_rows, logits_device, one_thread_on_cpu, walk_on_device

        device = logits_device(target)
        generator = torch.Generator(device=device)
    with _logits_kept_on_device(target, on_device):
        while len(generated) < max_new_tokens:
            d0 = draft.cache_seconds
            tree = grow_tree(draft, context, spec.tree, sampler, T, rng)
            draft_cache = draft.cache_seconds - d0
            c0 = target.cache_seconds
            t0 = time.perf_counter()
            raw = target.tree_logits(context, tree.parents, tree.tokens, range(tree.size))
            if on_device:
                logits = as_device_rows(target, raw, tree.size, device)
            else:
                logits = model_rows(target, raw, tree.size)
            target_cache = target.cache_seconds - c0
            target_seconds = time.perf_counter() - t0 - target_cache
            if on_device:
                generator.manual_seed(int(rng.integers(2**63)))
                with one_thread_on_cpu(device):
                    if sequence is not None and spec.verifier not in DEVICE_SEQUENCE_VERIFIERS:
                        # no device form (select-block builds a per-node optimal verifier on the host at each
                        # node of its path): the tree's rows come to the host, one copy per step
                        walk = sequence.walk(tree, logits.detach().double().cpu().numpy(), T, spec.sampler, rng,
                                             eos_token_id=eos, cache=cache)
                    elif sequence is not None:
                        walk = walk_sequence_on_device(spec.verifier, tree, logits, T, spec.sampler, generator,
                                                       eos_token_id=eos, visit_rows=node_metrics)
                    else:
                        walk = walk_on_device(tree, logits, T, spec.verifier, spec.sampler, generator,
                                              eos_token_id=eos, conditional_acceptance=node_metrics)
            elif sequence is not None:
                walk = sequence.walk(tree, logits, T, spec.sampler, rng, eos_token_id=eos, cache=cache)
            else:
                walk = walk_per_node(tree, logits, T, verifier_cls, spec.sampler, rng, eos_token_id=eos,
                                     cache=cache, conditional_acceptance=node_metrics)
            step = len(steps)
            for v in walk.visits:
                a = _node_alpha_star(v, spec.sampler) if node_metrics else math.nan
                visits.append((step, v.depth, v.n, float(v.accepted), v.acceptance, a))
            steps.append((len(generated), len(walk.tokens), walk.accepted, tree.size, tree.passes,
                          tree.model_seconds - draft_cache, tree.bookkeeping_seconds, target_seconds, walk.seconds,
                          draft_cache + target_cache))
            take = walk.tokens[: max_new_tokens - len(generated)]
            generated += take
            context += take
            if eos is not None and eos in take:
                break
    return (generated, np.array(steps, dtype=float).reshape(-1, len(STEP_COLUMNS)),
            np.array(visits, dtype=float).reshape(-1, len(VISIT_COLUMNS)))


@contextlib.contextmanager
def _logits_kept_on_device(model, on: bool):
    """A Hugging Face model returns its logits as host arrays; while verifying on the device, as device
    tensors (its ``logits_on_device`` switch). Other models are left as they are."""
    if not on or not hasattr(model, "logits_on_device"):
        yield
        return
    before, model.logits_on_device = model.logits_on_device, True
    try:
        yield
    finally:
        model.logits_on_device = before


# --- many prompts ------------------------------------------------------------------------------

@dataclass
class DecodeRun:
    """Everything a decode produced: the configurations, the prompts and one :class:`PromptRun` per pair."""

    specs: list[DecodeSpec]
    prompts: list
    runs: list[PromptRun]
    max_new_tokens: int
    seed: int
    seconds: float = 0.0


_STATE: dict = {}  # set before forking workers: models, prompts, specs (never pickled)


def _unit(si: int, pi: int) -> PromptRun:
    st = _STATE
    spec, prompt = st["specs"][si], st["prompts"][pi]
    rng = np.random.default_rng([st["seed"], int(prompt.id), spec.stream])
    cache = None
    sequence = SEQUENCE_VERIFIERS.get(spec.verifier)
    per_node = spec.verifier if sequence is None else sequence.per_node(spec.sampler)
    if st["reuse_verifiers"] and not spec.plain and per_node is not None:
        caches = st.setdefault("caches", {})
        if si not in caches:
            V = st["target"].vocab_size
            caches[si] = VerifierCache(get_verifier(per_node), spec.sampler, max_entries=max(16, (1 << 22) // V))
        cache = caches[si]
    ids, steps, visits = decode_prompt(st["target"], st["draft"], prompt.tokens, spec,
                                       max_new_tokens=st["max_new_tokens"], rng=rng, node_metrics=st["node_metrics"],
                                       cache=cache, verify_on=st.get("verify_on", "host"))
    return PromptRun(si, pi, ids, steps, visits)


def check_prompts(prompts, target, *, max_new_tokens: int, depth: int, draft=None) -> None:
    """Refuse prompts with ids outside the vocabulary, repeated ids, or too long for the models' context.

    The context checked is the shorter of the target's and the draft's ``max_context`` (None: unlimited);
    the draft reads the same contexts as the target, up to one token fewer.
    """
    if not prompts:
        raise InputError("no prompts to decode")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise InputError("prompt ids repeat; every prompt needs its own id (it seeds its random stream)")
    V = target.vocab_size
    context = target.max_context
    model = "the model's"
    draft_context = getattr(draft, "max_context", None)
    if draft_context is not None and (context is None or draft_context < context):
        context, model = draft_context, "the draft model's"
    for p in prompts:
        bad = [t for t in p.tokens if not 0 <= int(t) < V]
        if bad:
            raise InputError(f"prompt {p.id} has token {bad[0]} outside the vocabulary 0..{V - 1}")
        if context is None:
            continue
        if len(p.tokens) >= context:
            raise InputError(f"prompt {p.id} has {len(p.tokens)} tokens, as long as or longer than {model} "
                             f"context of {context} tokens; shorten it")
        if len(p.tokens) + max_new_tokens + depth + 1 > context:
            raise InputError(f"prompt {p.id} ({len(p.tokens)} tokens) + {max_new_tokens} new tokens + a tree of "
                             f"depth {depth} exceed {model} context of {context} tokens; lower "
                             f"{option('--max-new-tokens', 'max_new_tokens')} or use a shallower tree")


def warm_up_verifiers(specs: Sequence[DecodeSpec]) -> None:
    """Run each per-node verifier of ``specs`` once on a 3-token pair, so that one-off costs (loading the
    compiled kernels of ``optimal-iid``/``optimal-wor``, about 2 s) are paid before the clock starts and
    not charged to the first configuration that uses them. Draws from its own generator: no run's stream
    is touched."""
    from ..errors import MdsdError

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    rng = np.random.default_rng(0)
    for verifier, sampler in dict.fromkeys((s.verifier, s.sampler) for s in specs if not s.plain):
        if verifier in SEQUENCE_VERIFIERS:
            continue
        try:
            v = get_verifier(verifier)(p, q, 2, sampler)
            v.sample(get_sampler(sampler).sample(q, 2, rng, 1), rng)
        except MdsdError:
            pass


def run_decode(target, draft, prompts, specs: Sequence[DecodeSpec], *, max_new_tokens: int, seed: int = 0,
               jobs: int = 1, node_metrics: bool = True, reuse_verifiers: bool = False, progress=None,
               verify_on: str = "auto") -> DecodeRun:
    """Decode every prompt with every configuration (``jobs`` processes; same results for any ``jobs``).

    Models whose ``fork_safe`` attribute is False (Hugging Face models) run in
    this process whatever ``jobs`` says.

    ``node_metrics``: see :func:`decode_prompt`. ``reuse_verifiers`` keeps a :class:`~.walk.VerifierCache` per configuration
    (per process): identical outputs, less time where pairs repeat; the
    verification times then no longer measure one set-up per node.
    ``progress(k)`` is called as units finish. ``verify_on``: ``device`` verifies
    every tree on the device of the target's logits in one batched call per step
    (:mod:`.device_walk`; torch needed, also on the CPU), ``host`` in numpy node by
    node, ``auto`` on the device when the target's logits are on an accelerator.
    The two paths draw from other random streams: the same law, other tokens.
    """
    from .device_walk import resolve_verify_on

    verify_on = resolve_verify_on(verify_on, target)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be an integer >= 0 (each configuration and prompt gets its own stream from it), "
                         f"got {seed!r}")
    if target.vocab_size != draft.vocab_size:
        raise InputError(f"the target's vocabulary ({target.vocab_size:,}) differs from the draft's "
                         f"({draft.vocab_size:,}); both models must share one vocabulary")
    depth = max((s.tree.depth for s in specs if not s.plain), default=0)
    check_prompts(prompts, target, max_new_tokens=max_new_tokens, depth=depth, draft=draft)
    if not (getattr(target, "fork_safe", True) and getattr(draft, "fork_safe", True)):
        jobs = 1  # a torch model is not copied into forked workers safely: one process (see the docs)
    check_tree_memory(specs, target.vocab_size, processes=min(int(jobs), len(specs) * len(prompts)))
    advance = progress or (lambda k=1: None)
    _STATE.update(target=target, draft=draft, prompts=list(prompts), specs=list(specs), seed=int(seed),
                  max_new_tokens=int(max_new_tokens), node_metrics=node_metrics, reuse_verifiers=reuse_verifiers,
                  verify_on=verify_on)
    units = [(si, pi) for si in range(len(specs)) for pi in range(len(prompts))]
    # run prompt by prompt, every configuration in turn: the progress rate then mixes cheap and costly
    # configurations from the start, so the ETA holds (each unit has its own stream: same results)
    order = [(si, pi) for pi in range(len(prompts)) for si in range(len(specs))]
    warm_up_verifiers(specs)  # before the clock and before forking: every worker inherits it
    t0 = time.perf_counter()
    results: dict[tuple[int, int], PromptRun] = {}
    try:
        if jobs > 1 and len(units) > 1:
            import multiprocessing

            with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
                futures = {pool.submit(_unit, si, pi): (si, pi) for si, pi in order}
                for fut in cf.as_completed(futures):
                    results[futures[fut]] = fut.result()
                    advance(1)
        else:
            for si, pi in order:
                results[(si, pi)] = _unit(si, pi)
                advance(1)
    finally:
        _STATE.clear()
    return DecodeRun(list(specs), list(prompts), [results[u] for u in units], int(max_new_tokens), int(seed),
                     time.perf_counter() - t0)


__all__ = ["STEP_COLUMNS", "VISIT_COLUMNS", "DecodeRun", "DecodeSpec", "PromptRun", "check_prompts",
           "decode_prompt", "parse_verifier", "plan_decode", "run_decode"]
