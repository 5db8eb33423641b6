"""Defects found by the reliability suite, each pinned by a failing test (xfail strict).

When the integrator fixes one, its test starts passing, strict xfail turns that into a failure,
and the mark is removed.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlparse

import asyncpg
import pytest

from rxmesh import AccessContext, MeshNode
from rxmesh.aio import first_value
from rxmesh.faults import is_store_unreachable
from rxmesh.operations import CreateNodesRequest, RejectionReason
from rxmesh.providers.postgres import PostgresStore
from tests.mesh.conftest import make_mesh
from tests.reliability.test_matrix import BULK_DROPS_THE_TIMEOUT

ALICE = AccessContext(user="alice")


def _cancelled_by_a_timeout() -> BaseException:
    exc = asyncio.CancelledError()
    exc.__cause__ = TimeoutError("the caller's time box fired")
    return exc


@pytest.mark.xfail(strict=True, reason=BULK_DROPS_THE_TIMEOUT)
async def test_a_bulk_create_cancelled_by_a_timeout_is_a_fault_not_a_cancellation() -> None:
    mesh, store = make_mesh()
    store.refuse_reads_as_unreachable(_cancelled_by_a_timeout)
    nodes = [MeshNode(path="p/a", content={}), MeshNode(path="p/b", content={})]
    response = await first_value(
        mesh.create_nodes(CreateNodesRequest(nodes=nodes, access=ALICE)), timeout=5.0
    )
    assert response.rejection_reason is RejectionReason.UNKNOWN
    assert "cancelled before it completed" not in (response.error or "")


async def test_a_bulk_create_cancelled_cooperatively_is_answered_cancelled() -> None:
    """The negative control: a plain cancellation IS a cancellation (no pending write)."""
    mesh, store = make_mesh()
    store.refuse_reads_as_unreachable(asyncio.CancelledError)
    nodes = [MeshNode(path="p/a", content={}), MeshNode(path="p/b", content={})]
    response = await first_value(
        mesh.create_nodes(CreateNodesRequest(nodes=nodes, access=ALICE)), timeout=5.0
    )
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "cancelled before it completed" in (response.error or "")
    assert not mesh.ledger.pending()


INTERNAL_CLIENT_ERROR_UNMAPPED = (
    "rxmesh/providers/postgres.py: _run()/_raise_at_boundary() do not map "
    "asyncpg.exceptions.InternalClientError. When a pooled connection's backend was just "
    "terminated (the FATAL 57P01 is being consumed: protocol state 2, ERROR_CONSUME) and the "
    "connection is handed out before asyncpg has seen the socket close, the next call raises "
    "InternalClientError('cannot switch to state 11/12; another operation (2) is in progress') "
    "BEFORE sending anything. It escapes raw, so the mesh answers UNKNOWN 'Unexpected error' "
    "(seen in the chaos soak) instead of retrying a lost connection. Fix: add "
    "pgexc.InternalClientError to the faults _run catches and, in _raise_at_boundary, "
    "terminate() the connection and raise StoreError(sqlstate='08006', transient=True, "
    "may_have_run=False) from it (classify by type and connection, not by message)."
)


@pytest.mark.postgres
@pytest.mark.xfail(strict=True, reason=INTERNAL_CLIENT_ERROR_UNMAPPED)
async def test_a_call_on_a_just_terminated_pooled_connection_is_a_transient_store_error(
    private_db: str,
) -> None:
    database = urlparse(private_db).path.lstrip("/")
    store = PostgresStore(
        private_db, schema_prefix=f"rxp{uuid.uuid4().hex[:8]}_", min_size=1, max_size=1
    )
    await store.start()
    admin = await asyncpg.connect(private_db, timeout=5.0)
    failures: list[BaseException] = []
    try:
        await first_value(store.write(MeshNode(path="p/a", content={}, version=1)), timeout=5.0)
        for delay in (0.0, 0.0002, 0.0005, 0.001) * 10:
            await first_value(store.read("p/a"), timeout=5.0)  # the pool connection is up
            await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name = 'rxmesh'",
                database,
            )
            await asyncio.sleep(delay)
            try:
                await first_value(store.read("p/a"), timeout=5.0)
            except Exception as exc:
                failures.append(exc)
    finally:
        await admin.close()
        await store.close()
    unclassified = [f for f in failures if not is_store_unreachable(f)]
    assert not unclassified, f"{len(unclassified)} of 40: {unclassified[:3]!r}"
