"""Re-issue pending writes when the store shows it answers again, once each."""

from __future__ import annotations

import functools
import threading
from types import TracebackType
from typing import Protocol

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable

from rxmesh.aio import from_async
from rxmesh.exceptions import MeshDisposedError
from rxmesh.ledger._jetstream import JetStreamLedger
from rxmesh.ledger._journal import JournalError
from rxmesh.ledger._ledger import PendingWriteLedger
from rxmesh.ledger._models import PendingWrite, PendingWriteOutcome
from rxmesh.ledger._order import PathOrder
from rxmesh.ledger._publish import reissued
from rxmesh.ledger._verbs import Answer, VerbMesh, confirm_path, confirmed, outcome_of
from rxmesh.ledger._verbs import reissue as reissue_of
from rxmesh.model import MeshNode, StoreEvidence
from rxmesh.operations import RejectionReason, Verdict

__all__ = [
    "DEFAULT_MAX_CONCURRENT_REISSUES",
    "EvidenceSource",
    "PendingWriteRecovery",
    "ReissuingMesh",
    "outcome_of",
]

DEFAULT_MAX_CONCURRENT_REISSUES = 32
"""Re-issues in flight at once. A burst of thousands would exhaust a connection pool, and an
exhausted pool answers UNAVAILABLE, which would drop intents the store could have taken."""


class EvidenceSource(Protocol):
    """What the recovery needs of a store: its "answers again" evidence, and one read to confirm
    a re-issue whose outcome its own answer could not know."""

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """Hot stream of declared change-feed gaps and announced commits."""
        ...

    async def read(self, path: str) -> MeshNode | None:
        """The node at ``path``, or ``None`` for a clean absence."""
        ...


class ReissuingMesh(VerbMesh, Protocol):
    """What the recovery needs of a mesh: its store's evidence and its single verbs."""

    @property
    def store(self) -> EvidenceSource:
        """The mesh's store."""
        ...


class _Reissue:
    __slots__ = ("answered", "disposable", "intent")

    def __init__(self, intent: PendingWrite) -> None:
        self.intent = intent
        self.answered = False
        self.disposable: abc.DisposableBase = Disposable()


