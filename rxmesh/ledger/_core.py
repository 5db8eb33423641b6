"""The ledger's state and its durable steps' bookkeeping (the public API is in ``_ledger.py``).

A record is decided at once, under the lock (the replacement rule, the encoding), and the path is
reserved for the new intent then: it is the path's holder from that moment, so two concurrent
records of one path resolve exactly as two sequential ones. The intent becomes pending only once
its durable step returned (``_complete``, on the writer thread). If that step failed the
reservation is rolled back: the holder is the one before it again (or nobody, and the copy of an
intent settled meanwhile is removed).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from functools import partial
from typing import Literal

from loguru import logger
from reactivex.subject import Subject

from rxmesh._util.collector import collector_paused
from rxmesh.exceptions import JournalError, PendingWriteHeldError
from rxmesh.ledger._journal import Journal
from rxmesh.ledger._log import Log, encode_del, encode_put
from rxmesh.ledger._models import Numbering, PendingWrite, PendingWriteOutcome
from rxmesh.ledger._publish import count_recorded, log_bulk, log_recorded, publish, superseded
from rxmesh.ledger._writer import Op, Ticket, Writer
from rxmesh.operations import Verdict

__all__ = ["Format", "LedgerCore", "RecordResult"]

Format = Literal["file", "log"]
RecordResult = bool | PendingWriteHeldError | JournalError
_Key = tuple[str, str]  # (path, request_id)
_NOTHING = object()  # "already recorded or being re-issued": nothing to write
_APPLY_CHUNK = 256  # reservations applied per lock hold (a 10,000-node bulk must not hog it)
_ADMIT_CHUNK = 250
"""A bulk's intents decided and encoded per loop step. Encoded here, on the loop, not by the
writer thread: a thread computing beside the loop stretches every loop step that does I/O (each
hand-back of the GIL waits up to the switch interval), the change feed listener's among them
(docs/performance.md has the measurements)."""


@dataclass(slots=True, eq=False)
class _Reservation(Op):
    """A record decided, not yet durable: its op and what it replaces (one object per intent)."""

    index: int = 0  # where its result goes in the ticket's results
    fmt: Format = "log"
    prior: PendingWrite | None = None  # the path's holder when this was decided
    prior_fmt: Format | None = None

    @property
    def record(self) -> PendingWrite:
        """The intent being recorded (always set on a reservation)."""
        assert self.intent is not None
        return self.intent


@dataclass(slots=True, eq=False)
class _Record:
    """A record ticket's bookkeeping: where each result goes, and whom to tell."""

    results: list[RecordResult]
    reserved: list[_Reservation]
    loop: asyncio.AbstractEventLoop | None  # None: a synchronous caller publishes itself
    bulk: bool


