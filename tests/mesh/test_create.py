"""The single create answers honestly: the terminal arm's order, the bootstrap, typed errors."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from rxmesh import (
    AccessContext,
    CreateNodeRequest,
    CreateNodeResponse,
    Mesh,
    MeshNode,
    RejectionReason,
)
from rxmesh.aio import first_value
from rxmesh.exceptions import (
    InvalidPathError,
    NodeAccessDeniedError,
    NodeExistsError,
    NodeOperationError,
    NodeValidationError,
    StoreError,
    StoreUnavailableError,
)
from rxmesh.ledger import PendingWriteLedger
from rxmesh.mesh import PartitionFacts
from rxmesh.mesh._bootstrap import Partitions
from rxmesh.operations import CreateNodesRequest
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from rxmesh.testing._fault_store import connect_timeout_error, unreachable_error
from tests.helpers import ALICE, BOB

from .conftest import FAST, make_mesh

pytestmark = pytest.mark.asyncio


async def ask(mesh: Mesh, request: object) -> CreateNodeResponse:
    return await first_value(mesh.create_node(request), timeout=10)  # type: ignore[arg-type]


def node(path: str, **content: object) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content=content or {"x": 1})


async def test_a_create_on_a_reachable_store_lands_and_reads_back() -> None:
    mesh, store = make_mesh()
    response = await ask(mesh, CreateNodeRequest(node=node("acme/a"), access=ALICE))
    assert response.success, response
    assert response.node is not None and response.node.version == 1
    assert response.node.created_by == "alice"
    stored = await store.read("acme/a")
    assert stored is not None and stored.request_id == response.request_id


async def test_a_create_whose_store_is_unreachable_is_answered_unavailable_not_unknown(
    log_records: list[dict[str, object]],
) -> None:
    mesh, store = make_mesh()
    await ask(mesh, CreateNodeRequest(node=node("acme/seed"), access=ALICE))
    store.refuse_writes_as_unreachable()
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert response.error is not None
    for phrase in ("unreachable", "Nothing was written", "same node id"):
        assert phrase in response.error
    assert "Unexpected error" not in response.error
    errors = [r for r in log_records if r["level"] == "ERROR"]
    assert len(errors) == 1
    assert "store 'memory' unreachable while creating 'acme/b'" in str(errors[0]["message"])
    assert errors[0]["extra"]["event"] == "store_unreachable"  # type: ignore[index]
    # The write was retried by the ladder (4 attempts), then answered: never retried again.
    assert len(store.writes_attempted("acme/b")) == 4
    assert [p.node.path for p in mesh.ledger.pending()] == ["acme/b"]


async def test_a_42P01_travelling_the_identical_path_is_answered_unknown() -> None:
    """The falsifying case: without it, "UNAVAILABLE for everything" would pass."""
    mesh, store = make_mesh()
    await ask(mesh, CreateNodeRequest(node=node("acme/seed"), access=ALICE))
    store.refuse_writes_as_unreachable(
        lambda: asyncpg.exceptions.UndefinedTableError('relation "nodes" does not exist')
    )
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNKNOWN
    assert response.error is not None and response.error.startswith("Unexpected error")
    assert len(store.writes_attempted("acme/b")) == 1  # not retried: not a connect fault
    assert mesh.ledger.pending() == ()


async def test_a_validation_type_wrapping_a_connect_fault_is_unavailable() -> None:
    def validator(n: MeshNode, access: AccessContext) -> None:
        try:
            raise unreachable_error("memory")
        except StoreError as exc:
            raise NodeValidationError("could not check the schema", path=n.path) from exc

    mesh, store = make_mesh(validators=[validator])
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "Nothing was written" in (response.error or "")


async def test_a_plain_validation_refusal_is_validation_failed_and_writes_nothing() -> None:
    def validator(n: MeshNode, access: AccessContext) -> None:
        raise NodeValidationError(f"content of '{n.path}' lacks a title", path=n.path)

    mesh, store = make_mesh(validators=[validator])
    response = await ask(mesh, CreateNodeRequest(node=node("fresh/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "title" in (response.error or "")
    assert store.writes_attempted() == []  # not even a partition heal
    assert mesh.ledger.pending() == ()


class _CancellingStore(InMemoryStore):
    """Its write is cancelled from inside (as a cancelled driver call would be)."""

    def __init__(self, *, with_timeout: bool) -> None:
        super().__init__()
        self.with_timeout = with_timeout

    async def write(self, node: MeshNode) -> MeshNode:
        if self.with_timeout:
            try:
                raise TimeoutError("statement timed out")
            except TimeoutError as exc:
                raise asyncio.CancelledError() from exc
        raise asyncio.CancelledError()


async def test_a_cancelled_create_is_unavailable_logged_at_debug_only(
    log_records: list[dict[str, object]],
) -> None:
    store = _CancellingStore(with_timeout=False)
    mesh = Mesh(store, retry_delays=FAST)
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "cancelled" in (response.error or "")
    about_b = [r for r in log_records if r["extra"].get("path") == "acme/b"]  # type: ignore[union-attr]
    assert [r["level"] for r in about_b] == ["DEBUG"]
    assert mesh.ledger.pending() == ()


async def test_a_cancellation_carrying_a_timeout_is_a_fault_not_a_cancellation() -> None:
    store = _CancellingStore(with_timeout=True)
    mesh = Mesh(store, retry_delays=FAST)
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNKNOWN
    assert "cancelled before it completed" not in (response.error or "")


async def test_an_unreadable_existing_partition_root_does_not_trigger_a_false_heal() -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/seed"), access=ALICE))).success
    store.clear_log()
    # Fault the root read for the whole ladder (1 + 3 retries), and only the root read.
    store.fault_next_read("acme", lambda: connect_timeout_error("memory"), times=4)
    response = await ask(mesh, CreateNodeRequest(node=node("acme/child"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert store.writes_attempted("acme") == []
    assert store.writes_attempted("acme/_access/alice") == []
    assert store.writes_attempted("acme/_owner") == []
    assert store.writes_attempted("acme/child") == []


def _swallow_fact_read_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect the bootstrap test exists for: a read helper that turns a fault into None."""
    original = Partitions.facts

    async def facts(
        self: Partitions, partition: str, user: str, *also: str
    ) -> tuple[PartitionFacts, dict[str, MeshNode]]:
        try:
            return await original(self, partition, user, *also)
        except Exception:  # the defect under test
            return PartitionFacts(partition, None, None, None), {}

    monkeypatch.setattr(Partitions, "facts", facts)


