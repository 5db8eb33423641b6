"""Issue 13, scenario 4: nothing a NOTIFY carries, and nothing that goes wrong in the feed's own
tasks, may kill the change feed silently.

Before the fix, ``SELECT pg_notify('<prefix>changes', 'hello')`` from any session killed the
store's dispatch task (``JSONDecodeError``): live queries got no more Deltas, announced-commit
evidence stopped, nothing was logged, health stayed green, no gap was declared, and
``store.close()`` re-raised the dead task's error and left the pool open. Now a payload that does
not parse is counted, logged (WARNING, rate-limited) and skipped; a feed task that ends anyway is
declared LOST (ERROR, health DEGRADED), restarted, and a gap is declared once the feed is whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rxmesh.health import ChangeFeedCheck, HealthStatus
from rxmesh.model import (
    ChangeFeedGap,
    CommitAnnounced,
    FrameKind,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
)
from rxmesh.providers.postgres import ChangeFeedState, PostgresStore
from tests.helpers import LogRecords
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import drop_schemas, started, unique_prefix
from tests.providers.postgres.test_change_feed import _insert_raw, _until

pytestmark = pytest.mark.postgres

WAIT = 5.0


class FakeClock:
    """Monotonic seconds for the store's log rate limit; they move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _notify(
    dsn: str, channel: str, payloads: list[str], insert: tuple[str, str] | None = None
) -> None:
    """NOTIFY every payload (one statement, one transaction: distinct payloads all arrive, in
    order), and optionally insert a row in the same transaction (a foreign commit whose trigger
    NOTIFY arrives in the same delivery)."""
    conn = await asyncpg.connect(dsn, timeout=WAIT, command_timeout=WAIT)
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", channel, payloads
            )
            if insert is not None:
                schema, path = insert
                await conn.execute(
                    f'INSERT INTO "{schema}".nodes (path, version, request_id) VALUES ($1, 1, $2)',
                    path,
                    "foreign",
                )
    finally:
        await conn.close()


def _malformed_lines(records: LogRecords) -> list[str]:
    return [
        str(r["message"])
        for r in records.at("WARNING")
        if "malformed change-feed notification" in str(r["message"])
    ]


def _feed_errors(records: LogRecords) -> list[str]:
    return [str(r["message"]) for r in records.at("ERROR") if "change feed" in str(r["message"])]


async def _next_delta_with(frames: Recorder[QueryFrame], path: str) -> QueryFrame:
    return await frames.next_matching(
        lambda f: f.kind is FrameKind.DELTA and path in [n.path for n in f.nodes], timeout=WAIT
    )


# -- hostile payloads, generated -----------------------------------------------------------------

PREFIX = unique_prefix()
"""One prefix for the generated payloads' near-valid family (the test's store uses it)."""
SCHEMA = PREFIX + "p"
_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=60)
_JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12)
)
_JSONISH = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
_NOT_A_VERSION = st.one_of(
    st.booleans(),
    st.none(),
    st.floats(),
    st.text(max_size=6),
    st.integers(max_value=-1),
    st.integers(min_value=2**63),
    st.lists(st.integers(), max_size=2),
)
_NOT_AN_XID = _JSONISH.filter(lambda x: not (type(x) is int and 0 <= x < 2**63))
"""Anything but what a trigger sends as the writing transaction's id."""
_NOT_A_PATH = st.one_of(
    st.sampled_from(["", "p//a", "p/../a", "p/a b", "p/", "/p", "p/" + "x" * 600, "q/a", "p\\a"]),
    st.integers(),
    st.none(),
    _TEXT.filter(lambda t: t != "p" and not t.startswith("p/")),  # never a path of partition p
)


