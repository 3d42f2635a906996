"""The ``audit`` figure of ``mdsd bench``: what ``mdsd audit`` adds to the time of the calls it makes.

Two audits of the battery at n = 3 (iid drafts), timed alternately (ABAB) in the same run, each with
as many calls as half the ``rrsw`` figure's samples (100,000 by default):

* a plain-numpy recursive rejection sampler (:func:`mdsd_cli.audit.examples.rrs`, the kind of function
  the audit is for): the harness's time (the audit's wall time minus the function's own time, summed
  call by call) as a ratio to the function's own time. Target (issue "mdsd audit"): <= 0.2;
* a trivial lossless callable (it returns pre-drawn samples of p, about 0.1 us a call), so that
  nearly all the time is the harness's: its cost per call, and the calls per second it allows.
"""

from __future__ import annotations

import statistics
import time

import numpy as np


class _Timed:
    """A function that sums its own time, call by call."""

    def __init__(self, fn):
        self.fn, self.own = fn, 0.0

    def __call__(self, p, q, drafts, rng):
        t0 = time.perf_counter()
        out = self.fn(p, q, drafts, rng)
        self.own += time.perf_counter() - t0
        return out


class _SamplesOfP:
    """Returns pre-drawn samples of p whatever the drafts: lossless, and as cheap as a call gets."""

    def __init__(self, per_case: int, seed: int):
        self.per_case, self.rng = per_case, np.random.default_rng(seed)
        self.streams: dict = {}
        self.last = None
        self.stream = iter(())

    def __call__(self, p, q, drafts, rng):
        if p is not self.last:
            self.last = p
            if id(p) not in self.streams:
                self.streams[id(p)] = (p, iter(self.rng.choice(p.size, size=self.per_case, p=p).tolist()))
            self.stream = self.streams[id(p)][1]
        return next(self.stream)


def audit_overhead_rows(config, row) -> list[dict]:
    """Rows of the ``audit`` figure; ``row`` is the bench's row builder."""
    from .audit import audit_verifier, battery_cases
    from .audit.examples import rrs

    calls = max(12_000, config.mc_samples // 2)
    cases = battery_cases(3)
    per_case = calls // len(cases)
    vocab = max(c.vocab_size for c in cases)
    results: dict[str, list] = {"rrs": [], "trivial": []}

    def once(name):
        fn = _Timed(rrs if name == "rrs" else _SamplesOfP(per_case, config.seed))
        t0 = time.perf_counter()
        report = audit_verifier(fn, sampler="iid", n=3, cases=cases, budget=calls, seed=config.seed)
        total = time.perf_counter() - t0
        results[name].append((total - fn.own, fn.own, report.calls))

    once("rrs")
    once("trivial")  # warm-up
    results = {"rrs": [], "trivial": []}
    for _ in range(max(1, config.repeats)):
        once("rrs")
        once("trivial")
    rows = []
    for name, label in (("rrs", "audit overhead, numpy rrs"), ("trivial", "audit overhead, trivial callable")):
        harness = [h / c for h, _, c in results[name]]
        own = [o / c for _, o, c in results[name]]
        ratios = [h / o for h, o in zip(harness, own)]
        stats = (statistics.median(harness), min(harness), max(harness))
        base = (statistics.median(own), min(own), max(own))
        ratio = statistics.median(ratios)
        note = (f"harness {stats[0] * 1e6:.2f} us/call ({1 / stats[0]:,.0f} calls/s), the function's own "
                f"{base[0] * 1e6:.2f} us/call; {results[name][0][2]:,} calls")
        if name == "rrs":
            rows.append(row(label, 3, vocab, len(cases), stats, "the calls' own time", base, target="<= 0.2",
                            ratio=ratio, passed=ratio <= 0.2, note=note))
        else:
            entry = row(label, 3, vocab, len(cases), stats, "the calls' own time", base, target="(the harness alone)",
                        ratio=ratio, passed=True, note=note)
            entry["status"] = "-"
            rows.append(entry)
    return rows
