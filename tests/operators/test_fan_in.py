"""fan_in: one merged Initial behind a bounded gate, then deltas."""

from __future__ import annotations

from typing import Any

import pytest
import reactivex
from reactivex import Observable, abc, typing
from reactivex.subject import Subject
from reactivex.testing import ReactiveTest, TestScheduler
from reactivex.testing.recorded import Recorded

from rxmesh.exceptions import QueryProviderStalledError, StoreError
from rxmesh.faults import is_standing_watch_transient, is_transient_connect_fault
from rxmesh.model import FrameKind, MeshNode, QueryFrame
from rxmesh.operators import DEFAULT_INITIAL_BUDGET, fan_in
from tests.helpers import LogRecords

on_next = ReactiveTest.on_next
on_error = ReactiveTest.on_error
on_completed = ReactiveTest.on_completed

# TestScheduler.start subscribes at 200; virtual time is in seconds.
SUBSCRIBED = 200.0
BUDGET = 15.0


class TimerTrackingScheduler(TestScheduler):
    """A TestScheduler that remembers every action scheduled, to prove timers are disposed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed_out: list[tuple[Any, abc.DisposableBase]] = []

    def schedule_absolute(
        self,
        duetime: typing.AbsoluteTime,
        action: abc.ScheduledAction[Any],
        state: Any = None,
    ) -> abc.DisposableBase:
        disposable = super().schedule_absolute(duetime, action, state)
        self.handed_out.append((self.to_datetime(duetime), disposable))
        return disposable

    def live_timers(self) -> int:
        """Actions still due in the future and not disposed: what a query would hold."""
        return sum(
            1
            for due, d in self.handed_out
            if due > self.now and not getattr(d, "is_disposed", False)
        )


def node(path: str, version: int = 1) -> MeshNode:
    return MeshNode(path=path, version=version)


def initial(*paths: str, incomplete: bool = False) -> QueryFrame:
    return QueryFrame.initial([node(p) for p in paths], incomplete=incomplete)


def connect_fault() -> StoreError:
    """A DB frame (08001) raised from ConnectionRefusedError: the one rule calls it transient."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise StoreError("could not connect to postgres@db:5432", sqlstate="08001") from exc
    except StoreError as err:
        return err


def kinds(messages: list[Recorded[Any]]) -> list[tuple[float, str]]:
    return [(m.time, m.value.kind) for m in messages]


def test_the_default_budget_is_a_readable_constant() -> None:
    assert DEFAULT_INITIAL_BUDGET == 15.0


def test_a_stalled_provider_faults_the_fan_in_and_names_itself() -> None:
    scheduler = TimerTrackingScheduler()
    a = scheduler.create_cold_observable(on_next(1, initial("p/a")))
    b = scheduler.create_cold_observable(on_next(2, initial("p/b")))
    stuck = scheduler.create_cold_observable()  # never answers

    results = scheduler.start(
        lambda: fan_in(
            {"a": a, "stuck": stuck, "b": b},
            initial_budget=BUDGET,
            query="q",
            scheduler=scheduler,
        ),
        disposed=10_000,
    )

    errors = [m for m in results.messages if m.value.kind == "E"]
    assert [m.time for m in errors] == [SUBSCRIBED + BUDGET]  # exactly once, at the bound
    assert results.messages == errors  # no Initial was emitted: nobody got a partial answer
    error = errors[0].value.exception
    assert isinstance(error, QueryProviderStalledError)
    assert error.providers == ("stuck",)  # exactly those that had not answered
    assert error.budget == BUDGET
    assert error.query == "q"
    assert not isinstance(error, TimeoutError)
    assert not is_transient_connect_fault(error)  # the ladder never retries it
    assert is_standing_watch_transient(error)  # but a standing watch re-opens after it
    # Termination disposed the providers and the timer.
    assert all(s.unsubscribe == SUBSCRIBED + BUDGET for s in a.subscriptions + stuck.subscriptions)
    assert scheduler.live_timers() == 0


