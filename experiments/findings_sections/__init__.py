"""The sections of results/FINDINGS.md, one module per experiment; `experiments/findings.py` runs them.

Each section is a function ``results_dir -> list of Markdown lines`` named after its experiment:
draft_samplers (1), verifier_gap (2), num_drafts (3), scaling (4), tree_decode (5), draft_design (6),
sequence_level (7), neural_pair (8: sections 1-5 on the shipped neural pair). ``common`` holds what they share: the tolerance ``TOL``, ``load`` (an
experiment's summary.csv and pairs.parquet) and ``verdict`` (the bold word that ends a finding).
"""

from __future__ import annotations

from .draft_design import draft_design
from .draft_samplers import draft_samplers
from .neural_pair import neural_pair
from .num_drafts import num_drafts
from .scaling import scaling
from .sequence_level import sequence_level
from .tree_decode import tree_decode
from .verifier_gap import verifier_gap

#: The sections in the order FINDINGS.md prints them.
SECTIONS = (draft_samplers, verifier_gap, num_drafts, scaling, tree_decode, draft_design, sequence_level,
            neural_pair)

__all__ = ["SECTIONS", "draft_design", "draft_samplers", "neural_pair", "num_drafts", "scaling", "sequence_level",
           "tree_decode", "verifier_gap"]
