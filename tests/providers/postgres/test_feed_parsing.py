"""What the change feed accepts from a NOTIFY, and how it reports what it refuses (no server).

Anyone who may connect can ``pg_notify`` on the feed's channel, so a payload is checked field by
field; one that does not parse is skipped and counted, and the WARNING about it is rate-limited.
The end-to-end behaviour (a real NOTIFY, a live query that still sees the next commit) is in
``test_feed_faults.py``; the health check's wording is here, against a fake snapshot.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from rxmesh.health import ChangeFeedCheck, HealthRegistry, HealthStatus
from rxmesh.providers.postgres._book import ChangeFeedState, ChangeFeedStatistics, FeedBook
from rxmesh.providers.postgres._notifications import (
    MalformedNotificationError,
    parse_notification,
    parse_payload,
    parse_probe,
    probe_marker,
    probe_payload,
)
from tests.helpers import LogRecords

PREFIX = "rxtunit_"
SCHEMA = PREFIX + "p"


def _payload(*items: object) -> str:
    return json.dumps(list(items))


MALFORMED: list[tuple[object, str]] = [
    ("hello", "not JSON"),
    ("", "not JSON"),
    ("[" * 3000 + "]" * 3000, "not JSON"),  # deeper than the decoder's recursion limit
    ("9" * 5000, "not JSON"),  # more digits than int() takes
    ("x" * 9000, "characters long"),
    (b"[]", "not text"),
    (None, "not text"),
    ("null", "not a [schema, op, rows, xid] array"),
    ('["x"]', "not a [schema, op, rows, xid] array"),
    ('{"a": 1}', "not a [schema, op, rows, xid] array"),
    (_payload(SCHEMA, "upsert"), "not a [schema, op, rows, xid] array"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], 5, "extra"), "not a [schema, op, rows, xid] array"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], "extra"), "is not a transaction id"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], True), "is not a transaction id"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], None), "is not a transaction id"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], -1), "is not a transaction id"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], 2**63), "is not a transaction id"),
    (_payload(SCHEMA, "upsert", [["p/a", 1]], 5.0), "is not a transaction id"),
    (_payload(7, "upsert", [["p/a", 1]]), "is not one of this store's"),
    (_payload(None, "upsert", [["p/a", 1]]), "is not one of this store's"),
    (_payload("rxmesh_p", "upsert", [["p/a", 1]]), "is not one of this store's"),
    (_payload(PREFIX, "upsert", [["p/a", 1]]), "does not name a valid partition"),
    (_payload(PREFIX + "_sys", "upsert", [["_sys/a", 1]]), "does not name a valid partition"),
    (_payload(PREFIX + "a/b", "upsert", [["a/b", 1]]), "partition"),
    (_payload(SCHEMA, "insert", [["p/a", 1]]), "neither 'upsert' nor 'delete'"),
    (_payload(SCHEMA, None, [["p/a", 1]]), "neither 'upsert' nor 'delete'"),
    (_payload(SCHEMA, ["upsert"], [["p/a", 1]]), "neither 'upsert' nor 'delete'"),
    (_payload(SCHEMA, "upsert", []), "not a non-empty array"),
    (_payload(SCHEMA, "upsert", {"p/a": 1}), "not a non-empty array"),
    (_payload(SCHEMA, "upsert", None), "not a non-empty array"),
    (_payload(SCHEMA, "upsert", ["p/a"]), "not a [path, version] pair"),
    (_payload(SCHEMA, "upsert", [["p/a", 1, 2]]), "not a [path, version] pair"),
    (_payload(SCHEMA, "upsert", [[1, 1]]), "not a valid path"),
    (_payload(SCHEMA, "upsert", [["p//a", 1]]), "not a valid path"),
    (_payload(SCHEMA, "upsert", [["p/../a", 1]]), "not a valid path"),
    (_payload(SCHEMA, "upsert", [["p/" + "x" * 600, 1]]), "not a valid path"),
    (_payload(SCHEMA, "upsert", [["q/a", 1]]), "not in partition"),
    (_payload(SCHEMA, "upsert", [["p/a", True]]), "not an integer"),
    (_payload(SCHEMA, "upsert", [["p/a", "1"]]), "not an integer"),
    (_payload(SCHEMA, "upsert", [["p/a", 1.0]]), "not an integer"),
    (_payload(SCHEMA, "upsert", [["p/a", None]]), "not an integer"),
    ('["rxtunit_p", "upsert", [["p/a", NaN]]]', "not an integer"),
    (_payload(SCHEMA, "upsert", [["p/a", -1]]), "out of range"),
    (_payload(SCHEMA, "upsert", [["p/a", 2**63]]), "out of range"),
    (_payload(SCHEMA, "upsert", [["p/a", 1], ["p/b", "x"]]), "not an integer"),  # one bad row
]


@pytest.mark.parametrize(("payload", "why"), MALFORMED)
def test_a_payload_that_does_not_parse_is_refused_saying_why(payload: object, why: str) -> None:
    with pytest.raises(MalformedNotificationError, match=re.escape(why)) as refused:
        parse_notification(payload, PREFIX)
    assert str(refused.value).isascii()  # any log sink can write it


def test_the_reason_shows_hostile_text_as_ascii_and_short() -> None:
    hostile = _payload(PREFIX + "\u202e" + "x" * 500, "upsert", [["p/a", 1]])
    with pytest.raises(MalformedNotificationError) as refused:
        parse_notification(hostile, PREFIX)
    assert str(refused.value).isascii()
    assert len(str(refused.value)) < 200


def test_the_payloads_the_triggers_send_parse() -> None:
    # Negative control: the shape rxmesh's own triggers send is accepted, every row of it.
    rows = [["p/a", 1], ["p/_access/al", 7]]
    upsert = parse_notification(_payload(SCHEMA, "upsert", rows), PREFIX)
    assert upsert == [(SCHEMA, "p/a", "upsert", 1), (SCHEMA, "p/_access/al", "upsert", 7)]
    assert parse_payload(_payload(SCHEMA, "upsert", rows, 812), PREFIX) == (upsert, 812)
    assert parse_payload(_payload(SCHEMA, "upsert", rows), PREFIX) == (upsert, None)
    delete = parse_notification(_payload(SCHEMA, "delete", [["p", 0]]), PREFIX)
    assert delete == [(SCHEMA, "p", "delete", 0)]
    assert parse_notification(_payload(PREFIX + "Ab.c-1", "upsert", [["Ab.c-1/x", 2]]), PREFIX)


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _malformed_lines(records: LogRecords) -> list[str]:
    return [
        str(r["message"])
        for r in records.at("WARNING")
        if "malformed change-feed notification" in str(r["message"])
    ]


def test_malformed_notifications_are_logged_once_then_summarised_per_interval(
    log_records: LogRecords,
) -> None:
    clock = FakeClock()
    book = FeedBook("s", "c", 60.0, clock)
    for _ in range(5):
        book.malformed("hello", "not JSON")
    book.report_held()
    lines = _malformed_lines(log_records)
    assert len(lines) == 1  # the first one, at once
    assert "not JSON" in lines[0]
    assert "'hello'" in lines[0]

    clock.now += 59.0
    book.malformed("hello", "not JSON")
    book.report_held()
    assert len(_malformed_lines(log_records)) == 1  # still within the interval

    clock.now += 1.0
    book.report_held()  # the dispatcher calls this after every batch
    lines = _malformed_lines(log_records)
    assert len(lines) == 2
    assert "skipped 5 more malformed" in lines[1]
    assert "6 in all" in lines[1]

    clock.now += 600.0
    book.malformed('["x"]', "not a [schema, op, rows] array")
    lines = _malformed_lines(log_records)
    assert len(lines) == 3  # a quiet interval later, a new one is logged in full again
    assert book.snapshot().malformed_notifications == 7
    assert book.snapshot().last_malformed_reason == "not a [schema, op, rows] array"


def test_what_was_held_back_is_summarised_when_forced(log_records: LogRecords) -> None:
    clock = FakeClock()
    book = FeedBook("s", "c", 60.0, clock)
    book.malformed("a", "not JSON")
    book.malformed("b", "not JSON")
    book.report_held()
    assert len(_malformed_lines(log_records)) == 1
    book.report_held(force=True)  # close() does this: nothing counted stays unsaid
    assert "skipped 1 more malformed" in _malformed_lines(log_records)[-1]
    book.report_held(force=True)
    assert len(_malformed_lines(log_records)) == 2  # nothing left to say


# -- the health check ---------------------------------------------------------------------------

NOW = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)


def _feed(**changes: object) -> ChangeFeedStatistics:
    base = ChangeFeedStatistics(
        store="postgres@db:5432/mesh",
        channel="rxmesh_changes",
        state=ChangeFeedState.LISTENING,
        notifications=10,
        malformed_notifications=0,
        last_malformed_at=None,
        last_malformed_reason=None,
        failed_batches=0,
        subscriber_errors=0,
        losses=0,
        restarts=0,
        gaps_declared=0,
        lost_since=None,
        lost_reason=None,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


class FakeSource:
    def __init__(self, feed: ChangeFeedStatistics) -> None:
        self.feed = feed

    def feed_statistics(self) -> ChangeFeedStatistics:
        return self.feed


def _check(feed: ChangeFeedStatistics, window: float = 300.0) -> ChangeFeedCheck:
    return ChangeFeedCheck(FakeSource(feed), malformed_window=window, clock=lambda: NOW)


def test_a_listening_feed_is_healthy_and_names_its_channel() -> None:
    result = _check(_feed())()
    assert result.status is HealthStatus.HEALTHY
    assert result.description == "change feed listening on rxmesh_changes"
    assert result.data["state"] == "listening"
    assert result.data["malformedNotifications"] == 0


def test_a_lost_feed_is_degraded_naming_since_when_and_why() -> None:
    lost = _feed(
        state=ChangeFeedState.LOST,
        lost_since=NOW - timedelta(seconds=3),
        lost_reason="its dispatch task died: RuntimeError: boom",
    )
    result = _check(lost)()
    assert result.status is HealthStatus.DEGRADED
    assert result.description == (
        "change feed lost since 2026-12-01T08:59:57Z: its dispatch task died: RuntimeError: "
        "boom; recovering"
    )
    assert result.data["lostReason"] == "its dispatch task died: RuntimeError: boom"


def test_recent_malformed_notifications_degrade_the_check_for_a_while() -> None:
    recent = _feed(
        malformed_notifications=3,
        last_malformed_at=NOW - timedelta(seconds=10),
        last_malformed_reason="not JSON",
    )
    result = _check(recent)()
    assert result.status is HealthStatus.DEGRADED
    assert result.description == (
        "change feed listening on rxmesh_changes; 3 malformed notifications skipped "
        "(last at 2026-12-01T08:59:50Z: not JSON)"
    )
    # Negative control: once the window has passed, the count stays in the data only.
    old = dataclasses.replace(recent, last_malformed_at=NOW - timedelta(seconds=301))
    later = _check(old)()
    assert later.status is HealthStatus.HEALTHY
    assert later.data["malformedNotifications"] == 3


def test_a_feed_that_will_not_come_back_by_itself_is_unhealthy() -> None:
    stopped = _feed(
        state=ChangeFeedState.STOPPED,
        lost_since=NOW,
        lost_reason="its listener task was cancelled from outside the store",
    )
    assert _check(stopped)().status is HealthStatus.UNHEALTHY
    assert "does not resume by itself" in _check(stopped)().description
    closed = _check(_feed(state=ChangeFeedState.CLOSED))()
    assert closed.status is HealthStatus.UNHEALTHY
    assert closed.description == "change feed closed (the store was closed)"
    waiting = _check(_feed(state=ChangeFeedState.NOT_STARTED))()
    assert waiting.status is HealthStatus.DEGRADED
    assert waiting.description == "change feed not started"


async def test_the_check_reports_camel_case_data_in_a_registry() -> None:
    registry = HealthRegistry()
    registry.register("change-feed", _check(_feed()), tags=("ready",))
    entry = (await registry.report()).to_dict()["entries"]["change-feed"]
    assert entry["status"] == "Healthy"
    assert set(entry["data"]) >= {"store", "channel", "state", "gapsDeclared", "notifications"}


def test_a_negative_malformed_window_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed_window"):
        ChangeFeedCheck(FakeSource(_feed()), malformed_window=-1.0)


# -- delivery probes (issue 14) -------------------------------------------------------------------


def test_a_probe_round_trips_and_begins_with_its_marker() -> None:
    payload = probe_payload(PREFIX, "0123abcd.42")
    assert payload.startswith(probe_marker(PREFIX))
    assert parse_probe(payload, PREFIX) == "0123abcd.42"
    # A probe is never a row change: as data it is refused (the prefix alone names no schema).
    with pytest.raises(MalformedNotificationError, match="does not name a valid partition"):
        parse_notification(payload, PREFIX)


@pytest.mark.parametrize(
    "payload",
    [
        json.dumps([PREFIX, "probe", 42]),
        json.dumps([PREFIX, "probe", "NOT-HEX"]),
        json.dumps([PREFIX, "probe", "ab", "extra"]),
        json.dumps(["rxtother_", "probe", "ab"]),
        json.dumps([PREFIX, "probe", "a" * 300]),
        probe_marker(PREFIX) + "not json",
    ],
)
def test_a_payload_that_only_looks_like_a_probe_is_refused(payload: str) -> None:
    with pytest.raises(MalformedNotificationError, match="not a probe"):
        parse_probe(payload, PREFIX)


def _verified(age: float, round_trip: float = 0.0012, **changes: object) -> ChangeFeedStatistics:
    return _feed(
        verified_at=NOW - timedelta(seconds=age),
        probe_round_trip=round_trip,
        probes_sent=5,
        probes_verified=5,
        stale_after=4.0,
        **changes,
    )


def test_a_verified_feed_is_healthy_saying_how_recently_and_the_round_trip() -> None:
    result = _check(_verified(0.4))()
    assert result.status is HealthStatus.HEALTHY
    assert result.description == "change feed verified 0.4 s ago, probe round trip 1.2 ms"
    assert result.data["verifiedAt"] == "2026-12-01T08:59:59Z"
    assert result.data["probeRoundTripMs"] == 1.2
    assert (result.data["probesMissed"], result.data["probesUnsent"]) == (0, 0)


def test_a_feed_not_verified_for_longer_than_stale_after_is_degraded_naming_why() -> None:
    stale = _verified(7.3, probes_unsent=4, last_probe_failure="the probe could not be sent: x")
    result = _check(stale)()
    assert result.status is HealthStatus.DEGRADED
    assert result.description == (
        "change feed not verified for 7.3 s: the probe could not be sent: x"
    )
    # Negative control: just inside stale_after it is still HEALTHY.
    assert _check(_verified(3.9))().status is HealthStatus.HEALTHY
    never = _check(_feed(stale_after=4.0))()
    assert never.status is HealthStatus.DEGRADED
    assert never.description == "change feed not verified yet: no probe has arrived"


def test_a_feed_whose_start_was_refused_unverified_is_unhealthy_with_the_reason() -> None:
    refused = _feed(
        state=ChangeFeedState.UNVERIFIED,
        lost_since=NOW,
        lost_reason="notifications sent through the pool never reach the LISTEN connection",
    )
    result = _check(refused)()
    assert result.status is HealthStatus.UNHEALTHY
    assert result.description == (
        "change feed unverified: notifications sent through the pool never reach the LISTEN "
        "connection; the store did not start"
    )


def test_malformed_notifications_still_degrade_a_verified_feed() -> None:
    recent = _verified(
        0.2,
        malformed_notifications=1,
        last_malformed_at=NOW - timedelta(seconds=5),
        last_malformed_reason="not JSON",
    )
    result = _check(recent)()
    assert result.status is HealthStatus.DEGRADED
    assert result.description == (
        "change feed verified 0.2 s ago, probe round trip 1.2 ms; 1 malformed notification "
        "skipped (last at 2026-12-01T08:59:55Z: not JSON)"
    )


def test_held_back_evidence_degrades_a_listening_feed_and_says_why() -> None:
    """Issue 32: commits heard while the pool does not answer are held back from the pending
    writes; health says so (at 12da15c only a log line did). Negative control: the same
    verified feed with nothing held is HEALTHY."""
    verified = {"verified_at": NOW, "probe_round_trip": 0.001, "stale_after": 5.0}
    assert _check(_feed(**verified))().status is HealthStatus.HEALTHY
    held = _check(
        _feed(
            **verified,
            evidence_held_since=NOW,
            evidence_held_reason="the probe could not be sent through the pool",
        )
    )()
    assert held.status is HealthStatus.DEGRADED
    assert held.description == (
        "change feed verified 0.0 s ago, probe round trip 1.0 ms; evidence that the store "
        "answers held back since 2026-12-01T09:00:00Z: the probe could not be sent through the "
        "pool; pending writes wait for a probe sent through the pool"
    )
    assert held.data["evidenceHeldReason"] == "the probe could not be sent through the pool"
