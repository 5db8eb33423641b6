"""End to end with the real Mesh: an UNAVAILABLE create is recorded, re-issued once on evidence,
and settled with a verdict (SPEC §5)."""

from __future__ import annotations

from pathlib import Path

from reactivex.testing import TestScheduler

from rxmesh import AccessContext, CreateNodeRequest, Mesh, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.exceptions import StoreError
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome, read_journal
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore, unreachable_error
from tests.helpers import ALICE, BOB, Outcomes, doc

from .conftest import FAST, make_mesh


async def seeded_outage(**options: object) -> tuple[Mesh, FaultInjectingStore]:
    mesh, store = make_mesh(**options)
    await mesh.create(doc("acme/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    return mesh, store


async def test_an_unavailable_create_is_reissued_once_and_lands() -> None:
    mesh, store = await seeded_outage()
    response = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE))
    )
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert [p.path for p in mesh.ledger.pending()] == ["acme/b"]

    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("listener resumed")
    outcomes = await collected.wait(1)
    assert [(o.intent.path, o.verdict) for o in outcomes] == [("acme/b", Verdict.LANDED)]
    rows = [n for n in store.inner.nodes("acme") if n.path == "acme/b"]
    assert len(rows) == 1
    assert rows[0].request_id == response.request_id
    assert rows[0].created_by == "alice"
    assert mesh.ledger.pending() == ()


async def test_negative_control_without_recording_nothing_is_recorded_and_nothing_lands() -> None:
    mesh, store = await seeded_outage(record_pending_writes=False)
    response = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE))
    )
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert mesh.ledger.pending() == ()
    store.restore()
    store.declare_gap("listener resumed")  # evidence is handled synchronously: take_all runs now
    assert mesh.ledger.statistics().taken == 0
    assert mesh.recovery is not None
    assert mesh.recovery.reissuing == 0
    assert await store.read("acme/b") is None


async def test_within_pending_writes_unrecorded_an_unavailable_create_is_not_recorded() -> None:
    """What a drill uses to lose one intent on purpose: inside the block nothing is recorded
    (the answer says so), and recording comes back after it."""
    mesh, _ = await seeded_outage()
    with mesh.pending_writes_unrecorded():
        assert not mesh.record_pending_writes
        lost = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc("acme/lost"), access=ALICE))
        )
    assert lost.rejection_reason is RejectionReason.UNAVAILABLE
    assert not lost.recorded_for_reissue
    assert "does not record pending writes" in (lost.error or "")
    assert mesh.ledger.pending() == ()
    assert mesh.record_pending_writes
    kept = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("acme/kept"), access=ALICE))
    )
    assert kept.recorded_for_reissue  # the control: outside the block, the same create is
    assert [p.path for p in mesh.ledger.pending()] == ["acme/kept"]


async def test_no_evidence_no_reissue_even_an_hour_later() -> None:
    scheduler = TestScheduler()
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, scheduler=scheduler, retry_delays=(), ledger=PendingWriteLedger(""))
    await mesh.create(doc("acme/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    response = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE))
    )
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    store.restore()  # the store is back, but says nothing
    store.clear_log()
    scheduler.advance_by(3600.0)
    assert mesh.ledger.statistics().taken == 0
    assert store.writes_attempted() == []
    assert [p.path for p in mesh.ledger.pending()] == ["acme/b"]


async def test_already_present_when_the_caller_created_it_meanwhile() -> None:
    mesh, store = await seeded_outage()
    await first_value(mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE)))
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.hold_change_feed()  # the caller's own create must not be the evidence here
    await mesh.create(doc("acme/b"), access=ALICE)  # a fresh request id
    store.drop_change_feed()
    store.resume_change_feed(announce_gap=False)
    store.declare_gap("listener resumed")
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.ALREADY_PRESENT


async def test_dropped_when_the_reissue_meets_unavailable_again_and_not_recorded_again() -> None:
    mesh, store = await seeded_outage()
    await first_value(mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE)))
    collected = Outcomes(mesh.ledger)
    store.declare_gap("flapping")  # evidence, but writes are still refused
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.DROPPED
    assert outcome.reason is RejectionReason.UNAVAILABLE
    assert mesh.ledger.pending() == ()


