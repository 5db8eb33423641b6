"""A content filter on PostgreSQL: the server evaluates it in the Initial and in a gap's
re-select, the store's evaluator on every delta, with one meaning; a node that stops matching
leaves the view, one that starts matching enters it. An equality the filter requires is answered
by a GIN index on ``content`` where one exists (the plan is read back from the server).

The live-query tests fail against 8d14411, where a query with ``where`` ended at once with a
``NodeValidationError`` (the store did not evaluate filters in its Initial).
"""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as ops

from rxmesh.aio import first_value
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers.postgres._reads import _STREAMED, _query_statement
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import execute, started, terminate_listener

pytestmark = pytest.mark.postgres

WAIT = 5.0
OPEN_OVER_100 = field("status").eq("open") & field("total").gt(100)


def order(path: str, status: object, total: object) -> MeshNode:
    return MeshNode(path=path, content={"status": status, "total": total}, version=1)


async def test_the_initial_holds_only_matches_and_nodes_enter_and_leave(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        for node in (order("p/a", "open", 150), order("p/b", "open", 50), order("p/c", "shut", 9)):
            await store.write(node)
        frames: Recorder[QueryFrame] = Recorder(
            store.query(NodeQuery(partition="p", where=OPEN_OVER_100))
        )
        try:
            initial = await frames.next()
            assert initial.kind is FrameKind.INITIAL
            assert [n.path for n in initial.nodes] == ["p/a"]

            await store.update(order("p/b", "open", 101))  # starts matching: enters
            delta = await frames.next()
            assert [n.path for n in delta.nodes] == ["p/b"] and delta.removed == ()
            await store.update(order("p/a", "open", "150"))  # a string is not a number: leaves
            delta = await frames.next()
            assert delta.nodes == () and delta.removed == ("p/a",)
            await store.update(order("p/c", "shut", 600))  # still not matching: no frame
            await store.delete("p/b")
            delta = await frames.next()
            assert delta.nodes == () and delta.removed == ("p/b",)
        finally:
            frames.dispose()


async def test_negative_control_without_where_every_node_stays(pg_dsn: str, prefix: str) -> None:
    async with started(pg_dsn, prefix) as store:
        await store.write(order("p/a", "open", 150))
        await store.write(order("p/b", "open", 50))
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            assert [n.path for n in (await frames.next()).nodes] == ["p/a", "p/b"]
            await store.update(order("p/a", "open", "150"))
            delta = await frames.next()
            assert [n.path for n in delta.nodes] == ["p/a"] and delta.removed == ()
        finally:
            frames.dispose()


async def test_a_gaps_re_select_applies_the_filter_on_the_server(pg_dsn: str, prefix: str) -> None:
    """Rows changed behind a lost listener: the re-select brings the one that now matches and
    removes the one that stopped matching, and leaves out the one that never matched."""
    async with started(pg_dsn, prefix, reconnect_backoff=(0.3,)) as store:
        await store.write(order("p/a", "open", 150))
        await store.write(order("p/b", "open", 50))
        await store.write(order("p/c", "shut", 500))
        frames: Recorder[QueryFrame] = Recorder(
            store.query(NodeQuery(partition="p", where=OPEN_OVER_100))
        )
        try:
            assert [n.path for n in (await frames.next()).nodes] == ["p/a"]
            await terminate_listener(pg_dsn, store)
            table = store._table("p")
            content = (
                f"UPDATE {table} SET content = $2::jsonb, version = version + 1 WHERE path = $1"
            )
            await execute(pg_dsn, content, "p/a", json.dumps({"status": "open", "total": 5}))
            await execute(pg_dsn, content, "p/b", json.dumps({"status": "open", "total": 500}))
            await execute(pg_dsn, content, "p/c", json.dumps({"status": "shut", "total": 501}))
            delta = await frames.next()
            assert [n.path for n in delta.nodes] == ["p/b"]
            assert delta.removed == ("p/a",)
        finally:
            frames.dispose()


async def test_an_equality_is_answered_by_a_gin_index_on_content(pg_dsn: str, prefix: str) -> None:
    """With ``CREATE INDEX ... USING gin (content jsonb_path_ops)`` the filtered SELECT reads the
    index (generic plan, as a long-lived pooled connection would run it). Negative controls: a
    filter with no equality it requires (``or``, a range) cannot use it, and the same filter is
    a scan where no such index exists."""
    async with started(pg_dsn, prefix) as store:
        nodes = [
            MeshNode(path=f"p/n{i:05d}", content={"status": f"s{i % 50}", "total": i}, version=1)
            for i in range(5_000)
        ]
        await first_value(store.write_many(nodes).pipe(ops.to_list()), timeout=60)
        table = store._table("p")
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(f"ANALYZE {table}")

            async def plan(where: object) -> str:
                sql, args = _query_statement(table, "", None, where)  # type: ignore[arg-type]
                await conn.execute("DEALLOCATE ALL")
                await conn.execute("SET plan_cache_mode = force_generic_plan")
                statement = await conn.prepare(f"EXPLAIN {sql}")
                rows = await statement.fetch(*args)
                return "\n".join(row[0] for row in rows)

            equality = field("status").eq("s7") & field("total").gt(100)
            assert "nodes_content_idx" not in await plan(equality)
            await conn.execute(
                f"CREATE INDEX nodes_content_idx ON {table} USING gin (content jsonb_path_ops)"
            )
            await conn.execute(f"ANALYZE {table}")
            used = await plan(equality)
            assert "nodes_content_idx" in used, used
            either = field("status").eq("s7") | field("status").eq("s8")
            assert "nodes_content_idx" not in await plan(either)
            assert "nodes_content_idx" not in await plan(field("total").gt(4_900))
            # The index changes the plan, never the answer.
            rows = await store._select(NodeQuery(partition="p", where=equality))
            assert [n.path for n in rows] == [n.path for n in nodes if equality.matches(n.content)]
        finally:
            await conn.close()


statuses = st.sampled_from(["open", "shut", "Open", 1, None, True])
texts = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=3)
totals = st.one_of(st.integers(-5, 300), st.floats(-5, 300, allow_nan=False), texts)
contents = st.fixed_dictionaries({}, optional={"status": statuses, "total": totals})
wheres = st.sampled_from(
    [
        OPEN_OVER_100,
        field("status").eq("open"),
        field("status").is_null() | field("total").le(0),
        ~field("status").in_(["open", "shut"]),
        field("total").ge(100.5) & ~field("status").eq(True),
    ]
)


