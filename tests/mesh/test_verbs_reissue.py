"""Update, delete and move answered UNAVAILABLE are recorded with their basis, re-issued once on
evidence by compare-and-set, and settled with exactly one verdict (issue 18) — in memory.

Negative controls: a judged refusal records nothing; a newer write in between survives the
re-issue, and the same scenario with the version check skipped (a mutant) or with the basis
dropped from the re-issue (a mutant) overwrites it — so the survival is the check's doing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rxmesh import Mesh, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.exceptions import NodeVersionConflictError, StoreUnavailableError
from rxmesh.ledger import PendingWrite, PendingWriteLedger, PendingWriteOutcome
from rxmesh.ledger import _recovery as recovery_module
from rxmesh.ledger._log import encode_put
from rxmesh.ledger._verbs import reissue
from rxmesh.mesh import _verbs as verbs_module
from rxmesh.operations import (
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)
from rxmesh.providers._memory_verbs import MemoryVerbs
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore, connection_reset_error
from tests.helpers import ALICE, BOB, Outcomes, doc

from .conftest import FAST, make_mesh

VERBS = ["update", "delete", "move"]


def request(verb: str, **basis: Any) -> UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest:
    if verb == "update":
        return UpdateNodeRequest(node=doc("acme/a", x=2), access=ALICE, **basis)
    if verb == "delete":
        return DeleteNodeRequest(path="acme/a", access=ALICE, **basis)
    return MoveNodeRequest(source="acme/a", target="acme/z", access=ALICE, **basis)


async def send(mesh: Mesh, req: Any) -> NodeOperationResponse:
    if isinstance(req, UpdateNodeRequest):
        return await first_value(mesh.update_node(req), timeout=5)
    if isinstance(req, DeleteNodeRequest):
        return await first_value(mesh.delete_node(req), timeout=5)
    return await first_value(mesh.move_node(req), timeout=5)


async def outage(verb: str, **options: Any) -> tuple[Mesh, FaultInjectingStore, MeshNode, Any]:
    """``acme/a`` created, then ``verb`` answered UNAVAILABLE (writes refused)."""
    mesh, store = make_mesh(**options)
    seed = await mesh.create(doc("acme/a"), access=ALICE)
    store.refuse_writes_as_unreachable()
    req = request(verb)
    response = await send(mesh, req)
    assert response.rejection_reason is RejectionReason.UNAVAILABLE, response
    return mesh, store, seed, (req, response)


@pytest.mark.parametrize("verb", VERBS)
async def test_each_verb_answered_unavailable_is_recorded_with_its_basis(verb: str) -> None:
    mesh, _store, seed, (req, response) = await outage(verb)
    assert response.recorded_for_reissue, response
    (intent,) = mesh.ledger.pending()
    assert intent.verb == verb and intent.path == "acme/a"
    assert intent.key == f"acme/a {verb}"
    assert (intent.expected_version, intent.expected_request_id) == (seed.version, seed.request_id)
    assert intent.request_id == req.request_id
    assert intent.target == ("acme/z" if verb == "move" else None)
    mesh.dispose()


@pytest.mark.parametrize("verb", VERBS)
async def test_each_verb_is_reissued_once_on_evidence_and_lands(verb: str) -> None:
    mesh, store, _seed, (req, _response) = await outage(verb)
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("listener resumed")
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.LANDED, outcome
    rows = {n.path: n for n in store.inner.nodes("acme")}
    if verb == "update":
        assert rows["acme/a"].content == {"x": 2}
        assert rows["acme/a"].request_id == req.request_id
    elif verb == "delete":
        assert "acme/a" not in rows
    else:
        assert "acme/a" not in rows and rows["acme/z"].request_id == req.request_id
    store.declare_gap("again")  # a second evidence re-issues nothing: the intent is settled
    await asyncio.sleep(0)
    assert mesh.ledger.statistics().taken == 1
    assert mesh.ledger.statistics().settled == 1
    mesh.dispose()


async def newer_write_then_reissue(verb: str) -> tuple[PendingWriteOutcome, dict[str, MeshNode]]:
    """``verb`` recorded on the basis of version 1; another update of ``acme/a`` lands (version
    2) as the store comes back — its announced commit is the evidence — then the re-issue runs."""
    mesh, store, _seed, _answer = await outage(verb)
    collected = Outcomes(mesh.ledger)
    store.restore()
    await store.inner.update(doc("acme/a", x="newer"), None, None, "someone-else")
    (outcome,) = await collected.wait(1)
    rows = {n.path: n for n in store.inner.nodes("acme")}
    mesh.dispose()
    return outcome, rows


@pytest.mark.parametrize("verb", VERBS)
async def test_a_newer_write_in_between_survives_the_reissue(verb: str) -> None:
    outcome, rows = await newer_write_then_reissue(verb)
    assert outcome.verdict is Verdict.CONFLICT, outcome
    assert outcome.reason is RejectionReason.VERSION_CONFLICT
    assert "another write came first" in outcome.detail
    assert rows["acme/a"].content == {"x": "newer"}  # not overwritten, not deleted, not moved
    assert rows["acme/a"].request_id == "someone-else"
    assert "acme/z" not in rows


def skip_the_version_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: neither the mesh nor the store compares the basis."""
    monkeypatch.setattr(verbs_module, "_check", lambda *args: None)
    monkeypatch.setattr(MemoryVerbs, "_check_basis", lambda *args: None)


