"""``mesh.watch(query)``: the live stream that survives what the live query survives.

Fails at 1d389e8 because ``Mesh`` had no ``watch``: the README's stream, ``iterate(mesh.live(q))``,
ended at the first transient fault mid-stream (the negative control below still does).
"""

from __future__ import annotations

import asyncio

import pytest
from reactivex.testing import TestScheduler

from rxmesh import Mesh
from rxmesh.aio import iterate
from rxmesh.exceptions import StoreError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import FrameKind, NodeQuery, QueryFrame
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, doc, until

from .conftest import FAST

QUERY = NodeQuery(partition="acme", node_type="Doc")


def mesh_on(
    scheduler: TestScheduler, inner: InMemoryStore | None = None
) -> tuple[Mesh, FaultInjectingStore]:
    store = FaultInjectingStore(inner or InMemoryStore())
    mesh = Mesh(store, scheduler=scheduler, ledger=PendingWriteLedger(""), retry_delays=FAST)
    return mesh, store


async def test_watch_reopens_through_the_cache_after_a_transient_fault() -> None:
    scheduler = TestScheduler()
    mesh, store = mesh_on(scheduler)
    await mesh.create(doc("acme/a"), access=ALICE)
    frames: list[QueryFrame] = []
    errors: list[Exception] = []
    mesh.watch(QUERY).subscribe(frames.append, errors.append)
    assert store.sever_open_queries() == 1  # the incident's ConnectionResetError chain
    await mesh.create(doc("acme/b"), access=ALICE)  # while the watch waits to re-open
    scheduler.advance_by(1.9)
    assert [f.kind for f in frames] == [FrameKind.INITIAL]
    scheduler.advance_by(0.1)  # the first re-open waits 2 s
    assert errors == []
    # The re-open resumes from the last token seen: only what changed meanwhile.
    assert [f.kind for f in frames] == [FrameKind.INITIAL, FrameKind.DELTA]
    assert frames[-1].resumed and [n.path for n in frames[-1].nodes] == ["acme/b"]
    await mesh.create(doc("acme/c"), access=ALICE)
    assert frames[-1].kind is FrameKind.DELTA
    assert [n.path for n in frames[-1].nodes] == ["acme/c"]


async def test_watch_reopens_with_a_reset_initial_when_the_store_cannot_resume() -> None:
    """Negative control of the resume: a deletion the store no longer remembers (it keeps
    none) means it cannot tell what was removed, so the re-open is the whole state again."""
    scheduler = TestScheduler()
    mesh, store = mesh_on(scheduler, InMemoryStore(tombstone_retention=0))
    await mesh.create(doc("acme/a"), access=ALICE)
    await mesh.create(doc("acme/b"), access=ALICE)
    frames: list[QueryFrame] = []
    mesh.watch(QUERY).subscribe(frames.append)
    store.sever_open_queries()
    await mesh.delete("acme/a", access=ALICE)
    scheduler.advance_by(2)
    assert [f.kind for f in frames] == [FrameKind.INITIAL, FrameKind.INITIAL]
    assert frames[-1].reset and [n.path for n in frames[-1].nodes] == ["acme/b"]


async def test_watch_opens_from_a_given_token() -> None:
    scheduler = TestScheduler()
    mesh, _ = mesh_on(scheduler)
    await mesh.create(doc("acme/a"), access=ALICE)
    first: list[QueryFrame] = []
    mesh.watch(QUERY).subscribe(first.append).dispose()
    mesh.queries.dispose()  # no shared chain stands at the token: the store answers
    mesh = Mesh(mesh.store, scheduler=scheduler, ledger=PendingWriteLedger(""), retry_delays=FAST)
    await mesh.create(doc("acme/b"), access=ALICE)
    frames: list[QueryFrame] = []
    mesh.watch(QUERY, first[-1].resume_token).subscribe(frames.append)
    assert frames[0].resumed and [n.path for n in frames[0].nodes] == ["acme/b"]


async def test_control_live_ends_at_the_same_fault() -> None:
    """Negative control: the cached live query alone ends with the transient fault."""
    scheduler = TestScheduler()
    mesh, store = mesh_on(scheduler)
    errors: list[Exception] = []
    mesh.live(QUERY).subscribe(on_error=errors.append)
    store.sever_open_queries()
    (error,) = errors
    assert isinstance(error, StoreError)


async def test_watch_ends_with_a_fault_that_is_not_transient() -> None:
    """Negative control of the classifier: a programming error is not re-opened."""
    scheduler = TestScheduler()
    mesh, store = mesh_on(scheduler)
    errors: list[Exception] = []
    mesh.watch(QUERY).subscribe(on_error=errors.append)
    store.sever_open_queries(lambda: TypeError("a defect"))
    scheduler.advance_by(60)
    (error,) = errors
    assert isinstance(error, TypeError)


async def test_watch_reads_with_async_for() -> None:
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await mesh.create(doc("acme/a"), access=ALICE)
    async with asyncio.timeout(5):
        async for frame in iterate(mesh.watch(QUERY)):
            assert [n.path for n in frame.nodes] == ["acme/a"]
            break
    mesh.dispose()
    with pytest.raises(Exception, match="disposed"):
        mesh.watch(QUERY)


@pytest.mark.postgres
async def test_watch_resumes_on_postgresql_after_a_transient_fault(
    pg_dsn: str, prefix: str
) -> None:
    """The same re-open against a real PostgreSQL store: the store answers what changed since
    the watch's last token, a deletion included, instead of the partition again."""
    from tests.providers.postgres.kinds import started

    async with started(pg_dsn, prefix) as postgres:
        store = FaultInjectingStore(postgres)
        scheduler = TestScheduler()  # the re-open waits for the test, not for a clock
        mesh = Mesh(store, scheduler=scheduler, ledger=PendingWriteLedger(""), retry_delays=FAST)
        for name in ("a", "b", "c"):
            await mesh.create(doc(f"acme/{name}"), access=ALICE)
        frames: list[QueryFrame] = []
        subscription = mesh.watch(QUERY).subscribe(frames.append)
        try:
            await until(lambda: len(frames) == 1)
            assert frames[0].kind is FrameKind.INITIAL and frames[0].resume_token is not None
            assert store.sever_open_queries() == 1
            await mesh.delete("acme/a", access=ALICE)  # while the watch waits to re-open
            await mesh.create(doc("acme/d"), access=ALICE)
            assert len(frames) == 1
            scheduler.advance_by(2)  # the first re-open waits 2 s
            await until(lambda: len(frames) >= 2)
            reopened = frames[1]
            assert reopened.kind is FrameKind.DELTA and reopened.resumed
            assert [n.path for n in reopened.nodes] == ["acme/d"]
            assert reopened.removed == ("acme/a",)
        finally:
            subscription.dispose()
            mesh.dispose()
