"""README.md cannot rot: its set-up commands are the ones CI runs, and its Python examples run
(in tests/docs/test_examples.py, with every page of docs/)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import ROOT

README = ROOT / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(README.read_text()) if lang == language]


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    assert "pip install -e '.[dev,postgres]'\npython -m pytest\n" in _blocks("bash")


def test_the_readme_starts_newcomers_on_the_drill() -> None:
    assert "python -m rxmesh drill\n" in _blocks("bash")


def test_the_readme_has_a_python_example() -> None:
    assert _blocks("python"), "README.md lost its python example"


def test_the_readme_links_every_docs_page() -> None:
    docs = README.parent / "docs"
    pages = {p.name for p in docs.glob("*.md")} - {"index.md"}
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)\)", README.read_text()))
    assert pages <= linked, f"not linked from README.md: {sorted(pages - linked)}"
    assert all((docs / name).is_file() for name in linked), "README.md links a missing page"


def test_the_python_blocks_are_run_by_the_docs_test() -> None:
    # The README's blocks (and every page's) run in tests/docs/test_examples.py; this guards the
    # hand-over, so that removing the runner cannot leave the README unexecuted.
    from tests.docs.test_examples import BLOCKS

    assert sum(1 for block in BLOCKS if Path(block.path) == README) == len(_blocks("python"))
