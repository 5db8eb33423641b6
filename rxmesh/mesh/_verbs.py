"""Update, delete and move: each reads before it heals, writes by compare-and-set, and ends in
the same terminal arm — which records an UNAVAILABLE one for one re-issue.

Every read comes first (the node, the partition's facts, a move's target partition) and only
then a heal: a refused verb writes nothing. A partition seen new authorises no verb on a node
there (``absent`` is the "no node" refusal, from that snapshot).

"The same request" (docs/pending-writes.md): each verb is based on a version of its node (a
move: of its source) — the request's ``expected_version``, else the version its attempt read —
and the store applies it only if the node is still at that version and was written by the same
write (compare-and-set): another write in between is VERSION_CONFLICT, never overwritten. The
basis is what an UNAVAILABLE answer records with the intent, so the re-issue is the same
compare-and-set. An update or move leaves its request id on the row, so its re-issue recognises
its own landed write; a re-issued delete that finds the node gone (or any delete whose node goes
between its read and its delete) is answered success with ``already_absent``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Generic, TypeVar

from rxmesh.exceptions import (
    NodeExistsError,
    NodeValidationError,
    NodeVersionConflictError,
    StoreConflictError,
    StoreVersionConflictError,
)
from rxmesh.ledger import PendingWrite
from rxmesh.mesh._arms import AttemptFacts
from rxmesh.mesh._job import Job
from rxmesh.mesh._pending import requester_of
from rxmesh.model import MeshNode, partition_of, validate_path
from rxmesh.operations import (
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)

__all__ = ["Delete", "Move", "Update"]

_Request = UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest
Q = TypeVar("Q", UpdateNodeRequest, DeleteNodeRequest, MoveNodeRequest)
_Basis = tuple[int, str | None]


@dataclass
class VerbFacts(AttemptFacts):
    """An attempt's facts, plus its basis (once known) and whether a delete found nothing."""

    basis: _Basis | None = None
    already_absent: bool = False
    unread: str = "its read of the node"  # the read whose failure leaves the basis unknown


_FACTS_READ = "the read of the partition's access facts"


def _conflict(path: str, basis: _Basis, version: int | None) -> NodeVersionConflictError:
    now = "gone" if version is None else f"at version {version}"
    if version == basis[0]:
        now += " written by another request"
    return NodeVersionConflictError(
        f"another write came first: the request was based on version {basis[0]} of '{path}', "
        f"which is now {now}; nothing was changed. Read the node again and decide.",
        path=path,
    )


def _basis(req: _Request, row: MeshNode) -> _Basis:
    """What ``req`` is based on: its expected version, else the row its attempt read.

    An expected version without the request id that produced it takes that id from the row the
    attempt read at that version: the basis then names the write, so a node deleted and created
    again at the same version by another request is never taken for it. A re-issue's basis is
    the one recorded, never completed from a later read (that row may be the other request's).
    """
    expected = req.expected_version
    if expected is None:
        return row.version, row.request_id
    if (
        req.expected_request_id is None
        and not req.reissued_after_unavailable
        and row.version == expected
    ):
        return expected, row.request_id
    return expected, req.expected_request_id


def _check(path: str, basis: _Basis, row: MeshNode) -> None:
    """The row is the basis: its version, and the write that produced it (a basis that does not
    name one matches only a row that names none)."""
    if row.version != basis[0] or row.request_id != basis[1]:
        raise _conflict(path, basis, row.version)


def landed_here(request_id: str, row: MeshNode, expected_version: int | None) -> bool:
    """Whether ``row`` is what this request's own update or move wrote (an earlier attempt).

    The row's request id alone does not say it: a create leaves its id on the row too, and an id
    may be reused. An update or move writes the version after its basis (with a basis, exactly
    that one; without, never version 1, which only a create writes).
    """
    if row.request_id != request_id:
        return False
    if expected_version is not None:
        return row.version == expected_version + 1
    return row.version > 1


