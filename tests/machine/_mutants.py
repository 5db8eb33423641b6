"""Deliberately broken variants of the product, applied at run time with ``monkeypatch`` and
undone when the test ends. None of them is kept in the product: each exists to show that one
invariant of the machine fails when the product breaks it.

Four of them put back, at run time, the four defects of issue 20 (``bug1`` ... ``bug4``), by
undoing the fix of commit c122163 in place. They name private methods of that fix
(``Partitions.authorise``, ``PendingWrites.settle_by_answer``,
``PendingWriteRecovery._on_settled``, ``_BulkState.earlier``): if those are renamed,
``monkeypatch.setattr`` fails loudly, and the mutant must be re-aimed, not dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops

from rxmesh import AccessContext, Mesh, MeshNode, faults
from rxmesh.exceptions import NodeAccessDeniedError, NodeValidationError
from rxmesh.ledger import (
    PendingWrite,
    PendingWriteLedger,
    PendingWriteOutcome,
    PendingWriteRecovery,
    outcome_of,
)
from rxmesh.ledger._order import PathOrder
from rxmesh.mesh import _arms
from rxmesh.mesh import _bulk as bulk_module
from rxmesh.mesh import _verbs as verbs_module
from rxmesh.mesh._access import GrantPolicy, PartitionFacts, grant_path
from rxmesh.mesh._answer import immediate
from rxmesh.mesh._bootstrap import Partitions
from rxmesh.mesh._pending import PendingWrites
from rxmesh.model import ChangeFeedGap, partition_of
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    NodeOperationResponse,
    RejectionReason,
)
from rxmesh.providers import _memory_verbs as memory_verbs_module
from rxmesh.providers.memory import InMemoryStore

from ._harness import is_system_path

Patch = Callable[[pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Mutant:
    name: str
    invariant: str
    what: str
    apply: Patch

    def __repr__(self) -> str:
        return self.name


def _answers_twice(mp: pytest.MonkeyPatch) -> None:
    original = Mesh.delete_node

    def delete_node(self: Mesh, request: Any) -> Observable[NodeOperationResponse]:
        return original(self, request).pipe(
            ops.flat_map(lambda r: reactivex.of(r, r) if r.success else reactivex.of(r))
        )

    mp.setattr(Mesh, "delete_node", delete_node)


def _loses_writes(mp: pytest.MonkeyPatch) -> None:
    original = InMemoryStore.write

    async def write(self: InMemoryStore, node: MeshNode) -> MeshNode:
        if is_system_path(node.path):
            return await original(self, node)
        return node.model_copy(update={"version": max(1, node.version)})

    mp.setattr(InMemoryStore, "write", write)


def _anyone_deletes(mp: pytest.MonkeyPatch) -> None:
    original = GrantPolicy.may

    def may(self: GrantPolicy, access: Any, verb: str, facts: PartitionFacts) -> bool:
        return verb == "delete" or original(self, access, verb, facts)

    mp.setattr(GrantPolicy, "may", may)


def _bug1(mp: pytest.MonkeyPatch) -> None:
    """Issue 20, bug 1: a partition seen new authorises a delete/update/move (the check that
    answers 'no node' from that snapshot is skipped)."""
    original = Partitions.authorise

    async def _authorise(self: Partitions, *args: Any, absent: str | None = None, **kw: Any) -> Any:
        return await original(self, *args, absent=None, **kw)

    mp.setattr(Partitions, "authorise", _authorise)


def _reissue_says_exists(mp: pytest.MonkeyPatch) -> None:
    original = Mesh.create_node
    seen: set[str] = set()

    def create_node(self: Mesh, request: Any) -> Observable[CreateNodeResponse]:
        if isinstance(request, CreateNodeRequest) and not request.reissued_after_unavailable:
            if request.request_id in seen:
                return immediate(
                    CreateNodeResponse.fail(
                        request.request_id, RejectionReason.NODE_ALREADY_EXISTS, "exists"
                    ),
                    "create",
                )
            seen.add(request.request_id)
        return original(self, request)

    mp.setattr(Mesh, "create_node", create_node)


def _grants_ignored(mp: pytest.MonkeyPatch) -> None:
    def may(self: GrantPolicy, access: AccessContext, verb: str, facts: PartitionFacts) -> bool:
        return access.is_system or facts.owner == access.user

    mp.setattr(GrantPolicy, "may", may)


def _delete_misses(mp: pytest.MonkeyPatch) -> None:
    original = InMemoryStore.delete

    async def delete(self: InMemoryStore, path: str, *basis: Any) -> bool:
        if is_system_path(path):
            return await original(self, path, *basis)
        return False

    mp.setattr(InMemoryStore, "delete", delete)


def _update_misses(mp: pytest.MonkeyPatch) -> None:
    original = InMemoryStore.update

    async def update(self: InMemoryStore, node: MeshNode, *basis: Any) -> MeshNode | None:
        if is_system_path(node.path):
            return await original(self, node, *basis)
        return None

    mp.setattr(InMemoryStore, "update", update)


def _validation_is_unreachable(mp: pytest.MonkeyPatch) -> None:
    original = faults.is_store_unreachable

    def is_store_unreachable(exc: BaseException | None) -> bool:
        return original(exc) or isinstance(exc, NodeValidationError)

    mp.setattr(_arms, "is_store_unreachable", is_store_unreachable)


def _no_node_is_unknown(mp: pytest.MonkeyPatch) -> None:
    kept = tuple(entry for entry in _arms._REFUSALS if entry[0] is not NodeValidationError)
    mp.setattr(_arms, "_REFUSALS", kept)


def _bug2(mp: pytest.MonkeyPatch) -> None:
    """Issue 20, bug 2: a verbatim bulk re-issue counts the rows of its earlier attempt as this
    attempt's landing, so any refusal after them is a 'partial landing' (UNKNOWN)."""

    class _EarlierIsLanded(bulk_module._BulkState):
        @property
        def earlier(self) -> dict[str, MeshNode]:
            return self.landed

        @earlier.setter
        def earlier(self, value: dict[str, MeshNode]) -> None:
            pass

    mp.setattr(bulk_module, "_BulkState", _EarlierIsLanded)