def test_the_stall_error_names_every_provider_that_had_not_answered_and_no_other() -> None:
    scheduler = TestScheduler()
    a = scheduler.create_cold_observable(on_next(3, initial("p/a")))
    x = scheduler.create_cold_observable(on_next(BUDGET + 5, initial("p/x")))
    y = scheduler.create_cold_observable()

    results = scheduler.start(
        lambda: fan_in({"y": y, "a": a, "x": x}, initial_budget=BUDGET, scheduler=scheduler)
    )

    assert len(results.messages) == 1
    assert results.messages[0].value.exception.providers == ("y", "x")


def test_two_providers_answering_late_but_inside_the_budget_do_not_fault() -> None:
    scheduler = TimerTrackingScheduler()
    a = scheduler.create_cold_observable(on_next(BUDGET - 1, initial("p/a")))
    b = scheduler.create_cold_observable(
        on_next(BUDGET - 0.5, initial("p/b")),
        on_next(BUDGET + 30, QueryFrame.delta([node("p/c")])),
    )

    results = scheduler.start(
        lambda: fan_in({"a": a, "b": b}, initial_budget=BUDGET, scheduler=scheduler),
        disposed=10_000,
    )

    assert kinds(results.messages) == [
        (SUBSCRIBED + BUDGET - 0.5, "N"),
        (SUBSCRIBED + BUDGET + 30, "N"),
    ]
    merged = results.messages[0].value.value
    assert merged.kind is FrameKind.INITIAL
    assert [n.path for n in merged.nodes] == ["p/a", "p/b"]
    assert merged.silent_providers == ()
    assert merged.snapshot_incomplete is False
    delta = results.messages[1].value.value
    assert delta.kind is FrameKind.DELTA
    assert delta.provider == "b"  # stamped with the provider's name


def test_the_gate_timer_is_disposed_as_soon_as_every_provider_answered() -> None:
    scheduler = TimerTrackingScheduler()
    a: Subject[QueryFrame] = Subject()
    b: Subject[QueryFrame] = Subject()
    seen: list[QueryFrame] = []
    errors: list[Exception] = []

    fan_in({"a": a, "b": b}, initial_budget=BUDGET, scheduler=scheduler).subscribe(
        seen.append, errors.append, scheduler=scheduler
    )
    assert scheduler.live_timers() == 1  # the gate, armed at subscribe
    scheduler.advance_to(3)
    a.on_next(initial("p/a"))
    assert scheduler.live_timers() == 1  # still waiting for b
    scheduler.advance_to(BUDGET - 1)
    b.on_next(initial("p/b"))
    assert scheduler.live_timers() == 0  # a healthy query holds nothing
    scheduler.advance_to(BUDGET + 100)  # and nothing fires later
    assert errors == []
    assert [f.kind for f in seen] == [FrameKind.INITIAL]


def test_a_single_provider_that_answers_passes_its_initial_through() -> None:
    scheduler = TestScheduler()
    only = scheduler.create_cold_observable(on_next(5, initial("p/b", "p/a")), on_completed(6))

    results = scheduler.start(lambda: fan_in({"only": only}, scheduler=scheduler))

    assert kinds(results.messages) == [(205, "N"), (206, "C")]
    assert [n.path for n in results.messages[0].value.value.nodes] == ["p/a", "p/b"]


def test_a_single_provider_that_never_answers_is_named_after_the_default_budget() -> None:
    scheduler = TestScheduler()
    only = scheduler.create_cold_observable()

    results = scheduler.start(lambda: fan_in({"only": only}, scheduler=scheduler))

    assert kinds(results.messages) == [(SUBSCRIBED + DEFAULT_INITIAL_BUDGET, "E")]
    assert results.messages[0].value.exception.providers == ("only",)


