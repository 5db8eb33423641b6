"""The change feed's state and counters, and the rate limit of its log lines: the bookkeeping
of :class:`~rxmesh.providers.postgres.PostgresStore`'s change feed, apart from the driver code
(nothing here imports asyncpg or touches a connection).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from loguru import logger

from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.providers.postgres._notifications import _shown
from rxmesh.providers.postgres._throttle import Throttle

__all__ = [
    "DEFAULT_MALFORMED_LOG_INTERVAL",
    "ChangeFeedState",
    "ChangeFeedStatistics",
    "FeedBook",
    "Role",
]

DEFAULT_MALFORMED_LOG_INTERVAL = 60.0
"""Seconds between two WARNING lines about malformed change-feed notifications (the first is
logged at once; the ones in between are counted and summarised)."""


def _now() -> datetime:
    return datetime.now(UTC)


Role = Literal["dispatch", "listener"]


class ChangeFeedState(StrEnum):
    """Where a :class:`PostgresStore`'s change feed stands (``str()`` is the value)."""

    NOT_STARTED = "not started"
    LISTENING = "listening"
    """Whole: LISTENing on a live connection, and the dispatcher running."""
    LOST = "lost"
    """Lost (connection gone or stalled, or a feed task died) and recovering by itself; a
    gap is declared once it is whole again."""
    STOPPED = "stopped"
    """A feed task was cancelled from outside the store: it does not come back by itself."""
    UNVERIFIED = "unverified"
    """``start()`` refused: a probe NOTIFY sent through the pool never reached the LISTEN
    connection (a transaction-pooling proxy or a standby in between); the store did not start."""
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ChangeFeedStatistics:
    """A snapshot of a :class:`PostgresStore`'s change feed (``store.feed_statistics()``).

    Attributes:
        store: the store's name.
        channel: the NOTIFY channel (``<schema_prefix>changes``).
        state: see :class:`ChangeFeedState`.
        notifications: NOTIFYs received on the channel.
        malformed_notifications: payloads that did not parse; each was skipped.
        last_malformed_at: when the latest of those arrived (UTC).
        last_malformed_reason: why it did not parse.
        failed_batches: batches whose delivery failed unexpectedly (each declared a gap).
        subscriber_errors: times a subscriber's ``on_next`` raised (the others still got it).
        losses: times the feed was declared lost (for any reason).
        restarts: feed tasks restarted after they ended unexpectedly.
        gaps_declared: gaps declared, one per recovery.
        lost_since: when the current loss began; ``None`` while the feed is whole.
        lost_reason: why it was lost (the first reason of the current loss).
        verified_at: when a probe NOTIFY sent through the pool last arrived on the listener
            (UTC): delivery itself was verified then, not just the socket.
        probe_round_trip: seconds from sending that probe to its arrival.
        probes_sent: probes sent (at ``start()``, on each heartbeat, after each re-connect).
        probes_verified: probes that arrived within the heartbeat timeout.
        probes_missed: probes that were sent but did not arrive in time (each one a loss).
        probes_unsent: probes that could not be sent through the pool (the store unreachable
            through it, or the pool exhausted); the listener was then checked on its own.
        foreign_probes: probes of other store instances on the same channel (ignored; a probe
            is never counted as a notification, nor as malformed).
        last_probe_failure: why the latest failed probe failed (missed or unsent).
        last_probe_failure_at: when (UTC).
        stale_after: seconds after ``verified_at`` past which the feed counts as unverified
            (``None``: the source does not probe).
        evidence_held_since: when evidence that the store answers (an announced commit, a
            re-opened listener) was first held back because the pool did not answer (UTC);
            ``None`` when nothing is held. Pending writes wait until a probe sent through the
            pool arrives.
        evidence_held_reason: why the pool was known not to answer then.
    """

    store: str
    channel: str
    state: ChangeFeedState
    notifications: int
    malformed_notifications: int
    last_malformed_at: datetime | None
    last_malformed_reason: str | None
    failed_batches: int
    subscriber_errors: int
    losses: int
    restarts: int
    gaps_declared: int
    lost_since: datetime | None
    lost_reason: str | None
    verified_at: datetime | None = None
    probe_round_trip: float | None = None
    probes_sent: int = 0
    probes_verified: int = 0
    probes_missed: int = 0
    probes_unsent: int = 0
    foreign_probes: int = 0
    last_probe_failure: str | None = None
    last_probe_failure_at: datetime | None = None
    stale_after: float | None = None
    evidence_held_since: datetime | None = None
    evidence_held_reason: str | None = None


