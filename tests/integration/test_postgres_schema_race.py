"""Concurrent first writes into a NEW partition all succeed (the schema is created once), directly
and through a transaction-pooling PgBouncer, and no advisory lock is left held afterwards.

Against the earlier code (a transaction-scoped advisory lock taken inside the DDL transaction)
this failed with 23505 on pg_namespace_nspname_index in most rounds: a waiter's catalog cache
still said "no such schema" after its predecessor committed it.

Through a pooler, the code of issue 14's time (a SESSION lock, released in another transaction)
left the lock held on an idle server connection whenever the pooler ran the unlock on another
one; a store connected directly then waited for it until its command timeout, on every create in
that partition. The lock is transaction-scoped now: it cannot outlive the transaction.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from rxmesh.model import MeshNode
from rxmesh.providers.postgres import PostgresStore
from tests.providers.postgres.test_pooler import ADVISORY_LOCKS_ON_SCHEMAS

pytestmark = pytest.mark.postgres


async def _advisory_locks(dsn: str, prefix: str) -> int:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        return len(await conn.fetch(ADVISORY_LOCKS_ON_SCHEMAS, prefix))
    finally:
        await conn.close()


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
async def test_concurrent_first_writes_into_new_partitions_never_race_the_schema(
    route: str, pg_dsn: str, prefix: str, request: pytest.FixtureRequest
) -> None:
    dsn = pg_dsn if route == "direct" else request.getfixturevalue("pgbouncer_dsn")
    # Several store instances (as several processes would), each racing into the same new
    # partitions with its own connections.
    stores = [
        PostgresStore(dsn, schema_prefix=prefix, max_size=4, listen_dsn=pg_dsn) for _ in range(3)
    ]
    for store in stores:
        await store.start()
    try:
        for round_ in range(6):
            partition = f"race{round_}"
            # Reads first: each backend caches "no such schema" (as the bootstrap's facts reads
            # do before a partition's first write) — the state in which the race showed.
            await asyncio.gather(
                *(
                    asyncio.wait_for(store.read(f"{partition}/s{s}w{w}"), 20)
                    for s, store in enumerate(stores)
                    for w in range(4)
                )
            )
            writes = [
                asyncio.wait_for(store.write(
                        MeshNode(path=f"{partition}/s{s}w{w}", content={"w": w}, version=1)
                    ), 20)
                for s, store in enumerate(stores)
                for w in range(4)
            ]
            results = await asyncio.gather(*writes, return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            assert failures == [], failures[:3]
    finally:
        for store in stores:
            await store.close()
    assert await _advisory_locks(pg_dsn, prefix) == 0
    # A store connected directly is not held up by anything the others left behind.
    async with PostgresStore(pg_dsn, schema_prefix=prefix, command_timeout=2.0) as direct:
        written = await asyncio.gather(
            *(
                asyncio.wait_for(direct.write(MeshNode(path=f"race{r}/direct", version=1)), 5)
                for r in range(6)
            )
        )
    assert [n.path for n in written] == [f"race{r}/direct" for r in range(6)]
