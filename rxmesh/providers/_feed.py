"""The change feed's bookkeeping for :class:`~rxmesh.providers.postgres.PostgresStore`: the
parser of NOTIFY payloads (anyone who may connect can NOTIFY on the channel, so nothing is
assumed), the feed's state and counters, and the rate limit of its log lines.

Kept apart from the driver code: nothing here imports asyncpg or touches a connection.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from loguru import logger

from rxmesh._model_rules import PLAIN_PATH
from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.model import MAX_PATH_LENGTH, partition_of, validate_path
from rxmesh.providers._throttle import Throttle

__all__ = [
    "BATCH_SIZE",
    "DEFAULT_MALFORMED_LOG_INTERVAL",
    "PROBE_OP",
    "ChangeFeedState",
    "ChangeFeedStatistics",
    "Entry",
    "FeedBook",
    "MalformedNotificationError",
    "Role",
    "parse_notification",
    "parse_probe",
    "probe_marker",
    "probe_payload",
]

DEFAULT_MALFORMED_LOG_INTERVAL = 60.0
"""Seconds between two WARNING lines about malformed change-feed notifications (the first is
logged at once; the ones in between are counted and summarised)."""


def _now() -> datetime:
    return datetime.now(UTC)


Role = Literal["dispatch", "listener"]
Entry = tuple[str, str, str, int]
"""One changed row a NOTIFY announced: ``(schema, path, op, version)``."""

BATCH_SIZE = 100
"""Payloads taken from the queue per batch (one row fetch per schema per batch)."""
_NOTIFY_MAX_BYTES = 8000
"""PostgreSQL's limit on a NOTIFY payload; a longer one cannot be ours."""
_MAX_VERSION = 2**63 - 1
_OPS = frozenset({"upsert", "delete"})

PROBE_OP = "probe"
"""The op of a delivery probe's payload, ``[<schema_prefix>, "probe", <token>]``: the prefix
alone is never a schema of the store (a partition name is never empty), and "probe" is never an
op of a row change, so a probe cannot be mistaken for one."""
_PROBE_TOKEN = re.compile(r"[0-9a-f]{1,32}(\.[0-9]{1,20})?")


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


class MalformedNotificationError(ValueError):
    """A change-feed payload that does not parse; the message says why."""


def _shown(value: object, limit: int = 100) -> str:
    """``value`` for a log line: ASCII only (any sink can write it), at most ``limit`` chars."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_notification(payload: object, prefix: str) -> list[Entry]:
    """The rows one payload announces: ``[schema, op, [[path, version], ...]]``, all checked.

    Anyone who may connect can NOTIFY on the channel, so nothing is assumed: the schema must be
    one of this store's (``prefix`` + a valid partition), ``op`` ``"upsert"`` or ``"delete"``,
    every path valid and in that partition, every version a non-negative bigint (not a bool).

    Raises:
        MalformedNotificationError: it does not parse; the message says why.
    """
    if not isinstance(payload, str):
        raise MalformedNotificationError(f"the payload is {type(payload).__name__}, not text")
    if len(payload) > _NOTIFY_MAX_BYTES:
        raise MalformedNotificationError(
            f"the payload is {len(payload)} characters long; ours are under {_NOTIFY_MAX_BYTES}"
        )
    try:
        decoded = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise MalformedNotificationError(
            f"not JSON ({type(exc).__name__}: {_shown(str(exc), 80)})"
        ) from None
    if not isinstance(decoded, list) or len(decoded) != 3:
        raise MalformedNotificationError(f"not a [schema, op, rows] array: {_shown(decoded)}")
    schema, op, rows = decoded
    if not isinstance(schema, str) or not schema.startswith(prefix):
        raise MalformedNotificationError(
            f"schema {_shown(schema)} is not one of this store's (prefix {prefix!r})"
        )
    partition = schema[len(prefix) :]
    try:
        validate_path(partition, allow_reserved=False)
    except ValueError:
        raise MalformedNotificationError(
            f"schema {_shown(schema)} does not name a valid partition"
        ) from None
    if "/" in partition:
        raise MalformedNotificationError(f"schema {_shown(schema)} does not name a partition")
    if not isinstance(op, str) or op not in _OPS:
        raise MalformedNotificationError(f"op {_shown(op)} is neither 'upsert' nor 'delete'")
    if not isinstance(rows, list) or not rows:
        raise MalformedNotificationError(f"rows {_shown(rows)} is not a non-empty array")
    entries: list[Entry] = []
    under = partition + "/"
    for row in rows:
        if type(row) is list and len(row) == 2:  # a row as the trigger writes it: one test
            path, version = row
            if (
                type(path) is str
                and path.startswith(under)
                and len(path) <= MAX_PATH_LENGTH
                and PLAIN_PATH.fullmatch(path) is not None
                and type(version) is int
                and 0 <= version <= _MAX_VERSION
            ):
                entries.append((schema, path, op, version))
                continue
        entries.append(_checked_row(row, schema, partition, op))
    return entries


def _checked_row(row: object, schema: str, partition: str, op: str) -> Entry:
    """A row of :func:`parse_notification` judged by the rules one by one (the first broken
    one named): what a row that is not plainly one of ours takes (a system record's path)."""
    if not isinstance(row, list) or len(row) != 2:
        raise MalformedNotificationError(f"row {_shown(row)} is not a [path, version] pair")
    path, version = row
    try:
        validate_path(path)
    except ValueError:
        raise MalformedNotificationError(f"path {_shown(path)} is not a valid path") from None
    if partition_of(path) != partition:
        raise MalformedNotificationError(
            f"path {_shown(path)} is not in partition {partition!r} of its schema"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise MalformedNotificationError(f"version {_shown(version)} is not an integer")
    if not 0 <= version <= _MAX_VERSION:
        raise MalformedNotificationError(f"version {version} is out of range")
    return (schema, path, op, version)


def probe_marker(prefix: str) -> str:
    """How every probe payload of ``prefix`` begins (a cheap test before any JSON is decoded)."""
    return json.dumps([prefix, PROBE_OP])[:-1] + ", "


def probe_payload(prefix: str, token: str) -> str:
    """The payload of a delivery probe: ``[<prefix>, "probe", <token>]``."""
    return json.dumps([prefix, PROBE_OP, token])


def parse_probe(payload: str, prefix: str) -> str:
    """The token of a probe payload of ``prefix`` (see :func:`probe_payload`).

    Raises:
        MalformedNotificationError: it looks like a probe but is not one (it is then counted as
            malformed, like any payload that does not parse).
    """
    try:
        decoded = json.loads(payload) if len(payload) <= 200 else None
    except ValueError:
        decoded = None
    if (
        not isinstance(decoded, list)
        or len(decoded) != 3
        or decoded[:2] != [prefix, PROBE_OP]
        or not isinstance(decoded[2], str)
        or not _PROBE_TOKEN.fullmatch(decoded[2])
    ):
        raise MalformedNotificationError(f"not a probe of this store's channel: {_shown(payload)}")
    return decoded[2]
