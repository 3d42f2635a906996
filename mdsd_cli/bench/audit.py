"""The ``audit`` figure of ``mdsd bench``: what ``mdsd audit`` adds to the time of the calls it makes.

An audit of the battery at n = 3 (iid drafts), with as many calls as half the ``rrsw`` figure's
samples (100,000 by default), is timed against its baseline, **the same calls made in a plain
loop**: every ``fn(p, q, drafts, rng)`` the audit made, in the same order, with generators in the
same states (recorded in a warm-up audit), so the loop repeats the function's work exactly. The
two are timed alternately (ABAB), and the harness's time is the audit's minus the loop's.

* ``audit overhead, numpy rrs``: a plain-numpy recursive rejection sampler
  (:func:`mdsd_cli.audit.examples.rrs`, about 7 us a call, the kind of function the audit is for):
  the audit's time per call as a ratio to the calls' own time. Target (issue "mdsd audit": the
  harness adds at most 0.2 of the calls' time): <= 1.2.
* ``audit harness, trivial callable``: a lossless callable that returns pre-drawn samples of ``p``
  (well under a microsecond a call), so that nearly all the time is the harness's: the calls per
  second the harness allows. Target: >= 5e5 calls/s (a budget of 10^6 calls costs at most 2 s of
  harness).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from .common import bench_row

#: Calls per second the harness must allow with a trivial callable.
HARNESS_CALLS_PER_SECOND = 5e5
#: Largest share of the calls' own time the harness may add (numpy RRS).
HARNESS_SHARE = 0.2


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
                self.streams[id(p)] = (p, iter(self.rng.choice(p.size, size=self.per_case + 1, p=p).tolist()))
            self.stream = self.streams[id(p)][1]
        return next(self.stream)


class _Recorder:
    """Wraps ``fn`` and records every call's arguments, and each generator's state when first seen."""

    def __init__(self, fn):
        self.fn, self.calls, self.states = fn, [], {}

    def __call__(self, p, q, drafts, rng):
        key = id(rng)
        if key not in self.states:
            self.states[key] = (rng, rng.bit_generator.state)
        self.calls.append((p, q, drafts, key))
        return self.fn(p, q, drafts, rng)

    def replay_arguments(self) -> list:
        """The recorded calls with fresh generators in the recorded first states (made outside any timing)."""
        fresh = {}
        for key, (rng, state) in self.states.items():
            g = np.random.Generator(type(rng.bit_generator)())
            g.bit_generator.state = state
            fresh[key] = g
        return [(p, q, d, fresh[key]) for p, q, d, key in self.calls]


def _plain_loop(fn, arguments: list) -> None:
    for p, q, drafts, rng in arguments:
        fn(p, q, drafts, rng)


def audit_overhead_rows(config) -> list[dict]:
    """Rows of the ``audit`` figure (see the module docstring)."""
    from ..audit import audit_verifier, battery_cases
    from ..audit.examples import rrs

    calls = max(12_000, config.mc_samples // 2)
    cases = battery_cases(3)
    per_case = calls // len(cases)
    vocab = max(c.vocab_size for c in cases)
    makers = {"rrs": lambda: rrs, "trivial": lambda: _SamplesOfP(per_case, config.seed)}

    def audit(fn):
        return audit_verifier(fn, sampler="iid", n=3, cases=cases, budget=calls, seed=config.seed)

    rows = []
    for name, make in makers.items():
        recorder = _Recorder(make())
        made = audit(recorder).calls  # the warm-up run, recording what the audit calls
        audited, looped = [], []
        for _ in range(max(1, config.repeats)):
            arguments = recorder.replay_arguments()
            fn = make()
            t0 = time.perf_counter()
            _plain_loop(fn, arguments)
            t1 = time.perf_counter()
            report = audit(make())
            t2 = time.perf_counter()
            if report.calls != len(arguments):  # pragma: no cover - the audit is deterministic
                raise RuntimeError("the audit made other calls than in its warm-up run")
            looped.append((t1 - t0) / made)
            audited.append((t2 - t1) / made)
        harness = [a - b for a, b in zip(audited, looped)]
        stats = (statistics.median(harness), min(harness), max(harness))
        base = (statistics.median(looped), min(looped), max(looped))
        note = (f"harness {stats[0] * 1e6:.2f} us/call ({1 / stats[0] if stats[0] > 0 else float('inf'):,.0f} "
                f"calls/s), the calls alone "
                f"{base[0] * 1e6:.2f} us/call; {made:,} calls, {len(recorder.states):,} generators")
        if name == "rrs":  # the whole audit per call against the calls alone: never negative, unlike the
            # difference, which is within noise of 0 on a busy machine
            ratio = statistics.median(a / b for a, b in zip(audited, looped))
            whole = (statistics.median(audited), min(audited), max(audited))
            rows.append(bench_row("audit overhead, numpy rrs", 3, vocab, len(cases), whole,
                                  "the same calls in a loop", base, target=f"<= {1 + HARNESS_SHARE:g}x",
                                  ratio=ratio, passed=ratio <= 1 + HARNESS_SHARE, note=note))
        else:
            rate = 1.0 / stats[0] if stats[0] > 0 else float("inf")
            rows.append(bench_row("audit harness, trivial callable", 3, vocab, len(cases), stats,
                                  "the same calls in a loop", base,
                                  target=f">= {HARNESS_CALLS_PER_SECOND:.0e} calls/s", ratio=rate,
                                  passed=rate >= HARNESS_CALLS_PER_SECOND, note=note))
    return rows