async def test_the_original_access_context_is_used_a_revoked_grant_drops_as_forbidden() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("acme/seed"), access=ALICE)
    grant = MeshNode(path="acme/_access/bob", node_type="Grant", content={"permissions": ["*"]})
    await mesh.create(grant, access=AccessContext.system())
    store.refuse_writes_as_unreachable()
    await first_value(mesh.create_node(CreateNodeRequest(node=doc("acme/bob1"), access=BOB)))
    assert [p.requester for p in mesh.ledger.pending()] == ["bob"]
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.drop_change_feed()
    await mesh.delete("acme/_access/bob", access=AccessContext.system())
    store.resume_change_feed(announce_gap=False)
    store.declare_gap("listener resumed")
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.DROPPED
    assert outcome.reason is RejectionReason.FORBIDDEN
    assert await store.read("acme/bob1") is None


async def test_a_restart_reissues_a_journaled_intent(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    first = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
    await first.create(doc("acme/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    await first_value(first.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE)))
    first.dispose()
    first.ledger.close()  # as a process that ends would leave it
    assert [i.path for i in read_journal(journal)] == ["acme/b"]

    store.restore()
    second = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
    assert [p.path for p in second.ledger.pending()] == ["acme/b"]
    collected = Outcomes(second.ledger)
    store.declare_gap("restarted")
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.LANDED
    second.dispose()
    second.ledger.close()  # the caller's ledger: closing commits the settled intent's removal
    assert read_journal(journal) == ()


async def test_a_second_evidence_does_not_reissue_a_settled_intent() -> None:
    mesh, store = await seeded_outage()
    await first_value(mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE)))
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("first")
    await collected.wait(1)
    store.clear_log()
    store.declare_gap("second")  # handled synchronously: take_all finds nothing pending
    assert mesh.ledger.statistics().taken == 1
    assert mesh.recovery is not None
    assert mesh.recovery.reissuing == 0
    assert store.writes_attempted("acme/b") == []


async def test_a_judged_refusal_records_nothing() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("acme/seed"), access=ALICE)
    response = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("acme/x"), access=BOB))
    )
    assert response.rejection_reason is RejectionReason.FORBIDDEN
    exists = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("acme/seed"), access=ALICE))
    )
    assert exists.rejection_reason is RejectionReason.NODE_ALREADY_EXISTS
    assert mesh.ledger.pending() == ()


class _FlakyWrites(InMemoryStore):
    """Writes of ``acme/b``: refused at connect ("refuse"), or lost mid-call after the row
    committed ("commit-then-vanish"), or lost mid-call with nothing committed ("lost")."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"

    async def write(self, node: MeshNode) -> MeshNode:
        if node.path != "acme/b" or self.mode == "ok":
            return await super().write(node)
        lost = StoreError("connection lost mid-call", sqlstate="08006", may_have_run=True)
        lost.__cause__ = ConnectionResetError(104, "Connection reset by peer")
        if self.mode == "commit-then-vanish":
            self.mode = "lost"  # the retries find the store gone
            await super().write(node)
            raise lost
        if self.mode == "lost":
            raise lost
        raise unreachable_error("memory")


async def _reissue_with(mode: str) -> tuple[PendingWriteOutcome, _FlakyWrites]:
    store = _FlakyWrites()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
    await mesh.create(doc("acme/seed"), access=ALICE)
    store.mode = "refuse"
    first = await first_value(mesh.create_node(CreateNodeRequest(node=doc("acme/b"), access=ALICE)))
    assert "Nothing was written" in (first.error or "")
    collected = Outcomes(mesh.ledger)
    store.mode = mode
    store.declare_gap("resumed")
    (outcome,) = await collected.wait(1)
    return outcome, store


async def test_a_reissue_whose_reply_was_lost_after_it_committed_is_confirmed_landed() -> None:
    outcome, store = await _reissue_with("commit-then-vanish")
    assert outcome.verdict is Verdict.LANDED
    row = await store.read("acme/b")
    assert row is not None
    assert row.request_id == outcome.intent.request_id


async def test_control_a_reissue_lost_with_nothing_committed_is_dropped() -> None:
    outcome, store = await _reissue_with("lost")
    assert outcome.verdict is Verdict.DROPPED
    assert outcome.reason is RejectionReason.UNAVAILABLE
    assert await store.read("acme/b") is None
