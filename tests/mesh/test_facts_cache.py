"""Partition facts kept between operations (issue 15, item 3), and only while the feed watches.

A create in a known partition reads nothing: one store call, the write. Every kept fact is
dropped by the change feed: a grant revoked elsewhere is honoured, a gap forgets everything,
a feed held or dropped is not trusted. Each rule has its negative control: the cache with that
rule broken (patched at run time) fails the same test.
"""

from __future__ import annotations

import pytest

from rxmesh import Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.mesh._facts_cache import FactsCache
from rxmesh.model import ChangeFeedGap
from rxmesh.operations import CreateNodeRequest, CreateNodeResponse, RejectionReason
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, BOB, doc

from .conftest import FAST, make_mesh


async def ask(mesh: Mesh, request: CreateNodeRequest) -> CreateNodeResponse:
    return await first_value(mesh.create_node(request), timeout=10)


def calls(store: FaultInjectingStore) -> list[str]:
    return [op.op for op in store.operations]


async def test_a_create_in_a_known_partition_reads_nothing() -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b"), access=ALICE))).success
    store.clear_log()
    response = await ask(mesh, CreateNodeRequest(node=doc("acme/c"), access=ALICE))
    assert response.success
    assert calls(store) == ["write"]


async def test_with_the_cache_off_every_create_reads_its_facts() -> None:
    """The control of the test above: the same sequence with the cache off reads each time."""
    mesh, store = make_mesh(cache_partition_facts=False)
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    store.clear_log()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/c"), access=ALICE))).success
    assert calls(store) == ["read_many", "write"]


async def _grant_bob_then_revoke(mesh: Mesh, store: FaultInjectingStore) -> None:
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    grant = MeshNode(path="acme/_access/bob", node_type="Grant", content={"permissions": ["*"]})
    await store.inner.write(grant.model_copy(update={"created_by": "system"}))
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b1"), access=BOB))).success
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b2"), access=BOB))).success
    # Revoked by someone else, straight in the store: only the change feed tells this mesh.
    assert await store.inner.delete("acme/_access/bob")


async def test_a_grant_revoked_elsewhere_is_honoured_at_once() -> None:
    mesh, store = make_mesh()
    await _grant_bob_then_revoke(mesh, store)
    response = await ask(mesh, CreateNodeRequest(node=doc("acme/b3"), access=BOB))
    assert response.rejection_reason is RejectionReason.FORBIDDEN, response


async def test_negative_control_a_cache_deaf_to_changes_lets_the_revoked_user_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = FactsCache._on_evidence

    def deaf(self: FactsCache, evidence: object) -> None:
        if isinstance(evidence, ChangeFeedGap):
            original(self, evidence)  # type: ignore[arg-type]

    monkeypatch.setattr(FactsCache, "_on_evidence", deaf)
    mesh, store = make_mesh()
    await _grant_bob_then_revoke(mesh, store)
    response = await ask(mesh, CreateNodeRequest(node=doc("acme/b3"), access=BOB))
    assert response.success  # the defect this file's rules exist to prevent


async def test_a_gap_forgets_every_kept_fact() -> None:
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    mesh = Mesh(store, retry_delays=FAST)
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b"), access=ALICE))).success
    inner.declare_gap("test")
    store.clear_log()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/c"), access=ALICE))).success
    assert calls(store) == ["read_many", "write"]


@pytest.mark.parametrize("knob", ["hold_change_feed", "drop_change_feed"])
async def test_a_feed_held_or_dropped_is_not_trusted(knob: str) -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b"), access=ALICE))).success
    getattr(store, knob)()
    store.clear_log()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/c"), access=ALICE))).success
    assert calls(store) == ["read_many", "write"]
    # Resumed without a gap: what was kept before the loss is not trusted again.
    store.resume_change_feed(announce_gap=False)
    store.clear_log()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/d"), access=ALICE))).success
    assert calls(store) == ["read_many", "write"]


async def test_a_store_that_cannot_say_its_feed_is_whole_gets_no_cache() -> None:
    class Silent(InMemoryStore):
        feed_is_whole = None  # type: ignore[assignment]

    store = FaultInjectingStore(Silent())
    mesh = Mesh(store, retry_delays=FAST)
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    store.clear_log()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b"), access=ALICE))).success
    assert calls(store) == ["read_many", "write"]


async def test_in_a_known_partition_already_exists_still_outranks_a_refusal() -> None:
    """The INSERT is the existence check there; a refusal reads the path first, so the answer
    is the one the full read would give."""
    mesh, store = make_mesh(validators=[_refuse_bad])
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/b"), access=ALICE))).success
    bad = doc("acme/a", bad=True)
    response = await ask(mesh, CreateNodeRequest(node=bad, access=ALICE))
    assert response.rejection_reason is RejectionReason.NODE_ALREADY_EXISTS, response
    response = await ask(mesh, CreateNodeRequest(node=doc("acme/new", bad=True), access=ALICE))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED, response


async def test_in_a_known_partition_a_conflict_of_this_very_request_is_created() -> None:
    """An ambiguous commit: the row is there with this request's id; the retry is answered
    created, not NODE_ALREADY_EXISTS."""
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=doc("acme/a"), access=ALICE))).success
    first = CreateNodeRequest(node=doc("acme/b"), access=ALICE)
    assert (await ask(mesh, first)).success
    again = await ask(mesh, first)
    assert again.success and again.node is not None and again.node.path == "acme/b"
    other = await ask(mesh, CreateNodeRequest(node=doc("acme/b"), access=ALICE))
    assert other.rejection_reason is RejectionReason.NODE_ALREADY_EXISTS


async def test_a_read_that_raced_a_change_is_not_kept() -> None:
    cache = FactsCache(InMemoryStore())
    from rxmesh.mesh._access import PartitionFacts
    from rxmesh.model import CommitAnnounced

    root, owner = doc("acme"), doc("acme/_owner")
    grant = doc("acme/_access/alice")
    epoch = cache.epoch("acme")
    cache._on_evidence(CommitAnnounced(source="memory", path="acme/_access/alice"))
    cache.put(PartitionFacts("acme", root, grant, owner), "alice", epoch)
    assert cache.get("acme", "alice") is None
    cache.put(PartitionFacts("acme", root, grant, owner), "alice", cache.epoch("acme"))
    assert cache.get("acme", "alice") is not None  # the control: unraced, it is kept


def _refuse_bad(node: MeshNode, access: object) -> None:
    from rxmesh.exceptions import NodeValidationError

    if node.content and node.content.get("bad"):
        raise NodeValidationError(f"'{node.path}' is bad", path=node.path)
