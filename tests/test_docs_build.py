"""The documentation builds with `mkdocs build --strict`, and lists every page under docs/."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS_YML = ROOT / "mkdocs.yml"


def _nav_pages() -> set[str]:
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", MKDOCS_YML.read_text(), re.MULTILINE))


def test_every_docs_page_is_in_the_mkdocs_nav() -> None:
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    missing = pages - _nav_pages()
    assert not missing, f"add these pages to mkdocs.yml's nav: {sorted(missing)}"
    assert not _nav_pages() - pages, "mkdocs.yml's nav lists a page that does not exist"


def test_the_reference_documents_modules_that_exist() -> None:
    modules = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / "reference.md").read_text(), re.M)
    assert modules
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    assert not missing, missing


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    if (
        importlib.util.find_spec("mkdocs") is None
        or importlib.util.find_spec("mkdocstrings") is None
    ):
        pytest.skip(
            "mkdocs / mkdocstrings are not installed (pip install -e '.[dev]' installs them)"
        )
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    for name in ("retry_transient_connect", "SyncedQueryCache", "PendingWriteLedger", "run_drill"):
        assert name in reference, name
