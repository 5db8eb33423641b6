"""Requests, responses and reasons of the node operations (JSON on the wire, pydantic in-process).

:class:`RejectionReason` meanings:

- ``UNAVAILABLE``: not evaluated, nothing written; an availability failure, not a verdict.
  Re-issuing the same request with the same node id is meaningful.
- ``NODE_ALREADY_EXISTS``: a node is at that path, written by another request.
- ``INVALID_PATH``, ``INVALID_NODE_TYPE``, ``VALIDATION_FAILED``: the request is wrong; fix it.
- ``FORBIDDEN``: the requester holds no grant (a verdict; not "your request was invalid").
- ``VERSION_CONFLICT``: an update, delete or move was based on a version the node is no longer
  at (or a node no longer there): another write came first, and nothing was changed.
- ``UNKNOWN``: an unexpected failure; the text says what.

Every string field of a request obeys a rule that every store can keep (docs/requests.md): a
request that breaks one cannot be constructed in-process, and a mapping or JSON text that breaks
one is answered INVALID_PATH (a path) or VALIDATION_FAILED naming the field, before any store call.

Update, delete and move answer :class:`NodeOperationResponse`; their ``NODE_ALREADY_EXISTS``
means "the target is taken" (move) and a missing node is ``VALIDATION_FAILED`` naming the path.
"""

from __future__ import annotations

import os
from enum import StrEnum
from types import NoneType
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from rxmesh._util.trusted import trusted
from rxmesh.model import AccessContext, MeshNode, NodePath, RequestId

_Shape = tuple[dict[str, Any], frozenset[str]] | None
_SHAPES: dict[type[BaseModel], _Shape] = {}
"""Per response class, what ``NodeResponse._built`` needs of it (see :func:`_shape_of`)."""

__all__ = [
    "CreateNodeRequest",
    "CreateNodeResponse",
    "CreateNodesRequest",
    "CreateNodesResponse",
    "DeleteNodeRequest",
    "MoveNodeRequest",
    "RejectionReason",
    "UpdateNodeRequest",
    "Verdict",
]


