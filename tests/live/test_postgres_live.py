"""Live queries of the PostgreSQL store at scale (issue 16): a batch of notifications is one
Delta, a gap costs one re-select per query for every subscription of the store, and rows read
back from the store's own tables are built without re-validation, except where a row could be
foreign or corrupt."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.model import ChangeFeedGap, FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.providers.postgres import PostgresStore
from tests.helpers import until
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres

WAIT = 10.0


async def _sql(dsn: str, statement: str, *args: object) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


async def _frames_until(frames: Recorder[QueryFrame], paths: set[str]) -> list[QueryFrame]:
    """Every frame until all of ``paths`` have been delivered (bounded)."""
    seen: set[str] = set()
    got: list[QueryFrame] = []
    async with asyncio.timeout(WAIT):
        while not paths <= seen:
            frame = await frames.next()
            got.append(frame)
            seen.update(node.path for node in frame.nodes)
    return got


async def test_a_1000_row_bulk_reaches_a_live_query_as_a_handful_of_deltas(
    pg_dsn: str, prefix: str
) -> None:
    """Regression (issue 16): before, every changed row was its own Delta (1000 frames here)."""
    async with started(pg_dsn, prefix) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            bulk = [MeshNode(path=f"p/n{i:04d}", version=1) for i in range(1000)]
            await first_value(store.write_many(bulk, window=1000).pipe(), timeout=WAIT)

            deltas = await _frames_until(frames, {node.path for node in bulk})

            assert sum(len(frame.nodes) for frame in deltas) == 1000  # every row, once
            assert len(deltas) <= 10  # one per notification batch, not one per row
        finally:
            frames.dispose()


async def test_changes_that_do_not_arrive_together_stay_separate_deltas(
    pg_dsn: str, prefix: str
) -> None:
    """The negative control: coalescing only merges what is queued together; nothing waits."""
    async with started(pg_dsn, prefix) as store:
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            for path in ("p/a", "p/b"):
                await asyncio.wait_for(store.write(MeshNode(path=path, version=1)), WAIT)
                delta = await frames.next()
                assert [node.path for node in delta.nodes] == [path]
        finally:
            frames.dispose()


async def _gap(store: PostgresStore, dsn: str, gaps: Recorder[ChangeFeedGap], missed: str) -> None:
    """Terminate the listener, insert ``missed`` while it is away, wait for the gap.

    The partition's horizon is moved past every position first, so the live queries cannot
    read what changed since theirs and recover by the shared re-select these tests are about
    (tests/providers/postgres/test_resume.py has the recovery by position)."""
    await _sql(
        dsn,
        f'UPDATE "{store.schema_of("p")}".horizon SET pruned_through = pg_current_xact_id()',
    )
    pid = store.feed_backend_pid
    assert pid is not None
    await _sql(dsn, "SELECT pg_terminate_backend($1)", pid)
    await until(lambda: store.feed_backend_pid != pid)
    await _sql(
        dsn,
        f'INSERT INTO "{store.schema_of("p")}".nodes (path, version) VALUES ($1, 1)',
        missed,
    )
    await gaps.next()


async def test_subscriptions_of_one_store_share_one_re_select_per_query_at_a_gap(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 16): before, every subscription re-selected on its own (3 here)."""
    async with started(pg_dsn, prefix, reconnect_backoff=(0.2,)) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        selects: list[NodeQuery] = []
        select = store._reselect_rows

        async def counting(query: NodeQuery, each: Any) -> Any:
            selects.append(query)
            return await select(query, each)

        monkeypatch.setattr(store, "_reselect_rows", counting)
        same, other = NodeQuery(partition="p"), NodeQuery(partition="p", node_type=None)
        assert same == other  # equal queries are the same query
        distinct = NodeQuery(path_prefix="p")
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        recorders = [Recorder(store.query(q)) for q in (same, same, other, distinct)]
        try:
            for frames in recorders:
                assert (await frames.next()).kind is FrameKind.INITIAL
            selects.clear()

            await _gap(store, pg_dsn, gaps, "p/missed")

            for frames in recorders:  # every subscription still sees the missed row
                delta = await frames.next()
                assert [node.path for node in delta.nodes] == ["p/missed"]
            # One re-select for the three equal subscriptions, one for the distinct query (the
            # negative control: distinct queries are never shared).
            assert sorted(map(repr, selects)) == sorted(map(repr, [same, distinct]))
        finally:
            for recorder in (gaps, *recorders):
                recorder.dispose()


