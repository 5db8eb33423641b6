"""The live-query state machine: random writes through filtered views that disconnect, resume,
lose their change feed and are severed; after every step each open view, once quiesced, must
equal a fresh query of its store.

A view is what a subscriber holds: the Initial with every Delta folded into it, or, after a
resume, the view held at the disconnect with the resumed Delta applied (an Initial marked
``reset`` replaces it). Quiescing never sleeps: the step writes the view's marker (a node its
filter matches, at a path no other rule touches) with a new counter and waits, bounded, until
the view holds that counter. Every store here delivers a query's frames in commit order, so
once the marker is in, every earlier commit is too.

The machine runs on a loop of its own; its store comes from a class attribute (a factory of a
fresh store per example, or one shared store and a fresh partition per example).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from reactivex.abc import DisposableBase

from rxmesh.aio import first_value
from rxmesh.exceptions import StoreConflictError
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame, and_, not_, or_
from rxmesh.model import field as content_field
from rxmesh.testing import FaultInjectingStore
from tests.helpers import fold, machine_settings

WAIT = 10.0
"""Seconds a step waits for its marker or a fresh query before failing (never a sleep)."""

SLOTS = tuple(f"x{i}" for i in range(6))
STATUSES = ("open", "shut", "held")
CONTENTS = (
    *({"status": s, "n": n} for s, n in itertools.product(STATUSES, (0, 3, 5, 8))),
    {"n": 5},
    {"status": "open"},
)
"""Content values small enough that updates keep moving nodes in and out of every filter."""

FILTERS = (
    None,
    content_field("status").eq("open"),
    content_field("n").ge(5),
    and_(content_field("status").in_(["open", "held"]), content_field("n").lt(7)),
    or_(content_field("status").eq("shut"), content_field("n").eq(0)),
    not_(content_field("status").eq("open")),
)


WINDOWS: tuple[tuple[tuple[str, ...], int] | None, ...] = (
    None,
    (("-o", "n"), 2),
    (("-o", "-n", "status"), 3),
    (("-o",), 1),
)
"""Ordered windows (``order_by``, ``limit``), or none. Every order starts with ``-o``, a field
only a window's marker carries: descending, the absent field sorts last, so the marker sorts
first and enters the window whatever the nodes; the rest of the order is the nodes'."""


def marker_content(where: Any, count: int, *, window: bool = False) -> dict[str, Any]:
    """Content ``where`` matches, carrying ``count`` in fields no filter reads (``o`` too, for a
    window's marker: first in its order)."""
    for base in CONTENTS:
        if where is None or where.matches(base):
            return {**base, "m": count, **({"o": count} if window else {})}
    raise AssertionError(f"no content of the machine matches {where!r}")


Op = tuple[str, str, str, int]
"""A write: verb, slot, target slot (a move's), content index."""
OP = st.tuples(
    st.sampled_from(("create", "create", "update", "update", "delete", "move")),
    st.sampled_from(SLOTS),
    st.sampled_from(SLOTS),
    st.integers(0, 99),
)
OPS = st.lists(OP, max_size=3)

Fold = Callable[[dict[str, MeshNode], QueryFrame], None]


def shown(view: dict[str, MeshNode]) -> dict[str, tuple[Any, ...]]:
    return {p: (n.node_type, n.version, n.content, n.request_id) for p, n in sorted(view.items())}


@dataclass
class View:
    """One subscriber's view of one query: what it folded, its last token, its subscription."""

    query: NodeQuery
    marker: str
    nodes: dict[str, MeshNode] = field(default_factory=dict)
    token: str | None = None
    subscription: DisposableBase | None = None
    error: BaseException | None = None
    frames: int = 0
    log: list[str] = field(default_factory=list)
    """What the view was given, one line a frame (shown when it fails)."""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def connected(self) -> bool:
        return self.subscription is not None

    @property
    def window(self) -> bool:
        return self.query.limit is not None or bool(self.query.order_by)