async def test_negative_control_a_swallowing_bootstrap_is_caught_by_the_same_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _swallow_fact_read_faults(monkeypatch)
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    mesh = Mesh(store, retry_delays=FAST)
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/seed"), access=ALICE))).success
    store.clear_log()
    store.fault_next_read("acme", lambda: connect_timeout_error("memory"), times=4)
    response = await ask(mesh, CreateNodeRequest(node=node("acme/child"), access=ALICE))
    # The swallowed fault looked like a new partition: a heal write WAS attempted.
    assert store.writes_attempted("acme/_owner") != [] or store.writes_attempted("acme") != []
    assert response.rejection_reason is not RejectionReason.UNAVAILABLE


async def test_a_new_partition_is_bootstrapped_owner_root_and_grant() -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/a"), access=ALICE))).success
    owner = await store.read("acme/_owner")
    root = await store.read("acme")
    grant = await store.read("acme/_access/alice")
    assert owner is not None and owner.content == {"owner": "alice"}
    assert root is not None and root.created_by == "system"
    assert grant is not None


async def test_a_system_owned_partition_gets_no_grant() -> None:
    mesh, store = make_mesh()
    system = AccessContext.system()
    assert (await ask(mesh, CreateNodeRequest(node=node("sys/a"), access=system))).success
    assert await store.read("sys/_access/system") is None


