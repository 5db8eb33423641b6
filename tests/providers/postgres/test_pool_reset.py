"""The pool sends no reset query on release: rxmesh leaves no session state there (issue 15)."""

from __future__ import annotations

import pytest

from rxmesh.providers.postgres import PostgresStore

pytestmark = pytest.mark.postgres


async def test_a_released_connection_is_not_reset_by_a_query(pg_dsn: str, prefix: str) -> None:
    """FAILS against the old pool: asyncpg's default reset ran ``RESET ALL`` (one round trip per
    release), which put the setting back. The setting surviving proves no reset query ran."""
    async with PostgresStore(pg_dsn, schema_prefix=prefix, min_size=1, max_size=1) as store:
        pool = store._pool  # the one pooled connection, on purpose
        assert pool is not None
        async with pool.acquire() as conn:
            await conn.execute("SET application_name = 'rxmesh-reset-probe'")
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW application_name") == "rxmesh-reset-probe"


async def test_negative_control_an_open_transaction_is_still_rolled_back_on_release(
    pg_dsn: str, prefix: str
) -> None:
    async with PostgresStore(pg_dsn, schema_prefix=prefix, min_size=1, max_size=1) as store:
        pool = store._pool
        assert pool is not None
        conn = await pool.acquire()
        await conn.execute("BEGIN; SET LOCAL application_name = 'inside'")
        await pool.release(conn)  # asyncpg rolls the open transaction back itself
        async with pool.acquire() as again:
            assert not again.is_in_transaction()
            assert await again.fetchval("SHOW application_name") == "rxmesh"