class _Verb(Job[Q, VerbFacts, NodeOperationResponse], Generic[Q]):
    """What update, delete and move share: the answer, the intent an unreachable one records
    (with its basis), and what the caller's own answered re-issue settles.

    A subclass names its verb and defines :meth:`facts` and :meth:`work` (which appends to
    ``facts.heals`` the system records it wrote, so an UNAVAILABLE answer can name them, and
    sets ``facts.basis`` once it knows it), and :meth:`subject` (the intent's node and target).
    """

    kind = NodeOperationResponse
    verb: str

    async def work(self, req: Q, facts: VerbFacts) -> MeshNode | None:
        raise NotImplementedError

    def path(self, req: Q) -> str:
        """The node the verb acts on (a move's source)."""
        raise NotImplementedError

    def subject(self, req: Q) -> tuple[MeshNode, str | None]:
        """The intent's node (an update's own; a delete's or move's path alone) and target."""
        raise NotImplementedError

    async def run(self, req: Q, facts: VerbFacts) -> NodeOperationResponse:
        node = await self.work(req, facts)
        response = NodeOperationResponse(
            request_id=req.request_id,
            success=True,
            node=node,
            already_absent=facts.already_absent,
        )
        self.settle(req, response)
        return response

    def _intent(self, req: Q, basis: _Basis) -> PendingWrite:
        node, target = self.subject(req)
        access = self._core.requester_or_none(req.access, node)
        requester = requester_of(access, node)
        return PendingWrite.model_validate(
            {
                "node": node,
                "requester": requester,
                "access": access,
                "request_id": req.request_id,
                "origin": self.verb,
                "expected_version": basis[0],
                "expected_request_id": basis[1],
                "target": target,
            }
        )

    async def record(self, req: Q, facts: VerbFacts) -> tuple[str, dict[str, object]]:
        if req.reissued_after_unavailable:  # a re-issue is never recorded again
            return "", {}
        basis = facts.basis
        if basis is None and req.expected_version is not None and req.expected_request_id:
            basis = (req.expected_version, req.expected_request_id)
        if basis is None and req.expected_version is not None:
            return (
                " It will not be re-issued by rxmesh: the write that produced version "
                f"{req.expected_version} is unknown (the store did not answer "
                f"{facts.unread}); re-issue it yourself with expected_version once the "
                "store answers again.",
                {},
            )
        if basis is None:
            return (
                " It will not be re-issued by rxmesh: the version it was based on is "
                f"unknown (the store did not answer {facts.unread}); re-issue it "
                "yourself with expected_version once the store answers again.",
                {},
            )
        recorded = await self._pending.record_intent(
            functools.partial(self._intent, req, basis), facts.path, self.verb
        )
        return recorded.note, {"recorded_for_reissue": recorded.recorded}

    def settle(self, req: Q, response: NodeOperationResponse) -> None:
        if req.reissued_after_unavailable:
            return
        node = req.node if isinstance(req, UpdateNodeRequest) else None
        key = f"{self.path(req)} {self.verb}"  # the intent's ledger key (PendingWrite.key)
        self._pending.settle_key_by_answer(key, req, node, response)


class Update(_Verb[UpdateNodeRequest]):
    """Replace the type/content of an existing node, by compare-and-set."""

    verb = "update"

    def facts(self, req: UpdateNodeRequest) -> VerbFacts:
        path = req.node.path
        return VerbFacts(f"Node update at '{path}'", "updating", path, req.request_id)

    def path(self, req: UpdateNodeRequest) -> str:
        return req.node.path

    def subject(self, req: UpdateNodeRequest) -> tuple[MeshNode, str | None]:
        return req.node, None

    async def work(self, req: UpdateNodeRequest, facts: VerbFacts) -> MeshNode | None:
        core, node = self._core, req.node
        validate_path(node.path)  # reserved records are not updated, not even by the system
        access = core.requester(req.access, node)
        core.fail_fast(node, access)
        missing = f"no node at '{node.path}' to update"
        row: MeshNode | None = await core.ask("read", node.path)
        if row is None:
            if req.expected_version is not None:
                raise _conflict(node.path, _basis(req, node), None)
            raise NodeValidationError(missing, path=node.path)
        landed = landed_here(req.request_id, row, req.expected_version)
        if not landed:  # read: the basis is known, whatever fails after this
            facts.basis = _basis(req, row)
        facts.unread = _FACTS_READ
        await self._partitions.authorise(
            node.partition, access, "update", creating=node.path, absent=missing
        )
        if landed:
            return row  # this request's update did land (an earlier attempt)
        basis = _basis(req, row)
        _check(node.path, basis, row)
        core.validate_content(node, access)
        try:
            updated: MeshNode | None = await core.ask(
                "update", node, basis[0], basis[1], req.request_id
            )
        except StoreVersionConflictError as exc:
            raise _conflict(node.path, basis, exc.actual_version) from exc
        if updated is None:
            raise _conflict(node.path, basis, None)
        return updated