def _two_rows(mp: pytest.MonkeyPatch) -> None:
    async def move(
        self: InMemoryStore, source: str, target: str, *basis: Any
    ) -> MeshNode | None:
        with self._lock:
            existing = self._get(source)
            if existing is None:
                return None
            taken = self._get(target)
            if taken is not None:
                raise self._conflict(target, taken, f"move of '{source}' refused")
            table = self._partitions[partition_of(source)]
            del table[source]
            moved = existing.model_copy(update={"path": target, "version": existing.version + 1})
            table[target] = moved  # the mutant: kept in the SOURCE partition's table
        return moved

    mp.setattr(InMemoryStore, "move", move)


def _deletes_then_refuses(mp: pytest.MonkeyPatch) -> None:
    original = Partitions.authorise

    async def _authorise(
        self: Partitions, partition: str, access: Any, verb: str, *, creating: str | None, **kw: Any
    ) -> Any:
        try:
            return await original(self, partition, access, verb, creating=creating, **kw)
        except NodeAccessDeniedError:
            if verb == "delete" and creating is not None:
                await self._core.ask("delete", creating)
            raise

    mp.setattr(Partitions, "authorise", _authorise)


def _grants_itself(mp: pytest.MonkeyPatch) -> None:
    original = Partitions.authorise

    async def _authorise(
        self: Partitions, partition: str, access: AccessContext, verb: str, **kw: Any
    ) -> Any:
        try:
            return await original(self, partition, access, verb, **kw)
        except NodeAccessDeniedError:
            if verb == "create":  # the mutant: "heals" the grant it was refused for
                grant = MeshNode(
                    path=grant_path(partition, access.user),
                    node_type="Grant",
                    content={"permissions": ["*"]},
                )
                await self.write_system(grant, [])
            raise

    mp.setattr(Partitions, "authorise", _authorise)


