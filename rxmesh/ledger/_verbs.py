"""What a re-issue is, per verb, and which verdict its answer settles the intent with.

"The same request" (docs/pending-writes.md): a create is the node at its path with its request
id; an update, a delete and a move also carry the basis they were recorded with (the version of
the node, or the move's source, and the request id of the write that produced it), so the store
applies the re-issue only if no other write came first (compare-and-set), and recognises its own
landed update or move by the request id the row carries.
"""

from __future__ import annotations

from typing import Protocol

from reactivex import Observable

from rxmesh.ledger._models import PendingWrite, PendingWriteOutcome
from rxmesh.model import MeshNode
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    RejectionReason,
    UpdateNodeRequest,
    Verdict,
)

__all__ = ["Answer", "VerbMesh", "confirm_path", "confirmed", "outcome_of", "reissue"]

Answer = CreateNodeResponse | NodeOperationResponse


class VerbMesh(Protocol):
    """The mesh's four single verbs, as the recovery re-issues them."""

    def create_node(self, request: CreateNodeRequest) -> Observable[CreateNodeResponse]:
        """Answer ``request`` with exactly one response."""
        ...

    def update_node(self, request: UpdateNodeRequest) -> Observable[NodeOperationResponse]:
        """Answer ``request`` with exactly one response."""
        ...

    def delete_node(self, request: DeleteNodeRequest) -> Observable[NodeOperationResponse]:
        """Answer ``request`` with exactly one response."""
        ...

    def move_node(self, request: MoveNodeRequest) -> Observable[NodeOperationResponse]:
        """Answer ``request`` with exactly one response."""
        ...


def reissue(mesh: VerbMesh, intent: PendingWrite) -> Observable[Answer]:
    """The re-issue of ``intent``: the same request, marked ``reissued_after_unavailable``."""
    access, request_id = intent.access, intent.request_id
    expected, expected_id = intent.expected_version, intent.expected_request_id
    if intent.verb == "update":
        return mesh.update_node(
            UpdateNodeRequest(
                node=intent.node,
                access=access,
                request_id=request_id,
                expected_version=expected,
                expected_request_id=expected_id,
                reissued_after_unavailable=True,
            )
        )
    if intent.verb == "delete":
        return mesh.delete_node(
            DeleteNodeRequest(
                path=intent.path,
                access=access,
                request_id=request_id,
                expected_version=expected,
                expected_request_id=expected_id,
                reissued_after_unavailable=True,
            )
        )
    if intent.verb == "move":
        assert intent.target is not None  # a move's intent always names its target
        return mesh.move_node(
            MoveNodeRequest(
                source=intent.path,
                target=intent.target,
                access=access,
                request_id=request_id,
                expected_version=expected,
                expected_request_id=expected_id,
                reissued_after_unavailable=True,
            )
        )
    return mesh.create_node(
        CreateNodeRequest(
            node=intent.node, access=access, request_id=request_id, reissued_after_unavailable=True
        )
    )


def outcome_of(intent: PendingWrite, response: Answer) -> PendingWriteOutcome:
    """The verdict a re-issue's answer (or the caller's own answer) settles ``intent`` with.

    Success is LANDED (including a row already carrying this request's id: an earlier attempt
    did land) — for a delete that found nothing to delete, ALREADY_ABSENT. A create answered
    NODE_ALREADY_EXISTS is ALREADY_PRESENT. VERSION_CONFLICT (and a move's taken target) is
    CONFLICT: another write came first and was not overwritten. Anything else, UNAVAILABLE and
    FORBIDDEN included, is DROPPED with its reason: a re-issue happens once.
    """
    if response.success:
        if isinstance(response, NodeOperationResponse) and response.already_absent:
            return PendingWriteOutcome(
                intent=intent, verdict=Verdict.ALREADY_ABSENT, detail="the node was gone already"
            )
        done = {"create": "created", "update": "updated", "delete": "deleted", "move": "moved"}
        return PendingWriteOutcome(
            intent=intent, verdict=Verdict.LANDED, detail=done.get(intent.verb, "")
        )
    reason = response.rejection_reason or RejectionReason.UNKNOWN
    verdict = Verdict.DROPPED
    if reason is RejectionReason.NODE_ALREADY_EXISTS:
        verdict = Verdict.CONFLICT if intent.verb == "move" else Verdict.ALREADY_PRESENT
    elif reason is RejectionReason.VERSION_CONFLICT:
        verdict = Verdict.CONFLICT
    return PendingWriteOutcome(
        intent=intent, verdict=verdict, reason=reason, detail=response.error or ""
    )


def confirm_path(intent: PendingWrite) -> str:
    """The path one read of which says whether a re-issue whose outcome is unknown landed."""
    return intent.target if intent.verb == "move" and intent.target else intent.path


def confirmed(intent: PendingWrite, response: Answer, row: MeshNode | None) -> PendingWriteOutcome:
    """Settle a re-issue whose write may have landed by the row at :func:`confirm_path`.

    A row this request wrote is LANDED (its id on the row; for an update or a move, at the
    version after its basis: a create of the same id leaves its id too). A delete whose node is
    gone is ALREADY_ABSENT. Another request's row of a
    create is ALREADY_PRESENT. Otherwise the answer's own verdict (DROPPED with its reason).
    """
    note = "(confirmed by a read: the re-issue's reply was lost)"
    if intent.verb == "delete":
        if row is None:
            return PendingWriteOutcome(
                intent=intent, verdict=Verdict.ALREADY_ABSENT, detail=f"the node is gone {note}"
            )
        return outcome_of(intent, response)
    if row is not None and _written_by(intent, row):
        return PendingWriteOutcome(
            intent=intent, verdict=Verdict.LANDED, detail=f"written by this request {note}"
        )
    if row is not None and intent.verb == "create":
        return PendingWriteOutcome(
            intent=intent,
            verdict=Verdict.ALREADY_PRESENT,
            reason=RejectionReason.NODE_ALREADY_EXISTS,
            detail="another request's node is at that path",
        )
    return outcome_of(intent, response)


def _written_by(intent: PendingWrite, row: MeshNode) -> bool:
    if row.request_id != intent.request_id:
        return False
    if intent.verb in ("update", "move") and intent.expected_version is not None:
        return row.version == intent.expected_version + 1
    return True
