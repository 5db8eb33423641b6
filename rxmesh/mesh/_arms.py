"""The terminal arm every node operation ends in: classify and answer, never retry.

A failed attempt reaches :meth:`TerminalArm.answer` (whatever the verb, the bulk's partial
landing included), which classifies the fault with :mod:`rxmesh.faults` (the one log line it
deserves), words the answer, records the intent when the store was away, builds the response
with :meth:`~rxmesh.operations.NodeResponse.fail` and settles an outstanding intent the answer
keeps: in one pass, in one place.

The classification's order decides answers, so it is kept as is:

1. the store could not be reached (:func:`rxmesh.faults.is_store_unreachable`) -> UNAVAILABLE,
   "not attempted", ERROR naming the store. The condition outranks the type: a validation-typed
   exception wrapping a connect fault is still the store being away.
2. the outermost exception is a judged refusal (validation family, exists, access denied)
   -> its reason (WARNING / INFO).
3. a cooperative cancellation -> UNAVAILABLE "was cancelled before it completed" (DEBUG).
4. anything else -> UNKNOWN "Unexpected error: ..." (ERROR naming the type).

A bulk some of whose windows committed before the fault is answered before all of these, as a
partial landing: UNKNOWN with what landed, whatever the fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

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
from rxmesh.faults import (
    describe_may_have_partially_landed,
    describe_not_attempted,
    is_cooperative_cancellation,
    is_store_unreachable,
    is_write_outcome_unknown,
)
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.mesh._core import MeshCore
from rxmesh.operations import NodeResponse, RejectionReason

__all__ = [
    "NOTHING_LANDED",
    "AttemptFacts",
    "FailedWork",
    "Judgement",
    "Landing",
    "TerminalArm",
    "annotate",
    "error_for",
    "judge",
    "unreachable_note",
]

R = TypeVar("R", bound=NodeResponse)
Q = TypeVar("Q")
F = TypeVar("F", bound="AttemptFacts")
Q_contra = TypeVar("Q_contra", contravariant=True)
F_contra = TypeVar("F_contra", bound="AttemptFacts", contravariant=True)


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


@dataclass
class AttemptFacts:
    """What one attempt learned on its way, for the terminal arm.

    ``heals``: the system records it wrote (an UNAVAILABLE answer names them instead of "Nothing
    was written"). ``write_outcome_unknown``: one of its single writes failed in a way that may
    have committed (:meth:`write_failed`). ``write_started``: a multi-window write had begun, so
    windows may have committed.
    """

    operation: str
    doing: str
    path: str
    request_id: str
    heals: list[str] = field(default_factory=list)
    write_outcome_unknown: bool = False
    write_started: bool = False

    def write_failed(self, failure: BaseException) -> None:
        """A single write of this attempt failed with ``failure``: judged now, not kept. (Kept,
        the exception would hold its traceback, whose frames hold these facts: a reference
        cycle per failed write, garbage only the cyclic GC frees, for every UNAVAILABLE
        answer.)"""
        if not self.write_outcome_unknown and is_write_outcome_unknown(failure):
            self.write_outcome_unknown = True

    @property
    def may_have_landed(self) -> bool:
        """Whether a write of this attempt may be durable although no answer said so."""
        return self.write_started or self.write_outcome_unknown


@dataclass(frozen=True)
class Landing:
    """What a failed attempt's writes did, as its answer reports them: ``fields`` of the
    response (a bulk's ``created``, ``already_present``, ``not_created``), and, when some of
    this attempt's own writes landed, how many did (``created``) and how many did not."""

    fields: dict[str, Any]
    created: int = 0
    not_created: int = 0


NOTHING_LANDED = Landing({})
"""The landing of an attempt with nothing to report beyond its reason (a single write's)."""


class FailedWork(Protocol[Q_contra, F_contra, R]):
    """What the arm asks of the job whose attempt failed (:class:`~rxmesh.mesh._job.Job`)."""

    kind: type[R]

    async def landing(self, request: Q_contra, facts: F_contra, exc: BaseException) -> Landing:
        """What this attempt's writes did (a bulk probes, once, what landed)."""
        ...

    async def record(self, request: Q_contra, facts: F_contra) -> tuple[str, dict[str, Any]]:
        """Record an unreachable attempt's intent(s); the answer's note and fields."""
        ...

    def settle(self, request: Q_contra, response: R) -> None:
        """Settle the outstanding intent a judged answer keeps."""
        ...


def _may_have_landed(operation: str) -> str:
    """The answer text for one write whose statement may have reached the store before it went
    away. One write is all of it or nothing, never "a subset" (the bulk's wording)."""
    return (
        f"{operation} failed after its write was sent: the data store became unreachable "
        "before it answered. The write may already be durable. Read the current state before "
        "retrying; re-issuing the same request (with the same node id) is safe only if it is "
        "not there."
    )


class TerminalArm:
    """Classify and answer, never retry: the one place a failed attempt becomes its answer."""

    def __init__(self, core: MeshCore) -> None:
        self._core = core

    def judge(self, exc: BaseException, facts: AttemptFacts) -> Judgement:
        """Classify ``exc`` for ``facts``' operation and log the one line it deserves."""
        return judge(
            exc,
            operation=facts.operation,
            doing=facts.doing,
            path=facts.path,
            store=self._core.store.name,
            written=facts.heals,
        )

    async def answer(self, job: FailedWork[Q, F, R], request: Q, facts: F, exc: BaseException) -> R:
        """The failure answer of ``job.kind`` to ``request`` for ``exc``.

        When the store was away: the may-have-landed text (and ``outcome_unknown``, where the
        response has it) if a write may have committed; then ``job.record`` journals the intent
        and its note joins the text. A judged refusal keeps an outstanding intent's promise
        (``job.settle``). A partial landing is answered as such first, whatever the fault.
        """
        kind = job.kind
        landing = await job.landing(request, facts, exc)
        if landing.created:
            return await self._partially_landed(job, request, facts, exc, landing)
        fields = dict(landing.fields)
        verdict = self.judge(exc, facts)
        error = verdict.error
        if verdict.unreachable and facts.may_have_landed:
            describe = (
                describe_may_have_partially_landed
                if facts.write_started  # windows: some may have committed, some not
                else _may_have_landed  # one write: all of it or nothing
            )
            error = verdict.annotate(describe(facts.operation))
            if "outcome_unknown" in kind.model_fields:
                fields["outcome_unknown"] = True
        if verdict.unreachable:
            note, recorded = await job.record(request, facts)  # durable before the answer leaves
            error += note
            fields.update(recorded)
        response = kind.fail(facts.request_id, verdict.reason, error, **fields)
        if _instrumentation.enabled:  # the arm alone knows the stall adjacency
            _instrumentation.current().answered(verdict.reason.value, stall=verdict.diagnosis)
        if verdict.judged:
            job.settle(request, response)
        return response

    async def _partially_landed(
        self, job: FailedWork[Q, F, R], request: Q, facts: F, exc: BaseException, landing: Landing
    ) -> R:
        """Some of this attempt's writes landed: UNKNOWN, naming what landed and what did not,
        logged at ERROR; the rest recorded for one re-issue when the store was away."""
        unreachable = is_store_unreachable(exc)
        note, recorded = await job.record(request, facts) if unreachable else ("", {})
        operation = facts.operation
        logger.bind(
            event="partial_landing",
            store=self._core.store.name,
            created=landing.created,
            not_created=landing.not_created,
            error_type=type(exc).__name__,
        ).error(
            "{} PARTIALLY LANDED: {} created, {} not created, after {}: {}",
            operation,
            landing.created,
            landing.not_created,
            type(exc).__name__,
            exc,
        )
        text = (
            f"{operation} partially landed: {landing.created} created, {landing.not_created} "
            f"not created ({type(exc).__name__}: {exc}). "
            + describe_may_have_partially_landed(operation)
        )
        diagnosis = unreachable_note()[0] if unreachable else ""
        return job.kind.fail(
            facts.request_id,
            RejectionReason.UNKNOWN,
            annotate(text, diagnosis) + note,
            **landing.fields,
            **recorded,
        )

    def backstop(self, kind: type[R], facts: AttemptFacts) -> R:
        """The answer of a run that completed without one: a defect, answered UNKNOWN."""
        return kind.fail(
            facts.request_id,
            RejectionReason.UNKNOWN,
            f"{facts.operation} completed without an answer",
        )
