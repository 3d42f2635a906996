"""The optimal verifiers: how α* is reached, one construction per module.

Both pick one draft with the candidate law of ``candidate`` (the chain, its priority blocks), then
run speculative sampling on it. ``optimal-iid`` (``iid``) picks inside a block by the left curtain
(``curtain``); ``optimal-wor`` (``wor``) by nested chords at every n >= 2 (``chords``), or at n = 2
with ``PAIR_CHORDS`` off by boundary marks (``boundary``), where an n = 2 block whose boundary check
fails falls back to Luce weights (``luce``): by enumeration of the draft sets at small V, else by
quadrature. Each construction's
compiled kernels sit beside it (``_candidate_kernels``, ``_curtain_kernels``, ...).
"""

from .iid import CHUNK_BUDGET, OptimalIID
from .wor import CHORDS, FAST_PAIRS, MAX_WOR_SETS, PAIR_CHORDS, OptimalWOR

# the switches are read where they are defined: patch ``optimal.wor.FAST_PAIRS``, not the copy here
__all__ = ["CHORDS", "CHUNK_BUDGET", "FAST_PAIRS", "MAX_WOR_SETS", "PAIR_CHORDS", "OptimalIID", "OptimalWOR"]