def _bug3(mp: pytest.MonkeyPatch) -> None:
    """Issue 20, bug 3: UNAVAILABLE says 'Nothing was written' after a partition heal wrote.

    Both halves of the fix are undone: the text no longer names what was written, and a bulk
    heals each partition as soon as it is judged (before the next partition's read), without
    telling the answer what it wrote.
    """
    original = faults.describe_not_attempted
    authorise = Partitions.authorise

    def describe_not_attempted(operation: str, *, written: Any = ()) -> str:
        return original(operation)

    async def _authorise(
        self: Partitions, partition: str, access: Any, verb: str, *, creating: str | None, **kw: Any
    ) -> Any:
        facts = await authorise(self, partition, access, verb, creating=creating, **kw)
        if verb == "create" and creating is None:  # a bulk's partition: heal it right away
            facts = await self.heal(facts, access, verb, creating=None, heals=[])
        return facts

    mp.setattr(_arms, "describe_not_attempted", describe_not_attempted)
    mp.setattr(Partitions, "authorise", _authorise)


def _verdict_twice(mp: pytest.MonkeyPatch) -> None:
    original = PendingWriteLedger._publish

    def _publish(self: PendingWriteLedger, outcome: PendingWriteOutcome) -> None:
        original(self, outcome)
        original(self, outcome)

    mp.setattr(PendingWriteLedger, "_publish", _publish)


def _bug4(mp: pytest.MonkeyPatch) -> None:
    """Issue 20, bug 4: the caller's own answered re-issue does not settle the intent, so the
    ledger's re-issue later creates again a node the caller deleted."""
    mp.setattr(PendingWrites, "settle_by_answer", lambda self, req, path, response: None)
    mp.setattr(PendingWriteRecovery, "_on_settled", lambda self, outcome: None)


def _gaps_ignored(mp: pytest.MonkeyPatch) -> None:
    original = PendingWriteRecovery._on_evidence

    def _on_evidence(self: PendingWriteRecovery, evidence: Any) -> None:
        if not isinstance(evidence, ChangeFeedGap):
            original(self, evidence)

    mp.setattr(PendingWriteRecovery, "_on_evidence", _on_evidence)


def _facts_swallowed(mp: pytest.MonkeyPatch) -> None:
    original = Partitions.facts

    async def _facts(
        self: Partitions, partition: str, user: str, *also: str
    ) -> tuple[PartitionFacts, dict[str, MeshNode]]:
        try:
            return await original(self, partition, user, *also)
        except Exception:  # the mutant: a failed read taken for an absent record
            return PartitionFacts(partition, None, None, None), {}

    mp.setattr(Partitions, "facts", _facts)


def _stranger_settles(mp: pytest.MonkeyPatch) -> None:
    """Issue 31, item 1: any answer carrying an intent's request id settles it, whoever sent it."""

    def settle_key_by_answer(
        self: PendingWrites, key: str, req: Any, node: Any, response: Any, **_: Any
    ) -> None:
        intent = self._core.ledger.outstanding(key, req.request_id)
        if intent is not None:
            self._core.ledger.settle_if_outstanding(intent, outcome_of(intent, response))

    mp.setattr(PendingWrites, "settle_key_by_answer", settle_key_by_answer)


def _paths_race(mp: pytest.MonkeyPatch) -> None:
    """Issue 31, item 2: every taken intent runs at once, whatever its path."""

    def add(self: PathOrder, intent: PendingWrite) -> None:
        self.queued += 1
        self.ready.append(intent)

    mp.setattr(PathOrder, "add", add)
    mp.setattr(PathOrder, "release", lambda self, intent: None)


def _basis_forgets_its_write(mp: pytest.MonkeyPatch) -> None:
    """Issue 31, item 3: an expected version is recorded without the id of the row it read,
    and a basis that names no write matches any row at its version."""

    def _basis(req: Any, row: MeshNode) -> tuple[int, str | None]:
        if req.expected_version is not None:
            return req.expected_version, req.expected_request_id
        return row.version, row.request_id

    def _check(path: str, basis: tuple[int, str | None], row: MeshNode) -> None:
        if row.version != basis[0] or (basis[1] is not None and row.request_id != basis[1]):
            raise verbs_module._conflict(path, basis, row.version)

    mp.setattr(verbs_module, "_basis", _basis)
    mp.setattr(verbs_module, "_check", _check)


