"""Concurrent creates of one partition commit as ONE statement when every lane is busy
(``PostgresStore.write`` through :class:`rxmesh.providers.postgres._groups.WriteGroups`; issue 15).

Which creates share a group is made certain, not timed: two lone creates are held on row locks
of uncommitted rows of another connection (an ``INSERT ... ON CONFLICT`` waits for the
transaction that holds a row of its path), so both lanes are busy while the test queues the
rest; releasing the locks sends what waits. One transaction per group is read off the rows'
``xmin``; each member's outcome is its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from rxmesh.exceptions import StoreConflictError
from rxmesh.faults import is_write_outcome_unknown
from rxmesh.model import MeshNode
from rxmesh.providers.postgres import PostgresStore
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

pytestmark = pytest.mark.postgres

WAIT = 10.0


@pytest.fixture
async def prefix(pg_dsn: str) -> AsyncIterator[str]:
    name = unique_prefix()
    yield name
    await drop_schemas(pg_dsn, name)


def _node(path: str, request_id: str = "mine") -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content={"p": path}, version=1,
                    request_id=request_id)  # fmt: skip


async def _hold(dsn: str, table: str, *paths: str) -> asyncpg.Connection:
    """Another connection with a transaction holding uncommitted rows at ``paths``."""
    conn = await asyncpg.connect(dsn)
    await conn.execute("BEGIN")
    for path in paths:
        await conn.execute(
            f"INSERT INTO {table} (path, version, request_id) VALUES ($1, 1, 'holder')", path
        )
    return conn


async def _waiting_on_locks(conn: asyncpg.Connection, pattern: str, count: int) -> None:
    """Until ``count`` backends wait on a lock running a statement LIKE ``pattern`` (a pattern
    naming this test's own schema, so another session's statements never count; polled on
    the server's own state, bounded by WAIT). ``pg_stat_clear_snapshot()``: a connection inside
    a transaction would otherwise read the first snapshot of the statistics again and again."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1"
    async with asyncio.timeout(WAIT):
        while True:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            if await conn.fetchval(query, pattern) >= count:
                return
            await asyncio.sleep(0.02)


async def _transactions(conn: asyncpg.Connection, table: str, like: str) -> int:
    return int(
        await conn.fetchval(
            f"SELECT count(DISTINCT xmin::text) FROM {table} WHERE path LIKE $1", like
        )
    )


async def _physical_order(conn: asyncpg.Connection, table: str) -> list[str]:
    rows = await conn.fetch(f"SELECT path FROM {table} WHERE path LIKE 'g/m%' ORDER BY ctid")
    return [row[0] for row in rows]


async def _busy_lanes(pg_dsn: str, store: PostgresStore) -> tuple[asyncpg.Connection, list[
        asyncio.Task[MeshNode]]]:  # fmt: skip
    """Both lanes of partition ``g`` held by lone creates waiting on another transaction."""
    await store.write(_node("g/seed"))  # the partition's table exists
    holder = await _hold(pg_dsn, store._table("g"), "g/lane1", "g/lane2")
    lanes = [asyncio.create_task(store.write(_node(f"g/lane{i}"))) for i in (1, 2)]
    await _waiting_on_locks(holder, f"INSERT INTO%{store.schema_of('g')}%VALUES%", 2)
    return holder, lanes


async def test_creates_waiting_behind_busy_lanes_commit_as_one_transaction(
    pg_dsn: str, prefix: str
) -> None:
    """Fails against 70e4697, where every create was its own statement and transaction (20
    xmins): the 20 queued creates are now one statement, every row landed once. They arrive in
    reverse path order and are inserted in path order (rows of two groups are locked in one
    order, so they cannot deadlock): read off the rows' physical order (ctid)."""
    async with started(pg_dsn, prefix, max_size=6) as store:
        holder, lanes = await _busy_lanes(pg_dsn, store)
        members = [
            asyncio.create_task(store.write(_node(f"g/m{i:02d}"))) for i in reversed(range(20))
        ]
        for _ in range(5):
            await asyncio.sleep(0)
        assert store.statistics().write_groups == 0  # all of them wait: both lanes are busy
        await holder.execute("ROLLBACK")
        await holder.close()
        written = await asyncio.wait_for(asyncio.gather(*lanes, *members), WAIT)
        assert [n.path for n in written[2:]] == [f"g/m{i:02d}" for i in reversed(range(20))]
        assert all(n.version == 1 for n in written)
        conn = await asyncpg.connect(pg_dsn)
        try:
            assert await _transactions(conn, store._table("g"), "g/m%") == 1
            count = await conn.fetchval(f"SELECT count(*) FROM {store._table('g')}")
            assert count == 23  # seed, two lanes, twenty members: each once
            assert await _physical_order(conn, store._table("g")) == sorted(
                f"g/m{i:02d}" for i in range(20)
            )
        finally:
            await conn.close()
        statistics = store.statistics()
        assert (statistics.write_groups, statistics.grouped_creates) == (1, 20)


async def test_with_grouping_off_creates_behind_blocked_ones_go_at_once_each_on_its_own(
    pg_dsn: str, prefix: str
) -> None:
    """``group_creates=False``: no lane holds anything back; every create is its own
    transaction (the negative control of the grouping, on the same set-up)."""
    async with started(pg_dsn, prefix, max_size=8, group_creates=False) as store:
        holder, lanes = await _busy_lanes(pg_dsn, store)
        members = [asyncio.create_task(store.write(_node(f"g/m{i:02d}"))) for i in range(5)]
        written = await asyncio.wait_for(asyncio.gather(*members), WAIT)  # not held back
        assert not any(lane.done() for lane in lanes)  # while the two still wait on the lock
        await holder.execute("ROLLBACK")
        await holder.close()
        await asyncio.wait_for(asyncio.gather(*lanes), WAIT)
        assert [n.path for n in written] == [f"g/m{i:02d}" for i in range(5)]
        conn = await asyncpg.connect(pg_dsn)
        try:
            assert await _transactions(conn, store._table("g"), "g/m%") == 5
        finally:
            await conn.close()
        statistics = store.statistics()
        assert (statistics.write_groups, statistics.grouped_creates) == (0, 0)


async def test_creates_one_after_another_are_one_transaction_each(pg_dsn: str, prefix: str) -> None:
    """Negative control of the xmin and ctid measures above: no lane is ever busy, no group
    forms, and rows written one by one in reverse order lie in that order."""
    async with started(pg_dsn, prefix) as store:
        for i in reversed(range(5)):
            await store.write(_node(f"g/m{i:02d}"))
        conn = await asyncpg.connect(pg_dsn)
        try:
            assert await _transactions(conn, store._table("g"), "g/m%") == 5
            assert await _physical_order(conn, store._table("g")) == [
                f"g/m{i:02d}" for i in reversed(range(5))
            ]
        finally:
            await conn.close()
        assert store.statistics().write_groups == 0


async def test_a_taken_path_in_a_group_is_decided_alone_and_the_rest_land(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix, max_size=6) as store:
        await store.write(_node("g/theirs", request_id="other"))
        await store.write(_node("g/landed-before", request_id="r-again"))
        holder, lanes = await _busy_lanes(pg_dsn, store)
        members = {
            "conflict": asyncio.create_task(store.write(_node("g/theirs", request_id="r1"))),
            "again": asyncio.create_task(store.write(_node("g/landed-before", "r-again"))),
            "free": asyncio.create_task(store.write(_node("g/free", request_id="r3"))),
        }
        for _ in range(5):
            await asyncio.sleep(0)
        await holder.execute("ROLLBACK")
        await holder.close()
        await asyncio.wait_for(asyncio.gather(*lanes), WAIT)
        with pytest.raises(StoreConflictError) as refused:
            await asyncio.wait_for(members["conflict"], WAIT)
        assert refused.value.existing_request_id == "other"
        again = await asyncio.wait_for(members["again"], WAIT)
        assert (again.path, again.request_id) == ("g/landed-before", "r-again")
        free = await asyncio.wait_for(members["free"], WAIT)
        assert free.path == "g/free"
        assert store.statistics().write_groups == 1
        theirs = await store.read("g/theirs")
        assert theirs is not None and theirs.request_id == "other"  # never overwritten


async def test_a_row_the_server_refuses_is_its_own_members_answer_and_the_rest_land(
    pg_dsn: str, prefix: str
) -> None:
    """Fails against 07b635e, where the group's refusal was raised in every member: ``jsonb``
    refuses ``NaN`` (the model takes it: the embedded store keeps it), so one member's content
    failed the other members' creates too. The refused statement wrote nothing; each member is
    then written alone, and only the NaN one is refused."""
    async with started(pg_dsn, prefix, max_size=6) as store:
        holder, lanes = await _busy_lanes(pg_dsn, store)
        bad = MeshNode(path="g/nan", content={"x": float("nan")}, version=1, request_id="r-nan")
        members = [
            asyncio.create_task(store.write(_node("g/m00"))),
            asyncio.create_task(store.write(bad)),
            asyncio.create_task(store.write(_node("g/m01"))),
        ]
        for _ in range(5):
            await asyncio.sleep(0)
        await holder.execute("ROLLBACK")
        await holder.close()
        await asyncio.wait_for(asyncio.gather(*lanes), WAIT)
        first, refused, last = await asyncio.wait_for(
            asyncio.gather(*members, return_exceptions=True), WAIT
        )
        assert store.statistics().write_groups == 1  # the three did go as one group first
        assert isinstance(refused, asyncpg.InvalidTextRepresentationError), refused
        assert isinstance(first, MeshNode) and first.path == "g/m00"
        assert isinstance(last, MeshNode) and last.path == "g/m01"
        assert await store.read("g/nan") is None
        assert await store.read("g/m00") is not None and await store.read("g/m01") is not None


async def test_a_group_cut_mid_statement_fails_every_member_and_writes_none(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix, max_size=6) as store:
        holder, lanes = await _busy_lanes(pg_dsn, store)
        blocker = await _hold(pg_dsn, store._table("g"), "g/m00")  # the group waits on it
        members = [asyncio.create_task(store.write(_node(f"g/m{i:02d}"))) for i in range(5)]
        for _ in range(5):
            await asyncio.sleep(0)
        await holder.execute("ROLLBACK")
        await holder.close()
        await asyncio.wait_for(asyncio.gather(*lanes), WAIT)
        # This test's own statement only (its schema in the pattern): another test session on
        # the same database may be waiting on a lock in a group write of its own.
        group = f"INSERT INTO%{store.schema_of('g')}%unnest%"
        await _waiting_on_locks(blocker, group, 1)
        await blocker.fetchval(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND query LIKE $1",
            group,
        )
        errors = await asyncio.wait_for(asyncio.gather(*members, return_exceptions=True), WAIT)
        await blocker.execute("ROLLBACK")
        await blocker.close()
        # asyncpg's own error for a backend terminated mid-statement (as a lone write gets it)
        assert all(isinstance(error, asyncpg.PostgresError) for error in errors), errors
        assert len({id(error) for error in errors}) == 1  # one statement, one outcome
        assert is_write_outcome_unknown(errors[0])  # the one rule: a cut mid-statement
        for i in range(5):
            assert await store.read(f"g/m{i:02d}") is None  # rolled back: none landed
        # the store goes on: the next create goes alone and lands
        assert (await store.write(_node("g/after"))).path == "g/after"


async def test_a_group_goes_through_a_transaction_pooler(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    """The group statement behind PgBouncer (transaction pooling, unnamed statements): one
    statement, one transaction, every row once. The locks are held on the server directly."""
    async with started(pgbouncer_dsn, prefix, listen_dsn=pg_dsn, max_size=6) as store:
        assert store.pooled is True
        holder, lanes = await _busy_lanes(pg_dsn, store)
        members = [asyncio.create_task(store.write(_node(f"g/m{i:02d}"))) for i in range(10)]
        for _ in range(5):
            await asyncio.sleep(0)
        await holder.execute("ROLLBACK")
        await holder.close()
        written = await asyncio.wait_for(asyncio.gather(*lanes, *members), WAIT)
        assert [n.path for n in written[2:]] == [f"g/m{i:02d}" for i in range(10)]
        conn = await asyncpg.connect(pg_dsn)
        try:
            assert await _transactions(conn, store._table("g"), "g/m%") == 1
        finally:
            await conn.close()
        assert store.statistics().write_groups == 1
