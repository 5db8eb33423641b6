"""A bulk whose writes never left is not "partially landed" by another attempt's row.

Found by the model-based check while the mesh was rebuilt (issue 15): a bulk by the system ran
beside its own retry while writes were refused; the retry landed the row, and the first
attempt's probe (every write of it refused: none of them ran) counted that row, which carries
the same request id, as its own partial landing — UNKNOWN for valid input. The interleaving is
forced here: the row lands between the refused write and the probe. This test FAILS against
the code before the fix (commit e759aac answers UNKNOWN "partially landed"); the negative
control puts that rule back and sees UNKNOWN again.
"""

from __future__ import annotations

from typing import Any

import pytest

from rxmesh import Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.mesh import _bulk
from rxmesh.operations import CreateNodesRequest, CreateNodesResponse, RejectionReason
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore

from .conftest import ALICE, FAST


def _landing_before_the_probe(
    monkeypatch: pytest.MonkeyPatch, inner: InMemoryStore, row: MeshNode
) -> None:
    """The concurrent attempt of the same request lands ``row`` just before the probe reads."""
    real = _bulk.call

    async def call(store: Any, operation: str, *args: Any) -> Any:
        if operation == "read_many":
            await first_value(inner.write(row))
        return await real(store, operation, *args)

    monkeypatch.setattr(_bulk, "call", call)


async def _bulk_beside_its_retry(monkeypatch: pytest.MonkeyPatch) -> CreateNodesResponse:
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    mesh = Mesh(store, retry_delays=FAST)
    seed = CreateNodesRequest(nodes=(MeshNode(path="beta/a", content={}),), access=ALICE)
    assert (await first_value(mesh.create_nodes(seed))).success
    request = CreateNodesRequest(nodes=(MeshNode(path="beta/b", content={}),), access=ALICE)
    row = MeshNode(
        path="beta/b", content={}, created_by="alice", version=1, request_id=request.request_id
    )
    _landing_before_the_probe(monkeypatch, inner, row)
    store.refuse_writes_as_unreachable()
    return await first_value(mesh.create_nodes(request), timeout=10)


async def test_a_refused_bulk_answers_another_attempts_row_as_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    response = await _bulk_beside_its_retry(monkeypatch)
    assert response.rejection_reason is RejectionReason.UNAVAILABLE, response
    assert [node.path for node in response.created] == ["beta/b"]
    assert response.not_created == ()
    assert "partially landed" not in (response.error or "")


async def test_negative_control_counting_that_row_as_landed_answers_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_bulk, "is_write_outcome_unknown", lambda exc: True)
    response = await _bulk_beside_its_retry(monkeypatch)
    assert response.rejection_reason is RejectionReason.UNKNOWN, response
    assert "partially landed" in (response.error or "")
