"""The journal's writer thread: every durable step of the ledger off the caller's thread, in groups.

Callers hand it :class:`Ticket`\\ s (one per record call: one intent, or every node of a bulk) and
wait for them. The thread takes everything queued at once, appends every log entry of that group
with one write and one ``fdatasync`` (:meth:`Log.append`), writes the format-1 files of the group
(rare: a path whose intent already lives in one), then completes each ticket in queue order
(``complete(ticket)`` applies it to the ledger) and wakes the waiters: one ``call_soon_threadsafe``
per group and event loop. While it waits for the disk the next group gathers: concurrent records
share one ``fdatasync``.

The thread starts with the first ticket and ends after ``linger`` seconds without one (so a
ledger nobody closes leaves no thread behind for long, and never holds up interpreter exit: it is
a daemon). :meth:`Writer.close` commits what is queued, then stops it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from loguru import logger

from rxmesh.exceptions import JournalError
from rxmesh.ledger._journal import DirectoryLost, Journal
from rxmesh.ledger._log import Log
from rxmesh.ledger._models import PendingWrite

__all__ = ["DEFAULT_LINGER_SECONDS", "Op", "Ticket", "Writer"]

DEFAULT_LINGER_SECONDS = 0.5
"""How long the writer thread waits for the next ticket before it ends."""

_JOIN_SECONDS = 30.0


@dataclass(slots=True, eq=False)
class Op:
    """One durable change: a ``put`` (log entry), a ``file`` (format-1 file), a ``del``."""

    kind: Literal["put", "file", "del"]
    path: str
    intent: PendingWrite | None = None
    line: bytes | None = None  # a put's or a del's entry, encoded before it is queued
    error: JournalError | None = None
    written: bool = False  # durable: appended (and synced) to the log, or its file written


@dataclass(slots=True, eq=False, repr=False)
class Ticket:
    """One caller's durable step, and how its caller learns the result.

    A synchronous caller waits on :attr:`done`; a coroutine awaits :attr:`waiter`, which the
    thread resolves through one ``call_soon_threadsafe`` per group and loop (after running
    :attr:`publish` there). The ledger's ``complete`` sets :attr:`result` or :attr:`error`.
    """

    ops: list[Op]
    context: object = None  # the ledger's own bookkeeping for the ticket
    loop: asyncio.AbstractEventLoop | None = None
    waiter: asyncio.Future[object] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    result: object = None
    error: BaseException | None = None
    publish: Callable[[], None] | None = None  # run on the loop before the waiter is resolved
    sealed: bool = True  # False while its caller still adds ops: the thread waits for it
    queued: bool = False
    abandoned: bool = False
    expired: bool = False  # past the ledger's bound: answered not recorded, taken back if written
    completing: bool = False  # its durable step returned in time: it can no longer expire

    def __repr__(self) -> str:
        # Short: asyncio's debug mode takes the repr of a cancelled timer's arguments, and a
        # bulk's ticket holds 10,000 intents.
        return f"<Ticket of {len(self.ops)} op(s)>"

    def wait(self) -> object:
        """Block until the step is done (synchronous callers); its result, or raise its error."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


def _resolve(tickets: list[Ticket]) -> None:
    """On a caller's loop: publish what each ticket has to, then resolve its waiter."""
    for ticket in tickets:
        error = ticket.error
        if ticket.publish is not None and error is None:
            try:
                ticket.publish()
            except Exception as exc:  # noqa: BLE001 - a subscriber's failure reaches its caller
                error = exc
        waiter = ticket.waiter
        if waiter is None or waiter.done():  # the caller was cancelled: the record stands
            continue
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(ticket.result)


