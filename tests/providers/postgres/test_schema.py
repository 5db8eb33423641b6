"""The first create in a new partition takes at most 8 round trips (issue 15, item 3).

Counted on real asyncpg against real PostgreSQL: every statement the driver sends is one round
trip (no pool reset query runs, see test_pool_reset.py). The schema's two short transactions are
one simple query each, carrying their own BEGIN and COMMIT; a failure part-way is rolled back
before it propagates.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from asyncpg import connection as asyncpg_connection

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.ledger import PendingWriteLedger
from rxmesh.providers.postgres import PostgresStore, _schema

pytestmark = pytest.mark.postgres

USER = AccessContext(user="u")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements asyncpg sends (prepared or simple), in order."""
    statements: list[str] = []
    prepared = asyncpg_connection.Connection._do_execute
    simple = asyncpg_connection.Connection.execute

    async def do_execute(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        statements.append(query)
        return await prepared(self, query, *args, **kwargs)

    async def execute(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        if not args:
            statements.append(query)
        return await simple(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg_connection.Connection, "_do_execute", do_execute)
    monkeypatch.setattr(asyncpg_connection.Connection, "execute", execute)
    return statements


async def _first_create(pg_dsn: str, prefix: str, sent: list[str]) -> list[str]:
    async with PostgresStore(pg_dsn, schema_prefix=prefix, max_size=2) as store:
        mesh = Mesh(store, ledger=PendingWriteLedger(""))
        try:
            sent.clear()
            await mesh.create(MeshNode(path="fresh/a", content={}), access=USER)
            first = list(sent)
            sent.clear()
            await mesh.create(MeshNode(path="fresh/b", content={}), access=USER)
            assert len(sent) <= 2  # the facts are read once more, then kept
        finally:
            mesh.dispose()
    return first


async def test_the_first_create_in_a_new_partition_takes_at_most_8_round_trips(
    pg_dsn: str, prefix: str, sent: list[str]
) -> None:
    """FAILS against the code before: 12 (each schema transaction was BEGIN, the work, COMMIT)."""
    first = await _first_create(pg_dsn, prefix, sent)
    assert len(first) <= 8, first


async def test_negative_control_three_round_trips_per_schema_transaction_exceed_it(
    pg_dsn: str, prefix: str, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def separately(conn: Any, statements: str) -> None:
        async with conn.transaction(isolation="read_committed"):
            await conn.execute(statements)

    monkeypatch.setattr(_schema, "_one_transaction", separately)
    first = await _first_create(pg_dsn, prefix, sent)
    assert len(first) > 8, first


async def _fails_part_way(conn: asyncpg.Connection, transact: Any) -> None:
    with pytest.raises(asyncpg.exceptions.DivisionByZeroError):
        await transact(conn, "SELECT 1; SELECT 1 / 0;")


async def test_a_schema_transaction_failing_part_way_leaves_no_transaction_open(
    pg_dsn: str,
) -> None:
    conn = await asyncpg.connect(pg_dsn, timeout=5)
    try:
        await _fails_part_way(conn, _schema._one_transaction)
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT 2") == 2
    finally:
        await conn.close()


async def test_negative_control_without_the_rollback_the_session_is_left_aborted(
    pg_dsn: str,
) -> None:
    async def no_rollback(conn: Any, statements: str) -> None:
        await conn.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED;\n{statements}\nCOMMIT;")

    conn = await asyncpg.connect(pg_dsn, timeout=5)
    try:
        await _fails_part_way(conn, no_rollback)
        assert conn.is_in_transaction()
        with pytest.raises(asyncpg.exceptions.InFailedSQLTransactionError):
            await conn.fetchval("SELECT 2")
    finally:
        await conn.close()
