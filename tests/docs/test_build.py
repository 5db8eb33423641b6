"""The documentation builds with `mkdocs build --strict`, and lists every page under docs/."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

MKDOCS_YML = ROOT / "mkdocs.yml"


def _nav_pages() -> set[str]:
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", MKDOCS_YML.read_text(), re.MULTILINE))


def test_every_docs_page_is_in_the_mkdocs_nav() -> None:
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    missing = pages - _nav_pages()
    assert not missing, f"add these pages to mkdocs.yml's nav: {sorted(missing)}"
    assert not _nav_pages() - pages, "mkdocs.yml's nav lists a page that does not exist"


def _exists(target: str) -> bool:
    """A directive names a module, or a name importable from one (``rxmesh.x.Name``)."""
    try:
        if importlib.util.find_spec(target) is not None:
            return True
    except ModuleNotFoundError:  # the parent is a plain module: ``target`` is a name in it
        pass
    module, _, name = target.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ModuleNotFoundError:
        return False


def test_the_reference_documents_modules_that_exist() -> None:
    targets = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / "reference.md").read_text(), re.M)
    assert targets
    missing = [t for t in targets if not _exists(t)]
    assert not missing, missing


def test_the_existence_check_sees_a_name_that_is_not_there() -> None:
    # Negative control: a module and a name that do not exist are both reported.
    assert _exists("rxmesh.faults") and _exists("rxmesh.faults.is_store_unreachable")
    assert not _exists("rxmesh.faults.no_such_rule")
    assert not _exists("rxmesh.no_such_module")


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
    # Fails at 1d389e8: 344 Sphinx roles were printed raw, and every model field "required".
    raw = {
        str(page.relative_to(tmp_path)): RAW_ROLE.findall(page.read_text())
        for page in (tmp_path / "site").rglob("*.html")
    }
    assert {page: found for page, found in raw.items() if found} == {}
    assert 'href="#rxmesh.cache.SyncedQueryCache"' in reference  # a role became a link
    request = section(reference, "rxmesh.operations.CreateNodeRequest")
    assert "required" not in request
    assert re.search(r"reissued_after_unavailable.*?bool.*?=.*?False", request, re.S), request
    assert "content" in section(reference, "rxmesh.model.MeshNode")  # its fields are listed


# In the HTML a raw role's backticks have become <code>.
RAW_ROLE = re.compile(r":(?:class|meth|func|data|attr|exc|mod|obj|const):(?:`|<code>)")


def section(page: str, anchor: str) -> str:
    """The HTML from ``anchor``'s heading to the next heading of its level."""
    start = page.index(f'id="{anchor}"')
    level = page[page.rindex("<h", 0, start) : start][:3]  # "<h2"
    following = page.find(level + " ", start)
    return page[start : following if following > 0 else None]


def test_the_raw_role_check_sees_a_role() -> None:
    # Negative control of the check above.
    assert RAW_ROLE.findall("see :class:`~rxmesh.cache.SyncedQueryCache`") == [":class:`"]
    assert RAW_ROLE.findall("see :meth:<code>rxmesh.Mesh.live</code>") == [":meth:<code>"]


def test_import_help_prints_no_raw_role() -> None:
    """Fails at 1d389e8: `rxmesh import --help` printed ":meth:`rxmesh.Mesh.create_nodes`"."""
    from rxmesh.importer import FORMAT_HELP

    assert "rxmesh.Mesh.create_nodes" in FORMAT_HELP
    assert RAW_ROLE.findall(FORMAT_HELP) == []