class PendingWriteRecovery:
    """Re-issues every pending intent when the store's ``answers_again`` evidence arrives.

    Each piece of evidence (a declared change-feed gap, an announced commit) takes every pending
    intent out of the ledger and re-issues it through the mesh's verb that recorded it
    (``create_node``, ``update_node``, ``delete_node``, ``move_node``) with its original node,
    AccessContext, request id and basis, marked ``reissued_after_unavailable``. Each settles as
    exactly one verdict on ``ledger.outcomes``. No timer, no poll: while the store stays away
    nothing arrives and nothing is re-issued. Intents taken are not taken again by evidence that
    arrives while they are in flight. The intents of one path (a move's: its source's and its
    target's) are re-issued one after another, in the order they were recorded (the ledger's
    sequence, never a wall clock): a delete and a create of one path land as they were asked.
    Different paths are re-issued concurrently.

    Args:
        mesh: the mesh (its ``store.answers_again`` and ``create_node``).
        ledger: the ledger the mesh records into.
        max_concurrent: re-issues in flight at once, over all paths (the rest queue).
        scheduler: passed to each re-issue's subscription.

    Example::

        with PendingWriteRecovery(mesh, mesh.ledger):
            ...  # serve
    """

    def __init__(
        self,
        mesh: ReissuingMesh,
        ledger: PendingWriteLedger,
        *,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT_REISSUES,
        scheduler: abc.SchedulerBase | None = None,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, not {max_concurrent}")
        self._mesh = mesh
        self._ledger = ledger
        self._max_concurrent = max_concurrent
        self._scheduler = scheduler
        self._lock = threading.RLock()
        # Per path, its taken intents in the order they were recorded: only the head of every
        # chain it is in (a move: its source's and its target's) may run. Different paths run
        # concurrently, up to max_concurrent.
        self._order = PathOrder()
        self._active: dict[int, _Reissue] = {}
        self._pumping = False
        self._started = False
        self._disposed = False
        self._evidence: abc.DisposableBase = Disposable()
        self._settlements: abc.DisposableBase = Disposable()
        self._failure: BaseException | None = None

    @property
    def ledger(self) -> PendingWriteLedger:
        """The ledger this recovery settles into."""
        return self._ledger

    @property
    def reissuing(self) -> int:
        """Intents taken and not settled yet (in flight or queued)."""
        with self._lock:
            return len(self._active) + self._order.queued

    @property
    def failure(self) -> BaseException | None:
        """The error the evidence stream ended with, if it did (then nothing is re-issued)."""
        return self._failure

    def start(self) -> PendingWriteRecovery:
        """Arm the recovery: subscribe to the store's evidence. Idempotent."""
        with self._lock:
            if self._disposed:
                raise MeshDisposedError("this PendingWriteRecovery was disposed")
            if self._started:
                return self
            self._started = True
        settlements = self._ledger.outcomes.subscribe(self._on_settled)
        subscription: abc.DisposableBase = self._mesh.store.answers_again.subscribe(
            on_next=self._on_evidence, on_error=self._on_evidence_error
        )
        if isinstance(self._ledger, JetStreamLedger):  # intents taken over from a dead replica
            subscription = CompositeDisposable(
                subscription, self._ledger.adopted.subscribe(self._on_adopted)
            )
        with self._lock:
            if self._disposed:
                subscription.dispose()
                settlements.dispose()
            else:
                self._evidence = subscription
                self._settlements = settlements
        return self

    def dispose(self) -> None:
        """Disarm: stop listening, cancel re-issues in flight and put their intents back."""
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            evidence = self._evidence
            self._settlements.dispose()
            abandoned = list(self._active.values())
            queued = self._order.clear([reissue.intent for reissue in abandoned])
            self._active.clear()
        evidence.dispose()
        for reissue in abandoned:
            reissue.disposable.dispose()
        for intent in [r.intent for r in abandoned] + queued:
            self._ledger.restore(intent)
        if abandoned or queued:
            logger.info(
                "pending-write recovery disposed; {} re-issue(s) abandoned and put back",
                len(abandoned) + len(queued),
            )

    def __enter__(self) -> PendingWriteRecovery:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.dispose()

    def _on_evidence(self, evidence: StoreEvidence) -> None:
        count = self._take_all()
        if count:
            logger.bind(evidence=type(evidence).__name__, source=evidence.source).info(
                "store {} answers again ({}); re-issuing {} pending write(s)",
                evidence.source,
                type(evidence).__name__,
                count,
            )
            self._pump()

    def _on_adopted(self, count: int) -> None:
        """A shared journal took over a dead replica's intents while this replica's store
        answers: that is the current evidence, so they are re-issued now, not on a commit that
        may never come."""
        if taken := self._take_all():
            logger.info("re-issuing {} pending write(s) taken over from a dead replica", taken)
            self._pump()

    def _take_all(self) -> int:
        """Every pending intent taken for re-issue, queued in its path's order; how many."""
        with self._lock:
            if self._disposed:
                return 0
            intents = self._ledger.take_all()
            for intent in intents:
                self._order.add(intent)
        return len(intents)

    def _on_settled(self, outcome: PendingWriteOutcome) -> None:
        """An intent was settled. If it was not by its own re-issue (the caller's own re-issue of
        the request was answered first), call that re-issue off: its work is done, and going on
        could create again a node the caller has deleted since."""
        intent = outcome.intent
        with self._lock:
            stale = [
                reissue
                for reissue in self._active.values()
                if not reissue.answered
                and (reissue.intent.key, reissue.intent.request_id)
                == (intent.key, intent.request_id)
            ]
        for reissue in stale:
            if self._claim(reissue):
                reissue.disposable.dispose()
                logger.bind(path=intent.path, request_id=intent.request_id).debug(
                    "re-issue of pending write for {} called off: it was settled {} meanwhile",
                    intent.path,
                    outcome.verdict.value,
                )
                self._pump()

    def _on_evidence_error(self, error: Exception) -> None:
        self._failure = error
        logger.opt(exception=error).error(
            "the store's answers-again evidence stream failed ({}: {}); pending writes will "
            "not be re-issued by this recovery",
            type(error).__name__,
            error,
        )

    def _pump(self) -> None:
        """Start queued re-issues up to the limit; re-entrant calls fold into the running loop."""
        with self._lock:
            if self._pumping:
                return
            self._pumping = True
        try:
            while True:
                with self._lock:
                    if (
                        self._disposed
                        or not self._order.ready
                        or len(self._active) >= self._max_concurrent
                    ):
                        self._pumping = False
                        return
                    intent = self._order.take()
                    if self._ledger.outstanding(intent.key, intent.request_id) != intent:
                        self._order.release(intent)
                        continue  # settled while queued (the caller's own re-issue was answered)
                    reissue = _Reissue(intent)
                    self._active[id(reissue)] = reissue
                self._start(reissue)
        except BaseException:
            with self._lock:
                self._pumping = False
            raise

    def _start(self, reissue: _Reissue) -> None:
        intent = reissue.intent
        reissued(intent)
        confirming = False

        def on_next(response: Answer) -> None:
            nonlocal confirming
            if response.outcome_unknown and not response.success:
                confirming = True  # the write may have landed: one read says which
                self._confirm(reissue, response)
                return
            self._finish(reissue, outcome_of(intent, response))

        def on_error(error: Exception) -> None:
            if isinstance(error, MeshDisposedError):
                self._abandon(reissue, error)
                return
            bound = logger.bind(path=intent.path, request_id=intent.request_id)
            bound.opt(exception=error).error(
                "re-issue of pending write for {} failed instead of answering ({}: {})",
                intent.path,
                type(error).__name__,
                error,
            )
            self._drop(reissue, f"Unexpected error: {type(error).__name__}: {error}")

        def on_completed() -> None:
            if confirming:
                return
            self._drop(reissue, "the re-issue completed without an answer")

        try:
            source = reissue_of(self._mesh, intent)
        except MeshDisposedError as error:
            self._abandon(reissue, error)
            return
        disposable = source.subscribe(on_next, on_error, on_completed, scheduler=self._scheduler)
        with self._lock:
            if reissue.answered:
                done = True
            else:
                reissue.disposable = disposable
                done = False
        if done:
            disposable.dispose()

    def _drop(
        self,
        reissue: _Reissue,
        detail: str,
        reason: RejectionReason = RejectionReason.UNKNOWN,
    ) -> None:
        """Settle ``reissue`` DROPPED: the re-issue ended without a verdict to record."""
        self._finish(
            reissue,
            PendingWriteOutcome(
                intent=reissue.intent, verdict=Verdict.DROPPED, reason=reason, detail=detail
            ),
        )

    def _confirm(self, reissue: _Reissue, response: Answer) -> None:
        """Settle a re-issue whose write may have landed by one read (no retry): of its path, or
        a move's target (:func:`~rxmesh.ledger._verbs.confirmed` says which verdict the row
        means); a read that fails is DROPPED with the answer's reason."""
        intent = reissue.intent

        def settle(row: MeshNode | None) -> None:
            self._finish(reissue, confirmed(intent, response, row))

        def failed(error: Exception) -> None:
            self._drop(
                reissue,
                f"{response.error or ''} Its outcome could not be confirmed: the read failed "
                f"({type(error).__name__}: {error}).",
                response.rejection_reason or RejectionReason.UNKNOWN,
            )

        read = functools.partial(self._mesh.store.read, confirm_path(intent))
        from_async(read).subscribe(settle, failed, scheduler=self._scheduler)

    def _claim(self, reissue: _Reissue) -> bool:
        """Mark ``reissue`` answered; ``False`` if it was answered already or abandoned."""
        with self._lock:
            if reissue.answered or self._active.pop(id(reissue), None) is None:
                return False
            reissue.answered = True
            self._order.release(reissue.intent)
            return True

    def _finish(self, reissue: _Reissue, outcome: PendingWriteOutcome) -> None:
        if not self._claim(reissue):
            return
        reissue.disposable.dispose()
        try:
            if not self._ledger.settle_if_outstanding(reissue.intent, outcome):
                logger.bind(path=reissue.intent.path).debug(
                    "re-issue of pending write for {} answered {} after its intent was settled "
                    "by the caller's own answer; nothing more to settle",
                    reissue.intent.path,
                    outcome.verdict.value,
                )
        except JournalError:
            # settle() published the verdict and logged the failed delete at ERROR with the
            # exception; raising into the mesh's answer stream would only break that stream.
            pass
        finally:
            self._pump()

    def _abandon(self, reissue: _Reissue, error: MeshDisposedError) -> None:
        if not self._claim(reissue):
            return
        self._ledger.restore(reissue.intent)
        logger.bind(path=reissue.intent.path).warning(
            "re-issue of pending write for {} abandoned: {}; the intent stays in the ledger",
            reissue.intent.path,
            error,
        )
