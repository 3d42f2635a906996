"""Where a command's pairs come from: a file (--data) or a synthetic family."""

from __future__ import annotations

import numpy as np

from ..distributions import PairBatch, dirichlet_pairs, zipf_pairs
from ..errors import InputError
from .console import warn


def resolve_pairs(*, data, synthetic, pairs: int, vocab: int, seed: int, concentration: float,
                  exponent: float, noise: float, renormalize: bool) -> PairBatch:
    """Pairs at temperature 1 from ``--data`` or ``--synthetic`` (exactly one)."""
    if data is not None and synthetic is not None:
        raise InputError("give either --data FILE or --synthetic FAMILY, not both")
    if data is not None:
        from ..datasets import load_data

        batch = load_data(data, renormalize=renormalize)
        if batch.metadata.get("complete") is False:
            from ..datasets.dumps import dump_status

            warn(f"{data}: " + dump_status(data, manifest=batch.metadata,
                                          stored=np.unique(batch.labels["prompt_id"])).note)
        return batch
    if synthetic is None:
        raise InputError("no pairs given: pass --data (a file, a dump directory or a built-in dataset such as "
                         "pydoc-ngram) or --synthetic zipf|dirichlet")
    family = synthetic.value if hasattr(synthetic, "value") else str(synthetic)
    if family == "dirichlet":
        return dirichlet_pairs(pairs, vocab, concentration=concentration, seed=seed)
    return zipf_pairs(pairs, vocab, exponent=exponent, noise=noise, seed=seed)


def synthetic_config(*, synthetic, pairs, vocab, seed, concentration, exponent, noise) -> dict:
    """The synthetic spec as plain data for manifests."""
    if synthetic is None:
        return {}
    family = synthetic.value if hasattr(synthetic, "value") else str(synthetic)
    spec = {"family": family, "pairs": pairs, "vocab": vocab, "seed": seed}
    if family == "dirichlet":
        spec["concentration"] = concentration
    else:
        spec.update(exponent=exponent, noise=noise)
    return spec