def _near_valid() -> st.SearchStrategy[object]:
    """The triggers' shape, ``[schema, op, [[path, version]], xid]`` (the xid may be left out),
    with exactly one thing wrong."""
    good_row = st.just(["p/a", 1])
    return st.one_of(
        st.tuples(st.just(SCHEMA), st.just("upsert")).map(list),  # wrong arity
        st.tuples(  # a fourth element that is no transaction id
            st.just(SCHEMA), st.just("upsert"), st.just([["p/a", 1]]), _NOT_AN_XID
        ).map(list),
        st.tuples(  # wrong arity: a fifth element
            st.just(SCHEMA), st.just("upsert"), st.just([["p/a", 1]]), st.just(7), _JSONISH
        ).map(list),
        st.tuples(
            st.one_of(_JSONISH, _TEXT, st.just("rxmesh_p"), st.just(PREFIX)),
            st.just("upsert"),
            st.just([["p/a", 1]]),
        ).map(list),
        st.tuples(
            st.just(SCHEMA),
            _JSONISH.filter(lambda op: op not in ("upsert", "delete")),
            st.just([["p/a", 1]]),
        ).map(list),
        st.tuples(
            st.just(SCHEMA),
            st.just("upsert"),
            st.one_of(
                st.just([]),
                st.dictionaries(st.text(max_size=3), _JSON_SCALARS, max_size=2),
                _JSON_SCALARS,
            ),
        ).map(list),
        st.tuples(
            st.just(SCHEMA),
            st.just("delete"),
            st.tuples(good_row, st.tuples(_NOT_A_PATH, st.just(1)).map(list)).map(list),
        ).map(list),
        st.tuples(
            st.just(SCHEMA),
            st.just("upsert"),
            st.tuples(good_row, st.tuples(st.just("p/b"), _NOT_A_VERSION).map(list)).map(list),
        ).map(list),
        st.tuples(
            st.just(SCHEMA),
            st.just("upsert"),
            st.lists(st.lists(st.just("p/a"), min_size=3, max_size=4), min_size=1, max_size=2),
        ).map(list),
    )


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE: st.SearchStrategy[str] = st.one_of(
    _TEXT,  # not JSON (nearly always)
    _JSONISH.map(json.dumps),  # JSON of the wrong shape
    _near_valid().map(json.dumps),  # the right shape, one thing wrong
    st.sampled_from(
        ["", "null", "[]", "{}", "[null, null, null]", "x" * 7990, _deep(3000), "9" * 7000, "NaN"]
    ),
).filter(lambda p: len(p.encode()) < 8000)  # PostgreSQL refuses longer payloads itself


async def _observe(
    store: PostgresStore,
) -> tuple[Recorder[QueryFrame], Recorder[StoreEvidence], Recorder[ChangeFeedGap]]:
    """A live query (past its Initial), the evidence stream and the gaps, subscribed on the loop."""
    frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
    assert (await frames.next()).kind is FrameKind.INITIAL
    return frames, Recorder(store.answers_again), Recorder(store.gaps)


