"""What the docs tell users to import is public: no page imports a private module of rxmesh.

Fails at 1d389e8 because docs/observability.md imported ``Ladder`` from
``rxmesh.operators._ladder``. Negative control: the pattern finds such an import in a sample.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
PRIVATE = re.compile(r"^\s*(?:from|import)\s+(rxmesh(?:\.\w+)*\._\w+)", re.MULTILINE)


def test_no_page_imports_a_private_module() -> None:
    found = [
        f"{page.relative_to(ROOT)}: {match.group(1)}"
        for page in PAGES
        for match in PRIVATE.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_negative_control_the_pattern_finds_a_private_import() -> None:
    sample = "```python\nfrom rxmesh.operators._ladder import Ladder\nimport rxmesh.mesh\n```"
    assert [m.group(1) for m in PRIVATE.finditer(sample)] == ["rxmesh.operators._ladder"]