class Writer:
    """The thread and its queue (see the module text).

    Args:
        journal: the journal directory (format-1 files are written through it).
        log: the directory's log (used by this thread only once it started).
        complete: called on the thread with each ticket once its ops are durable or failed
            (each failed op carries its error); it sets the ticket's result.
        take_back: called on the thread after a group's tickets are completed when any of them
            expired (its caller was told not recorded) after some of its ops were written: it
            makes the journal forget them, so that no later process re-issues them.
        linger: see :data:`DEFAULT_LINGER_SECONDS`.
    """

    def __init__(
        self,
        journal: Journal,
        log: Log,
        complete: Callable[[Ticket], None],
        take_back: Callable[[list[Ticket]], None],
        *,
        linger: float = DEFAULT_LINGER_SECONDS,
    ) -> None:
        self._journal = journal
        self._log = log
        self._complete = complete
        self._take_back = take_back
        self._linger = linger
        self._cond = threading.Condition()
        self._queue: list[Ticket] = []
        self._thread: threading.Thread | None = None
        self._closing = False
        self._groups = 0
        self.lost: DirectoryLost | None = None  # the last durable step found the directory gone
        self.step_since: float | None = None  # monotonic start of the durable step in progress
        self.steps = 0  # durable steps that returned (or failed)

    @property
    def groups(self) -> int:
        """How many groups were committed (each with at most one ``fdatasync`` of the log)."""
        return self._groups

    @property
    def running(self) -> bool:
        """Whether the thread is alive now."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def submit(self, ticket: Ticket) -> None:
        """Queue ``ticket`` (starting the thread if it is not running).

        Raises:
            JournalError: the writer is closed; nothing was queued.
        """
        with self._cond:
            if self._closing:
                raise JournalError(
                    f"pending-write journal {str(self._journal.directory)!r} is closed",
                    path=str(self._journal.directory),
                )
            self._queue.append(ticket)
            ticket.queued = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="rxmesh-journal-writer", daemon=True
                )
                self._thread.start()
            else:
                self._cond.notify()

    def seal(self, ticket: Ticket) -> None:
        """``ticket`` has all its ops: the thread may commit it (and what is queued after it)."""
        with self._cond:
            ticket.sealed = True
            self._cond.notify()

    def close(self) -> None:
        """Commit what is queued, stop the thread and wait for it; idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_SECONDS)
            if thread.is_alive():
                logger.bind(journal_dir=str(self._journal.directory)).error(
                    "the journal writer thread did not stop within {} s (a disk that does not "
                    "answer?); it is a daemon and will not hold up exit",
                    _JOIN_SECONDS,
                )

    def _run(self) -> None:
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    break
                self._commit(batch)
                # Not held while the next group is awaited (up to the linger): a 10,000-node
                # bulk's reservations and encoded lines would stay alive, and be walked by
                # every full collection, until then.
                del batch
        finally:
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _next_batch(self) -> list[Ticket] | None:
        """Everything queued up to the first unsealed ticket; ``None``: time to end."""
        with self._cond:
            while True:
                ready = 0
                while ready < len(self._queue) and self._queue[ready].sealed:
                    ready += 1
                if ready:
                    batch, self._queue = self._queue[:ready], self._queue[ready:]
                    return batch
                if self._queue:  # a bulk is still being decided: it is sealed within a step
                    self._cond.wait()
                elif self._closing or (not self._cond.wait(self._linger) and not self._queue):
                    self._thread = None  # under the lock: the next submit starts a new thread
                    return None

    def _commit(self, batch: list[Ticket]) -> None:
        self.step_since = time.monotonic()
        try:
            self._write(batch)
        except BaseException as exc:  # a defect: no waiter may hang on it
            logger.opt(exception=exc).error("the journal writer failed: {}", exc)
            for ticket in batch:
                ticket.error = exc
            self._notify(batch)
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self.step_since = None
            self.steps += 1
        for ticket in batch:
            try:
                self._complete(ticket)
            except Exception as exc:  # noqa: BLE001 - a defect: logged, and handed to the waiter
                logger.opt(exception=exc).error("completing a journal ticket failed: {}", exc)
                ticket.error = exc
        if any(ticket.expired for ticket in batch):
            try:
                self._take_back(batch)
            except Exception as exc:  # noqa: BLE001 - a defect: logged; nobody waits for it
                logger.opt(exception=exc).error("taking back expired records failed: {}", exc)
        self._notify(batch)

    def _notify(self, batch: list[Ticket]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Ticket]] = {}
        for ticket in batch:
            ticket.done.set()
            if ticket.loop is not None:
                by_loop.setdefault(ticket.loop, []).append(ticket)
        for loop, tickets in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, tickets)
            except RuntimeError as exc:  # that loop is closed: its callers are gone
                logger.opt(exception=exc).error(
                    "{} journal record(s) completed after their event loop was closed; "
                    "nobody is waiting for them (outcomes they would publish are lost)",
                    len(tickets),
                )

    def _write(self, batch: list[Ticket]) -> None:
        entries: list[tuple[str, bytes, bool]] = []
        logged: list[Op] = []
        for ticket in batch:
            for op in ticket.ops:
                if op.kind == "file" or op.error is not None:
                    continue
                assert op.line is not None  # encoded when it was decided, on the caller's loop
                entries.append((op.path, op.line, op.kind == "put"))
                logged.append(op)
        if entries:
            try:
                self._log.append(entries)
            except (OSError, JournalError) as exc:
                where = self._log.segment or self._journal.directory
                if isinstance(exc, DirectoryLost):
                    error: JournalError = exc
                    self._report_lost(exc, len(entries))
                else:
                    error = JournalError(
                        f"could not append {len(entries)} entr(y/ies) to the pending-write log "
                        f"{str(where)!r}: {exc}",
                        path=str(where),
                    )
                    error.__cause__ = exc
                for op in logged:
                    op.error = error
            else:
                self.lost = None
                for op in logged:
                    op.written = True
            self._groups += 1
        for ticket in batch:
            for op in ticket.ops:
                if op.kind == "file" and op.error is None:
                    assert op.intent is not None
                    try:
                        self._journal.write(op.intent)
                    except JournalError as exc:
                        op.error = exc
                        if isinstance(exc, DirectoryLost):
                            self._report_lost(exc, 1)
                    else:
                        self.lost = None
                        op.written = True

    def _report_lost(self, exc: DirectoryLost, count: int) -> None:
        self.lost = exc
        logger.bind(journal_dir=str(self._journal.directory)).error(
            "{}: {} journal entr(y/ies) NOT recorded", exc, count
        )
