"""The documentation cannot drift: its links resolve and its examples print what they show.

Checked documents: README.md and every ``docs/*.md`` (new files are picked up
automatically).

Links
    Every relative link or image, ``[text](path)``, ``[text](path#anchor)``,
    ``[label]: path`` or an HTML ``src=``/``href=``, names a file inside the
    repository that git does not ignore (so a fresh clone has it); an anchor
    names a heading of the target file (GitHub's slugs) or an explicit
    ``<a id=...>``. Links with a scheme (``https:``, ``mailto:``) are not
    followed. Test names quoted in the documents (``test_...``) exist in tests/.

Console examples
    Every fenced block whose info string is ``console`` is run. A line starting
    with ``$ `` is a shell command (a line ending in ``\\`` continues on the
    next); the lines after it, up to the next ``$ ``, are its output. The
    commands of a block run one after another in bash, in a fresh temporary
    directory of their own (files written by one command are there for the
    next, and nothing is written to the repository), with ``mdsd`` the entry
    point of the interpreter that runs the tests, a private ``MDSD_CACHE_DIR``
    and ``2>/dev/null`` or ``| head -5`` working as in a terminal.

    What is compared: stdout followed by stderr (or stderr followed by stdout)
    against the document, line by line, with trailing blanks and lines starting
    with ``Warning:`` dropped on both sides; timing columns (``seconds``) are
    dropped from tables and CSV; a number may differ by one unit in the last
    digit the document prints (rounding), nothing else. A command must exit
    with 0 unless its documented output contains an ``Error:`` line.

Python examples
    Every fenced block whose info string is ``pycon`` (``>>>`` prompts) is run as
    a doctest, in a fresh temporary directory, with ``ELLIPSIS`` and
    ``NORMALIZE_WHITESPACE``: its printed values must be what the block shows.

    Slow examples (more than about 10 s) are marked in the Markdown with the
    info string ``console slow`` (or ``pycon slow``)::

        ```console slow
        $ mdsd bench -f table
        ...
        ```

    GitHub renders them like any ``console`` block; this test lists them and
    does not run them. A quick block that takes more than :data:`BLOCK_LIMIT`
    seconds gives a warning with a reminder to mark it (never a failure: no
    test asserts wall time, which a busy machine would break).
"""

from __future__ import annotations

import ast
import doctest
import os
import re
import shlex
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import SUBPROCESS_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A quick example block that takes longer than this many seconds gets a warning to mark it slow.
BLOCK_LIMIT = 30.0
#: Table and CSV columns that hold wall times, dropped before comparing.
TIMING_COLUMNS = {"seconds", "tokens_per_second"}
#: README.md must stay below this many bytes: a front door, the depth is in docs/.
README_LIMIT = 12_000

FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --- Markdown parsing ------------------------------------------------------------------------

@dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    info: str
    lines: list[str] = field(default_factory=list)

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def slow(self) -> bool:
        return "slow" in self.info.split()[1:]

    @property
    def id(self) -> str:
        return f"{rel(self.doc)}:{self.line}"