async def test_a_user_without_a_grant_is_forbidden_not_invalid() -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/a"), access=ALICE))).success
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=BOB))
    assert response.rejection_reason is RejectionReason.FORBIDDEN
    assert await store.read("acme/b") is None
    assert await store.read("acme/_access/bob") is None


async def test_a_granted_user_may_create() -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/a"), access=ALICE))).success
    grant = MeshNode(
        path="acme/_access/bob", node_type="Grant", content={"permissions": ["create"]}
    )
    assert (await ask(mesh, CreateNodeRequest(node=grant, access=AccessContext.system()))).success
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=BOB))).success


async def test_an_existing_path_is_node_already_exists() -> None:
    mesh, _ = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/a"), access=ALICE))).success
    again = await ask(mesh, CreateNodeRequest(node=node("acme/a"), access=ALICE))
    assert again.rejection_reason is RejectionReason.NODE_ALREADY_EXISTS


async def test_an_ambiguous_commit_with_the_same_request_id_is_answered_created() -> None:
    mesh, store = make_mesh()
    request = CreateNodeRequest(node=node("acme/a"), access=ALICE)
    first = await ask(mesh, request)
    again = await ask(mesh, request)  # the caller re-issues the same request
    assert first.success and again.success
    assert again.node == first.node
    assert len(store.inner.nodes("acme")) == len({n.path for n in store.inner.nodes("acme")})


async def test_reserved_paths_are_the_systems() -> None:
    mesh, _ = make_mesh()
    grant = MeshNode(path="acme/_access/alice", node_type="Grant", content={"permissions": ["*"]})
    response = await ask(mesh, CreateNodeRequest(node=grant, access=ALICE))
    assert response.rejection_reason is RejectionReason.INVALID_PATH
    assert "reserved" in (response.error or "")


@pytest.mark.parametrize(
    ("payload", "reason", "named"),
    [
        (
            {"node": {"path": "acme/../etc", "node_type": "Doc"}},
            RejectionReason.INVALID_PATH,
            "path",
        ),
        ({"node": {"path": "", "node_type": "Doc"}}, RejectionReason.INVALID_PATH, "path"),
        ({"node": {"path": "acme/a b", "node_type": "Doc"}}, RejectionReason.INVALID_PATH, "path"),
        ({"node": {"path": "acme/a"}}, RejectionReason.VALIDATION_FAILED, "neither a node_type"),
        (
            {"node": {"path": "acme/a", "node_type": "Doc", "colour": "red"}},
            RejectionReason.VALIDATION_FAILED,
            "node.colour",
        ),
        (
            {"node": {"path": "acme/a", "node_type": "Doc"}, "priority": 1},
            RejectionReason.VALIDATION_FAILED,
            "priority",
        ),
        (
            {"node": {"path": "acme/a", "node_type": "Doc", "content": {"blob": "x" * 1_100_000}}},
            RejectionReason.VALIDATION_FAILED,
            "bytes",
        ),
        ('{"node": {"path": "acme/a", "node_type": ', RejectionReason.VALIDATION_FAILED, "JSON"),
    ],
    ids=[
        "dotdot",
        "empty",
        "space",
        "no-type-no-content",
        "unknown-node-field",
        "unknown-request-field",
        "oversize",
        "not-json",
    ],
)
async def test_a_malformed_request_is_refused_naming_the_input_and_writes_nothing(
    payload: object, reason: RejectionReason, named: str
) -> None:
    mesh, store = make_mesh()
    assert (await ask(mesh, CreateNodeRequest(node=node("acme/seed"), access=ALICE))).success
    before = sorted(n.path for n in store.inner.nodes())
    store.clear_log()
    if isinstance(payload, dict):
        payload = {**payload, "access": {"user": "alice"}}
    response = await ask(mesh, payload)
    assert response.rejection_reason is reason, response
    assert named in (response.error or "")
    assert store.writes_attempted() == []
    assert sorted(n.path for n in store.inner.nodes()) == before


