"""The change feed of :class:`~rxmesh.providers.postgres.PostgresStore`: its supervisor.

A LISTEN connection of its own (:class:`Listener`) hears the triggers' NOTIFYs and a dispatcher
(:class:`Dispatcher`) turns them into changes. The feed is verified end to end: a probe NOTIFY
sent through the pool must reach the listener, at start and every ``heartbeat_interval``; one
that does not arrive means the feed is lost, re-connected with backoff, verified again, and a
gap declared. Every feed task is watched: one that ends while the store is open means the feed
is lost (logged, shown by health), restarted, and a gap declared. A loss that outlasts
``feed_loss_bound`` ends every live query of the store.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from loguru import logger
from reactivex import Observable

from rxmesh.exceptions import ChangeFeedUnverifiedError, StoreError
from rxmesh.model import ChangeFeedGap, NodeChange, StoreEvidence
from rxmesh.providers.postgres._book import ChangeFeedState, ChangeFeedStatistics, FeedBook, Role
from rxmesh.providers.postgres._connections import Connections, is_closed
from rxmesh.providers.postgres._dispatch import Dispatcher
from rxmesh.providers.postgres._errors import DRIVER_FAULTS, store_error
from rxmesh.providers.postgres._evidence import Evidence
from rxmesh.providers.postgres._listener import Listener
from rxmesh.providers.postgres._notifications import probe_payload
from rxmesh.providers.postgres._pooler import unverified_error
from rxmesh.providers.postgres._streams import Hot

__all__ = ["ChangeFeed", "Outlasted"]


def _now() -> datetime:
    return datetime.now(UTC)


class Outlasted:
    """A change-feed loss that outlasted the store's bound: live queries end with it."""

    __slots__ = ("lost_at", "reason")

    def __init__(self, lost_at: datetime, reason: str) -> None:
        self.lost_at = lost_at
        self.reason = reason