class LiveMachine(RuleBasedStateMachine):
    """Creates, updates, deletes and moves in one partition; up to three views over the
    filters of :data:`FILTERS`; disconnects, resumes, a lost feed declared as a gap, severed
    queries and (on PostgreSQL) a terminated listener."""

    opened: ClassVar[Callable[[], Awaitable[tuple[FaultInjectingStore, str]]]]
    """A store for this example and the partition it writes in."""
    closed: ClassVar[Callable[[FaultInjectingStore], Awaitable[None]]]
    loop: ClassVar[asyncio.AbstractEventLoop]
    cut_listener: ClassVar[Callable[[FaultInjectingStore], Awaitable[None]] | None] = None
    folding: ClassVar[Fold] = staticmethod(fold)
    resumes_fold: ClassVar[bool] = True  # False: a resumed Delta is ignored (a mutant)
    windows: ClassVar[bool] = True
    """Whether views may be ordered windows (a mutant that breaks a window's quiescence would
    be caught only by the bounded wait, in seconds: its control runs without)."""
    cuts_windows: ClassVar[bool] = True
    """Whether the listener may be cut while a window is open (see test_resume_machine)."""
    drops_feed: ClassVar[bool] = True
    """Whether the fault injector may drop the feed and declare a gap. Its re-read after the gap
    is a query of its own whose difference is delivered whenever it completes, unordered with
    the deltas after it: over a store whose query does IO, a later delta (the marker) can arrive
    first and the difference, from an older snapshot, then takes it back out. So on PostgreSQL
    the feed is only held, and the gap is the store's own (the listener cut). A window's frames
    come on the running loop on either store: while one is open, the feed is only held."""
    seen: ClassVar[Counter[str]]
    """What the run exercised (resumed deltas, resets, severed views...): the tests read it to
    show the search was not vacuous."""

    def __init__(self) -> None:
        super().__init__()
        self.store, self.partition = self.run(type(self).opened())
        self.views: list[View] = []
        self.count = itertools.count(1)
        self.present: set[str] = set()
        self.failed = False
        self.trail: list[str] = []
        """The steps and marker writes of this example, in order (shown when it fails)."""

    def run(self, work: Awaitable[Any]) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(4 * WAIT):
                return await work

        return self.loop.run_until_complete(bounded())

    def path(self, slot: str) -> str:
        return f"{self.partition}/{slot}"

    # -- the views --

    def subscribe(self, view: View, resume_from: str | None) -> None:
        first = [True]
        if view.frames:
            self.seen["reopened"] += 1
        fold_with = type(self).folding

        def on_next(frame: QueryFrame) -> None:
            if first[0] and resume_from is not None:
                self.seen["resumed" if frame.kind is FrameKind.DELTA else "reset"] += 1
                if frame.kind is FrameKind.DELTA:
                    assert frame.resumed, f"the first frame of a resume is {frame!r}"
                    if self.resumes_fold:
                        fold_with(view.nodes, frame)
                else:
                    assert frame.reset, f"a resume's Initial is not marked reset: {frame!r}"
                    fold_with(view.nodes, frame)
            else:
                fold_with(view.nodes, frame)
            first[0] = False
            view.log.append(
                f"{frame.kind.value}{' resumed' if frame.resumed else ''}"
                f"{' reset' if frame.reset else ''} +{[n.path for n in frame.nodes]}"
                f" -{list(frame.removed)}"
            )
            view.token = frame.resume_token or view.token
            view.frames += 1
            view.arrived.set()

        def on_error(exc: Exception) -> None:
            view.error = exc
            view.subscription = None
            view.arrived.set()

        async def subscribed() -> DisposableBase:  # on the loop: a store's query may need it
            return self.store.query(view.query, resume_from).subscribe(on_next, on_error)

        view.error = None
        view.subscription = self.run(subscribed())

    async def until(self, view: View, holds: Callable[[], bool]) -> None:
        try:
            async with asyncio.timeout(WAIT):
                while not holds():
                    if view.error is not None:
                        raise AssertionError(f"the view's query failed: {view.error!r}")
                    view.arrived.clear()
                    await view.arrived.wait()
        except TimeoutError:
            raise AssertionError(
                f"{view.query!r} never quiesced within {WAIT} s; its frames: {view.log};"
                f" the steps: {self.trail}"
            ) from None

    async def quiesce(self, view: View) -> None:
        """Write the view's marker and wait until the view holds it; a window's marker (first
        in its order) is then deleted, and the view waited for until it left, so windows are
        judged on the nodes alone (and every judgement moves each window's boundary twice)."""
        count = next(self.count)
        content = marker_content(view.query.where, count, window=view.window)
        node = MeshNode(path=view.marker, content=content, version=1)
        if view.marker in self.present:
            assert await self.store.update(node) is not None
        else:
            await self.store.write(node)
            self.present.add(view.marker)

        def has_marker() -> bool:
            got = view.nodes.get(view.marker)
            return got is not None and got.content.get("m") == count

        self.trail.append(f"marker {view.marker} m={count}")
        await self.until(view, has_marker)
        if view.window:
            assert await self.store.delete(view.marker)
            self.present.discard(view.marker)
            await self.until(view, lambda: view.marker not in view.nodes)

    async def judge(self) -> None:
        for index, view in enumerate(self.views):
            if not view.connected:
                continue
            await self.quiesce(view)
            fresh = await first_value(self.store.query(view.query), timeout=WAIT)
            expected = {node.path: node for node in fresh.nodes}
            self.seen["judged"] += 1
            assert shown(view.nodes) == shown(expected), (
                f"view {index} ({view.query!r}) differs from a fresh query:"
                f" {shown(view.nodes)} != {shown(expected)}; its frames: {view.log};"
                f" the steps: {self.trail}"
            )
            if view.window:  # and a window is the first N matches by its order
                every = view.query.model_copy(update={"order_by": (), "limit": None})
                matches = (await first_value(self.store.query(every), timeout=WAIT)).nodes
                first = sorted(matches, key=view.query.sort_key)[: view.query.limit]
                assert shown(view.nodes) == shown({n.path: n for n in first}), (
                    f"window {index} ({view.query!r}) is not the first matches by its order"
                )
                self.seen["windows judged"] += 1

    # -- writes --

    async def apply(self, op: Op) -> None:
        verb, slot, other, which = op
        path, target = self.path(slot), self.path(other)
        content = CONTENTS[which % len(CONTENTS)]
        if verb == "create" and path not in self.present:
            await self.store.write(MeshNode(path=path, node_type="Doc", content=content, version=1))
            self.present.add(path)
        elif verb == "update" and path in self.present:
            assert await self.store.update(MeshNode(path=path, content=content)) is not None
        elif verb == "delete" and path in self.present:
            assert await self.store.delete(path)
            self.present.discard(path)
        elif verb == "move" and path in self.present and path != target:
            try:
                moved = await self.store.move(path, target)
            except StoreConflictError:
                assert target in self.present
            else:
                assert moved is not None and target not in self.present
                self.present.discard(path)
                self.present.add(target)

    @rule(op=OP)
    def write(self, op: Op) -> None:
        self.trail.append(f"write(op={op!r})")
        self.run(self.apply(op))

    @rule(ops=st.lists(OP, min_size=1, max_size=4))
    def writes(self, ops: list[Op]) -> None:
        self.trail.append(f"writes(ops={ops!r})")
        for op in ops:
            self.run(self.apply(op))

    # -- views: open, disconnect, resume --

    @precondition(lambda self: len(self.views) < 3)
    @rule(which=st.integers(0, len(FILTERS) - 1), window=st.sampled_from(WINDOWS))
    def open_view(self, which: int, window: tuple[tuple[str, ...], int] | None) -> None:
        self.trail.append(f"open_view(which={which!r}, window={window!r})")
        if not self.windows:
            window = None
        order_by, limit = window if window is not None else ((), None)
        query = NodeQuery(
            partition=self.partition, where=FILTERS[which], order_by=order_by, limit=limit
        )
        # A filter's views share a marker; a window's is its own (it comes and goes).
        marker = f"zm{which}" if window is None else f"zw{len(self.views)}"
        view = View(query, self.path(marker))
        self.views.append(view)
        self.subscribe(view, None)

    @precondition(lambda self: any(v.connected for v in self.views))
    @rule(index=st.integers(0, 2))
    def disconnect(self, index: int) -> None:
        self.trail.append(f"disconnect(index={index!r})")
        self.leave(index)

    def leave(self, index: int) -> View:
        connected = [v for v in self.views if v.connected]
        view = connected[index % len(connected)]
        assert view.subscription is not None
        view.subscription.dispose()
        view.subscription = None
        return view

    @precondition(lambda self: any(not v.connected for v in self.views))
    @rule(index=st.integers(0, 2))
    def resume(self, index: int) -> None:
        self.trail.append(f"resume(index={index!r})")
        away = [v for v in self.views if not v.connected]
        view = away[index % len(away)]
        self.subscribe(view, view.token)

    @precondition(lambda self: any(v.connected for v in self.views))
    @rule(index=st.integers(0, 2), ops=OPS)
    def away_and_back(self, index: int, ops: list[Op]) -> None:
        """The common case: a subscriber leaves, writes happen, it resumes from its token."""
        self.trail.append(f"away_and_back(index={index!r}, ops={ops!r})")
        view = self.leave(index)
        for op in ops:
            self.run(self.apply(op))
        self.subscribe(view, view.token)

    # -- faults --

    @rule(ops=OPS, hold=st.booleans())
    def feed_lost(self, ops: list[Op], hold: bool) -> None:
        """The feed held (delivered late) or, where :attr:`drops_feed`, dropped and a gap
        declared after the writes."""
        self.trail.append(f"feed_lost(ops={ops!r}, hold={hold!r})")
        if hold or not self.drops_feed or any(v.window for v in self.views):
            self.store.hold_change_feed()
        else:
            self.store.drop_change_feed()
        try:
            for op in ops:
                self.run(self.apply(op))
        finally:
            self.store.resume_change_feed(announce_gap=self.store.statistics().feed_mode == "drop")

    @precondition(lambda self: any(v.connected for v in self.views))
    @rule()
    def sever(self) -> None:
        """Every open query ends with a connection reset: the subscribers must resume."""
        self.trail.append("sever()")
        open_now = sum(v.connected for v in self.views)
        assert self.store.sever_open_queries() == open_now
        assert all(not v.connected for v in self.views)
        self.seen["severed"] += open_now

    @precondition(
        lambda self: (
            self.cut_listener is not None
            and any(v.connected for v in self.views)  # a cut nobody hears shows little
            and (self.cuts_windows or not any(v.window for v in self.views))
        )
    )
    @rule(ops=OPS)
    def listener_cut(self, ops: list[Op]) -> None:
        """The store's LISTEN backend terminated, writes while it comes back: a real gap."""
        self.trail.append(f"listener_cut(ops={ops!r})")
        assert self.cut_listener is not None
        self.run(self.cut_listener(self.store))
        self.seen["listener cut"] += 1
        for op in ops:
            self.run(self.apply(op))

    @invariant()
    def views_equal_fresh_queries(self) -> None:
        try:
            self.run(self.judge())
        except BaseException:
            self.failed = True
            raise

    def teardown(self) -> None:
        try:
            if not self.failed:  # a failed step is the finding; do not add to it
                for view in self.views:  # every view away comes back, judged once more
                    if not view.connected:
                        self.subscribe(view, view.token)
                self.run(self.judge())
        finally:
            for view in self.views:
                if view.subscription is not None:
                    view.subscription.dispose()
            self.run(type(self).closed(self.store))


def profile(examples: int, steps: int, *, shrink: bool = True) -> settings:
    """:func:`tests.helpers.machine_settings`; ``RXMESH_LIVE_MACHINE_EXAMPLES`` scales the number
    of examples (a soak: ``RXMESH_LIVE_MACHINE_EXAMPLES=2000``)."""
    return machine_settings(
        examples, steps, scale_variable="RXMESH_LIVE_MACHINE_EXAMPLES", shrink=shrink
    )


_names = itertools.count()


def partition_name() -> str:
    """A partition no earlier example of this process wrote in."""
    return f"q{next(_names)}"
