"""``rxmesh.aio.iterate``: an observable under ``async for``.

Errors raise at the ``async for``; leaving the loop or cancelling the task disposes the
subscription (asserted on the source's own subscriber count); a slow consumer never grows memory
without bound: query frames coalesce into the latest state, other items overflow loudly.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh import Mesh, MeshNode
from rxmesh.aio import DEFAULT_MAX_PENDING, iterate
from rxmesh.cache import fold_query_frames
from rxmesh.exceptions import SlowConsumerError
from rxmesh.model import FrameKind, NodeQuery, QueryFrame
from tests.helpers import ALICE


class Tracked:
    """A hot source that counts subscriptions and disposals; ``replay`` is delivered first, at
    subscribe (as the cache replays its latest frame)."""

    def __init__(self, *replay: object) -> None:
        self.subject: Subject[object] = Subject()
        self.subscribed = 0
        self.disposed = 0

        def subscribe(
            observer: abc.ObserverBase[object], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            self.subscribed += 1
            for item in replay:
                observer.on_next(item)
            inner = self.subject.subscribe(observer)

            def dispose() -> None:
                self.disposed += 1
                inner.dispose()

            return Disposable(dispose)

        self.observable: Observable[object] = Observable(subscribe)


def node(path: str, version: int = 1) -> MeshNode:
    return MeshNode(path=path, node_type="Order", content={"v": version})


async def test_items_then_the_end() -> None:
    async with asyncio.timeout(5):
        assert [item async for item in iterate(reactivex.of(1, 2, 3))] == [1, 2, 3]


async def test_an_error_raises_at_the_async_for_after_the_items_before_it() -> None:
    fault = ConnectionResetError(104, "reset")
    seen: list[object] = []
    with pytest.raises(ConnectionResetError) as raised:
        async with asyncio.timeout(5):
            async for item in iterate(reactivex.concat(reactivex.of("a"), reactivex.throw(fault))):
                seen.append(item)
    assert raised.value is fault
    assert seen == ["a"]


async def test_leaving_the_loop_disposes_the_subscription() -> None:
    source = Tracked("first")
    async with asyncio.timeout(5):
        async for item in iterate(source.observable):
            assert (source.subscribed, source.disposed) == (1, 0)  # negative control: live
            assert item == "first"
            break
        else:  # pragma: no cover - the loop must see the item
            raise AssertionError("no item")
    assert source.disposed == 1  # at once, no loop turn needed
    assert source.subject.observers == []


async def test_nothing_is_subscribed_before_the_first_step() -> None:
    source = Tracked()
    iterator = iterate(source.observable)
    assert source.subscribed == 0
    source.subject.on_next("first")  # lost: nobody subscribed yet (a hot source)
    step = asyncio.ensure_future(anext(iterator))
    await asyncio.sleep(0)
    source.subject.on_next("second")
    async with asyncio.timeout(5):
        assert await step == "second"
    await iterator.aclose()
    assert source.disposed == 1


async def test_cancelling_the_task_disposes_the_subscription() -> None:
    source = Tracked()
    seen: list[object] = []

    async def watch() -> None:
        async for item in iterate(source.observable):
            seen.append(item)

    task = asyncio.ensure_future(watch())
    await asyncio.sleep(0)
    source.subject.on_next("a")
    await asyncio.sleep(0)
    assert (seen, source.disposed) == (["a"], 0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert source.disposed == 1
    assert source.subject.observers == []


async def test_async_with_and_aclose_dispose_and_end_the_loop() -> None:
    source = Tracked()
    async with iterate(source.observable) as frames:
        step = asyncio.ensure_future(anext(frames))
        await asyncio.sleep(0)
        source.subject.on_next(1)
        async with asyncio.timeout(5):
            assert await step == 1
    assert source.disposed == 1
    with pytest.raises(StopAsyncIteration):
        await anext(frames)
    assert source.subscribed == 1  # a closed iterator never subscribes again


async def test_waiting_query_frames_coalesce_into_the_latest_state() -> None:
    initial = QueryFrame.initial([node("shop/a"), node("shop/b")])
    source = Tracked(initial)
    frames = iterate(source.observable)
    async with asyncio.timeout(5):
        assert await anext(frames) == initial
    deltas = [QueryFrame.delta([node("shop/a", v)]) for v in range(2, 10_002)]
    deltas.append(QueryFrame.delta(removed=["shop/b"]))
    for delta in deltas:  # the consumer is busy: nothing is taken meanwhile
        source.subject.on_next(delta)
        assert frames.pending <= 1  # one waiting frame, never 10,000
    async with asyncio.timeout(5):
        merged = await anext(frames)
    assert merged.kind is FrameKind.DELTA
    assert merged.nodes == (node("shop/a", 10_001),)
    assert merged.removed == ("shop/b",)
    await frames.aclose()


async def test_a_waiting_initial_folds_the_deltas_as_the_cache_does() -> None:
    source = Tracked(QueryFrame.initial([]))
    frames = iterate(source.observable)
    initial = QueryFrame.initial([node("shop/a"), node("shop/b")])
    later = [
        QueryFrame.delta([node("shop/c")], removed=["shop/a"]),
        QueryFrame.delta([node("shop/a", 2)]),
        QueryFrame.delta(removed=["shop/b"]),
    ]
    async with asyncio.timeout(5):
        await anext(frames)  # the replayed empty Initial; then the consumer is busy
    for frame in (initial, *later):
        source.subject.on_next(frame)
    expected = initial
    for frame in later:
        expected = fold_query_frames(expected, frame)
    async with asyncio.timeout(5):
        assert await anext(frames) == expected
    await frames.aclose()


async def test_a_new_initial_supersedes_the_waiting_frames() -> None:
    source = Tracked(QueryFrame.initial([]))
    frames = iterate(source.observable)
    async with asyncio.timeout(5):
        await anext(frames)
    source.subject.on_next(QueryFrame.initial([node("shop/a")]))
    source.subject.on_next(QueryFrame.delta([node("shop/b")]))
    source.subject.on_next(QueryFrame.delta(removed=["shop/a"]))
    fresh = QueryFrame.initial([node("shop/z")], provider="memory")
    source.subject.on_next(fresh)
    async with asyncio.timeout(5):
        assert await anext(frames) == fresh
    await frames.aclose()


async def test_a_readded_path_is_an_upsert_not_a_removal() -> None:
    source = Tracked(QueryFrame.initial([]))
    frames = iterate(source.observable)
    async with asyncio.timeout(5):
        await anext(frames)
    source.subject.on_next(QueryFrame.delta(removed=["shop/a"]))
    source.subject.on_next(QueryFrame.delta([node("shop/a", 3)]))
    async with asyncio.timeout(5):
        merged = await anext(frames)
    assert (merged.nodes, merged.removed) == ((node("shop/a", 3),), ())
    await frames.aclose()


async def test_other_items_overflow_loudly_after_the_waiting_ones() -> None:
    # The negative control of coalescing: items that are not frames are never merged.
    source = Tracked(0)
    frames = iterate(source.observable, max_pending=3)
    async with asyncio.timeout(5):
        got: list[object] = [await anext(frames)]
    for item in range(1, 6):
        source.subject.on_next(item)
    assert frames.pending == 3
    assert source.disposed == 1  # disposed at the overflow, before the consumer catches up
    with pytest.raises(SlowConsumerError, match="3 items behind"):
        async with asyncio.timeout(5):
            async for item in frames:
                got.append(item)
    assert got == [0, 1, 2, 3]


async def test_items_from_another_thread_are_delivered_on_the_loop() -> None:
    source = Tracked()
    frames = iterate(source.observable)
    step = asyncio.ensure_future(anext(frames))
    await asyncio.sleep(0)
    pusher = threading.Thread(target=source.subject.on_next, args=("from a thread",))
    pusher.start()
    pusher.join(5)
    assert frames.pending == 0  # not pushed from the other thread: handed to the loop
    async with asyncio.timeout(5):
        assert await step == "from a thread"
    await frames.aclose()


async def test_a_live_query_of_the_mesh_under_async_for() -> None:
    mesh = Mesh()
    await mesh.create(MeshNode(path="shop/orders/1", node_type="Order", content={}), access=ALICE)
    orders = NodeQuery(partition="shop", node_type="Order")
    seen: list[tuple[str, list[str]]] = []
    async with asyncio.timeout(5):
        async for frame in iterate(mesh.live(orders)):
            seen.append((frame.kind.value, [n.path for n in frame.nodes]))
            if len(seen) == 1:
                await mesh.create(
                    MeshNode(path="shop/orders/2", node_type="Order", content={}), access=ALICE
                )
            else:
                break
    assert seen == [("INITIAL", ["shop/orders/1"]), ("DELTA", ["shop/orders/2"])]
    assert mesh.queries.statistics().subscribers == 0  # leaving the loop unsubscribed
    mesh.dispose()


@pytest.mark.parametrize(
    ("source", "max_pending", "error"),
    [
        (reactivex.of(1), 0, ValueError),
        (reactivex.of(1), True, TypeError),
        ([1, 2], DEFAULT_MAX_PENDING, TypeError),
    ],
)
def test_bad_arguments_are_refused(
    source: object, max_pending: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        iterate(source, max_pending=max_pending)  # type: ignore[arg-type]


async def _waiting(source: Tracked, frames: object) -> asyncio.Future[object]:
    """A task stepping ``frames``, once it waits on the channel (it subscribes in that step)."""
    step = asyncio.ensure_future(anext(frames))  # type: ignore[call-overload]
    await asyncio.sleep(0)
    assert source.subscribed == 1
    return step


async def test_a_second_task_stepping_one_iterator_is_refused_and_the_first_is_served() -> None:
    """Fails at 1d389e8 because the second step replaced the first one's wake-up: the refusal
    never came (the bound ran out instead) and the first task waited forever while its item sat
    undelivered."""
    source = Tracked()
    frames = iterate(source.observable)
    first = await _waiting(source, frames)

    with pytest.raises(RuntimeError, match="already running: another task is awaiting"):
        async with asyncio.timeout(1):
            await anext(frames)
    source.subject.on_next("a")
    source.subject.on_next("b")

    async with asyncio.timeout(5):
        assert await first == "a"
        assert await anext(frames) == "b"  # the refusal left the iterator as it was
    assert (source.subscribed, source.disposed) == (1, 0)
    await frames.aclose()
    assert source.disposed == 1


async def test_negative_control_two_tasks_stepping_in_turn_are_both_served() -> None:
    source = Tracked()
    frames = iterate(source.observable)
    seen: dict[str, object] = {}

    async def take(name: str) -> None:
        seen[name] = await anext(frames)

    first = await _waiting(source, frames)
    source.subject.on_next("a")
    async with asyncio.timeout(5):
        assert await first == "a"
        second = asyncio.ensure_future(take("second"))
        await asyncio.sleep(0)
        source.subject.on_next("b")
        await second
    assert seen == {"second": "b"}
    assert (source.subscribed, source.disposed) == (1, 0)
