"""Health checks, their report, and a plain ASGI app that serves it (SPEC §8).

The model follows ASP.NET Core's health checks: each registered check returns a status, a
description and data; the report's status is the WORST entry (``UNHEALTHY < DEGRADED < HEALTHY``);
the JSON uses camelCase keys. Checks are tagged: ``"live"`` (is this process alive?) and
``"ready"`` (can it serve?). Checks that depend on the store are readiness checks only: a store
outage must not make an orchestrator restart a healthy process.

A check that raises is reported Unhealthy with the error's type and text (and logged at ERROR);
it never takes the report down and is never swallowed silently.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, Protocol

from loguru import logger

from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation

__all__ = [
    "DEFAULT_MALFORMED_WINDOW",
    "ChangeFeedCheck",
    "ChangeFeedSnapshot",
    "ChangeFeedSource",
    "HealthCheck",
    "HealthCheckResult",
    "HealthRegistry",
    "HealthReport",
    "HealthReportEntry",
    "HealthStatus",
    "LiveRecordCensusCheck",
    "LiveRecordReading",
    "asgi_app",
]

JsonData = Mapping[str, Any]


class HealthStatus(IntEnum):
    """Ordered so that ``min()`` is the worst: ``UNHEALTHY < DEGRADED < HEALTHY``.

    Serialised as ``"Unhealthy"``, ``"Degraded"``, ``"Healthy"`` (``str(status)``).
    """

    UNHEALTHY = 0
    DEGRADED = 1
    HEALTHY = 2

    def __str__(self) -> str:
        return self.name.capitalize()


@dataclass(frozen=True, slots=True)
class HealthCheckResult:
    """What one check says: a status, a sentence, and structured data."""

    status: HealthStatus
    description: str = ""
    data: JsonData = field(default_factory=dict)

    @classmethod
    def healthy(cls, description: str = "", data: JsonData | None = None) -> HealthCheckResult:
        """A HEALTHY result."""
        return cls(HealthStatus.HEALTHY, description, dict(data or {}))

    @classmethod
    def degraded(cls, description: str = "", data: JsonData | None = None) -> HealthCheckResult:
        """A DEGRADED result."""
        return cls(HealthStatus.DEGRADED, description, dict(data or {}))

    @classmethod
    def unhealthy(cls, description: str = "", data: JsonData | None = None) -> HealthCheckResult:
        """An UNHEALTHY result."""
        return cls(HealthStatus.UNHEALTHY, description, dict(data or {}))


HealthCheck = Callable[[], HealthCheckResult | Awaitable[HealthCheckResult]]
"""A check: a callable returning a :class:`HealthCheckResult`, or an awaitable of one."""


@dataclass(frozen=True, slots=True)
class HealthReportEntry:
    """One check's result in a report; ``duration`` in seconds."""

    status: HealthStatus
    description: str
    duration: float
    data: JsonData
    tags: tuple[str, ...]