class ChangeFeed:
    """The change feed of one store: its listener, dispatcher, probes, tasks and evidence."""

    def __init__(
        self,
        connections: Connections,
        *,
        channel: str,
        prefix: str,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        backoff: tuple[float, ...],
        loss_bound: float,
        malformed_log_interval: float,
        clock: Callable[[], float],
    ) -> None:
        self._connections = connections
        self._name = name = connections.name
        self._channel = channel
        self._prefix = prefix
        self._heartbeat_interval = heartbeat_interval
        self._heartbeat_timeout = heartbeat_timeout
        self._backoff = backoff
        self.loss_bound = loss_bound
        self.book = FeedBook(
            name,
            channel,
            malformed_log_interval,
            clock,
            stale_after=2 * heartbeat_interval + heartbeat_timeout,
        )
        self.closing = False
        self._changes = Hot(self.book, "changes")
        self._gaps = Hot(self.book, "gaps")
        self._expired = Hot(self.book, "live queries")
        self._positions = Hot(self.book, "positions")
        self._listener = Listener(connections, channel, prefix, self.book)
        self._evidence = Evidence(name, connections.attempts, self.book, self._listening)
        self._dispatcher = Dispatcher(
            name, prefix, self.book, self._listener, self._changes, self._evidence, self._positions
        )
        self._tasks: dict[Role, asyncio.Task[None]] = {}
        self._probe_instance = secrets.token_hex(8)
        self._probe_seq = 0
        self._loss_timer: asyncio.TimerHandle | None = None
        self.outlasted: Outlasted | None = None
        """The current loss, once it outlasted the bound (live queries then end)."""

    # ------------------------------------------------------------------ what it publishes

    @property
    def changes(self) -> Observable[NodeChange]:
        return self._changes.subject

    @property
    def positions(self) -> Observable[str]:
        """Snapshots (their text) that every change published before them reaches (module
        :mod:`._dispatch`): a live query that has applied those changes may give it as its
        position."""
        return self._positions.subject

    @property
    def checkpoint(self) -> str | None:
        """The snapshot the dispatcher waits to reach, if any."""
        return self._dispatcher.checkpoint

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        return self._gaps.subject

    @property
    def expired(self) -> Observable[Outlasted]:
        """The losses that outlasted the bound (live queries end with them)."""
        return self._expired.subject

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        return self._evidence.answers_again

    @property
    def backend_pid(self) -> int | None:
        return self._listener.backend_pid

    @property
    def is_whole(self) -> bool:
        """Listening now, and no announced commit held back from ``answers_again``."""
        return self.book.state is ChangeFeedState.LISTENING and self._evidence.held is None

    def statistics(self) -> ChangeFeedStatistics:
        snapshot = self.book.snapshot()
        held = self._evidence.held
        if held is None:
            return snapshot
        since, why = held
        return replace(snapshot, evidence_held_since=since, evidence_held_reason=why)

    def _listening(self) -> bool:
        return (
            not self.closing
            and self.book.state is ChangeFeedState.LISTENING
            and self.book.loss is None
        )

    # ------------------------------------------------------------------ start and close

    def reset(self) -> None:
        """Before a start: open, nothing known about the pool yet."""
        self.closing = False
        self._evidence.reset()

    async def start(self, began: datetime) -> None:
        """LISTEN and verify delivery (the pool is open): a probe sent through the pool must
        reach the listener within ``heartbeat_timeout``; then the feed's tasks run and the
        verified start is offered on ``answers_again``.

        Raises:
            StoreError: the listener could not be opened, or the probe could not be sent.
            ChangeFeedUnverifiedError: the probe was sent but never arrived. Nothing stays open.
        """
        try:
            await self._listener.open()
            problem = await self._verify_delivery()
            if problem is not None:
                raise unverified_error(self._connections, problem)
        except BaseException as exc:
            self._listener.drop()
            if isinstance(exc, ChangeFeedUnverifiedError):
                self.book.state = ChangeFeedState.UNVERIFIED
                self.book.loss = (_now(), str(exc))
            raise
        self.book.state = ChangeFeedState.LISTENING
        self.book.loss = None
        self._spawn("dispatch", self._dispatch())
        self._spawn("listener", self._watch_feed())
        # Whatever was recorded before this process started (a journal loaded from disk) has
        # waited for exactly this: the pool answered and a probe sent through it arrived.
        self._evidence.start = start = ChangeFeedGap(
            source=self._name,
            lost_at=began,
            resumed_at=_now(),
            reason="the store started: its pool answered and a probe sent through it arrived "
            "on the LISTEN connection",
        )
        self._evidence.stream.publish(start)

    async def close(self) -> None:
        """Stop the feed's tasks and its listener. Their errors are logged at ERROR (once),
        never raised from here; a task that does not stop within ``command_timeout`` is left
        (its connection was terminated)."""
        self.closing = True
        self.book.state = ChangeFeedState.CLOSED
        self._evidence.reset()
        self._forget_loss_bound()
        tasks = list(self._tasks.items())
        self._tasks.clear()
        for _, task in tasks:
            task.cancel()
        self._listener.drop()
        if tasks:
            # asyncio.wait never raises a task's error; a stuck task cannot hold close().
            _, stuck = await asyncio.wait(
                [task for _, task in tasks], timeout=self._connections.command_timeout
            )
            for role, task in tasks:
                self._report_at_close(role, task, stuck=task in stuck)

    def complete(self) -> None:
        """The end of a close, whatever happened in it: the listener is gone and every hot
        stream completes."""
        self._listener.drop()
        self.book.report_held(force=True)
        for hot in (self._changes, self._gaps, self._positions, self._evidence.stream):
            hot.subject.on_completed()

    def _report_at_close(self, role: str, task: asyncio.Task[None], *, stuck: bool) -> None:
        """Log what a feed task ended with, unless it was reported already (a task that died
        while the store was open was reported, and replaced, when it died)."""
        log = logger.bind(store=self._name, task=role)
        if stuck:
            log.error(
                "store '{}' change feed {} task did not stop within {:g}s of close(); "
                "its connection was terminated",
                self._name,
                role,
                self._connections.command_timeout,
            )
        elif not task.cancelled() and (error := task.exception()) is not None:
            log.bind(error_type=type(error).__name__).opt(exception=error).error(
                "store '{}' change feed {} task had died: {}: {}",
                self._name,
                role,
                type(error).__name__,
                error,
            )

    # ------------------------------------------------------------------ who keeps it alive

    def _spawn(self, role: Role, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"{self._name} change feed {role}")
        self._tasks[role] = task
        task.add_done_callback(functools.partial(self._on_feed_task_done, role))

    def _on_feed_task_done(self, role: Role, task: asyncio.Task[None]) -> None:
        """A feed task ended. While the store is open that is a loss: report it and recover."""
        if self.closing or self._tasks.get(role) is not task:
            return  # close() stopped it, and reports what it has not seen reported
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            reason = f"its {role} task was cancelled from outside the store"
        elif error is None:
            reason = f"its {role} task ended unexpectedly"
        else:
            reason = f"its {role} task died: {type(error).__name__}: {error}"
        self._feed_lost(reason)
        log = logger.bind(store=self._name, task=role, reason=reason).opt(exception=error)
        if task.cancelled():
            # Someone else's decision (often a loop shutting down): do not fight it, say it.
            del self._tasks[role]
            self.book.stopped = True
            log.error(
                "store '{}' change feed lost: {}; it stays down until the store is closed",
                self._name,
                reason,
            )
            return
        delay_index = self.book.consecutive_restarts
        self.book.consecutive_restarts += 1
        self.book.restarts += 1
        log.error("store '{}' change feed lost: {}; restarting it", self._name, reason)
        if role == "dispatch":
            delay = self._backoff[min(delay_index, len(self._backoff) - 1)]
            self._spawn("dispatch", self._dispatch(restart_after=delay))
        else:
            self._listener.drop()
            self._spawn("listener", self._watch_feed(reconnect_from=delay_index))

    def _feed_lost(self, reason: str) -> None:
        """Record a loss of the change feed; the first of a run starts the live queries' bound."""
        self._dispatcher.forget()
        self.book.lost(_now(), reason)
        if self._loss_timer is None and self.outlasted is None and not self.closing:
            self._loss_timer = asyncio.get_running_loop().call_later(
                self.loss_bound, self._loss_outlasted
            )

    def _loss_outlasted(self) -> None:
        """The loss lasted ``feed_loss_bound``: no live query of this store is maintained any
        more, so each ends (a transient error) rather than go on silently stale."""
        self._loss_timer = None
        loss = self.book.loss
        if loss is None or self.closing:
            return
        self.outlasted = outlasted = Outlasted(*loss)
        logger.bind(store=self._name, reason=loss[1]).error(
            "store '{}' change feed lost for more than {:g}s ({}); its live queries end with a "
            "transient error (re-opening reads them afresh)",
            self._name,
            self.loss_bound,
            loss[1],
        )
        self._expired.publish(outlasted)

    def _forget_loss_bound(self) -> None:
        timer, self._loss_timer = self._loss_timer, None
        if timer is not None:
            timer.cancel()
        self.outlasted = None

    def stale_error(self, outlasted: Outlasted) -> StoreError:
        """One live query's own error for ``outlasted`` (never one object raised in many)."""
        return store_error(
            self._name,
            f"store '{self._name}': its change feed has been lost since "
            f"{outlasted.lost_at:%Y-%m-%dT%H:%M:%SZ}, longer than {self.loss_bound:g}s "
            f"(feed_loss_bound): {outlasted.reason}. This live query's view is no longer "
            "maintained; open it again to read it afresh (reopen_on_transient_fault does)",
            sqlstate="08006",
            may_have_run=None,
        )

    def _running(self) -> bool:
        return self._listener.up and all(
            (task := self._tasks.get(role)) is not None and not task.done()
            for role in ("dispatch", "listener")
        )

    def _resume_if_recovered(self) -> None:
        """Declare the gap of the current loss once the feed is whole again (listening and
        dispatching), never while the store is still away."""
        loss = self.book.loss
        if loss is None or self.closing or not self._running():
            return
        lost_at, reason = loss
        gap = ChangeFeedGap(source=self._name, lost_at=lost_at, resumed_at=_now(), reason=reason)
        self.book.resumed()
        self._forget_loss_bound()
        logger.bind(store=self._name, reason=reason).warning(
            "store '{}' change feed resumed after {:.3f}s; declaring a gap",
            self._name,
            (gap.resumed_at - gap.lost_at).total_seconds(),
        )
        self._gaps.publish(gap)
        self._evidence.offer(gap)

    # ------------------------------------------------------------------ the listener and probes

    async def _watch_feed(self, *, reconnect_from: int | None = None) -> None:
        """Heartbeat the listener; on loss re-connect with backoff, re-LISTEN, declare a gap.

        ``reconnect_from``: this task replaces one that died (the loss is recorded already), so
        it re-connects first, starting at that step of the backoff.
        """
        while not self.closing:
            if reconnect_from is None:
                reason = await self._heartbeat_until_lost()
                self._feed_lost(reason)
                self._listener.drop()
                logger.bind(store=self._name, reason=reason).error(
                    "store '{}' change feed lost: {}; re-connecting", self._name, reason
                )
            await self._reconnect_listener(reconnect_from or 0)
            reconnect_from = None
            self._resume_if_recovered()

    async def _reconnect_listener(self, attempt: int) -> None:
        """Re-connect and re-LISTEN with backoff until a probe sent through the pool arrives:
        only a verified feed is whole again (the caller then declares the gap)."""
        while True:
            await asyncio.sleep(self._backoff[min(attempt, len(self._backoff) - 1)])
            attempt += 1
            conn = self._listener.conn
            if conn is None or is_closed(conn):
                try:
                    await self._listener.open()
                except (StoreError, *DRIVER_FAULTS) as exc:
                    logger.bind(store=self._name, attempt=attempt).error(
                        "store '{}' unreachable while re-opening the change feed: {!r}",
                        self._name,
                        exc,
                    )
                    continue
            try:
                problem = await self._verify_delivery()
            except (StoreError, *DRIVER_FAULTS) as exc:
                # The probe could not be sent: the pool does not reach the store yet. Keep the
                # listener and try again; no gap while the store is still away.
                problem = f"the probe could not be sent through the pool: {exc}"
            else:
                if problem is None:
                    return
                self._listener.drop()  # delivered nothing: LISTEN again on a fresh connection
            logger.bind(store=self._name, attempt=attempt).error(
                "store '{}' change feed re-opened but not verified: {}; retrying",
                self._name,
                problem,
            )

    def _next_probe_token(self) -> str:
        self._probe_seq += 1
        return f"{self._probe_instance}.{self._probe_seq}"

    async def _verify_delivery(self) -> str | None:
        """Send a probe NOTIFY through the pool and wait for it on the listener, within
        ``heartbeat_timeout`` from sending to arrival. ``None`` when it arrived (the feed is
        verified: pool -> server -> listener), else why not (it was sent and did not arrive).

        Raises:
            StoreError: the probe could not be sent (mapped at the boundary), or did not leave
                within the time box; it proves nothing either way.
        """
        token = self._next_probe_token()
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._listener.probe_waiters[token] = waiter
        self.book.probes_sent += 1
        started = time.perf_counter()
        try:
            try:
                await self._connections.notify(
                    self._channel,
                    probe_payload(self._prefix, token),
                    (self._heartbeat_timeout, "heartbeat_timeout"),
                )
            except (StoreError, *DRIVER_FAULTS) as exc:
                self.book.probe_failed(f"the probe could not be sent: {exc}", sent=False)
                self._evidence.pool_unsendable(str(exc))
                raise
            left = self._heartbeat_timeout - (time.perf_counter() - started)
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    arrived = await waiter
            except TimeoutError:
                problem = (
                    "a probe NOTIFY sent through the pool did not arrive on the listener "
                    f"({self._connections.listen_name}) within {self._heartbeat_timeout:g}s"
                )
                self.book.probe_failed(problem, sent=True)
                return problem
            self.book.probe_verified(_now(), arrived - started)
            self._evidence.pool_answered(closing=self.closing)
            return None
        finally:
            self._listener.probe_waiters.pop(token, None)

    async def _heartbeat_until_lost(self) -> str:
        """Verify delivery every ``heartbeat_interval`` until the feed is lost; return why.

        Each beat sends a probe NOTIFY through the pool. Arrived: verified (time and round trip
        recorded). Sent but not arrived in time: lost -- notifications stopped reaching the
        listener, whatever its socket says. Not sendable (the pool does not reach the store, or
        is exhausted): it proves nothing, so the listener's own connection is checked with
        ``SELECT 1``; if that fails too the feed is lost, else it is kept (shown unverified).
        """
        while True:
            try:
                async with asyncio.timeout(self._heartbeat_interval):
                    await self._listener.lost.wait()
                return "the listener connection was closed (terminated, restarted or reset)"
            except TimeoutError:
                pass
            conn = self._listener.conn
            if conn is None or conn.is_closed():
                return "the listener connection was closed"
            try:
                problem = await self._verify_delivery()
            except (StoreError, *DRIVER_FAULTS) as exc:
                unsent = f"the probe could not be sent through the pool ({exc})"
                problem = await self._listener.answers(conn, unsent, self._heartbeat_timeout)
                if problem is None and not self.book.unverified_reported:
                    self.book.unverified_reported = True
                    logger.bind(store=self._name).warning(
                        "store '{}' change feed not verified: {}; the listener itself answers, "
                        "so it is kept (health shows it unverified until a probe arrives)",
                        self._name,
                        unsent,
                    )
            if problem is not None:
                conn.terminate()  # a stall gives no other signal; close() would wait on it
                return problem

    async def _dispatch(self, *, restart_after: float | None = None) -> None:
        """Turn queued NOTIFYs into NodeChange and CommitAnnounced, batch by batch.

        It does not die of a batch: a payload that does not parse is counted, logged (WARNING,
        rate-limited) and skipped; any other failure of a batch is logged at ERROR and declared
        as a gap (its changes may not have been delivered), and the next batch goes on.
        ``restart_after``: this task replaces one that died; wait that long, then declare the
        gap of that loss.
        """
        if restart_after is not None:
            await asyncio.sleep(restart_after)
            self._resume_if_recovered()
        while True:
            payloads = await self._dispatcher.next_batch()
            try:
                await self._dispatcher.deliver(payloads)
            except Exception as exc:  # noqa: BLE001 - reported at ERROR and declared as a gap
                self._batch_failed(exc, len(payloads))
            else:
                self.book.consecutive_restarts = 0
            self.book.report_held()

    def _batch_failed(self, exc: Exception, size: int) -> None:
        self.book.failed_batches += 1
        reason = (
            f"a batch of {size} notification(s) could not be delivered: {type(exc).__name__}: {exc}"
        )
        logger.bind(store=self._name, error_type=type(exc).__name__).opt(exception=exc).error(
            "store '{}' change feed: {}; declaring a gap so dependents re-read", self._name, reason
        )
        self._feed_lost(reason)
        self._resume_if_recovered()
