"""What an HTTP service answers for each of the mesh's answers: a status, headers and a body.

No web framework is imported: :func:`http_status` returns plain values a FastAPI, Starlette,
aiohttp or Django view hands to its own response type. The table is :data:`STATUS_BY_REASON`;
docs/answers.md explains each row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rxmesh.exceptions import NodeOperationError
from rxmesh.operations import CreateNodeResponse, NodeResponse, RejectionReason

__all__ = ["http_status"]

STATUS_BY_REASON: Mapping[RejectionReason, int] = {
    RejectionReason.UNAVAILABLE: 503,
    RejectionReason.NODE_ALREADY_EXISTS: 409,
    # Another write came first: the request conflicts with the node's current state. 409, not
    # 412: the basis travels in the request, not in a conditional header the server evaluates
    # (a service that maps If-Match to expected_version may answer 412 instead).
    RejectionReason.VERSION_CONFLICT: 409,
    RejectionReason.INVALID_PATH: 422,
    RejectionReason.INVALID_NODE_TYPE: 422,
    RejectionReason.VALIDATION_FAILED: 422,
    RejectionReason.FORBIDDEN: 403,
    RejectionReason.UNKNOWN: 500,
}
"""The HTTP status of each rejection reason."""


class HttpAnswer(NamedTuple):
    """An HTTP response for one answer: ``status``, ``headers`` and a JSON-ready ``body``."""

    status: int
    headers: dict[str, str]
    body: dict[str, Any]


def http_status(answer: NodeResponse | NodeOperationError, *, retry_after: int = 5) -> HttpAnswer:
    """The HTTP response for ``answer``: a response of the observable API, or an error an
    in-process verb raised.

    A success is 200 (201 for a created node: also a re-send whose own row is there). A failure
    is :data:`STATUS_BY_REASON` of its reason, an UNAVAILABLE one with ``Retry-After:
    retry_after`` (seconds: re-send the same request, with the same idempotency key). The body
    is the answer's fields — ``request_id``, ``success``, ``rejection_reason``, ``error``,
    ``recorded_for_reissue`` and ``outcome_unknown`` always among them.

    Raises:
        TypeError: ``answer`` is neither (another exception is the service's own to map).
        ValueError: ``retry_after`` is negative.
    """
    if isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0:
        raise ValueError(f"retry_after must be a whole number of seconds >= 0, got {retry_after!r}")
    if isinstance(answer, NodeResponse):
        body = answer.model_dump(mode="json")
        reason = getattr(answer, "rejection_reason", None)
    elif isinstance(answer, NodeOperationError):
        reason = RejectionReason(answer.reason or RejectionReason.UNKNOWN)
        body = {
            "request_id": answer.request_id,
            "success": False,
            "rejection_reason": reason.value,
            "error": str(answer),
            "path": answer.path,
        }
    else:
        raise TypeError(
            f"answer must be a node operation's response or NodeOperationError, "
            f"got {type(answer).__name__}"
        )
    body.setdefault("recorded_for_reissue", False)
    body.setdefault("outcome_unknown", False)
    if isinstance(answer, NodeOperationError):
        body["recorded_for_reissue"] = answer.recorded_for_reissue
        body["outcome_unknown"] = answer.outcome_unknown
    if body["success"]:
        return HttpAnswer(201 if isinstance(answer, CreateNodeResponse) else 200, {}, body)
    reason = RejectionReason(reason or RejectionReason.UNKNOWN)
    headers = {"retry-after": str(retry_after)} if reason is RejectionReason.UNAVAILABLE else {}
    return HttpAnswer(STATUS_BY_REASON[reason], headers, body)
