"""The pending-write ledger: intents recorded by the create's unreachable arm."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from loguru import logger
from reactivex import Observable, abc

from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger._bound import DEFAULT_DURABLE_TIMEOUT, BoundedLedger
from rxmesh.ledger._core import _NOTHING, Format, RecordResult
from rxmesh.ledger._journal import Journal
from rxmesh.ledger._log import Log
from rxmesh.ledger._models import (
    LedgerStatistics,
    PendingWrite,
    PendingWriteOutcome,
    statistics_from,
)
from rxmesh.ledger._publish import count_recorded, log_recorded
from rxmesh.ledger._writer import Writer

__all__ = ["JOURNAL_DIR_ENV", "PendingWriteHeldError", "PendingWriteLedger", "RecordResult"]

JOURNAL_DIR_ENV = "RXMESH_PENDING_WRITES_DIR"
"""Environment variable naming the journal directory when the constructor is given none."""


class PendingWriteLedger(BoundedLedger):
    """Holds the creates the store could not be reached for, until each is re-issued once.

    One intent per path. A second record for the same path by the same requester replaces the
    first, and the replaced intent is settled at once (DROPPED, ``superseded_by`` naming the
    request that replaced it); another requester's record is refused with
    :class:`PendingWriteHeldError` while the first is outstanding. So every recorded intent gets
    exactly one verdict on :attr:`outcomes`. With a journal directory (argument, else env
    ``RXMESH_PENDING_WRITES_DIR``) every intent is also written durably before its record
    returns, and removed when the intent is settled; the constructor loads the intents a previous
    process left (both formats, see docs/pending-writes.md). Without one, intents live for the
    process. Thread-safe.

    Two ways to record:

    - ``await`` :meth:`record_durably` / :meth:`record_many_durably` (from a coroutine): the
      durable step runs on the journal's writer thread, and concurrent records share one
      ``fdatasync`` of the log (group commit); the event loop is never blocked by the disk.
    - :meth:`record` (synchronous, any thread): blocks its caller for the durable step (one file
      per intent, two ``fsync``\\ s, written by the writer thread).

    A durable step counts only within ``durable_timeout`` and in the directory at the journal's
    path (not deleted, not moved away); otherwise the record is not recorded
    (:class:`JournalError`), a late step is taken back, and :attr:`journal_fault` says why.

    Call :meth:`close` when done with a journaled ledger: it commits what is queued, stops the
    writer thread and releases the directory (a ledger never closed leaves no thread for long and
    never holds up interpreter exit).

    Args:
        journal_dir: a directory on a volume that is not the database, private to this user
            (created 0700 if missing; an existing group/world-writable or foreign-owned directory
            is refused with :class:`JournalError`). One process per directory. ``None`` reads
            ``RXMESH_PENDING_WRITES_DIR``; ``""`` means in memory whatever the environment says.
        durable_timeout: seconds a record waits for its durable step (a journal on a disk or
            file system that stopped answering: a frozen or hung mount) before it is answered
            not recorded. Default :data:`DEFAULT_DURABLE_TIMEOUT` (2 s).

    Raises:
        JournalError: the directory is unsafe or cannot be prepared or read.
        ValueError: ``durable_timeout`` is not a positive number of seconds.
    """

    def __init__(
        self,
        journal_dir: str | os.PathLike[str] | None = None,
        *,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
    ) -> None:
        super().__init__(durable_timeout)
        if journal_dir is None:
            journal_dir = os.environ.get(JOURNAL_DIR_ENV) or None
        elif not os.fspath(journal_dir):
            journal_dir = None  # "" means in memory, whatever the environment says
        if journal_dir is None:
            return
        journal = self._journal = Journal(journal_dir)
        try:
            self._load(journal)
        except OSError as exc:
            journal.close()
            raise JournalError(
                f"cannot read pending-write journal {str(journal.directory)!r}: {exc}",
                path=str(journal.directory),
            ) from exc
        except BaseException:
            journal.close()
            raise

    def _load(self, journal: Journal) -> None:
        files, quarantined = journal.load()
        log = self._log = Log(journal)
        logged, log_quarantined = log.load()
        loaded: dict[str, tuple[PendingWrite, Format]] = {i.key: (i, "file") for i in files}
        dropped: set[str] = set()
        for intent in logged:
            other = loaded.get(intent.key)
            # Both formats hold the path only after a crash mid-way; the newer intent wins.
            if other is not None and other[0].order >= intent.order:
                dropped.add(intent.key)
                continue
            if other is not None:
                journal.remove(intent.key)
            loaded[intent.key] = (intent, "log")
        if log.has_segments or dropped:
            log.rewrite(dropped)  # one fresh snapshot segment; the old ones are deleted
        for intent, fmt in sorted(loaded.values(), key=lambda entry: entry[0].order):
            self._numbering.last = max(self._numbering.last, intent.sequence)
            self._pending[intent.key] = intent
            self._newest[intent.key] = intent
            self._format[intent.key] = fmt
        self._counts["loaded"] = len(loaded)
        self._counts["quarantined"] = quarantined + log_quarantined
        self._writer = Writer(journal, log, self._complete, self._take_back)
        logger.bind(journal_dir=str(journal.directory)).info(
            "pending-write journal {} loaded: {} intent(s) ({} from the log), {} quarantined",
            str(journal.directory),
            len(loaded),
            sum(1 for _, fmt in loaded.values() if fmt == "log"),
            quarantined + log_quarantined,
        )

    def close(self) -> None:
        """Commit what is queued, stop the writer thread, release the directory; idempotent.

        Intents already journaled stay on disk for the next process. After closing, recording an
        intent durably fails with :class:`JournalError` (the mesh then answers that the write will
        not be re-issued). A ledger in memory has nothing to close.
        """
        with self._lock:
            for ticket in list(self._open):  # a bulk being decided: it records nothing
                self._abandon(ticket, self._closed_error())
            self._closed = True
        if self._writer is not None:
            self._writer.close()  # not under the lock: the thread takes it to complete tickets
        if self._log is not None:
            self._log.close()
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
        """Where the intent for node ``path`` is (or would be) journaled: its own file (format 1)
        or the log segment holding it (format 2); ``None`` in memory."""
        if self._journal is None:
            return None
        segment = self._log.segment if self._log is not None else None
        if self._format.get(path) == "log" and segment is not None:
            return segment
        return self._journal.file_for(path)

    def record(self, intent: PendingWrite) -> bool:
        """Record ``intent``, durably when there is a journal, before returning (blocking).

        The rules, per path:

        - the very intent being re-issued (same path and request id, taken and not settled), or
          one already pending unchanged: nothing happens (a re-issue is never recorded again);
        - another requester's intent for the path is outstanding (pending, being re-issued, or
          being recorded): refused with :class:`PendingWriteHeldError`; the first one stands;
        - an earlier pending intent of the same requester with another request id: replaced
          (file and memory), and settled at once as DROPPED with ``superseded_by`` naming
          ``intent.request_id`` (published on :attr:`outcomes`).

        A new path gets its own journal file (format 1): temp file, ``fsync``, rename, ``fsync``
        of the directory; a path whose intent is in the log gets a log entry. Either is written
        by the writer thread, so one path's durable steps stay in order, while the caller waits
        at most ``durable_timeout`` seconds.

        Returns:
            whether the intent was recorded (``False``: it is already pending or being re-issued).

        Raises:
            PendingWriteHeldError: another requester's intent for the path is outstanding.
            JournalError: the journal file could not be written, was written to a directory that
                is no longer the journal's path, or not within ``durable_timeout``: the intent is
                not recorded (and nothing it would have replaced was settled).
        """
        superseded: PendingWriteOutcome | None = None
        with self._lock:
            holder = self._decide(intent)
            if holder is _NOTHING:
                return False
            assert holder is None or isinstance(holder, PendingWrite)
            # With a journal, the writer thread writes it: the caller's wait can then be bounded.
            direct = self._journal is None
            if direct:
                intent = self._numbering.number(intent)
                previous = self._pending.get(intent.key)
                self._pending[intent.key] = intent
                self._newest[intent.key] = intent
                count_recorded(self._counts, intent)
                if holder is not None:
                    self._counts["replaced"] += 1
                if previous is not None and previous.request_id != intent.request_id:
                    superseded = self._supersede(previous, intent, "before it was re-issued")
            else:
                self._seal_open()  # never wait behind a bulk this thread's loop is deciding
                ticket = self._submit([intent], fmt_for_new="file", loop=None)
        if direct:
            where = None if self._journal is None else str(self._journal.directory)
            log_recorded(intent, holder is not None, where)
            if superseded is not None:
                self._publish(superseded)
            return True
        (result,), outcomes = self._wait_bounded(ticket)
        self._publish_all(outcomes)
        if not isinstance(result, bool):
            raise result
        return result

    async def record_durably(self, intent: PendingWrite) -> bool:
        """Record ``intent``; return once it is durable (or in memory, without a journal).

        The same rules as :meth:`record`, decided when this is called, before anything is
        written: two concurrent records of one path resolve as two sequential ones. The durable
        step is an entry in the journal's log, committed by the writer thread in one group with
        every record made meanwhile (one ``fdatasync`` for all of them). The event loop is never
        blocked by the disk. An outcome of an intent it replaced is published on the loop before
        this returns. Cancelling the caller does not undo the record.

        Returns:
            ``True`` once the intent is durable; ``False`` if it was already pending unchanged or
            is being re-issued (nothing written).

        Raises:
            PendingWriteHeldError: another requester's intent for the path is outstanding
                (raised before anything is written).
            JournalError: the intent cannot be encoded (raised before anything is written), the
                ledger is closed, or the log could not be made durable in the journal's directory
                within ``durable_timeout``: the intent is not recorded (and nothing it would have
                replaced was settled).
        """
        if self._journal is None:  # in memory: nothing to wait for
            return self.record(intent)
        (result,) = await self._record_journaled([intent], bulk=False)
        if not isinstance(result, bool):
            raise result
        return result

    async def record_many_durably(self, intents: Iterable[PendingWrite]) -> list[RecordResult]:
        """Record every intent of a bulk in one durable step; one result per intent, in order.

        Each intent is decided as :meth:`record_durably` decides it, in order, before anything
        is written; every admitted one is encoded as it is decided (250 a loop step; the writer
        thread only writes) and appended to the log in the same group, with one ``fdatasync``.

        Returns:
            per intent: ``True`` (recorded, durable), ``False`` (already pending unchanged or
            being re-issued), or the exception that says why it is not recorded:
            :class:`PendingWriteHeldError` (another requester holds the path) or
            :class:`JournalError` (it cannot be encoded, or the group could not be made durable).

        Raises:
            JournalError: the ledger is closed (nothing recorded).
        """
        if self._journal is not None:
            return await self._record_journaled(list(intents), bulk=True)
        results: list[RecordResult] = []
        for intent in intents:  # in memory: nothing to wait for
            try:
                results.append(self.record(intent))
            except PendingWriteHeldError as exc:
                results.append(exc)
        return results

    def take_all(self) -> list[PendingWrite]:
        """Take every pending intent out for re-issue, in the order they were recorded.

        Their journal files stay until :meth:`settle`: a crash between the two loses nothing
        (the next process re-issues them again; the request id makes that idempotent).
        """
        with self._lock:
            intents = sorted(self._pending.values(), key=lambda intent: intent.order)
            self._pending.clear()
            for intent in intents:
                self._in_flight[(intent.key, intent.request_id)] = intent
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
            if self._in_flight.pop((intent.key, intent.request_id), None) is None:
                return False
            newest = self._newest.get(intent.key)
            reserved = intent.key in self._reserving  # a record not yet durable: not newer yet
            if newest is None or newest.request_id == intent.request_id or reserved:
                self._pending[intent.key] = intent
                if not reserved:
                    self._newest[intent.key] = intent
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
        key = (intent.key, intent.request_id)
        failure: JournalError | None = None
        with self._lock:
            if self._in_flight.pop(key, None) is None:
                pending = self._pending.get(intent.key)
                if pending is None or pending.request_id != intent.request_id:
                    if not strict:
                        return False
                    raise ValueError(
                        f"pending write for {intent.key!r} (request {intent.request_id}) is not "
                        "outstanding; it was settled already or never recorded"
                    )
                del self._pending[intent.key]
            newest = self._newest.get(intent.key)
            owns_file = (
                newest is not None
                and newest.request_id == intent.request_id
                and intent.key not in self._reserving  # else that record's step decides
            )
            if owns_file:
                del self._newest[intent.key]
                fmt = self._format.pop(intent.key, "file")
                if self._journal is not None and fmt == "file":
                    # Under the lock: a record for this path must not land between the check
                    # and the unlink (its new file would be deleted).
                    try:
                        self._journal.remove(intent.key)
                    except JournalError as exc:
                        failure = exc
                elif self._journal is not None:
                    self._remove_logged(intent.key)
            self._counts[outcome.verdict] += 1
        self._publish(outcome)  # outside the lock: subscribers may call back into the ledger
        if failure is not None:
            logger.bind(path=intent.key).opt(exception=failure).error(
                "pending write for {} settled {} but its journal file could not be deleted; "
                "the next process will re-issue it again",
                intent.key,
                outcome.verdict.value,
            )
            raise failure
        return True

    def outstanding(self, path: str, request_id: str) -> PendingWrite | None:
        """The intent of request ``request_id`` with key ``path`` (a create's: its node's path;
        another verb's: ``"<path> <verb>"``, :attr:`PendingWrite.key`) if it is outstanding
        (pending, or taken for re-issue and not settled), else ``None``."""
        with self._lock:
            taken = self._in_flight.get((path, request_id))
            if taken is not None:
                return taken
            pending = self._pending.get(path)
            return pending if pending is not None and pending.request_id == request_id else None

    def anything_outstanding(self) -> bool:
        """Whether any intent an answer could settle here is outstanding: a cheap test before
        building a per-node answer for every node of a large bulk."""
        with self._lock:
            return bool(self._pending or self._in_flight)

    def pending(self) -> tuple[PendingWrite, ...]:
        """The intents recorded and not yet taken, in the order they were recorded."""
        with self._lock:
            return tuple(sorted(self._pending.values(), key=lambda intent: intent.order))

    def in_flight(self) -> tuple[PendingWrite, ...]:
        """The intents taken for re-issue and not yet settled."""
        with self._lock:
            return tuple(self._in_flight.values())

    def statistics(self) -> LedgerStatistics:
        """A frozen snapshot of the ledger's figures."""
        with self._lock:
            common = statistics_from(
                self._counts,
                journal_dir=None if self._journal is None else str(self._journal.directory),
                pending=len(self._pending),
                in_flight=len(self._in_flight),
            )
            return replace(
                common,
                group_commits=0 if self._writer is None else self._writer.groups,
                durable_timeouts=self._timeouts,
                journal_fault=self.journal_fault,
                journal_lost=self.journal_lost,
            )

    def __repr__(self) -> str:
        where = "memory" if self._journal is None else str(self._journal.directory)
        return f"PendingWriteLedger({where!r}, pending={len(self._pending)})"
