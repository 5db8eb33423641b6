"""A gap's re-select is shared AND streamed (issue 16, items 3 and 5): each batch goes to every
subscription that joined before the first batch went out, and is gone once each has compared
it; a subscription that comes later reads on its own; the read's end or error reaches every
reader; the last reader leaving cancels the read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from rxmesh.aio import first_value
from rxmesh.faults import is_standing_watch_transient
from rxmesh.model import ChangeFeedGap, MeshNode, NodeQuery, QueryFrame
from rxmesh.providers import postgres
from rxmesh.providers.postgres import _reads
from rxmesh.providers.postgres._positions import Position
from tests.live.test_postgres_live import _gap
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

WAIT = 10.0
QUERY = NodeQuery(partition="p")


class _Batch(list[Any]):
    """A batch of rows whose life is counted (no cycle holds one: it dies by reference count)."""

    alive = 0
    most = 0

    def __init__(self, rows: list[Any]) -> None:
        super().__init__(rows)
        type(self).alive += 1
        type(self).most = max(type(self).most, type(self).alive)

    def __del__(self) -> None:
        type(self).alive -= 1


@asynccontextmanager
async def _store_of_199_rows(
    dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> AsyncIterator[postgres.PostgresStore]:
    """A started store whose partition ``p`` holds 199 rows, read 10 a round trip (20 batches)."""
    monkeypatch.setattr(_reads, "_FETCH_BATCH", 10)
    async with started(dsn, prefix, reconnect_backoff=(0.2,), **options) as store:
        nodes = [MeshNode(path=f"p/{i:03d}", node_type="Row", version=1) for i in range(199)]
        await first_value(store.write_many(nodes), timeout=30)
        yield store


@asynccontextmanager
async def _subscribed(
    store: postgres.PostgresStore, count: int
) -> AsyncIterator[tuple[Recorder[ChangeFeedGap], list[Recorder[QueryFrame]]]]:
    """The store's gaps and two subscriptions of ``QUERY``, their Initials (``count`` rows) in."""
    gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
    recorders = [Recorder(store.query(QUERY)) for _ in range(2)]
    try:
        for frames in recorders:
            assert len((await frames.next()).nodes) == count
        yield gaps, recorders
    finally:
        for recorder in (gaps, *recorders):
            recorder.dispose()


