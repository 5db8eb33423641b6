"""The reliability suite: the whole system under the faults it must survive, checked by its
promises (one honest answer per request, no journaled intent lost, nothing done twice): every
verb against every infrastructure fault (the fault matrix), hostile input in every field, a
writer killed mid-outage, a stalled process, kept partition facts, the chaos soak's short run,
and the defects these found, each pinned. Not one folder per module: the faults are real (a
proxy, a terminated backend, a restarted cluster, a killed process), and what is checked is
what the modules promise together.

Its fixtures, and the fault-matrix table printed at the end of a run.

Infrastructure faults are produced for real: a :class:`~rxmesh.testing.FaultProxy` in front of a
private database on the shared server (refuse, stall, reset), ``pg_terminate_backend`` limited to
that database, and a :class:`~rxmesh.testing.TemporaryPostgresCluster` (restart, too many
connections). The table is printed by :func:`pytest_terminal_summary` and, when the environment
variable ``RXMESH_MATRIX_MD`` names a file, written there as Markdown (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import asyncpg
import pytest

from rxmesh.testing import TemporaryPostgresCluster
from tests.conftest import PG_DSN, require_server, throwaway_cluster

VERBS = ("create", "bulk create", "update", "delete", "move", "query", "standing watch")
"""The matrix's columns."""

MAX_CONNECTIONS = 8
"""The private cluster's ``max_connections`` (small, so "too many connections" is cheap)."""


@dataclass
class Matrix:
    """Cells of the fault matrix: (fault, verb) -> passed?, plus each fault's provenance."""

    rows: dict[str, str] = field(default_factory=dict)  # fault -> "real" | "injected"
    expected: dict[str, str] = field(default_factory=dict)  # fault -> the answer required
    cells: dict[tuple[str, str], bool] = field(default_factory=dict)
    notes: dict[tuple[str, str], str] = field(default_factory=dict)

    def table(self) -> str:
        """A Markdown table: rows = faults, columns = verbs, ✓ passed / ✗ failed / – not run."""
        header = ["fault", "how", "required answer", *VERBS]
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
        ]
        for fault, how in self.rows.items():
            marks = []
            for verb in VERBS:
                passed = self.cells.get((fault, verb))
                marks.append("–" if passed is None else ("✓" if passed else "✗"))
            lines.append(
                "| " + " | ".join([fault, how, self.expected.get(fault, ""), *marks]) + " |"
            )
        passed = sum(self.cells.values())
        lines.append("")
        lines.append(f"{passed}/{len(self.cells)} cells passed")
        return "\n".join(lines)


MATRIX = Matrix()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the fault matrix (only when matrix cells ran)."""
    if not MATRIX.cells:
        return
    terminalreporter.write_sep("=", "rxmesh fault matrix (rows: faults, columns: verbs)")
    terminalreporter.write_line(MATRIX.table())
    for (fault, verb), note in sorted(MATRIX.notes.items()):
        terminalreporter.write_line(f"✗ {fault} × {verb}: {note}")
    target = os.environ.get("RXMESH_MATRIX_MD")
    if target:
        Path(target).write_text(MATRIX.table() + "\n", encoding="utf-8")


def _with_database(dsn: str, database: str) -> str:
    return urlunparse(urlparse(dsn)._replace(path=f"/{database}"))


async def _admin(dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=5.0, command_timeout=30.0)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def private_db() -> Iterator[str]:
    """A database of this module's own on the shared server (terminations are limited to it)."""
    require_server(PG_DSN, 5432, "PostgreSQL")
    name = f"rxrel_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(PG_DSN, f'CREATE DATABASE "{name}"'))
    try:
        yield _with_database(PG_DSN, name)
    finally:
        asyncio.run(_admin(PG_DSN, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryPostgresCluster]:
    """One private throwaway cluster per module, with a small ``max_connections``."""
    with throwaway_cluster() as running:
        with (running.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(
                f"\nmax_connections = {MAX_CONNECTIONS}\nsuperuser_reserved_connections = 1\n"
            )
        running.restart()
        yield running
