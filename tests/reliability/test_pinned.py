"""Defects found by the reliability suite, each pinned by a failing test (xfail strict).

When the integrator fixes one, its test starts passing, strict xfail turns that into a failure,
and the mark is removed.
"""

from __future__ import annotations

import asyncio

import pytest

from rxmesh import AccessContext, MeshNode
from rxmesh.aio import first_value
from rxmesh.operations import CreateNodesRequest, RejectionReason
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
