"""The pending-write ledger: intents recorded by the create's unreachable arm (SPEC §5)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from loguru import logger
from reactivex import Observable, abc
from reactivex.subject import Subject

from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger._journal import Journal
from rxmesh.ledger._models import LedgerStatistics, PendingWrite, PendingWriteOutcome
from rxmesh.operations import Verdict

__all__ = ["JOURNAL_DIR_ENV", "PendingWriteHeldError", "PendingWriteLedger"]

JOURNAL_DIR_ENV = "RXMESH_PENDING_WRITES_DIR"
"""Environment variable naming the journal directory when the constructor is given none."""

_Key = tuple[str, str]  # (path, request_id)


class PendingWriteLedger:
    """Holds the creates the store could not be reached for, until each is re-issued once.

    One intent per path. A second record for the same path by the SAME requester replaces the
    first, and the replaced intent is settled at once (DROPPED, ``superseded_by`` naming the
    request that replaced it); another requester's record is refused with
    :class:`PendingWriteHeldError` while the first is outstanding. So every recorded intent gets
    exactly one verdict on :attr:`outcomes`. With a journal
    directory (argument, else env ``RXMESH_PENDING_WRITES_DIR``) every intent is also a file,
    written durably before :meth:`record` returns and deleted when the intent is settled; the
    constructor loads the intents a previous process left. Without one, intents live for the
    process. Thread-safe; :meth:`record` is synchronous (it may block briefly for ``fsync``).

    Args:
        journal_dir: a directory on a volume that is NOT the database, private to this user
            (created 0700 if missing; an existing group/world-writable or foreign-owned directory
            is refused with :class:`JournalError`). One process per directory. ``None`` reads
            ``RXMESH_PENDING_WRITES_DIR``; ``""`` means in memory whatever the environment says.

    Raises:
        JournalError: the directory is unsafe or cannot be prepared or read.
    """

    def __init__(self, journal_dir: str | os.PathLike[str] | None = None) -> None:
        if journal_dir is None:
            journal_dir = os.environ.get(JOURNAL_DIR_ENV) or None
        elif not os.fspath(journal_dir):
            journal_dir = None  # "" means in memory, whatever the environment says
        self._lock = threading.RLock()
        self._pending: dict[str, PendingWrite] = {}
        self._in_flight: dict[_Key, PendingWrite] = {}
        # path -> the newest outstanding intent (pending or in flight): it owns the path's file
        # and is the path's holder (another requester cannot record over it).
        self._newest: dict[str, PendingWrite] = {}
        self._subject: Subject[PendingWriteOutcome] = Subject()
        self._counts: dict[str, int] = {
            "loaded": 0,
            "recorded": 0,
            "replaced": 0,
            "taken": 0,
            "quarantined": 0,
            "superseded": 0,
            "held": 0,
            Verdict.LANDED: 0,
            Verdict.ALREADY_PRESENT: 0,
            Verdict.DROPPED: 0,
        }
        self._journal = None if journal_dir is None else Journal(journal_dir)
        if self._journal is not None:
            try:
                intents, quarantined = self._journal.load()
            except OSError as exc:
                self._journal.close()
                raise JournalError(
                    f"cannot read pending-write journal {str(self._journal.directory)!r}: {exc}",
                    path=str(self._journal.directory),
                ) from exc
            except BaseException:
                self._journal.close()
                raise
            for intent in intents:
                self._pending[intent.path] = intent
                self._newest[intent.path] = intent
            self._counts["loaded"] = len(intents)
            self._counts["quarantined"] = quarantined
            logger.bind(journal_dir=str(self._journal.directory)).info(
                "pending-write journal {} loaded: {} intent(s), {} quarantined",
                str(self._journal.directory),
                len(intents),
                quarantined,
            )

    def close(self) -> None:
        """Release the journal directory this ledger holds open; idempotent.

        Intents already journaled stay on disk for the next process. After closing, recording an
        intent durably fails with :class:`JournalError` (the mesh then answers that the write will
        not be re-issued). A ledger in memory has nothing to close.
        """
        if self._journal is not None:
            self._journal.close()

    @property
    def journal_dir(self) -> Path | None:
        """The journal directory, or ``None`` when intents live in memory only."""
        return None if self._journal is None else self._journal.directory

    @property
    def outcomes(self) -> Observable[PendingWriteOutcome]:
        """Hot stream of every settled intent's outcome (one per re-issue)."""
        subject = self._subject

        def subscribe(
            observer: abc.ObserverBase[PendingWriteOutcome],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            return subject.subscribe(observer, scheduler=scheduler)

        return Observable(subscribe)

    def journal_file(self, path: str) -> Path | None:
        """Where the intent for node ``path`` is (or would be) journaled; ``None`` in memory."""
        return None if self._journal is None else self._journal.file_for(path)

    def record(self, intent: PendingWrite) -> bool:
        """Record ``intent``, durably when there is a journal, before returning.

        The rules, per path (SPEC §5.1):

        - the very intent being re-issued (same path and request id, taken and not settled), or
          one already pending unchanged: nothing happens (a re-issue is never recorded again);
        - another requester's intent for the path is outstanding (pending or being re-issued):
          refused with :class:`PendingWriteHeldError`; the first one stands;
        - an earlier pending intent of the same requester with another request id: replaced
          (file and memory), and settled at once as DROPPED with ``superseded_by`` naming
          ``intent.request_id`` (published on :attr:`outcomes`).

        Returns:
            whether the intent was recorded (``False``: it is already pending or being re-issued).

        Raises:
            PendingWriteHeldError: another requester's intent for the path is outstanding.
            JournalError: the journal file could not be written; the intent is NOT recorded (and
                nothing it would have replaced was settled).
        """
        superseded: PendingWriteOutcome | None = None
        with self._lock:
            if (intent.path, intent.request_id) in self._in_flight:
                logger.bind(path=intent.path, request_id=intent.request_id).debug(
                    "pending write for {} is being re-issued; not recorded again", intent.path
                )
                return False
            previous = self._pending.get(intent.path)
            if previous == intent:
                return False
            holder = self._newest.get(intent.path)
            if holder is not None and holder.requester != intent.requester:
                self._counts["held"] += 1
                raise PendingWriteHeldError(
                    f"a pending write for {intent.path!r} by another requester (request "
                    f"{holder.request_id}) is outstanding; the intent of request "
                    f"{intent.request_id} is not recorded",
                    path=intent.path,
                    holder_request_id=holder.request_id,
                )
            if self._journal is not None:
                self._journal.write(intent)
            replaced = holder is not None
            self._pending[intent.path] = intent
            self._newest[intent.path] = intent
            self._counts["recorded"] += 1
            if replaced:
                self._counts["replaced"] += 1
            if previous is not None and previous.request_id != intent.request_id:
                superseded = self._supersede(previous, intent, "before it was re-issued")
        logger.bind(
            path=intent.path,
            requester=intent.requester,
            request_id=intent.request_id,
            journal_dir=None if self._journal is None else str(self._journal.directory),
        ).info(
            "pending write recorded for {} by {} ({}){}",
            intent.path,
            intent.requester,
            "durable" if self._journal is not None else "in memory",
            "; it replaces the earlier intent for that path" if replaced else "",
        )
        if superseded is not None:
            self._publish(superseded)
        return True

    def _supersede(self, old: PendingWrite, new: PendingWrite, when: str) -> PendingWriteOutcome:
        """Count ``old`` settled DROPPED, superseded by ``new`` (same requester and path); the
        caller publishes the outcome once it has left the lock."""
        self._counts["superseded"] += 1
        self._counts[Verdict.DROPPED] += 1
        return PendingWriteOutcome(
            intent=old,
            verdict=Verdict.DROPPED,
            detail=(
                f"superseded by request {new.request_id} of the same requester for the same "
                f"path, {when}; that request carries the write"
            ),
            superseded_by=new.request_id,
        )

    def take_all(self) -> list[PendingWrite]:
        """Take every pending intent out for re-issue (oldest first).

        Their journal files stay until :meth:`settle`: a crash between the two loses nothing
        (the next process re-issues them again; the request id makes that idempotent).
        """
        with self._lock:
            intents = sorted(self._pending.values(), key=lambda intent: intent.recorded_at)
            self._pending.clear()
            for intent in intents:
                self._in_flight[(intent.path, intent.request_id)] = intent
            self._counts["taken"] += len(intents)
        return intents

    def restore(self, intent: PendingWrite) -> bool:
        """Put a taken, unsettled intent back (its re-issue was abandoned, e.g. on dispose).

        Returns:
            ``True`` if it is pending again; ``False`` if it was not outstanding, or if a newer
            intent of the same requester was recorded for its path meanwhile: that one stands and
            this one is settled DROPPED, ``superseded_by`` naming it.
        """
        superseded: PendingWriteOutcome | None = None
        with self._lock:
            if self._in_flight.pop((intent.path, intent.request_id), None) is None:
                return False
            newest = self._newest.get(intent.path)
            if newest is None or newest.request_id == intent.request_id:
                self._pending[intent.path] = intent
                self._newest[intent.path] = intent
                return True
            superseded = self._supersede(intent, newest, "while its re-issue was abandoned")
        self._publish(superseded)
        return False

    def settle(self, intent: PendingWrite, outcome: PendingWriteOutcome) -> None:
        """Settle ``intent`` with ``outcome``: delete its file, publish and log the verdict.

        The file is deleted only if it still holds this intent (a newer record for the same
        path, with another request id, keeps its file).

        Raises:
            ValueError: ``outcome`` is not about ``intent``, or ``intent`` is neither taken nor
                pending (settled already).
            JournalError: the file could not be deleted (the outcome is still published; the
                next process will re-issue the intent again).
        """
        self._settle(intent, outcome, strict=True)

    def settle_if_outstanding(self, intent: PendingWrite, outcome: PendingWriteOutcome) -> bool:
        """:meth:`settle` ``intent`` unless it was settled already (by whoever got there first:
        its re-issue, or an answer to the caller's own re-issue of the same request).

        Returns:
            whether this call settled it.

        Raises:
            JournalError: as :meth:`settle` (the outcome is published all the same).
        """
        return self._settle(intent, outcome, strict=False)

    def _settle(self, intent: PendingWrite, outcome: PendingWriteOutcome, *, strict: bool) -> bool:
        if outcome.intent != intent:
            raise ValueError("the outcome is not about the intent being settled")
        key = (intent.path, intent.request_id)
        failure: JournalError | None = None
        with self._lock:
            if self._in_flight.pop(key, None) is None:
                pending = self._pending.get(intent.path)
                if pending is None or pending.request_id != intent.request_id:
                    if not strict:
                        return False
                    raise ValueError(
                        f"pending write for {intent.path!r} (request {intent.request_id}) is not "
                        "outstanding; it was settled already or never recorded"
                    )
                del self._pending[intent.path]
            newest = self._newest.get(intent.path)
            owns_file = newest is not None and newest.request_id == intent.request_id
            if owns_file:
                del self._newest[intent.path]
                if self._journal is not None:
                    # Under the lock: a record for this path must not land between the check
                    # and the unlink (its new file would be deleted).
                    try:
                        self._journal.remove(intent.path)
                    except JournalError as exc:
                        failure = exc
            self._counts[outcome.verdict] += 1
        self._publish(outcome)  # outside the lock: subscribers may call back into the ledger
        if failure is not None:
            logger.bind(path=intent.path).opt(exception=failure).error(
                "pending write for {} settled {} but its journal file could not be deleted; "
                "the next process will re-issue it again",
                intent.path,
                outcome.verdict.value,
            )
            raise failure
        return True

    def outstanding(self, path: str, request_id: str) -> PendingWrite | None:
        """The intent of request ``request_id`` for node ``path`` if it is outstanding (pending,
        or taken for re-issue and not settled), else ``None``."""
        with self._lock:
            taken = self._in_flight.get((path, request_id))
            if taken is not None:
                return taken
            pending = self._pending.get(path)
            return pending if pending is not None and pending.request_id == request_id else None

    def _publish(self, outcome: PendingWriteOutcome) -> None:
        intent = outcome.intent
        bound = logger.bind(
            path=intent.path,
            requester=intent.requester,
            request_id=intent.request_id,
            verdict=outcome.verdict.value,
            reason=None if outcome.reason is None else outcome.reason.value,
            superseded_by=outcome.superseded_by,
        )
        if outcome.superseded_by is not None:
            bound.info(
                "pending write for {} by {} (request {}) settled DROPPED: superseded by request "
                "{} of the same requester, which carries the write",
                intent.path,
                intent.requester,
                intent.request_id,
                outcome.superseded_by,
            )
        elif outcome.verdict is Verdict.DROPPED:
            bound.warning(
                "pending write for {} by {} DROPPED: the re-issue was refused ({}): {}",
                intent.path,
                intent.requester,
                outcome.reason.value if outcome.reason is not None else "no reason",
                outcome.detail,
            )
        else:
            bound.info(
                "pending write for {} by {} settled {}",
                intent.path,
                intent.requester,
                outcome.verdict.value,
            )
        self._subject.on_next(outcome)

    def pending(self) -> tuple[PendingWrite, ...]:
        """The intents recorded and not yet taken, oldest first."""
        with self._lock:
            return tuple(sorted(self._pending.values(), key=lambda intent: intent.recorded_at))

    def in_flight(self) -> tuple[PendingWrite, ...]:
        """The intents taken for re-issue and not yet settled."""
        with self._lock:
            return tuple(self._in_flight.values())

    def statistics(self) -> LedgerStatistics:
        """A frozen snapshot of the ledger's figures."""
        with self._lock:
            counts = dict(self._counts)
            return LedgerStatistics(
                journal_dir=None if self._journal is None else str(self._journal.directory),
                pending=len(self._pending),
                in_flight=len(self._in_flight),
                loaded=counts["loaded"],
                recorded=counts["recorded"],
                replaced=counts["replaced"],
                taken=counts["taken"],
                landed=counts[Verdict.LANDED],
                already_present=counts[Verdict.ALREADY_PRESENT],
                dropped=counts[Verdict.DROPPED],
                quarantined=counts["quarantined"],
                superseded=counts["superseded"],
                held=counts["held"],
            )

    def __repr__(self) -> str:
        where = "memory" if self._journal is None else str(self._journal.directory)
        return f"PendingWriteLedger({where!r}, pending={len(self._pending)})"
