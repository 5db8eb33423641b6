"""A refused connect leaves nothing for the cyclic garbage collector (issue 16, item 5).

asyncpg's connect path keeps the error it raises in a local of a frame that the error's own
traceback holds (``last_error``; asyncio's list of connect errors): a reference cycle of ~60
objects (frames, tracebacks, an SSL context, sockets) per refused connect. 1,000 creates
answered UNAVAILABLE through the default ladder made 4,000 of them (248k objects), and the
collector's full passes that freed them ran inside loop steps of 50-200 ms. The store's one
mapping of driver errors now clears the locals of the finished frames of a driver error it
maps (the traceback itself, with every frame and line, stays on the StoreError's
``__cause__``, as the first test checks). The first two tests fail against 345a4c7; the third
is their negative control: the same refused connect through raw asyncpg does leave the cycle,
so the check can see one.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlparse

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.exceptions import StoreError
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy
from tests.postgres.kinds import drop_schemas, started, unique_prefix

WAIT = 5.0


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def _refused_errors_left_for_the_collector(action: Callable[[], Awaitable[None]]) -> int:
    """How many ConnectionRefusedError objects only the cyclic collector could free once
    ``action`` has run and everything it raised was dropped (the passes the collector makes
    meanwhile count too: they keep what they free in ``gc.garbage``)."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)  # from now on, what any collector pass frees is kept
    try:
        await action()
        for _ in range(3):  # the loop lets go of the last error it handled on a later turn
            await asyncio.sleep(0)
        gc.collect()
        found = sum(isinstance(o, ConnectionRefusedError) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


async def test_a_refused_start_leaves_no_cycle_and_keeps_its_traceback() -> None:
    seen: list[str] = []

    async def refused_start() -> None:
        store = PostgresStore(
            f"postgresql://postgres@127.0.0.1:{_closed_port()}/x", connect_timeout=1
        )
        try:
            async with asyncio.timeout(WAIT):
                await store.start()
        except StoreError as error:
            assert isinstance(error.__cause__, ConnectionRefusedError)
            # What a log shows stays whole: every frame down to the refused socket.
            seen.extend(f.name for f in traceback.extract_tb(error.__cause__.__traceback__))
        else:
            raise AssertionError("a closed port was not refused")

    assert await _refused_errors_left_for_the_collector(refused_start) == 0
    assert "_connect" in seen and "sock_connect" in seen, seen


@pytest.mark.postgres
async def test_a_refused_reconnect_of_a_started_store_leaves_no_cycle(pg_dsn: str) -> None:
    target = urlparse(pg_dsn)
    prefix = unique_prefix()
    try:
        async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
            async with started(proxy.dsn(pg_dsn), prefix, connect_timeout=1) as store:
                assert await first_value(store.read("p/a"), timeout=WAIT) is None
                proxy.refuse()
                proxy.reset()
                causes: list[str] = []

                async def refused_reads() -> None:
                    for _ in range(5):  # the first may meet the dead connection instead
                        try:
                            await first_value(store.read("p/a"), timeout=WAIT)
                        except StoreError as error:
                            causes.append(type(error.__cause__).__name__)
                        except asyncpg.ConnectionDoesNotExistError:
                            causes.append("dead connection")

                assert await _refused_errors_left_for_the_collector(refused_reads) == 0
                assert "ConnectionRefusedError" in causes, causes
                await proxy.restore()
    finally:
        await drop_schemas(pg_dsn, prefix)


async def test_control_a_raw_refused_connect_does_leave_a_cycle() -> None:
    async def raw_refused() -> None:
        try:
            await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{_closed_port()}/x")
        except ConnectionRefusedError:
            pass
        else:
            raise AssertionError("a closed port was not refused")

    assert await _refused_errors_left_for_the_collector(raw_refused) >= 1


@pytest.fixture(autouse=True)
async def _collector_restored() -> AsyncIterator[None]:
    yield
    gc.set_debug(0)
    gc.garbage.clear()
