"""Issue 14: PostgresStore behind a real PgBouncer 1.18 in ``pool_mode = transaction``.

What the issue measured against the old code, each pinned here by a test:

- creates answered UNKNOWN (``InvalidSQLStatementNameError: prepared statement
  "__asyncpg_stmt_a0__" does not exist``): asyncpg's named, cached statements do not survive a
  pooler that moves every transaction to another server connection;
- the change feed silently dead: LISTEN ran on a server connection the pooler handed to others, so
  no foreign commit ever arrived, no evidence ever came, and a journaled intent stayed pending;
- ``start()`` raised a raw ``DuplicatePreparedStatementError`` now and then.

The run's own PgBouncer (tests/conftest.py ``pgbouncer``) sits in front of the shared server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import asyncpg.exceptions as pgexc
import pytest

from rxmesh import CreateNodeRequest, Mesh, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.exceptions import StoreError
from rxmesh.faults import is_store_unreachable, is_write_outcome_unknown
from rxmesh.health import ChangeFeedCheck, HealthStatus
from rxmesh.ledger import PendingWriteLedger, read_journal
from rxmesh.model import FrameKind, NodeQuery, QueryFrame
from rxmesh.operations import CreateNodesRequest
from rxmesh.providers.postgres import (
    ChangeFeedState,
    ChangeFeedUnverifiedError,
    PostgresStore,
)
from rxmesh.testing import FaultInjectingStore, FaultProxy
from tests.helpers import ALICE, Outcomes
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres

FAST = (0.01, 0.01, 0.01)
WAIT = 20.0


def doc(path: str) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content={"p": path})


ADVISORY_LOCKS_ON_SCHEMAS = (
    "SELECT pid, objid::text AS objid, granted FROM pg_locks WHERE locktype = 'advisory'"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND objid::bigint IN (SELECT hashtext(nspname)::bigint & 4294967295"
    " FROM pg_namespace WHERE starts_with(nspname, $1))"
)
"""Advisory locks held or awaited on the schemas of a prefix (the lock of ``_ensure_schema`` is
keyed on ``hashtext(schema)``; pg_locks shows its low 32 bits as ``objid``)."""


async def advisory_locks(dsn: str, prefix: str) -> list[tuple[int, str, bool]]:
    """Advisory locks anyone holds or waits for on ``prefix``'s schemas: (pid, objid, granted)."""
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        rows = await conn.fetch(ADVISORY_LOCKS_ON_SCHEMAS, prefix)
    finally:
        await conn.close()
    return [(r["pid"], r["objid"], r["granted"]) for r in rows]


