"""Rewrite the output of documented console examples that no longer match what they print.

Usage (from the repository root, with the project's interpreter)::

    .venv/bin/python -m tests.refresh_docs docs/decode.md [README.md ...]

Each quick ``console`` block (see :mod:`tests.test_docs`) of the given documents is
run as the test runs it; where a command's output differs beyond what the test
forgives, its documented output is replaced by the new one (stdout, then stderr,
or the other order where the document had stderr first). Review the diff: a
changed number is a changed result.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.test_docs import ROOT, clean, mdsd_bin_dir, parse_console, same_output, split_markdown


def _env(tmp: Path) -> dict:
    import os

    env = dict(os.environ)
    env["PATH"] = f"{mdsd_bin_dir(tmp)}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MDSD_CACHE_DIR"] = str(tmp / "cache")
    env["TERM"] = "dumb"
    env["MDSD_PROGRESS_INTERVAL"] = "3600"
    return env


def refresh(doc: Path) -> int:
    blocks, _ = split_markdown(doc)
    lines = doc.read_text(encoding="utf-8").splitlines()
    changed = 0
    with tempfile.TemporaryDirectory() as base:
        env = _env(Path(base))
        for block in reversed([b for b in blocks if b.language == "console" and not b.slow]):
            body = block.lines
            new_body: list[str] = []
            with tempfile.TemporaryDirectory() as work:
                steps = parse_console(block)
                index = 0
                for step in steps:
                    # copy the command lines as written (continuations included)
                    while not body[index].startswith("$ "):
                        index += 1
                    new_body.append(body[index])
                    index += 1
                    while new_body[-1].endswith("\\"):
                        new_body.append(body[index])
                        index += 1
                    result = subprocess.run(["bash", "-c", step.command], cwd=work, env=env,
                                            capture_output=True, text=True, check=False)
                    out, err = result.stdout.splitlines(), result.stderr.splitlines()
                    documented = clean(step.expected)
                    if any(same_output(documented, clean(c)) for c in (out + err, err + out)):
                        new_body += step.expected
                        continue
                    first_is_err = bool(documented) and bool(err) and clean(err)[:1] == documented[:1]
                    new_body += clean(err + out if first_is_err else out + err)
                    changed += 1
                    print(f"{doc.relative_to(ROOT)}:{block.line}: `{step.command[:70]}` updated", file=sys.stderr)
            start = block.line  # lines[start] is the first line inside the fence
            lines[start : start + len(body)] = new_body
    if changed:
        doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str]) -> int:
    total = sum(refresh((ROOT / a).resolve()) for a in argv)
    print(f"{total} example(s) updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
