"""No accepted intent disappears without a verdict (issue 13, scenario 3; SPEC §5.1).

During an outage one path may be created by several requests. The rule:

- a later UNAVAILABLE create of the same path by the SAME requester replaces the earlier intent,
  and the earlier one is settled at once, DROPPED, ``superseded_by`` naming the later request;
- another requester never displaces an outstanding intent: the first stands and is re-issued;
  the second is not recorded and its answer says it will not be re-issued.

So every UNAVAILABLE answer that did not say "will not be re-issued" gets exactly one verdict on
``ledger.outcomes``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rxmesh import AccessContext, CreateNodeRequest, Mesh, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.exceptions import PendingWriteHeldError
from rxmesh.ledger import PendingWrite, PendingWriteLedger
from rxmesh.operations import CreateNodeResponse
from tests.helpers import ALICE, BOB, Outcomes, doc

from .conftest import make_mesh

WILL_NOT = "will not be re-issued"


async def create(mesh: Mesh, node: MeshNode, access: AccessContext) -> CreateNodeResponse:
    return await first_value(mesh.create_node(CreateNodeRequest(node=node, access=access)))


async def full_outage(**options: object) -> tuple[Mesh, object]:
    mesh, store = make_mesh(**options)
    await mesh.create(doc("p/seed"), access=ALICE)  # alice owns p; bob holds no grant there
    store.refuse_reads_as_unreachable()
    store.refuse_writes_as_unreachable()
    return mesh, store


async def test_another_requester_never_displaces_a_pending_intent(tmp_path: Path) -> None:
    """FAILS against the old ledger: bob's intent replaced alice's (INFO only), bob's re-issue was
    DROPPED FORBIDDEN, alice's node was never written and her request never got a verdict."""
    mesh, store = await full_outage(ledger=PendingWriteLedger(tmp_path / "journal"))
    first = await create(mesh, doc("p/doc", by="alice"), ALICE)
    second = await create(mesh, doc("p/doc", by="bob"), BOB)
    assert first.rejection_reason is RejectionReason.UNAVAILABLE
    assert WILL_NOT not in (first.error or "")
    assert second.rejection_reason is RejectionReason.UNAVAILABLE  # still not a verdict
    assert WILL_NOT in (second.error or "")
    assert "another requester" in (second.error or "")
    assert [(p.requester, p.request_id) for p in mesh.ledger.pending()] == [
        ("alice", first.request_id)
    ]
    assert mesh.ledger.statistics().held == 1

    outcomes = Outcomes(mesh.ledger)
    store.restore()  # type: ignore[attr-defined]
    store.declare_gap("listener resumed")  # type: ignore[attr-defined]
    got = await outcomes.wait(1)
    assert [(o.intent.request_id, o.verdict) for o in got] == [(first.request_id, Verdict.LANDED)]
    row = await store.read("p/doc")  # type: ignore[attr-defined]
    assert row is not None
    assert row.content == {"by": "alice"}
    assert row.request_id == first.request_id


async def test_the_same_requester_replaces_and_the_replaced_intent_gets_its_verdict() -> None:
    """FAILS against the old ledger: the replaced intent was forgotten without any verdict."""
    mesh, store = await full_outage()
    outcomes = Outcomes(mesh.ledger)
    first = await create(mesh, doc("p/doc", v=1), ALICE)
    second = await create(mesh, doc("p/doc", v=2), ALICE)
    assert WILL_NOT not in (first.error or "")
    assert WILL_NOT not in (second.error or "")
    superseded = await outcomes.wait(1)
    assert [(o.intent.request_id, o.verdict, o.superseded_by) for o in superseded] == [
        (first.request_id, Verdict.DROPPED, second.request_id)
    ]
    assert superseded[0].reason is None
    assert second.request_id in superseded[0].detail

    later = Outcomes(mesh.ledger)
    store.restore()  # type: ignore[attr-defined]
    store.declare_gap("listener resumed")  # type: ignore[attr-defined]
    landed = await later.wait(1)
    assert [(o.intent.request_id, o.verdict) for o in landed] == [
        (second.request_id, Verdict.LANDED)
    ]
    stats = mesh.ledger.statistics()
    assert (stats.superseded, stats.dropped, stats.landed) == (1, 1, 1)