@pytest.mark.timeout(60)
def test_hostile_payloads_of_every_shape_are_counted_skipped_and_the_feed_goes_on(
    pg_dsn: str, log_records: LogRecords
) -> None:
    """FAILS against the old code: the first hostile payload killed the dispatch task, so the
    foreign commit sent in the same transaction never reached the live query (and nothing was
    counted or logged)."""
    clock = FakeClock()
    interval = 60.0
    sent = 0

    with asyncio.Runner() as runner:
        store = PostgresStore(
            pg_dsn,
            schema_prefix=PREFIX,
            min_size=1,
            max_size=2,
            malformed_log_interval=interval,
            clock=clock,
        )
        runner.run(store.start())
        try:
            runner.run(asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT))
            frames, evidence, gaps = runner.run(_observe(store))
            channel = PREFIX + "changes"

            @settings(
                max_examples=8,
                deadline=None,
                database=None,
                phases=(
                    Phase.explicit,
                    Phase.generate,
                ),  # no shrinking: each step waits on a server
                suppress_health_check=[
                    HealthCheck.too_slow,
                    HealthCheck.data_too_large,
                    HealthCheck.large_base_example,
                ],
            )
            @given(payloads=st.lists(HOSTILE, min_size=1, max_size=25, unique=True))
            def one_batch(payloads: list[str]) -> None:
                nonlocal sent
                path = f"p/e{sent}"
                runner.run(_notify(pg_dsn, channel, payloads, insert=(SCHEMA, path)))
                sent += len(payloads)
                # The valid entry of the same delivery still reaches the live query ...
                delta = runner.run(_next_delta_with(frames, path))
                assert [n.path for n in delta.nodes] == [path]
                # ... and is announced as evidence.
                runner.run(
                    evidence.next_matching(
                        lambda e: isinstance(e, CommitAnnounced) and e.path == path
                    )
                )
                # Every hostile payload was counted (the trigger's own NOTIFY was not).
                runner.run(
                    _until(
                        lambda: store.feed_statistics().malformed_notifications == sent, "counted"
                    )
                )

            one_batch()

            stats = store.feed_statistics()
            assert stats.malformed_notifications == sent
            assert stats.state is ChangeFeedState.LISTENING
            assert stats.lost_since is None
            assert gaps.pending() == 0  # nothing was lost: no gap, no re-read
            assert _feed_errors(log_records) == []
            lines = _malformed_lines(log_records)
            assert len(lines) == 1, lines  # rate-limited: the first one only, the clock stood still
            assert "skipped a malformed change-feed notification" in lines[0]
            health = ChangeFeedCheck(store)()
            assert health.status is HealthStatus.DEGRADED
            assert f"{sent} malformed notification" in health.description

            # The interval passes: the next batch writes ONE summary line with the count.
            clock.now += interval
            runner.run(_notify(pg_dsn, channel, [], insert=(SCHEMA, "p/after")))
            runner.run(_next_delta_with(frames, "p/after"))
            lines = _malformed_lines(log_records)
            assert len(lines) == 2, lines
            assert f"skipped {sent - 1} more malformed change-feed notification(s)" in lines[1]
            assert f"{sent} in all" in lines[1]
            for recorder in (frames, evidence, gaps):
                recorder.dispose()
        finally:
            runner.run(store.close())
            runner.run(drop_schemas(pg_dsn, PREFIX))


# -- close() ----------------------------------------------------------------------------------


async def _backend_pids(store: PostgresStore) -> tuple[asyncpg.Pool, set[int]]:
    """The store's pool (private, for the assertion) and the server pids of its connections."""
    pool = store._pool
    assert pool is not None
    async with pool.acquire() as conn:
        pids = {conn.get_server_pid()}
    listener = store.feed_backend_pid
    assert listener is not None
    return pool, pids | {listener}


async def _alive(dsn: str, pids: set[int]) -> set[int]:
    conn = await asyncpg.connect(dsn, timeout=WAIT)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1::int[])", list(pids)
        )
    finally:
        await conn.close()
    return {row["pid"] for row in rows}


async def test_close_after_hostile_payloads_closes_the_pool_and_raises_nothing(
    pg_dsn: str, prefix: str
) -> None:
    """FAILS against the old code: close() re-raised the dead dispatch task's JSONDecodeError
    before it reached the pool, which stayed open."""
    store = PostgresStore(pg_dsn, schema_prefix=prefix, min_size=1, max_size=2)
    arrived = asyncio.Event()
    hostile = ["hello", '["x"]', json.dumps([prefix + "p", "upsert", [["p/a", "one"]]])]
    original = store._feed._listener.on_notify
    calls = 0

    def counting(*args: Any) -> None:  # notices the payloads' arrival, old code and new alike
        nonlocal calls
        original(*args)
        calls += 1
        if calls >= len(hostile):
            arrived.set()

    store._feed._listener.on_notify = counting  # type: ignore[method-assign]
    await store.start()
    pool, pids = await _backend_pids(store)
    evidence: Recorder[StoreEvidence] = Recorder(store.answers_again)  # as PendingWriteRecovery
    started_evidence = await evidence.next()  # a subscriber of a started store gets it at once
    assert isinstance(started_evidence, ChangeFeedGap)
    assert started_evidence.reason.startswith("the store started")
    await _notify(pg_dsn, prefix + "changes", hostile)
    async with asyncio.timeout(WAIT):
        await arrived.wait()
        while not store._feed._listener.notifications.empty():  # noqa: ASYNC110 - the dispatcher's own pace
            await asyncio.sleep(0.005)

    await store.close()  # raises nothing

    with pytest.raises(LookupError):  # the hot streams completed
        await evidence.next()
    assert pool.is_closing()
    assert pool.get_size() == 0
    await _until_gone(pg_dsn, pids)
    assert store.feed_statistics().state is ChangeFeedState.CLOSED
    assert store.feed_statistics().malformed_notifications == len(hostile)
    assert ChangeFeedCheck(store)().status is HealthStatus.UNHEALTHY  # closed: not coming back
    await store.close()  # idempotent