def test_a_provider_that_completes_without_an_initial_is_named_silent_not_faulted(
    log_records: LogRecords,
) -> None:
    scheduler = TestScheduler()
    a = scheduler.create_cold_observable(on_next(1, initial("p/a")))
    mute = scheduler.create_cold_observable(on_completed(2))
    results = scheduler.start(
        lambda: fan_in({"a": a, "mute": mute}, query="q", scheduler=scheduler)
    )

    assert kinds(results.messages) == [(202, "N")]
    merged = results.messages[0].value.value
    assert merged.silent_providers == ("mute",)
    assert merged.snapshot_incomplete is True
    assert [n.path for n in merged.nodes] == ["p/a"]
    lines = log_records.lines("WARNING")
    assert any("WARNING" in line and "contract violation" in line for line in lines)


def test_a_provider_whose_initial_is_flagged_incomplete_is_named_silent() -> None:
    scheduler = TestScheduler()
    a = scheduler.create_cold_observable(on_next(1, initial("p/a")))
    partial = scheduler.create_cold_observable(on_next(2, initial("p/b", incomplete=True)))
    results = scheduler.start(lambda: fan_in({"a": a, "partial": partial}, scheduler=scheduler))

    merged = results.messages[0].value.value
    assert merged.silent_providers == ("partial",)
    assert [n.path for n in merged.nodes] == ["p/a", "p/b"]


def test_complete_answers_name_nobody_silent() -> None:
    scheduler = TestScheduler()
    a = scheduler.create_cold_observable(on_next(1, initial("p/a")), on_completed(3))
    b = scheduler.create_cold_observable(on_next(2, initial()), on_completed(4))
    results = scheduler.start(lambda: fan_in({"a": a, "b": b}, scheduler=scheduler))

    assert kinds(results.messages) == [(202, "N"), (204, "C")]  # completes when all completed
    assert results.messages[0].value.value.silent_providers == ()


def test_the_merged_initial_is_deduplicated_by_path_and_ordered_by_path() -> None:
    scheduler = TestScheduler()
    a = scheduler.create_cold_observable(
        on_next(1, QueryFrame.initial([node("p/z"), node("p/m", 1), node("p/a")]))
    )
    b = scheduler.create_cold_observable(
        on_next(2, QueryFrame.initial([node("p/m", 3), node("p/b"), node("p/a")]))
    )
    results = scheduler.start(lambda: fan_in({"a": a, "b": b}, scheduler=scheduler))

    merged = results.messages[0].value.value
    assert [n.path for n in merged.nodes] == ["p/a", "p/b", "p/m", "p/z"]
    assert next(n for n in merged.nodes if n.path == "p/m").version == 3  # newest wins


def test_a_delta_that_arrives_before_the_gate_opens_is_folded_into_the_initial() -> None:
    scheduler = TestScheduler()
    a = scheduler.create_cold_observable(
        on_next(1, initial("p/a", "p/gone")),
        on_next(2, QueryFrame.delta([node("p/new")], removed=["p/gone"])),
    )
    b = scheduler.create_cold_observable(on_next(5, initial("p/b")))
    results = scheduler.start(lambda: fan_in({"a": a, "b": b}, scheduler=scheduler))

    assert kinds(results.messages) == [(205, "N")]  # the delta is not emitted twice
    assert [n.path for n in results.messages[0].value.value.nodes] == ["p/a", "p/b", "p/new"]


def test_the_first_provider_error_terminates_the_merge_exactly_once() -> None:
    scheduler = TimerTrackingScheduler()
    defect = RuntimeError("defect")
    later = RuntimeError("later")
    a = scheduler.create_cold_observable(on_next(1, initial("p/a")), on_error(20, defect))
    b = scheduler.create_cold_observable(on_next(2, initial("p/b")), on_error(25, later))

    results = scheduler.start(lambda: fan_in({"a": a, "b": b}, scheduler=scheduler))

    assert kinds(results.messages) == [(202, "N"), (220, "E")]
    assert results.messages[1].value.exception is defect  # the same object, unwrapped
    assert b.subscriptions[0].unsubscribe == 220  # the sibling is disposed, its error unheard
    assert scheduler.live_timers() == 0


