"""The seam: install/uninstall, the one fast check, isolation from a broken instrument, and
nothing built while nothing is installed."""

from __future__ import annotations

import asyncio

import pytest
from reactivex.testing import TestScheduler

from rxmesh import instrumentation
from rxmesh.health import HealthCheckResult, HealthRegistry, HealthStatus
from rxmesh.instrumentation import _seam
from rxmesh.operators._ladder import Ladder
from rxmesh.testing._fault_store import unreachable_error
from tests.helpers import LogRecords
from tests.instrumentation.conftest import Recorder


class Raising:
    def __init__(self) -> None:
        self.calls = 0

    def on_event(self, event: instrumentation.Event) -> None:
        self.calls += 1
        raise RuntimeError("exporter down")

    def start_operation(self, started: instrumentation.OperationStarted) -> None:
        raise RuntimeError("tracer down")


def test_install_turns_the_fast_check_on_and_the_last_uninstall_turns_it_off() -> None:
    assert _seam.enabled is False
    first, second = Recorder(), Recorder()
    a = instrumentation.install(first)
    b = instrumentation.install(second)
    assert _seam.enabled is True
    assert instrumentation.installed() == (first, second)
    a.uninstall()
    a.uninstall()  # twice is harmless
    assert _seam.enabled is True  # control: one is still installed
    b.uninstall()
    assert _seam.enabled is False
    assert instrumentation.installed() == ()


def test_an_object_without_on_event_is_refused() -> None:
    with pytest.raises(TypeError, match="on_event"):
        instrumentation.install(object())  # type: ignore[arg-type]
    assert _seam.enabled is False


def test_every_installed_instrument_gets_every_event(recorder: Recorder) -> None:
    other = Recorder()
    with instrumentation.install(other):
        instrumentation.emit(instrumentation.LoopStalled(seconds=1.0, gc_seconds=0.0))
    instrumentation.emit(instrumentation.LoopStalled(seconds=2.0, gc_seconds=0.0))
    assert [e.seconds for e in recorder.of(instrumentation.LoopStalled)] == [1.0, 2.0]  # type: ignore[attr-defined]
    assert [e.seconds for e in other.of(instrumentation.LoopStalled)] == [1.0]  # type: ignore[attr-defined]


async def test_an_instrument_that_raises_changes_no_answer_and_is_logged(
    recorder: Recorder, log_records: LogRecords
) -> None:
    failures = [unreachable_error(), unreachable_error()]

    async def work() -> str:
        if failures:
            raise failures.pop()
        return "answer"

    ladder = Ladder.of((0.0, 0.0, 0.0))
    raising = Raising()
    before = instrumentation.statistics().instrument_errors
    with instrumentation.install(raising):
        result = await ladder.call(work)
        with instrumentation.operation("create", request_id="r") as op:
            op.answered("UNAVAILABLE")
    assert result == "answer"
    assert raising.calls == 3  # two retries, one answer: every event reached it and raised
    assert len(recorder.of(instrumentation.RetryScheduled)) == 2  # the other still got them
    assert len(recorder.of(instrumentation.NodeOperationAnswered)) == 1
    assert instrumentation.statistics().instrument_errors - before == 4  # + start_operation
    errors = [r for r in log_records.at("ERROR") if "exporter down" in str(r["message"])]
    assert len(errors) == 3 and errors[0]["extra"]["instrument"] == "Raising"


async def test_a_health_report_is_the_same_with_a_raising_instrument_installed() -> None:
    registry = HealthRegistry()
    registry.register("db", lambda: HealthCheckResult.degraded("slow"))
    plain = await registry.report()
    other = HealthRegistry()
    other.register("db", lambda: HealthCheckResult.degraded("slow"))
    with instrumentation.install(Raising()):
        instrumented = await other.report()
    assert instrumented.status is plain.status is HealthStatus.DEGRADED
    assert [e.description for e in instrumented.entries.values()] == ["slow"]


def _workload() -> None:
    """A little of everything that emits: ladder retries, a re-open schedule, health."""

    async def run() -> None:
        failures = [unreachable_error()]

        async def work() -> int:
            if failures:
                raise failures.pop()
            return 1

        await Ladder.of((0.0,)).call(work)
        registry = HealthRegistry()
        registry.register("x", lambda: HealthCheckResult.healthy())
        await registry.report()
        with instrumentation.operation("create") as op:
            op.answered(None)

    asyncio.run(run())


def test_nothing_installed_builds_no_event_object(built: list[str]) -> None:
    _workload()
    assert built == []


def test_the_event_count_sees_events_when_an_instrument_is_installed(built: list[str]) -> None:
    # Negative control of the count above: the same workload with an instrument builds events.
    with instrumentation.install(Recorder()):
        _workload()
    assert "RetryScheduled" in built and "HealthStatusChanged" in built
    assert "OperationStarted" in built and "NodeOperationAnswered" in built


def test_the_no_op_scope_is_one_shared_object() -> None:
    assert instrumentation.operation("create") is instrumentation.operation("update")
    with instrumentation.install(Recorder()):
        assert instrumentation.operation("create") is not instrumentation.operation("create")


async def test_retries_inside_a_scope_are_its_attempts(recorder: Recorder) -> None:
    failures = [ValueError("not a connect fault"), unreachable_error()]  # popped from the end

    async def work() -> None:
        raise failures.pop()

    with instrumentation.operation("create", request_id="r-1") as op:
        with pytest.raises(ValueError):
            await Ladder.of((0.0, 0.0)).call(work)
        op.answered("UNKNOWN")
        op.answered(None)  # only the first answer counts
    (answered,) = recorder.of(instrumentation.NodeOperationAnswered)
    assert answered.attempts == 2 and answered.reason == "UNKNOWN"  # type: ignore[attr-defined]
    (retry,) = recorder.of(instrumentation.RetryScheduled)
    assert retry.verb == "create" and retry.unreachable is True  # type: ignore[attr-defined]


def test_a_retry_outside_any_scope_has_no_verb(recorder: Recorder) -> None:
    scheduler = TestScheduler()
    import reactivex

    from rxmesh.operators import retry_transient_connect

    attempts = []

    def source(observer, _scheduler=None):  # type: ignore[no-untyped-def]
        attempts.append(1)
        if len(attempts) < 2:
            observer.on_error(unreachable_error())
        else:
            observer.on_next(1)
            observer.on_completed()

    seen: list[int] = []
    reactivex.create(source).pipe(retry_transient_connect((0.5,), scheduler=scheduler)).subscribe(
        seen.append
    )
    scheduler.start()
    assert seen == [1]
    (retry,) = recorder.of(instrumentation.RetryScheduled)
    assert retry.verb is None and retry.unreachable is True and retry.delay == 0.5  # type: ignore[attr-defined]
