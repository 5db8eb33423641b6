"""Answer exactly once: the attempt protocol, and the ONE terminal arm every node operation
ends in.

An attempt is built fresh per subscription (its own facts: what it healed, which writes failed,
whether a multi-window write had started) and is ``(run, on_fault, backstop)``:

- ``run`` does the work and returns the success answer;
- ``on_fault`` hands the fault and the attempt's facts to :class:`TerminalArm`, which classifies
  (:func:`rxmesh.mesh._arms.judge`: the log line), words the answer, records the intent when the
  store was away, builds the response with :meth:`~rxmesh.operations.NodeResponse.fail` and
  settles an outstanding intent the answer keeps — in one pass, in one place;
- ``backstop`` answers a run that completed without an answer (a defect, never silence).

:func:`answer_once` drives an attempt for an observable caller, :func:`answer_now` for an
in-process ``await``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from loguru import logger
from reactivex import Observable, abc

from rxmesh._util.one_shot import OneShot as _OneShot
from rxmesh._util.one_shot import Subscribed as _Subscribed
from rxmesh.faults import describe_may_have_partially_landed, is_write_outcome_unknown
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.mesh._arms import Judgement, judge
from rxmesh.mesh._core import MeshCore
from rxmesh.operations import NodeResponse, RejectionReason

__all__ = [
    "Attempt",
    "AttemptFacts",
    "AttemptSteps",
    "TerminalArm",
    "answer_now",
    "answer_once",
    "immediate",
]

R = TypeVar("R", bound=NodeResponse)


Recording = Callable[[], Awaitable[tuple[str, dict[str, Any]]]]
"""Records an unreachable attempt's intent(s); returns the answer's note and response fields."""


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
        cycle per failed write, garbage only the cyclic GC frees — every UNAVAILABLE answer.)"""
        if not self.write_outcome_unknown and is_write_outcome_unknown(failure):
            self.write_outcome_unknown = True

    @property
    def may_have_landed(self) -> bool:
        """Whether a write of this attempt may be durable although no answer said so."""
        return self.write_started or self.write_outcome_unknown


def _may_have_landed(operation: str) -> str:
    """The answer text for ONE write whose statement may have reached the store before it went
    away. One write is all of it or nothing, never "a subset" (the bulk's wording)."""
    return (
        f"{operation} failed after its write was sent: the data store became unreachable "
        "before it answered. The write may already be durable. Read the current state before "
        "retrying; re-issuing the same request (with the same node id) is safe only if it is "
        "not there."
    )


class TerminalArm:
    """Classify and ANSWER, never retry: the one place a failed attempt becomes its answer."""

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

    async def answer(
        self,
        kind: type[R],
        exc: BaseException,
        facts: AttemptFacts,
        *,
        record: Recording | None = None,
        settle: Callable[[R], None] | None = None,
        **fields: Any,
    ) -> R:
        """The failure answer of ``kind`` for ``exc``.

        When the store was away: the may-have-landed text (and ``outcome_unknown``, where the
        response has it) if a write may have committed; then ``record`` journals the intent and
        its note joins the text. A judged refusal keeps an outstanding intent's promise
        (``settle``).
        """
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
        if verdict.unreachable and record is not None:
            note, recorded = await record()  # durable before the answer leaves
            error += note
            fields.update(recorded)
        response = kind.fail(facts.request_id, verdict.reason, error, **fields)
        if _instrumentation.enabled:  # the arm alone knows the stall adjacency
            _instrumentation.current().answered(verdict.reason.value, stall=verdict.diagnosis)
        if verdict.judged and settle is not None:
            settle(response)
        return response

    def backstop(self, kind: type[R], facts: AttemptFacts) -> R:
        """The answer of a run that completed without one: a defect, answered UNKNOWN."""
        return kind.fail(
            facts.request_id,
            RejectionReason.UNKNOWN,
            f"{facts.operation} completed without an answer",
        )


class AttemptSteps(Generic[R]):
    """One attempt of a node operation as one object: its facts, and its three steps as methods
    (:meth:`run`, :meth:`on_fault`, :meth:`backstop`). An operation waiting in an outage holds
    its attempt for as long as it waits, and the cyclic GC walks everything it holds in each
    full pass: as closures, the same steps were four or five functions, their closure tuples
    and their cells.

    A subclass defines :meth:`run`, :meth:`_record` (the intent an unreachable answer records)
    and :meth:`_settle` (what an answer settles)."""

    __slots__ = ("_arm", "_facts", "_kind")

    def __init__(self, kind: type[R], arm: TerminalArm, facts: AttemptFacts) -> None:
        self._kind = kind
        self._arm = arm
        self._facts = facts

    async def run(self) -> R:
        raise NotImplementedError

    async def on_fault(self, exc: BaseException) -> R:
        return await self._arm.answer(
            self._kind, exc, self._facts, record=self._record, settle=self._settle
        )

    def backstop(self) -> R:
        return self._arm.backstop(self._kind, self._facts)

    async def _record(self) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _settle(self, response: R) -> None:
        raise NotImplementedError