def _reuse_is_landed(mp: pytest.MonkeyPatch) -> None:
    """Issue 31, item 4: any row carrying the request id is the update's own landing."""

    def landed(request_id: str, row: MeshNode, *_: Any) -> bool:
        return row.request_id == request_id

    mp.setattr(verbs_module, "landed_here", landed)
    mp.setattr(memory_verbs_module, "own_write", landed)


MUTANTS = (
    Mutant("answers-twice", "one-answer", "a successful delete answers twice", _answers_twice),
    Mutant("loses-writes", "success-row", "the store acknowledges a write it drops", _loses_writes),
    Mutant("anyone-deletes", "success-true", "the policy lets anyone delete", _anyone_deletes),
    Mutant(
        "bug1", "success-true", "issue 20 bug 1: a partition seen new authorises a delete", _bug1
    ),
    Mutant(
        "reissue-says-exists",
        "exists-true",
        "a verbatim re-issue is answered NODE_ALREADY_EXISTS",
        _reissue_says_exists,
    ),
    Mutant("grants-ignored", "forbidden-true", "the policy ignores grants", _grants_ignored),
    Mutant(
        "delete-misses",
        "success-row",  # the delete read the node, so a miss is answered already absent
        "the store's delete misses a row that is there",
        _delete_misses,
    ),
    Mutant(
        "update-misses",
        "refusal-true",  # answered VERSION_CONFLICT ("gone") for a node nobody changed
        "the store's update misses a row that is there",
        _update_misses,
    ),
    Mutant(
        "validation-is-unreachable",
        "unavailable-own-call",
        "the terminal arm takes 'no node' for an unreachable store",
        _validation_is_unreachable,
    ),
    Mutant(
        "no-node-is-unknown",
        "never-unknown",
        "the terminal arm does not know the 'no node' refusal",
        _no_node_is_unknown,
    ),
    Mutant(
        "bug2",
        "never-unknown",
        "issue 20 bug 2: a bulk re-issue counts its earlier rows as landed now",
        _bug2,
    ),
    Mutant(
        "two-rows", "two-rows", "a move keeps the row in the source partition's table", _two_rows
    ),
    Mutant(
        "deletes-then-refuses",
        "unacknowledged-write",
        "a delete refused FORBIDDEN deletes first",
        _deletes_then_refuses,
    ),
    Mutant(
        "grants-itself",
        "unacknowledged-write",
        "a create refused FORBIDDEN writes the requester a grant",
        _grants_itself,
    ),
    Mutant(
        "bug3", "nothing-written", "issue 20 bug 3: 'Nothing was written' after a heal wrote", _bug3
    ),
    Mutant(
        "verdict-twice", "one-verdict", "the ledger publishes every verdict twice", _verdict_twice
    ),
    Mutant(
        "bug4",
        "no-resurrection",
        "issue 20 bug 4: the caller's answered re-issue does not settle the intent",
        _bug4,
    ),
    Mutant("gaps-ignored", "ledger-drains", "the recovery ignores a declared gap", _gaps_ignored),
    Mutant(
        "stranger-settles",
        "requester-bound",
        "issue 31 item 1: a stranger's answer carrying an intent's request id settles it",
        _stranger_settles,
    ),
    Mutant(
        "paths-race",
        "path-order",
        "issue 31 item 2: the intents of one path are re-issued concurrently",
        _paths_race,
    ),
    Mutant(
        "basis-forgets-its-write",
        "basis-named",
        "issue 31 item 3: a basis without the request id of the row the attempt read",
        _basis_forgets_its_write,
    ),
    Mutant(
        "reuse-is-landed",
        "update-applied",
        "issue 31 item 4: an update reusing the create's request id is taken as landed",
        _reuse_is_landed,
    ),
    Mutant(
        "facts-swallowed",
        "no-heal-after-failed-read",
        "a failed facts read is taken for an absent partition",
        _facts_swallowed,
    ),
)

BY_NAME = {mutant.name: mutant for mutant in MUTANTS}
