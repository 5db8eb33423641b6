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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rxmesh.exceptions import (
    NodeExistsError,
    NodeValidationError,
    NodeVersionConflictError,
    StoreConflictError,
    StoreVersionConflictError,
)
from rxmesh.ledger import PendingWrite
from rxmesh.mesh._answer import Attempt, AttemptFacts, AttemptSteps
from rxmesh.mesh._job import Job
from rxmesh.mesh._pending import requester_of
from rxmesh.model import MeshNode, partition_of, validate_path
from rxmesh.operations import (
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)

__all__ = ["Verbs"]

_Request = UpdateNodeRequest | DeleteNodeRequest | MoveNodeRequest
_Basis = tuple[int, str | None]


@dataclass
class VerbFacts(AttemptFacts):
    """An attempt's facts, plus its basis (once known) and whether a delete found nothing."""

    basis: _Basis | None = None
    already_absent: bool = False
    unread: str = "its read of the node"  # the read whose failure leaves the basis unknown


_Run = Callable[[VerbFacts], Awaitable[MeshNode | None]]
_VERB: dict[type[_Request], str] = {
    UpdateNodeRequest: "update",
    DeleteNodeRequest: "delete",
    MoveNodeRequest: "move",
}
_DOING = {"update": "updating", "delete": "deleting", "move": "moving"}
_Intent = Callable[[_Basis], PendingWrite]
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


class Verbs(Job):
    """One mesh's update, delete and move."""

    def _attempt(
        self, req: _Request, operation: str, path: str, run: _Run, intent: _Intent
    ) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Per subscription, fresh facts; ``run(facts)`` does the work, appending to
        ``facts.heals`` the system records it wrote (so an UNAVAILABLE answer can name them) and
        setting ``facts.basis`` once it knows it; ``intent(basis)`` is what an unreachable
        answer records."""
        return functools.partial(_VerbAttempt, self, req, operation, path, run, intent)

    def _intent(self, req: _Request, node: MeshNode, target: str | None = None) -> _Intent:
        core = self._core
        origin = _VERB[type(req)]

        def build(basis: _Basis) -> PendingWrite:
            access = core.requester_or_none(req.access, node)
            requester = requester_of(access, node)
            return PendingWrite.model_validate(
                {
                    "node": node,
                    "requester": requester,
                    "access": access,
                    "request_id": req.request_id,
                    "origin": origin,
                    "expected_version": basis[0],
                    "expected_request_id": basis[1],
                    "target": target,
                }
            )

        return build

    def update(self, req: UpdateNodeRequest) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Replace the type/content of an existing node, by compare-and-set."""
        core, node = self._core, req.node

        async def run(facts: VerbFacts) -> MeshNode | None:
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

        return self._attempt(
            req,
            f"Node update at '{node.path}'",
            node.path,
            run,
            self._intent(req, node),
        )

    def delete(self, req: DeleteNodeRequest) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Delete a node (not its children), by compare-and-set."""
        core, path = self._core, req.path

        async def run(facts: VerbFacts) -> MeshNode | None:
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

        return self._attempt(
            req,
            f"Node deletion at '{path}'",
            path,
            run,
            self._intent(req, MeshNode(path=path)),
        )

    def move(self, req: MoveNodeRequest) -> Callable[[], Attempt[NodeOperationResponse]]:
        """Move a node to a free path, by compare-and-set on the source."""
        core, source, target = self._core, req.source, req.target

        async def run(facts: VerbFacts) -> MeshNode | None:
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

        return self._attempt(
            req,
            f"Node move from '{source}' to '{target}'",
            source,
            run,
            self._intent(req, MeshNode(path=source), target),
        )


class _VerbAttempt(AttemptSteps[NodeOperationResponse]):
    """One attempt of an update, delete or move (:class:`~rxmesh.mesh._answer.AttemptSteps`)."""

    __slots__ = ("_intent", "_job", "_key", "_path", "_req", "_run", "_verb")

    _facts: VerbFacts

    def __init__(
        self, job: Verbs, req: _Request, operation: str, path: str, run: _Run, intent: _Intent
    ) -> None:
        verb = _VERB[type(req)]
        facts = VerbFacts(operation, _DOING[verb], path, req.request_id)
        super().__init__(NodeOperationResponse, job._arm, facts)
        self._job, self._req, self._path, self._run, self._intent = job, req, path, run, intent
        self._verb = verb
        self._key = f"{path} {verb}"  # the intent's ledger key (PendingWrite.key)

    async def run(self) -> NodeOperationResponse:
        facts = self._facts
        node = await self._run(facts)
        response = NodeOperationResponse(
            request_id=self._req.request_id,
            success=True,
            node=node,
            already_absent=facts.already_absent,
        )
        self._settle(response)
        return response

    async def _record(self) -> tuple[str, dict[str, object]]:
        req = self._req
        if req.reissued_after_unavailable:  # a re-issue is never recorded again
            return "", {}
        basis = self._facts.basis
        if basis is None and req.expected_version is not None and req.expected_request_id:
            basis = (req.expected_version, req.expected_request_id)
        if basis is None and req.expected_version is not None:
            return (
                " It will not be re-issued by rxmesh: the write that produced version "
                f"{req.expected_version} is unknown (the store did not answer "
                f"{self._facts.unread}); re-issue it yourself with expected_version once the "
                "store answers again.",
                {},
            )
        if basis is None:
            return (
                " It will not be re-issued by rxmesh: the version it was based on is "
                f"unknown (the store did not answer {self._facts.unread}); re-issue it "
                "yourself with expected_version once the store answers again.",
                {},
            )
        recorded = await self._job._pending.record_intent(
            functools.partial(self._intent, basis), self._path, self._verb
        )
        return recorded.note, {"recorded_for_reissue": recorded.recorded}

    def _settle(self, response: NodeOperationResponse) -> None:
        if self._req.reissued_after_unavailable:
            return
        req = self._req
        node = req.node if isinstance(req, UpdateNodeRequest) else None
        self._job._pending.settle_key_by_answer(self._key, req, node, response)