def split_markdown(doc: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """Fenced code blocks, and the prose lines (number, text) outside them."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    current: Block | None = None
    fence = ""
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        match = FENCE.match(line)
        if current is None:
            if match:
                fence = match.group(1)
                current = Block(doc, number, match.group(2).strip())
            else:
                prose.append((number, line))
        elif match and match.group(1).startswith(fence[0]) and len(match.group(1)) >= len(fence) \
                and not match.group(2).strip():
            blocks.append(current)
            current = None
        else:
            current.lines.append(line)
    assert current is None, f"{rel(doc)}:{current.line}: code fence never closed"
    return blocks, prose


def blocks_of(language: str) -> list[Block]:
    return [b for doc in DOCS for b in split_markdown(doc)[0] if b.language == language]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """Every anchor a link into ``doc`` may name (repeated headings get -1, -2, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in split_markdown(doc)[1]:
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_LINK = re.compile(r"\b(?:src|href)=\"([^\"]+)\"")


def links(doc: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image in the prose (code spans and blocks excluded)."""
    out = []
    for number, line in split_markdown(doc)[1]:
        text = re.sub(r"(`+).*?\1", "", line)  # inline code is not a link
        for pattern in (INLINE_LINK, REFERENCE_LINK, HTML_LINK):
            out.extend((number, target) for target in pattern.findall(text))
    return out


def git_ignored(path: Path) -> bool:
    result = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT,
                            capture_output=True, check=False)
    return result.returncode == 0  # 1: not ignored; 128: not a git work tree (nothing to say)


# --- links -----------------------------------------------------------------------------------

def test_documents_are_found():
    names = [rel(d) for d in DOCS]
    assert "README.md" in names and "docs/theory.md" in names, names


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_relative_links_resolve_inside_the_repository(doc):
    problems = []
    for number, target in links(doc):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # https:, mailto:
        where = f"{rel(doc)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        if path_part.startswith("/"):
            problems.append(f"{where}: absolute path; link relative to the document")
            continue
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.is_relative_to(ROOT):
            problems.append(f"{where}: points outside the repository")
        elif not path.exists():
            problems.append(f"{where}: no such file")
        elif git_ignored(path):
            problems.append(f"{where}: ignored by git, so a clone does not have it")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{where}: no heading with anchor #{anchor} in {rel(path)}")
    assert not problems, "\n".join(problems)


def test_nothing_points_outside_the_repository():
    needle = ".." + "/shared"  # the team's notes outside the repository
    offenders = []
    for top in ("README.md", "docs", "mdsd_cli", "tests", "experiments", "benchmarks", "results",
                "Makefile", "pyproject.toml"):
        base = ROOT / top
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in files:
            if path.suffix in {".png", ".parquet", ".pyc", ".npz"} or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="ignore")
            if needle in text:
                offenders.append(rel(path))
    assert not offenders, offenders


def test_readme_is_a_front_door():
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md has {size:,} bytes (limit {README_LIMIT:,}): move depth to docs/"


def test_tests_named_in_the_documents_exist():
    defined = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        defined.add(path.stem)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined.update(node.name for node in ast.walk(tree)
                       if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"))
    missing = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for name in re.findall(r"\b(test_[A-Za-z0-9_]+)", line):
                if name not in defined and not name.endswith("_"):  # test_reliability_*.py: a pattern
                    missing.append(f"{rel(doc)}:{number}: {name}")
    assert not missing, "tests named in the documents but not defined:\n" + "\n".join(missing)


# --- console examples ------------------------------------------------------------------------

@dataclass
class Step:
    command: str
    expected: list[str]


def parse_console(block: Block) -> list[Step]:
    steps: list[Step] = []
    lines = iter(block.lines)
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + " " + next(lines).strip()
            steps.append(Step(command, []))
        else:
            assert steps, f"{block.id}: output before the first '$ ' command"
            steps[-1].expected.append(line)
    return steps


def mdsd_bin_dir(tmp: Path) -> Path:
    """A directory whose ``mdsd`` is the entry point of the interpreter running the tests."""
    here = Path(sys.executable).parent
    if (here / "mdsd").exists():
        return here
    shim = tmp / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "mdsd").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m mdsd_cli \"$@\"\n")
    (shim / "mdsd").chmod(0o755)
    return shim


@pytest.fixture(scope="session")
def example_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs-examples")
    env = dict(os.environ)
    env["PATH"] = f"{mdsd_bin_dir(tmp)}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MDSD_CACHE_DIR"] = str(tmp / "cache")  # built-in datasets are built once per session
    env["TERM"] = "dumb"
    env["MDSD_PROGRESS_INTERVAL"] = "3600"  # no progress lines on stderr, however loaded the machine
    env.pop("MDSD_DISABLE_NUMBA", None)
    return env


def clean(lines: list[str]) -> list[str]:
    out = [line.rstrip() for line in lines if not line.startswith("Warning:")]
    while out and not out[-1]:
        out.pop()
    return out


def fields(line: str) -> list[str]:
    return line.split(",") if "," in line and " " not in line.strip() else line.split()


def drop_timing(lines: list[str]) -> list[list[str]]:
    """Each line as fields, without the timing columns of the table or CSV it belongs to."""
    out, drop, width = [], [], None
    for line in lines:
        parts = fields(line)
        if TIMING_COLUMNS & set(parts):
            drop = [i for i, name in enumerate(parts) if name in TIMING_COLUMNS]
            width = len(parts)
        if drop and len(parts) == width:
            parts = [p for i, p in enumerate(parts) if i not in drop]
        out.append(parts)
    return out


def same_field(documented: str, actual: str) -> bool:
    if documented == actual:
        return True
    number = re.fullmatch(r"-?\d+\.(\d+)|-?(\d+(?:\.(\d+))?)e([+-]?\d+)", documented)
    if not number:
        return False  # integers and words must match exactly
    try:
        a, b = float(documented), float(actual)
    except ValueError:
        return False
    if number.group(1) is not None:
        unit = 10.0 ** -len(number.group(1))
    else:
        unit = 10.0 ** (int(number.group(4)) - len(number.group(3) or ""))
    return abs(a - b) <= unit * 1.001  # one unit, with room for the float difference itself


def same_output(documented: list[str], actual: list[str]) -> bool:
    doc_rows, act_rows = drop_timing(documented), drop_timing(actual)
    return len(doc_rows) == len(act_rows) and all(
        len(d) == len(a) and all(same_field(x, y) for x, y in zip(d, a)) for d, a in zip(doc_rows, act_rows))


def test_the_comparison_forgives_timings_and_rounding_only():
    table = [" pair  n  alpha_star  seconds", "    0  2    0.787454 0.001451"]
    csv = ["pair,n,alpha_star,seconds", "0,2,0.649381885969,0.000311697999678"]
    assert same_output(table, [" pair  n  alpha_star  seconds", "    0  2    0.787455 9.5"])
    assert same_output(csv, ["pair,n,alpha_star,seconds", "0,2,0.649381885968,0.1"])
    assert not same_output(table, [" pair  n  alpha_star  seconds", "    0  2    0.787457 0.001451"])
    assert not same_output(table, [" pair  n  alpha_star  seconds", "    0  3    0.787454 0.001451"])
    assert not same_output(csv, csv[:1])
    assert same_field("8e-05", "9e-05") and not same_field("8e-05", "2e-04")
    assert not same_field("15208", "15209") and not same_field("True", "False")
    assert clean(["Warning: skipped", "row", "  ", ""]) == ["row"]


BLOCKS = blocks_of("console")
QUICK = [b for b in BLOCKS if not b.slow]
PYTHON = [b for b in blocks_of("pycon") if not b.slow]


def test_console_examples_parse_and_slow_ones_show_their_output():
    assert len(QUICK) >= 5, [b.id for b in BLOCKS]
    for block in BLOCKS:
        steps = parse_console(block)
        assert steps, f"{block.id}: a console block without a '$ ' command"
        if block.slow:  # not run here, so at least the reader sees what it prints
            assert any(clean(s.expected) for s in steps), f"{block.id}: a slow example without output"


@pytest.mark.parametrize("block", QUICK, ids=lambda b: b.id)
def test_console_example_output_matches_the_document(block, example_env, tmp_path):
    start = time.perf_counter()
    for step in parse_console(block):
        result = subprocess.run(["bash", "-c", step.command], cwd=tmp_path, env=example_env,
                                capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False)
        documented = clean(step.expected)
        stdout, stderr = result.stdout.splitlines(), result.stderr.splitlines()
        if result.returncode != 0 and not any(line.startswith("Error:") for line in documented):
            pytest.fail(f"{block.id}: `{step.command}` exited with {result.returncode}:\n{result.stderr}")
        candidates = [clean(stdout + stderr), clean(stderr + stdout)]
        if not any(same_output(documented, actual) for actual in candidates):
            pytest.fail(f"{block.id}: `{step.command}` printed\n" + "\n".join(candidates[0])
                        + "\n--- the document shows ---\n" + "\n".join(documented))
    elapsed = time.perf_counter() - start
    if elapsed > BLOCK_LIMIT:  # a reminder, never a failure: a busy machine is slow
        warnings.warn(f"{block.id} took {elapsed:.0f} s: if it is slow on a quiet machine too, mark it "
                      "```console slow (see this module's docstring)", stacklevel=1)


# --- Python examples -------------------------------------------------------------------------

PYTHON_DOCS = sorted({b.doc for b in PYTHON})


@pytest.mark.parametrize("doc", PYTHON_DOCS, ids=rel)
def test_python_examples_match_the_document(doc, example_env, tmp_path, monkeypatch):
    """The ``pycon`` blocks of one document run in order, sharing their names (a page builds
    its examples on each other, as a reader's session would)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MDSD_CACHE_DIR", example_env["MDSD_CACHE_DIR"])
    globs: dict = {}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for block in (b for b in PYTHON if b.doc == doc):
        test = doctest.DocTestParser().get_doctest("\n".join(block.lines), globs, block.id, str(block.doc),
                                                   block.line)
        assert test.examples, f"{block.id}: a pycon block without '>>>' examples"
        runner.run(test, out=report.append, clear_globs=False)
        globs = test.globs  # DocTest copies its globals: carry them to the next block
    assert runner.failures == 0, "".join(report)
