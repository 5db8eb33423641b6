"""The cut/restore backends: the cut makes the store unreachable (and only then), the restore
brings it back with its evidence, and ``rows`` reads what really landed behind every fault."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from rxmesh.exceptions import StoreError
from rxmesh.faults import is_store_unreachable
from rxmesh.model import ChangeFeedGap, MeshNode
from rxmesh.testing import (
    InMemoryOutage,
    OutageBackend,
    PostgresProxyOutage,
    ServerStopOutage,
    TemporaryPostgresCluster,
)
from tests.conftest import throwaway_cluster


async def _refused(backend: OutageBackend, path: str) -> Exception | None:
    """The error a write of ``path`` meets, or ``None`` if it lands (bounded). The error is
    returned to be classified: the tests assert :func:`is_store_unreachable` of it."""
    try:
        await asyncio.wait_for(backend.faults.write(MeshNode(path=path)), 10)
    except Exception as exc:
        return exc
    return None


async def test_the_in_memory_cut_refuses_reads_and_writes_as_unreachable_until_restored() -> None:
    async with InMemoryOutage("p", gap_reason="back") as backend:
        assert await _refused(backend, "p/before") is None  # control: before the cut it lands
        await backend.cut()
        refused = await _refused(backend, "p/during")
        assert isinstance(refused, StoreError) and is_store_unreachable(refused)
        with pytest.raises(StoreError) as read:
            await backend.faults.read("p/before")
        assert is_store_unreachable(read.value)
        assert backend.faults.statistics().feed_mode == "drop"
        # rows() reads behind the faults: what landed is there even while the store is cut
        assert [row.path for row in await backend.rows()] == ["p/before"]

        gaps: list[ChangeFeedGap] = []
        watch = backend.store.gaps.subscribe(gaps.append)
        try:
            await backend.restore()
        finally:
            watch.dispose()
        assert [(gap.reason, gap.lost_at) for gap in gaps] == [("back", backend.cut_at)]
        assert backend.faults.statistics().feed_mode == "open"
        assert await _refused(backend, "p/after") is None
        assert [row.path for row in await backend.rows()] == ["p/after", "p/before"]


async def test_the_in_memory_rows_are_the_partitions_only() -> None:
    async with InMemoryOutage("p") as backend:
        await backend.faults.write(MeshNode(path="p/a"))
        await backend.faults.write(MeshNode(path="q/b"))
        assert [row.path for row in await backend.rows()] == ["p/a"]


async def _lands_again(backend: OutageBackend, path: str) -> Exception | None:
    """Write ``path`` until it lands (the store re-connects by itself); bounded to ~10 s."""
    refused = None
    for _ in range(200):
        refused = await _refused(backend, path)
        if refused is None:
            return None
        await asyncio.sleep(0.05)
    return refused


@pytest.mark.postgres
async def test_the_proxy_cut_makes_postgres_unreachable_and_the_exit_drops_its_schema(
    pg_dsn: str,
) -> None:
    import asyncpg

    outage = PostgresProxyOutage(pg_dsn, partition="outage", label="test proxy")
    async with outage as backend:
        assert "via test proxy" in backend.store.name
        assert backend.schema is not None and backend.schema.startswith(outage.prefix)
        assert await _refused(backend, "outage/before") is None  # control: it lands
        await backend.cut()
        refused = await _refused(backend, "outage/during")
        assert refused is not None and is_store_unreachable(refused)
        assert "outage/before" in [row.path for row in await backend.rows()]  # behind the cut
        await backend.restore()
        assert await _lands_again(backend, "outage/after") is None
        paths = [row.path for row in await backend.rows()]
        assert "outage/before" in paths and "outage/after" in paths
        assert "outage/during" not in paths
        schema = backend.schema
    conn = await asyncpg.connect(pg_dsn)
    try:
        left = await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema)
    finally:
        await conn.close()
    assert left == 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryPostgresCluster]:
    with throwaway_cluster() as running:
        yield running


async def test_the_server_stop_cut_stops_the_server_and_the_restore_brings_it_back(
    cluster: TemporaryPostgresCluster,
) -> None:
    import asyncpg

    async with ServerStopOutage(cluster, partition="outage") as backend:
        assert await _refused(backend, "outage/before") is None  # control: it lands
        await backend.cut()
        refused = await _refused(backend, "outage/during")
        assert refused is not None and is_store_unreachable(refused)
        with pytest.raises(OSError):  # the server itself is down, not just the store's pool
            await asyncpg.connect(cluster.dsn, timeout=2.0)
        gaps: list[ChangeFeedGap] = []
        watch = backend.store.gaps.subscribe(gaps.append)
        try:
            assert gaps == []  # control: no evidence while the server is down
            await backend.restore()
            assert await _lands_again(backend, "outage/after") is None
            for _ in range(200):  # the store's own listener declares the gap once back; bounded
                if gaps:
                    break
                await asyncio.sleep(0.05)
        finally:
            watch.dispose()
        assert gaps and gaps[0].source == backend.store.name
        paths = [row.path for row in await backend.rows()]
        assert "outage/before" in paths and "outage/after" in paths
        assert "outage/during" not in paths
        schema = backend.schema
        await backend.cut()  # left cut: the exit starts the server again to drop the schema
    assert not backend.stopped
    conn = await asyncpg.connect(cluster.dsn)
    try:
        left = await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema)
    finally:
        await conn.close()
    assert left == 0
