"""An answer leaves no garbage that only the cyclic GC can free (issue 15, issue 16 item 5).

A caught exception kept in a local of a frame its traceback holds is a reference cycle: every
frame it went through stays alive until a GC pass. Each UNAVAILABLE answer left 61 such objects
(the terminal arm kept the write's failure, ``answer_now`` kept the fault, the fault store kept
the error it raised); in an outage that is the GC's work, and its pauses are what the stall
diagnosis then reports. Against 537a5c1 the UNAVAILABLE test fails (61.0 objects an answer).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rxmesh import CreateNodeRequest, CreateNodesRequest, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.operations import RejectionReason
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _answers(mesh: Mesh, n: int, tag: str) -> set[RejectionReason | None]:
    reasons = set()
    for i in range(n):
        node = MeshNode(path=f"u/{tag}{i}", node_type="T", content={"i": i})
        answer = await first_value(mesh.create_node(CreateNodeRequest(node=node, access=ALICE)))
        reasons.add(answer.rejection_reason)
    return reasons



async def test_an_unavailable_answer_leaves_no_cyclic_garbage(no_gc: None) -> None:
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=())
    await mesh.create(MeshNode(path="u/warm", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    assert await _answers(mesh, 20, "w") == {RejectionReason.UNAVAILABLE}  # warm-up
    gc.collect()
    assert await _answers(mesh, 200, "n") == {RejectionReason.UNAVAILABLE}
    assert gc.collect() / 200 < 1.0  # per answer; before: 61
    mesh.dispose()


async def test_a_created_answer_leaves_no_cyclic_garbage(no_gc: None) -> None:
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await _answers(mesh, 20, "w")
    gc.collect()
    assert await _answers(mesh, 200, "n") == {None}
    assert gc.collect() / 200 < 1.0
    mesh.dispose()


def test_negative_control_the_count_sees_a_kept_exception(no_gc: None) -> None:
    """What the tests above count: a caught exception kept in a local of a frame on its
    traceback is found by a GC pass."""

    def keep() -> None:
        try:
            raise ValueError("kept")
        except ValueError as exc:
            kept = exc  # noqa: F841 - the cycle under test
            del exc

    gc.collect()
    for _ in range(10):
        keep()
    assert gc.collect() >= 10


async def test_an_unavailable_bulk_answer_keeps_no_frame_alive(no_gc: None) -> None:
    """The bulk arm's wait for its write drops the future that holds the error (the error's
    traceback holds the waiting frame): no frame of the attempt is left for the GC. (What is
    left of a bulk answer's garbage is reactivex's subscription of the store's write_many.)
    Against 537a5c1: 3 frames an answer."""
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=())
    await mesh.create(MeshNode(path="u/warm", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()

    async def bulk(tag: str) -> RejectionReason | None:
        nodes = [MeshNode(path=f"u/{tag}x{j}", node_type="T", content={}) for j in range(3)]
        request = CreateNodesRequest(nodes=nodes, access=ALICE)
        return (await first_value(mesh.create_nodes(request))).rejection_reason

    for i in range(3):
        await bulk(f"w{i}")
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert {await bulk(f"n{i}") for i in range(20)} == {RejectionReason.UNAVAILABLE}
        gc.collect()
        frames = [o for o in gc.garbage if type(o).__name__ == "frame"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert frames == []
    mesh.dispose()

