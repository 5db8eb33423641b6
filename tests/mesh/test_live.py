"""Live queries through the mesh: the fan-in's gate and the evicting shared cache."""

from __future__ import annotations

import asyncio

from reactivex.testing import TestScheduler

from rxmesh import Mesh
from rxmesh.exceptions import QueryProviderStalledError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import FrameKind, NodeQuery, QueryFrame
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, doc

from .conftest import make_mesh

QUERY = NodeQuery(partition="acme", node_type="Doc")


async def test_a_live_query_gives_an_initial_then_deltas_and_late_subscribers_a_snapshot() -> None:
    mesh, _ = make_mesh()
    await mesh.create(doc("acme/a"), access=ALICE)
    first: list[QueryFrame] = []
    subscription = mesh.live(QUERY).subscribe(first.append)
    await mesh.create(doc("acme/b"), access=ALICE)
    assert [f.kind for f in first] == [FrameKind.INITIAL, FrameKind.DELTA]
    late: list[QueryFrame] = []
    mesh.live(QUERY).subscribe(late.append)
    assert late[0].kind is FrameKind.INITIAL
    assert [n.path for n in late[0].nodes] == ["acme/a", "acme/b"]
    assert mesh.queries.statistics().upstream_subscriptions == 1
    subscription.dispose()


async def test_a_stalled_store_faults_the_query_naming_it_after_the_budget() -> None:
    scheduler = TestScheduler()
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, scheduler=scheduler, ledger=PendingWriteLedger(""), initial_budget=15.0)
    store.stall_initial()
    errors: list[Exception] = []
    mesh.query(QUERY).subscribe(on_error=errors.append)
    scheduler.advance_to(14.9)
    assert errors == []
    scheduler.advance_to(15.0)
    (error,) = errors
    assert isinstance(error, QueryProviderStalledError)
    assert error.providers == ("memory",)
    await asyncio.sleep(0)


async def test_control_a_store_answering_inside_the_budget_does_not_fault() -> None:
    scheduler = TestScheduler()
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, scheduler=scheduler, ledger=PendingWriteLedger(""), initial_budget=15.0)
    store.stall_initial()
    frames: list[QueryFrame] = []
    errors: list[Exception] = []
    mesh.query(QUERY).subscribe(frames.append, errors.append)
    scheduler.advance_to(10.0)
    store.release_initial()
    scheduler.advance_to(60.0)
    assert errors == []
    assert [f.kind for f in frames] == [FrameKind.INITIAL]
