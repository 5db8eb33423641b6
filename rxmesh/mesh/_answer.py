"""Answer exactly once: the one shape of an attempt, and what drives it to its one answer.

An attempt is built fresh per subscription (its own facts: what it healed, which writes failed,
whether a multi-window write had started) and is :class:`Attempt`: the job that does the work,
the request, and those facts. Every verb's attempt has this shape; its three steps are the job's:

- ``run`` does the work and returns the success answer;
- ``on_fault`` hands the fault to the terminal arm (:class:`~rxmesh.mesh._arms.TerminalArm`),
  which classifies and answers;
- ``backstop`` answers a run that completed without an answer (a defect, never silence).

:func:`answer_once` drives an attempt for an observable caller, :func:`answer_now` for an
in-process ``await``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from loguru import logger
from reactivex import Observable, abc

from rxmesh._util.one_shot import OneShot as _OneShot
from rxmesh._util.one_shot import Subscribed as _Subscribed
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.operations import NodeResponse

__all__ = ["Attempt", "Work", "answer_now", "answer_once", "immediate"]

R = TypeVar("R", bound=NodeResponse)
R_co = TypeVar("R_co", bound=NodeResponse, covariant=True)


class Work(Protocol[R_co]):
    """What does an attempt's three steps (a :class:`~rxmesh.mesh._job.Job`)."""

    def run(self, request: Any, facts: Any) -> Awaitable[R_co]: ...

    def fault(self, request: Any, facts: Any, exc: BaseException) -> Awaitable[R_co]: ...

    def backstop(self, facts: Any) -> R_co: ...


class Attempt(Generic[R]):
    """One attempt of a node operation: its job, its request and its own facts.

    An operation waiting in an outage holds its attempt for as long as it waits, and the cyclic
    GC walks everything it holds in each full pass: so an attempt is three references, and each
    step hands the job's coroutine on rather than wrapping it in a frame of its own."""

    __slots__ = ("facts", "job", "request")

    def __init__(self, job: Work[R], request: Any, facts: Any) -> None:
        self.job = job
        self.request = request
        self.facts = facts

    def run(self) -> Awaitable[R]:
        """The work, to its success answer."""
        return self.job.run(self.request, self.facts)

    def on_fault(self, exc: BaseException) -> Awaitable[R]:
        """The answer to a fault of the work: the terminal arm's."""
        return self.job.fault(self.request, self.facts, exc)

    def backstop(self) -> R:
        """The answer of a run that completed without one."""
        return self.job.backstop(self.facts)


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
    the collector walks them all in each full pass."""

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
    # The steps are called through the attempt, not held as bound methods while they run: an
    # operation waiting in an outage holds as few objects as it can.
    steps = attempt()
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
            # of every frame it went through, freed only by the cyclic GC (for every UNAVAILABLE
            # answer). Dropped here, they go when the answer does.
            fault = None
        if response is None:
            response = steps.backstop()
        op.answered(_outcome(response))
        return response


class _Known(Generic[R]):
    """The work of an answer known before any store call: it is the answer, whatever happens."""

    __slots__ = ("response",)

    def __init__(self, response: R) -> None:
        self.response = response

    async def run(self, request: Any, facts: Any) -> R:
        return self.response

    async def fault(self, request: Any, facts: Any, exc: BaseException) -> R:
        return self.response

    def backstop(self, facts: Any) -> R:
        return self.response


def immediate(response: R, verb: str) -> Observable[R]:
    """An answer known before any store call (a refused request), with the same protocol."""
    return answer_once(
        functools.partial(Attempt, _Known(response), None, None), verb, response.request_id
    )
