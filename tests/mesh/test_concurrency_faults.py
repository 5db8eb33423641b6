"""Concurrency under faults: the four sequences the model-based check found (issue 20).

Each is minimal and each FAILS against the code before the fix (the docstrings say how).
"""

from __future__ import annotations

import asyncio

import pytest

from rxmesh import (
    CreateNodeRequest,
    CreateNodesRequest,
    MeshNode,
    RejectionReason,
    Verdict,
)
from rxmesh.aio import first_value
from rxmesh.operations import DeleteNodeRequest, MoveNodeRequest, UpdateNodeRequest
from tests.helpers import ALICE, BOB, CAROL, Outcomes, doc

from .conftest import make_mesh


async def test_a_user_without_rights_cannot_delete_a_node_created_concurrently() -> None:
    """FAILS against the old bootstrap: C's delete was authorised on a facts read that saw
    ``beta`` new ("may open a partition" was taken as leave to delete), then ran after B had
    claimed the partition and created ``beta/b``: both succeeded and B's node was gone."""
    mesh, store = make_mesh()
    store.fault_next_read("beta", times=2)  # both facts reads retry once: the race widens
    create, delete = await asyncio.gather(
        first_value(mesh.create_node(CreateNodeRequest(node=doc("beta/b"), access=BOB))),
        first_value(mesh.delete_node(DeleteNodeRequest(path="beta/b", access=CAROL))),
    )
    assert create.success, create
    assert not delete.success, delete
    # Linearised at its facts read the delete met either a partition (hence a node) that did not
    # exist yet, or bob's partition, where carol holds nothing: both are true answers.
    assert delete.rejection_reason in {
        RejectionReason.VALIDATION_FAILED,
        RejectionReason.FORBIDDEN,
    }, delete
    assert await store.read("beta/b") is not None
    again = await first_value(mesh.delete_node(DeleteNodeRequest(path="beta/b", access=CAROL)))
    assert again.rejection_reason is RejectionReason.FORBIDDEN


async def race_a_rightless_delete_against_a_create() -> tuple[object, object, MeshNode | None]:
    """The interleaving forced: carol's delete reads the facts of ``beta`` while it is new, then
    its next store call (the read of its basis, before the compare-and-set delete) is held until
    bob has created ``beta/b`` (claiming the partition)."""
    mesh, store = make_mesh()
    created = asyncio.Event()
    original = store.read
    held: list[str] = []

    async def held_read(path: str) -> MeshNode | None:
        if path == "beta/b" and not held:  # the delete's read (before bob's create starts)
            held.append(path)
            await created.wait()
        return await original(path)

    store.read = held_read  # type: ignore[method-assign]
    delete = asyncio.ensure_future(
        first_value(mesh.delete_node(DeleteNodeRequest(path="beta/b", access=CAROL)))
    )
    for _ in range(20):  # the delete reads beta's facts (new) and reaches its store call
        await asyncio.sleep(0)
    held.append("bob")  # from here on no read is held: bob's create must not wait for itself
    create = await first_value(mesh.create_node(CreateNodeRequest(node=doc("beta/b"), access=BOB)))
    created.set()
    deleted = await asyncio.wait_for(delete, 5)
    return create, deleted, await store.read("beta/b")


async def test_a_rightless_delete_racing_a_create_never_removes_the_node() -> None:
    """The same bug, deterministic: the delete is answered from the snapshot it was judged on."""
    create, delete, row = await race_a_rightless_delete_against_a_create()
    assert create.success  # type: ignore[attr-defined]
    assert delete.rejection_reason is RejectionReason.VALIDATION_FAILED  # type: ignore[attr-defined]
    assert row is not None


async def test_the_forced_race_catches_the_defect_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control of the test above: with issue 20's bug 1 put back at run time (the
    model-based check's ``bug1`` mutant: a partition seen new authorises the delete), the same
    interleaving deletes bob's node, as the issue reported."""
    from tests.machine._mutants import BY_NAME

    BY_NAME["bug1"].apply(monkeypatch)
    create, delete, row = await race_a_rightless_delete_against_a_create()
    assert create.success  # type: ignore[attr-defined]
    assert delete.success  # type: ignore[attr-defined]
    assert row is None


