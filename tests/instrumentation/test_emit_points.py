"""Each emit point outside the mesh and the ledger reports what happened, and only that."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import reactivex
from reactivex.testing import TestScheduler

from rxmesh import instrumentation as ins
from rxmesh.cache import SyncedQueryCache
from rxmesh.diagnosis import LoopStallMonitor
from rxmesh.health import HealthCheckResult, HealthRegistry
from rxmesh.operators import reopen_on_transient_fault, retry_transient_connect
from rxmesh.operators._ladder import Ladder
from rxmesh.providers import InMemoryStore
from rxmesh.providers.postgres._book import FeedBook
from rxmesh.testing import FaultInjectingStore
from rxmesh.testing._fault_store import connection_reset_error, unreachable_error
from tests.diagnosis.conftest import FakeClock, FakeLoop
from tests.instrumentation.conftest import Recorder


def _failing(errors: list[Exception], then: Any = "ok") -> reactivex.Observable[Any]:
    """Fails with the next of ``errors`` at each subscription, then emits ``then``."""

    def subscribe(observer: Any, scheduler: Any = None) -> Any:
        if errors:
            observer.on_error(errors.pop(0))
        else:
            observer.on_next(then)
            observer.on_completed()

    return reactivex.create(subscribe)


# -- the retry ladder: both drivers -------------------------------------------------------------


async def test_the_coroutine_driver_reports_each_scheduled_retry(recorder: Recorder) -> None:
    errors = [unreachable_error(), unreachable_error()]

    async def work() -> str:
        if errors:
            raise errors.pop(0)
        return "ok"

    assert await Ladder.of((0.0, 0.0, 0.0)).call(work) == "ok"
    retries = recorder.of(ins.RetryScheduled)
    assert [(r.attempt, r.delay, r.error_type, r.unreachable) for r in retries] == [  # type: ignore[attr-defined]
        (1, 0.0, "StoreError", True),
        (2, 0.0, "StoreError", True),
    ]


def test_the_rx_driver_reports_each_scheduled_retry(recorder: Recorder) -> None:
    scheduler = TestScheduler()
    source = _failing([unreachable_error(), unreachable_error()])
    seen: list[Any] = []
    source.pipe(retry_transient_connect((0.25, 0.5), scheduler=scheduler)).subscribe(seen.append)
    scheduler.start()
    assert seen == ["ok"]
    delays = [r.delay for r in recorder.of(ins.RetryScheduled)]  # type: ignore[attr-defined]
    assert delays == [0.25, 0.5]


def test_an_error_the_ladder_does_not_retry_reports_no_retry(recorder: Recorder) -> None:
    # Negative control: a defect is surfaced at once, nothing is "scheduled".
    scheduler = TestScheduler()
    errors: list[Exception] = []
    _failing([ValueError("a defect")]).pipe(
        retry_transient_connect((0.25,), scheduler=scheduler)
    ).subscribe(on_error=errors.append)
    scheduler.start()
    assert len(errors) == 1
    assert recorder.of(ins.RetryScheduled) == []


# -- standing watches ---------------------------------------------------------------------------


def test_a_transient_fault_reports_a_reopen_then_the_spent_budget(recorder: Recorder) -> None:
    scheduler = TestScheduler()
    errors: list[Exception] = []
    watch = reopen_on_transient_fault(
        lambda: reactivex.throw(connection_reset_error()),
        backoff=(1.0, 2.0),
        max_consecutive=2,
        scheduler=scheduler,
    )
    watch.subscribe(on_error=errors.append)
    scheduler.start()
    assert len(errors) == 1
    reopens = recorder.of(ins.WatchReopened)
    assert [(r.reopen, r.delay) for r in reopens] == [(1, 1.0), (2, 2.0)]  # type: ignore[attr-defined]
    (surfaced,) = recorder.of(ins.WatchSurfaced)
    assert surfaced.cause == "budget_spent" and surfaced.reopens == 2  # type: ignore[attr-defined]


def test_a_defect_surfaces_without_a_reopen(recorder: Recorder) -> None:
    errors: list[Exception] = []
    reopen_on_transient_fault(
        lambda: reactivex.throw(ValueError("a defect")), scheduler=TestScheduler()
    ).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert recorder.of(ins.WatchReopened) == []
    (surfaced,) = recorder.of(ins.WatchSurfaced)
    assert surfaced.cause == "not_transient" and surfaced.error_type == "ValueError"  # type: ignore[attr-defined]


# -- the synced-query cache ---------------------------------------------------------------------


def test_the_cache_reports_a_built_chain_and_its_eviction_on_a_fault(recorder: Recorder) -> None:
    scheduler = TestScheduler()
    upstreams: list[reactivex.subject.Subject[int]] = []

    def open_query(query: str) -> reactivex.Observable[int]:
        subject: reactivex.subject.Subject[int] = reactivex.subject.Subject()
        upstreams.append(subject)
        return subject

    cache: SyncedQueryCache[str, int] = SyncedQueryCache(open_query, scheduler=scheduler)
    cache.get("q").subscribe(on_error=lambda e: None)
    cache.get("q").subscribe(on_error=lambda e: None)  # joins the same chain: nothing built
    assert len(recorder.of(ins.CacheChainBuilt)) == 1
    assert recorder.of(ins.CacheChainEvicted) == []  # control: nothing evicted yet
    upstreams[0].on_error(unreachable_error())
    (evicted,) = recorder.of(ins.CacheChainEvicted)
    assert evicted.cause == "fault" and evicted.unreachable is True  # type: ignore[attr-defined]
    assert cache.statistics().evictions == 1
    cache.get("q").subscribe(on_error=lambda e: None)
    upstreams[1].on_completed()
    assert len(recorder.of(ins.CacheChainBuilt)) == 2
    assert [e.cause for e in recorder.of(ins.CacheChainEvicted)] == ["fault", "completed"]  # type: ignore[attr-defined]


# -- the change feed ----------------------------------------------------------------------------


def test_the_feed_book_reports_a_declared_gap_and_a_probe_round_trip(recorder: Recorder) -> None:
    book = FeedBook("pg", "rxmesh_changes", 60.0, FakeClock())
    book.resumed()  # no loss under way: the count moves, but no gap is reported
    assert recorder.of(ins.ChangeFeedGapDeclared) == []
    book.lost(datetime.now(UTC) - timedelta(seconds=4), "listener connection lost")
    book.resumed()
    (gap,) = recorder.of(ins.ChangeFeedGapDeclared)
    assert gap.store == "pg" and gap.reason == "listener connection lost"  # type: ignore[attr-defined]
    assert gap.lost_seconds == pytest.approx(4.0, abs=1.0)  # type: ignore[attr-defined]
    book.probe_verified(datetime.now(UTC), 0.0012)
    (probe,) = recorder.of(ins.ProbeRoundTrip)
    assert probe.store == "pg" and probe.seconds == 0.0012  # type: ignore[attr-defined]


def test_the_embedded_stores_report_their_declared_gaps(recorder: Recorder) -> None:
    FaultInjectingStore(InMemoryStore(), name="drill").declare_gap("restored")
    InMemoryStore(name="mem").declare_gap("restored")
    stores = [g.store for g in recorder.of(ins.ChangeFeedGapDeclared)]  # type: ignore[attr-defined]
    assert stores == ["drill", "mem"]


# -- the loop-stall monitor ---------------------------------------------------------------------


def test_a_loop_stall_is_reported_and_an_on_time_tick_is_not(recorder: Recorder) -> None:
    clock, loop = FakeClock(), FakeLoop()
    monitor = LoopStallMonitor(clock=clock)
    monitor.start(loop=loop)  # type: ignore[arg-type]
    try:
        clock.advance(1.0)
        loop.fire()  # on time
        assert recorder.of(ins.LoopStalled) == []
        clock.advance(1.0 + 3.2)
        loop.fire()
    finally:
        monitor.stop()
    (stall,) = recorder.of(ins.LoopStalled)
    assert stall.seconds == pytest.approx(3.2)  # type: ignore[attr-defined]


# -- health -------------------------------------------------------------------------------------


async def test_health_reports_each_change_of_status_once(recorder: Recorder) -> None:
    healthy, slow = HealthCheckResult.healthy(), HealthCheckResult.degraded("slow")
    results = iter([healthy, slow, slow, healthy, healthy])
    registry = HealthRegistry()
    registry.register("db", lambda: next(results), tags=("ready",))
    for _ in range(4):
        await registry.report()
    changes = recorder.of(ins.HealthStatusChanged)
    assert [(c.previous, c.status, c.checks) for c in changes] == [  # type: ignore[attr-defined]
        (None, "Healthy", "all"),
        ("Healthy", "Degraded", "all"),
        ("Degraded", "Healthy", "all"),
    ]
    await registry.report(("ready",))  # another selection has its own history
    last = recorder.of(ins.HealthStatusChanged)[-1]
    assert (last.previous, last.status, last.checks) == (None, "Healthy", "ready")  # type: ignore[attr-defined]
