"""An Initial is checked for its order once, where it is made, and reaches its subscriber before
anyone indexes it (issue 16, item 3).

Every layer between a store's read and a ``mesh.live`` subscriber used to make its own pass over
the Initial's rows before handing it on: the store built its index by path and checked the
order, the fan-in checked the order of a lone provider's Initial again, and the cache's
snapshot built its own index by path. At 50k rows each pass costs about 5 ms. Now the store's
frame carries the checked order (:class:`PathOrdered`), the fan-in and the cache trust it, and
the indexes are built after the Initial is delivered (the cache's at the first delta).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

import rxmesh._util.path_order as path_order
from rxmesh._util.path_order import PathOrdered, is_path_ordered, path_ordered
from rxmesh.cache import QuerySnapshot, fold_query_frames
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.operators import fan_in
from tests.providers.postgres.kinds import started


def _nodes(*paths: str) -> list[MeshNode]:
    return [MeshNode(path=path, version=1) for path in paths]


def test_only_a_strictly_ordered_sequence_becomes_path_ordered() -> None:
    ordered = path_ordered(_nodes("p/a", "p/b", "p/c"))
    assert isinstance(ordered, PathOrdered) and [n.path for n in ordered] == ["p/a", "p/b", "p/c"]
    assert path_ordered(ordered) is ordered  # already checked: kept as is
    # The negative controls: out of order, and two nodes of one path.
    assert path_ordered(_nodes("p/b", "p/a")) is None
    assert path_ordered(_nodes("p/a", "p/a")) is None
    assert not is_path_ordered(_nodes("p/b", "p/a"))
    assert is_path_ordered(_nodes("p/a", "p/b"))


def test_a_path_ordered_frame_is_a_plain_frame_to_everyone_else() -> None:
    nodes = _nodes("p/a", "p/b")
    ordered = path_ordered(nodes)
    assert ordered is not None
    marked = QueryFrame.model_construct(kind=FrameKind.INITIAL, nodes=ordered)
    plain = QueryFrame(kind=FrameKind.INITIAL, nodes=tuple(nodes))
    assert marked == plain and marked.nodes == tuple(nodes)
    assert marked.model_dump() == plain.model_dump()
    assert marked.model_dump_json() == plain.model_dump_json()
    unpickled = pickle.loads(pickle.dumps(marked))
    assert unpickled == plain and type(unpickled.nodes) is tuple  # no private type on the wire
    assert type(ordered[1:]) is tuple  # a slice is not vouched for


@pytest.fixture
def order_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every order check made (one pass over that many nodes each)."""
    checks: list[int] = []
    check = path_order._strictly_ordered

    def counting(nodes: Any) -> bool:
        checks.append(len(nodes))
        return check(nodes)

    monkeypatch.setattr(path_order, "_strictly_ordered", counting)
    return checks


def _through_fan_in(frame: QueryFrame) -> QueryFrame:
    subject: Subject[QueryFrame] = Subject()
    got: list[QueryFrame] = []
    fan_in({"s": subject}, scheduler=TestScheduler()).subscribe(got.append)
    subject.on_next(frame)
    (merged,) = got
    return merged


def test_the_fan_in_trusts_a_checked_initial_and_checks_any_other(order_checks: list[int]) -> None:
    """Regression: before, the fan-in checked a lone provider's Initial although the store had
    just checked it (one more pass over every row)."""
    ordered = path_ordered(_nodes("p/a", "p/b", "p/c"))
    assert ordered is not None
    order_checks.clear()
    merged = _through_fan_in(QueryFrame.model_construct(kind=FrameKind.INITIAL, nodes=ordered))
    assert merged.nodes is ordered and order_checks == []
    # The negative control: an Initial nobody vouched for is checked (and forwarded: ordered).
    plain = QueryFrame(kind=FrameKind.INITIAL, nodes=tuple(_nodes("p/a", "p/b")))
    merged = _through_fan_in(plain)
    assert merged.nodes is plain.nodes and order_checks == [2]


def test_a_merged_initial_is_marked_as_ordered() -> None:
    subjects: list[Subject[QueryFrame]] = [Subject(), Subject()]
    got: list[QueryFrame] = []
    fan_in({"a": subjects[0], "b": subjects[1]}, scheduler=TestScheduler()).subscribe(got.append)
    subjects[0].on_next(QueryFrame.initial(_nodes("p/c", "p/a")))
    subjects[1].on_next(QueryFrame.initial(_nodes("p/b", "p/a")))
    (merged,) = got
    assert isinstance(merged.nodes, PathOrdered)
    assert [n.path for n in merged.nodes] == ["p/a", "p/b", "p/c"]


