import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: Timeout of a subprocess a test starts: CI's own limit for the whole run (90 minutes). A test never
#: fails because a busy machine is slow; a hung process still ends.
SUBPROCESS_TIMEOUT = 5400


def sigint_default():
    """``preexec_fn`` for a child that a test interrupts: SIGINT back to its default. A shell without job
    control starts background commands (``make test &``) with SIGINT ignored, the child inherits that, and
    Python then installs no KeyboardInterrupt handler, so the test's SIGINT would do nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)

#: Exact reference values for small cases; where they come from: tests/data/README.md.
REFERENCE = Path(__file__).resolve().parent / "data" / "cases.json"


def reference_cases():
    """The exact reference values of ``tests/data/cases.json`` (α* and verifier rates)."""
    return json.loads(REFERENCE.read_text())["cases"]


def random_pair(rng, V, *, zeros=True):
    """A random (p, q) pair of length V, sometimes peaked, sometimes with zero entries."""
    conc = rng.choice([0.2, 0.5, 1.0, 3.0])
    p = rng.dirichlet(np.full(V, conc))
    q = rng.dirichlet(np.full(V, rng.choice([0.2, 0.5, 1.0, 3.0])))
    if zeros and V > 1 and rng.random() < 0.3:
        q[rng.integers(V)] = 0.0
        q /= q.sum()
    if zeros and V > 1 and rng.random() < 0.2:
        p[rng.integers(V)] = 0.0
        p /= p.sum()
    return p, q


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
