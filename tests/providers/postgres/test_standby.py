"""Issue 14: a DSN that reaches a read-only standby, target_session_attrs, and a real failover.

Real streaming replication on throwaway clusters (never the shared server): a primary started by
:class:`~rxmesh.testing.TemporaryPostgresCluster` and a standby made from it with
``pg_basebackup -R`` (``TemporaryPostgresCluster.standby()``), promoted for the failover.

The decision (docs/providers.md, "Behind a pooler, and during a failover"): a statement refused
with 25006 because the server is a standby (or in read-only mode) was never evaluated; the primary
is elsewhere, so it is an availability failure, not a verdict on the request. The provider maps
it at its boundary to a transient ``StoreError`` (sqlstate 08000, ``may_have_run=False``); the one
rule in rxmesh/faults.py is unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from rxmesh import CreateNodeRequest, Mesh, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.exceptions import StoreError
from rxmesh.faults import is_store_unreachable, is_write_outcome_unknown
from rxmesh.ledger import PendingWriteLedger, read_journal
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy, TemporaryPostgresCluster
from tests.conftest import throwaway_cluster
from tests.helpers import ALICE, Outcomes
from tests.providers.postgres.kinds import FAST, QUICK, doc

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WAIT = 20.0


@pytest.fixture(scope="module")
def primary() -> Iterator[TemporaryPostgresCluster]:
    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture
async def standby(primary: TemporaryPostgresCluster) -> AsyncIterator[TemporaryPostgresCluster]:
    replica = await asyncio.to_thread(primary.standby)
    try:
        await asyncio.to_thread(replica.start)
        yield replica
    finally:
        await asyncio.to_thread(replica.cleanup)


def _hosts(*clusters: TemporaryPostgresCluster) -> str:
    hosts = ",".join(f"127.0.0.1:{c.port}" for c in clusters)
    return f"postgresql://postgres@{hosts}/postgres"


async def _in_recovery(dsn: str) -> bool:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        return bool(await conn.fetchval("SELECT pg_is_in_recovery()"))
    finally:
        await conn.close()


async def test_a_store_whose_dsn_reaches_a_standby_refuses_start_as_unreachable(
    standby: TemporaryPostgresCluster,
) -> None:
    """By default the store refuses a server that cannot take writes when connecting (asyncpg's
    ``target_session_attrs='read-write'``, decided from what the server reports at login): no
    connection to a standby is ever opened, let alone pooled. Unreachable, nothing ran.

    With ``target_session_attrs='any'`` the connection is made and the first statement that
    writes meets 25006 ("cannot execute LISTEN during recovery"), which FAILED against the code
    before issue 14 as a raw ReadOnlySQLTransactionError the one rule refuses; it is mapped to
    the same unreachable answer, and the text says what to do."""
    assert await _in_recovery(standby.dsn)
    store = PostgresStore(standby.dsn, **QUICK)
    assert store.statistics().target_session_attrs == "read-write"
    with pytest.raises(StoreError) as refused:
        await store.start()
    error = refused.value
    assert is_store_unreachable(error), repr(error)
    assert error.may_have_run is False
    assert error.sqlstate == "08001"
    assert isinstance(error.__cause__, asyncpg.exceptions.TargetServerAttributeNotMatched)
    assert "target_session_attrs='read-write' (a standby" in str(error)
    assert store.feed_backend_pid is None

    anywhere = PostgresStore(standby.dsn, target_session_attrs="any", **QUICK)
    with pytest.raises(StoreError) as listened:
        await anywhere.start()
    error = listened.value
    assert is_store_unreachable(error), repr(error)
    assert error.may_have_run is False
    assert isinstance(error.__cause__, asyncpg.exceptions.ReadOnlySQLTransactionError)
    assert "standby in recovery" in str(error)
    assert "target_session_attrs='read-write'" in str(error)
    assert anywhere.feed_backend_pid is None


async def test_the_default_session_attrs_give_way_to_the_dsn_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default applies only where nothing names one: the argument wins, then the DSN's
    ``target_session_attrs``, then ``PGTARGETSESSIONATTRS`` (both read by asyncpg itself, so
    the store passes nothing). Negative control: a plain DSN gets "read-write"."""
    dsn = "postgresql://postgres@127.0.0.1:1/postgres"
    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    assert PostgresStore(dsn).statistics().target_session_attrs == "read-write"
    assert PostgresStore(dsn, target_session_attrs="any").statistics().target_session_attrs == (
        "any"
    )
    in_dsn = PostgresStore(dsn + "?target_session_attrs=primary")
    assert in_dsn.statistics().target_session_attrs is None
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "prefer-standby")
    assert PostgresStore(dsn).statistics().target_session_attrs is None


