"""``PostgresStore.write_many``: a window is one COPY in one transaction, and a taken path sends it
again as one ``INSERT ... ON CONFLICT DO NOTHING`` (issue 16, item 6).

Each test checks what a caller relies on: one transaction per window (the rows' ``xmin``), every
free row landed and reported in window order, a taken row never overwritten and not reported,
the change feed announcing exactly the rows that landed, and the same behind a transaction pooler.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import asyncpg
import asyncpg.exceptions as pgexc
import pytest
from pydantic import JsonValue
from reactivex import operators as ops

from rxmesh.aio import first_value
from rxmesh.exceptions import StoreError
from rxmesh.faults import is_store_unreachable
from rxmesh.model import MeshNode, NodeChange, WindowCommitted
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultProxy
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres

WAIT = 60.0


def _node(path: str, request_id: str = "mine") -> MeshNode:
    return MeshNode(
        path=path, node_type="Doc", content={"p": path}, version=1, request_id=request_id
    )


def _nodes(partition: str, count: int, request_id: str = "mine") -> list[MeshNode]:
    return [_node(f"{partition}/n{i:05d}", request_id=request_id) for i in range(count)]


async def _windows(
    store: PostgresStore, nodes: list[MeshNode], window: int
) -> list[WindowCommitted]:
    result: list[WindowCommitted] = await first_value(
        store.write_many(nodes, window).pipe(ops.to_list()), timeout=WAIT
    )
    return result


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg_dsn)
    try:
        yield connection
    finally:
        await connection.close()


def _table(store: PostgresStore, partition: str) -> str:
    return f"{quote_identifier(store.schema_of(partition))}.nodes"


async def _transactions(conn: asyncpg.Connection, table: str) -> list[int]:
    """How many rows each writing transaction left, in path order of its first row."""
    rows = await conn.fetch(
        f"SELECT xmin::text AS tx, count(*) AS n, min(path) AS first FROM {table}"
        " GROUP BY xmin::text ORDER BY first"
    )
    return [row["n"] for row in rows]


async def test_every_window_lands_whole_in_one_transaction_and_is_reported_in_order(
    pg_dsn: str, prefix: str, conn: asyncpg.Connection
) -> None:
    async with started(pg_dsn, prefix) as store:
        nodes = _nodes("w", 2500)
        windows = await _windows(store, nodes, 1000)
        assert [(w.partition, w.index, len(w.paths)) for w in windows] == [
            ("w", 0, 1000),
            ("w", 1, 1000),
            ("w", 2, 500),
        ]
        assert [p for w in windows for p in w.paths] == [n.path for n in nodes]
        assert await _transactions(conn, _table(store, "w")) == [1000, 1000, 500]
        row = await conn.fetchrow(
            f"SELECT node_type, content::text AS content, version, request_id"
            f" FROM {_table(store, 'w')} WHERE path = 'w/n01234'"
        )
        assert row is not None
        assert dict(row) == {
            "node_type": "Doc",
            "content": '{"p": "w/n01234"}',
            "version": 1,
            "request_id": "mine",
        }


async def _no_copy_running(conn: asyncpg.Connection, pattern: str) -> None:
    """Until no other backend runs a statement LIKE ``pattern`` (a real server's state: polled,
    bounded by WAIT)."""
    running = (
        "SELECT count(*) FROM pg_stat_activity WHERE state <> 'idle'"
        " AND query LIKE $1 AND pid <> pg_backend_pid()"
    )
    async with asyncio.timeout(WAIT):
        while await conn.fetchval(running, pattern):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_rows_written_one_by_one_are_one_transaction_each(
    pg_dsn: str, prefix: str, conn: asyncpg.Connection
) -> None:
    """Negative control of the xmin measure above: separate writes are separate transactions."""
    async with started(pg_dsn, prefix) as store:
        for node in _nodes("w", 3):
            await asyncio.wait_for(store.write(node), WAIT)
        assert await _transactions(conn, _table(store, "w")) == [1, 1, 1]


async def test_a_taken_path_lands_the_rest_of_its_window_and_is_never_overwritten(
    pg_dsn: str, prefix: str, conn: asyncpg.Connection
) -> None:
    async with started(pg_dsn, prefix) as store:
        theirs = MeshNode(
            path="w/n00500", node_type="Doc", content="theirs", version=7, request_id="other"
        )
        changes: list[NodeChange] = []
        seeded, marked = asyncio.Event(), asyncio.Event()
        marker = "m/marker"  # another partition: the "w" table keeps exactly its rows

        def on_change(change: NodeChange) -> None:
            if not seeded.is_set():  # the seed's own announcement, before the bulk
                seeded.set()
                return
            if change.path == marker:  # committed after the bulk: the feed is in commit order
                marked.set()
                return
            changes.append(change)

        subscription = store.changes.subscribe(on_change)
        try:
            await asyncio.wait_for(store.write(theirs), WAIT)
            async with asyncio.timeout(WAIT):
                await seeded.wait()
            nodes = _nodes("w", 2000)
            windows = await _windows(store, nodes, 1000)
            expected = [n.path for n in nodes if n.path != "w/n00500"]
            assert [len(w.paths) for w in windows] == [999, 1000]
            assert [p for w in windows for p in w.paths] == expected
            # Any announcement the bulk made (a stray one of the taken row included) comes
            # before the one of a row committed after it.
            await asyncio.wait_for(store.write(MeshNode(path=marker, version=1)), WAIT)
            async with asyncio.timeout(WAIT):
                await marked.wait()
        finally:
            subscription.dispose()
        assert sorted({c.path for c in changes}) == expected  # the taken row is not announced
        kept = await asyncio.wait_for(store.read("w/n00500"), WAIT)
        assert kept == theirs
        table = _table(store, "w")
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 2000
        # the window that met the taken row (sent again: one statement), the seeded row, the next
        # window; the COPY that met it left nothing
        assert await _transactions(conn, table) == [999, 1, 1000]


async def test_a_path_twice_in_one_window_lands_once_with_its_first_content(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        first = _node("w/twice", request_id="mine")
        second = MeshNode(path="w/twice", content="second", version=1, request_id="mine")
        windows = await _windows(store, [first, _node("w/other"), second], 10)
        assert {p for w in windows for p in w.paths} == {"w/twice", "w/other"}
        stored = await asyncio.wait_for(store.read("w/twice"), WAIT)
        assert stored is not None
        assert stored.content == {"p": "w/twice"}


async def test_a_cancelled_bulk_leaves_whole_windows_and_a_working_store(
    pg_dsn: str, prefix: str, conn: asyncpg.Connection
) -> None:
    async with started(pg_dsn, prefix, max_size=2) as store:
        seen: list[WindowCommitted] = []
        first = asyncio.get_running_loop().create_future()

        def on_window(window: WindowCommitted) -> None:
            seen.append(window)
            if not first.done():
                first.set_result(None)

        subscription = store.write_many(_nodes("w", 20_000), 500).subscribe(on_window)
        async with asyncio.timeout(WAIT):
            await first
        subscription.dispose()
        # The cancelled window ends (its connection is terminated): wait until no COPY of it
        # is left running on the server.
        await _no_copy_running(conn, f"COPY %{prefix}w%")
        landed = await conn.fetchval(f"SELECT count(*) FROM {_table(store, 'w')}")
        assert landed % 500 == 0  # never half a window
        assert landed < 20_000
        assert await _transactions(conn, _table(store, "w")) == [500] * (landed // 500)
        after = await _windows(store, _nodes("after", 1200), 500)
        assert [len(w.paths) for w in after] == [500, 500, 200]


async def test_a_bulk_write_through_a_transaction_pooler_lands_and_skips_taken_rows(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    store = PostgresStore(pgbouncer_dsn, schema_prefix=prefix, listen_dsn=pg_dsn, max_size=3)
    await store.start()
    try:
        assert store.pooled is True
        first = await _windows(store, _nodes("w", 1500), 1000)
        assert [len(w.paths) for w in first] == [1000, 500]
        again = await _windows(store, _nodes("w", 2200, request_id="later"), 1000)
        assert [len(w.paths) for w in again] == [0, 500, 200]
        assert again[1].paths[0] == "w/n01500"
        row = await asyncio.wait_for(store.read("w/n00001"), WAIT)
        assert row is not None
        assert row.request_id == "mine"
    finally:
        await store.close()


async def test_bulk_written_contents_read_back_as_single_writes_do(
    pg_dsn: str, prefix: str
) -> None:
    """The bulk path encodes contents itself (one C encoder, compact): what it stores must be
    what ``write`` (``json.dumps``) stores, for every kind of JSON value."""
    contents: list[JsonValue] = [
        {"text": "é ü \u2028 ☃ 𝄞", "nested": [1, {"a": [None, True, False]}], "n": -0.0},
        [1.5, 1e300, 10**30, "x"],
        "just a string",
        12,
        None,
    ]
    async with started(pg_dsn, prefix) as store:
        bulk = [
            MeshNode(path=f"b/n{i}", node_type="Doc", content=c, version=1)
            for i, c in enumerate(contents)
        ]
        await _windows(store, bulk, 2)
        for i, content in enumerate(contents):
            single = MeshNode(path=f"s/n{i}", node_type="Doc", content=content, version=1)
            await asyncio.wait_for(store.write(single), WAIT)
        for i in range(len(contents)):
            from_bulk = await asyncio.wait_for(store.read(f"b/n{i}"), WAIT)
            from_single = await asyncio.wait_for(store.read(f"s/n{i}"), WAIT)
            assert from_bulk is not None and from_single is not None
            assert from_bulk.content == from_single.content  # jsonb's own form, both ways


async def test_a_connection_cut_inside_a_window_s_copy_leaves_the_earlier_windows_only(
    pg_dsn: str, prefix: str, conn: asyncpg.Connection
) -> None:
    """The cut lands in the second window's COPY data: that window rolls back whole (the server
    never saw its end), the first stays committed and was reported, the error is one the one rule
    calls unreachable (asyncpg's 08003, passed on by the boundary with its sqlstate), and the store
    writes again afterwards."""
    target = urlparse(pg_dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        options = {"command_timeout": 5.0, "connect_timeout": 2.0}
        async with started(proxy.dsn(pg_dsn), prefix, **options) as store:
            await _windows(store, [_node("w/warm")], 10)  # the partition's table exists
            proxy.reset_after_client_sends(b"w/n015")  # 100 rows of the second window: one whole
            seen: list[WindowCommitted] = []
            with pytest.raises((StoreError, pgexc.PostgresError)) as caught:
                await first_value(
                    store.write_many(_nodes("w", 3000), 1000).pipe(
                        ops.do_action(seen.append), ops.to_list()
                    ),
                    timeout=WAIT,
                )
            assert is_store_unreachable(caught.value)
            assert [(w.index, len(w.paths)) for w in seen] == [(0, 1000)]
            # The server may still be reading what reached it before the cut: wait for it.
            await _no_copy_running(conn, f"COPY %{prefix}w%")
            # the cut window landed whole or not at all (its end may have reached the server
            # before the cut: an outcome the caller learns by reading, as for any statement)
            landed = await _transactions(conn, _table(store, "w"))
            assert landed in ([1000, 1], [1000, 1000, 1])  # the warm row sorts last
            await proxy.restore()
            again = await _windows(store, _nodes("w", 3000), 1000)
            assert [len(w.paths) for w in again] == [0, 2000 - sum(landed) + 1, 1000]


async def test_an_uncut_bulk_through_the_same_proxy_lands_every_window(
    pg_dsn: str, prefix: str
) -> None:
    """Negative control of the test above: the proxy alone changes nothing."""
    target = urlparse(pg_dsn)
    proxy = FaultProxy(target.hostname or "127.0.0.1", target.port or 5432)
    async with proxy, started(proxy.dsn(pg_dsn), prefix) as store:
        windows = await _windows(store, _nodes("w", 3000), 1000)
        assert [len(w.paths) for w in windows] == [1000, 1000, 1000]
