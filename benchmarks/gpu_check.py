"""The GPU check of the device verifiers (issue 27): one command, a short report, exit 1 on a failure.

On a machine with CUDA it runs, in one go (a few minutes on one GPU):

1. the device tests: ``tests/test_device_verifiers.py`` (laws on CUDA equal numpy's on the CPU,
   lossless, no host synchronisation, batched = one call per row), ``tests/test_decode_device.py``,
   and the Hugging Face device tests of ``tests/test_decode_hf.py`` (the pair on CUDA: T = 0 is the
   target's greedy decoding for every verifier; the two-token law for ``rrs``, ``kseq``, ``rrsw``);
2. the ``device`` rows of ``mdsd bench``: torch against numpy on the CPU, per node on the GPU
   against one ``torch.argsort`` of V there, and the share of a decode step spent verifying on the
   tiny Hugging Face pair on the GPU.

Without CUDA it says so and exits 0 (CI has no GPU).

Usage: python benchmarks/gpu_check.py [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/test_device_verifiers.py", "tests/test_decode_device.py",
         "tests/test_decode_hf.py::test_on_cuda_the_device_path_is_greedy_at_t0_and_lossless",
         "tests/test_decode_hf.py::test_the_device_path_at_t0_is_the_targets_greedy_decoding_and_keeps_logits_on_the_device"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Small bench sizes (V = 20,000).")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check (skipped)")
        return 0
    print(f"gpu_check: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    failures = []
    t0 = time.perf_counter()
    import importlib.util

    select = [] if importlib.util.find_spec("cvxpy") else ["-k", "not otm"]  # otm solves an LP with CVXPY
    if select:
        print("cvxpy is not installed here: the otm cases (an LP per node, on the host) are left out")
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *select, *TESTS],
                           cwd=ROOT, capture_output=True, text=True)
    summary = (tests.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"device tests: {summary} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if tests.returncode != 0:
        failures.append("device tests")
        print(tests.stdout[-6000:], tests.stderr[-2000:], sep="\n")
    elif " skipped" in summary and "cuda" not in tests.stdout.lower() and "passed" not in summary:
        failures.append("device tests skipped")
    from mdsd_cli.bench import BenchConfig, run_benchmarks

    config = BenchConfig.quick() if args.quick else BenchConfig()
    t1 = time.perf_counter()
    rows = run_benchmarks(config, figures=("device",))
    print(f"\ndevice bench ({time.perf_counter() - t1:.0f} s):")
    for r in rows:
        print(f"  {r['figure']:<72} V={r['vocab']:>7,}  {r['median_s'] * 1e3:9.3f} ms  ratio {r['ratio']:7.3f} "
              f"[{r['target']}, {r['status']}]  {r['note']}")
    if not any("CUDA" in r["figure"] for r in rows):
        failures.append("no CUDA rows in the bench")
    print(f"\ngpu_check: {'FAILED: ' + ', '.join(failures) if failures else 'all checks passed'} "
          f"({time.perf_counter() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