class Delete(_Verb[DeleteNodeRequest]):
    """Delete a node (not its children), by compare-and-set."""

    verb = "delete"

    def facts(self, req: DeleteNodeRequest) -> VerbFacts:
        path = req.path
        return VerbFacts(f"Node deletion at '{path}'", "deleting", path, req.request_id)

    def path(self, req: DeleteNodeRequest) -> str:
        return req.path

    def subject(self, req: DeleteNodeRequest) -> tuple[MeshNode, str | None]:
        return MeshNode(path=req.path), None

    async def work(self, req: DeleteNodeRequest, facts: VerbFacts) -> MeshNode | None:
        core, path = self._core, req.path
        access = core.requester(req.access, None)
        missing = f"no node at '{path}' to delete"
        facts.unread = f"{_FACTS_READ}, before the node was read"
        await self._partitions.authorise(
            partition_of(path), access, "delete", creating=path, absent=missing
        )
        facts.unread = "its read of the node"
        row: MeshNode | None = await core.ask("read", path)
        if row is not None:
            basis = facts.basis = _basis(req, row)
            _check(path, basis, row)
            try:
                deleted = await core.ask("delete", path, basis[0], basis[1])
            except StoreVersionConflictError as exc:
                raise _conflict(path, basis, exc.actual_version) from exc
            # Gone between its read and its delete: an earlier try of this very call whose
            # reply was lost (the ladder's retry), or another delete; either way, absent.
            facts.already_absent = not deleted
            return None
        if req.reissued_after_unavailable:
            facts.already_absent = True  # the node is gone: what the delete asked for
            return None
        raise NodeValidationError(missing, path=path)


class Move(_Verb[MoveNodeRequest]):
    """Move a node to a free path, by compare-and-set on the source."""

    verb = "move"

    def facts(self, req: MoveNodeRequest) -> VerbFacts:
        operation = f"Node move from '{req.source}' to '{req.target}'"
        return VerbFacts(operation, "moving", req.source, req.request_id)

    def path(self, req: MoveNodeRequest) -> str:
        return req.source

    def subject(self, req: MoveNodeRequest) -> tuple[MeshNode, str | None]:
        return MeshNode(path=req.source), req.target

    async def work(self, req: MoveNodeRequest, facts: VerbFacts) -> MeshNode | None:
        core, source, target = self._core, req.source, req.target
        access = core.requester(req.access, None)
        source_partition, target_partition = partition_of(source), partition_of(target)
        missing = f"no node at '{source}' to move"
        facts.unread = f"{_FACTS_READ}, before the node was read"
        await self._partitions.authorise(
            source_partition, access, "move", creating=target, absent=missing
        )
        facts.unread = "its read of the node"
        row: MeshNode | None = await core.ask("read", source)
        if row is None:
            there: MeshNode | None = await core.ask("read", target)
            if there is not None and landed_here(req.request_id, there, req.expected_version):
                return there  # this request's move did land (an earlier attempt)
            if req.expected_version is None:
                raise NodeValidationError(missing, path=source)
            raise _conflict(source, _basis(req, MeshNode(path=source)), None)
        basis = facts.basis = _basis(req, row)
        _check(source, basis, row)
        if target_partition != source_partition:
            partition = await self._partitions.authorise(
                target_partition, access, "move", creating=target
            )
            await self._partitions.heal(
                partition, access, "move", creating=target, heals=facts.heals
            )
        try:
            moved: MeshNode | None = await core.ask(
                "move", source, target, basis[0], basis[1], req.request_id
            )
        except StoreVersionConflictError as exc:
            raise _conflict(source, basis, exc.actual_version) from exc
        except StoreConflictError as exc:
            raise NodeExistsError(f"a node already exists at '{target}'", path=target) from exc
        if moved is None:
            raise _conflict(source, basis, None)
        return moved
