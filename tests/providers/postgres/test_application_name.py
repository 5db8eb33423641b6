"""A DSN's ``application_name`` names the store's connections (pool and change feed), so an
operator finds a service's backends in ``pg_stat_activity``.

Fails at 1d389e8 because the store always overrode it with ``rxmesh`` / ``rxmesh-feed``.
"""

from __future__ import annotations

import asyncpg
import pytest

from rxmesh.providers import PostgresStore

pytestmark = pytest.mark.postgres


async def names_of_backends(pg_dsn: str, names: list[str]) -> list[str]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE application_name = ANY($1)"
            " AND pid <> pg_backend_pid() ORDER BY application_name",
            names,
        )
    finally:
        await conn.close()
    return [row[0] for row in rows]


async def test_the_dsns_application_name_names_every_connection(pg_dsn: str, prefix: str) -> None:
    name = f"svc-{prefix}"
    separator = "&" if "?" in pg_dsn else "?"
    async with PostgresStore(f"{pg_dsn}{separator}application_name={name}", schema_prefix=prefix):
        seen = await names_of_backends(pg_dsn, [name])
    assert len(seen) >= 2  # the pool's connection and the change feed's listener


async def test_control_without_it_the_store_names_them_rxmesh(pg_dsn: str, prefix: str) -> None:
    async with PostgresStore(pg_dsn, schema_prefix=prefix) as store:
        seen = await names_of_backends(pg_dsn, ["rxmesh", "rxmesh-feed"])
        assert store.name  # started
    assert "rxmesh" in seen and "rxmesh-feed" in seen
