"""An ordered window's page on PostgreSQL is a range of an expression index on its order, when
one exists (``PostgresStore.window_index_statement``): no scan of the partition, no sort.

Checked on the server's own plans (EXPLAIN of the very statement a page sends, with its
settings), for one field either way and two ascending fields. Negative control: without the
index the same statement sorts. (Fields of mixed directions are answered right, and this test
does not claim the planner reads their index in order: docs/live-queries.md says so.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from reactivex import operators as ops

from rxmesh.aio import first_value
from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres import PostgresStore
from rxmesh.providers.postgres._pages import _PAGE_SETTINGS, page_statement
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

pytestmark = pytest.mark.postgres


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    prefix = unique_prefix()
    try:
        async with started(pg_dsn, prefix) as instance:
            nodes = [
                MeshNode(path=f"p/n{i:05d}", content={"price": i % 997, "name": f"x{i}"})
                for i in range(20_000)
            ]
            await first_value(instance.write_many(nodes).pipe(ops.to_list()), timeout=60)
            yield instance
    finally:
        await drop_schemas(pg_dsn, prefix)


async def _plan(pg_dsn: str, store: PostgresStore, query: NodeQuery, after: MeshNode | None) -> str:
    sql, args = page_statement(store._table("p"), query, after, 10)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"ANALYZE {store._table('p')}")
        async with conn.transaction():
            await conn.execute(_PAGE_SETTINGS)
            rows = await conn.fetch("EXPLAIN " + sql, *args)
    finally:
        await conn.close()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize("order_by", [("price",), ("-price",), ("price", "name")])
async def test_a_page_is_a_range_of_the_window_index(
    pg_dsn: str, store: PostgresStore, order_by: tuple[str, ...]
) -> None:
    query = NodeQuery(partition="p", order_by=order_by, limit=10)
    after = (await store.page(query, None, 500))[-1]
    before = await store.page(query, after, 10)
    unindexed = await _plan(pg_dsn, store, query, after)
    assert "Sort" in unindexed, unindexed  # negative control: no index, a scan and a sort

    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(store.window_index_statement("p", order_by, "by_window"))
    finally:
        await conn.close()
    indexed = await _plan(pg_dsn, store, query, after)
    assert "Sort" not in indexed and "Index Scan using by_window" in indexed, indexed
    if not any(item.startswith("-") for item in order_by):
        assert "Index Cond" in indexed, indexed  # "after" is the index's range itself
    assert [n.path for n in await store.page(query, after, 10)] == [n.path for n in before]


async def test_the_index_statement_refuses_a_bad_order(store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="order_by"):
        store.window_index_statement("p", ["a..b"], "x")
