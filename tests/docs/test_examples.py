"""Every ```python block of docs/*.md and README.md runs (issue 19), as a new user would run it.

The blocks are found and evaluated by Sybil (why Sybil: docs/asyncio.md, "How the docs are
tested"). Every page below docs/ is parsed, so a new page is picked up without touching this file.
Each block is compiled against its page's own line numbers and run as ``__main__`` in a fresh
namespace, as ``python block.py`` would run it.

The rules a block follows:

- A block is a complete program: its imports, its names, its ``asyncio.run(main())``.
- A fragment says so: ``<!-- continues: NAME -->`` on the line just above its fence, where an
  EARLIER block of the same page carries ``<!-- example: NAME -->``; the runner runs that block,
  then the fragment in its namespace.
- A block that reads ``DATABASE_URL`` is about PostgreSQL: it runs against ``RXMESH_TEST_DSN``
  (skipped, with the reason, outside CI when no server answers; with ``CI=true`` it must run).
- A block that defines ``test_*`` functions (a test of the reader's own) has them called too.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example
from sybil.evaluators.python import pad
from sybil.parsers.markdown import CodeBlockParser

from tests.conftest import PG_DSN, require_server

ROOT = Path(__file__).resolve().parents[2]
_MARK = re.compile(r"^<!--\s*(example|continues):\s*([\w.-]+)\s*-->\s*$")
_FENCE = re.compile(r"^```python\s*$", re.MULTILINE)


def pages() -> list[Path]:
    """README.md and every page of docs/, found anew at each run."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(page: Path) -> list[Example]:
    """The ```python blocks of ``page``, in page order (Sybil's Markdown code-block lexer)."""
    document = Document.parse(str(page), CodeBlockParser(language="python"))
    return list(document)


def marker(block: Example) -> tuple[str, str] | None:
    """The ``<!-- example: NAME -->`` / ``<!-- continues: NAME -->`` just above the block."""
    above = block.document.text[: block.start].splitlines()
    match = _MARK.match(above[-1]) if above else None
    return (match.group(1), match.group(2)) if match else None


def lineage(block: Example) -> list[Example]:
    """The blocks to run for ``block``: the named blocks it continues, then itself."""
    mark = marker(block)
    if mark is None or mark[0] == "example":
        return [block]
    name = mark[1]
    earlier = [
        candidate
        for candidate in block.document
        if candidate.start < block.start and marker(candidate) == ("example", name)
    ]
    if not earlier:
        raise LookupError(
            f"{block.path}:{block.line} continues {name!r}, but no earlier block of the page "
            f"is marked <!-- example: {name} -->"
        )
    return [*lineage(earlier[-1]), block]


def run_lineage(chain: list[Example]) -> dict[str, Any]:
    """Run each block of ``chain`` as ``__main__`` in one namespace, then the tests it defines."""
    main = types.ModuleType("__main__")
    namespace = main.__dict__
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        for block in chain:
            source = pad(block.parsed, block.line + block.parsed.line_offset)
            exec(compile(source, block.path, "exec", dont_inherit=True), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and inspect.isfunction(value):
                if inspect.iscoroutinefunction(value):
                    asyncio.run(value())
                else:
                    value()
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
    return namespace


BLOCKS = [block for page in pages() for block in python_blocks(page)]


def _id(block: Example) -> str:
    return f"{Path(block.path).relative_to(ROOT)}:{block.line}"


@pytest.fixture
def in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Blocks run in an empty directory, with no journal directory inherited."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RXMESH_PENDING_WRITES_DIR", raising=False)
    return tmp_path


@pytest.mark.usefixtures("in_a_scratch_directory")
@pytest.mark.parametrize("block", BLOCKS, ids=_id)
def test_the_block_runs(block: Example, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = lineage(block)
    if any("DATABASE_URL" in part.parsed for part in chain):
        require_server(PG_DSN, 5432, "PostgreSQL")
        monkeypatch.setenv("DATABASE_URL", PG_DSN)
    run_lineage(chain)


def test_the_runner_finds_every_python_block_of_every_page() -> None:
    # Negative control of the discovery: a fence the lexer did not see would pass silently.
    fences = {page: len(_FENCE.findall(page.read_text())) for page in pages()}
    found = {page: sum(1 for b in BLOCKS if Path(b.path) == page) for page in pages()}
    assert found == fences
    assert sum(found.values()) >= 25
    assert found[ROOT / "README.md"] >= 1
    assert found[ROOT / "docs" / "asyncio.md"] >= 3


def test_every_continuation_names_an_earlier_block() -> None:
    for block in BLOCKS:
        lineage(block)  # raises LookupError for a dangling one


def test_a_block_that_does_not_run_fails(tmp_path: Path) -> None:
    # Negative control of the runner: the NameError a pasted fragment raised in issue 19.
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```python\nprint(census)\n```\n")
    (broken,) = python_blocks(page)
    with pytest.raises(NameError, match="census") as raised:
        run_lineage(lineage(broken))
    assert raised.traceback[-1].lineno + 1 == 4  # reported at the page's own line


def test_a_fragment_runs_in_the_namespace_of_the_block_it_continues(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- example: setup -->\n```python\nanswer = 41\n```\n\n"
        "<!-- continues: setup -->\n```python\nanswer += 1\nassert answer == 42\n```\n\n"
        "<!-- continues: later -->\n```python\nprint(answer)\n```\n\n"
        "<!-- example: later -->\n```python\nanswer = 0\n```\n"
    )
    _, fragment, dangling, _ = python_blocks(page)
    assert run_lineage(lineage(fragment))["answer"] == 42
    with pytest.raises(NameError):
        run_lineage([fragment])  # the same fragment alone does not run
    with pytest.raises(LookupError, match="no earlier block"):
        lineage(dangling)  # a continuation of a LATER block is refused


def test_a_block_runs_as_main_and_has_its_tests_called(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nassert __name__ == '__main__'\n\n"
        "async def test_it():\n    raise AssertionError('called')\n```\n"
    )
    with pytest.raises(AssertionError, match="called"):
        run_lineage(python_blocks(page))
