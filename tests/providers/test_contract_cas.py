"""The Store contract for compare-and-set update, delete and move (issue 18), on every kind.

Each rule is checked with the verb awaited AND through the adapter to observables
(``rxmesh.providers.observe``), so the two can never drift; each has its negative control (the
same call without the basis, or with the basis the row really has, does apply).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxmesh.aio import first_value
from rxmesh.exceptions import StoreConflictError, StoreVersionConflictError
from rxmesh.faults import is_store_unreachable
from rxmesh.model import MeshNode
from rxmesh.providers import Store, observe
from tests.providers.conftest import WAIT


def node(path: str, *, request_id: str | None = "req-1", **content: object) -> MeshNode:
    return MeshNode(
        path=path, node_type="Note", content=content or {"text": path}, request_id=request_id
    )


VIA = ["awaited", "observed"]


async def run(store: Store, via: str, operation: str, *args: Any) -> Any:
    verb = getattr(store, operation)
    if via == "observed":
        return await first_value(observe(verb, *args), timeout=WAIT)
    return await asyncio.wait_for(verb(*args), WAIT)


async def seeded(store: Store, path: str) -> MeshNode:
    return await asyncio.wait_for(store.write(node(path)), WAIT)


@pytest.mark.parametrize("via", VIA)
async def test_an_update_at_the_expected_version_applies_and_keeps_its_request_id(
    store: Store, partition: str, via: str
) -> None:
    row = await seeded(store, f"{partition}/a")
    updated = await run(
        store, via, "update", node(f"{partition}/a", text="v2"), row.version, row.request_id, "u-1"
    )
    assert updated.version == row.version + 1
    assert updated.content == {"text": "v2"}
    assert updated.request_id == "u-1"  # the id of the row's last write
    assert updated.created_by == row.created_by


@pytest.mark.parametrize("via", VIA)
async def test_an_update_based_on_an_older_version_changes_nothing(
    store: Store, partition: str, via: str
) -> None:
    row = await seeded(store, f"{partition}/a")
    newer = await run(store, via, "update", node(f"{partition}/a", text="newer"), None, None, "u-1")
    with pytest.raises(StoreVersionConflictError) as caught:
        await run(
            store, via, "update", node(f"{partition}/a", text="stale"), row.version, None, "u-2"
        )
    assert caught.value.expected_version == row.version
    assert caught.value.actual_version == newer.version
    assert not is_store_unreachable(caught.value)  # a verdict, never "could not reach"
    now = await asyncio.wait_for(store.read(f"{partition}/a"), WAIT)
    assert now is not None and now.content == {"text": "newer"}  # the newer write survives


@pytest.mark.parametrize("via", VIA)
async def test_the_basis_request_id_is_compared_too(store: Store, partition: str, via: str) -> None:
    """A node deleted and created again is back at version 1: only the request id tells it
    from the node the request was based on."""
    await seeded(store, f"{partition}/a")
    await run(store, via, "delete", f"{partition}/a")
    again = await asyncio.wait_for(store.write(node(f"{partition}/a", request_id="req-2")), WAIT)
    with pytest.raises(StoreVersionConflictError):
        await run(store, via, "update", node(f"{partition}/a"), again.version, "req-1", "u-1")
    with pytest.raises(StoreVersionConflictError):
        await run(store, via, "delete", f"{partition}/a", again.version, "req-1")
    assert await asyncio.wait_for(store.read(f"{partition}/a"), WAIT) == again
    # negative control: the basis the row really has applies
    assert await run(store, via, "delete", f"{partition}/a", again.version, "req-2") is True


@pytest.mark.parametrize("via", VIA)
async def test_an_update_finding_its_own_request_id_is_its_landed_write(
    store: Store, partition: str, via: str
) -> None:
    row = await seeded(store, f"{partition}/a")
    first = await run(
        store, via, "update", node(f"{partition}/a", text="v2"), row.version, None, "u-1"
    )
    again = await run(
        store, via, "update", node(f"{partition}/a", text="v2"), row.version, None, "u-1"
    )
    assert again == first  # not applied twice, not a conflict


@pytest.mark.parametrize("via", VIA)
async def test_an_update_of_an_absent_node_is_none(store: Store, partition: str, via: str) -> None:
    assert await run(store, via, "update", node(f"{partition}/gone"), 1, None, "u-1") is None


@pytest.mark.parametrize("via", VIA)
async def test_a_delete_at_another_version_keeps_the_node(
    store: Store, partition: str, via: str
) -> None:
    row = await seeded(store, f"{partition}/a")
    await run(store, via, "update", node(f"{partition}/a", text="newer"), None, None, "u-1")
    with pytest.raises(StoreVersionConflictError):
        await run(store, via, "delete", f"{partition}/a", row.version, row.request_id)
    assert await asyncio.wait_for(store.read(f"{partition}/a"), WAIT) is not None
    assert await run(store, via, "delete", f"{partition}/a") is True  # without a basis: applies
    assert await run(store, via, "delete", f"{partition}/a", 1, None) is False  # gone: absent


@pytest.mark.parametrize("via", VIA)
async def test_a_move_checks_its_source_and_recognises_its_own_landing(
    store: Store, partition: str, via: str
) -> None:
    row = await seeded(store, f"{partition}/a")
    with pytest.raises(StoreVersionConflictError):
        await run(
            store, via, "move", f"{partition}/a", f"{partition}/b", row.version + 1, None, "m"
        )
    assert await asyncio.wait_for(store.read(f"{partition}/b"), WAIT) is None
    moved = await run(
        store, via, "move", f"{partition}/a", f"{partition}/b", row.version, row.request_id, "m"
    )
    assert moved.path == f"{partition}/b" and moved.request_id == "m"
    again = await run(
        store, via, "move", f"{partition}/a", f"{partition}/b", row.version, row.request_id, "m"
    )
    assert again == moved  # this request's move did land: returned, not None, not a conflict
    assert (
        await run(store, via, "move", f"{partition}/a", f"{partition}/b", row.version, None, "x")
        is None
    )  # another request's: the source is simply absent


@pytest.mark.parametrize("via", VIA)
async def test_a_move_onto_a_taken_target_is_still_a_conflict_of_paths(
    store: Store, partition: str, via: str
) -> None:
    row = await seeded(store, f"{partition}/a")
    await asyncio.wait_for(store.write(node(f"{partition}/b", request_id="other")), WAIT)
    with pytest.raises(StoreConflictError):
        await run(store, via, "move", f"{partition}/a", f"{partition}/b", row.version, None, "m")
    assert await asyncio.wait_for(store.read(f"{partition}/a"), WAIT) == row


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("basis", ["none", "read"])
async def test_an_update_reusing_the_creates_request_id_applies(
    store: Store, partition: str, via: str, basis: str
) -> None:
    """A create's id on the row is not an update's landing (issue 31 item 4). Fails at 1d389e8
    because the update returned the row unchanged at version 1."""
    row = await seeded(store, f"{partition}/a")  # version 1, request id req-1
    expected = (row.version, row.request_id) if basis == "read" else (None, None)
    updated = await run(store, via, "update", node(f"{partition}/a", text="v2"), *expected, "req-1")
    assert (updated.version, updated.content) == (2, {"text": "v2"})
    # the control: the same update again is its own landed write, returned without a commit
    again = await run(store, via, "update", node(f"{partition}/a", text="v2"), *expected, "req-1")
    assert again.version == 2


@pytest.mark.parametrize("via", VIA)
async def test_a_create_with_the_moves_request_id_at_the_target_is_not_the_moves_landing(
    store: Store, partition: str, via: str
) -> None:
    """Fails at 1d389e8 because a move whose source is gone took the target's create row (the
    same request id, version 1) for its own landed move."""
    await asyncio.wait_for(store.write(node(f"{partition}/z", request_id="m-1")), WAIT)
    moved = await run(store, via, "move", f"{partition}/a", f"{partition}/z", None, None, "m-1")
    assert moved is None
    # the control: a move that did land is recognised by its retry
    await seeded(store, f"{partition}/b")
    first = await run(store, via, "move", f"{partition}/b", f"{partition}/y", 1, "req-1", "m-2")
    retry = await run(store, via, "move", f"{partition}/b", f"{partition}/y", 1, "req-1", "m-2")
    assert first is not None and retry is not None and retry.version == first.version == 2