async def test_no_verb_is_authorised_by_a_partition_seen_new() -> None:
    """The same class for update and move: a partition seen new authorises nothing but its own
    claim, so a verb that needs an existing node there is answered "no node", and writes
    nothing."""
    mesh, store = make_mesh()
    update = await first_value(
        mesh.update_node(UpdateNodeRequest(node=doc("fresh/x"), access=CAROL))
    )
    move = await first_value(
        mesh.move_node(MoveNodeRequest(source="fresh/x", target="fresh/y", access=CAROL))
    )
    delete = await first_value(mesh.delete_node(DeleteNodeRequest(path="fresh/x", access=CAROL)))
    for answer in (update, move, delete):
        assert answer.rejection_reason is RejectionReason.VALIDATION_FAILED, answer
        assert "no node at 'fresh/x'" in (answer.error or "")
    assert list(store.inner.nodes()) == []


async def test_negative_control_the_owner_still_deletes_its_node() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("beta/b"), access=BOB)
    answer = await first_value(mesh.delete_node(DeleteNodeRequest(path="beta/b", access=BOB)))
    assert answer.success, answer
    assert await store.read("beta/b") is None


async def test_unavailable_after_a_heal_names_what_was_written() -> None:
    """FAILS against the old bulk: ``alpha`` was claimed (owner, root and grant written) before
    the ``beta`` facts read failed, and the answer said "Nothing was written". Now every
    partition is read before any is healed: nothing is written, and it says so truthfully."""
    mesh, store = make_mesh(retry_delays=())
    store.fault_next_read("beta", times=1)
    answer = await first_value(
        mesh.create_nodes(CreateNodesRequest(nodes=(doc("alpha/a"), doc("beta/c")), access=ALICE))
    )
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
    assert "Nothing was written" in (answer.error or "")
    assert list(store.inner.nodes()) == []


async def test_unavailable_after_a_heal_that_did_write_says_what_it_wrote() -> None:
    """FAILS against the old arm ("Nothing was written" after ``p/_owner``, ``p`` and
    ``p/_access/alice`` were written). The heal landed, then the node's own INSERT was refused."""
    mesh, store = make_mesh(retry_delays=())
    original = store.write
    heals = 0

    async def write(node: MeshNode) -> MeshNode:
        nonlocal heals
        if node.path == "p/x":  # the node itself: the store goes away right then
            store.refuse_writes_as_unreachable()
        else:
            heals += 1
        return await original(node)

    store.write = write  # type: ignore[method-assign]
    answer = await first_value(mesh.create_node(CreateNodeRequest(node=doc("p/x"), access=ALICE)))
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
    text = answer.error or ""
    assert "Nothing was written" not in text
    assert heals == 3
    for path in ("p/_owner", "'p'", "p/_access/alice"):
        assert path in text, text
    assert "same node id" in text


async def test_a_cross_partition_move_that_healed_says_what_it_wrote() -> None:
    mesh, store = make_mesh(retry_delays=())
    await mesh.create(doc("src/a"), access=ALICE)
    store_move = store.move

    async def move(source: str, target: str, *basis: object) -> MeshNode | None:
        store.refuse_writes_as_unreachable()
        return await store_move(source, target, *basis)

    store.move = move  # type: ignore[method-assign]
    answer = await first_value(
        mesh.move_node(MoveNodeRequest(source="src/a", target="dst/a", access=ALICE))
    )
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
    assert "Nothing was written" not in (answer.error or "")
    assert "dst/_owner" in (answer.error or "")


async def test_a_node_deleted_by_its_owner_is_not_resurrected_by_the_ledger() -> None:
    """FAILS against the old ledger: the caller's verbatim re-issue landed, the caller deleted the
    node, and the ledger's own re-issue (on the next evidence) created it again, LANDED."""
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    outcomes = Outcomes(mesh.ledger)
    store.refuse_writes_as_unreachable()
    request = CreateNodeRequest(node=doc("p/x"), access=ALICE)
    first = await first_value(mesh.create_node(request))
    assert first.recorded_for_reissue
    store.drop_change_feed()  # the feed is down: no evidence until the gap below
    store.restore()
    again = await first_value(mesh.create_node(request))  # the caller re-issues it verbatim
    assert again.success
    settled = await outcomes.wait(1)
    assert [(o.intent.request_id, o.verdict) for o in settled] == [
        (request.request_id, Verdict.LANDED)
    ]
    assert mesh.ledger.pending() == ()
    await mesh.delete("p/x", access=ALICE)
    store.resume_change_feed(reason="listener resumed")  # the gap: nothing is left to re-issue
    await asyncio.sleep(0)
    assert await store.read("p/x") is None
    stats = mesh.ledger.statistics()
    assert (stats.settled, stats.pending, stats.in_flight) == (1, 0, 0)  # one verdict, once


