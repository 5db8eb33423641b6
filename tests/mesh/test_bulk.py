"""The bulk create: phases and windows (its partial landing: test_bulk_partial_landing.py)."""

from __future__ import annotations

import pytest

from rxmesh import CreateNodesRequest, CreateNodesResponse, Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import NodeValidationError
from rxmesh.testing._fault_store import connect_timeout_error
from tests.helpers import ALICE, BOB

from .conftest import make_mesh


async def ask(mesh: Mesh, request: object) -> CreateNodesResponse:
    return await first_value(mesh.create_nodes(request), timeout=10)  # type: ignore[arg-type]


def nodes(prefix: str, count: int) -> tuple[MeshNode, ...]:
    return tuple(
        MeshNode(path=f"{prefix}/n{i:05d}", node_type="Doc", content={"i": i}) for i in range(count)
    )


async def test_a_bulk_create_lands_every_node_in_windows() -> None:
    mesh, store = make_mesh()
    batch = nodes("acme", 25) + nodes("beta", 5)
    response = await ask(mesh, CreateNodesRequest(nodes=batch, access=ALICE, window=10))
    assert response.success, response
    assert [n.path for n in response.created] == [n.path for n in batch]
    assert all(n.version == 1 and n.created_by == "alice" for n in response.created)
    write_many = [op for op in store.operations if op.op == "write_many"]
    assert len(write_many) == 1


async def test_existing_paths_are_skipped_and_reported_never_overwritten() -> None:
    mesh, store = make_mesh()
    batch = nodes("acme", 4)
    first = await ask(mesh, CreateNodesRequest(nodes=batch[:2], access=ALICE))
    assert first.success
    second = await ask(mesh, CreateNodesRequest(nodes=batch, access=ALICE))
    assert second.success
    assert second.already_present == (batch[0].path, batch[1].path)
    assert [n.path for n in second.created] == [batch[2].path, batch[3].path]
    stored = await store.read(batch[0].path)
    assert stored is not None
    assert stored.request_id == first.request_id  # untouched


async def test_a_duplicate_path_in_the_batch_is_invalid_path_naming_it() -> None:
    mesh, store = make_mesh()
    dup = (*nodes("acme", 2), nodes("acme", 1)[0])
    response = await ask(mesh, CreateNodesRequest(nodes=dup, access=ALICE))
    assert response.rejection_reason is RejectionReason.INVALID_PATH
    assert "acme/n00000" in (response.error or "")
    assert store.operations == []


async def test_an_invalid_entry_fails_the_batch_naming_the_first_offender() -> None:
    mesh, store = make_mesh()
    bad = (*nodes("acme", 2), MeshNode(path="acme/empty"), MeshNode(path="acme/empty2"))
    response = await ask(mesh, CreateNodesRequest(nodes=bad, access=ALICE))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "acme/empty'" in (response.error or "")
    assert store.operations == []


async def test_a_healthy_node_plus_an_unreachable_one_is_unavailable_nothing_written() -> None:
    mesh, store = make_mesh()
    batch = nodes("acme", 2)
    store.fault_next_read(batch[1].path, lambda: connect_timeout_error("memory"), times=4)
    response = await ask(mesh, CreateNodesRequest(nodes=batch, access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "Nothing was written" in (response.error or "")
    assert "Bulk creation of 2 node(s)" in (response.error or "")
    assert store.writes_attempted() == []
    # Beyond the seeds: every node that did not land is recorded for one re-issue.
    assert sorted(p.node.path for p in mesh.ledger.pending()) == [n.path for n in batch]


async def test_a_42P01_in_the_bulk_write_is_unknown_not_unavailable() -> None:
    from rxmesh.exceptions import StoreError

    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodesRequest(nodes=nodes("acme", 1), access=ALICE))).success
    store.refuse_writes_as_unreachable(lambda: StoreError("no table", sqlstate="42P01"))
    response = await ask(mesh, CreateNodesRequest(nodes=nodes("acme", 3)[1:], access=ALICE))
    assert response.rejection_reason is RejectionReason.UNKNOWN
    assert (response.error or "").startswith("Unexpected error")
    assert mesh.ledger.pending() == ()


async def test_re_issuing_the_same_bulk_request_counts_its_own_rows_as_created() -> None:
    mesh, _ = make_mesh()
    request = CreateNodesRequest(nodes=nodes("acme", 3), access=ALICE)
    first = await ask(mesh, request)
    again = await ask(mesh, request)
    assert first.success
    assert again.success
    assert [n.path for n in again.created] == [n.path for n in first.created]
    assert again.already_present == ()


@pytest.mark.parametrize("window", [0, 2001])
async def test_a_bad_window_is_refused_naming_it(window: int) -> None:
    mesh, _ = make_mesh()
    response = await ask(
        mesh,
        {
            "nodes": [n.model_dump() for n in nodes("acme", 1)],
            "window": window,
            "access": {"user": "a"},
        },
    )
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "window" in (response.error or "")


async def test_a_batch_refused_by_a_validator_writes_nothing_not_even_a_partition_heal() -> None:
    def no_colour(node: MeshNode, access: object) -> None:
        if isinstance(node.content, dict) and "colour" in node.content:
            raise NodeValidationError(f"content of '{node.path}' may not name a colour")

    mesh, store = make_mesh(validators=[no_colour])
    batch = (*nodes("fresh", 2), MeshNode(path="fresh/bad", node_type="Doc", content={"colour": 1}))
    response = await ask(mesh, CreateNodesRequest(nodes=batch, access=ALICE))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "fresh/bad" in (response.error or "")
    assert store.writes_attempted() == []


async def test_a_forbidden_batch_is_forbidden_even_when_an_entry_is_also_invalid() -> None:
    def no_colour(node: MeshNode, access: object) -> None:
        if isinstance(node.content, dict) and "colour" in node.content:
            raise NodeValidationError(f"content of '{node.path}' may not name a colour")

    mesh, store = make_mesh(validators=[no_colour])
    assert (await ask(mesh, CreateNodesRequest(nodes=nodes("acme", 1), access=ALICE))).success
    bad = (MeshNode(path="acme/bad", node_type="Doc", content={"colour": 1}),)
    response = await ask(mesh, CreateNodesRequest(nodes=bad, access=BOB))
    assert response.rejection_reason is RejectionReason.FORBIDDEN
