"""A time box rxmesh itself set means "the store did not answer in time" (issue 13, scenario 1).

The seeds' own incident (SPEC §10): a command timeout is wall-clock, so it fires just the same
when THIS process's event loop was blocked. Such a fault must be answered UNAVAILABLE (never
UNKNOWN), recorded for one re-issue, and carry the stall adjacency ("check this process before
the database"). Only a server-sent 57014 (statement_timeout) stays UNKNOWN: the falsifier.

Real PostgreSQL on the shared server: a private schema prefix per test, a private database for
the statement_timeout controls (``ALTER DATABASE ... SET statement_timeout`` stays inside it).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from reactivex import operators as ops

from rxmesh import CreateNodeRequest, Mesh, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.diagnosis import LoopStallMonitor
from rxmesh.exceptions import StoreError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import FrameKind, NodeQuery, QueryFrame
from rxmesh.operations import CreateNodeResponse
from rxmesh.operators import reopen_on_transient_fault
from rxmesh.providers.postgres import PostgresStore
from tests.helpers import ALICE, Outcomes, doc

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CHECK_PROCESS = "check this process before the database"


@pytest.fixture
async def monitor() -> AsyncIterator[LoopStallMonitor]:
    running = LoopStallMonitor()  # the defaults: 1 s tick, a stall is a tick > 2 s late
    running.start()
    try:
        yield running
    finally:
        running.stop()


async def count_rows(dsn: str, schema: str) -> int:
    """The rows of the 60 creates (``s/n<i>``), each at most once (path is the primary key)."""
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        return int(
            await conn.fetchval(
                f"SELECT count(*) FROM \"{schema}\".nodes WHERE path ~ '^s/n[0-9]+$'"
            )
        )
    finally:
        await conn.close()


@pytest.fixture
async def locker(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_dsn, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()


async def hold_lock(conn: asyncpg.Connection, table: str) -> Any:
    """Take ACCESS EXCLUSIVE on ``table`` in an open transaction (every statement on it waits)."""
    transaction = conn.transaction()
    await transaction.start()
    await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    return transaction


async def waiting_on(conn: asyncpg.Connection, table: str) -> None:
    """Until some backend waits for a lock on ``table`` (this test's own table: another session's
    waits never count), polled on the server, bounded."""
    waiting = "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted"
    async with asyncio.timeout(30):
        while not await conn.fetchval(waiting, table):  # noqa: ASYNC110 - the server's state
            await asyncio.sleep(0.01)


async def sixty_creates_through_a_stall(
    mesh: Mesh, store: PostgresStore, seconds: float, locker: asyncpg.Connection
) -> list[CreateNodeResponse]:
    """60 creates in flight, then the loop blocked for ``seconds`` (the incident's shape).

    The statements on their connections when the loop blocks must still be waiting for their
    replies when it runs again, or the loop would read the replies before firing the expired
    timers: the partition's table is locked from before the creates until just after the
    stall, so every command timeout then in flight fires, late, on the blocked loop's clock.

    The loop blocks only once the server shows a statement of the store waiting on that lock:
    its command timeout started when it was sent, so a stall longer than the timeout makes at
    least one time-boxed failure however slowly a loaded machine got there (a count of loop
    turns, or a connection taken from the pool, proves no statement was sent)."""
    table = f'"{store.schema_of("s")}".nodes'
    held = await hold_lock(locker, table)
    tasks = [
        asyncio.ensure_future(
            first_value(
                mesh.create_node(CreateNodeRequest(node=doc(f"s/n{i}", i=i), access=ALICE)),
                timeout=60,
            )
        )
        for i in range(60)
    ]
    await waiting_on(locker, table)
    time.sleep(seconds)  # noqa: ASYNC251 - the fault under test: this process's loop is blocked
    # One turn of the loop first: the expired timers fire there, while the lock still holds
    # every reply back (a ROLLBACK written in this same step could let a reply in first).
    await asyncio.sleep(0)
    await held.rollback()  # the store is fine: the lock goes as soon as the loop runs again
    return list(await asyncio.gather(*tasks))


async def test_a_stalled_loop_is_never_answered_unknown_and_every_create_lands(
    pg_dsn: str, prefix: str, monitor: LoopStallMonitor, locker: asyncpg.Connection
) -> None:
    """FAILS against the old boundary: one create (the one whose read was in flight when the loop
    blocked) was answered UNKNOWN "did not finish reading 's/n0' within 1s", was not journaled
    and was never written (59/60 rows). Now the time box is "did not answer in time": the ladder
    re-runs the read once the loop runs again, and all 60 land."""
    store = PostgresStore(pg_dsn, command_timeout=1, schema_prefix=prefix)
    await store.start()
    try:
        mesh = Mesh(store, ledger=PendingWriteLedger(""))  # the default ladder
        await mesh.create(doc("s/seed"), access=ALICE)
        outcomes = Outcomes(mesh.ledger)
        answers = await sixty_creates_through_a_stall(mesh, store, 3.0, locker)
        failed = [a for a in answers if not a.success]
        reasons = Counter(a.rejection_reason for a in failed)
        assert RejectionReason.UNKNOWN not in reasons, [a.error for a in answers]
        for answer in failed:
            assert CHECK_PROCESS in (answer.error or ""), answer
        assert monitor.statistics().stalls >= 1
        await mesh.create(doc("s/after"), access=ALICE)  # a commit the feed announces: evidence
        await outcomes.wait(len(failed), timeout=20)
        assert await count_rows(pg_dsn, store.schema_of("s")) == 60
    finally:
        await store.close()


async def test_without_the_ladder_every_failure_is_unavailable_names_the_stall_and_lands_later(
    pg_dsn: str, prefix: str, monitor: LoopStallMonitor, locker: asyncpg.Connection
) -> None:
    """FAILS against the old boundary (UNKNOWN, not journaled, no adjacency sentence). With no
    ladder every time box reaches the terminal arm: it answers UNAVAILABLE carrying "check this
    process before the database", records the intent, and the intent lands on the next
    evidence: 60/60 rows after recovery."""
    store = PostgresStore(pg_dsn, command_timeout=1, schema_prefix=prefix)
    await store.start()
    try:
        mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=())
        await mesh.create(doc("s/seed"), access=ALICE)
        outcomes = Outcomes(mesh.ledger)  # every verdict from now on
        answers = await sixty_creates_through_a_stall(mesh, store, 3.0, locker)
        failed = [a for a in answers if not a.success]
        assert failed, "the stall produced no time-boxed failure; the scenario did not happen"
        for answer in failed:
            assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
            assert CHECK_PROCESS in (answer.error or ""), answer
            assert "will not be re-issued" not in (answer.error or "")
        # Recorded: each is re-issued on evidence (the other creates' announced commits may
        # already have been that evidence; one more commit makes sure some arrives).
        await mesh.create(doc("s/after"), access=ALICE)
        got = await outcomes.wait(len(failed), timeout=20)
        assert sorted(o.intent.request_id for o in got) == sorted(a.request_id for a in failed)
        assert {o.verdict for o in got} == {Verdict.LANDED}
        assert await count_rows(pg_dsn, store.schema_of("s")) == 60
    finally:
        await store.close()


async def test_a_command_timeout_without_any_stall_is_unavailable_and_recorded(
    pg_dsn: str, prefix: str, locker: asyncpg.Connection
) -> None:
    """FAILS against the old boundary (UNKNOWN "did not finish reading ... within 0.5s"). The
    statement waits on a lock past rxmesh's own command_timeout: the store did not answer in
    time. The answer is UNAVAILABLE, recorded, and lands once the lock is gone."""
    store = PostgresStore(pg_dsn, command_timeout=0.5, schema_prefix=prefix)
    await store.start()
    try:
        mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=())
        await mesh.create(doc("s/seed"), access=ALICE)
        held = await hold_lock(locker, f'"{store.schema_of("s")}".nodes')
        response = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc("s/x"), access=ALICE)), timeout=20
        )
        assert response.rejection_reason is RejectionReason.UNAVAILABLE, response
        assert "Unexpected error" not in (response.error or "")
        assert [p.request_id for p in mesh.ledger.pending()] == [response.request_id]
        await held.rollback()
        outcomes = Outcomes(mesh.ledger)
        await mesh.create(doc("s/after"), access=ALICE)
        got = await outcomes.wait(1, timeout=20)
        assert [(o.intent.path, o.verdict) for o in got] == [("s/x", Verdict.LANDED)]
    finally:
        await store.close()


# -- the falsifier: a server-sent 57014 is a refused query, not an outage ----------------------


@pytest.fixture
async def slow_db(pg_dsn: str) -> AsyncIterator[str]:
    """A private database whose statements the SERVER cancels after 200 ms."""
    import uuid
    from urllib.parse import urlparse, urlunparse

    name = f"rxst_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_dsn, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.execute(f"ALTER DATABASE \"{name}\" SET statement_timeout = '200ms'")
    finally:
        await admin.close()
    try:
        yield urlunparse(urlparse(pg_dsn)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(pg_dsn, timeout=5)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def test_falsifier_a_server_statement_timeout_stays_unknown_and_records_nothing(
    slow_db: str, prefix: str
) -> None:
    """The server cancelled the statement (57014 QueryCanceledError): it answered, with a refusal.
    UNKNOWN, nothing recorded: the same lock wait that the client time box calls UNAVAILABLE."""
    store = PostgresStore(slow_db, command_timeout=10, schema_prefix=prefix)
    await store.start()
    locker = await asyncpg.connect(slow_db, timeout=5)
    try:
        mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=())
        await mesh.create(doc("s/seed"), access=ALICE)
        await locker.execute("SET statement_timeout = 0")
        held = await hold_lock(locker, f'"{store.schema_of("s")}".nodes')
        try:
            response = await first_value(
                mesh.create_node(CreateNodeRequest(node=doc("s/x"), access=ALICE)), timeout=20
            )
        finally:
            await held.rollback()
        assert response.rejection_reason is RejectionReason.UNKNOWN, response
        assert "QueryCanceledError" in (response.error or "")
        assert mesh.ledger.pending() == ()
    finally:
        await locker.close()
        await store.close()


# -- standing watches -------------------------------------------------------------------------


async def watch_until(
    store: PostgresStore, locker: asyncpg.Connection, table: str
) -> tuple[list[QueryFrame], list[BaseException], list[BaseException]]:
    """A standing watch over the store's query while the table is locked past a time box."""
    frames: list[QueryFrame] = []
    reopened: list[BaseException] = []
    ended: list[BaseException] = []
    done = asyncio.Event()
    framed = asyncio.Event()
    held = await hold_lock(locker, table)

    def on_frame(frame: QueryFrame) -> None:
        frames.append(frame)
        framed.set()

    def on_reopen(error: BaseException, attempt: int, delay: float) -> None:
        reopened.append(error)
        asyncio.get_running_loop().call_soon(done.set)

    def on_error(error: BaseException) -> None:
        ended.append(error)
        done.set()

    watch = reopen_on_transient_fault(
        lambda: store.query(NodeQuery(partition="s")), backoff=(0.05,), on_reopen=on_reopen
    )
    subscription = watch.pipe(ops.do_action(on_next=lambda f: done.set())).subscribe(
        on_frame, on_error
    )
    released = False
    try:
        async with asyncio.timeout(20):
            await done.wait()
        await held.rollback()
        released = True
        if not ended:
            async with asyncio.timeout(20):
                await framed.wait()
    finally:
        if not released:
            await held.rollback()
        subscription.dispose()
    return frames, reopened, ended


async def test_a_standing_watch_whose_query_hits_the_command_timeout_reopens(
    pg_dsn: str, prefix: str, locker: asyncpg.Connection
) -> None:
    """FAILS against the old boundary: the 57014 it minted ended the watch for good."""
    async with PostgresStore(pg_dsn, command_timeout=0.3, schema_prefix=prefix) as store:
        await store.write(doc("s/seed", version=1))
        frames, reopened, ended = await watch_until(
            store, locker, f'"{store.schema_of("s")}".nodes'
        )
    assert ended == []
    assert reopened and isinstance(reopened[0], StoreError)
    assert frames[0].kind is FrameKind.INITIAL
    assert [n.path for n in frames[0].nodes] == ["s/seed"]


async def test_falsifier_a_standing_watch_ends_on_a_server_statement_timeout(
    slow_db: str, prefix: str
) -> None:
    locker = await asyncpg.connect(slow_db, timeout=5)
    try:
        await locker.execute("SET statement_timeout = 0")
        async with PostgresStore(slow_db, command_timeout=10, schema_prefix=prefix) as store:
            await store.write(doc("s/seed", version=1))
            frames, reopened, ended = await watch_until(
                store, locker, f'"{store.schema_of("s")}".nodes'
            )
    finally:
        await locker.close()
    assert reopened == []
    assert frames == []
    assert len(ended) == 1
    assert isinstance(ended[0], asyncpg.QueryCanceledError)
