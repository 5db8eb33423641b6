"""A live query's SELECT keeps its plan on a long-lived pooled connection.

PostgreSQL may plan a prepared statement generically (for any parameters) after five executions,
and asyncpg keeps a pool connection's statements prepared. The old statement,
``WHERE ($1 = '' OR path = $1 OR starts_with(path, $1 || '/')) AND ($2 IS NULL OR ...)``, was a
scan of the index in path order while planned for ``$1 = ''`` and a sequential scan plus a sort
(spilling to disk at 60k rows) once generic: every Initial and gap re-select ran at half speed
after the fifth. Checked on the server's own plans: each statement rxmesh sends is EXPLAINed as
a prepared statement with ``plan_cache_mode = force_generic_plan``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from reactivex import operators as ops

from rxmesh.aio import first_value
from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers.postgres._reads import _query_statement
from rxmesh.providers.postgres._schema import _COLUMNS
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

pytestmark = pytest.mark.postgres

OLD = (
    "SELECT {columns} FROM {table} WHERE ($1 = '' OR path = $1 OR starts_with(path, $1 || '/'))"
    " AND ($2::text IS NULL OR node_type = $2) ORDER BY path"
)


@pytest.fixture
async def prefix(pg_dsn: str) -> AsyncIterator[str]:
    name = unique_prefix()
    yield name
    await drop_schemas(pg_dsn, name)


async def _generic_plan(conn: asyncpg.Connection, sql: str, args: list[str | None]) -> str:
    types = ", ".join("text" for _ in args)
    await conn.execute("DEALLOCATE ALL")
    await conn.execute(f"PREPARE q({types}) AS {sql}" if args else f"PREPARE q AS {sql}")
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    values = ", ".join("NULL" if a is None else f"'{a}'" for a in args)
    rows = await conn.fetch(f"EXPLAIN EXECUTE q({values})" if args else "EXPLAIN EXECUTE q")
    return "\n".join(row[0] for row in rows)


async def test_a_whole_partition_is_read_in_index_order_under_a_generic_plan(
    pg_dsn: str, prefix: str
) -> None:
    """Fails against 6dd4d72 (the OLD statement's generic plan sorts)."""
    async with started(pg_dsn, prefix) as store:
        nodes = [MeshNode(path=f"p/n{i:05d}", content={"i": i}, version=1) for i in range(20_000)]
        await first_value(store.write_many(nodes).pipe(ops.to_list()), timeout=60)
        table = store._table("p")
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(f"ANALYZE {table}")
            sql, args = _query_statement(table, "", None)
            plan = await _generic_plan(conn, sql, list(args))
            assert "Sort" not in plan and "nodes_pkey" in plan, plan
            # Negative control: the old statement, the same way, is a scan and a sort.
            old = await _generic_plan(conn, OLD.format(columns=_COLUMNS, table=table), ["", None])
            assert "Sort" in old, old
        finally:
            await conn.close()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (NodeQuery(partition="p"), ["p/a", "p/a/b", "p/ab", "p/b"]),
        (NodeQuery(path_prefix="p/a"), ["p/a", "p/a/b"]),
        (NodeQuery(partition="p", node_type="T"), ["p/a/b", "p/b"]),
        (NodeQuery(path_prefix="p/a", node_type="T"), ["p/a/b"]),
    ],
)
async def test_every_shape_of_a_query_reads_what_it_matches_in_path_order(
    pg_dsn: str, prefix: str, query: NodeQuery, expected: list[str]
) -> None:
    async with started(pg_dsn, prefix) as store:
        for path, kind in (("p/b", "T"), ("p/ab", None), ("p/a/b", "T"), ("p/a", None)):
            await store.write(MeshNode(path=path, node_type=kind, content={}, version=1))
        nodes = await store._select(query)
        assert [n.path for n in nodes] == expected
        assert all(query.matches(n) for n in nodes)
