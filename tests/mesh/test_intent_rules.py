"""Whose answer settles an intent, what a basis names, and when a request "already landed"
(issue 31 items 1, 3, 4, 12) — in memory; the store-level rules on PostgreSQL are in
tests/providers/test_postgres_basis.py.

Negative controls: the same requester's own re-issue still settles its intent; an update based on
the very row it read still lands; an update that did land is still recognised by its retry.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxmesh import Mesh, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodesRequest,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, MALLORY, Outcomes, doc

from .conftest import make_mesh


async def send(mesh: Mesh, req: Any) -> Any:
    if isinstance(req, CreateNodeRequest):
        return await first_value(mesh.create_node(req), timeout=5)
    if isinstance(req, CreateNodesRequest):
        return await first_value(mesh.create_nodes(req), timeout=5)
    if isinstance(req, UpdateNodeRequest):
        return await first_value(mesh.update_node(req), timeout=5)
    if isinstance(req, DeleteNodeRequest):
        return await first_value(mesh.delete_node(req), timeout=5)
    return await first_value(mesh.move_node(req), timeout=5)


def rows(store: FaultInjectingStore, partition: str) -> dict[str, MeshNode]:
    return {n.path: n for n in store.inner.nodes(partition)}


async def alices_outage() -> tuple[Mesh, FaultInjectingStore, CreateNodeRequest, UpdateNodeRequest]:
    """alice owns ``p``; her create of ``p/doc`` and update of ``p/doc2`` are recorded."""
    mesh, store = make_mesh()
    await mesh.create(doc("p/doc2"), access=ALICE)
    store.refuse_writes_as_unreachable()
    create = CreateNodeRequest(node=doc("p/doc"), access=ALICE)
    update = UpdateNodeRequest(node=doc("p/doc2", x=2), access=ALICE)
    for req in (create, update):
        answer = await send(mesh, req)
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
        assert answer.recorded_for_reissue, answer
    store.restore()
    return mesh, store, create, update


async def test_a_strangers_answer_carrying_alices_request_ids_settles_nothing() -> None:
    """fails at 1d389e8 because mallory's FORBIDDEN answers settled alice's intents DROPPED."""
    mesh, store, create, update = await alices_outage()
    mallory_create = CreateNodeRequest(
        node=doc("p/doc", evil=1), access=MALLORY, request_id=create.request_id
    )
    mallory_update = UpdateNodeRequest(
        node=doc("p/doc2", evil=1), access=MALLORY, request_id=update.request_id
    )
    for req in (mallory_create, mallory_update):
        answer = await send(mesh, req)
        assert answer.rejection_reason is RejectionReason.FORBIDDEN, answer
    assert mesh.ledger.statistics().settled == 0
    assert {i.request_id for i in mesh.ledger.pending()} == {create.request_id, update.request_id}
    collected = Outcomes(mesh.ledger)
    store.declare_gap("back")
    outcomes = await collected.wait(2)
    assert {o.verdict for o in outcomes} == {Verdict.LANDED}, outcomes
    now = rows(store, "p")
    assert now["p/doc"].content == {"x": 1} and now["p/doc2"].content == {"x": 2}
    mesh.dispose()


async def test_alices_own_reissue_still_settles_her_intents() -> None:
    """The negative control: the same requester, path, request id and verb settles."""
    mesh, _store, create, update = await alices_outage()
    assert (await send(mesh, create)).success
    assert (await send(mesh, update)).success
    assert mesh.ledger.pending() == () and mesh.ledger.in_flight() == ()
    assert mesh.ledger.statistics().landed == 2
    mesh.dispose()


async def test_another_verb_with_the_same_request_id_settles_nothing() -> None:
    """alice's delete carrying her update's request id is not the update's re-issue (a guard:
    it holds at 1d389e8 too, the ledger's key names the verb)."""
    mesh, store, _create, update = await alices_outage()
    store.drop_change_feed()  # the delete's commit is no evidence: nothing is re-issued yet
    delete = DeleteNodeRequest(path="p/doc2", access=ALICE, request_id=update.request_id)
    assert (await send(mesh, delete)).success
    assert [i.request_id for i in mesh.ledger.pending() if i.verb == "update"] == [
        update.request_id
    ]
    mesh.dispose()


async def test_a_strangers_bulk_with_alices_bulk_request_id_settles_nothing() -> None:
    """fails at 1d389e8 because mallory's FORBIDDEN bulk dropped 2 of alice's 5 bulk intents."""
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    bulk = CreateNodesRequest(nodes=tuple(doc(f"p/n{i}") for i in range(5)), access=ALICE)
    answer = await send(mesh, bulk)
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
    assert len(mesh.ledger.pending()) == 5
    store.restore()
    mallory = CreateNodesRequest(
        nodes=(doc("p/n0"), doc("p/n1")), access=MALLORY, request_id=bulk.request_id
    )
    answer = await send(mesh, mallory)
    assert answer.rejection_reason is RejectionReason.FORBIDDEN, answer
    assert len(mesh.ledger.pending()) == 5
    assert mesh.ledger.statistics().settled == 0
    # the control: alice's own re-issue of two of them settles those two
    store.drop_change_feed()  # its commits are no evidence: the recovery re-issues nothing yet
    own = CreateNodesRequest(
        nodes=(doc("p/n0"), doc("p/n1")), access=ALICE, request_id=bulk.request_id
    )
    assert (await send(mesh, own)).success
    assert sorted(i.path for i in mesh.ledger.pending()) == ["p/n2", "p/n3", "p/n4"]
    mesh.dispose()