class LedgerCore:
    """State, replacement rule, and what happens when a durable step returns."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._pending: dict[str, PendingWrite] = {}
        self._in_flight: dict[_Key, PendingWrite] = {}
        # path -> the newest outstanding intent (pending, in flight or reserved): the holder.
        self._newest: dict[str, PendingWrite] = {}
        self._format: dict[str, Format] = {}  # path -> where its holder's copy is (or goes)
        self._reserving: dict[str, list[_Reservation]] = {}
        self._subject: Subject[PendingWriteOutcome] = Subject()
        names = ("loaded", "recorded", "replaced", "taken", "quarantined", "superseded", "held")
        self._counts: dict[str, int] = {**dict.fromkeys(names, 0), **dict.fromkeys(Verdict, 0)}
        self._journal: Journal | None = None
        self._log: Log | None = None
        self._writer: Writer | None = None
        self._open: set[Ticket] = set()  # queued, not sealed yet (a bulk being decided)
        self._numbering = Numbering()  # the order of re-issue (under the lock)
        self._closed = False

    # ---------------------------------------------------------------- deciding (under the lock)

    def _decide(self, intent: PendingWrite) -> object:
        """The replacement rule: ``_NOTHING``, or the path's holder (``None``: nobody).

        Raises:
            PendingWriteHeldError: another requester's intent for the path is outstanding.
        """
        if (intent.key, intent.request_id) in self._in_flight:
            logger.bind(path=intent.key, request_id=intent.request_id).debug(
                "pending write for {} is being re-issued; not recorded again", intent.key
            )
            return _NOTHING
        if self._pending.get(intent.key) == intent:
            return _NOTHING
        holder = self._newest.get(intent.key)
        if holder is not None and holder.requester != intent.requester:
            self._counts["held"] += 1
            raise PendingWriteHeldError(
                f"a pending write for {intent.key!r} by another requester (request "
                f"{holder.request_id}) is outstanding; the intent of request "
                f"{intent.request_id} is not recorded",
                path=intent.key,
                holder_request_id=holder.request_id,
            )
        return holder

    def _reserve(
        self,
        intent: PendingWrite,
        holder: PendingWrite | None,
        fmt: Format,
        line: bytes | None,
        index: int,
    ) -> _Reservation:
        path = intent.key
        reservation = _Reservation(
            "put" if fmt == "log" else "file",
            path,
            intent,
            line,
            index=index,
            fmt=fmt,
            prior=holder,
            prior_fmt=None if holder is None else self._format.get(path),
        )
        self._reserving.setdefault(path, []).append(reservation)
        self._newest[path] = intent
        self._format[path] = fmt
        return reservation

    def _outstanding_now(self, intent: PendingWrite) -> bool:
        if (intent.key, intent.request_id) in self._in_flight:
            return True
        pending = self._pending.get(intent.key)
        return pending is not None and pending.request_id == intent.request_id

    def _submit(
        self,
        intents: list[PendingWrite],
        *,
        fmt_for_new: Format,
        loop: asyncio.AbstractEventLoop | None,
    ) -> Ticket:
        """Under the lock: decide, reserve and queue the records of one intent, sealed.

        Raises:
            PendingWriteHeldError: another requester holds the path (nothing written).
            JournalError: the intent cannot be encoded, or the ledger is closed.
        """
        ticket = self._open_ticket(len(intents), loop, bulk=False)
        self._admit(ticket, intents, 0, fmt_for_new=fmt_for_new)
        self._seal(ticket)
        return ticket

    def _open_ticket(
        self, count: int, loop: asyncio.AbstractEventLoop | None, *, bulk: bool
    ) -> Ticket:
        results: list[RecordResult] = [False] * count
        context = _Record(results, [], loop, bulk)
        ticket = Ticket([], context=context, loop=loop, sealed=False)
        if loop is not None:
            ticket.waiter = loop.create_future()
        return ticket

    def _admit(
        self,
        ticket: Ticket,
        intents: list[PendingWrite],
        start: int,
        *,
        fmt_for_new: Format,
    ) -> None:
        """Under the lock: decide each of ``intents`` (results from ``start``) and reserve its
        path; the ticket is queued (unsealed: the writer waits for it) with its first op, so
        queue order is decision order even while a bulk is still being decided.

        Raises (a single record's; a bulk's go in its results): PendingWriteHeldError,
        JournalError. JournalError also when the ledger is closed (nothing reserved).
        """
        context = ticket.context
        assert isinstance(context, _Record)
        if self._closed or self._writer is None:
            raise self._closed_error()
        for offset, intent in enumerate(intents):
            index = start + offset
            try:
                holder = self._decide(intent)
                if holder is _NOTHING:
                    continue
                assert holder is None or isinstance(holder, PendingWrite)
                intent = self._numbering.number(intent)
                fmt = self._format.get(intent.key, fmt_for_new) if holder else fmt_for_new
                line = self._encode(intent) if fmt == "log" else None
            except (PendingWriteHeldError, JournalError) as exc:
                if not context.bulk:
                    raise
                context.results[index] = exc
                continue
            reservation = self._reserve(intent, holder, fmt, line, index)
            ticket.ops.append(reservation)
            context.reserved.append(reservation)
        if ticket.ops and not ticket.queued:
            self._writer.submit(ticket)
            self._open.add(ticket)

    def _seal(self, ticket: Ticket) -> None:
        """Under the lock: the ticket is complete; the writer may take it."""
        self._open.discard(ticket)
        if ticket.queued and self._writer is not None:
            self._writer.seal(ticket)

    def _abandon(self, ticket: Ticket, error: JournalError) -> None:
        """Under the lock: undo every reservation of an unsealed ticket, then seal it empty."""
        context = ticket.context
        assert isinstance(context, _Record)
        removals: list[tuple[str, Format]] = []
        for reservation in reversed(context.reserved):
            self._roll_back(reservation, removals)
            context.results[reservation.index] = error
        context.reserved.clear()
        ticket.ops.clear()
        ticket.abandoned = True
        for path, fmt in removals:
            if fmt == "log":
                self._remove_logged(path)
            else:
                self._remove_copy(path, fmt)
        self._seal(ticket)

    def _closed_error(self) -> JournalError:
        where = "" if self._journal is None else str(self._journal.directory)
        return JournalError(f"pending-write journal {where!r} is closed", path=where)

    async def _admit_bulk(
        self, intents: list[PendingWrite], loop: asyncio.AbstractEventLoop
    ) -> list[Ticket]:
        """Decide and encode a bulk's intents ``_ADMIT_CHUNK`` at a time, yielding to the loop in
        between (a large bulk in one step would hold the loop too long); queue them as one ticket.

        One ticket unless a synchronous :meth:`record` had to go through the writer meanwhile:
        it seals the open ticket (a thread blocked behind a ticket its own loop is still filling
        would wait for ever), and the rest of the bulk continues in a new one.
        """
        ticket = self._open_ticket(len(intents), loop, bulk=True)
        tickets = [ticket]
        try:
            for start in range(0, len(intents), _ADMIT_CHUNK):
                if start:
                    await asyncio.sleep(0)
                    if ticket.abandoned:  # the ledger was closed meanwhile
                        raise self._closed_error()
                with self._lock, collector_paused():  # a step's reservations stay alive
                    if ticket.sealed:  # split by a synchronous record: continue in a new one
                        ticket = self._continue(ticket)
                        tickets.append(ticket)
                    self._admit(
                        ticket,
                        intents[start : start + _ADMIT_CHUNK],
                        start,
                        fmt_for_new="log",
                    )
        except BaseException:
            with self._lock:
                if not ticket.abandoned:
                    self._abandon(ticket, self._closed_error())
            raise
        with self._lock:
            self._seal(ticket)
        return tickets

    def _continue(self, ticket: Ticket) -> Ticket:
        context = ticket.context
        assert isinstance(context, _Record)
        assert ticket.loop is not None
        following = self._open_ticket(0, ticket.loop, bulk=True)
        following.context = _Record(context.results, [], ticket.loop, True)  # shared results
        return following

    def _seal_open(self) -> None:
        """Under the lock: seal every ticket still being filled (see :meth:`_admit_bulk`)."""
        for ticket in list(self._open):
            self._seal(ticket)

    def _encode(self, intent: PendingWrite) -> bytes:
        assert self._journal is not None
        try:
            return encode_put(intent)
        except ValueError as exc:  # UnicodeEncodeError: a lone surrogate cannot be UTF-8
            raise JournalError(
                f"could not encode the pending write for {intent.key!r} for the journal: {exc}",
                path=str(self._journal.directory),
            ) from exc

    @staticmethod
    def _wait(ticket: Ticket) -> tuple[list[RecordResult], list[PendingWriteOutcome]]:
        answer = ticket.wait()
        assert isinstance(answer, tuple)
        return answer

    # ---------------------------------------------------- completing (on the writer thread)

    def _complete(self, ticket: Ticket) -> None:
        context = ticket.context
        if not isinstance(context, _Record):
            self._complete_removal(ticket)
            return
        outcomes: list[PendingWriteOutcome] = []
        removals: list[tuple[str, Format]] = []
        reserved = context.reserved
        for start in range(0, len(reserved), _APPLY_CHUNK):
            with self._lock:
                for reservation in reserved[start : start + _APPLY_CHUNK]:
                    if reservation.error is None:
                        context.results[reservation.index] = self._apply(reservation, outcomes)
                    else:
                        self._roll_back(reservation, removals)
                        context.results[reservation.index] = reservation.error
        for path, fmt in removals:
            self._remove_copy(path, fmt)
        self._log_records(context)
        if context.loop is not None:
            if outcomes:
                ticket.publish = partial(self._publish_all, outcomes)
            outcomes = []
        ticket.result = (context.results, outcomes)

    def _apply(self, reservation: _Reservation, outcomes: list[PendingWriteOutcome]) -> bool:
        intent = reservation.record
        self._unreserve(reservation)
        previous = self._pending.get(intent.key)
        if previous == intent:
            return False  # a concurrent record of the very same intent got there first
        self._pending[intent.key] = intent
        count_recorded(self._counts, intent)
        if reservation.prior is not None:
            self._counts["replaced"] += 1
        if previous is not None and previous.request_id != intent.request_id:
            outcomes.append(self._supersede(previous, intent, "before it was re-issued"))
        return True

    def _roll_back(self, reservation: _Reservation, removals: list[tuple[str, Format]]) -> None:
        path = reservation.record.key
        chain = self._reserving[path]
        position = chain.index(reservation)
        later = chain[position + 1] if position + 1 < len(chain) else None
        self._unreserve(reservation)
        if later is not None:  # the newer reservation inherits what this one replaced
            later.prior, later.prior_fmt = reservation.prior, reservation.prior_fmt
            return
        prior = reservation.prior
        if prior is not None and self._outstanding_now(prior):
            self._newest[path] = prior
            self._format[path] = reservation.prior_fmt or reservation.fmt
            return
        del self._newest[path]
        self._format.pop(path, None)
        if prior is not None:  # settled while this was reserved: its copy is still there
            removals.append((path, reservation.prior_fmt or reservation.fmt))

    def _unreserve(self, reservation: _Reservation) -> None:
        chain = self._reserving[reservation.record.key]
        chain.remove(reservation)
        if not chain:
            del self._reserving[reservation.record.key]

    def _remove_copy(self, path: str, fmt: Format) -> None:
        """On the writer thread: remove the durable copy of a settled intent."""
        try:
            if fmt == "file":
                assert self._journal is not None
                self._journal.remove(path)
            else:
                assert self._log is not None
                self._log.append([(path, encode_del(path), False)])
        except (OSError, JournalError, ValueError) as exc:
            logger.bind(path=path).opt(exception=exc).error(
                "the journal copy of the settled pending write for {} could not be removed: {}; "
                "the next process will re-issue it again",
                path,
                exc,
            )

    def _remove_logged(self, path: str) -> None:
        """Under the lock: queue the log entry that removes ``path``'s settled intent.

        Not waited for: the writer commits it with its next group. A crash before that re-issues
        the intent once more (its request id makes that idempotent).
        """
        try:
            line = encode_del(path)
        except ValueError as exc:  # the put of this path was encoded: cannot happen
            raise JournalError(f"cannot encode the removal of {path!r}: {exc}") from exc
        if self._writer is None or self._closed:
            logger.bind(path=path).error(
                "pending write for {} settled after its ledger was closed; its log entry stays "
                "and the next process will re-issue it again",
                path,
            )
            return
        self._writer.submit(Ticket([Op("del", path, line=line)]))

    def _complete_removal(self, ticket: Ticket) -> None:
        for op in ticket.ops:
            if op.error is not None:
                logger.bind(path=op.path).opt(exception=op.error).error(
                    "pending write for {} settled but its log entry could not be removed: {}; "
                    "the next process will re-issue it again",
                    op.path,
                    op.error,
                )

    def _log_records(self, context: _Record) -> None:
        where = None if self._journal is None else str(self._journal.directory)
        if context.bulk:
            log_bulk(sum(1 for r in context.results if r is True), len(context.results), where)
            return
        for reservation in context.reserved:
            if context.results[reservation.index] is True:
                log_recorded(reservation.record, reservation.prior is not None, where)

    # ------------------------------------------------------------------------------ outcomes

    def _supersede(self, old: PendingWrite, new: PendingWrite, when: str) -> PendingWriteOutcome:
        return superseded(self._counts, old, new, when)

    def _publish_all(self, outcomes: list[PendingWriteOutcome]) -> None:
        for outcome in outcomes:
            publish(self._subject, outcome)

    def _publish(self, outcome: PendingWriteOutcome) -> None:
        publish(self._subject, outcome)
