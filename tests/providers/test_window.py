"""Ordered windows (``NodeQuery(order_by=..., limit=...)``) on the embedded store and on real
PostgreSQL: the live view is always the store's first page, a member that leaves is replaced by
one refill read, and each store's ``page`` verb reads in the window order.

The refills are counted through :class:`Recording`, a wrapper that logs every ``page`` call of
the window maintainer (:func:`rxmesh.providers._window.windowed`) it is handed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from reactivex import Observable

from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers import Store
from rxmesh.providers._window import windowed
from tests.helpers import until
from tests.providers.conftest import STORE_KINDS


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A fresh store: the embedded one, and PostgreSQL (real, through ``RXMESH_TEST_DSN``)."""
    async with STORE_KINDS[request.param](request) as instance:
        yield instance


class Recording:
    """``store`` as the window maintainer sees it, with every ``page`` call logged."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pages: list[tuple[str | None, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def page(self, query: NodeQuery, after: MeshNode | None, limit: int) -> list[MeshNode]:
        self.pages.append((None if after is None else after.path, limit))
        return await self.store.page(query, after, limit)


class View:
    """The frames of one window subscription, folded: the members by path."""

    def __init__(self, source: Observable[QueryFrame]) -> None:
        self.frames: list[QueryFrame] = []
        self.errors: list[Exception] = []
        self.members: dict[str, MeshNode] = {}
        self._subscription = source.subscribe(self._on_frame, self.errors.append)

    def _on_frame(self, frame: QueryFrame) -> None:
        self.frames.append(frame)
        if frame.kind is FrameKind.INITIAL:
            self.members = {node.path: node for node in frame.nodes}
            return
        for path in frame.removed:
            self.members.pop(path, None)
        for node in frame.nodes:
            self.members[node.path] = node

    def paths(self, query: NodeQuery) -> list[str]:
        return [n.path for n in sorted(self.members.values(), key=query.sort_key)]

    async def becomes(self, query: NodeQuery, paths: Sequence[str]) -> None:
        def holds() -> bool:
            assert not self.errors, self.errors
            return bool(self.frames) and self.paths(query) == list(paths)

        try:
            await until(holds, within=5.0)
        except TimeoutError:
            raise AssertionError(f"the window is {self.paths(query)}, not {list(paths)}") from None

    def dispose(self) -> None:
        self._subscription.dispose()


async def _scores(store: Store, partition: str, scores: dict[str, object]) -> None:
    for name, score in scores.items():
        await store.write(MeshNode(path=f"{partition}/{name}", content={"score": score}))


async def test_page_reads_in_window_order_after_a_node(store: Store, partition: str) -> None:
    await _scores(store, partition, {"a": 3, "b": 1, "c": 2, "d": 2, "e": "x", "f": None})
    query = NodeQuery(partition=partition, order_by=("score",), limit=10)
    first = await store.page(query, None, 10)
    assert [n.path[-1] for n in first] == ["f", "b", "c", "d", "a", "e"]  # ties (c, d) by path
    after_c = await store.page(query, first[2], 2)
    assert [n.path[-1] for n in after_c] == ["d", "a"]
    down = NodeQuery(partition=partition, order_by=("-score",), limit=3)
    assert [n.path[-1] for n in await store.page(down, None, 3)] == ["e", "a", "c"]
    with pytest.raises(ValueError, match="at least 1"):
        await store.page(query, None, 0)


async def test_page_evaluates_the_filter_and_spans_partitions(
    store: Store, partition: str, other_partition: str
) -> None:
    await _scores(store, partition, {"a": 5, "b": 1, "c": 9})
    await _scores(store, other_partition, {"a": 2, "b": 7})
    everywhere = NodeQuery(order_by=("-score",), where=field("score").gt(1), limit=3)
    got = await store.page(everywhere, None, 3)
    assert [n.path for n in got] == [f"{partition}/c", f"{other_partition}/b", f"{partition}/a"]


async def test_initial_is_the_first_page_in_window_order(store: Store, partition: str) -> None:
    await _scores(store, partition, {"a": 3, "b": 1, "c": 2, "d": 2, "e": 0})
    query = NodeQuery(partition=partition, order_by=("-score",), limit=3)
    view = View(store.query(query))
    try:
        await until(lambda: bool(view.frames))
        initial = view.frames[0]
        assert initial.kind is FrameKind.INITIAL
        # in the window's order (not by path): ties broken by path
        assert [n.path[-1] for n in initial.nodes] == ["a", "c", "d"]
    finally:
        view.dispose()


async def test_creates_updates_deletes_and_moves(store: Store, partition: str) -> None:
    await _scores(store, partition, {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50})
    query = NodeQuery(partition=partition, order_by=("score",), limit=3)
    p = partition
    view = View(store.query(query))
    try:
        await view.becomes(query, [f"{p}/a", f"{p}/b", f"{p}/c"])
        await store.write(MeshNode(path=f"{p}/f", content={"score": 15}))  # enters, c leaves
        await view.becomes(query, [f"{p}/a", f"{p}/f", f"{p}/b"])
        assert view.frames[-1].removed == (f"{p}/c",)
        await store.update(MeshNode(path=f"{p}/a", content={"score": 45}))  # past the boundary
        await view.becomes(query, [f"{p}/f", f"{p}/b", f"{p}/c"])
        await store.delete(f"{p}/f")
        await view.becomes(query, [f"{p}/b", f"{p}/c", f"{p}/d"])
        await store.move(f"{p}/b", f"{p}/zz")  # same content, new path: still inside
        await view.becomes(query, [f"{p}/zz", f"{p}/c", f"{p}/d"])
        await store.update(MeshNode(path=f"{p}/d", content={"score": 30}))  # ties c: by path
        await view.becomes(query, [f"{p}/zz", f"{p}/c", f"{p}/d"])
        await store.update(MeshNode(path=f"{p}/c", content={"score": 5}))  # moves inside
        await view.becomes(query, [f"{p}/c", f"{p}/zz", f"{p}/d"])
        assert not view.errors
    finally:
        view.dispose()


async def test_a_member_leaving_brings_exactly_the_next_by_one_refill(
    store: Store, partition: str
) -> None:
    await _scores(store, partition, {f"n{i}": i for i in range(8)})
    query = NodeQuery(partition=partition, order_by=("score",), limit=3)
    recording = Recording(store)
    p = partition
    view = View(windowed(recording, query))  # type: ignore[arg-type]
    try:
        await view.becomes(query, [f"{p}/n0", f"{p}/n1", f"{p}/n2"])
        assert recording.pages == [(None, 3)]  # the Initial: one page
        await store.write(MeshNode(path=f"{p}/late", content={"score": 100}))  # sorts outside
        await store.delete(f"{p}/n1")
        await view.becomes(query, [f"{p}/n0", f"{p}/n2", f"{p}/n3"])
        # one refill, after the last member, for the one missing
        assert recording.pages == [(None, 3), (f"{p}/n2", 1)]
        assert all(f"{p}/late" not in [n.path for n in f.nodes] for f in view.frames)
        assert view.frames[-1].removed == (f"{p}/n1",)
        assert [n.path for n in view.frames[-1].nodes] == [f"{p}/n3"]
    finally:
        view.dispose()


async def test_negative_control_a_window_without_refills_misses_the_next(
    store: Store, partition: str
) -> None:
    """The refill is what brings the next member: a store whose page answers nothing after the
    Initial leaves the window short, and the test above would see it."""
    await _scores(store, partition, {f"n{i}": i for i in range(5)})
    query = NodeQuery(partition=partition, order_by=("score",), limit=3)
    recording = Recording(store)

    async def no_refill(q: NodeQuery, after: MeshNode | None, limit: int) -> list[MeshNode]:
        recording.pages.append((None if after is None else after.path, limit))
        return [] if after is not None else await store.page(q, after, limit)

    recording.page = no_refill  # type: ignore[method-assign]
    p = partition
    view = View(windowed(recording, query))  # type: ignore[arg-type]
    try:
        await view.becomes(query, [f"{p}/n0", f"{p}/n1", f"{p}/n2"])
        await store.delete(f"{p}/n1")
        with pytest.raises(AssertionError, match="not"):
            await view.becomes(query, [f"{p}/n0", f"{p}/n2", f"{p}/n3"])
        assert view.paths(query) == [f"{p}/n0", f"{p}/n2"]
    finally:
        view.dispose()


async def test_a_node_that_stops_matching_the_filter_leaves(store: Store, partition: str) -> None:
    for i in range(5):
        await store.write(MeshNode(path=f"{partition}/n{i}", content={"score": i, "open": True}))
    query = NodeQuery(
        partition=partition, order_by=("-score",), limit=2, where=field("open").eq(True)
    )
    p = partition
    view = View(store.query(query))
    try:
        await view.becomes(query, [f"{p}/n4", f"{p}/n3"])
        await store.update(MeshNode(path=f"{p}/n4", content={"score": 4, "open": False}))
        await view.becomes(query, [f"{p}/n3", f"{p}/n2"])
        await store.update(MeshNode(path=f"{p}/n4", content={"score": 4, "open": True}))
        await view.becomes(query, [f"{p}/n4", f"{p}/n3"])
    finally:
        view.dispose()


async def test_a_short_window_takes_every_match_and_limit_alone_orders_by_path(
    store: Store, partition: str
) -> None:
    query = NodeQuery(partition=partition, limit=3)
    p = partition
    view = View(store.query(query))
    try:
        await view.becomes(query, [])
        for name in ("m", "b", "z", "a"):
            await store.write(MeshNode(path=f"{p}/{name}", content={}))
        await view.becomes(query, [f"{p}/a", f"{p}/b", f"{p}/m"])
        await store.delete(f"{p}/a")
        await view.becomes(query, [f"{p}/b", f"{p}/m", f"{p}/z"])
    finally:
        view.dispose()


async def test_order_by_without_limit_holds_every_match(store: Store, partition: str) -> None:
    await _scores(store, partition, {f"n{i:02}": -i for i in range(30)})
    query = NodeQuery(partition=partition, order_by=("score",))
    view = View(store.query(query))
    try:
        expected = [f"{partition}/n{i:02}" for i in reversed(range(30))]
        await view.becomes(query, expected)
        assert [n.path for n in view.frames[0].nodes] == expected
    finally:
        view.dispose()


async def test_a_gap_reads_the_page_again(partition: str) -> None:
    from rxmesh.providers import InMemoryStore

    store = InMemoryStore()
    await _scores(store, partition, {"a": 1, "b": 2, "c": 3})
    query = NodeQuery(partition=partition, order_by=("score",), limit=2)
    recording = Recording(store)
    view = View(windowed(recording, query))  # type: ignore[arg-type]
    try:
        await view.becomes(query, [f"{partition}/a", f"{partition}/b"])
        store.declare_gap("test")
        await until(lambda: len(recording.pages) == 2)
        assert recording.pages[-1] == (None, 2)
        assert len(view.frames) == 1  # nothing changed: no Delta
    finally:
        view.dispose()


async def test_a_refill_that_fails_ends_the_window_with_its_error(partition: str) -> None:
    from rxmesh.faults import is_transient_connect_fault
    from rxmesh.providers import InMemoryStore
    from rxmesh.testing import FaultInjectingStore

    inner = InMemoryStore()
    await _scores(inner, partition, {"a": 1, "b": 2, "c": 3})
    store = FaultInjectingStore(inner)
    query = NodeQuery(partition=partition, order_by=("score",), limit=2)
    view = View(windowed(store, query))
    try:
        await view.becomes(query, [f"{partition}/a", f"{partition}/b"])
        store.refuse_reads_as_unreachable()
        await inner.delete(f"{partition}/a")  # a member leaves: its refill is refused
        await until(lambda: bool(view.errors))
        assert is_transient_connect_fault(view.errors[0])
        assert [op.outcome for op in store.operations if op.op == "page"] == [
            "forwarded",
            "refused",
        ]
    finally:
        view.dispose()


def test_a_change_a_member_already_reflects_is_not_reported_again() -> None:
    """A change committed while a page was read arrives after it: the member read by the page
    is already that row (or a later one), so nothing is emitted and nothing goes back."""
    from rxmesh.model import NodeChange
    from rxmesh.providers._window import Window

    query = NodeQuery(partition="p", order_by=("score",), limit=2)
    window = Window(query, 2)
    newer = MeshNode(path="p/a", content={"score": 2}, version=3)
    window.reset([newer])
    assert window.initial("memory").nodes == (newer,)
    same = NodeChange(source="memory", op="upsert", path="p/a", version=3, node=newer.model_copy())
    older = MeshNode(path="p/a", content={"score": 1}, version=2)
    window.apply(same)
    window.apply(NodeChange(source="memory", op="upsert", path="p/a", version=2, node=older))
    assert window.take("memory") is None
    assert window.nodes() == [newer]
    # negative control: a later version is a change
    later = MeshNode(path="p/a", content={"score": 5}, version=4)
    window.apply(NodeChange(source="memory", op="upsert", path="p/a", version=4, node=later))
    frame = window.take("memory")
    assert frame is not None and frame.nodes == (later,)


async def test_a_resumed_window_answers_with_a_full_initial_marked_reset(
    store: Store, partition: str
) -> None:
    await _scores(store, partition, {"a": 1, "b": 2, "c": 3})
    query = NodeQuery(partition=partition, order_by=("score",), limit=2)
    resumed = View(store.query(query, resume_from="a-token"))
    fresh = View(store.query(query))
    try:
        await until(lambda: bool(resumed.frames and fresh.frames))
        assert resumed.frames[0].kind is FrameKind.INITIAL and resumed.frames[0].reset
        assert [n.path for n in resumed.frames[0].nodes] == [f"{partition}/a", f"{partition}/b"]
        assert not fresh.frames[0].reset  # negative control: no resume, no reset
    finally:
        resumed.dispose()
        fresh.dispose()


def test_a_gap_page_reports_only_what_differs() -> None:
    """After a gap the first page is read again: rows equal to the members (new objects, as a
    database returns) are no change; a changed row and a row gone are."""
    from rxmesh.providers._window import Window

    query = NodeQuery(partition="p", order_by=("score",), limit=3)
    window = Window(query, 3)
    rows = [MeshNode(path=f"p/{n}", content={"score": i}, version=1) for i, n in enumerate("abc")]
    window.reset(rows)
    window.initial("pg")
    again = [node.model_copy(deep=True) for node in rows]
    window.reset(again)
    assert window.take("pg") is None
    changed = MeshNode(path="p/b", content={"score": 1, "x": 1}, version=2)
    later = MeshNode(path="p/d", content={"score": 9}, version=1)
    window.reset([again[0], changed, later])  # c is gone, d is the third now
    frame = window.take("pg")
    assert frame is not None
    assert [n.path for n in frame.nodes] == ["p/b", "p/d"] and frame.removed == ("p/c",)