async def test_rows_of_the_stores_own_tables_are_built_equal_to_validated_ones(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        node = MeshNode(
            path="p/a", node_type="Note", content={"k": [1, "x", None]}, version=3, request_id="r"
        )
        await asyncio.wait_for(store.write(node), WAIT)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            (trusted,) = (await frames.next()).nodes
            validated = await store.read("p/a")  # point reads always validate
            assert validated is not None
            assert trusted == validated
            assert trusted.model_dump() == validated.model_dump()
            assert trusted.model_fields_set == validated.model_fields_set
            assert trusted.partition == "p"
        finally:
            frames.dispose()


async def test_a_corrupt_row_in_the_stores_table_is_still_refused(pg_dsn: str, prefix: str) -> None:
    """The check is kept where a row could be foreign: a row whose path is not in its table's
    partition goes through full validation, which refuses an invalid one: it is left out (the
    row's defect, reported), and the partition's query still answers (issue 31, item 8)."""
    async with started(pg_dsn, prefix) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/a", version=1)), WAIT)
        await _sql(
            pg_dsn,
            f'INSERT INTO "{store.schema_of("p")}".nodes (path, version) VALUES ($1, 1)',
            "not a valid path",
        )
        frame = await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)
        assert [node.path for node in frame.nodes] == ["p/a"]


async def test_a_gap_re_select_reports_rows_changed_removed_and_recreated_meanwhile(
    pg_dsn: str, prefix: str
) -> None:
    """The re-select builds only rows whose state changed, so each kind of change must show: an
    update (version bumped), a removal, and a path deleted and created again (same version, a
    new request); a row left alone must not (the negative control)."""
    async with started(pg_dsn, prefix, reconnect_backoff=(0.2,)) as store:
        for path in ("p/same", "p/updated", "p/removed", "p/recreated"):
            await store.write(MeshNode(path=path, version=1, content={"v": 1}, request_id="r1"))
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            assert len((await frames.next()).nodes) == 4
            pid = store.feed_backend_pid
            assert pid is not None
            await _sql(pg_dsn, "SELECT pg_terminate_backend($1)", pid)
            await until(lambda: store.feed_backend_pid != pid)
            table = f'"{store.schema_of("p")}".nodes'
            await _sql(
                pg_dsn,
                f"UPDATE {table} SET content = '{{\"v\": 2}}', version = 2"
                " WHERE path = 'p/updated';"
                f" DELETE FROM {table} WHERE path IN ('p/removed', 'p/recreated');"
                f" INSERT INTO {table} (path, content, version, request_id)"
                " VALUES ('p/recreated', '{\"v\": 9}', 1, 'r2')",
            )
            await gaps.next()

            delta = await frames.next()
            assert {n.path: n.content for n in delta.nodes} == {
                "p/updated": {"v": 2},
                "p/recreated": {"v": 9},
            }
            assert delta.removed == ("p/removed",)
        finally:
            gaps.dispose()
            frames.dispose()


async def test_nodes_built_from_rows_share_a_fields_set_that_a_copy_never_changes(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        for path in ("p/a", "p/b"):
            await store.write(MeshNode(path=path, version=1))
        a, b = (await first_value(store.query(NodeQuery(partition="p")), timeout=WAIT)).nodes
        copied = a.model_copy(update={"version": 7})
        assert (copied.version, a.version, b.version) == (7, 1, 1)
        assert a.model_fields_set == b.model_fields_set == set(MeshNode.model_fields)
        assert copied.model_fields_set is not a.model_fields_set
