"""A real store in a real outage shares its connection attempts (issue 16, item 5).

Through a :class:`~rxmesh.testing.FaultProxy` in front of the shared server: once an operation
found the store unreachable, the operations waiting for a connection make ONE attempt at a time
between them, and each is answered with its own error, classified by the one rule, naming its
own operation. Before, each made its own: 1,000 creates in an outage were 4,000 attempts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest

from rxmesh.exceptions import StoreError
from rxmesh.faults import is_transient_connect_fault
from rxmesh.model import MeshNode
from rxmesh.testing import FaultProxy
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix

pytestmark = pytest.mark.postgres

BOUND = 20.0
CALLERS = 12


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[FaultProxy]:
    target = urlparse(pg_dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as running:
        yield running


@pytest.fixture
async def prefix(pg_dsn: str) -> AsyncIterator[str]:
    chosen = unique_prefix()
    yield chosen
    await drop_schemas(pg_dsn, chosen)


async def _reads(store: object, paths: list[str]) -> list[BaseException | MeshNode | None]:
    aread = store.read  # type: ignore[attr-defined]
    async with asyncio.timeout(BOUND):
        return list(await asyncio.gather(*(aread(p) for p in paths), return_exceptions=True))


async def test_operations_waiting_in_an_outage_share_one_connection_attempt(
    pg_dsn: str, proxy: FaultProxy, prefix: str
) -> None:
    """Regression: at c1ffe01 each of the waiting reads made its own connection attempt (the
    proxy accepted one connection per read); now one attempt serves the reads that arrive
    while it is in flight."""
    async with started(
        proxy.dsn(pg_dsn), prefix, min_size=0, max_size=4, connect_timeout=0.5
    ) as store:
        await store.write(MeshNode(path="p/warm", version=1))
        proxy.stall()  # connections are accepted and never answered: each attempt is counted
        proxy.reset()  # the pooled connection dies; the pool must connect again
        async with asyncio.timeout(BOUND):
            # Found unreachable by a connection attempt (the first read may still meet the
            # dead connection instead: 08003).
            for _ in range(2):
                with pytest.raises(Exception) as first:  # classified below
                    await store.read("p/first")
                assert is_transient_connect_fault(first.value)
        accepted = proxy.connections_accepted
        outcomes = await _reads(store, [f"p/r{i}" for i in range(CALLERS)])
        attempts = proxy.connections_accepted - accepted
        assert attempts <= 2, attempts  # one for all (a second if one arrived just after it)
        assert all(isinstance(o, StoreError) for o in outcomes), outcomes
        errors = [o for o in outcomes if isinstance(o, StoreError)]
        assert all(is_transient_connect_fault(e) for e in errors)
        assert len({id(e) for e in errors}) == CALLERS  # each its own object
        for i, error in enumerate(errors):
            assert f"'p/r{i}'" in str(error), error  # each names its own operation
        own = "no connection attempt of its own"
        shared = [e for e in errors if own in str(getattr(e, "__notes__", ""))]
        assert len(shared) >= CALLERS - attempts
        assert store.statistics().shared_connect_failures == len(shared)

        proxy.unstall()
        proxy.reset()  # the stalled attempts' connections go too
        async with asyncio.timeout(BOUND):
            while True:  # the next attempt connects: the store is known reachable again
                outcome = (await _reads(store, ["p/warm"]))[0]
                if isinstance(outcome, MeshNode):
                    break
                assert isinstance(outcome, StoreError) and is_transient_connect_fault(outcome)
        before = store.statistics().shared_connect_failures
        healthy = await _reads(store, ["p/warm"] * CALLERS)
        assert all(isinstance(o, MeshNode) for o in healthy), healthy
        assert store.statistics().shared_connect_failures == before


async def test_with_the_store_reachable_each_operation_takes_its_own_connection(
    pg_dsn: str, proxy: FaultProxy, prefix: str
) -> None:
    """The negative control: nothing is serialised while the store answers; concurrent reads
    open connections in parallel (the pool grows to its maximum at once)."""
    async with started(proxy.dsn(pg_dsn), prefix, min_size=0, max_size=4) as store:
        await store.write(MeshNode(path="p/warm", version=1))
        accepted = proxy.connections_accepted
        proxy.stall()
        reads = asyncio.ensure_future(_reads(store, ["p/warm"] * CALLERS))
        async with asyncio.timeout(BOUND):
            while proxy.connections_accepted - accepted < 3:  # noqa: ASYNC110 - a count
                await asyncio.sleep(0.01)  # three connecting at once
        proxy.unstall()
        outcomes = await reads
        assert all(isinstance(o, MeshNode) for o in outcomes), outcomes
        assert store.statistics().shared_connect_failures == 0