async def test_a_judged_answer_to_the_callers_reissue_settles_the_intent_too() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    outcomes = Outcomes(mesh.ledger)
    store.refuse_writes_as_unreachable()
    request = CreateNodeRequest(node=doc("p/x"), access=ALICE)
    await first_value(mesh.create_node(request))
    store.restore()
    await mesh.create(doc("p/x"), access=ALICE)  # someone (another request) took the path
    again = await first_value(mesh.create_node(request))
    assert again.rejection_reason is RejectionReason.NODE_ALREADY_EXISTS
    settled = await outcomes.wait(1)
    assert [(o.intent.request_id, o.verdict) for o in settled] == [
        (request.request_id, Verdict.ALREADY_PRESENT)
    ]


async def test_negative_control_an_unanswered_reissue_keeps_the_intent() -> None:
    """The caller's verbatim re-issue met the store away again: the intent stays, one verdict
    still to come."""
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    request = CreateNodeRequest(node=doc("p/x"), access=ALICE)
    await first_value(mesh.create_node(request))
    again = await first_value(mesh.create_node(request))
    assert again.rejection_reason is RejectionReason.UNAVAILABLE
    assert [p.request_id for p in mesh.ledger.pending()] == [request.request_id]
    assert mesh.ledger.statistics().settled == 0


async def test_a_verbatim_bulk_reissue_settles_its_nodes_intents() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    outcomes = Outcomes(mesh.ledger)
    store.refuse_writes_as_unreachable()
    request = CreateNodesRequest(nodes=(doc("p/a"), doc("p/b")), access=ALICE)
    first = await first_value(mesh.create_nodes(request))
    assert first.recorded_for_reissue == ("p/a", "p/b")
    store.restore()
    again = await first_value(mesh.create_nodes(request))
    assert again.success
    settled = await outcomes.wait(2)
    assert sorted((o.intent.path, o.verdict) for o in settled) == [
        ("p/a", Verdict.LANDED),
        ("p/b", Verdict.LANDED),
    ]
    assert mesh.ledger.pending() == ()


async def test_a_reissue_in_flight_is_called_off_when_the_callers_own_reissue_lands() -> None:
    """The ledger's re-issue is stuck in its write when the caller's own re-issue of the same
    request lands: the intent is settled once (LANDED, by the caller's answer) and the stuck
    re-issue is disposed, so it cannot create the node again after a later delete."""
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    request = CreateNodeRequest(node=doc("p/x"), access=ALICE)
    await first_value(mesh.create_node(request))
    store.restore()
    original = store.write
    stuck: list[bool] = []
    called_off = asyncio.Event()

    async def write(node: MeshNode) -> MeshNode:
        if node.path == "p/x" and not stuck:  # the recovery's write: it never answers
            stuck.append(False)
            try:
                await asyncio.Event().wait()
            finally:
                stuck.append(True)  # cancelled: the re-issue was called off
                called_off.set()
        return await original(node)

    store.write = write  # type: ignore[method-assign]
    outcomes = Outcomes(mesh.ledger)
    store.declare_gap("listener resumed")  # the recovery re-issues; its write hangs
    for _ in range(10):
        await asyncio.sleep(0)
    assert stuck == [False]
    again = await first_value(mesh.create_node(request))
    assert again.success
    got = await outcomes.wait(1)
    assert [(o.intent.request_id, o.verdict) for o in got] == [(request.request_id, Verdict.LANDED)]
    # The stuck re-issue was disposed: its task is cancelled, and the cancellation reaches its
    # write at that task's next step (the caller's answer may arrive first: it is awaited in the
    # caller's own task).
    await asyncio.wait_for(called_off.wait(), timeout=5)
    assert stuck == [False, True]
    assert mesh.recovery is not None
    assert mesh.recovery.reissuing == 0
