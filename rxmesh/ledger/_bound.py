"""The durable step's bound: a journal that stops answering, or is gone, holds no answer.

A record waits at most ``durable_timeout`` seconds for its durable step (the writer thread's
group commit, or a format-1 file). Past it, the record is answered not recorded and its
reservation rolled back, as if the step had failed: an intent it would have replaced stands,
unsettled. The writer skips what it has not written yet; a step that returns late is taken back
(what it wrote for those records is replaced by what the ledger holds for their paths now), so
no process re-issues what its caller was told was not recorded. ``journal_fault`` says why
records are answered not recorded meanwhile: a step stuck, or a directory deleted or moved away
(found by the writer, :func:`~rxmesh.ledger._directory.verify_held`).
"""

from __future__ import annotations

import asyncio
import math
import time

from loguru import logger

from rxmesh.exceptions import JournalError
from rxmesh.ledger._core import Format, LedgerCore, RecordResult, _Record
from rxmesh.ledger._log import encode_put
from rxmesh.ledger._models import PendingWrite, PendingWriteOutcome
from rxmesh.ledger._writer import Ticket

__all__ = ["DEFAULT_DURABLE_TIMEOUT", "BoundedLedger"]

DEFAULT_DURABLE_TIMEOUT = 2.0
"""Seconds a record waits for its durable step before it is answered not recorded."""


class BoundedLedger(LedgerCore):
    """The ledger's state, with the bound on every durable step (the public API: ``_ledger.py``).

    Raises:
        ValueError: ``durable_timeout`` is not a positive number of seconds.
    """

    def __init__(self, durable_timeout: float) -> None:
        super().__init__()
        if not (isinstance(durable_timeout, int | float) and 0 < durable_timeout < math.inf):
            raise ValueError(
                f"durable_timeout must be a positive number of seconds, got {durable_timeout!r}"
            )
        self._durable_timeout = float(durable_timeout)
        self._timeouts = 0
        self._expired_at_step: int | None = None  # writer.steps when a record last expired
        self._late_removals: dict[Ticket, list[tuple[str, Format]]] = {}

    async def _record_journaled(
        self, intents: list[PendingWrite], *, bulk: bool
    ) -> list[RecordResult]:
        """Decide and queue one record call's intents; wait for them, at most the bound."""
        loop = asyncio.get_running_loop()
        if not bulk:
            with self._lock:
                tickets = [self._submit(intents, fmt_for_new="log", loop=loop)]
        else:
            tickets = await self._admit_bulk(intents, loop)
        context = tickets[0].context
        assert isinstance(context, _Record)
        deadline = loop.time() + self._durable_timeout
        for ticket in tickets:
            if ticket.queued:
                assert ticket.waiter is not None
                timer = self._arm_deadline(loop, deadline, ticket)
                try:
                    # A cancelled caller cancels only this wait: the record completes (and
                    # publishes).
                    await ticket.waiter
                finally:
                    timer.cancel()
        return context.results  # every ticket shares the call's results

    def _arm_deadline(
        self, loop: asyncio.AbstractEventLoop, deadline: float, ticket: Ticket
    ) -> asyncio.TimerHandle:
        """When the awaited ``ticket`` is past its bound (tests replace this: injected time)."""
        return loop.call_at(deadline, self._expire_waiter, ticket)

    def _step_returned(self, ticket: Ticket) -> bool:
        """Block until ``ticket``'s step returned, at most the bound; say if it did (tests
        replace this: injected time)."""
        return ticket.done.wait(self._durable_timeout)

    def _wait_bounded(self, ticket: Ticket) -> tuple[list[RecordResult], list[PendingWriteOutcome]]:
        if not self._step_returned(ticket) and self._expire(ticket):
            context = ticket.context
            assert isinstance(context, _Record)
            return context.results, []
        return self._wait(ticket)

    def _expire_waiter(self, ticket: Ticket) -> None:
        """On the caller's loop, at the deadline: answer the records not recorded."""
        if self._expire(ticket) and ticket.waiter is not None and not ticket.waiter.done():
            ticket.waiter.set_result(None)

    def _expire(self, ticket: Ticket) -> bool:
        """Past the bound, unless its durable step has returned: roll the ticket's records back
        and answer each not recorded. The writer skips what it has not written yet; what it has
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
            if removals:  # intents settled while reserved: their copies go once it returns
                self._late_removals[ticket] = removals
            count = len(context.reserved)
        logger.bind(journal_dir=where).error("{} ({} record(s))", error, count)
        return True

    def _complete(self, ticket: Ticket) -> None:
        """On the writer thread, once the ticket's step returned: apply it, unless it expired
        first (then it was answered not recorded and rolled back already)."""
        context = ticket.context
        if not isinstance(context, _Record):
            super()._complete(ticket)
            return
        with self._lock:
            ticket.completing = not ticket.expired
            removals = self._late_removals.pop(ticket, [])
        if ticket.completing:
            super()._complete(ticket)
            return
        for path, fmt in removals:
            self._remove_copy(path, fmt)
        ticket.result = (context.results, [])

    def _take_back(self, batch: list[Ticket]) -> None:
        """On the writer thread, once a group's step returned: the ops of its expired tickets
        that were written are replaced by what the ledger holds for their paths now (the intent
        they would have replaced if it is still outstanding, else nothing), in the log or as
        the path's file, so that the next process never re-issues what was not recorded."""
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
            if self._writer is not None and self._expired_at_step == self._writer.steps:
                self._expired_at_step = None  # expired as its step returned: the disk answers
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
        """Why records are answered not recorded now, or ``None``: the journal's directory was
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
            where = "" if self._journal is None else str(self._journal.directory)
            return (
                f"the durable step of pending-write journal {where!r} has not "
                f"returned within {self._durable_timeout:g} s"
                + ("" if waited is None else f" (waiting for {waited:.1f} s)")
                + ": records are answered NOT recorded"
            )
        return None

    @property
    def journal_lost(self) -> bool:
        """Whether the last durable step found the journal's directory deleted or moved away."""
        return self._writer is not None and self._writer.lost is not None