Attempt = (
    tuple[Callable[[], Awaitable[R]], Callable[[BaseException], Awaitable[R]], Callable[[], R]]
    | AttemptSteps[R]
)
"""One subscription's work, built fresh per subscription: an :class:`AttemptSteps`, or the
three steps ``(run, on_fault, backstop)`` as callables."""


class _Steps(Generic[R]):
    """The three callables of a tuple attempt, under the names :class:`AttemptSteps` has."""

    __slots__ = ("backstop", "on_fault", "run")

    def __init__(
        self,
        run: Callable[[], Awaitable[R]],
        on_fault: Callable[[BaseException], Awaitable[R]],
        backstop: Callable[[], R],
    ) -> None:
        self.run, self.on_fault, self.backstop = run, on_fault, backstop


def _outcome(response: NodeResponse) -> str | None:
    reason = getattr(response, "rejection_reason", None)
    return None if response.success or reason is None else str(reason)


def answer_once(
    attempt: Callable[[], Attempt[R]], verb: str, request_id: str, *, reissue: bool = False
) -> Observable[R]:
    """Per subscription, build a fresh attempt (its own state) and run it as one task on the
    running loop (:func:`answer_now`); answer exactly one item; disposing cancels the run (and
    nothing is answered after it). ``verb`` and ``request_id`` name the operation for the
    instruments (:mod:`rxmesh.instrumentation`; nothing is built while none is installed).
    ``first_value`` awaits :func:`answer_now` directly, with no task and no observable."""
    return _Answer(attempt, verb, request_id, reissue)


class _Answer(_OneShot[R]):
    """:func:`answer_once`'s observable. What it answers is kept on it, not in closures: an
    operation waiting in an outage holds each object it is made of for as long as it waits, and
    the collector walks them all in each full pass (two functions, their cells and closure tuples
    fewer per operation than with closures)."""

    def __init__(
        self, attempt: Callable[[], Attempt[R]], verb: str, request_id: str, reissue: bool
    ) -> None:
        super().__init__()
        self._attempt = attempt
        self._verb = verb
        self._request_id = request_id
        self._reissue = reissue

    def direct(self) -> Awaitable[R]:
        return answer_now(self._attempt, self._verb, self._request_id, reissue=self._reissue)

    def _subscribe_core(
        self, observer: abc.ObserverBase[R], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        async def drive(task: _Subscribed) -> None:
            # A disposal cancels this task: answer_now then re-raises, and nothing is answered.
            response = await self.direct()
            if not task.disposed:
                observer.on_next(response)
                observer.on_completed()

        return _Subscribed(drive)


async def answer_now(
    attempt: Callable[[], Attempt[R]], verb: str, request_id: str, *, reissue: bool = False
) -> R:
    """Run a fresh attempt and return its one answer, classified on any fault: a cancellation
    from inside the work is answered; the caller's own cancellation (or a disposal) propagates,
    as nobody is left to answer. A terminal arm that itself fails (a defect) still answers, with
    the backstop's UNKNOWN, and the defect is logged at ERROR."""
    made = attempt()
    # The steps are called through the attempt, not held as bound methods while they run: three
    # objects fewer for each operation waiting.
    steps = made if isinstance(made, AttemptSteps) else _Steps(*made)
    with _instrumentation.operation(verb, request_id=request_id, reissue=reissue) as op:
        fault: BaseException | None = None
        try:
            response: R | None = await steps.run()
        except asyncio.CancelledError as cancelled:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            fault, response = cancelled, None
        except Exception as exc:  # noqa: BLE001 - classified and answered, never dropped
            fault, response = exc, None
        if fault is not None:
            try:
                response = await steps.on_fault(fault)
            except Exception as defect:  # noqa: BLE001 - logged at ERROR, answered UNKNOWN
                logger.bind(event="unexpected", verb=verb, error_type=type(defect).__name__).opt(
                    exception=defect
                ).error("the terminal arm of a {} failed: {}", verb, defect)
                response = None
            # The fault's traceback holds this frame, which holds the fault: a reference cycle
            # of every frame it went through, freed only by the cyclic GC (60 objects an
            # UNAVAILABLE answer). Dropped here, they go when the answer does.
            fault = None
        if response is None:
            response = steps.backstop()
        op.answered(_outcome(response))
        return response


def immediate(response: R, verb: str) -> Observable[R]:
    """An answer known before any store call (a refused request), with the same protocol."""

    async def run() -> R:
        return response

    async def fault(exc: BaseException) -> R:
        return response

    return answer_once(lambda: (run, fault, lambda: response), verb, response.request_id)
