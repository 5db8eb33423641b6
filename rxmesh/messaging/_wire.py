"""What crosses a messaging boundary: envelopes, replies, and the flattening of exceptions.

Exception objects never cross a boundary. The responding side turns an exception into a NACK
(:class:`~rxmesh.exceptions.DeliveryErrorType` + text) with :func:`flatten_exception`; the
requesting side raises it again as a :class:`~rxmesh.exceptions.DeliveryFailure`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure, MeshDisposedError
from rxmesh.faults import (
    is_coordination_unreachable,
    is_no_answer_in_time,
    is_store_unreachable,
)

__all__ = [
    "Ack",
    "Envelope",
    "Reply",
    "describe_forward_timeout",
    "describe_placement_timeout",
    "flatten_exception",
    "message_type_name",
]


class Ack(BaseModel):
    """The response of a handler that returned nothing."""

    message_type_name: ClassVar[str] = "rxmesh.Ack"


class Envelope(BaseModel):
    """A request on the wire: the message as JSON plus its routing facts."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    sender: str
    target: str
    message_type: str
    payload: dict[str, Any]
    hops: int = 0


class Reply(BaseModel):
    """A reply on the wire: a response message, or a NACK (``error_type`` + ``error``)."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    message_type: str | None = None
    payload: dict[str, Any] | None = None
    error_type: DeliveryErrorType | None = None
    error: str | None = None

    @classmethod
    def nack(cls, message_id: str, error_type: DeliveryErrorType, error: str) -> Reply:
        """A NACK reply."""
        return cls(message_id=message_id, error_type=error_type, error=error)

    def failure(self) -> DeliveryFailure | None:
        """The :class:`DeliveryFailure` this reply carries, or ``None`` for a response."""
        if self.error_type is None:
            return None
        return DeliveryFailure(self.error_type, self.error or "")


def message_type_name(model: type[BaseModel]) -> str:
    """The wire name of a message type: its ``message_type_name`` class attribute, if it has one,
    else ``module.QualName``."""
    explicit = getattr(model, "message_type_name", None)
    if isinstance(explicit, str):
        return explicit
    return f"{model.__module__}.{model.__qualname__}"


def describe_forward_timeout(
    target: str, timeout: float, message_type: str, message_id: str
) -> str:
    """The text a forwarding hop answers when the next hop gave no reply in time."""
    return (
        f"Delivery to '{target}' failed: Response did not arrive on time in {timeout:g}s for "
        f"message {message_type} ({message_id})"
    )


def describe_placement_timeout(target: str, timeout: float) -> str:
    """The text answered when a target could not be placed (activated) in time."""
    return (
        f"Delivery to '{target}' failed: Placement operation timed out: the hub was not "
        f"activated within {timeout:g}s"
    )


def flatten_exception(
    exc: BaseException, *, hub: str, message_type: str
) -> tuple[DeliveryErrorType, str]:
    """Flatten a handler's exception into a NACK (type, text), on the responding side.

    In order: a :class:`DeliveryFailure` is relayed unchanged (a hop passing on a NACK from
    further away, NO_RESPONDERS included); an unreachable store -> UNAVAILABLE; no answer in time
    (either shape) -> FAILED with "Response did not arrive on time", so the classification
    survives the boundary; nobody answering further along (a NO_RESPONDERS failure wrapped in the
    chain or in a group branch) -> NO_RESPONDERS, for the same reason; a ``PermissionError`` ->
    FORBIDDEN "Access denied"; a disposed mesh -> SHUTTING_DOWN; anything else -> FAILED naming
    the exception type.
    """
    where = f"{message_type} at '{hub}'"
    if isinstance(exc, DeliveryFailure):
        return exc.error_type, exc.message
    if is_store_unreachable(exc):
        return (
            DeliveryErrorType.UNAVAILABLE,
            f"{where} could not be evaluated: the data store was unreachable ({exc})",
        )
    if is_no_answer_in_time(exc):
        return (
            DeliveryErrorType.FAILED,
            f"{where} failed: Response did not arrive on time ({type(exc).__name__}: {exc})",
        )
    if is_coordination_unreachable(exc):  # not a timeout, so a NO_RESPONDERS failure inside
        return (
            DeliveryErrorType.NO_RESPONDERS,
            f"{where} failed: nobody answering further along ({type(exc).__name__}: {exc})",
        )
    if isinstance(exc, PermissionError):
        return DeliveryErrorType.FORBIDDEN, f"Access denied: {where}: {exc}"
    if isinstance(exc, MeshDisposedError):
        return DeliveryErrorType.SHUTTING_DOWN, f"{where}: the mesh is shutting down ({exc})"
    return DeliveryErrorType.FAILED, f"{where} failed: {type(exc).__name__}: {exc}"