class FeedBook:
    """The change feed's state and counters (one event loop touches it: no lock)."""

    def __init__(
        self,
        store: str,
        channel: str,
        log_interval: float,
        clock: Callable[[], float],
        stale_after: float | None = None,
    ) -> None:
        self.store = store
        self.channel = channel
        self.log_interval = log_interval
        self.stale_after = stale_after
        self.state = ChangeFeedState.NOT_STARTED
        self.stopped = False
        self.notifications = 0
        self.malformed_count = 0
        self.last_malformed_at: datetime | None = None
        self.last_malformed_reason: str | None = None
        self.failed_batches = 0
        self.subscriber_errors = 0
        self.losses = 0
        self.restarts = 0
        self.consecutive_restarts = 0
        self.gaps = 0
        self.loss: tuple[datetime, str] | None = None
        self.verified_at: datetime | None = None
        self.probe_round_trip: float | None = None
        self.probes_sent = 0
        self.probes_verified = 0
        self.probes_missed = 0
        self.probes_unsent = 0
        self.foreign_probes = 0
        self.last_probe_failure: str | None = None
        self.last_probe_failure_at: datetime | None = None
        self.unverified_reported = False
        """Whether the current run of unsent probes was logged already (once per run)."""
        self._malformed_log = Throttle(log_interval, clock)
        self._subscriber_log = Throttle(log_interval, clock)

    def lost(self, at: datetime, reason: str) -> None:
        """Record a loss; during one already under way, the first time and reason stand."""
        self.losses += 1
        if self.loss is None:
            self.loss = (at, reason)

    def resumed(self) -> None:
        if _instrumentation.enabled and self.loss is not None:
            lost_at, reason = self.loss
            lost = (_now() - lost_at).total_seconds()
            gap = _events.ChangeFeedGapDeclared(store=self.store, lost_seconds=lost, reason=reason)
            _instrumentation.emit(gap)
        self.loss = None
        self.gaps += 1

    def probe_verified(self, at: datetime, round_trip: float) -> None:
        self.probes_verified += 1
        self.verified_at = at
        self.probe_round_trip = round_trip
        self.unverified_reported = False
        if _instrumentation.enabled:
            _instrumentation.emit(_events.ProbeRoundTrip(store=self.store, seconds=round_trip))

    def probe_failed(self, reason: str, *, sent: bool) -> None:
        if sent:
            self.probes_missed += 1
        else:
            self.probes_unsent += 1
        self.last_probe_failure = reason
        self.last_probe_failure_at = _now()

    def malformed(self, payload: object, reason: str) -> None:
        self.malformed_count += 1
        self.last_malformed_at = _now()
        self.last_malformed_reason = reason
        held = self._malformed_log.admit()
        if held is None:
            return
        since = f"{held} more since the last report, " if held else ""
        logger.bind(store=self.store, channel=self.channel, malformed=self.malformed_count).warning(
            "store '{}' skipped a malformed change-feed notification on '{}': {}; payload {} "
            "({}{} skipped in all; reported at most every {:g}s)",
            self.store,
            self.channel,
            reason,
            _shown(payload),
            since,
            self.malformed_count,
            self.log_interval,
        )

    def subscriber_error(self, stream: str, exc: Exception) -> None:
        self.subscriber_errors += 1
        held = self._subscriber_log.admit()
        if held is None:
            return
        since = f"; {held} more since the last report" if held else ""
        logger.bind(store=self.store, stream=stream, error_type=type(exc).__name__).opt(
            exception=exc
        ).error(
            "store '{}': a subscriber of {} raised {}: {}; the other subscribers still got "
            "it ({} in all{})",
            self.store,
            stream,
            type(exc).__name__,
            exc,
            self.subscriber_errors,
            since,
        )

    def report_held(self, *, force: bool = False) -> None:
        """Write the summary lines that are due (``force``: whatever was held back)."""
        if held := self._malformed_log.take_held(force=force):
            logger.bind(
                store=self.store, channel=self.channel, malformed=self.malformed_count
            ).warning(
                "store '{}' skipped {} more malformed change-feed notification(s) on '{}' "
                "since the last report ({} in all; the latest: {})",
                self.store,
                held,
                self.channel,
                self.malformed_count,
                self.last_malformed_reason,
            )
        if held := self._subscriber_log.take_held(force=force):
            logger.bind(store=self.store).error(
                "store '{}': subscribers raised {} more time(s) since the last report ({} in all)",
                self.store,
                held,
                self.subscriber_errors,
            )

    def snapshot(self) -> ChangeFeedStatistics:
        state = self.state
        if state is ChangeFeedState.LISTENING and self.stopped:
            state = ChangeFeedState.STOPPED
        elif state is ChangeFeedState.LISTENING and self.loss is not None:
            state = ChangeFeedState.LOST
        lost_since, lost_reason = self.loss if self.loss is not None else (None, None)
        return ChangeFeedStatistics(
            store=self.store,
            channel=self.channel,
            state=state,
            notifications=self.notifications,
            malformed_notifications=self.malformed_count,
            last_malformed_at=self.last_malformed_at,
            last_malformed_reason=self.last_malformed_reason,
            failed_batches=self.failed_batches,
            subscriber_errors=self.subscriber_errors,
            losses=self.losses,
            restarts=self.restarts,
            gaps_declared=self.gaps,
            lost_since=lost_since,
            lost_reason=lost_reason,
            verified_at=self.verified_at,
            probe_round_trip=self.probe_round_trip,
            probes_sent=self.probes_sent,
            probes_verified=self.probes_verified,
            probes_missed=self.probes_missed,
            probes_unsent=self.probes_unsent,
            foreign_probes=self.foreign_probes,
            last_probe_failure=self.last_probe_failure,
            last_probe_failure_at=self.last_probe_failure_at,
            stale_after=self.stale_after,
        )
