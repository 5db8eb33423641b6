"""Update, delete and move: the same sweep — the one rule at every terminal arm."""

from __future__ import annotations

import pytest
from reactivex import Observable

from rxmesh import AccessContext, Mesh, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import (
    NodeAccessDeniedError,
    NodeExistsError,
    NodeValidationError,
    StoreError,
    StoreUnavailableError,
)
from rxmesh.operations import (
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)
from tests.helpers import ALICE, BOB, doc

from .conftest import make_mesh


def ask_verb(mesh: Mesh, verb: str) -> Observable[NodeOperationResponse]:
    """The same change to ``acme/a`` through one of the three verbs."""
    if verb == "update":
        return mesh.update_node(UpdateNodeRequest(node=doc("acme/a", x=3), access=ALICE))
    if verb == "delete":
        return mesh.delete_node(DeleteNodeRequest(path="acme/a", access=ALICE))
    return mesh.move_node(MoveNodeRequest(source="acme/a", target="acme/z", access=ALICE))


async def seeded() -> tuple[Mesh, object]:
    mesh, store = make_mesh()
    await mesh.create(doc("acme/a"), access=ALICE)
    return mesh, store


async def test_update_delete_and_move_work_on_a_reachable_store() -> None:
    mesh, store = await seeded()
    updated = await mesh.update(doc("acme/a", x=2), access=ALICE)
    assert updated.content == {"x": 2}
    assert updated.version == 2
    moved = await mesh.move("acme/a", "acme/b", access=ALICE)
    assert moved.path == "acme/b"
    await mesh.delete("acme/b", access=ALICE)
    assert await store.read("acme/b") is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("verb", ["update", "delete", "move"])
async def test_each_verb_answers_unavailable_for_an_unreachable_store(verb: str) -> None:
    mesh, store = await seeded()
    store.refuse_writes_as_unreachable()  # type: ignore[attr-defined]
    response = await first_value(ask_verb(mesh, verb), timeout=10)
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "Nothing was written" in (response.error or "")
    with pytest.raises(StoreUnavailableError):
        if verb == "update":
            await mesh.update(doc("acme/a", x=3), access=ALICE)
        elif verb == "delete":
            await mesh.delete("acme/a", access=ALICE)
        else:
            await mesh.move("acme/a", "acme/z", access=ALICE)


@pytest.mark.parametrize("verb", ["update", "delete", "move"])
async def test_each_verb_answers_unknown_for_a_non_transient_store_error(verb: str) -> None:
    """The falsifying control of the sweep."""
    mesh, store = await seeded()
    store.refuse_writes_as_unreachable(lambda: StoreError("syntax", sqlstate="42601"))  # type: ignore[attr-defined]
    response = await first_value(ask_verb(mesh, verb), timeout=10)
    assert response.rejection_reason is RejectionReason.UNKNOWN
    assert (response.error or "").startswith("Unexpected error")


async def test_verbs_are_forbidden_without_a_grant() -> None:
    mesh, _ = await seeded()
    with pytest.raises(NodeAccessDeniedError):
        await mesh.update(doc("acme/a", x=9), access=BOB)
    with pytest.raises(NodeAccessDeniedError):
        await mesh.delete("acme/a", access=BOB)
    with pytest.raises(NodeAccessDeniedError):
        await mesh.move("acme/a", "acme/q", access=BOB)


async def test_a_missing_node_and_a_taken_target_are_judged() -> None:
    mesh, _ = await seeded()
    await mesh.create(doc("acme/b"), access=ALICE)
    with pytest.raises(NodeValidationError, match="no node at 'acme/nope'"):
        await mesh.update(doc("acme/nope"), access=ALICE)
    with pytest.raises(NodeValidationError, match="no node at 'acme/nope'"):
        await mesh.delete("acme/nope", access=ALICE)
    with pytest.raises(NodeExistsError):
        await mesh.move("acme/a", "acme/b", access=ALICE)


async def test_a_malformed_verb_request_names_the_field() -> None:
    mesh, _ = await seeded()
    response = await first_value(
        mesh.move_node({"source": "acme/a", "target": "acme/../x", "access": {"user": "alice"}})
    )
    assert response.rejection_reason is RejectionReason.INVALID_PATH
    assert "acme/../x" in (response.error or "")
    response = await first_value(mesh.delete_node({"path": "acme/a", "force": True}))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "force" in (response.error or "")


async def test_the_system_may_do_anything() -> None:
    mesh, _ = await seeded()
    system = AccessContext.system()
    await mesh.update(doc("acme/a", x=5), access=system)
    await mesh.delete("acme/a", access=system)