async def test_a_burst_of_creates_through_a_transaction_pooler_answers_no_unknown(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    """FAILS against the old code: 108 of 120 concurrent single creates, 8 of 8 bulk creates and
    110 of 120 sequential creates answered UNKNOWN (26000 "prepared statement ... does not
    exist"). Now: every one answers success, each row is there once, and no advisory lock is
    left held on any server connection (the schema lock is transaction-scoped)."""
    async with started(pgbouncer_dsn, prefix, listen_dsn=pg_dsn, max_size=10) as store:
        assert store.pooled is True
        assert store.statistics().statement_cache_size == 0
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
        try:
            concurrent = await asyncio.gather(
                *(
                    first_value(
                        mesh.create_node(
                            CreateNodeRequest(node=doc(f"c{i % 6}/n{i}"), access=ALICE)
                        ),
                        timeout=WAIT,
                    )
                    for i in range(120)
                )
            )
            bulks = await asyncio.gather(
                *(
                    first_value(
                        mesh.create_nodes(
                            CreateNodesRequest(
                                nodes=[doc(f"b{i}/n{j}") for j in range(5)], access=ALICE
                            )
                        ),
                        timeout=WAIT,
                    )
                    for i in range(8)
                )
            )
            sequential = [
                await first_value(
                    mesh.create_node(CreateNodeRequest(node=doc(f"s/n{i}"), access=ALICE)),
                    timeout=WAIT,
                )
                for i in range(120)
            ]
        finally:
            mesh.dispose()
        for answer in (*concurrent, *bulks, *sequential):
            assert answer.success, answer
        assert sum(1 for a in (*concurrent, *sequential) if a.rejection_reason) == 0
        conn = await asyncpg.connect(pg_dsn, timeout=5)
        try:
            total = 0
            for partition in [*(f"c{i}" for i in range(6)), *(f"b{i}" for i in range(8)), "s"]:
                total += await conn.fetchval(
                    f'SELECT count(*) FROM "{store.schema_of(partition)}".nodes '
                    "WHERE path LIKE '%/n%'"
                )
        finally:
            await conn.close()
        assert total == 120 + 8 * 5 + 120
    assert await advisory_locks(pg_dsn, prefix) == []


async def test_stores_started_together_through_a_pooler_never_meet_a_prepared_statement_error(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    """FAILS against the old code: stores starting and working side by side through the pooler
    met raw DuplicatePreparedStatementError (42P05: asyncpg numbers its statements per client
    connection, so two clients' names clash on a shared server connection) and
    InvalidSQLStatementNameError (26000)."""
    stores = [
        PostgresStore(pgbouncer_dsn, schema_prefix=prefix, listen_dsn=pg_dsn, max_size=3)
        for _ in range(4)
    ]
    await asyncio.gather(*(store.start() for store in stores))
    try:

        async def work(index: int, store: PostgresStore) -> None:
            await asyncio.wait_for(store.write(doc(f"st/s{index}")), WAIT)
            await asyncio.gather(
                *(asyncio.wait_for(store.read(f"st/s{(index + k) % 4}"), WAIT) for k in range(8))
            )

        await asyncio.gather(*(work(i, store) for i, store in enumerate(stores)))
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_listener_behind_the_pooler_refuses_start_saying_what_is_wrong_and_the_fix(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    """FAILS against the old code: start() succeeded, the feed was silently dead, nothing was
    logged and health stayed HEALTHY. Now start() refuses, naming the cause and listen_dsn=, and
    leaves nothing open."""
    store = PostgresStore(pgbouncer_dsn, schema_prefix=prefix, heartbeat_timeout=0.5)
    with pytest.raises(ChangeFeedUnverifiedError) as refused:
        await store.start()
    message = str(refused.value)
    assert "notifications sent through the pool never reach the LISTEN connection" in message
    assert "listen_dsn=" in message
    assert "connection pooler" in message
    assert refused.value.pooled is True
    assert not is_store_unreachable(refused.value)  # a configuration error, not an outage
    assert store.pooled is True
    assert store.feed_backend_pid is None
    assert store.statistics().pool_size == 0
    stats = store.feed_statistics()
    assert stats.state is ChangeFeedState.UNVERIFIED
    assert (stats.probes_sent, stats.probes_missed, stats.probes_verified) == (1, 1, 0)
    health = ChangeFeedCheck(store)()
    assert health.status is HealthStatus.UNHEALTHY
    assert health.description.startswith("change feed unverified: ")
    with pytest.raises(RuntimeError, match="not started"):
        await asyncio.wait_for(store.read("p/a"), WAIT)


def _commit_from_another_process(dsn: str, schema: str, path: str) -> None:
    script = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        "    conn = await asyncpg.connect(sys.argv[1], statement_cache_size=0)\n"
        "    await conn.execute(\n"
        "        f'INSERT INTO \"{sys.argv[2]}\".nodes (path, version, request_id)'\n"
        "        \" VALUES ($1, 1, 'foreign')\", sys.argv[3])\n"
        "    await conn.close()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script, dsn, schema, path], check=True, timeout=30)


async def test_with_listen_dsn_a_live_query_sees_another_process_commit_through_the_pooler(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    """The negative control of the refusal above, and the issue's dead live query: the same
    store with listen_dsn= the server starts, and its live query sees a commit another process
    made through the pooler. FAILS against the old code: no Delta ever arrived."""
    async with started(pgbouncer_dsn, prefix, listen_dsn=pg_dsn) as store:
        await asyncio.wait_for(store.write(doc("live/seed")), WAIT)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="live")))
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            await asyncio.to_thread(
                _commit_from_another_process, pgbouncer_dsn, store.schema_of("live"), "live/x"
            )
            delta = await frames.next_matching(
                lambda f: "live/x" in [n.path for n in f.nodes], timeout=WAIT
            )
            assert delta.kind is FrameKind.DELTA
        finally:
            frames.dispose()
        stats = store.feed_statistics()
        assert stats.verified_at is not None
        assert stats.probe_round_trip is not None
        assert stats.probes_missed == 0
        health = ChangeFeedCheck(store)()
        assert health.status is HealthStatus.HEALTHY, health
        assert health.description.startswith("change feed verified ")
        assert "probe round trip" in health.description


async def test_an_intent_journaled_behind_a_pooler_lands_once_on_the_next_foreign_commit(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str, tmp_path: Path
) -> None:
    """The issue's lost write: writes refused as unreachable, a create answered UNAVAILABLE and
    journaled, the store restored, then ten foreign commits landed through the pooler. FAILS
    against the old code: none of them was announced (the LISTEN went through the pooler), so no
    evidence ever arrived, the intent stayed pending and the write was never made. Now the first
    foreign commit is the evidence, and the create lands exactly once."""
    async with started(pgbouncer_dsn, prefix, listen_dsn=pg_dsn, max_size=2) as inner:
        store = FaultInjectingStore(inner)
        journal = tmp_path / "journal"
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
        try:
            await mesh.create(doc("jr/seed"), access=ALICE)
            collected = Outcomes(mesh.ledger)
            store.refuse_writes_as_unreachable()
            answer = await first_value(
                mesh.create_node(CreateNodeRequest(node=doc("jr/lost"), access=ALICE)),
                timeout=WAIT,
            )
            assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
            assert len(read_journal(journal)) == 1
            store.restore()  # announces nothing: the evidence must come from the feed
            conn = await asyncpg.connect(pgbouncer_dsn, statement_cache_size=0)
            try:
                for i in range(10):
                    await conn.execute(
                        f'INSERT INTO "{inner.schema_of("jr")}".nodes (path, version)'
                        " VALUES ($1, 1)",
                        f"jr/foreign{i}",
                    )
            finally:
                await conn.close()
            outcomes = await collected.wait(1, timeout=WAIT)
            assert [(o.intent.path, o.verdict) for o in outcomes] == [("jr/lost", Verdict.LANDED)]
            assert mesh.ledger.pending() == ()
        finally:
            mesh.dispose()
        check = await asyncpg.connect(pg_dsn, timeout=5)
        try:
            rows = await check.fetchval(
                f'SELECT count(*) FROM "{inner.schema_of("jr")}".nodes WHERE path = $1',
                "jr/lost",
            )
        finally:
            await check.close()
        assert rows == 1


# -- a prepared statement the pooler broke, should one still surface ----------------------------


async def _broken_named_statement(pgbouncer_dsn: str) -> pgexc.InvalidSQLStatementNameError:
    """A REAL 26000 from the pooler: asyncpg's statement cache on (its default) through it."""
    pool = await asyncpg.create_pool(pgbouncer_dsn, min_size=4, max_size=4)
    try:
        for _ in range(200):
            results = await asyncio.gather(
                *(pool.fetchval("SELECT $1::int", i) for i in range(8)), return_exceptions=True
            )
            for result in results:
                if isinstance(result, pgexc.InvalidSQLStatementNameError):
                    return result
        raise AssertionError("no 26000 in 200 rounds through the pooler")
    finally:
        pool.terminate()


async def test_a_prepared_statement_the_pooler_broke_is_not_evaluated_never_a_verdict(
    pgbouncer_dsn: str,
) -> None:
    """26000 / 42P05 from asyncpg's own statements mean the statement never ran: the store could
    not evaluate the request. Mapped at the boundary to a transient DB frame (the one rule calls
    it unreachable: UNAVAILABLE, re-issue meaningful), saying how to fix the set-up. Negative
    controls: a 42P01 and a 23505 pass through unchanged, and stay verdicts."""
    store = PostgresStore(pgbouncer_dsn, pooled=False)
    real = await _broken_named_statement(pgbouncer_dsn)
    clash = pgexc.DuplicatePreparedStatementError(
        'prepared statement "__asyncpg_stmt_1__" already exists'
    )
    for driver_error in (real, clash):
        with pytest.raises(StoreError) as mapped:
            store._connections.raise_at_boundary(
                driver_error, operation="writing 'a/b'", stage="query"
            )
        error = mapped.value
        assert error.__cause__ is driver_error
        assert is_store_unreachable(error), error
        assert error.may_have_run is False
        assert not is_write_outcome_unknown(error)  # nothing ran: "Nothing was written" holds
        assert "pooled=True" in str(error)
    for verdict in (
        pgexc.UndefinedTableError('relation "nodes" does not exist'),
        pgexc.UniqueViolationError("duplicate key value violates unique constraint"),
    ):
        with pytest.raises(type(verdict)) as passed:
            store._connections.raise_at_boundary(verdict, operation="writing 'a/b'", stage="query")
        assert passed.value is verdict
        assert not is_store_unreachable(passed.value)


async def test_a_pooler_is_detected_by_its_backend_key_and_a_tcp_proxy_is_not(
    pg_dsn: str, pgbouncer_dsn: str, prefix: str
) -> None:
    """Detection (pooled=None): a pooler sends a backend key of its own; a plain TCP proxy
    forwards the server's pid, and is rightly not a pooler (its statements stay cached)."""
    target = urlparse(pg_dsn)
    proxy = FaultProxy(target.hostname or "127.0.0.1", target.port or 5432)
    async with proxy, started(proxy.dsn(pg_dsn), prefix) as direct:
        assert direct.pooled is False
        assert direct.statistics().statement_cache_size == 100
    async with started(pgbouncer_dsn, prefix, listen_dsn=pg_dsn) as pooled:
        stats = pooled.statistics()
        assert (stats.pooled, stats.statement_cache_size) == (True, 0)
        assert stats.pooler_evidence is not None
        assert "is not the pid" in stats.pooler_evidence
        assert stats.listen_target == pooled.name.replace(
            f":{urlparse(pgbouncer_dsn).port}", f":{target.port or 5432}"
        )
    async with started(pgbouncer_dsn, prefix, listen_dsn=pg_dsn, pooled=True) as given:
        assert given.statistics().pooler_evidence == "given"