async def test_non_json_content_is_validation_failed() -> None:
    mesh, _ = make_mesh()
    response = await ask(
        mesh,
        {
            "node": {"path": "acme/a", "node_type": "Doc", "content": {1, 2}},
            "access": {"user": "a"},
        },
    )
    assert response.rejection_reason is RejectionReason.VALIDATION_FAILED
    assert "node.content" in (response.error or "")


async def test_a_request_round_trips_through_json() -> None:
    mesh, _ = make_mesh()
    request = CreateNodeRequest(node=node("acme/a"), access=ALICE)
    response = await ask(mesh, request.model_dump_json())
    assert response.success
    assert CreateNodeResponse.model_validate_json(response.model_dump_json()) == response
    assert json.loads(response.model_dump_json())["request_id"] == request.request_id


async def test_in_process_errors_are_one_type_per_reason() -> None:
    mesh, store = make_mesh()
    created = await mesh.create(node("acme/a"), access=ALICE)
    assert created.path == "acme/a"
    with pytest.raises(NodeExistsError):
        await mesh.create(node("acme/a"), access=ALICE)
    with pytest.raises(NodeAccessDeniedError):
        await mesh.create(node("acme/b"), access=BOB)
    with pytest.raises(PermissionError):
        await mesh.create(node("acme/b"), access=BOB)
    with pytest.raises(InvalidPathError):
        await mesh.create(node("acme/_secret"), access=ALICE)
    with pytest.raises(ValueError):
        await mesh.create(MeshNode(path="acme/c"), access=ALICE)
    store.refuse_writes_as_unreachable()
    with pytest.raises(StoreUnavailableError) as unavailable:
        await mesh.create(node("acme/d"), access=ALICE)
    assert not isinstance(unavailable.value, ValueError | PermissionError)
    store.refuse_writes_as_unreachable(lambda: RuntimeError("defect"))
    with pytest.raises(NodeOperationError) as unknown:
        await mesh.create(node("acme/e"), access=ALICE)
    assert type(unknown.value) is NodeOperationError


async def test_recording_can_be_disabled() -> None:
    mesh, store = make_mesh(record_pending_writes=False)
    store.refuse_writes_as_unreachable()
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert mesh.ledger.pending() == ()


async def test_a_request_without_a_requester_is_forbidden() -> None:
    mesh, _ = make_mesh()
    response = await ask(mesh, CreateNodeRequest(node=node("acme/a")))
    assert response.rejection_reason is RejectionReason.FORBIDDEN


async def test_a_ledger_passed_in_is_the_one_recorded_into(tmp_path: object) -> None:
    ledger = PendingWriteLedger("")
    mesh, store = make_mesh(ledger=ledger)
    store.refuse_writes_as_unreachable()
    await ask(mesh, CreateNodeRequest(node=node("acme/z"), access=ALICE))
    assert [p.node.path for p in ledger.pending()] == ["acme/z"]


