"""The LISTEN change feed: a loss is detected, the listener comes back, only then a gap is declared.

Losses are real: ``pg_terminate_backend`` of the listener, a TCP stall (only the heartbeat can see
it), and a restart of a private cluster (never the shared server).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.faults import is_transient_connect_fault
from rxmesh.model import (
    ChangeFeedGap,
    CommitAnnounced,
    FrameKind,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
)
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy, TemporaryPostgresCluster
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres

WAIT = 5.0


async def _until(predicate: object, what: str, timeout: float = WAIT) -> None:
    """Poll a real server's state (bounded); never a bare sleep for a fixed time."""
    assert callable(predicate)
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - a real server's state, bounded above
            await asyncio.sleep(0.005)


async def _terminate(dsn: str, pid: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid) is True
    finally:
        await conn.close()


async def _insert_raw(dsn: str, schema: str, path: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f'INSERT INTO "{schema}".nodes (path, version, request_id) VALUES ($1, 1, $2)',
            path,
            "raw",
        )
    finally:
        await conn.close()


async def test_no_gap_is_declared_for_the_first_listen(pg_dsn: str, prefix: str) -> None:
    store = PostgresStore(pg_dsn, schema_prefix=prefix)
    gaps: list[ChangeFeedGap] = []
    store.gaps.subscribe(gaps.append)
    async with store:
        await asyncio.wait_for(store.write(MeshNode(path="p/a", version=1)), WAIT)
        assert store.feed_backend_pid is not None
    assert gaps == []


async def test_a_terminated_listener_declares_a_gap_and_the_requery_sees_the_missed_change(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix, reconnect_backoff=(0.3,)) as store:
        changes: Recorder[NodeChange] = Recorder(store.changes)
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        await changes.next_matching(lambda c: c.path == "p/seed")  # its NOTIFY is behind us
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        evidence: Recorder[StoreEvidence] = Recorder(store.answers_again)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        try:
            initial = await frames.next()
            assert initial.kind is FrameKind.INITIAL
            assert [n.path for n in initial.nodes] == ["p/seed"]
            first_pid = store.feed_backend_pid
            assert first_pid is not None

            await _terminate(pg_dsn, first_pid)
            await _until(lambda: store.feed_backend_pid is None, "the loss is noticed")
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/missed")  # during the gap

            gap = await gaps.next()
            assert gap.source == store.name
            assert gap.lost_at <= gap.resumed_at
            assert store.feed_backend_pid not in (None, first_pid)  # re-LISTENed
            # (The verified start came first: a subscriber of a started store gets it at once.)
            assert await evidence.next_matching(lambda e: e == gap) == gap

            delta = await frames.next()  # from the re-query, not from the feed
            assert delta.kind is FrameKind.DELTA
            assert [n.path for n in delta.nodes] == ["p/missed"]
            assert delta.removed == ()
            assert changes.pending() == 0  # the feed itself never reported it

            # A gap that changed nothing emits nothing.
            second_pid = store.feed_backend_pid
            assert second_pid is not None
            await _terminate(pg_dsn, second_pid)
            await gaps.next()
            await asyncio.wait_for(store.write(MeshNode(path="p/marker", version=1)), WAIT)
            after = await frames.next()
            assert [n.path for n in after.nodes] == ["p/marker"]
            announced = await evidence.next_matching(lambda e: isinstance(e, CommitAnnounced))
            assert isinstance(announced, CommitAnnounced)
            assert announced.path == "p/marker"
        finally:
            for recorder in (gaps, evidence, changes, frames):
                recorder.dispose()


async def test_a_stalled_listener_is_caught_by_the_heartbeat_and_declares_a_gap(
    pg_dsn: str, prefix: str
) -> None:
    target = urlparse(pg_dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        options = {
            "heartbeat_interval": 0.05,
            "heartbeat_timeout": 0.2,
            "connect_timeout": 0.3,
            "reconnect_backoff": (0.05,),
        }
        async with started(proxy.dsn(pg_dsn), prefix, **options) as store:
            gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
            try:
                proxy.stall()  # no RST, no FIN: only a heartbeat notices
                await _until(lambda: store.feed_backend_pid is None, "the stall is noticed")
                assert gaps.pending() == 0  # not while the store is away
                proxy.unstall()
                gap = await gaps.next()
                assert "heartbeat" in gap.reason
            finally:
                gaps.dispose()


@pytest.mark.slow
async def test_a_restarted_server_resumes_the_feed_with_a_gap_and_is_unreachable_meanwhile(
    pg_dsn: str,
) -> None:
    try:
        cluster = TemporaryPostgresCluster()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    await asyncio.to_thread(cluster.start)
    try:
        async with PostgresStore(
            cluster.dsn, connect_timeout=1.0, reconnect_backoff=(0.05, 0.1)
        ) as store:
            await asyncio.wait_for(store.write(MeshNode(path="p/a", version=1)), WAIT)
            gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
            try:
                await asyncio.to_thread(cluster.stop, "fast")
                with pytest.raises(Exception) as caught:
                    await asyncio.wait_for(store.read("p/a"), WAIT)
                assert is_transient_connect_fault(caught.value), repr(caught.value)
                assert gaps.pending() == 0
                await asyncio.to_thread(cluster.start)
                gap = await gaps.next()
                assert gap.source == store.name
                node = await asyncio.wait_for(store.read("p/a"), WAIT)  # the pool healed
                assert node is not None
            finally:
                gaps.dispose()
    finally:
        await asyncio.to_thread(cluster.cleanup)


def test_the_store_name_never_shows_a_password() -> None:
    store = PostgresStore("postgresql://alice:s3cret@db.example:6543/mesh")
    assert store.name == "postgres@db.example:6543/mesh"
    assert "s3cret" not in store.name


async def test_operations_on_an_unstarted_store_say_so(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    with pytest.raises(RuntimeError, match="not started"):
        await asyncio.wait_for(store.read("p/a"), WAIT)


async def test_partitions_differing_only_in_case_are_different_schemas(
    pg_dsn: str, prefix: str
) -> None:
    async with started(pg_dsn, prefix) as store:
        await asyncio.wait_for(store.write(MeshNode(path="Abc/x", content=1)), WAIT)
        await asyncio.wait_for(store.write(MeshNode(path="abc/x", content=2)), WAIT)
        upper = await asyncio.wait_for(store.read("Abc/x"), WAIT)
        lower = await asyncio.wait_for(store.read("abc/x"), WAIT)
        assert upper is not None
        assert lower is not None
        assert (upper.content, lower.content) == (1, 2)
        everything = await first_value(store.query(NodeQuery()), timeout=WAIT)
        assert [n.path for n in everything.nodes] == ["Abc/x", "abc/x"]


def test_a_bad_schema_prefix_is_refused() -> None:
    with pytest.raises(ValueError):
        PostgresStore("postgresql://x@127.0.0.1/db", schema_prefix='a"; DROP')
    with pytest.raises(ValueError):
        PostgresStore("postgresql://x@127.0.0.1/db", schema_prefix="Upper")
