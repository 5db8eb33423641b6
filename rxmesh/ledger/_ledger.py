"""The pending-write ledger: intents recorded by the create's unreachable arm (SPEC §5)."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path

from loguru import logger
from reactivex import Observable, abc

from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger._core import _NOTHING, Format, LedgerCore, RecordResult, _Record
from rxmesh.ledger._journal import Journal
from rxmesh.ledger._log import Log, encode_put
from rxmesh.ledger._models import LedgerStatistics, PendingWrite, PendingWriteOutcome
from rxmesh.ledger._publish import count_recorded, log_recorded
from rxmesh.ledger._writer import Ticket, Writer
from rxmesh.operations import Verdict

__all__ = [
    "DEFAULT_DURABLE_TIMEOUT",
    "JOURNAL_DIR_ENV",
    "PendingWriteHeldError",
    "PendingWriteLedger",
    "RecordResult",
]

JOURNAL_DIR_ENV = "RXMESH_PENDING_WRITES_DIR"
"""Environment variable naming the journal directory when the constructor is given none."""

DEFAULT_DURABLE_TIMEOUT = 2.0
"""Seconds a record waits for its durable step before it is answered NOT recorded."""


class PendingWriteLedger(LedgerCore):
    """Holds the creates the store could not be reached for, until each is re-issued once.

    One intent per path. A second record for the same path by the SAME requester replaces the
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

    A durable step counts only if it returned within ``durable_timeout`` seconds AND the
    directory it wrote to is still the directory at the journal's path (not deleted, not moved
    away). Otherwise the record raises (or, in a bulk, returns) :class:`JournalError`: the intent
    is NOT recorded, nothing it would have replaced is settled, and if the late step ever
    completes what it wrote is taken back, so no process re-issues it. :attr:`journal_fault`
    (and health, :class:`rxmesh.health.PendingWritesCheck`) says why meanwhile.

    Call :meth:`close` when done with a journaled ledger: it commits what is queued, stops the
    writer thread and releases the directory (a ledger never closed leaves no thread for long and
    never holds up interpreter exit).

    Args:
        journal_dir: a directory on a volume that is NOT the database, private to this user
            (created 0700 if missing; an existing group/world-writable or foreign-owned directory
            is refused with :class:`JournalError`). One process per directory. ``None`` reads
            ``RXMESH_PENDING_WRITES_DIR``; ``""`` means in memory whatever the environment says.
        durable_timeout: seconds a record waits for its durable step (a journal on a disk or
            file system that stopped answering: a frozen or hung mount) before it is answered
            NOT recorded. Default :data:`DEFAULT_DURABLE_TIMEOUT` (2 s).

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
        super().__init__()
        if not (isinstance(durable_timeout, int | float) and 0 < durable_timeout < math.inf):
            raise ValueError(
                f"durable_timeout must be a positive number of seconds, got {durable_timeout!r}"
            )
        self._durable_timeout = float(durable_timeout)
        self._timeouts = 0
        self._expired_at_step: int | None = None  # writer.steps when a record last expired
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
            if other is not None and other[0].recorded_at >= intent.recorded_at:
                dropped.add(intent.key)
                continue
            if other is not None:
                journal.remove(intent.key)
            loaded[intent.key] = (intent, "log")
        if log.has_segments or dropped:
            log.rewrite(dropped)  # one fresh snapshot segment; the old ones are deleted
        for intent, fmt in sorted(loaded.values(), key=lambda entry: entry[0].recorded_at):
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

        The rules, per path (SPEC §5.1):

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
                NOT recorded (and nothing it would have replaced was settled).
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
                within ``durable_timeout``: the intent is NOT recorded (and nothing it would have
                replaced was settled).
        """
        (result,) = await self._record_async([intent], bulk=False)
        if not isinstance(result, bool):
            raise result
        return result

    async def record_many_durably(self, intents: Iterable[PendingWrite]) -> list[RecordResult]:
        """Record every intent of a bulk in ONE durable step; one result per intent, in order.

        Each intent is decided as :meth:`record_durably` decides it, in order, before anything
        is written; every admitted one is encoded as it is decided (250 a loop step; the writer
        thread only writes) and appended to the log in the same group, with one ``fdatasync``.

        Returns:
            per intent: ``True`` (recorded, durable), ``False`` (already pending unchanged or
            being re-issued), or the exception that says why it is NOT recorded:
            :class:`PendingWriteHeldError` (another requester holds the path) or
            :class:`JournalError` (it cannot be encoded, or the group could not be made durable).

        Raises:
            JournalError: the ledger is closed (nothing recorded).
        """
        return await self._record_async(list(intents), bulk=True)

    async def _record_async(self, intents: list[PendingWrite], *, bulk: bool) -> list[RecordResult]:
        if self._journal is None:  # in memory: nothing to wait for
            results: list[RecordResult] = []
            for intent in intents:
                try:
                    results.append(self.record(intent))
                except PendingWriteHeldError as exc:
                    if not bulk:
                        raise
                    results.append(exc)
            return results
        loop = asyncio.get_running_loop()
        if not bulk:
            with self._lock:
                tickets = [self._submit(intents, fmt_for_new="log", loop=loop)]
        else:
            tickets = await self._admit_bulk(intents, loop)
        context = tickets[0].context
        assert isinstance(context, _Record)
        deadline = loop.time() + self._durable_timeout
        for ticket in tickets:  # every one shares the bulk's results
            if ticket.queued:
                assert ticket.waiter is not None
                timer = self._arm_deadline(loop, deadline, ticket)
                try:
                    # A cancelled caller cancels only this wait: the record completes (and
                    # publishes).
                    await ticket.waiter
                finally:
                    timer.cancel()
        return context.results

    # ------------------------------------------------------------------ the durable step's bound

    def _arm_deadline(
        self, loop: asyncio.AbstractEventLoop, deadline: float, ticket: Ticket
    ) -> asyncio.TimerHandle:
        """When the awaited ``ticket`` is past its bound (tests replace this: injected time)."""
        return loop.call_at(deadline, self._expire_waiter, ticket)

    def _step_returned(self, ticket: Ticket) -> bool:
        """Block until ``ticket``'s step returned, at most the bound; say if it did (tests
        replace this: injected time)."""
        return ticket.done.wait(self._durable_timeout)

    def _wait_bounded(
        self, ticket: Ticket
    ) -> tuple[list[RecordResult], list[PendingWriteOutcome]]:
        if not self._step_returned(ticket) and self._expire(ticket):
            context = ticket.context
            assert isinstance(context, _Record)
            return context.results, []
        return self._wait(ticket)

    def _expire_waiter(self, ticket: Ticket) -> None:
        """On the caller's loop, at the deadline: answer the records NOT recorded."""
        if self._expire(ticket) and ticket.waiter is not None and not ticket.waiter.done():
            ticket.waiter.set_result(None)

    def _expire(self, ticket: Ticket) -> bool:
        """Past the bound, unless its durable step has returned: roll the ticket's records back
        and answer each NOT recorded. The writer skips what it has not written yet; what it has
        written is taken back once its step returns (:meth:`_take_back`). Say if it expired."""
        context = ticket.context
        assert isinstance(context, _Record)
        with self._lock:
            if ticket.completing or ticket.expired or ticket.done.is_set():
                return False
            ticket.expired = True
            self._timeouts += 1
            if self._writer is not None:
                self._expired_at_step = self._writer.steps
            where = "" if self._journal is None else str(self._journal.directory)
            error = JournalError(
                f"the durable step of pending-write journal {where!r} did not return within "
                f"{self._durable_timeout:g} s (a disk or file system that does not answer); the "
                "intent is NOT recorded, and if the step completes later it is taken back",
                path=where,
            )
            removals: list[tuple[str, Format]] = []
            for reservation in reversed(context.reserved):
                reservation.error = error  # the writer skips it if it has not started
                self._roll_back(reservation, removals)
                context.results[reservation.index] = error
            context.late_removals = removals
            count = len(context.reserved)
        logger.bind(journal_dir=where).error("{} ({} record(s))", error, count)
        return True

    def _take_back(self, batch: list[Ticket]) -> None:
        """On the writer thread, once a group's step returned: the ops of its expired tickets
        that were written are replaced by what the ledger holds for their paths NOW (the intent
        they would have replaced if it is still outstanding, else nothing), in the log or as
        the path's file, so that the next process never re-issues what was NOT recorded."""
        assert self._log is not None
        assert self._journal is not None
        paths: dict[str, Format] = {}
        for ticket in batch:
            for op in ticket.ops:
                if op.written and op.kind in ("put", "file"):
                    if ticket.expired:
                        paths[op.path] = "log" if op.kind == "put" else "file"
                    else:  # a later record of the path in this group stands
                        paths.pop(op.path, None)
        logged: list[tuple[str, bytes | None]] = []
        with self._lock:  # no settle or record of these paths in between
            for path, kind in paths.items():
                holder, fmt = self._durable_holder(path)
                if kind == "log":
                    logged.append((path, encode_put(holder) if fmt == "log" and holder else None))
                    continue
                try:
                    if holder is not None and fmt == "file":
                        self._journal.write(holder)
                    else:
                        self._journal.remove(path)
                except JournalError as exc:
                    self._report_not_taken_back(path, exc)
            if logged:
                try:
                    self._log.restore(logged)
                except (OSError, JournalError) as exc:
                    self._report_not_taken_back(logged[0][0], exc)

    def _durable_holder(self, path: str) -> tuple[PendingWrite | None, Format | None]:
        """Under the lock: the outstanding intent of ``path`` whose durable step returned (a
        record being made is not one yet), and where its copy lives."""
        chain = self._reserving.get(path)
        if chain:
            prior = chain[0].prior
            if prior is not None and self._outstanding_now(prior):
                return prior, chain[0].prior_fmt
            return None, None
        holder = self._newest.get(path)
        return holder, self._format.get(path) if holder is not None else None

    @staticmethod
    def _report_not_taken_back(path: str, exc: BaseException) -> None:
        logger.bind(path=path).opt(exception=exc).error(
            "a journal write for {} that completed after its caller was told it is NOT recorded "
            "could not be taken back: {}; the next process may re-issue it",
            path,
            exc,
        )

    @property
    def journal_fault(self) -> str | None:
        """Why records are answered NOT recorded now, or ``None``: the journal's directory was
        deleted or moved away (it never comes back by itself: restart with a journal that
        exists), or its durable step is stuck (a record expired waiting for it, or it is older
        than ``durable_timeout``, and no step has returned since)."""
        writer = self._writer
        if writer is None:
            return None
        lost = writer.lost
        if lost is not None:
            return str(lost)
        since = writer.step_since
        waited = None if since is None else time.monotonic() - since
        if (waited is not None and waited > self._durable_timeout) or (
            self._expired_at_step == writer.steps  # no step has returned since one expired
        ):
            return (
                f"the durable step of pending-write journal {str(self.journal_dir)!r} has not "
                f"returned within {self._durable_timeout:g} s"
                + ("" if waited is None else f" (waiting for {waited:.1f} s)")
                + ": records are answered NOT recorded"
            )
        return None

    @property
    def journal_lost(self) -> bool:
        """Whether the last durable step found the journal's directory deleted or moved away."""
        return self._writer is not None and self._writer.lost is not None

    def take_all(self) -> list[PendingWrite]:
        """Take every pending intent out for re-issue (oldest first).

        Their journal files stay until :meth:`settle`: a crash between the two loses nothing
        (the next process re-issues them again; the request id makes that idempotent).
        """
        with self._lock:
            intents = sorted(self._pending.values(), key=lambda intent: intent.recorded_at)
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
                already_absent=counts[Verdict.ALREADY_ABSENT],
                conflicts=counts[Verdict.CONFLICT],
                quarantined=counts["quarantined"],
                superseded=counts["superseded"],
                held=counts["held"],
                group_commits=0 if self._writer is None else self._writer.groups,
                durable_timeouts=self._timeouts,
                journal_fault=self.journal_fault,
                journal_lost=self.journal_lost,
            )

    def __repr__(self) -> str:
        where = "memory" if self._journal is None else str(self._journal.directory)
        return f"PendingWriteLedger({where!r}, pending={len(self._pending)})"