class _CommitsThenVanishes(InMemoryStore):
    """The first write commits, then its connection dies before the reply (the outcome is
    unknown to the caller); every later write is refused: the store went away."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def write(self, node: MeshNode) -> MeshNode:
        if node.path != "acme/b":
            return await super().write(node)
        self.writes += 1
        if self.writes > 1:
            raise unreachable_error("memory")
        await super().write(node)
        lost_reply = StoreError(
            "connection lost in the middle of the call", sqlstate="08006", may_have_run=True
        )
        lost_reply.__cause__ = ConnectionResetError(104, "Connection reset by peer")
        raise lost_reply


async def test_a_create_whose_write_may_have_committed_never_says_nothing_was_written() -> None:
    store = _CommitsThenVanishes()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
    await mesh.create(node("acme/seed"), access=ALICE)
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert response.rejection_reason is RejectionReason.UNAVAILABLE
    assert "Nothing was written" not in (response.error or "")
    assert "may already be durable" in (response.error or "")
    stored = await store.read("acme/b")
    assert stored is not None
    assert stored.request_id == response.request_id  # it did land
    assert [p.path for p in mesh.ledger.pending()] == ["acme/b"]  # the re-issue will say LANDED


async def test_a_single_create_that_may_have_landed_never_speaks_of_a_subset() -> None:
    """One write is all or nothing: its answer says the write may be durable, not that "an
    unknown subset of the request" may be. Fails at 1d389e8 because a single create whose
    outcome was unknown got the bulk's wording. The negative control: a bulk whose windows had
    started still says part of it may be durable."""
    store = _CommitsThenVanishes()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
    await mesh.create(node("acme/seed"), access=ALICE)
    single = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert single.rejection_reason is RejectionReason.UNAVAILABLE
    assert single.outcome_unknown is True
    text = single.error or ""
    assert "subset" not in text
    assert "partially" not in text
    assert "The write may already be durable" in text
    assert "Nothing was written" not in text

    bulk_mesh, bulk_store = make_mesh()
    await bulk_mesh.create(node("acme/one"), access=ALICE)
    bulk_store.refuse_writes_as_unreachable()
    bulk = await first_value(
        bulk_mesh.create_nodes(
            CreateNodesRequest(nodes=[node("acme/two"), node("acme/three")], access=ALICE)
        ),
        timeout=10,
    )
    assert bulk.rejection_reason is RejectionReason.UNAVAILABLE
    assert "unknown subset of the request may already be durable" in (bulk.error or "")


async def test_control_a_write_refused_at_connect_every_time_still_says_nothing_was_written() -> (
    None
):
    mesh, store = make_mesh()
    await mesh.create(node("acme/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    response = await ask(mesh, CreateNodeRequest(node=node("acme/b"), access=ALICE))
    assert "Nothing was written" in (response.error or "")


class _AliceOpensFirst(InMemoryStore):
    """Alice's ownership record lands between Bob's facts read and Bob's own claim."""

    async def write(self, node: MeshNode) -> MeshNode:
        if node.path == "race/_owner" and node.content == {"owner": "bob"}:
            await super().write(node.model_copy(update={"content": {"owner": "alice"}}))
        return await super().write(node)


async def test_a_user_who_loses_the_race_to_open_a_partition_is_not_granted_anything() -> None:
    store = _AliceOpensFirst()
    mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(""))
    response = await ask(mesh, CreateNodeRequest(node=node("race/b"), access=BOB))
    assert response.rejection_reason is RejectionReason.FORBIDDEN
    owner = await store.read("race/_owner")
    assert owner is not None
    assert owner.content == {"owner": "alice"}
    assert await store.read("race/_access/bob") is None
    assert await store.read("race/b") is None


async def test_control_the_user_who_opens_a_partition_owns_it_and_creates() -> None:
    mesh = Mesh(InMemoryStore(), retry_delays=FAST, ledger=PendingWriteLedger(""))
    response = await ask(mesh, CreateNodeRequest(node=node("race/b"), access=BOB))
    assert response.success


async def test_each_subscription_of_a_create_is_its_own_attempt() -> None:
    """Per-subscription state: a second subscription does not inherit the first one's failures."""
    store = _CommitsThenVanishes()
    mesh = Mesh(
        store, retry_delays=FAST, ledger=PendingWriteLedger(""), record_pending_writes=False
    )
    await mesh.create(node("acme/seed"), access=ALICE)
    answer = mesh.create_node(CreateNodeRequest(node=node("acme/b"), access=ALICE))
    first = await first_value(answer)
    assert first.outcome_unknown  # its write may have committed (it did)
    assert await store.delete("acme/b")  # gone again; writes are now refused
    second = await first_value(answer)  # the same observable, subscribed again
    assert second.rejection_reason is RejectionReason.UNAVAILABLE
    assert not second.outcome_unknown  # this attempt's writes were all refused at connect
    assert "Nothing was written" in (second.error or "")