async def test_every_answer_without_the_note_gets_exactly_one_verdict() -> None:
    """Three requesters and repeats on two paths: the requests whose UNAVAILABLE answer did not
    say "will not be re-issued" are exactly the requests that get a verdict, each exactly once."""
    mesh, store = await full_outage()
    carol = AccessContext(user="carol")
    outcomes = Outcomes(mesh.ledger)
    answers = [
        await create(mesh, doc("p/a", n=1), ALICE),
        await create(mesh, doc("p/a", n=2), BOB),
        await create(mesh, doc("p/a", n=3), ALICE),
        await create(mesh, doc("p/b", n=4), carol),
        await create(mesh, doc("p/b", n=5), ALICE),
        await create(mesh, doc("p/b", n=6), carol),
    ]
    promised = {a.request_id for a in answers if WILL_NOT not in (a.error or "")}
    told = {a.request_id for a in answers if WILL_NOT in (a.error or "")}
    assert len(promised) == 4
    assert len(told) == 2
    store.restore()  # type: ignore[attr-defined]
    store.declare_gap("listener resumed")  # type: ignore[attr-defined]
    got = await outcomes.wait(len(promised))
    ids = [o.intent.request_id for o in got]
    assert sorted(ids) == sorted(promised)  # exactly once each
    assert not told & set(ids)


def intent(user: str, request_id: str, path: str = "p/doc") -> PendingWrite:
    return PendingWrite(
        node=doc(path), requester=user, access=AccessContext(user=user), request_id=request_id
    )


def test_the_ledger_refuses_another_requester_while_the_first_is_in_flight() -> None:
    ledger = PendingWriteLedger("")
    ledger.record(intent("alice", "r1"))
    [taken] = ledger.take_all()
    with pytest.raises(PendingWriteHeldError) as caught:
        ledger.record(intent("bob", "r2"))
    assert caught.value.holder_request_id == "r1"
    assert caught.value.path == "p/doc"
    assert ledger.pending() == ()
    assert taken.request_id == "r1"


def test_negative_control_another_path_or_the_same_requester_is_recorded() -> None:
    ledger = PendingWriteLedger("")
    assert ledger.record(intent("alice", "r1"))
    assert ledger.record(intent("bob", "r2", path="p/other"))  # another path: no conflict
    assert ledger.record(intent("alice", "r3"))  # same requester: replaces r1
    assert sorted(p.request_id for p in ledger.pending()) == ["r2", "r3"]


def test_a_settled_intent_frees_its_path_for_another_requester() -> None:
    from rxmesh.ledger import PendingWriteOutcome

    ledger = PendingWriteLedger("")
    ledger.record(intent("alice", "r1"))
    [taken] = ledger.take_all()
    ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    assert ledger.record(intent("bob", "r2"))


def test_an_abandoned_reissue_superseded_meanwhile_is_settled_not_lost() -> None:
    """FAILS against the old ledger: restore() returned False and the abandoned intent, replaced
    meanwhile by a newer one of the same requester, vanished without a verdict."""
    ledger = PendingWriteLedger("")
    seen: list[object] = []
    ledger.outcomes.subscribe(seen.append)
    ledger.record(intent("alice", "r1"))
    [taken] = ledger.take_all()
    ledger.record(intent("alice", "r2"))  # the store was away again; the same user retried
    assert ledger.restore(taken) is False
    assert [(o.intent.request_id, o.verdict, o.superseded_by) for o in seen] == [  # type: ignore[attr-defined]
        ("r1", Verdict.DROPPED, "r2")
    ]
    assert [p.request_id for p in ledger.pending()] == ["r2"]
