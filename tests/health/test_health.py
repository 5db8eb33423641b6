"""Health (SPEC §8): the worst entry wins, camelCase JSON, a plain ASGI app, the census texts."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from loguru import logger

from rxmesh.health import (
    HealthCheckResult,
    HealthRegistry,
    HealthReport,
    HealthStatus,
    LiveRecordCensusCheck,
    LiveRecordReading,
    asgi_app,
)

BOOT = datetime(2026, 10, 5, 23, 30, 44, tzinfo=UTC)


def ok() -> HealthCheckResult:
    return HealthCheckResult.healthy("fine", {"n": 1})


def slow_down() -> HealthCheckResult:
    return HealthCheckResult.degraded("slow")


def broken() -> HealthCheckResult:
    return HealthCheckResult.unhealthy("down")


def test_the_status_order_makes_the_minimum_the_worst() -> None:
    assert HealthStatus.UNHEALTHY < HealthStatus.DEGRADED < HealthStatus.HEALTHY
    assert [str(s) for s in HealthStatus] == ["Unhealthy", "Degraded", "Healthy"]


@pytest.mark.parametrize(
    ("checks", "expected"),
    [
        ([ok, ok], HealthStatus.HEALTHY),
        ([ok, slow_down, ok], HealthStatus.DEGRADED),
        ([slow_down, broken, ok], HealthStatus.UNHEALTHY),
        ([], HealthStatus.HEALTHY),
    ],
)
async def test_the_worst_entry_wins(checks: list[Any], expected: HealthStatus) -> None:
    registry = HealthRegistry()
    for index, check in enumerate(checks):
        registry.register(f"c{index}", check)
    assert (await registry.report()).status is expected


async def test_the_json_uses_camel_case_keys_and_status_words() -> None:
    registry = HealthRegistry()
    registry.register("store", ok, tags=("ready",))
    report = await registry.report()

    document = json.loads(report.to_json())

    assert set(document) == {"status", "totalDuration", "entries"}
    assert document["status"] == "Healthy"
    entry = document["entries"]["store"]
    assert set(entry) == {"status", "description", "duration", "data", "tags"}
    assert entry == {
        "status": "Healthy",
        "description": "fine",
        "duration": entry["duration"],
        "data": {"n": 1},
        "tags": ["ready"],
    }
    assert entry["duration"].startswith("00:00:")  # ASP.NET TimeSpan text


def test_durations_are_written_as_timespan_text() -> None:
    report = HealthReport(HealthStatus.HEALTHY, total_duration=3723.25, entries={})
    assert report.to_dict()["totalDuration"] == "01:02:03.2500000"


async def test_tags_select_the_checks_that_run() -> None:
    ran: list[str] = []

    def tracked(name: str, result: HealthCheckResult) -> Any:
        def check() -> HealthCheckResult:
            ran.append(name)
            return result

        return check

    registry = HealthRegistry()
    registry.register("process", tracked("process", ok()), tags=("live",))
    registry.register("store", tracked("store", broken()), tags=("ready",))

    live = await registry.report(tags=("live",))
    assert list(live.entries) == ["process"]
    assert live.status is HealthStatus.HEALTHY  # a store outage does not fail liveness
    assert ran == ["process"]

    ready = await registry.report(tags=["ready"])
    assert list(ready.entries) == ["store"]
    assert ready.status is HealthStatus.UNHEALTHY

    everything = await registry.report()
    assert set(everything.entries) == {"process", "store"}


async def test_an_async_check_is_awaited() -> None:
    async def check() -> HealthCheckResult:
        await asyncio.sleep(0)
        return HealthCheckResult.degraded("async and slow")

    registry = HealthRegistry()
    registry.register("async", check)
    report = await registry.report()
    assert report.entries["async"].description == "async and slow"


async def test_an_exception_inside_a_check_is_that_entry_unhealthy_with_the_error_text() -> None:
    def explodes() -> HealthCheckResult:
        raise RuntimeError("catalog table missing")

    registry = HealthRegistry()
    registry.register("explodes", explodes)
    registry.register("fine", ok)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m), level="ERROR", format="{level} {message}")
    logger.enable("rxmesh")
    try:
        report = await registry.report()
    finally:
        logger.disable("rxmesh")
        logger.remove(sink)

    entry = report.entries["explodes"]
    assert entry.status is HealthStatus.UNHEALTHY
    assert "RuntimeError" in entry.description
    assert "catalog table missing" in entry.description
    assert entry.data == {"exception": "RuntimeError"}
    assert report.entries["fine"].status is HealthStatus.HEALTHY  # the others still report
    assert report.status is HealthStatus.UNHEALTHY
    assert any("ERROR" in line and "catalog table missing" in line for line in lines)


async def test_a_check_that_returns_no_result_is_unhealthy_not_ignored() -> None:
    registry = HealthRegistry()
    registry.register("wrong", lambda: None)  # type: ignore[arg-type,return-value]
    entry = (await registry.report()).entries["wrong"]
    assert entry.status is HealthStatus.UNHEALTHY
    assert "NoneType" in entry.description


async def test_an_async_check_past_its_timeout_is_unhealthy() -> None:
    async def hangs() -> HealthCheckResult:
        await asyncio.Event().wait()
        return ok()

    registry = HealthRegistry()
    registry.register("hangs", hangs, tags=("ready",), timeout=0.01)
    report = await asyncio.wait_for(registry.report(), 5)
    assert report.entries["hangs"].status is HealthStatus.UNHEALTHY
    assert "no answer within 0.01s" in report.entries["hangs"].description


async def test_a_timeout_raised_by_the_check_itself_is_reported_as_its_error() -> None:
    async def raises_timeout() -> HealthCheckResult:
        raise TimeoutError("pool acquire timed out")

    registry = HealthRegistry()
    registry.register("pool", raises_timeout, timeout=30)
    entry = (await registry.report()).entries["pool"]
    assert "pool acquire timed out" in entry.description


async def test_cancellation_is_never_swallowed() -> None:
    async def cancelled() -> HealthCheckResult:
        raise asyncio.CancelledError

    registry = HealthRegistry()
    registry.register("c", cancelled)
    with pytest.raises(asyncio.CancelledError):
        await registry.report()


def test_registration_refuses_duplicates_and_bare_string_tags() -> None:
    registry = HealthRegistry()
    registry.register("a", ok)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a", ok)
    with pytest.raises(TypeError, match="tags"):
        registry.register("b", ok, tags="ready")


# -- the ASGI app ---------------------------------------------------------------------------------


async def call(app: Any, method: str = "GET") -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/", "headers": []}
    await asyncio.wait_for(app(scope, receive, send), 5)
    start, body = sent
    assert start["type"] == "http.response.start"
    assert body["type"] == "http.response.body"
    return start["status"], dict(start["headers"]), body["body"]


@pytest.mark.parametrize(
    ("check", "code"),
    [(ok, 200), (slow_down, 200), (broken, 503)],
)
async def test_the_asgi_app_answers_200_unless_unhealthy(check: Any, code: int) -> None:
    registry = HealthRegistry()
    registry.register("only", check)

    status, headers, body = await call(asgi_app(registry))

    assert status == code
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"cache-control"] == b"no-store"
    assert int(headers[b"content-length"]) == len(body)
    document = json.loads(body)
    assert document["status"] == str(check().status)
    assert document["entries"]["only"]["description"] == check().description


async def test_the_asgi_app_serves_only_its_tags() -> None:
    registry = HealthRegistry()
    registry.register("process", ok, tags=("live",))
    registry.register("store", broken, tags=("ready",))

    live_status, _, live_body = await call(asgi_app(registry, tags=("live",)))
    ready_status, _, _ = await call(asgi_app(registry, tags=("ready",)))

    assert live_status == 200
    assert list(json.loads(live_body)["entries"]) == ["process"]
    assert ready_status == 503


async def test_the_asgi_app_answers_head_without_a_body_and_refuses_post() -> None:
    registry = HealthRegistry()
    registry.register("only", ok)
    status, headers, body = await call(asgi_app(registry), "HEAD")
    assert (status, body) == (200, b"")
    assert int(headers[b"content-length"]) > 0
    status, headers, _ = await call(asgi_app(registry), "POST")
    assert status == 405
    assert headers[b"allow"] == b"GET, HEAD"


async def test_the_asgi_app_speaks_the_lifespan_protocol() -> None:
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(asgi_app(HealthRegistry())({"type": "lifespan"}, receive, send), 5)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


# -- the live record census -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = BOOT

    def __call__(self) -> datetime:
        return self.now


def test_the_census_is_healthy_after_a_reading() -> None:
    census = LiveRecordCensusCheck(clock=Clock())
    census.record_live_records(12)
    result = census()
    assert result.status is HealthStatus.HEALTHY
    assert result.description == "LIVE RECORD CENSUS: 12 NodeType records watched"
    assert result.data == {"records": 12, "lastReadingAt": "2026-10-05T23:30:44Z"}


def test_the_census_degrades_on_a_fault_naming_it_and_freezing_the_last_reading() -> None:
    clock = Clock()
    census = LiveRecordCensusCheck(clock=clock)
    census.record_live_records(12)
    clock.now = BOOT + timedelta(minutes=5)
    fault = (
        "ConnectionResetError interrupted the live record census subscription — "
        "re-opening (1/5) in 2s"
    )

    census.record_live_records_fault(fault)

    result = census()
    assert result.status is HealthStatus.DEGRADED
    assert result.description == (
        f"LIVE RECORD CENSUS: {fault}; last reading (12 NodeType records at "
        "2026-10-05T23:30:44Z) is frozen"
    )
    assert result.data["fault"] == fault
    assert result.data["faultAt"] == "2026-10-05T23:35:44Z"


def test_the_next_reading_clears_the_fault() -> None:
    census = LiveRecordCensusCheck(clock=Clock())
    census.record_live_records(12)
    census.record_live_records_fault("StoreError ended the live record census subscription")
    census.record_live_records(LiveRecordReading(records=13, at=BOOT, baked=13))
    result = census()
    assert result.status is HealthStatus.HEALTHY
    assert result.description == "LIVE RECORD CENSUS: 13 NodeType records watched"
    assert "fault" not in result.data
    assert result.data["baked"] == 13


def test_a_fault_before_any_reading_says_so() -> None:
    census = LiveRecordCensusCheck(clock=Clock())
    census.record_live_records_fault("StoreError ended the census")
    result = census()
    assert result.status is HealthStatus.DEGRADED
    assert result.description == (
        "LIVE RECORD CENSUS: StoreError ended the census; no reading was taken before it"
    )


def test_the_census_takes_an_extra_sentence_for_the_fault() -> None:
    census = LiveRecordCensusCheck(clock=Clock())
    census.record_live_records(1)
    census.record_live_records_fault(
        "StoreError interrupted the live record census subscription",
        extra="this process's event loop stalled 3.2 s, ending 0.3 s before this fault — "
        "check this process before the database",
    )
    description = census().description
    assert "event loop stalled 3.2 s" in description
    assert "last reading (1 NodeType record at 2026-10-05T23:30:44Z) is frozen" in description


def test_the_census_without_a_reading_is_not_healthy_yet() -> None:
    result = LiveRecordCensusCheck(clock=Clock())()
    assert result.status is HealthStatus.DEGRADED
    assert "waiting for the first reading" in result.description


async def test_the_census_check_registers_as_a_readiness_check() -> None:
    census = LiveRecordCensusCheck(clock=Clock())
    census.record_live_records(3)
    registry = HealthRegistry()
    registry.register("live-record-census", census, tags=("ready",))
    ready = await registry.report(tags=("ready",))
    assert ready.entries["live-record-census"].description == (
        "LIVE RECORD CENSUS: 3 NodeType records watched"
    )
    assert (await registry.report(tags=("live",))).entries == {}