def basis_request(verb: str, **basis: Any) -> Any:
    if verb == "update":
        return UpdateNodeRequest(node=doc("acme/a", x="alice"), access=ALICE, **basis)
    if verb == "delete":
        return DeleteNodeRequest(path="acme/a", access=ALICE, **basis)
    return MoveNodeRequest(source="acme/a", target="acme/z", access=ALICE, **basis)


@pytest.mark.parametrize("verb", ["update", "delete", "move"])
async def test_a_reissue_is_not_applied_to_a_node_created_again_at_its_version(verb: str) -> None:
    """fails at 1d389e8 because the basis recorded for expected_version=1 did not carry the
    request id of the row the attempt read: the re-issue overwrote (deleted, moved away) the
    node another request created again at version 1, settled LANDED."""
    mesh, store = make_mesh()
    seed = await mesh.create(doc("acme/a"), access=ALICE)
    store.refuse_writes_as_unreachable()
    answer = await send(mesh, basis_request(verb, expected_version=1))
    assert answer.recorded_for_reissue, answer
    (intent,) = mesh.ledger.pending()
    assert (intent.expected_version, intent.expected_request_id) == (1, seed.request_id)
    store.drop_change_feed()  # the evidence comes once the node was created again
    store.restore()
    assert await store.inner.delete("acme/a")
    await asyncio.wait_for(store.inner.write(
            doc("acme/a", x="bob").model_copy(update={"version": 1, "request_id": "bob-recreates"})
        ), 5)
    collected = Outcomes(mesh.ledger)
    store.resume_change_feed()
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.CONFLICT, outcome
    now = rows(store, "acme")
    assert now["acme/a"].request_id == "bob-recreates" and now["acme/a"].content == {"x": "bob"}
    assert "acme/z" not in now
    mesh.dispose()


@pytest.mark.parametrize("verb", ["update", "delete", "move"])
async def test_the_control_a_reissue_on_the_row_it_read_lands(verb: str) -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("acme/a"), access=ALICE)
    store.refuse_writes_as_unreachable()
    assert (await send(mesh, basis_request(verb, expected_version=1))).recorded_for_reissue
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("back")
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.LANDED, outcome
    mesh.dispose()


async def test_an_update_reusing_the_creates_request_id_is_applied() -> None:
    """fails at 1d389e8 because the update was answered success with the row unchanged at
    version 1: the create's request id on the row was taken for the update's own landing."""
    mesh, store = make_mesh()
    create = CreateNodeRequest(node=doc("q/a", x=1), access=ALICE, request_id="order-42")
    assert (await send(mesh, create)).success
    update = UpdateNodeRequest(node=doc("q/a", x=2), access=ALICE, request_id="order-42")
    answer: NodeOperationResponse = await send(mesh, update)
    assert answer.success, answer
    row = rows(store, "q")["q/a"]
    assert (row.version, row.content, row.request_id) == (2, {"x": 2}, "order-42")
    # the same update sent again is recognised as landed: no second commit
    again: NodeOperationResponse = await send(mesh, update)
    assert again.success and rows(store, "q")["q/a"].version == 2
    mesh.dispose()


async def test_the_control_a_plain_update_lands() -> None:
    mesh, store = make_mesh()
    await send(mesh, CreateNodeRequest(node=doc("q/a"), access=ALICE, request_id="order-41"))
    assert (await send(mesh, UpdateNodeRequest(node=doc("q/a", x=3), access=ALICE))).success
    assert rows(store, "q")["q/a"].content == {"x": 3}
    mesh.dispose()


async def test_an_update_that_read_its_node_keeps_its_basis_when_the_facts_read_fails() -> None:
    """fails at 1d389e8 because the update was told "the version it was based on is unknown
    (the store did not answer its read)" and nothing was recorded, though it had read the row."""
    mesh, store = make_mesh()
    seed = await mesh.create(doc("beta/a"), access=ALICE)
    store.fault_next_read("beta", times=4)  # outlasts the ladder's three retries
    answer = await send(mesh, UpdateNodeRequest(node=doc("beta/a", x=2), access=ALICE))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
    assert answer.recorded_for_reissue, answer
    (intent,) = mesh.ledger.pending()
    assert (intent.expected_version, intent.expected_request_id) == (1, seed.request_id)
    mesh.dispose()


async def test_a_delete_whose_facts_read_failed_says_so() -> None:
    """A delete reads the facts before the node; its answer names that read (fails at 1d389e8
    because it said "the store did not answer its read"). Nothing is recorded: no basis."""
    mesh, store = make_mesh()
    await mesh.create(doc("beta/a"), access=ALICE)
    store.fault_next_read("beta", times=4)
    answer = await send(mesh, DeleteNodeRequest(path="beta/a", access=ALICE))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
    assert not answer.recorded_for_reissue
    assert "the read of the partition's access facts, before the node was read" in answer.error
    assert mesh.ledger.pending() == ()
    mesh.dispose()
