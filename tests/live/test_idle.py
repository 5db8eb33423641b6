"""Idle costs nothing (issue 16, item 2): a released live query does no work per commit, a chain
waiting out its idle grace folds nothing, and disposing the mesh releases its cached chains.

Work is counted as calls into rxmesh's live-query code (``sys.setprofile``), never as seconds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from reactivex.testing import TestScheduler

from rxmesh import Mesh
from rxmesh.cache import DEFAULT_IDLE_GRACE
from rxmesh.model import MeshNode, NodeQuery
from rxmesh.providers import InMemoryStore
from tests.helpers import ROOT, done

PACKAGE = ROOT / "rxmesh"
LIVE_CODE = {
    str(PACKAGE / "cache" / "__init__.py"): None,
    str(PACKAGE / "cache" / "_snapshot.py"): None,
    str(PACKAGE / "operators" / "_fan_in.py"): None,
    str(PACKAGE / "providers" / "memory.py"): {"apply", "on_commit"},  # the query's own closures
}
QUERY = NodeQuery(partition="p")


class _Calls:
    def __init__(self) -> None:
        self.count = 0
        self.folds = 0

    def __call__(self, frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        names = LIVE_CODE.get(code.co_filename, False)
        if names is False or (names is not None and code.co_name not in names):
            return
        self.count += 1
        if code.co_name in ("fold", "fold_query_frames"):  # the new fold, and the old one
            self.folds += 1


@contextmanager
def _counting() -> Iterator[_Calls]:
    calls = _Calls()
    sys.setprofile(calls)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def _mesh() -> tuple[Mesh, InMemoryStore, TestScheduler]:
    store, scheduler = InMemoryStore(), TestScheduler()
    mesh = Mesh(
        store, scheduler=scheduler, record_pending_writes=False, recover_pending_writes=False
    )
    return mesh, store, scheduler


def _write(store: InMemoryStore, start: int, count: int) -> None:
    for i in range(start, start + count):
        done(store.write(MeshNode(path=f"p/n{i:04d}", version=1)))


def test_a_released_live_query_costs_no_call_per_commit() -> None:
    """Regression (issue 16): the old chain folded every commit for its whole idle grace."""
    mesh, store, scheduler = _mesh()
    frames: list[Any] = []
    subscription = mesh.live(QUERY).subscribe(frames.append)
    with _counting() as listening:
        _write(store, 0, 50)
    assert listening.count > 0 and len(frames) == 51  # the negative control: counting works

    subscription.dispose()
    with _counting() as in_grace:
        _write(store, 50, 50)
    assert in_grace.folds == 0  # waiting out the grace: frames queued, nothing folded
    assert mesh.queries.statistics().deferred == 50

    scheduler.advance_by(DEFAULT_IDLE_GRACE + 1)
    assert store.statistics().live_queries == 0  # the upstream went with the chain
    with _counting() as released:
        _write(store, 100, 50)
    assert released.count == 0


def test_a_subscriber_back_within_the_grace_gets_every_row_committed_meanwhile() -> None:
    """The negative control of folding nothing while idle: nothing is lost either."""
    mesh, store, _ = _mesh()
    mesh.live(QUERY).subscribe().dispose()
    _write(store, 0, 20)

    frames: list[Any] = []
    mesh.live(QUERY).subscribe(frames.append)

    (snapshot,) = frames
    assert [n.path for n in snapshot.nodes] == [f"p/n{i:04d}" for i in range(20)]
    assert mesh.queries.statistics().upstream_subscriptions == 1


def test_disposing_the_mesh_releases_its_cached_chains_and_their_upstreams() -> None:
    """Mesh.dispose() must call ``self.queries.dispose()`` (SyncedQueryCache.dispose)."""
    mesh, store, _ = _mesh()
    completed: list[bool] = []
    mesh.live(QUERY).subscribe(on_completed=lambda: completed.append(True))
    mesh.live(NodeQuery(partition="q")).subscribe().dispose()  # idle, waiting out its grace
    assert store.statistics().live_queries == 2

    mesh.dispose()

    assert store.statistics().live_queries == 0
    assert mesh.queries.statistics().entries == 0
    assert completed == [True]
