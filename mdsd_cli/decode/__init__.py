"""Multi-draft speculative decoding with draft trees: shapes, drafting, the walk down, metrics."""

from .drafting import DraftTree, grow_tree
from .engine import DecodeRun, DecodeSpec, decode_prompt, parse_verifier, plan_decode, run_decode
from .trees import MAX_TREE_NODES, TreeShape, parse_tree, sparse_tree
from .walk import Visit, WalkResult, walk_per_node

__all__ = ["MAX_TREE_NODES", "DecodeRun", "DecodeSpec", "DraftTree", "TreeShape", "Visit", "WalkResult",
           "decode_prompt", "grow_tree", "parse_tree", "parse_verifier", "plan_decode", "run_decode",
           "sparse_tree", "walk_per_node"]