async def _until_gone(dsn: str, pids: set[int]) -> None:
    async with asyncio.timeout(WAIT):
        while await _alive(dsn, pids):  # noqa: ASYNC110 - a real server's state, bounded
            await asyncio.sleep(0.02)


async def test_a_close_that_is_cancelled_still_terminates_everything_and_propagates(
    pg_dsn: str, prefix: str
) -> None:
    store = PostgresStore(pg_dsn, schema_prefix=prefix, min_size=1, max_size=2)
    await store.start()
    pool, pids = await _backend_pids(store)
    changes: Recorder[NodeChange] = Recorder(store.changes)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0)  # let close() start and wait for the feed tasks
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert closing.cancelled()  # the cancellation aimed at the closer was not swallowed
    assert pool.is_closing()
    assert store.feed_backend_pid is None
    with pytest.raises(LookupError):  # the hot streams completed
        await changes.next()
    await _until_gone(pg_dsn, pids)


# -- feed tasks that end anyway -----------------------------------------------------------------


def _raise_once(target: Callable[..., Awaitable[Any]], error: Exception) -> Callable[..., Any]:
    calls = 0

    async def patched(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise error
        return await target(*args, **kwargs)

    return patched


async def test_a_dispatch_task_that_dies_is_declared_lost_restarted_and_ends_in_a_gap(
    pg_dsn: str, prefix: str, log_records: LogRecords
) -> None:
    """FAILS against the old code: the dead dispatcher went unnoticed -- no ERROR, no gap, and
    the next foreign commit never reached the live query."""
    async with started(pg_dsn, prefix, reconnect_backoff=(0.5,)) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        check = ChangeFeedCheck(store)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        evidence: Recorder[StoreEvidence] = Recorder(store.answers_again)
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/before")
            await _next_delta_with(frames, "p/before")  # the feed works before the fault
            # Injected only now: any get() the dispatcher makes from here on meets it (the next
            # notification, this commit's or a probe's, is what makes it get() again). Injected
            # before "p/before", the dispatcher could meet it first if it was not already waiting
            # in a get(); "p/before" then came in the gap's re-select, after the restart, and the
            # health below had been degraded and healthy again already (2 runs in 15).
            queue = store._feed._listener.notifications
            queue.get = _raise_once(queue.get, RuntimeError("injected"))  # type: ignore[method-assign]
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/wake")

            async with asyncio.timeout(WAIT):
                while not _feed_errors(log_records):  # noqa: ASYNC110 - bounded
                    await asyncio.sleep(0.005)
            assert "dispatch task died: RuntimeError: injected" in _feed_errors(log_records)[0]
            health = check()  # the restart waits out its backoff (0.5 s) first
            assert health.status is HealthStatus.DEGRADED
            assert "change feed lost since" in health.description
            assert "its dispatch task died: RuntimeError: injected" in health.description
            assert store.feed_statistics().state is ChangeFeedState.LOST

            gap = await gaps.next()
            assert "dispatch task died" in gap.reason
            # (After the verified start, which a subscriber of a started store gets at once.)
            assert await evidence.next_matching(lambda e: e == gap) == gap
            stats = store.feed_statistics()
            assert (stats.state, stats.restarts, stats.gaps_declared) == (
                ChangeFeedState.LISTENING,
                1,
                1,
            )
            assert check().status is HealthStatus.HEALTHY

            await _insert_raw(pg_dsn, store.schema_of("p"), "p/after")  # a foreign commit
            await _next_delta_with(frames, "p/after")
            assert gaps.pending() == 0  # one loss, one gap
        finally:
            for recorder in (frames, gaps, evidence):
                recorder.dispose()


async def test_a_listener_task_that_dies_is_declared_lost_reconnected_and_ends_in_a_gap(
    pg_dsn: str, prefix: str, log_records: LogRecords
) -> None:
    options = {"reconnect_backoff": (0.05,), "heartbeat_interval": 0.05}
    async with started(pg_dsn, prefix, **options) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            first_pid = store.feed_backend_pid
            lost = store._feed._listener.lost
            lost.wait = _raise_once(lost.wait, RuntimeError("heartbeat broke"))  # type: ignore[method-assign]
            gap = await gaps.next()
            assert "listener task died: RuntimeError: heartbeat broke" in gap.reason
            assert store.feed_backend_pid not in (None, first_pid)  # a fresh LISTEN connection
            assert any("listener task died" in line for line in _feed_errors(log_records))
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/after")
            await _next_delta_with(frames, "p/after")
            assert store.feed_statistics().restarts == 1
        finally:
            frames.dispose()
            gaps.dispose()


async def test_a_batch_that_fails_is_reported_declared_as_a_gap_and_the_next_one_delivers(
    pg_dsn: str, prefix: str, log_records: LogRecords
) -> None:
    async with started(pg_dsn, prefix) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            store._feed._dispatcher._fetch_changed = _raise_once(  # type: ignore[method-assign]
                store._feed._dispatcher._fetch_changed, KeyError("a bug")
            )
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/lost")
            gap = await gaps.next()  # its change may not have been delivered: dependents re-read
            assert "could not be delivered: KeyError" in gap.reason
            delta = await _next_delta_with(frames, "p/lost")  # from the re-query
            assert delta.removed == ()
            assert any("declaring a gap" in line for line in _feed_errors(log_records))
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/next")
            await _next_delta_with(frames, "p/next")
            stats = store.feed_statistics()
            assert (stats.failed_batches, stats.restarts, stats.state) == (
                1,
                0,
                ChangeFeedState.LISTENING,
            )
        finally:
            frames.dispose()
            gaps.dispose()


async def test_a_subscriber_that_raises_is_reported_and_the_others_still_get_every_change(
    pg_dsn: str, prefix: str, log_records: LogRecords
) -> None:
    """FAILS against the old code: the raising subscriber's error killed the dispatch task, so
    the live query subscribed after it never got its Delta."""
    async with started(pg_dsn, prefix) as store:
        seen: Recorder[NodeChange] = Recorder(store.changes)
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        await seen.next_matching(lambda c: c.path == "p/seed")  # delivered before `broken` joins
        seen.dispose()

        def broken(change: NodeChange) -> None:
            raise ValueError(f"cannot handle {change.path}")

        subscription = store.changes.subscribe(broken)  # first in line
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            for path in ("p/one", "p/two"):
                await _insert_raw(pg_dsn, store.schema_of("p"), path)
                await _next_delta_with(frames, path)
            errors = [str(r["message"]) for r in log_records.at("ERROR")]
            errors = [line for line in errors if "subscriber" in line]
            assert errors, log_records.at("ERROR")
            assert "a subscriber of changes raised ValueError: cannot handle p/one" in errors[0]
            assert store.feed_statistics().subscriber_errors == 2
            assert gaps.pending() == 0  # the feed itself lost nothing
            assert store.feed_statistics().state is ChangeFeedState.LISTENING
        finally:
            subscription.dispose()
            frames.dispose()
            gaps.dispose()