async def test_target_session_attrs_read_write_skips_a_standby_listed_first(
    primary: TemporaryPostgresCluster, standby: TemporaryPostgresCluster
) -> None:
    """With every host listed and target_session_attrs='read-write' (the default), the pool and
    the listener both pick the primary. Negative controls: with 'any' the first host (the
    standby) is used and start() refuses; with only the standby listed, no host matches (08001,
    unreachable)."""
    dsn = _hosts(standby, primary)
    async with PostgresStore(dsn, target_session_attrs="read-write", **QUICK) as store:
        assert store.name == (
            f"postgres@127.0.0.1:{standby.port},127.0.0.1:{primary.port}/postgres"
        )
        written = await asyncio.wait_for(store.write(doc("tsa/a")), WAIT)
        assert written.path == "tsa/a"
        assert store.statistics().target_session_attrs == "read-write"
        conn = await asyncpg.connect(primary.dsn, timeout=5)
        try:
            listener = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", store.feed_backend_pid
            )
        finally:
            await conn.close()
        assert listener == 1  # the LISTEN connection is on the primary
    with pytest.raises(StoreError) as first_host:
        await PostgresStore(dsn, target_session_attrs="any", **QUICK).start()
    assert "standby" in str(first_host.value)
    with pytest.raises(StoreError) as no_primary:
        await PostgresStore(
            _hosts(standby), target_session_attrs="read-write", **QUICK
        ).start()
    assert no_primary.value.sqlstate == "08001"
    assert is_store_unreachable(no_primary.value)
    assert "target_session_attrs='read-write'" in str(no_primary.value)
    with pytest.raises(ValueError, match="target_session_attrs"):
        PostgresStore(dsn, target_session_attrs="primary-ish")


async def test_a_write_that_reaches_a_standby_in_a_failover_is_unavailable_then_lands_once(
    primary: TemporaryPostgresCluster, standby: TemporaryPostgresCluster, tmp_path: Path
) -> None:
    """A failover as it looks from the client: the address the store uses (a proxy standing in
    for a virtual IP or a DNS name) moves to the standby before it is promoted. A create then
    meets 25006: it is answered UNAVAILABLE (not evaluated, nothing written) and journaled. The
    standby is promoted; the listener re-connects, LISTENs, verifies a probe and declares the
    gap; the intent is re-issued once and LANDS on the new primary. FAILS against the old code:
    the 25006 passed through raw, so the create answered UNKNOWN and nothing was recorded."""
    async with FaultProxy("127.0.0.1", primary.port) as proxy:
        store = PostgresStore(proxy.dsn(primary.dsn), **QUICK)
        await store.start()
        journal = tmp_path / "journal"
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
        primary_stopped = False
        try:
            await mesh.create(doc("fo/seed"), access=ALICE)
            schema = store.schema_of("fo")
            await _replayed(standby, schema)
            collected = Outcomes(mesh.ledger)

            proxy.retarget("127.0.0.1", standby.port)  # the address now reaches the standby
            proxy.reset()
            answer = await first_value(
                mesh.create_node(CreateNodeRequest(node=doc("fo/during"), access=ALICE)),
                timeout=WAIT,
            )
            assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
            assert "Nothing was written" in (answer.error or "")
            assert answer.outcome_unknown is False
            assert answer.recorded_for_reissue is True
            assert len(read_journal(journal)) == 1
            with pytest.raises(StoreError) as refused:
                await asyncio.wait_for(store.write(doc("fo/direct")), WAIT)
            assert is_store_unreachable(refused.value)
            assert not is_write_outcome_unknown(refused.value)
            assert "target_session_attrs='read-write' (a standby" in str(refused.value)

            await asyncio.to_thread(primary.stop, "fast")  # the old primary is gone
            primary_stopped = True
            await asyncio.to_thread(standby.promote)  # the failover completes
            outcomes = await collected.wait(1, timeout=WAIT)
            assert [(o.intent.path, o.verdict) for o in outcomes] == [
                ("fo/during", Verdict.LANDED)
            ]
        finally:
            mesh.dispose()
            await store.close()
            if primary_stopped:
                await asyncio.to_thread(primary.start)  # the module's primary, for later tests
    conn = await asyncpg.connect(standby.dsn, timeout=5)
    try:
        rows = await conn.fetch(f'SELECT path FROM "{schema}".nodes ORDER BY path')
    finally:
        await conn.close()
    paths = [r["path"] for r in rows]
    assert paths.count("fo/during") == 1
    assert "fo/seed" in paths


