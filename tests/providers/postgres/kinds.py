"""PostgreSQL store kinds for the contract suite, and helpers shared by the postgres tests.

Each store gets a schema prefix of its own (``rxt<session><hex>_``), so tests on one shared
database, in one session or in several at once, see only their own partitions (also for
``NodeQuery()`` over every partition), and its schemas are dropped on exit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from rxmesh.model import MeshNode
from rxmesh.providers import Store
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultInjectingStore
from tests.conftest import session_prefix

__all__ = [
    "drop_schemas",
    "execute",
    "pgbouncer_pair",
    "pgbouncer_store",
    "postgres_pair",
    "postgres_store",
    "postgres_store_with_faults",
    "terminate_listener",
]


def unique_prefix() -> str:
    """A schema prefix no other test uses, of this test session's own."""
    return session_prefix("t")


async def drop_schemas(dsn: str, prefix: str) -> None:
    """Drop every schema whose name starts with ``prefix``."""
    conn = await asyncpg.connect(dsn, timeout=5.0, command_timeout=10.0)
    try:
        names = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
        )
        for row in names:
            await conn.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(row[0])} CASCADE")
    finally:
        await conn.close()


async def execute(dsn: str, statement: str, *args: object) -> None:
    """Run one statement on a connection of its own (a writer the store does not know)."""
    conn = await asyncpg.connect(dsn, timeout=5.0, command_timeout=10.0)
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


async def terminate_listener(dsn: str, store: PostgresStore, within: float = 5.0) -> None:
    """Terminate ``store``'s LISTEN backend and wait (bounded) until the store noticed."""
    pid = store.feed_backend_pid
    assert pid is not None
    conn = await asyncpg.connect(dsn, timeout=5.0, command_timeout=10.0)
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid) is True
    finally:
        await conn.close()
    async with asyncio.timeout(within):
        while store.feed_backend_pid == pid:  # noqa: ASYNC110 - a real server, bounded
            await asyncio.sleep(0.005)


@asynccontextmanager
async def started(dsn: str, prefix: str, **options: Any) -> AsyncIterator[PostgresStore]:
    """A started store with ``prefix``; closed (not dropped) on exit."""
    store = PostgresStore(dsn, schema_prefix=prefix, **{"min_size": 1, "max_size": 4, **options})
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def postgres_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The ``postgres`` contract kind: a fresh prefix on the shared server."""
    dsn: str = request.getfixturevalue("pg_dsn")
    prefix = unique_prefix()
    try:
        async with started(dsn, prefix) as store:
            yield store
    finally:
        await drop_schemas(dsn, prefix)


@asynccontextmanager
async def postgres_store_with_faults(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The ``postgres+faults`` contract kind: the same, behind a knob-less FaultInjectingStore."""
    async with postgres_store(request) as store:
        yield FaultInjectingStore(store)


@asynccontextmanager
async def postgres_pair(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, Store]]:
    """Two PostgresStore instances on one database and one prefix (a cross-instance feed)."""
    dsn: str = request.getfixturevalue("pg_dsn")
    prefix = unique_prefix()
    try:
        async with started(dsn, prefix) as first, started(dsn, prefix) as second:
            yield first, second
    finally:
        await drop_schemas(dsn, prefix)


@asynccontextmanager
async def pgbouncer_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The ``postgres+pgbouncer`` contract kind: the pool through the run's PgBouncer
    (transaction pooling), the LISTEN connection straight to the server (``listen_dsn``)."""
    dsn: str = request.getfixturevalue("pg_dsn")
    pooled: str = request.getfixturevalue("pgbouncer_dsn")
    prefix = unique_prefix()
    try:
        async with started(pooled, prefix, listen_dsn=dsn) as store:
            assert store.pooled is True  # detected, not given
            yield store
    finally:
        await drop_schemas(dsn, prefix)


@asynccontextmanager
async def pgbouncer_pair(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, Store]]:
    """Two instances through the run's PgBouncer on one prefix, each listening directly."""
    dsn: str = request.getfixturevalue("pg_dsn")
    pooled: str = request.getfixturevalue("pgbouncer_dsn")
    prefix = unique_prefix()
    try:
        async with (
            started(pooled, prefix, listen_dsn=dsn) as first,
            started(pooled, prefix, listen_dsn=dsn) as second,
        ):
            yield first, second
    finally:
        await drop_schemas(dsn, prefix)


FAST = (0.01, 0.01, 0.01)
"""A retry ladder of the real shape with no real waiting, for meshes over a real server."""

QUICK = {
    "connect_timeout": 1.0,
    "command_timeout": 2.0,
    "heartbeat_interval": 0.1,
    "heartbeat_timeout": 1.0,
    "reconnect_backoff": (0.05, 0.1, 0.2),
}
"""PostgresStore options for tests that take a route down and back: short bounds, fast probes."""


def doc(path: str) -> MeshNode:
    """A node whose content names its path (the rows are checked against it afterwards)."""
    return MeshNode(path=path, node_type="Doc", content={"p": path})
