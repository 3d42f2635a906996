"""Benchmark of `mdsd decode` on Hugging Face models: speed-up over plain target sampling, measured in one run.

Every configuration decodes the same prompts in the same process, one after
another, and each is reported as a ratio to plain target sampling (one token
per cached target pass, the loop ``generate`` runs) timed in the same run:

* ``speedup``: tokens/s of tree decoding over plain sampling's, with the
  whole tree scored in one pass with a tree attention mask on the KV cache;
* the same trees with ``--scoring paths`` (each root-to-leaf path as its own
  sequence, no cache), against the same cached plain sampling: what the tree
  pass buys over the fallback;
* the time per step split into draft passes, the target pass, verification and
  KV-cache bookkeeping (milliseconds per step, means).

Without ``--target``/``--draft`` it runs the shipped trained pair (``pystdlib``,
on four of its held-out prompts) and a tiny random pair it builds locally
(:func:`mdsd_cli.models.tiny.build_tiny_pair`: a Llama-style target of
``--layers`` layers, its first layer as an early-exit draft), each against its
own plain sampling (``--pair`` picks one), so it runs anywhere; on a GPU give a
real pair, e.g.::

    python benchmarks/bench_hf_decode.py --target Qwen/Qwen2.5-7B-Instruct \\
        --draft Qwen/Qwen2.5-0.5B-Instruct --prompts prompts.txt --device cuda --dtype bfloat16

Usage: python benchmarks/bench_hf_decode.py [--pair both|pystdlib|tiny] [--layers L] [--hidden H] [--tokens N]
       [--tree SPEC ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

PROMPTS = ["return the index of the first item in the list", "the default value of the argument is",
           "if the object is a class , the method", "raise an exception when the file"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="target model (directory or Hub name); default: a tiny local pair")
    ap.add_argument("--draft", help="draft model (with --target)")
    ap.add_argument("--prompts", type=Path, help="prompts file (one per line); default: four built-in lines")
    ap.add_argument("--layers", type=int, default=12, help="tiny pair: target layers")
    ap.add_argument("--hidden", type=int, default=512, help="tiny pair: hidden size")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per prompt")
    ap.add_argument("--tree", action="append", help="tree spec(s) (default: 2x3 and 4,2,1; the chain 1xD is added)")
    ap.add_argument("--verifier", default="rrs")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--no-paths", action="store_true", help="skip the fallback (--scoring paths) runs")
    ap.add_argument("--pair", choices=("both", "pystdlib", "tiny"), default="both",
                    help="without --target: the shipped trained pair (pystdlib), the tiny random pair, or both")
    args = ap.parse_args()

    from mdsd_cli.models.hf import import_hf, quiet_transformers

    quiet_transformers(import_hf()[1])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.target:
            pairs = [(f"{args.target} / {args.draft}", args.target, args.draft, None)]
        else:
            pairs = []
            if args.pair in ("both", "pystdlib"):
                from mdsd_cli.models.trained import pystdlib_paths, pystdlib_prompts

                paths = pystdlib_paths()
                pairs.append(("pystdlib (trained)", str(paths.target), str(paths.draft),
                              [p.tokens for p in pystdlib_prompts(4)]))
            if args.pair in ("both", "tiny"):
                from mdsd_cli.models.tiny import build_tiny_pair

                target, draft = map(str, build_tiny_pair(Path(tmp), layers=args.layers, hidden=args.hidden,
                                                         heads=max(1, args.hidden // 64)))
                pairs.append((f"tiny random ({args.layers} layers)", target, draft, None))
        for label, target, draft, ids in pairs:
            rows += _bench_pair(label, target, draft, ids, args)
    print(f"{args.tokens} new tokens per prompt, T = {args.temperature}, {args.verifier}; speedup = tokens/s over "
          "plain sampling of the same pair in the same run")
    print(f"{'pair':24} {'scoring':8} {'tree':7} {'tau':>5} {'nodes':>6} {'tok/s':>8} {'speedup':>8}   ms/step: "
          f"{'draft':>6} {'bookkp':>6} {'target':>6} {'verify':>6} {'cache':>6}")
    for r in rows:
        print(f"{r['pair']:24} {r['scoring']:8} {r['tree']:7} {r['tau']:5.2f} {r['nodes']:6.1f} {r['tok/s']:8.1f} "
              f"{r['speedup']:7.2f}x            {r['draft_seconds']:6.2f} {r['tree_seconds']:6.2f} "
              f"{r['target_seconds']:6.2f} {r['verify_seconds']:6.2f} {r['cache_seconds']:6.2f}")
    return 0


def _bench_pair(label, target, draft, ids, args) -> list[dict]:
    """The rows of one pair: each tree (and the chain) against plain sampling, tree pass and fallback."""
    import numpy as np

    from mdsd_cli.decode import plan_decode, run_decode
    from mdsd_cli.decode.metrics import S, summarize
    from mdsd_cli.models import Prompt, load_hf_pair

    texts = args.prompts.read_text().splitlines() if args.prompts else PROMPTS
    trees = args.tree or ["2x3", "4,2,1"]  # the chain 1x3 is added as a baseline
    rows = []
    plain_rate = None  # tokens/s of plain sampling on the KV cache: the baseline of every row
    for scoring in ("tree",) if args.no_paths else ("tree", "paths"):
        pair = load_hf_pair(target, draft, device=args.device, dtype=args.dtype, scoring=scoring,
                            threads=args.threads, notify=lambda m: print(f"note: {m}", file=sys.stderr))
        prompts = ([Prompt(i, tuple(x)) for i, x in enumerate(ids)] if ids is not None and not args.prompts else
                   [Prompt(i, tuple(pair.target.encode(t))) for i, t in enumerate(texts) if t.strip()])
        specs, _ = plan_decode(trees, [args.verifier], temperatures=[args.temperature],
                               vocab_size=pair.vocab_size, baselines=scoring == "tree")
        run_decode(pair.target, pair.draft, prompts[:1], specs, max_new_tokens=4, seed=1)  # warm-up
        run = run_decode(pair.target, pair.draft, prompts, specs, max_new_tokens=args.tokens, seed=0,
                         node_metrics=False)
        summary = summarize(run)
        if plain_rate is None:
            plain_rate = float(summary.tokens_per_second[summary.tree == "plain"].iloc[0])
        for spec_index, row in summary.iterrows():
            steps = np.concatenate([r.steps for r in run.runs if r.spec == spec_index])
            ms = {k: 1e3 * float(steps[:, S[k]].mean()) for k in
                  ("draft_seconds", "tree_seconds", "target_seconds", "verify_seconds", "cache_seconds")}
            rows.append({"pair": label, "scoring": scoring, "tree": row.tree, "tau": row.block_efficiency,
                         "nodes": row.mean_nodes, "tok/s": row.tokens_per_second,
                         "speedup": row.tokens_per_second / plain_rate, **ms})
    return rows


if __name__ == "__main__":
    sys.exit(main())
