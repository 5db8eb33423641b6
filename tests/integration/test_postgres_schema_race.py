"""Concurrent first writes into a NEW partition all succeed (the schema is created once).

Against the earlier code (a transaction-scoped advisory lock taken inside the DDL transaction)
this failed with 23505 on pg_namespace_nspname_index in most rounds: a waiter's catalog cache
still said "no such schema" after its predecessor committed it.
"""

from __future__ import annotations

import asyncio

import pytest

from rxmesh.aio import first_value
from rxmesh.model import MeshNode
from rxmesh.providers.postgres import PostgresStore

pytestmark = pytest.mark.postgres


async def test_concurrent_first_writes_into_new_partitions_never_race_the_schema(
    pg_dsn: str, prefix: str
) -> None:
    # Several store instances (as several processes would), each racing into the same new
    # partitions with its own connections.
    stores = [PostgresStore(pg_dsn, schema_prefix=prefix, max_size=4) for _ in range(3)]
    for store in stores:
        await store.start()
    try:
        for round_ in range(6):
            partition = f"race{round_}"
            # Reads first: each backend caches "no such schema" (as the bootstrap's facts reads
            # do before a partition's first write) — the state in which the race showed.
            await asyncio.gather(
                *(
                    first_value(store.read(f"{partition}/s{s}w{w}"), timeout=20)
                    for s, store in enumerate(stores)
                    for w in range(4)
                )
            )
            writes = [
                first_value(
                    store.write(
                        MeshNode(path=f"{partition}/s{s}w{w}", content={"w": w}, version=1)
                    ),
                    timeout=20,
                )
                for s, store in enumerate(stores)
                for w in range(4)
            ]
            results = await asyncio.gather(*writes, return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            assert failures == [], failures[:3]
    finally:
        for store in stores:
            await store.close()