class _Counted(PathOrdered):
    """A checked Initial's nodes that count the passes made over them."""

    __slots__ = ()
    passes: ClassVar[list[int]] = []

    def __iter__(self) -> Iterator[MeshNode]:
        self.passes.append(len(self))
        return super().__iter__()


def test_the_cache_snapshot_indexes_an_initial_at_its_first_delta_not_before() -> None:
    """Regression: before, the snapshot built its index by path of the whole Initial before the
    cache handed the Initial to its subscribers (one pass of every row, even for a query that
    never changes)."""
    _Counted.passes = []
    initial = QueryFrame.model_construct(
        kind=FrameKind.INITIAL, nodes=_Counted(_nodes("p/a", "p/c"))
    )
    snapshot = QuerySnapshot(initial)
    assert snapshot.value() is initial and snapshot.size() == 2
    assert _Counted.passes == []  # the Initial replays as it came: nothing indexed
    snapshot.fold(QueryFrame.delta(_nodes("p/b"), removed=["p/a"]))
    assert _Counted.passes == [2]  # indexed once, at the first delta
    folded = snapshot.value()
    assert [n.path for n in folded.nodes] == ["p/b", "p/c"] and snapshot.size() == 2
    assert isinstance(folded.nodes, PathOrdered)
    snapshot.fold(QueryFrame.delta(_nodes("p/a")))
    assert [n.path for n in snapshot.value().nodes] == ["p/a", "p/b", "p/c"]
    assert _Counted.passes == [2]  # never again
    # The same answer as the reference fold, which re-sorts everything.
    reference = fold_query_frames(
        fold_query_frames(
            QueryFrame.initial(_nodes("p/a", "p/c")),
            QueryFrame.delta(_nodes("p/b"), removed=["p/a"]),
        ),
        QueryFrame.delta(_nodes("p/a")),
    )
    assert snapshot.value() == reference


def test_an_unchecked_initial_is_still_ordered_when_the_snapshot_materialises() -> None:
    """The negative control of the trust: an Initial with no mark is sorted at materialisation."""
    initial = QueryFrame(kind=FrameKind.INITIAL, nodes=tuple(_nodes("p/c", "p/a")))
    snapshot = QuerySnapshot(initial)
    snapshot.fold(QueryFrame.delta(_nodes("p/b")))
    assert [n.path for n in snapshot.value().nodes] == ["p/a", "p/b", "p/c"]


class _CountedRows(list[MeshNode]):
    """A store read's nodes that count the passes made over them."""

    passes: list[int]

    def __iter__(self) -> Iterator[MeshNode]:
        self.passes.append(len(self))
        return super().__iter__()


@pytest.mark.postgres
async def test_the_store_hands_on_its_initial_before_indexing_it(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: before, the store built its index by path of the rows it had read, then
    checked their order, then copied them into the frame (three passes) before its subscriber
    got the Initial; now two (the order check and the frame's tuple), and the index after."""
    async with started(pg_dsn, prefix) as store:
        for path in ("p/a", "p/b", "p/c"):
            await asyncio.wait_for(store.write(MeshNode(path=path, version=1)), 10)
        rows = _CountedRows()
        rows.passes = []
        select = store._select_at

        async def counted(query: NodeQuery) -> tuple[list[MeshNode], Any]:
            nodes, position = await select(query)
            rows[:] = nodes
            return rows, position

        monkeypatch.setattr(store, "_select_at", counted)
        frames: asyncio.Queue[QueryFrame] = asyncio.Queue()
        at_delivery: list[list[int]] = []

        def on_next(frame: QueryFrame) -> None:
            if frame.kind is FrameKind.INITIAL:
                at_delivery.append(list(rows.passes))
            frames.put_nowait(frame)

        subscription = store.query(NodeQuery(partition="p")).subscribe(on_next)
        try:
            async with asyncio.timeout(10):
                initial = await frames.get()
                assert [n.path for n in initial.nodes] == ["p/a", "p/b", "p/c"]
                assert isinstance(initial.nodes, PathOrdered)
                assert at_delivery == [[3, 3]]  # the order check, the frame's tuple
                # The index is still built, after: a change is applied against it (an equal
                # row is no change; a new one is).
                await asyncio.wait_for(store.write(MeshNode(path="p/d", version=1)), 10)
                delta = await frames.get()
            assert [n.path for n in delta.nodes] == ["p/d"]
            assert rows.passes == [3, 3, 3]  # and the index, once
        finally:
            subscription.dispose()
