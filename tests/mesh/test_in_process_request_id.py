"""The in-process verbs take the caller's idempotency key (``request_id=``): a re-send of the
same request answers what its first answer would have been, as the observable API does.

Each test fails at 1d389e8 because ``Mesh.create/update/delete/move`` took no ``request_id``
(a TypeError), so a caller re-sending after ``StoreUnavailableError`` could only send a NEW
request, which the mesh's own landed re-issue turned into ``NodeExistsError`` ("written by
another request"). Negative controls: the same re-send under a different key is refused.
"""

from __future__ import annotations

import pytest

from rxmesh import CreateNodesRequest, CreateNodesResponse, MeshNode, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.exceptions import (
    NodeExistsError,
    NodeValidationError,
    NodeVersionConflictError,
    StoreUnavailableError,
)
from tests.helpers import ALICE, Outcomes

from .conftest import make_mesh


def order(total: int = 12) -> MeshNode:
    return MeshNode(path="shop/orders/1", node_type="Order", content={"total": total})


async def test_a_create_resent_after_its_reissue_landed_answers_the_node() -> None:
    mesh, store = make_mesh()
    await mesh.create(MeshNode(path="shop/seed", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    with pytest.raises(StoreUnavailableError) as raised:
        await mesh.create(order(), access=ALICE, request_id="idem-1")
    assert raised.value.reason == RejectionReason.UNAVAILABLE
    assert raised.value.request_id == "idem-1"
    assert raised.value.recorded_for_reissue is True
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("listener resumed")
    (outcome,) = await collected.wait(1)
    assert outcome.verdict is Verdict.LANDED, outcome

    stored = await mesh.create(order(), access=ALICE, request_id="idem-1")  # the re-send
    assert stored.request_id == "idem-1" and stored.content == {"total": 12}
    assert stored.path == "shop/orders/1"
    # Negative control: a new request for the same node is someone else's.
    with pytest.raises(NodeExistsError) as other:
        await mesh.create(order(), access=ALICE, request_id="idem-2")
    assert other.value.reason == RejectionReason.NODE_ALREADY_EXISTS
    assert other.value.recorded_for_reissue is False
    with pytest.raises(NodeExistsError):
        await mesh.create(order(), access=ALICE)  # no key: a fresh one per call
    mesh.dispose()


async def test_an_update_and_a_move_resent_with_their_key_answer_the_node() -> None:
    mesh, _store = make_mesh()
    await mesh.create(order(), access=ALICE)
    first = await mesh.update(order(13), access=ALICE, request_id="up-1")
    again = await mesh.update(order(13), access=ALICE, request_id="up-1")
    assert again == first and again.request_id == "up-1"
    # Negative control: the same update under another key, based on the version it was sent
    # with, finds another write came first.
    with pytest.raises(NodeVersionConflictError) as conflict:
        await mesh.update(order(13), access=ALICE, request_id="up-2", expected_version=1)
    assert conflict.value.reason == RejectionReason.VERSION_CONFLICT

    moved = await mesh.move("shop/orders/1", "shop/orders/2", access=ALICE, request_id="mv-1")
    resent = await mesh.move("shop/orders/1", "shop/orders/2", access=ALICE, request_id="mv-1")
    assert resent.path == moved.path == "shop/orders/2" and resent.request_id == "mv-1"
    with pytest.raises(NodeValidationError):  # negative control: another move finds no source
        await mesh.move("shop/orders/1", "shop/orders/2", access=ALICE, request_id="mv-2")
    mesh.dispose()


async def test_an_unavailable_verb_carries_its_key_and_whether_it_was_recorded() -> None:
    mesh, store = make_mesh()
    await mesh.create(order(), access=ALICE)
    store.refuse_writes_as_unreachable()
    with pytest.raises(StoreUnavailableError) as raised:
        await mesh.delete("shop/orders/1", access=ALICE, request_id="del-1")
    assert (raised.value.request_id, raised.value.recorded_for_reissue) == ("del-1", True)
    (intent,) = mesh.ledger.pending()
    assert intent.request_id == "del-1"
    mesh.dispose()


async def test_the_bulk_resent_with_its_key_answers_the_same_created() -> None:
    """A guard of what docs/answers.md says of the bulk (it passes at 1d389e8 too: the bulk's
    request always carried its key). Negative control: another key finds them already present."""
    mesh, _store = make_mesh()
    nodes = [order().model_copy(update={"path": f"shop/orders/{i}"}) for i in range(3)]

    async def send(key: str) -> CreateNodesResponse:
        request = CreateNodesRequest(nodes=nodes, access=ALICE, request_id=key)
        return await first_value(mesh.create_nodes(request), timeout=5)

    first, again, other = await send("bulk-1"), await send("bulk-1"), await send("bulk-2")
    assert first.success and again.success and other.success
    assert [n.path for n in again.created] == [n.path for n in first.created]
    assert again.already_present == () and len(first.created) == 3
    assert other.created == () and len(other.already_present) == 3
    mesh.dispose()


async def test_the_awaitable_bulk_resent_after_its_reissue_answers_its_nodes_created() -> (
    None
):
    """Fails at 1d389e8: there was no in-process bulk (``Mesh.create_many``), only the
    observable ``create_nodes``. A bulk answered UNAVAILABLE is recorded and re-issued by the
    mesh; the caller's re-send with the same key then answers its nodes ``created``. Negative
    control: the same nodes under another key are ``already_present``, nothing created."""
    mesh, store = make_mesh()
    await mesh.create(MeshNode(path="shop/seed", content={}), access=ALICE)
    nodes = [order().model_copy(update={"path": f"shop/orders/{i}"}) for i in range(3)]
    store.refuse_writes_as_unreachable()
    refused = await mesh.create_many(nodes, access=ALICE, request_id="bulk-9")
    assert refused.rejection_reason is RejectionReason.UNAVAILABLE, refused
    assert refused.request_id == "bulk-9" and len(refused.recorded_for_reissue) == 3
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("listener resumed")
    outcomes = await collected.wait(3)
    assert {o.verdict for o in outcomes} == {Verdict.LANDED}, outcomes

    again = await mesh.create_many(nodes, access=ALICE, request_id="bulk-9")
    assert again.success and sorted(n.path for n in again.created) == [n.path for n in nodes]
    assert again.already_present == ()
    other = await mesh.create_many(nodes, access=ALICE, request_id="bulk-10")
    assert other.success and other.created == () and len(other.already_present) == 3
    # Invalid input is answered too, never raised (a bulk's answer is a report).
    bad = await mesh.create_many([{"path": "shop/bad path"}], access=ALICE)
    assert not bad.success and bad.rejection_reason is RejectionReason.INVALID_PATH, bad
    mesh.dispose()