def drop_the_basis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: the re-issue forgets the basis it was recorded with (so it is based on the
    node as its own attempt reads it, the newer write)."""

    def forgetful(mesh: Any, intent: PendingWrite) -> Any:
        bare = {"expected_version": None, "expected_request_id": None}
        return reissue(mesh, intent.model_copy(update=bare))

    monkeypatch.setattr(recovery_module, "reissue_of", forgetful)


@pytest.mark.parametrize("mutant", [skip_the_version_check, drop_the_basis])
@pytest.mark.parametrize("verb", VERBS)
async def test_negative_control_a_mutant_overwrites_the_newer_write(
    verb: str, mutant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mutant(monkeypatch)
    outcome, rows = await newer_write_then_reissue(verb)
    assert outcome.verdict is Verdict.LANDED  # the newer write was lost
    if verb == "update":
        assert rows["acme/a"].content == {"x": 2}
    elif verb == "delete":
        assert "acme/a" not in rows
    else:
        assert "acme/a" not in rows and "acme/z" in rows


async def test_a_reissued_delete_finding_the_node_gone_is_already_absent() -> None:
    mesh, store, _seed, _answer = await outage("delete")
    collected = Outcomes(mesh.ledger)
    store.restore()
    await store.inner.delete("acme/a")  # someone else deleted it; the commit is the evidence
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.ALREADY_ABSENT, outcome
    assert mesh.ledger.statistics().already_absent == 1
    mesh.dispose()


async def test_a_reissued_move_whose_target_was_taken_meanwhile_is_a_conflict() -> None:
    mesh, store, _seed, _answer = await outage("move")
    collected = Outcomes(mesh.ledger)
    store.restore()
    await store.inner.write(doc("acme/z", taken=True).model_copy(update={"request_id": "other"}))
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.CONFLICT, outcome
    rows = {n.path: n for n in store.inner.nodes("acme")}
    assert rows["acme/z"].content == {"taken": True} and "acme/a" in rows
    mesh.dispose()


@pytest.mark.parametrize("verb", VERBS)
async def test_a_judged_refusal_records_nothing(verb: str) -> None:
    mesh, store = make_mesh()
    seed = await mesh.create(doc("acme/a"), access=ALICE)
    store.refuse_writes_as_unreachable()  # the store is away, but every answer is a verdict:
    refusals = [
        send(mesh, request(verb).model_copy(update={"access": BOB})),  # FORBIDDEN
        send(mesh, request(verb, expected_version=seed.version + 1)),  # VERSION_CONFLICT
    ]
    if verb != "delete":
        missing = request(verb)
        missing = (
            missing.model_copy(update={"node": doc("acme/none")})
            if isinstance(missing, UpdateNodeRequest)
            else missing.model_copy(update={"source": "acme/none"})
        )
        refusals.append(send(mesh, missing))  # VALIDATION_FAILED: no node
    for answer in [await refusal for refusal in refusals]:
        assert answer.rejection_reason in {
            RejectionReason.FORBIDDEN,
            RejectionReason.VERSION_CONFLICT,
            RejectionReason.VALIDATION_FAILED,
        }, answer
        assert not answer.recorded_for_reissue
    assert mesh.ledger.pending() == ()
    assert mesh.ledger.statistics().recorded == 0
    # negative control: the same store, an unjudged request: recorded
    assert (await send(mesh, request(verb))).recorded_for_reissue
    assert len(mesh.ledger.pending()) == 1
    mesh.dispose()


async def test_the_in_process_api_raises_a_distinct_conflict_error() -> None:
    mesh, store = make_mesh()
    seed = await mesh.create(doc("acme/a"), access=ALICE)
    await mesh.update(doc("acme/a", x=2), access=ALICE)
    for call in (
        mesh.update(doc("acme/a", x=3), access=ALICE, expected_version=seed.version),
        mesh.delete("acme/a", access=ALICE, expected_version=seed.version),
        mesh.move("acme/a", "acme/z", access=ALICE, expected_version=seed.version),
    ):
        with pytest.raises(NodeVersionConflictError, match="another write came first"):
            await call
    assert (await store.read("acme/a")).content == {"x": 2}  # type: ignore[union-attr]
    store.refuse_writes_as_unreachable()
    with pytest.raises(StoreUnavailableError):
        await mesh.update(doc("acme/a", x=4), access=ALICE)
    with pytest.raises(StoreUnavailableError):
        await mesh.delete("acme/a", access=ALICE)
    mesh.dispose()


async def test_without_a_known_basis_nothing_is_recorded_and_the_answer_says_so() -> None:
    mesh, store = make_mesh(retry_delays=())
    await mesh.create(doc("acme/a"), access=ALICE)
    store.refuse_reads_as_unreachable()  # the basis read itself does not answer
    answer = await send(mesh, request("update"))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert not answer.recorded_for_reissue
    assert "will not be re-issued" in (answer.error or "")
    assert mesh.ledger.pending() == ()
    assert "its read of the node" in (answer.error or "")
    # an expected version alone does not name the write that produced it (issue 31 item 3):
    # the re-issue could be applied to a node created again at that version; not recorded
    answer = await send(mesh, request("update", expected_version=1))
    assert not answer.recorded_for_reissue, answer
    assert "the write that produced version 1 is unknown" in (answer.error or "")
    # with the request id of that write too, the request carries its whole basis: recorded
    answer = await send(mesh, request("update", expected_version=1, expected_request_id="r-1"))
    assert answer.recorded_for_reissue, answer
    mesh.dispose()


async def test_one_intent_per_path_and_verb() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("acme/a"), access=ALICE)
    store.refuse_writes_as_unreachable()
    first = await send(mesh, request("update"))
    second = await send(mesh, request("update"))  # the same requester: replaces the first
    await send(mesh, request("delete"))  # another verb of the same path: its own intent
    keys = sorted((i.key, i.request_id) for i in mesh.ledger.pending())
    assert keys == sorted([("acme/a update", second.request_id), ("acme/a delete", keys[0][1])]), (
        keys
    )
    stats = mesh.ledger.statistics()
    assert stats.superseded == 1 and stats.replaced == 1
    assert first.request_id not in {i.request_id for i in mesh.ledger.pending()}
    mesh.dispose()


async def test_the_callers_own_reissue_settles_the_intent() -> None:
    mesh, store, _seed, (req, _response) = await outage("update")
    collected = Outcomes(mesh.ledger)
    store.restore()
    again = await send(mesh, req)  # the caller re-issues the very request itself
    assert again.success
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.LANDED and "caller's own re-issue" in outcome.detail
    assert mesh.ledger.pending() == () and mesh.ledger.in_flight() == ()
    mesh.dispose()


async def test_restart_with_a_journal_reissues_every_verb(tmp_path: Path) -> None:
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    journal = tmp_path / "journal"
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
    for path in ("acme/u", "acme/d", "acme/m"):
        await mesh.create(doc(path), access=ALICE)
    store.refuse_writes_as_unreachable()
    answers = [
        await send(mesh, UpdateNodeRequest(node=doc("acme/u", x=9), access=ALICE)),
        await send(mesh, DeleteNodeRequest(path="acme/d", access=ALICE)),
        await send(mesh, MoveNodeRequest(source="acme/m", target="acme/n", access=ALICE)),
    ]
    assert all(a.recorded_for_reissue for a in answers), answers
    mesh.dispose()  # the process ends; the journal stays
    store.restore()

    ledger = PendingWriteLedger(journal)
    loaded = sorted((i.verb, i.path, i.expected_version) for i in ledger.pending())
    assert loaded == [("delete", "acme/d", 1), ("move", "acme/m", 1), ("update", "acme/u", 1)]
    again = Mesh(store, retry_delays=FAST, ledger=ledger)
    collected = Outcomes(ledger)
    store.declare_gap("the new process's listener")
    outcomes = await collected.wait(3)
    assert sorted((o.intent.verb, o.verdict) for o in outcomes) == [
        ("delete", Verdict.LANDED),
        ("move", Verdict.LANDED),
        ("update", Verdict.LANDED),
    ]
    rows = {n.path: n for n in inner.nodes("acme")}
    assert rows["acme/u"].content == {"x": 9} and "acme/d" not in rows
    assert "acme/m" not in rows and "acme/n" in rows
    again.dispose()
    ledger.close()
    assert PendingWriteLedger(journal).pending() == ()  # settled: nothing to re-issue again


def test_a_creates_log_entry_is_written_as_before_without_the_verb_fields() -> None:
    create = PendingWrite(node=doc("acme/a"), requester="alice", request_id="r1")
    update = PendingWrite(
        node=doc("acme/a"), requester="alice", request_id="r2", origin="update", expected_version=3
    )
    assert b"expected_version" not in encode_put(create)
    assert b'"expected_version":3' in encode_put(update)
    assert create.key == "acme/a" and update.key == "acme/a update"


async def test_a_delete_whose_lost_reply_is_retried_is_answered_already_absent() -> None:
    """The first try deletes the node, then its connection dies (the reply is lost); the
    ladder's retry finds the node gone: that is this delete, answered success, not 'no node'."""
    mesh, store = make_mesh()
    await mesh.create(doc("acme/a"), access=ALICE)
    original, tries = store.delete, []

    async def reply_lost(path: str, *basis: Any) -> bool:
        tries.append(path)
        deleted = await original(path, *basis)
        if len(tries) == 1:
            raise connection_reset_error()
        return deleted

    store.delete = reply_lost  # type: ignore[method-assign]
    answer = await send(mesh, DeleteNodeRequest(path="acme/a", access=ALICE))
    assert answer.success and answer.already_absent, answer
    assert len(tries) == 2 and await store.read("acme/a") is None
    mesh.dispose()
