"""The same machine against PostgreSQL: a shorter profile.

``FaultInjectingStore(PostgresStore(dsn, schema_prefix=<private>))``, with a fresh schema prefix
per example (its schemas are dropped when the example ends). A store that does IO cannot be run
to quiescence by counting loop turns, so here the virtual clock advances whenever the loop has
been quiet for a few milliseconds. That is still no real waiting on the ladder, but it is not
deterministic: interleavings depend on the server. "No path with two rows" is asked of the
server itself (a GROUP BY over each partition's table), not of what the mesh can read.

Measured on the 2-core development VM against the shared server: ~5 s.
"""

from __future__ import annotations

import pytest

from rxmesh.providers import Store

from ._harness import PARTITIONS
from ._machine import machine, profile, run

pytestmark = pytest.mark.postgres

POSTGRES = profile(examples=6, steps=10)


def test_the_machine_on_postgres(pg_dsn: str) -> None:
    import asyncpg

    from rxmesh.providers.postgres import PostgresStore, quote_identifier
    from tests.providers.postgres.kinds import drop_schemas, unique_prefix

    async def open_store() -> Store:
        store = PostgresStore(pg_dsn, schema_prefix=unique_prefix(), min_size=1, max_size=4)
        await store.start()
        return store

    async def close_store(store: Store) -> None:
        assert isinstance(store, PostgresStore)
        await store.close()
        await drop_schemas(pg_dsn, store.schema_prefix)

    async def held_twice(store: Store) -> list[str]:
        assert isinstance(store, PostgresStore)
        conn = await asyncpg.connect(pg_dsn, timeout=5.0, command_timeout=10.0)
        try:
            twice: list[str] = []
            for partition in PARTITIONS:
                schema = store.schema_of(partition)
                exists = await conn.fetchval(
                    "SELECT 1 FROM pg_namespace WHERE nspname = $1", schema
                )
                if not exists:
                    continue
                rows = await conn.fetch(
                    f"SELECT path FROM {quote_identifier(schema)}.nodes "
                    "GROUP BY path HAVING count(*) > 1"
                )
                twice += [row["path"] for row in rows]
            return sorted(twice)
        finally:
            await conn.close()

    run(
        machine(inner=open_store, close_inner=close_store, twice=held_twice, real_time=True),
        POSTGRES,
    )