@given(batch=st.lists(contents, min_size=1, max_size=30), where=wheres)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_initial_on_postgres_is_the_evaluators_answer(
    pg_dsn: str, prefix: str, batch: list[dict[str, object]], where: object
) -> None:
    """The rows a filtered Initial returns are exactly the rows the evaluator accepts."""

    async def check() -> None:
        async with started(pg_dsn, prefix) as store:
            written = [
                MeshNode(path=f"p/n{i:03d}", content=content, version=1)
                for i, content in enumerate(batch)
            ]
            for node in written:
                await store.write(node)
            query = NodeQuery(partition="p", where=where)  # type: ignore[arg-type]
            initial = await first_value(store.query(query), timeout=WAIT)
            assert [n.path for n in initial.nodes] == [n.path for n in written if query.matches(n)]
            await execute(pg_dsn, f"DELETE FROM {store._table('p')}")

    asyncio.run(check())


async def test_a_filtered_read_streams_in_path_order(pg_dsn: str, prefix: str) -> None:
    """Under the settings of a live read the filtered SELECT walks the primary key in path
    order, so its first batch comes before the scan ends and its build overlaps the server's
    work on the next. Negative control: without them the planner (guessing few rows from the
    jsonb test) scans and sorts, and no row comes before the whole scan is done.

    Fails against e183804, whose filtered Initial waited for the sort (1.6x asyncpg's fetch of
    the same statement in bench/live.py)."""
    async with started(pg_dsn, prefix) as store:
        nodes = [
            MeshNode(path=f"p/n{i:05d}", content={"status": f"s{i % 10}", "i": i}, version=1)
            for i in range(20_000)
        ]
        await first_value(store.write_many(nodes).pipe(ops.to_list()), timeout=60)
        table = store._table("p")
        sql, args = _query_statement(table, "", None, field("status").eq("s1"))
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(f"ANALYZE {table}")

            async def plan(settings: str | None) -> str:
                async with conn.transaction():
                    if settings is not None:
                        await conn.execute(settings)
                    rows = await conn.fetch(f"EXPLAIN {sql}", *args)
                return "\n".join(row[0] for row in rows)

            streamed = await plan(_STREAMED)
            assert "Sort" not in streamed and "nodes_pkey" in streamed, streamed
            assert "Sort" in await plan(None)
        finally:
            await conn.close()
