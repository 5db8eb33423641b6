"""The terminal arm every node operation ends in: CLASSIFY and ANSWER, never retry.

Order (load-bearing, SPEC §3):

1. the store could not be reached (:func:`rxmesh.faults.is_store_unreachable`) -> UNAVAILABLE,
   "not attempted", ERROR naming the store. The CONDITION outranks the TYPE: a validation-typed
   exception wrapping a connect fault is still the store being away.
2. the outermost exception is a judged refusal (validation family, exists, access denied)
   -> its reason (WARNING / INFO).
3. a cooperative cancellation -> UNAVAILABLE "was cancelled before it completed" (DEBUG).
4. anything else -> UNKNOWN "Unexpected error: ..." (ERROR naming the type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger

from rxmesh.diagnosis import EVENT_STORE_UNREACHABLE, FIELD_EVENT, stall_adjacency
from rxmesh.exceptions import (
    InvalidNodeTypeError,
    InvalidPathError,
    NodeAccessDeniedError,
    NodeExistsError,
    NodeOperationError,
    NodeValidationError,
    NodeVersionConflictError,
    StoreUnavailableError,
)
from rxmesh.faults import describe_not_attempted, is_cooperative_cancellation, is_store_unreachable
from rxmesh.operations import RejectionReason

__all__ = ["Judgement", "annotate", "error_for", "judge", "unreachable_note"]


@dataclass(frozen=True)
class Judgement:
    """What a terminal arm decided: the reason, the answer text, and whether the store was away.

    ``diagnosis`` is the stall-adjacency sentence ("this process's event loop stalled 3.2 s,
    ending 0.3 s before this fault — check this process before the database") when this process
    stalled just before a store-unreachable fault, else ``""``. :attr:`error` already carries it;
    an arm that words its own answer (the may-have-landed text) adds it with :meth:`annotate`.
    """

    reason: RejectionReason
    error: str
    unreachable: bool = False
    diagnosis: str = ""

    @property
    def judged(self) -> bool:
        """Whether the request was evaluated and refused (a verdict): not UNAVAILABLE (the store
        away, or a cancellation) and not UNKNOWN (a defect)."""
        return self.reason not in (RejectionReason.UNAVAILABLE, RejectionReason.UNKNOWN)

    def annotate(self, text: str) -> str:
        """``text`` followed by the diagnosis sentence, when there is one."""
        return annotate(text, self.diagnosis)


def annotate(text: str, diagnosis: str) -> str:
    """``text`` then ``" Diagnosis: <sentence>."``; ``text`` alone when ``diagnosis`` is empty."""
    return f"{text} Diagnosis: {diagnosis}." if diagnosis else text


_REFUSALS: tuple[tuple[type[BaseException], RejectionReason], ...] = (
    (InvalidPathError, RejectionReason.INVALID_PATH),
    (InvalidNodeTypeError, RejectionReason.INVALID_NODE_TYPE),
    (NodeValidationError, RejectionReason.VALIDATION_FAILED),
    (NodeExistsError, RejectionReason.NODE_ALREADY_EXISTS),
    (NodeAccessDeniedError, RejectionReason.FORBIDDEN),
    (NodeVersionConflictError, RejectionReason.VERSION_CONFLICT),
)


def unreachable_note() -> tuple[str, dict[str, Any]]:
    """The stall-adjacency sentence and fields to add to a store-unreachable report, if any
    (``("", {})`` when this process did not stall just before)."""
    adjacency = stall_adjacency()
    if adjacency is None:
        return "", {}
    return adjacency.describe(), adjacency.as_log_fields()


def judge(
    exc: BaseException,
    *,
    operation: str,
    doing: str,
    path: str,
    store: str,
    written: Sequence[str] = (),
) -> Judgement:
    """Classify ``exc`` for the operation ``operation`` ("Node creation at 'a/b'") and log it.

    Args:
        exc: the error that reached the terminal arm (its retry budget spent).
        operation: the subject of the answer text.
        doing: the verb for the log line ("creating").
        path: the node path concerned.
        store: the store's printable name.
        written: the system records this attempt wrote before the fault (a partition heal); an
            UNAVAILABLE answer then names them instead of saying "Nothing was written".
    """
    if is_store_unreachable(exc):
        diagnosis, stall_fields = unreachable_note()
        fields: dict[str, Any] = {
            FIELD_EVENT: EVENT_STORE_UNREACHABLE,
            "store": store,
            "path": path,
            "operation": doing,
            "error_type": type(exc).__name__,
            **stall_fields,
        }
        logger.bind(**fields).error(
            "store '{}' unreachable while {} '{}': {}: {}{}",
            store,
            doing,
            path,
            type(exc).__name__,
            exc,
            f"; {diagnosis}" if diagnosis else "",
        )
        return Judgement(
            RejectionReason.UNAVAILABLE,
            annotate(describe_not_attempted(operation, written=written), diagnosis),
            True,
            diagnosis,
        )
    for refusal_type, reason in _REFUSALS:
        if isinstance(exc, refusal_type):
            logger.bind(event="refused", path=path, reason=reason.value).warning(
                "{} refused ({}): {}", operation, reason.value, exc
            )
            return Judgement(reason, str(exc))
    if is_cooperative_cancellation(exc):
        logger.bind(event="cancelled", path=path).debug("{} was cancelled", operation)
        return Judgement(
            RejectionReason.UNAVAILABLE, f"{operation} was cancelled before it completed"
        )
    logger.bind(event="unexpected", path=path, error_type=type(exc).__name__).opt(
        exception=exc
    ).error("{} failed unexpectedly with {}: {}", operation, type(exc).__name__, exc)
    return Judgement(RejectionReason.UNKNOWN, f"Unexpected error: {type(exc).__name__}: {exc}")


_ERRORS: dict[RejectionReason, type[NodeOperationError]] = {
    RejectionReason.UNAVAILABLE: StoreUnavailableError,
    RejectionReason.NODE_ALREADY_EXISTS: NodeExistsError,
    RejectionReason.INVALID_PATH: InvalidPathError,
    RejectionReason.INVALID_NODE_TYPE: InvalidNodeTypeError,
    RejectionReason.VALIDATION_FAILED: NodeValidationError,
    RejectionReason.FORBIDDEN: NodeAccessDeniedError,
    RejectionReason.VERSION_CONFLICT: NodeVersionConflictError,
    RejectionReason.UNKNOWN: NodeOperationError,
}


def error_for(reason: RejectionReason | None, error: str | None, path: str) -> NodeOperationError:
    """The in-process exception for a failed answer: one distinct type per reason."""
    kind = _ERRORS.get(reason or RejectionReason.UNKNOWN, NodeOperationError)
    return kind(error or f"operation on '{path}' failed", path=path)
