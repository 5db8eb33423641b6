"""The store kinds the contract suite runs against, and helpers to observe stores in tests.

To run the contract suite against another store, add ONE entry to :data:`STORE_KINDS`: an id
(shown in test names, e.g. ``test_round_trip[postgres]``) mapping to a factory that takes the
pytest ``request`` and returns an async context manager yielding a fresh, empty-for-this-test
:class:`~rxmesh.providers.Store`. The factory may call ``request.getfixturevalue("pg_dsn")`` (which
skips outside CI when no server answers) and must clean up on exit. Stores that share a database
between two instances (the cross-instance change feed) also add an entry to
:data:`SHARED_DATABASE_KINDS`, yielding two instances on one database.

Each test writes into partitions of its own (the ``partition`` fixture), so kinds that keep state
across tests (a shared PostgreSQL database) stay isolated.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Generic, TypeVar

import pytest
from reactivex import Observable

from rxmesh.providers import InMemoryStore, Store
from rxmesh.testing import FaultInjectingStore

T = TypeVar("T")

StoreFactory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Store]]
PairFactory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[tuple[Store, Store]]]

WAIT = 5.0
"""Seconds a test waits for an asynchronous store event before failing (never a sleep)."""


@asynccontextmanager
async def _memory(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    yield InMemoryStore()


@asynccontextmanager
async def _memory_with_faults(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    yield FaultInjectingStore(InMemoryStore())  # no knob set: must be transparent


STORE_KINDS: dict[str, StoreFactory] = {
    "memory": _memory,
    "memory+faults": _memory_with_faults,
    # The PostgreSQL provider's kinds (tests/providers/postgres/kinds.py; imported lazily: it
    # needs asyncpg).
    "postgres": lambda request: __import__(
        "tests.providers.postgres.kinds", fromlist=["postgres_store"]
    ).postgres_store(request),
    "postgres+faults": lambda request: __import__(
        "tests.providers.postgres.kinds", fromlist=["postgres_store_with_faults"]
    ).postgres_store_with_faults(request),
    # Behind a real PgBouncer in transaction mode (the pool), listening directly (listen_dsn).
    "postgres+pgbouncer": lambda request: __import__(
        "tests.providers.postgres.kinds", fromlist=["pgbouncer_store"]
    ).pgbouncer_store(request),
}
"""Store kind id -> factory of an async context manager yielding a Store. Extend here."""

SHARED_DATABASE_KINDS: dict[str, PairFactory] = {
    "postgres": lambda request: __import__(
        "tests.providers.postgres.kinds", fromlist=["postgres_pair"]
    ).postgres_pair(request),
    "postgres+pgbouncer": lambda request: __import__(
        "tests.providers.postgres.kinds", fromlist=["pgbouncer_pair"]
    ).pgbouncer_pair(request),
}
"""Store kind id -> factory yielding two instances that share one database."""


@pytest.fixture(params=list(STORE_KINDS))
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A fresh store of each kind in :data:`STORE_KINDS`."""
    async with STORE_KINDS[request.param](request) as instance:
        yield instance


@pytest.fixture
def partition() -> str:
    """A partition name no other test uses."""
    return f"t{uuid.uuid4().hex[:16]}"


@pytest.fixture
def other_partition() -> str:
    """A second partition name no other test uses."""
    return f"u{uuid.uuid4().hex[:16]}"


async def collect(source: Observable[T], timeout: float = WAIT) -> list[T]:
    """Every item of ``source`` until it completes (its error is raised), bounded by ``timeout``."""
    recorder = Recorder(source)
    try:
        return await recorder.until_completed(timeout)
    finally:
        recorder.dispose()


class Recorder(Generic[T]):
    """Subscribes to ``source`` and lets a test await its items one by one, bounded in time."""

    def __init__(self, source: Observable[T]) -> None:
        self._queue: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self._subscription = source.subscribe(
            lambda item: self._queue.put_nowait(("next", item)),
            lambda error: self._queue.put_nowait(("error", error)),
            lambda: self._queue.put_nowait(("completed", None)),
        )

    async def next(self, timeout: float = WAIT) -> T:
        """The next item; raises the stream's error, or ``LookupError`` if it completed."""
        kind, value = await asyncio.wait_for(self._queue.get(), timeout)
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        if kind == "completed":
            raise LookupError("the stream completed")
        return value  # type: ignore[return-value]

    async def next_matching(self, predicate: Callable[[T], bool], timeout: float = WAIT) -> T:
        """The next item for which ``predicate`` holds (others are skipped), bounded in time."""
        async with asyncio.timeout(timeout):
            while True:
                item = await self.next(timeout)
                if predicate(item):
                    return item

    async def until_completed(self, timeout: float = WAIT) -> list[T]:
        """Every remaining item until completion."""
        items: list[T] = []
        async with asyncio.timeout(timeout):
            while True:
                try:
                    items.append(await self.next(timeout))
                except LookupError:
                    return items

    def pending(self) -> int:
        """How many events are queued and not yet taken."""
        return self._queue.qsize()

    def dispose(self) -> None:
        """Unsubscribe."""
        self._subscription.dispose()
