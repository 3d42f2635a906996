"""``mdsd bench``: every performance target as a ratio to a baseline measured in the same run.

Each figure is repeated, alternating with its baseline (ABAB, so drifting
load on a shared machine hits both); the median and the range are reported, with the
peak memory numpy allocated during one extra run (``tracemalloc``, inputs
excluded). Targets (issue "Performance"), V = 152,064 unless stated:

===============================================  ==============================  ==========
figure                                           baseline (same run)             target
===============================================  ==============================  ==========
α* iid, chain, one pair, n = 4                   one numpy.argsort of length V   <= 2x
α* greedy, one pair                              one numpy.argsort               <= 1x
α* wor, one pair, n = 8                          one numpy.argsort               <= 150x
α* iid, 1,024 pairs at V = 32,000                1,024 argsorts (one call)        <= 2x
exact rate of rrs, kseq, nss, greedy, n = 8      one numpy.argsort               <= 3x each
rrsw Monte Carlo, V = 32,000, n = 4              --                              >= 1e5 tuples/s
chain vs primal-lp at the largest LP < 60 s      the LP's time                   >= 1e4x faster, |diff| <= 1e-6
peak memory, α* iid for 1,024 pairs at V         the input arrays' size          <= 3x
optimal-iid (n = 2, 4, 8): set-up + one step     one numpy.argsort of a row     <= 5x
per pair, at V, for a batch at V = 32,000 and
on pydoc-ngram; see :mod:`mdsd_cli.bench.optimal`
optimal-wor (n = 2, 4, 8): set-up + one step     α*_wor of the same pair        <= 3x on the
per pair on six pair shapes, worst and median;                                   worst shape
see :mod:`mdsd_cli.bench.wor`
decode overhead, 4x3 tree, V = 2,380 and V:      one numpy.argsort               <= 3x per node
rrs, kseq (per tree node), optimal-iid (per                                      (optimal-iid:
verified node); see :mod:`mdsd_cli.bench.decode`                                 <= 5x per node)
torch verification on the CPU (--verify-on       numpy's walk, same run           <= 1x per
device), 4x3 tree, V = 2,380 and V: rrs, kseq,                                   verified node
rrsw; with CUDA also per node on the GPU (vs
torch.argsort there) and the verifying share of
a step on the tiny HF pair; see
:mod:`mdsd_cli.bench.decode`
mdsd audit's harness, battery at n = 3, with a   the same calls in a plain loop  <= 0.2
numpy RRS; with a trivial callable, calls/s;                                     >= 5e5 calls/s
see :mod:`mdsd_cli.bench.audit`
===============================================  ==============================  ==========

One module per figure family, each a function ``(config) -> rows`` per figure:
:mod:`~mdsd_cli.bench.acceptance` (iid, greedy, wor, rates, batch, rrsw, lp, memory),
:mod:`~mdsd_cli.bench.optimal` (with :mod:`~mdsd_cli.bench.wor`), :mod:`~mdsd_cli.bench.decode` (decode, expected, device) and
:mod:`~mdsd_cli.bench.audit`; all of them build on :mod:`~mdsd_cli.bench.common` (the sizes,
``random_pairs``, the timing helpers and the row), and only this module runs them.
"""

from __future__ import annotations

from .common import BenchConfig, machine_description, random_pairs

#: The figures' names, as ``--only`` takes them and ``--help`` lists them.
FIGURES = ("iid", "greedy", "wor", "batch", "rates", "rrsw", "lp", "memory", "optimal", "decode", "expected",
           "audit", "device")


def _figure_rows() -> tuple:
    """``(name, rows function)`` for every figure, in the order they run (the table's row order)."""
    from . import acceptance, audit, decode, optimal

    return (("iid", acceptance.iid_rows), ("greedy", acceptance.greedy_rows), ("wor", acceptance.wor_rows),
            ("rates", acceptance.rate_rows), ("batch", acceptance.batch_rows), ("rrsw", acceptance.rrsw_rows),
            ("decode", decode.decode_overhead_rows), ("device", decode.device_rows),
            ("expected", decode.expected_rows), ("lp", acceptance.lp_rows), ("memory", acceptance.memory_rows),
            ("optimal", optimal.optimal_rows), ("audit", audit.audit_overhead_rows))


def run_benchmarks(config: BenchConfig = BenchConfig(), *, figures=FIGURES, progress=None) -> list[dict]:
    """Measure the selected figures; returns one record per row of the table."""
    advance = progress or (lambda: None)
    rows: list[dict] = []
    for name, figure_rows in _figure_rows():
        if name in figures:
            rows += figure_rows(config)
            advance()
    return rows


__all__ = ["FIGURES", "BenchConfig", "machine_description", "random_pairs", "run_benchmarks"]
