"""A bulk's partial landing, in one place: what counts as this attempt's landing, and how the
terminal arm answers it (UNKNOWN naming what landed, before the store-unreachable branch).

Other folders test the partial landing from their own side and keep those tests: the wording
(tests/test_faults.py), the import report (tests/importer/test_importer.py), the state
machine's found cases (tests/machine/test_found.py) and the pinned reliability finding
(tests/reliability/test_pinned.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops

from rxmesh import CreateNodesRequest, CreateNodesResponse, Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh import _bulk
from rxmesh.mesh._arms import Landing
from rxmesh.mesh._bulk import Bulk
from rxmesh.mesh._core import MeshCore
from rxmesh.model import WindowCommitted
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from rxmesh.testing._fault_store import unreachable_error
from tests.helpers import ALICE, BOB, doc

from .conftest import FAST, make_mesh


async def ask(mesh: Mesh, request: object) -> CreateNodesResponse:
    return await first_value(mesh.create_nodes(request), timeout=10)  # type: ignore[arg-type]


def nodes(prefix: str, count: int) -> tuple[MeshNode, ...]:
    return tuple(
        MeshNode(path=f"{prefix}/n{i:05d}", node_type="Doc", content={"i": i}) for i in range(count)
    )


# ---------------------------------------------------------------- windows that committed


class _SecondWindowFails(InMemoryStore):
    """Commits the first window, then the store goes away (its own transaction per window)."""

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = 1000
    ) -> Observable[WindowCommitted]:
        first_window = super().write_many(nodes[:window], window)
        return first_window.pipe(ops.concat(reactivex.throw(unreachable_error("memory"))))


async def _second_window_fails() -> tuple[Mesh, tuple[MeshNode, ...], CreateNodesResponse]:
    store = FaultInjectingStore(_SecondWindowFails())
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
    batch = nodes("acme", 25)
    response = await ask(mesh, CreateNodesRequest(nodes=batch, access=ALICE, window=10))
    return mesh, batch, response


async def test_a_second_window_failing_after_the_first_committed_is_a_partial_landing(
    log_records: list[dict[str, object]],
) -> None:
    mesh, batch, response = await _second_window_fails()
    assert response.rejection_reason is RejectionReason.UNKNOWN
    assert [n.path for n in response.created] == [n.path for n in batch[:10]]
    assert [n.path for n in response.not_created] == [n.path for n in batch[10:]]
    assert "Nothing was written" not in (response.error or "")
    assert "partially landed" in (response.error or "")
    assert any(r["extra"].get("event") == "partial_landing" for r in log_records)  # type: ignore[union-attr]
    # Intents only for what did not land, never for what did.
    assert sorted(p.node.path for p in mesh.ledger.pending()) == [n.path for n in batch[10:]]


async def test_negative_control_a_landing_not_told_to_the_arm_is_answered_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The arm answers the partial landing first only because the bulk tells it what landed:
    with the count dropped, the same fault is the store-unreachable branch's UNAVAILABLE."""
    real = Bulk.landing

    async def landing(self: Bulk, *args: Any) -> Landing:
        told = await real(self, *args)
        return Landing(told.fields)

    monkeypatch.setattr(Bulk, "landing", landing)
    _, _, response = await _second_window_fails()
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "partially landed" not in (response.error or "")


async def test_a_write_failing_before_any_window_committed_may_have_partially_landed() -> None:
    mesh, store = make_mesh()
    store.refuse_writes_as_unreachable()
    batch = nodes("acme", 3)
    # The partition must exist already, so the only write is the bulk one.
    store.restore()
    assert (await ask(mesh, CreateNodesRequest(nodes=nodes("acme", 1), access=ALICE))).success
    store.refuse_writes_as_unreachable()
    response = await ask(mesh, CreateNodesRequest(nodes=batch[1:], access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "Nothing was written" not in (response.error or "")
    assert "Read the current state before retrying" in (response.error or "")


# ---------------------------------------------------------------- rows of an earlier attempt


async def test_a_verbatim_bulk_reissue_gets_a_verdict_not_a_partial_landing() -> None:
    """FAILS against the old bulk: the row an earlier attempt of the same request wrote
    (``alpha/a``) was counted as landed by this attempt, so the refusal in ``beta`` became
    UNKNOWN "partially landed ... the data store became unreachable" with no fault at all."""
    mesh, store = make_mesh()
    await mesh.create(doc("beta/b"), access=BOB)  # bob's partition, bob's row
    request = CreateNodesRequest(nodes=(doc("alpha/a"), doc("beta/b")), access=ALICE)
    first = await first_value(mesh.create_nodes(request))
    assert first.success
    assert first.already_present == ("beta/b",)
    await mesh.delete("beta/b", access=BOB)
    again = await first_value(mesh.create_nodes(request))  # the same request, verbatim
    assert again.rejection_reason is RejectionReason.FORBIDDEN, again
    assert "partially landed" not in (again.error or "")
    assert [n.path for n in again.created] == ["alpha/a"]  # this request's row, from before
    assert [n.path for n in again.not_created] == ["beta/b"]


async def test_a_verbatim_bulk_reissue_with_writes_refused_is_unavailable() -> None:
    """FAILS against the old bulk (UNKNOWN "1 created" for the earlier attempt's row)."""
    mesh, store = make_mesh()
    request = CreateNodesRequest(nodes=(doc("alpha/a"), doc("alpha/b")), access=ALICE)
    await mesh.create(doc("alpha/seed"), access=ALICE)
    await first_value(mesh.create_nodes(request.model_copy(update={"nodes": (doc("alpha/a"),)})))
    store.refuse_writes_as_unreachable()
    again = await first_value(mesh.create_nodes(request))
    assert again.rejection_reason is RejectionReason.UNAVAILABLE, again
    assert [n.path for n in again.not_created] == ["alpha/b"]


# ---------------------------------------------------------------- a concurrent attempt's row
#
# Found by the model-based check while the mesh was rebuilt coroutine-first: a bulk by the
# system ran beside its own retry while writes were refused; the retry landed the row, and the
# first attempt's probe (every write of it refused: none of them ran) counted that row, which
# carries the same request id, as its own partial landing: UNKNOWN for valid input. The
# interleaving is forced here: the row lands between the refused write and the probe. The first
# test FAILS against the code before the fix (commit e759aac answers UNKNOWN "partially
# landed"); the negative control puts that rule back and sees UNKNOWN again.


def _landing_before_the_probe(
    monkeypatch: pytest.MonkeyPatch, inner: InMemoryStore, row: MeshNode
) -> None:
    """The concurrent attempt of the same request lands ``row`` just before the probe (the one
    call a fault path asks without retry) reads."""
    real = MeshCore.ask_once

    async def landed_first(core: MeshCore, operation: str, *args: Any) -> Any:
        if operation == "read_many":
            await inner.write(row)
        return await real(core, operation, *args)

    monkeypatch.setattr(MeshCore, "ask_once", landed_first)


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