def test_an_error_before_the_gate_terminates_without_an_initial_and_disarms_the_timer() -> None:
    scheduler = TimerTrackingScheduler()
    defect = RuntimeError("defect")
    a = scheduler.create_cold_observable(on_error(3, defect))
    b = scheduler.create_cold_observable()

    results = scheduler.start(
        lambda: fan_in({"a": a, "b": b}, scheduler=scheduler), disposed=10_000
    )

    assert kinds(results.messages) == [(203, "E")]  # no stall error follows at 215
    assert scheduler.live_timers() == 0


def test_a_transient_connect_fault_before_the_initial_is_retried() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    flaky = scheduler.create_cold_observable(on_error(1, fault))
    attempts = 0

    def provider() -> Observable[QueryFrame]:
        # Fails twice, then answers: a cold source that re-runs its work per subscription.
        def subscribe(observer: Any, sched: Any = None) -> Any:
            nonlocal attempts
            attempts += 1
            source = flaky if attempts <= 2 else reactivex.of(initial("p/a"))
            return source.subscribe(observer, scheduler=sched)

        return Observable(subscribe)

    results = scheduler.start(lambda: fan_in({"a": provider()}, scheduler=scheduler))

    assert attempts == 3
    assert len(flaky.subscriptions) == 2
    assert [m.value.kind for m in results.messages] == ["N", "C"]
    # 201 fault -> 0.25 s -> 201.25 subscribe, 202.25 fault -> 0.5 s -> 202.75 answer.
    assert results.messages[0].time == 202.75


def test_a_transient_connect_fault_after_the_initial_is_not_retried() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    a = scheduler.create_cold_observable(on_next(1, initial("p/a")), on_error(4, fault))

    results = scheduler.start(lambda: fan_in({"a": a}, scheduler=scheduler))

    assert len(a.subscriptions) == 1  # a re-subscribe would mint a second Initial
    assert kinds(results.messages) == [(201, "N"), (204, "E")]
    assert results.messages[1].value.exception is fault


def test_a_non_transient_fault_before_the_initial_is_not_retried() -> None:
    scheduler = TestScheduler()
    fault = StoreError("relation does not exist", sqlstate="42P01")
    a = scheduler.create_cold_observable(on_error(1, fault))

    results = scheduler.start(lambda: fan_in({"a": a}, scheduler=scheduler))

    assert len(a.subscriptions) == 1
    assert results.messages[0].value.exception is fault


def test_disposing_the_merge_disposes_the_providers_and_the_timer() -> None:
    scheduler = TimerTrackingScheduler()
    a = scheduler.create_cold_observable()
    results = scheduler.start(
        lambda: fan_in({"a": a}, scheduler=scheduler), created=100, subscribed=200, disposed=205
    )
    scheduler.advance_to(1000)
    assert results.messages == []
    assert a.subscriptions[0].unsubscribe == 205
    assert scheduler.live_timers() == 0


def test_no_providers_is_an_empty_initial_then_completion() -> None:
    frames: list[QueryFrame] = []
    done: list[bool] = []
    fan_in({}, scheduler=TestScheduler()).subscribe(
        frames.append, on_completed=lambda: done.append(True)
    )
    assert [(f.kind, f.nodes, f.silent_providers) for f in frames] == [(FrameKind.INITIAL, (), ())]
    assert done == [True]


@pytest.mark.parametrize("budget", [0, -1.0, float("inf"), float("nan")])
def test_a_budget_that_is_no_bound_is_refused(budget: float) -> None:
    with pytest.raises(ValueError, match="initial_budget"):
        fan_in({}, initial_budget=budget)


def test_a_budget_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(TypeError, match="initial_budget"):
        fan_in({}, initial_budget="15")  # type: ignore[arg-type]
