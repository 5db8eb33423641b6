"""The health checks rxmesh ships: the live record census, a store's change feed, pending writes.

Public from :mod:`rxmesh.health`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from rxmesh.health._model import HealthCheckResult

__all__ = [
    "DEFAULT_MALFORMED_WINDOW",
    "ChangeFeedCheck",
    "ChangeFeedSnapshot",
    "ChangeFeedSource",
    "LiveRecordCensusCheck",
    "LiveRecordReading",
    "PendingWritesCheck",
    "PendingWritesSource",
]


# -- the live record census check -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveRecordReading:
    """One reading of the live record census: how many NodeType records, when.

    Attributes:
        records: the number of NodeType records watched.
        at: when the reading was taken (UTC).
        baked: how many of them the registry has baked, when known.
    """

    records: int
    at: datetime
    baked: int | None = None


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _records(count: int) -> str:
    return f"{count} NodeType record{'' if count == 1 else 's'}"


class LiveRecordCensusCheck:
    """The health check of the live record census (a standing watch over NodeType records).

    HEALTHY "LIVE RECORD CENSUS: N NodeType records watched" after a reading; DEGRADED while
    interrupted or after a terminal fault, naming the fault and saying the last reading is frozen.
    A reading clears the fault. Before any reading and without a fault it is DEGRADED ("waiting
    for the first reading"). Register it as a readiness check: it depends on the store.

    Args:
        clock: the current time (UTC); injectable for tests.
    """

    PREFIX = "LIVE RECORD CENSUS"

    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._reading: LiveRecordReading | None = None
        self._fault: str | None = None
        self._fault_at: datetime | None = None

    def record_live_records(self, reading: int | LiveRecordReading) -> None:
        """Record a reading (a count, or a full :class:`LiveRecordReading`); clears any fault."""
        if isinstance(reading, bool) or not isinstance(reading, int | LiveRecordReading):
            raise TypeError(f"reading must be a count or a LiveRecordReading, got {reading!r}")
        if isinstance(reading, int):
            reading = LiveRecordReading(records=reading, at=self._clock())
        if reading.records < 0:
            raise ValueError(f"a census cannot count {reading.records} records")
        with self._lock:
            self._reading = reading
            self._fault = None
            self._fault_at = None

    def record_live_records_fault(self, text: str, extra: str | None = None) -> None:
        """Record that the census was interrupted (or ended) by a fault; health degrades.

        Args:
            text: names the fault, e.g. "StoreError interrupted the census subscription —
                re-opening (1/5) in 2s: ... ← ConnectionResetError: ...".
            extra: an optional sentence appended as is (e.g. the event-loop stall adjacency of a
                store-unreachable fault).
        """
        with self._lock:
            self._fault = text if not extra else f"{text}; {extra}"
            self._fault_at = self._clock()

    @property
    def last_reading(self) -> LiveRecordReading | None:
        """The latest reading, or ``None`` before the first."""
        return self._reading

    def __call__(self) -> HealthCheckResult:
        """The census's current health."""
        with self._lock:
            reading, fault, fault_at = self._reading, self._fault, self._fault_at
        data: dict[str, Any] = {}
        if reading is not None:
            data["records"] = reading.records
            data["lastReadingAt"] = _stamp(reading.at)
            if reading.baked is not None:
                data["baked"] = reading.baked
        if fault is not None:
            data["fault"] = fault
            if fault_at is not None:
                data["faultAt"] = _stamp(fault_at)
            if reading is None:
                frozen = "no reading was taken before it"
            else:
                frozen = (
                    f"last reading ({_records(reading.records)} at {_stamp(reading.at)}) is frozen"
                )
            return HealthCheckResult.degraded(f"{self.PREFIX}: {fault}; {frozen}", data)
        if reading is None:
            return HealthCheckResult.degraded(f"{self.PREFIX}: waiting for the first reading", data)
        return HealthCheckResult.healthy(
            f"{self.PREFIX}: {_records(reading.records)} watched", data
        )


# -- the change feed check ------------------------------------------------------------------------

DEFAULT_MALFORMED_WINDOW = 300.0
"""Seconds a change feed's check stays DEGRADED after the latest malformed notification."""


class ChangeFeedSnapshot(Protocol):
    """What :class:`ChangeFeedCheck` reads from a store's change feed (a frozen snapshot, e.g.
    :class:`rxmesh.providers.postgres.ChangeFeedStatistics`).

    ``state`` is one of ``"not started"``, ``"listening"``, ``"lost"`` (recovering by itself),
    ``"stopped"`` (will not recover by itself), ``"unverified"`` (``start()`` refused: probes
    sent through the pool never reached the listener) or ``"closed"``. ``verified_at`` and
    ``probe_round_trip`` say when a delivery probe last arrived and how long it took;
    ``stale_after`` how old that may get before the feed counts as unverified (``None``: the
    source does not probe).
    """

    @property
    def store(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def notifications(self) -> int: ...
    @property
    def malformed_notifications(self) -> int: ...
    @property
    def last_malformed_at(self) -> datetime | None: ...
    @property
    def last_malformed_reason(self) -> str | None: ...
    @property
    def gaps_declared(self) -> int: ...
    @property
    def lost_since(self) -> datetime | None: ...
    @property
    def lost_reason(self) -> str | None: ...
    @property
    def verified_at(self) -> datetime | None: ...
    @property
    def probe_round_trip(self) -> float | None: ...
    @property
    def probes_missed(self) -> int: ...
    @property
    def probes_unsent(self) -> int: ...
    @property
    def last_probe_failure(self) -> str | None: ...
    @property
    def stale_after(self) -> float | None: ...
    @property
    def evidence_held_since(self) -> datetime | None: ...
    @property
    def evidence_held_reason(self) -> str | None: ...


class ChangeFeedSource(Protocol):
    """A store whose change feed can be checked (``PostgresStore`` is one)."""

    def feed_statistics(self) -> ChangeFeedSnapshot:
        """The feed's current state and counters."""
        ...


class ChangeFeedCheck:
    """The health check of a store's change feed (LISTEN/NOTIFY).

    HEALTHY "change feed verified 0.4 s ago, probe round trip 1.2 ms": a probe NOTIFY sent
    through the store's pool arrived on its listener that recently (delivery itself, not just
    the socket). DEGRADED "change feed not verified for 7.3 s: <why the last probe failed>" once
    the last verification is older than the source's ``stale_after``; "change feed lost since
    <time>: <reason>; recovering" while it re-connects or restarts a task (a gap is declared once
    it is back and verified); and "...; N malformed notifications skipped (last at <time>:
    <reason>)" for ``malformed_window`` seconds after the latest payload that did not parse;
    "...; evidence that the store answers held back since <time>: <why>; pending writes wait
    for a probe sent through the pool" while the feed hears commits the pool cannot carry.
    DEGRADED "change feed not started" before the store starts. UNHEALTHY when it will not come
    back by itself: "unverified" (``start()`` refused: probes sent through the pool never reached
    the listener), "stopped" (a feed task was cancelled from outside the store) or "closed".
    A source that does not probe (``stale_after`` is ``None``) is HEALTHY "change feed listening
    on <channel>" while listening. Register it as a readiness check: it depends on the store.

    Example:
        ```python
        registry.register("change-feed", ChangeFeedCheck(store), tags=("ready",))
        ```

    Args:
        source: the store (anything with ``feed_statistics()``).
        malformed_window: seconds to stay DEGRADED after a malformed notification.
        clock: the current time (UTC); injectable for tests.
    """

    def __init__(
        self,
        source: ChangeFeedSource,
        *,
        malformed_window: float = DEFAULT_MALFORMED_WINDOW,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if not malformed_window >= 0:
            raise ValueError(f"malformed_window must be >= 0 seconds, got {malformed_window!r}")
        self._source = source
        self._window = malformed_window
        self._clock = clock or (lambda: datetime.now(UTC))

    def __call__(self) -> HealthCheckResult:
        """The feed's current health."""
        feed = self._source.feed_statistics()
        state = str(feed.state)
        data: dict[str, Any] = {
            "store": feed.store,
            "channel": feed.channel,
            "state": state,
            "notifications": feed.notifications,
            "malformedNotifications": feed.malformed_notifications,
            "gapsDeclared": feed.gaps_declared,
        }
        if feed.last_malformed_at is not None:
            data["lastMalformedAt"] = _stamp(feed.last_malformed_at)
            data["lastMalformedReason"] = feed.last_malformed_reason
        since = "" if feed.lost_since is None else f" since {_stamp(feed.lost_since)}"
        if feed.lost_since is not None:
            data["lostSince"] = _stamp(feed.lost_since)
            data["lostReason"] = feed.lost_reason
        if state == "lost":
            return HealthCheckResult.degraded(
                f"change feed lost{since}: {feed.lost_reason}; recovering", data
            )
        if state == "stopped":
            return HealthCheckResult.unhealthy(
                f"change feed stopped{since}: {feed.lost_reason}; it does not resume by itself",
                data,
            )
        if state == "unverified":
            return HealthCheckResult.unhealthy(
                f"change feed unverified: {feed.lost_reason}; the store did not start", data
            )
        if state == "closed":
            return HealthCheckResult.unhealthy("change feed closed (the store was closed)", data)
        if state != "listening":
            return HealthCheckResult.degraded(f"change feed {state}", data)
        now = self._clock()
        if feed.verified_at is not None:
            data["verifiedAt"] = _stamp(feed.verified_at)
        if feed.probe_round_trip is not None:
            data["probeRoundTripMs"] = round(feed.probe_round_trip * 1000, 3)
        data["probesMissed"] = feed.probes_missed
        data["probesUnsent"] = feed.probes_unsent
        if feed.last_probe_failure is not None:
            data["lastProbeFailure"] = feed.last_probe_failure
        if feed.stale_after is None:
            summary = f"change feed listening on {feed.channel}"
        else:
            age = None if feed.verified_at is None else (now - feed.verified_at).total_seconds()
            if age is None or age > feed.stale_after:
                since = "yet" if age is None else f"for {age:.1f} s"
                why = feed.last_probe_failure or "no probe has arrived"
                return HealthCheckResult.degraded(
                    f"change feed not verified {since}: {why}", data
                )
            round_trip = (feed.probe_round_trip or 0.0) * 1000
            summary = (
                f"change feed verified {max(age, 0.0):.1f} s ago, "
                f"probe round trip {round_trip:.1f} ms"
            )
        if feed.evidence_held_since is not None:
            # The feed hears the store but the pool does not answer: pending writes wait, and
            # an operator needs to know why they are not re-issued although commits arrive.
            held = _stamp(feed.evidence_held_since)
            data["evidenceHeldSince"] = held
            data["evidenceHeldReason"] = feed.evidence_held_reason
            return HealthCheckResult.degraded(
                f"{summary}; evidence that the store answers held back since {held}: "
                f"{feed.evidence_held_reason}; pending writes wait for a probe sent through "
                "the pool",
                data,
            )
        last = feed.last_malformed_at
        if last is not None and (now - last).total_seconds() < self._window:
            count = feed.malformed_notifications
            return HealthCheckResult.degraded(
                f"{summary}; {count} malformed notification{'' if count == 1 else 's'} "
                f"skipped (last at {_stamp(last)}: {feed.last_malformed_reason})",
                data,
            )
        return HealthCheckResult.healthy(summary, data)


# -- the pending writes check ---------------------------------------------------------------------


class PendingWritesSnapshot(Protocol):
    """What :class:`PendingWritesCheck` reads (``rxmesh.ledger.LedgerStatistics`` is one)."""

    @property
    def pending(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def settled(self) -> int: ...
    @property
    def durable_timeouts(self) -> int: ...
    @property
    def journal_fault(self) -> str | None: ...
    @property
    def journal_lost(self) -> bool: ...


class PendingWritesSource(Protocol):
    """A pending-write ledger (``rxmesh.ledger.PendingWriteLedger`` is one)."""

    def statistics(self) -> PendingWritesSnapshot:
        """The ledger's current figures."""
        ...


class PendingWritesCheck:
    """The health check of a pending-write ledger and its journal.

    UNHEALTHY "PENDING WRITES: <why>; writes answered UNAVAILABLE are NOT recorded" once the
    journal's directory was deleted or moved away (it does not come back by itself: restart the
    process with a journal directory that exists). DEGRADED with the same wording while the
    journal's durable step is stuck (a disk or file system that does not answer: a record was
    answered not recorded for it, or it is older than the ledger's ``durable_timeout``, and no
    step has returned since); DEGRADED "PENDING WRITES: N write(s) answered
    UNAVAILABLE wait for the store to answer again" while intents wait for their re-issue;
    otherwise HEALTHY. Register it as a readiness check.

    Example:
        ```python
        registry.register("pending-writes", PendingWritesCheck(mesh.ledger), tags=("ready",))
        ```

    Args:
        ledger: the ledger (anything with ``statistics()``).
    """

    PREFIX = "PENDING WRITES"

    def __init__(self, ledger: PendingWritesSource) -> None:
        self._ledger = ledger

    def __call__(self) -> HealthCheckResult:
        """The ledger's current health."""
        stats = self._ledger.statistics()
        waiting = stats.pending + stats.in_flight
        data: dict[str, Any] = {
            "pending": stats.pending,
            "inFlight": stats.in_flight,
            "settled": stats.settled,
            "durableTimeouts": stats.durable_timeouts,
        }
        fault = stats.journal_fault
        if fault is not None:
            data["journalFault"] = fault
            text = f"{self.PREFIX}: {fault}; writes answered UNAVAILABLE are NOT recorded"
            if stats.journal_lost:
                return HealthCheckResult.unhealthy(text, data)
            return HealthCheckResult.degraded(text, data)
        if waiting:
            return HealthCheckResult.degraded(
                f"{self.PREFIX}: {waiting} write(s) answered UNAVAILABLE wait for the store to "
                "answer again (re-issued once on evidence)",
                data,
            )
        return HealthCheckResult.healthy(
            f"{self.PREFIX}: none waiting ({stats.settled} settled)", data
        )
