"""Helpers for the mesh tests: a mesh over a fault-injecting in-memory store, fast ladder, and
a PostgreSQL store of the test's own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rxmesh import Mesh
from rxmesh.ledger import PendingWriteLedger
from rxmesh.providers.memory import InMemoryStore
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultInjectingStore
from tests.conftest import PG_DSN, require_server, session_prefix
from tests.helpers import LogRecords
from tests.providers.postgres.kinds import drop_schemas

FAST = (0.001, 0.001, 0.001)
"""A retry ladder with the real shape (three retries) and no real waiting."""


def make_mesh(**options: Any) -> tuple[Mesh, FaultInjectingStore]:
    """A mesh over FaultInjectingStore(InMemoryStore()) with an in-memory ledger."""
    store = FaultInjectingStore(InMemoryStore())
    options.setdefault("retry_delays", FAST)
    options.setdefault("ledger", PendingWriteLedger(""))
    return Mesh(store, **options), store


@pytest.fixture
async def pg_store() -> AsyncIterator[PostgresStore]:
    """A PostgresStore with its own schema prefix, dropped afterwards."""
    require_server(PG_DSN, 5432, "PostgreSQL")
    prefix = session_prefix("s")
    store = PostgresStore(PG_DSN, schema_prefix=prefix, max_size=2)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
        await drop_schemas(PG_DSN, prefix)


LogRecordsT = LogRecords
