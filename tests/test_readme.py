"""README.md cannot rot: its set-up commands are the ones CI runs, and its Python examples run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(README.read_text()) if lang == language]


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    assert "pip install -e '.[dev,postgres]'\npython -m pytest\n" in _blocks("bash")


def test_the_readme_starts_newcomers_on_the_drill() -> None:
    assert "python -m rxmesh drill\n" in _blocks("bash")


def test_the_readme_has_a_python_example() -> None:
    assert _blocks("python"), "README.md lost its python example"


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_each_python_block_of_the_readme_runs(index: int) -> None:
    code = _blocks("python")[index]
    exec(compile(code, f"README.md[python block {index}]", "exec"), {"__name__": "__readme__"})


def test_the_readme_links_every_docs_page() -> None:
    docs = README.parent / "docs"
    pages = {p.name for p in docs.glob("*.md")} - {"index.md"}
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)\)", README.read_text()))
    assert pages <= linked, f"not linked from README.md: {sorted(pages - linked)}"
    assert all((docs / name).is_file() for name in linked), "README.md links a missing page"


def test_the_quick_starts_complete_programs_run() -> None:
    """Blocks of docs/quickstart.md that are whole programs (they start with an import and end by
    running ``main()``) run as written; fragments are not executed."""
    text = (README.parent / "docs" / "quickstart.md").read_text()
    programs = [
        body
        for lang, body in _BLOCK.findall(text)
        if lang == "python" and body.startswith("import ") and "asyncio.run(main())" in body
    ]
    assert programs, "docs/quickstart.md lost its first program"
    for index, code in enumerate(programs):
        exec(compile(code, f"quickstart.md[program {index}]", "exec"), {"__name__": "__doc__"})