async def _replayed(standby: TemporaryPostgresCluster, schema: str) -> None:
    """Wait (bounded) until the standby replayed the creation of ``schema``."""
    replica = await asyncpg.connect(standby.dsn, timeout=5)
    try:
        async with asyncio.timeout(WAIT):
            while not await replica.fetchval(  # noqa: ASYNC110 - replication's pace
                "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema
            ):
                await asyncio.sleep(0.02)
    finally:
        await replica.close()


@pytest.mark.parametrize("attrs", [None, "any"])
async def test_the_pool_leaves_a_standby_when_the_address_leads_back_to_the_primary(
    primary: TemporaryPostgresCluster,
    standby: TemporaryPostgresCluster,
    tmp_path: Path,
    attrs: str | None,
) -> None:
    """The address (a proxy standing in for a VIP or a DNS name) moves to the standby and BACK,
    without the standby's connections being reset (a VIP that moves back leaves them open).
    While it leads to the standby, creates answer UNAVAILABLE and are recorded. Once it leads
    to the primary again, the connections that answered 25006 are gone (closed, not pooled),
    so the next create lands, the feed's probe gets through the pool, the gap is declared and
    every recorded intent LANDS, within a few seconds.

    Fails at 1d389e8 because a connection that answered 25006 went back to the pool: every
    later write and every probe took it again and met the standby (for minutes), nothing was
    declared, and the intents stayed pending. The negative control is the first half: while
    the address leads to the standby, nothing is re-issued and the creates are UNAVAILABLE.

    Both ways in: by default (``None``: "read-write") a connection to the standby is refused
    at login, so reads are refused too and nothing of the standby is pooled (at 12da15c reads
    answered from the standby and kept its connections pooled until a write met 25006); with
    ``"any"`` reads answer from the standby and 25006 closes what a write met."""
    part = f"back{attrs or ''}"
    async with FaultProxy("127.0.0.1", primary.port) as proxy:
        store = PostgresStore(
            proxy.dsn(primary.dsn),
            pooled=False,
            max_size=3,
            target_session_attrs=attrs,
            **QUICK,
        )
        await store.start()
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(tmp_path / "journal"))
        schema = store.schema_of(part)
        try:
            await mesh.create(doc(f"{part}/seed"), access=ALICE)
            await _replayed(standby, schema)
            collected = Outcomes(mesh.ledger)

            proxy.retarget("127.0.0.1", standby.port)
            proxy.reset()  # the move drops what was open; new connections reach the standby
            during = [f"{part}/during-{n}" for n in range(3)]
            for path in during:
                answer = await first_value(
                    mesh.create_node(CreateNodeRequest(node=doc(path), access=ALICE)),
                    timeout=WAIT,
                )
                assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
                assert answer.recorded_for_reissue is True
                assert answer.outcome_unknown is False
            if attrs == "any":
                # Reads answer on a standby: they leave its connections in the pool.
                await asyncio.gather(*(store.read(f"{part}/seed") for _ in range(3)))
            else:
                # By default no connection to it is opened: a read is refused as unreachable
                # rather than answered from a standby.
                with pytest.raises(StoreError) as read_refused:
                    await asyncio.wait_for(store.read(f"{part}/seed"), WAIT)
                assert is_store_unreachable(read_refused.value)
                assert read_refused.value.sqlstate == "08001"
            assert collected.got == []  # nothing re-issued while the address leads to a standby

            proxy.retarget("127.0.0.1", primary.port)  # back, the standby's connections kept
            outcomes = await collected.wait(len(during), timeout=10.0)
            assert sorted((o.intent.path, o.verdict) for o in outcomes) == [
                (path, Verdict.LANDED) for path in during
            ]
            after = await first_value(
                mesh.create_node(CreateNodeRequest(node=doc(f"{part}/after"), access=ALICE)),
                timeout=WAIT,
            )
            assert after.success, after
        finally:
            mesh.dispose()
            await store.close()
    conn = await asyncpg.connect(primary.dsn, timeout=5)
    try:
        rows = await conn.fetch(f'SELECT path FROM "{schema}".nodes ORDER BY path')
    finally:
        await conn.close()
    docs = [r["path"] for r in rows if r["path"].startswith(f"{part}/") and "/_" not in r["path"]]
    assert docs == [f"{part}/after", *during, f"{part}/seed"]  # each once