def new_request_id() -> str:
    """A fresh request id (a UUID4 in hex): what ``uuid.uuid4().hex`` returns, made without the
    ``UUID`` object (every request that does not bring its own id pays for it)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


class RejectionReason(StrEnum):
    """Why a node operation did not succeed (see the module docstring for each meaning)."""

    UNKNOWN = "UNKNOWN"
    NODE_ALREADY_EXISTS = "NODE_ALREADY_EXISTS"
    INVALID_NODE_TYPE = "INVALID_NODE_TYPE"
    INVALID_PATH = "INVALID_PATH"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    FORBIDDEN = "FORBIDDEN"
    UNAVAILABLE = "UNAVAILABLE"
    VERSION_CONFLICT = "VERSION_CONFLICT"


class Verdict(StrEnum):
    """How a re-issued pending write settled (docs/pending-writes.md has the table per verb)."""

    LANDED = "LANDED"
    """The re-issued write went through (or an earlier attempt of the same request had)."""
    ALREADY_PRESENT = "ALREADY_PRESENT"
    """A create: someone (often the caller itself) created the node meanwhile."""
    ALREADY_ABSENT = "ALREADY_ABSENT"
    """A delete: the node was gone already (this request's earlier attempt, or another's)."""
    CONFLICT = "CONFLICT"
    """An update, delete or move: another write came first (the node is no longer at the version
    the request was based on, is gone, or a move's target is taken). Nothing was overwritten."""
    DROPPED = "DROPPED"
    """The re-issue was refused again, for any reason; it is not retried."""


class NodeResponse(BaseModel):
    """What every node operation's answer shares: its request's id and whether it succeeded.

    A failure answer is built in one way for every verb, :meth:`fail`, by the mesh's terminal
    arm; each verb's response adds its own fields after these two.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    success: bool

    @classmethod
    def fail(cls, request_id: str, reason: RejectionReason, error: str, **fields: Any) -> Self:
        """A failure answer with its reason and text (and the verb's own ``fields``).

        Built without pydantic's validation pass (it is the hot path of an outage: every
        UNAVAILABLE answer is one): the reason and the text are checked here, the ``fields``
        must already have their declared types (the terminal arm passes what the models hold).
        """
        if not isinstance(reason, RejectionReason):
            raise TypeError(f"reason must be a RejectionReason, got {reason!r}")
        if not isinstance(request_id, str) or not isinstance(error, str):
            raise TypeError("request_id and error must be strings")
        unknown = set(fields) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        return cls._built(
            {
                "request_id": request_id,
                "success": False,
                "rejection_reason": reason,
                "error": error,
                **fields,
            }
        )

    @classmethod
    def _built(cls, given: dict[str, Any]) -> Self:
        """``model_construct(**given)`` without its per-field defaulting: the fields ``given``
        does not name take their declared defaults, all constants (None, False, ``()``), copied
        from one dict made once per class (in declaration order: the wire's field order). Every
        response's field set is exactly ``given``'s keys, as with ``model_construct``; ``given``
        holds only declared fields (the callers check) and every required one (else pydantic's
        way is taken)."""
        if cls in _SHAPES:
            shape = _SHAPES[cls]
        else:
            shape = _SHAPES[cls] = _shape_of(cls)
        if shape is None or not shape[1] <= given.keys():
            return cls.model_construct(**given)  # a default that is not a constant, or a gap
        values = dict(shape[0])
        values.update(given)
        return trusted(cls, values, set(given))


def _shape_of(model: type[BaseModel]) -> _Shape:
    """``model``'s fields in order with their constant defaults (``None`` standing in for a
    required field's), and its required fields; ``None`` when a default is not a constant."""
    defaults: dict[str, Any] = {}
    required: set[str] = set()
    for name, field in model.model_fields.items():
        if field.is_required():
            required.add(name)
            defaults[name] = None  # always replaced: a required field must be given
        elif field.default_factory is None and isinstance(
            field.default, str | bool | int | tuple | NoneType
        ):
            defaults[name] = field.default
        else:
            return None
    return defaults, frozenset(required)


class CreateNodeRequest(BaseModel):
    """Create one node.

    Args:
        node: the node as requested (its path is its id; keep it when re-issuing).
        access: who the request is delivered on behalf of; ``None`` means the node's
            ``created_by`` (or anonymous, which holds no grants).
        request_id: identifies this request; stored with the row, so an ambiguous commit is
            recognised as landed. Keep it when re-issuing the same request.
        reissued_after_unavailable: set by the pending-write recovery; such a request is never
            recorded again.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: MeshNode
    access: AccessContext | None = None
    request_id: RequestId = Field(default_factory=new_request_id)
    reissued_after_unavailable: bool = False


class CreateNodeResponse(NodeResponse):
    """The one answer to a :class:`CreateNodeRequest`.

    ``outcome_unknown`` is set on an UNAVAILABLE answer whose write had left this process before
    the store went away (its connection died mid-call): the node may be durable. Re-issuing the
    same request is still safe — the same ``request_id`` is recognised as this request's row.

    ``recorded_for_reissue`` is set on an UNAVAILABLE answer whose intent the mesh recorded: it
    will be re-issued once, on evidence that the store answers again, and settle as exactly one
    verdict on ``mesh.ledger.outcomes``. When it is ``False`` on an UNAVAILABLE answer, the text
    says why the write will not be re-issued (recording is off, the journal failed, another
    requester's create of the path is pending, or this is a re-issue already).
    """

    node: MeshNode | None = None
    rejection_reason: RejectionReason | None = None
    error: str | None = None
    outcome_unknown: bool = False
    recorded_for_reissue: bool = False

    @classmethod
    def created(cls, request_id: str, node: MeshNode) -> CreateNodeResponse:
        """A success answer carrying the stored node (a :class:`MeshNode` already)."""
        if not isinstance(node, MeshNode):
            raise TypeError(f"node must be a MeshNode, got {type(node).__name__}")
        return cls._built({"request_id": request_id, "success": True, "node": node})


class CreateNodesRequest(BaseModel):
    """Create many nodes, written in windows (one transaction per window per partition)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: tuple[MeshNode, ...] = Field(min_length=1)
    access: AccessContext | None = None
    request_id: RequestId = Field(default_factory=new_request_id)
    window: int = Field(default=1000, ge=1, le=2000)
    reissued_after_unavailable: bool = False


class CreateNodesResponse(NodeResponse):
    """The one answer to a :class:`CreateNodesRequest`.

    ``created`` lists what this request wrote; ``already_present`` the paths that existed before
    (skipped, never overwritten); ``not_created`` what was neither (on failure).

    When the store was unreachable, every path of ``not_created`` is in exactly one of
    ``recorded_for_reissue`` (its intent was recorded: re-issued once on evidence, one verdict on
    ``mesh.ledger.outcomes``) and ``not_recorded`` (it will not be re-issued; the text gives the
    counts and why).
    """

    created: tuple[MeshNode, ...] = ()
    already_present: tuple[str, ...] = ()
    not_created: tuple[MeshNode, ...] = ()
    rejection_reason: RejectionReason | None = None
    error: str | None = None
    recorded_for_reissue: tuple[str, ...] = ()
    not_recorded: tuple[str, ...] = ()


_BASIS_DOC = """
    Compare-and-set: ``expected_version`` is the version of the node the request was based on
    (``expected_request_id``, optionally, the request id of the write that produced that
    version: the store keeps the id of the last write with the row). When it is given, the store
    applies the request only if the node is still at that version; otherwise the answer is
    VERSION_CONFLICT and nothing changes. When it is ``None`` the mesh bases the request on the
    node as its attempt reads it (so a write between that read and the write is a conflict too).
    ``reissued_after_unavailable`` is set by the pending-write recovery: such a request is never
    recorded again.
"""


class UpdateNodeRequest(BaseModel):
    """Replace the type/content of an existing node (its path stays)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: MeshNode
    access: AccessContext | None = None
    request_id: RequestId = Field(default_factory=new_request_id)
    expected_version: int | None = Field(default=None, ge=1)
    expected_request_id: RequestId | None = None
    reissued_after_unavailable: bool = False


class DeleteNodeRequest(BaseModel):
    """Delete the node at ``path`` (not its children)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: NodePath
    access: AccessContext | None = None
    request_id: RequestId = Field(default_factory=new_request_id)
    expected_version: int | None = Field(default=None, ge=1)
    expected_request_id: RequestId | None = None
    reissued_after_unavailable: bool = False


class MoveNodeRequest(BaseModel):
    """Move a node from ``source`` to a free ``target`` path (the basis is the source's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: NodePath
    target: NodePath
    access: AccessContext | None = None
    request_id: RequestId = Field(default_factory=new_request_id)
    expected_version: int | None = Field(default=None, ge=1)
    expected_request_id: RequestId | None = None
    reissued_after_unavailable: bool = False


for _model in (UpdateNodeRequest, DeleteNodeRequest, MoveNodeRequest):
    _model.__doc__ = f"{_model.__doc__}\n{_BASIS_DOC}"


class NodeOperationResponse(NodeResponse):
    """The one answer to an update, delete or move.

    ``already_absent``: a re-issued delete found nothing to delete (the node was gone already).
    ``outcome_unknown`` and ``recorded_for_reissue`` mean what they mean on
    :class:`CreateNodeResponse`.
    """

    node: MeshNode | None = None
    rejection_reason: RejectionReason | None = None
    error: str | None = None
    outcome_unknown: bool = False
    recorded_for_reissue: bool = False
    already_absent: bool = False