@pytest.mark.postgres
async def test_a_gap_re_select_never_holds_more_than_a_few_batches(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: at 289252f the re-select kept every batch until its end (all 20 here alive
    at once, each record then old enough for the collector's oldest generation); streamed, a
    batch is gone once the subscriptions have compared it."""
    async with _store_of_199_rows(pg_dsn, prefix, monkeypatch) as store:
        select = store._select_batches
        counting = False

        async def counted(query: NodeQuery, each: Any) -> Any:
            async def tracked(partition: str, rows: list[asyncpg.Record]) -> None:
                await each(partition, _Batch(rows) if counting else rows)

            return await select(query, tracked)

        monkeypatch.setattr(store, "_select_batches", counted)
        async with _subscribed(store, 199) as (gaps, recorders):
            counting = True
            await _gap(store, pg_dsn, gaps, "p/missed")
            for frames in recorders:  # both subscriptions saw the whole re-select
                delta: QueryFrame = await frames.next()
                assert [node.path for node in delta.nodes] == ["p/missed"]
                assert delta.removed == ()
            assert _Batch.most >= 1  # the control: the batches were counted
            assert _Batch.most <= 3, f"{_Batch.most} of 20 batches alive at once"
            assert _Batch.alive == 0


@pytest.mark.postgres
async def test_a_subscription_leaving_mid_re_select_cancels_it_and_the_pool_stays_clean(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only subscription of a re-select leaves after its third batch: the read is
    cancelled on the server connection it holds (a cursor in a transaction, the next batch in
    flight), and every pooled connection is usable afterwards."""
    async with _store_of_199_rows(pg_dsn, prefix, monkeypatch, max_size=1) as store:
        select = store._reselect_rows
        batches = 0
        ended: list[BaseException | None] = []
        read_ended = asyncio.Event()
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        frames: Recorder[QueryFrame] = Recorder(store.query(QUERY))

        async def leaving(query: NodeQuery, each: Any) -> Any:
            async def counted(partition: str, rows: list[asyncpg.Record]) -> None:
                nonlocal batches
                batches += 1
                if batches == 3:
                    frames.dispose()  # the subscription leaves while the read goes on
                await each(partition, rows)

            try:
                position = await select(query, counted)
            except BaseException as error:
                ended.append(error)
                raise
            else:
                ended.append(None)
                return position
            finally:
                read_ended.set()

        try:
            assert len((await frames.next()).nodes) == 199
            monkeypatch.setattr(store, "_reselect_rows", leaving)
            await _gap(store, pg_dsn, gaps, "p/missed")
            async with asyncio.timeout(WAIT):
                await read_ended.wait()
            assert isinstance(ended[0], asyncio.CancelledError)
            assert batches < 20  # cancelled, not read to its end
            # The pool's one connection is clean: a read and a whole query run on it.
            assert await store.read("p/missed") is not None
            again = await first_value(store.query(QUERY), timeout=WAIT)
            assert len(again.nodes) == 200
        finally:
            gaps.dispose()
            frames.dispose()


@pytest.mark.postgres
async def test_a_re_select_whose_connection_is_killed_fails_every_subscription_alike(
    pg_dsn: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server connection of a shared re-select is terminated after its second batch: each
    subscription that shares it ends with the same classified error (a transient fault a
    standing watch re-opens after, rxmesh.faults), none sees a partial Delta, and the store
    serves the next query on a fresh connection. The control: the same subscriptions, reading
    a re-select nobody kills, get their Delta."""
    async with _store_of_199_rows(pg_dsn, prefix, monkeypatch) as store:
        select = store._reselect_rows
        kill = True

        async def killed(query: NodeQuery, each: Any) -> Any:
            batches = 0

            async def counted(partition: str, rows: list[asyncpg.Record]) -> None:
                nonlocal batches
                batches += 1
                if batches == 2 and kill:
                    conn = await asyncpg.connect(pg_dsn)
                    try:  # the read's backend: in its transaction, its SELECT names the schema
                        killed = await conn.fetchval(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                            " WHERE pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE $1",
                            f"%{store.schema_of('p')}%ORDER BY path%",
                        )
                        assert killed == 1
                    finally:
                        await conn.close()
                await each(partition, rows)

            return await select(query, counted)

        monkeypatch.setattr(store, "_reselect_rows", killed)
        async with _subscribed(store, 199) as (gaps, recorders):
            await _gap(store, pg_dsn, gaps, "p/missed")
            errors = []
            for frames in recorders:
                with pytest.raises(Exception) as raised:  # any error: classified below
                    await frames.next()
                errors.append(raised.value)
            assert errors[0] is errors[1]
            assert is_standing_watch_transient(errors[0]), repr(errors[0])
            kill = False  # the control: a re-select nobody kills
            again = Recorder(store.query(QUERY))
            try:
                assert len((await again.next()).nodes) == 200
                await _gap(store, pg_dsn, gaps, "p/missed2")
                delta = await again.next()
                assert [node.path for node in delta.nodes] == ["p/missed2"]
            finally:
                again.dispose()


# ---------------------------------------------------------------- the shared read, in isolation


class _Rows:
    """A scripted ``_reselect_rows``: each call is one read, fed batch by batch by the test."""

    def __init__(self) -> None:
        self.reads: list[asyncio.Queue[list[Any] | BaseException | None]] = []
        self.cancelled = 0

    async def __call__(self, query: NodeQuery, each: Any) -> Position:
        feed: asyncio.Queue[list[Any] | BaseException | None] = asyncio.Queue()
        self.reads.append(feed)
        try:
            while (rows := await feed.get()) is not None:
                if isinstance(rows, BaseException):
                    raise rows
                await each("p", rows)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return POSITION


async def _untold(query: NodeQuery, since: Position) -> None:
    """What changed since a position, for a store that cannot tell (the re-select runs)."""


POSITION = Position("x", 1, 1, frozenset())


def _row(path: str) -> tuple[Any, ...]:
    return (path, "Row", None, None, None, 1, None)


@pytest.fixture
async def store(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A store never started (no server needed): only its re-select sharing is used."""
    made = postgres.PostgresStore("postgresql://127.0.0.1:1/none", schema_prefix="rxg_")
    rows = _Rows()
    monkeypatch.setattr(made, "_reselect_rows", rows)
    monkeypatch.setattr(made, "_changes_since", _untold)
    made.rows = rows
    yield made
    await made.close()


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _drain(reader: Any) -> list[str]:
    paths: list[str] = []
    async with asyncio.timeout(WAIT):
        while (batch := await reader.next()) is not None:
            paths.extend(row[0] for row in batch[1])
    return paths


async def test_subscriptions_joined_before_the_first_batch_share_one_read(store: Any) -> None:
    first, second = store._reselect(QUERY, 0, POSITION), store._reselect(QUERY, 0, POSITION)
    await _turns()
    assert len(store.rows.reads) == 1
    (feed,) = store.rows.reads
    feed.put_nowait([_row("p/a")])
    feed.put_nowait([_row("p/b")])
    feed.put_nowait(None)
    assert await _drain(first) == ["p/a", "p/b"]
    assert await _drain(second) == ["p/a", "p/b"]
    assert len(store.rows.reads) == 1


async def test_a_later_gap_is_never_served_by_an_earlier_read(store: Any) -> None:
    """The control of sharing: a read begun before gap 2 was declared cannot answer it."""
    store._reselect(QUERY, 0, POSITION)
    store._feed.book.gaps = 2
    store._reselect(QUERY, 2, POSITION)
    await _turns()
    assert len(store.rows.reads) == 2


async def test_a_subscription_after_the_first_batch_reads_on_its_own(store: Any) -> None:
    early = store._reselect(QUERY, 0, POSITION)
    await _turns()
    store.rows.reads[0].put_nowait([_row("p/a")])
    await _turns()
    late = store._reselect(QUERY, 0, POSITION)  # p/a already went out: joining would miss it
    await _turns()
    assert len(store.rows.reads) == 2
    store.rows.reads[0].put_nowait([_row("p/b")])
    store.rows.reads[0].put_nowait(None)
    store.rows.reads[1].put_nowait([_row("p/a"), _row("p/b")])
    store.rows.reads[1].put_nowait(None)
    assert await _drain(early) == ["p/a", "p/b"]
    assert await _drain(late) == ["p/a", "p/b"]


async def test_the_reads_error_reaches_every_reader_after_its_batches(store: Any) -> None:
    readers = [store._reselect(QUERY, 0, POSITION) for _ in range(2)]
    await _turns()
    (feed,) = store.rows.reads
    error = ConnectionResetError("the server went away")
    feed.put_nowait([_row("p/a")])
    feed.put_nowait(error)
    for reader in readers:
        assert (await reader.next())[1] == [_row("p/a")]
        with pytest.raises(ConnectionResetError) as raised:
            await reader.next()
        assert raised.value is error
    assert store.rows.cancelled == 0


async def test_one_reader_leaving_keeps_the_read_and_the_last_cancels_it(store: Any) -> None:
    first, second = store._reselect(QUERY, 0, POSITION), store._reselect(QUERY, 0, POSITION)
    await _turns()
    first.leave()
    await _turns()
    assert store.rows.cancelled == 0  # the control: the other still reads
    store.rows.reads[0].put_nowait([_row("p/a")])
    assert (await second.next())[1] == [_row("p/a")]
    second.leave()
    await _turns()
    assert store.rows.cancelled == 1
    assert QUERY not in store._reselects


async def test_a_subscription_coming_as_the_last_one_left_gets_a_read_of_its_own(
    store: Any,
) -> None:
    """The read the last reader left is cancelled: one joining in the same turn (before that
    read has ended) must not be handed its cancellation."""
    first = store._reselect(QUERY, 0, POSITION)
    await _turns()  # its read has begun
    first.leave()
    reader = store._reselect(QUERY, 0, POSITION)
    await _turns()
    assert store.rows.cancelled == 1
    assert len(store.rows.reads) == 2
    store.rows.reads[1].put_nowait([_row("p/a")])
    store.rows.reads[1].put_nowait(None)
    assert await _drain(reader) == ["p/a"]


async def test_closing_the_store_cancels_the_read_and_its_readers_hear_it(store: Any) -> None:
    reader = store._reselect(QUERY, 0, POSITION)
    await _turns()
    await store.close()
    await _turns()  # close() cancels the read; it ends on the next turns
    assert store.rows.cancelled == 1
    with pytest.raises(asyncio.CancelledError):
        await reader.next()
