"""The in-process verbs' side of an answer: the request they build (a mapping, validated by the
mesh) and the exception a failed answer is raised as, carrying what the answer said."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from reactivex import Observable

from rxmesh.aio import first_value
from rxmesh.exceptions import NodeOperationError
from rxmesh.mesh._arms import error_for
from rxmesh.mesh._requests import parse, parse_failure, request_id_of
from rxmesh.model import AccessContext, MeshNode
from rxmesh.operations import (
    CreateNodeResponse,
    CreateNodesRequest,
    CreateNodesResponse,
    NodeOperationResponse,
    RejectionReason,
)

__all__ = ["BulkInProcess", "error_of", "parsed", "path_of", "raised", "request_fields"]

R = TypeVar("R", bound=BaseModel)


def request_fields(fields: dict[str, Any], request_id: str | None) -> dict[str, Any]:
    """A request's fields as a mapping, with its key when given: the mesh validates it, so input
    the model refuses is raised as the refusal's NodeOperationError, never as pydantic's
    ValidationError."""
    if request_id is not None:
        fields["request_id"] = request_id
    return fields


def path_of(node: MeshNode | Mapping[str, Any] | str) -> str:
    """The path an error names, also for input that may not hold a valid one."""
    path = node if isinstance(node, str) else node.path if isinstance(node, MeshNode) else None
    if isinstance(node, Mapping):
        path = node.get("path")
    return path if isinstance(path, str) else ""


def raised(
    reason: RejectionReason, text: str, path: str, request_id: str, **answer: bool
) -> NodeOperationError:
    error = error_for(reason, text, path)
    error.reason = reason.value
    error.request_id = request_id
    error.recorded_for_reissue = answer.get("recorded_for_reissue", False)
    error.outcome_unknown = answer.get("outcome_unknown", False)
    return error


def error_of(response: CreateNodeResponse | NodeOperationResponse, path: str) -> NodeOperationError:
    """The in-process exception for a failed answer, carrying what the answer said."""
    reason = response.rejection_reason or RejectionReason.UNKNOWN
    return raised(
        reason,
        response.error or f"operation on '{path}' failed",
        path,
        response.request_id,
        recorded_for_reissue=response.recorded_for_reissue,
        outcome_unknown=response.outcome_unknown,
    )


def parsed(model: type[R], given: Mapping[str, Any], shown: str) -> R:
    """The request ``given`` builds, or the refusal's error (never pydantic's ValidationError)."""
    try:
        return parse(model, given)
    except (ValidationError, ValueError) as exc:
        reason, text = parse_failure(exc)
        raise raised(reason, text, shown, request_id_of(given)) from exc


class _Bulk(Protocol):
    def create_nodes(
        self, request: CreateNodesRequest | Mapping[str, Any] | str | bytes
    ) -> Observable[CreateNodesResponse]: ...


class BulkInProcess:
    """The bulk's in-process verb, beside :meth:`~rxmesh.mesh.Mesh.create_nodes`."""

    async def create_many(
        self: _Bulk,
        nodes: Iterable[MeshNode | Mapping[str, Any]],
        *,
        access: AccessContext | None = None,
        request_id: str | None = None,
        window: int = 1000,
    ) -> CreateNodesResponse:
        """Create ``nodes`` as one bulk request and return its one answer, whatever it says.

        A bulk's answer is a report, not a yes or no: ``created``, ``already_present``, and on
        failure its ``rejection_reason``, ``not_created``, ``recorded_for_reissue`` and
        ``not_recorded``; so it is returned, never raised (invalid input is answered too,
        naming the first offender). ``request_id`` is the idempotency key: a re-send with the
        same key answers what the first answer would have been (the rows this request wrote
        are ``created`` again, an earlier try's or the mesh's own re-issue's).
        """
        given = request_fields(
            {"nodes": tuple(nodes), "access": access, "window": window}, request_id
        )
        return await first_value(self.create_nodes(given))
