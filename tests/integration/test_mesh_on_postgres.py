"""The mesh over a real PostgreSQL: honest answers through real faults, and pending writes that
land once after a real outage of a private cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from rxmesh import CreateNodeRequest, Mesh, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger, read_journal
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy, TemporaryPostgresCluster
from tests.helpers import ALICE, Outcomes, doc

pytestmark = pytest.mark.postgres

FAST = (0.01, 0.01, 0.01)


async def count_rows(dsn: str, schema: str, path: str) -> int:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        value = await conn.fetchval(f'SELECT count(*) FROM "{schema}".nodes WHERE path = $1', path)
    finally:
        await conn.close()
    return int(value)


async def test_an_ambiguous_commit_is_answered_created_once_with_no_duplicate_row(
    pg_dsn: str, proxy: FaultProxy, prefix: str
) -> None:
    store = PostgresStore(proxy.dsn(pg_dsn), schema_prefix=prefix, max_size=2)
    await store.start()
    try:
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
        await mesh.create(doc("amb/seed"), access=ALICE)
        marker = "AMBIGUOUS-COMMIT-7f3a"
        # The INSERT carrying the marker reaches the server and commits; its reply never returns.
        proxy.reset_after_client_sends(marker.encode())
        response = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc("amb/x", marker=marker), access=ALICE)),
            timeout=20,
        )
        assert response.success, response
        assert response.node is not None
        assert response.node.request_id == response.request_id
        assert await count_rows(pg_dsn, store.schema_of("amb"), "amb/x") == 1
        assert mesh.ledger.pending() == ()
    finally:
        await store.close()


async def test_a_refused_connection_is_unavailable_and_journaled_then_lands_on_a_gap(
    pg_dsn: str, proxy: FaultProxy, prefix: str, tmp_path: Path
) -> None:
    store = PostgresStore(
        proxy.dsn(pg_dsn),
        schema_prefix=prefix,
        max_size=2,
        connect_timeout=2.0,
        heartbeat_interval=0.2,
        heartbeat_timeout=1.0,
        reconnect_backoff=(0.05, 0.1),
    )
    await store.start()
    try:
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(tmp_path / "journal"))
        await mesh.create(doc("out/seed"), access=ALICE)
        collected = Outcomes(mesh.ledger)
        proxy.refuse()
        proxy.reset()  # the pool's and the listener's connections die; new ones are refused
        response = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc("out/b"), access=ALICE)), timeout=20
        )
        assert response.rejection_reason is RejectionReason.UNAVAILABLE, response
        assert "Nothing was written" in (response.error or "")
        assert len(read_journal(tmp_path / "journal")) == 1
        await proxy.restore()
        # The listener reconnects, re-LISTENs and declares a gap: that is the evidence.
        outcomes = await collected.wait(1, timeout=20)
        assert [(o.intent.path, o.verdict) for o in outcomes] == [("out/b", Verdict.LANDED)]
        assert await count_rows(pg_dsn, store.schema_of("out"), "out/b") == 1
        assert mesh.ledger.pending() == ()
        mesh.ledger.close()  # the caller's ledger: closing commits the settled removal
        assert read_journal(tmp_path / "journal") == ()
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_stopped_private_cluster_creates_journal_then_all_land_once_after_it_starts(
    pg_dsn: str, tmp_path: Path
) -> None:
    cluster = TemporaryPostgresCluster()
    await asyncio.to_thread(cluster.start)
    try:
        store = PostgresStore(
            cluster.dsn,
            max_size=2,
            connect_timeout=1.0,
            heartbeat_interval=0.2,
            heartbeat_timeout=1.0,
            reconnect_backoff=(0.1, 0.2, 0.4),
        )
        await store.start()
        try:
            journal = tmp_path / "journal"
            mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
            await mesh.create(doc("rst/seed"), access=ALICE)
            collected = Outcomes(mesh.ledger)
            await asyncio.to_thread(cluster.stop, "fast")
            paths = [f"rst/n{i}" for i in range(5)]
            answers = [
                await first_value(
                    mesh.create_node(CreateNodeRequest(node=doc(p), access=ALICE)), timeout=20
                )
                for p in paths
            ]
            assert {a.rejection_reason for a in answers} == {RejectionReason.UNAVAILABLE}
            assert len(read_journal(journal)) == len(paths)
            await asyncio.to_thread(cluster.start)
            outcomes = await collected.wait(len(paths), timeout=30)
            assert sorted((o.intent.path, o.verdict) for o in outcomes) == [
                (p, Verdict.LANDED) for p in sorted(paths)
            ]
            conn = await asyncpg.connect(cluster.dsn, timeout=5)
            try:
                duplicates = await conn.fetchval(
                    f'SELECT count(*) FROM (SELECT path FROM "{store.schema_of("rst")}".nodes '
                    "GROUP BY path HAVING count(*) > 1) d"
                )
                landed = await conn.fetchval(
                    f'SELECT count(*) FROM "{store.schema_of("rst")}".nodes '
                    "WHERE path LIKE 'rst/n%'"
                )
            finally:
                await conn.close()
            assert duplicates == 0
            assert landed == len(paths)
            assert mesh.ledger.pending() == ()
            mesh.ledger.close()  # the caller's ledger: closing commits the settled removal
            assert read_journal(journal) == ()
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(cluster.cleanup)