def _timespan(seconds: float) -> str:
    """ASP.NET's TimeSpan text (``"00:00:00.0012345"``), which health dashboards already read."""
    ticks = round(seconds * 10_000_000)
    whole, fraction = divmod(ticks, 10_000_000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{fraction:07d}"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The result of running the checks: the worst status, how long it took, every entry."""

    status: HealthStatus
    total_duration: float
    entries: Mapping[str, HealthReportEntry]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, camelCase keys; durations as ASP.NET TimeSpan text."""
        return {
            "status": str(self.status),
            "totalDuration": _timespan(self.total_duration),
            "entries": {
                name: {
                    "status": str(entry.status),
                    "description": entry.description,
                    "duration": _timespan(entry.duration),
                    "data": dict(entry.data),
                    "tags": list(entry.tags),
                }
                for name, entry in self.entries.items()
            },
        }

    def to_json(self) -> str:
        """The report as JSON text (values that JSON cannot hold are written with ``str``)."""
        return json.dumps(self.to_dict(), default=str)


@dataclass(frozen=True, slots=True)
class _Registration:
    check: HealthCheck
    tags: tuple[str, ...]
    timeout: float | None


class HealthRegistry:
    """Named health checks, run together into a :class:`HealthReport`.

    Example:
        >>> registry = HealthRegistry()
        >>> registry.register("process", lambda: HealthCheckResult.healthy("up"))
        >>> import asyncio
        >>> str(asyncio.run(registry.report()).status)
        'Healthy'
    """

    def __init__(self) -> None:
        self._checks: dict[str, _Registration] = {}
        self._lock = threading.Lock()
        self._last: dict[frozenset[str] | None, HealthStatus] = {}  # per selection of tags

    def register(
        self,
        name: str,
        check: HealthCheck,
        *,
        tags: Iterable[str] = ("live",),
        timeout: float | None = None,
    ) -> None:
        """Add a check under ``name``.

        Args:
            name: the entry's key in the report; unique.
            check: a callable returning a result, or a coroutine function returning one.
            tags: ``("live",)`` for liveness, ``("ready",)`` for readiness; store-dependent checks
                are readiness checks only.
            timeout: for an asynchronous check, seconds after which it is reported Unhealthy
                (a synchronous check cannot be time-boxed and must not block).

        Raises:
            ValueError: ``name`` is empty or already registered, or ``timeout`` is not > 0.
            TypeError: ``check`` is not callable or ``tags`` is a bare string.
        """
        if not name:
            raise ValueError("a health check needs a name")
        if not callable(check):
            raise TypeError(f"check must be callable, got {type(check).__name__}")
        if isinstance(tags, str):
            raise TypeError(f"tags must be an iterable of strings, not the string {tags!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        with self._lock:
            if name in self._checks:
                raise ValueError(f"a health check named {name!r} is already registered")
            self._checks[name] = _Registration(check, tuple(tags), timeout)

    def unregister(self, name: str) -> None:
        """Remove the check ``name`` (``KeyError`` if there is none)."""
        with self._lock:
            del self._checks[name]

    async def report(self, tags: Iterable[str] | None = None) -> HealthReport:
        """Run the checks (those sharing a tag with ``tags``; all when ``None``) concurrently.

        An empty selection is Healthy. A check that raises or times out is an Unhealthy entry
        naming the error; ``asyncio.CancelledError`` is never caught.
        """
        wanted = None if tags is None else frozenset([tags] if isinstance(tags, str) else tags)
        with self._lock:
            selected = [
                (name, reg)
                for name, reg in self._checks.items()
                if wanted is None or wanted.intersection(reg.tags)
            ]
        started = time.perf_counter()
        results = await asyncio.gather(*(self._run(name, reg) for name, reg in selected))
        total = time.perf_counter() - started
        entries = {name: entry for (name, _), entry in zip(selected, results, strict=True)}
        status = min((e.status for e in entries.values()), default=HealthStatus.HEALTHY)
        with self._lock:
            previous = self._last.get(wanted)
            self._last[wanted] = status
        if _instrumentation.enabled and previous is not status:
            checks = "all" if wanted is None else ",".join(sorted(wanted))
            _instrumentation.emit(
                _events.HealthStatusChanged(
                    previous=None if previous is None else str(previous),
                    status=str(status),
                    checks=checks,
                )
            )
        return HealthReport(status=status, total_duration=total, entries=entries)

    @staticmethod
    async def _run(name: str, reg: _Registration) -> HealthReportEntry:
        started = time.perf_counter()
        deadline: asyncio.Timeout | None = None
        try:
            outcome = reg.check()
            if inspect.isawaitable(outcome):
                async with asyncio.timeout(reg.timeout) as deadline:
                    outcome = await outcome
            if not isinstance(outcome, HealthCheckResult):
                raise TypeError(  # reported like any failing check
                    f"health check {name!r} returned {type(outcome).__name__}, "
                    "not a HealthCheckResult"
                )
            result = outcome
        except TimeoutError as exc:
            if deadline is None or not deadline.expired():
                result = _raised(name, exc)
            else:
                result = HealthCheckResult.unhealthy(
                    f"health check {name!r} gave no answer within {reg.timeout:g}s",
                    {"exception": "TimeoutError"},
                )
                logger.bind(check=name, timeout=reg.timeout).error(
                    "health check {!r} gave no answer within {}s", name, reg.timeout
                )
        except Exception as exc:  # noqa: BLE001 - reported as this entry's Unhealthy text
            result = _raised(name, exc)
        return HealthReportEntry(
            status=result.status,
            description=result.description,
            duration=time.perf_counter() - started,
            data=result.data,
            tags=reg.tags,
        )


def _raised(name: str, exc: Exception) -> HealthCheckResult:
    """The Unhealthy result of a check that raised, logged at ERROR with its traceback."""
    logger.bind(check=name, error_type=type(exc).__name__).opt(exception=exc).error(
        "health check {!r} raised {}: {}", name, type(exc).__name__, exc
    )
    return HealthCheckResult.unhealthy(
        f"health check {name!r} raised {type(exc).__name__}: {exc}",
        {"exception": type(exc).__name__},
    )


# -- the ASGI app ---------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def asgi_app(registry: HealthRegistry, *, tags: Iterable[str] | None = None) -> ASGIApp:
    """A plain ASGI 3 app serving ``registry``'s report as JSON; no web framework needed.

    ``GET``/``HEAD`` answer 200 for Healthy or Degraded and 503 for Unhealthy, with
    ``content-type: application/json`` and ``cache-control: no-store``; other methods get 405.
    Mount it anywhere: ``app.mount("/health", asgi_app(registry))`` in Starlette/FastAPI, or hand
    it to any ASGI server directly (it answers the lifespan protocol too).

    Args:
        registry: the checks to run on each request.
        tags: only the checks sharing one of these tags (e.g. ``("ready",)``); all when ``None``.
    """
    selected = None if tags is None else tuple([tags] if isinstance(tags, str) else tags)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            raise ValueError(f"the health app serves HTTP only, not {kind!r}")
        method = scope.get("method", "GET")
        if method not in {"GET", "HEAD"}:
            await _respond(send, 405, b'{"error":"method not allowed"}', allow=True)
            return
        report = await registry.report(selected)
        code = 503 if report.status is HealthStatus.UNHEALTHY else 200
        body = report.to_json().encode()
        await _respond(send, code, body, head=method == "HEAD")

    return app


async def _respond(
    send: Send, code: int, body: bytes, *, head: bool = False, allow: bool = False
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()),
    ]
    if allow:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


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


class ChangeFeedSource(Protocol):
    """A store whose change feed can be checked (``PostgresStore`` is one)."""

    def feed_statistics(self) -> ChangeFeedSnapshot:
        """The feed's current state and counters."""
        ...


class ChangeFeedCheck:
    """The health check of a store's change feed (LISTEN/NOTIFY, SPEC §11).

    HEALTHY "change feed verified 0.4 s ago, probe round trip 1.2 ms": a probe NOTIFY sent
    through the store's pool arrived on its listener that recently (delivery itself, not just
    the socket). DEGRADED "change feed not verified for 7.3 s: <why the last probe failed>" once
    the last verification is older than the source's ``stale_after``; "change feed lost since
    <time>: <reason>; recovering" while it re-connects or restarts a task (a gap is declared once
    it is back and verified); and "...; N malformed notifications skipped (last at <time>:
    <reason>)" for ``malformed_window`` seconds after the latest payload that did not parse.
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
        last = feed.last_malformed_at
        if last is not None and (now - last).total_seconds() < self._window:
            count = feed.malformed_notifications
            return HealthCheckResult.degraded(
                f"{summary}; {count} malformed notification{'' if count == 1 else 's'} "
                f"skipped (last at {_stamp(last)}: {feed.last_malformed_reason})",
                data,
            )
        return HealthCheckResult.healthy(summary, data)
