"""retry_unreachable_coordination, in virtual time: retry "no answer in time" and
nobody answering (NO_RESPONDERS) only; verdicts, NOT_FOUND included, surface at once."""

from __future__ import annotations

from typing import Any

import pytest
from reactivex import Observable
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.exceptions import (
    BuildCoordinationUnreachableError,
    DeliveryErrorType,
    DeliveryFailure,
    StoreError,
)
from rxmesh.messaging import (
    DEFAULT_COORDINATION_ATTEMPTS,
    DEFAULT_COORDINATION_BACKOFF,
    retry_unreachable_coordination,
)
from tests.helpers import LogRecords

on_next = ReactiveTest.on_next
on_error = ReactiveTest.on_error
on_completed = ReactiveTest.on_completed
subscribe = ReactiveTest.subscribe

ROUTER_TEXT = (
    "Delivery to 'admin/build' failed: Response did not arrive on time in 30s for message "
    "rxmesh.build.BuildClaimRequest (5b1f0c3e9d2a4f7c8e6b1a2d3c4e5f60)"
)


def router_nack() -> DeliveryFailure:
    """The forwarding hop's exact flattened answer."""
    return DeliveryFailure(DeliveryErrorType.FAILED, ROUTER_TEXT)


class Handshake:
    """Hands out cold observables (each failing or answering 1 tick after subscription)."""

    def __init__(self, scheduler: TestScheduler, *outcomes: BaseException | str) -> None:
        self.scheduler = scheduler
        self.outcomes = outcomes
        self.observables: list[Any] = []

    def __call__(self) -> Observable[str]:
        outcome = self.outcomes[min(len(self.observables), len(self.outcomes) - 1)]
        if isinstance(outcome, str):
            cold = self.scheduler.create_cold_observable(on_next(1, outcome), on_completed(1))
        else:
            cold = self.scheduler.create_cold_observable(on_error(1, outcome))
        self.observables.append(cold)
        return cold

    def subscriptions(self) -> list[Any]:
        return [s for cold in self.observables for s in cold.subscriptions]


def errors(messages: list[Any]) -> list[tuple[float, BaseException]]:
    return [(m.time, m.value.exception) for m in messages if m.value.kind == "E"]


def reported_after_three_asks(handshake: Handshake, messages: list[Any], last: Exception) -> str:
    """The text of the one error of a handshake asked at 200, 206 and 222 (5 s, then 15 s after
    each failure) and reported unreachable at 223, caused by the last failure."""
    assert handshake.subscriptions() == [
        subscribe(200, 201),
        subscribe(206, 207),
        subscribe(222, 223),
    ]
    [(time, error)] = errors(messages)
    assert time == 223
    assert isinstance(error, BuildCoordinationUnreachableError)
    assert error.__cause__ is last
    text = str(error)
    assert "admin/build" in text
    assert "3 attempt" in text
    assert "nothing was verified" in text.lower()
    return text


def test_the_defaults_are_three_attempts_after_5_then_15_seconds() -> None:
    assert DEFAULT_COORDINATION_ATTEMPTS == 3
    assert DEFAULT_COORDINATION_BACKOFF == (5.0, 15.0)


def test_the_routers_exact_flattened_text_is_retried_then_reported_unreachable(
    log_records: LogRecords,
) -> None:
    scheduler = TestScheduler()
    last = router_nack()
    handshake = Handshake(scheduler, router_nack(), router_nack(), last)

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    # 200 first ask, NACK at 201; +5 s -> 206, NACK 207; +15 s -> 222, NACK 223.
    reported_after_three_asks(handshake, observer.messages, last)
    assert any(r["level"] == "ERROR" and "admin/build" in r["message"] for r in log_records)
    warnings = [r for r in log_records if r["level"] == "WARNING"]
    assert len(warnings) == 2


def test_an_in_process_timeout_error_is_retried_the_same_way() -> None:
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, TimeoutError("no reply"), TimeoutError("no reply"), "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert observer.messages == [on_next(223, "claim"), on_completed(223)]
    assert len(handshake.subscriptions()) == 3


def test_an_answer_after_one_router_nack_is_delivered() -> None:
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, router_nack(), "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert observer.messages == [on_next(207, "claim"), on_completed(207)]


@pytest.mark.parametrize(
    ("error_type", "text"),
    [
        (DeliveryErrorType.FORBIDDEN, "Access denied"),
        # A verdict quoting the phrase is still a verdict.
        (DeliveryErrorType.FORBIDDEN, "Access denied: Response did not arrive on time"),
        (DeliveryErrorType.NOT_FOUND, "Delivery to 'admin/build' failed: no responders"),
        (DeliveryErrorType.UNAVAILABLE, "Placement operation timed out (quoted)"),
        (DeliveryErrorType.SHUTTING_DOWN, "hub 'admin/build' is shutting down"),
    ],
)
def test_a_nack_carrying_a_verdict_is_not_retried_and_surfaces_unchanged(
    error_type: DeliveryErrorType, text: str
) -> None:
    scheduler = TestScheduler()
    verdict = DeliveryFailure(error_type, text)
    handshake = Handshake(scheduler, verdict, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert errors(observer.messages) == [(201, verdict)]
    assert handshake.subscriptions() == [subscribe(200, 201)]


def test_a_failed_nack_without_the_phrases_is_not_retried() -> None:
    scheduler = TestScheduler()
    failed = DeliveryFailure(DeliveryErrorType.FAILED, "BuildClaimRequest at 'admin/build' failed")
    handshake = Handshake(scheduler, failed, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert errors(observer.messages) == [(201, failed)]
    assert len(handshake.subscriptions()) == 1


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad fingerprint"),
        StoreError("could not connect to postgres@db:5432", sqlstate="08001"),
        RuntimeError("Response did not arrive on time"),  # the phrase outside a FAILED NACK
    ],
)
def test_a_non_timeout_error_surfaces_unchanged_and_is_not_relabelled(error: Exception) -> None:
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, error, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    [(time, surfaced)] = errors(observer.messages)
    assert surfaced is error
    assert not isinstance(surfaced, BuildCoordinationUnreachableError)
    assert time == 201
    assert len(handshake.subscriptions()) == 1


@pytest.mark.parametrize("attempts", [0, -2])
def test_a_zero_attempt_budget_still_runs_once(attempts: int) -> None:
    scheduler = TestScheduler()
    last = router_nack()
    handshake = Handshake(scheduler, last)

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, attempts, scheduler=scheduler)
    )

    assert handshake.subscriptions() == [subscribe(200, 201)]
    [(time, error)] = errors(observer.messages)
    assert time == 201
    assert isinstance(error, BuildCoordinationUnreachableError)
    assert error.__cause__ is last
    assert "1 attempt" in str(error)


def test_a_zero_attempt_budget_still_delivers_an_answer() -> None:
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, 0, scheduler=scheduler)
    )

    assert observer.messages == [on_next(201, "claim"), on_completed(201)]


def test_a_timeout_wrapped_in_an_exception_group_is_retried() -> None:
    scheduler = TestScheduler()
    group = ExceptionGroup("hops", [ValueError("other hop"), TimeoutError("no reply")])
    handshake = Handshake(scheduler, group, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert observer.messages == [on_next(207, "claim"), on_completed(207)]


def test_a_group_without_a_timeout_is_not_retried() -> None:
    scheduler = TestScheduler()
    group = ExceptionGroup("hops", [ValueError("a"), KeyError("b")])
    handshake = Handshake(scheduler, group, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert errors(observer.messages) == [(201, group)]


def test_the_last_backoff_repeats_for_a_larger_budget_and_on_retry_sees_each() -> None:
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, TimeoutError("no reply"))
    seen: list[tuple[BaseException, int, float]] = []

    scheduler.start(
        lambda: retry_unreachable_coordination(
            handshake,
            4,
            (5, 15),
            scheduler=scheduler,
            on_retry=lambda e, a, d: seen.append((e, a, d)),
        )
    )

    assert handshake.subscriptions() == [
        subscribe(200, 201),
        subscribe(206, 207),
        subscribe(222, 223),
        subscribe(238, 239),
    ]
    assert [(a, d) for _, a, d in seen] == [(1, 5.0), (2, 15.0), (3, 15.0)]


def test_disposal_during_the_backoff_cancels_the_retry() -> None:
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, router_nack())

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler), disposed=203
    )

    assert observer.messages == []
    assert handshake.subscriptions() == [subscribe(200, 201)]


def test_a_timeout_after_an_answer_surfaces_unchanged() -> None:
    scheduler = TestScheduler()
    timeout = TimeoutError("late")
    cold = scheduler.create_cold_observable(on_next(1, "claim"), on_error(2, timeout))

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(lambda: cold, scheduler=scheduler)
    )

    assert observer.messages == [on_next(201, "claim"), on_error(202, timeout)]
    assert cold.subscriptions == [subscribe(200, 202)]


def test_a_factory_that_raises_a_timeout_counts_as_an_attempt() -> None:
    scheduler = TestScheduler()
    calls: list[int] = []

    def handshake() -> Observable[str]:
        calls.append(1)
        raise TimeoutError("could not even ask")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, 2, (5,), scheduler=scheduler)
    )

    assert len(calls) == 2
    [(time, error)] = errors(observer.messages)
    assert time == 205
    assert isinstance(error, BuildCoordinationUnreachableError)


# --------------------------------------------------------------------------------------------------
# Nobody answering (issue 13, scenario 6): NATS's "no responders" for a coordinator that is down

NO_RESPONDERS_TEXT = (
    "Delivery to 'admin/build' failed: no responders on NATS subject 'rxmesh.hub.admin.build'"
)
IN_PROCESS_NOT_FOUND_TEXT = (
    "Delivery to 'admin/build' failed: no hub serves that address (in-process)"
)


def nobody_answering() -> DeliveryFailure:
    """What the NATS transport raises when the coordinator's process is down."""
    return DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, NO_RESPONDERS_TEXT)


def test_nobody_answering_is_retried_after_5_then_15_seconds_then_reported_unreachable(
    log_records: LogRecords,
) -> None:
    """A coordinator that is down is not a verdict: re-asked on the same budget, then the
    witness door's error. FAILS against the old code, which surfaced it at 201 unretried."""
    scheduler = TestScheduler()
    last = nobody_answering()
    handshake = Handshake(scheduler, nobody_answering(), nobody_answering(), last)
    seen: list[tuple[BaseException, int, float]] = []

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(
            handshake, scheduler=scheduler, on_retry=lambda e, a, d: seen.append((e, a, d))
        )
    )

    text = reported_after_three_asks(handshake, observer.messages, last)
    assert "nobody answering" in text
    assert "3 with nobody answering" in text
    assert [(a, d) for _, a, d in seen] == [(1, 5.0), (2, 15.0)]
    assert all(
        isinstance(e, DeliveryFailure) and e.error_type is DeliveryErrorType.NO_RESPONDERS
        for e, _, _ in seen
    )
    warnings = [r for r in log_records if r["level"] == "WARNING"]
    assert len(warnings) == 2
    assert all("nobody answering" in r["message"] for r in warnings)
    assert any(r["level"] == "ERROR" and "admin/build" in r["message"] for r in log_records)


def test_the_unreachable_message_counts_what_each_attempt_saw() -> None:
    scheduler = TestScheduler()
    handshake = Handshake(
        scheduler, TimeoutError("no reply"), nobody_answering(), nobody_answering()
    )

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    [(_, error)] = errors(observer.messages)
    assert isinstance(error, BuildCoordinationUnreachableError)
    text = str(error)
    assert "gave no answer in time / nobody answering" in text
    assert "1 with no answer in time, 2 with nobody answering" in text


def test_an_answer_after_nobody_answered_is_delivered() -> None:
    """The coordinator came back (restarted, re-subscribed) before the second ask. FAILS
    against the old code (the first NO_RESPONDERS ended the handshake)."""
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, nobody_answering(), "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert observer.messages == [on_next(207, "claim"), on_completed(207)]
    assert len(handshake.subscriptions()) == 2


def test_nobody_answering_inside_a_wrapper_or_a_group_is_retried() -> None:
    scheduler = TestScheduler()
    wrapped = RuntimeError("claim failed")
    wrapped.__cause__ = nobody_answering()
    group = ExceptionGroup("hops", [ValueError("other hop"), nobody_answering()])
    handshake = Handshake(scheduler, wrapped, group, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert observer.messages == [on_next(223, "claim"), on_completed(223)]


@pytest.mark.parametrize(
    "verdict",
    [
        # The in-process router knows its hubs: its NOT_FOUND is a verdict.
        DeliveryFailure(DeliveryErrorType.NOT_FOUND, IN_PROCESS_NOT_FOUND_TEXT),
        # A NOT_FOUND quoting "no responders" is still a NOT_FOUND (judged by type, not text).
        DeliveryFailure(DeliveryErrorType.NOT_FOUND, NO_RESPONDERS_TEXT),
        # A FAILED NACK quoting "no responders" is a FAILED NACK without the timeout phrases.
        DeliveryFailure(DeliveryErrorType.FAILED, NO_RESPONDERS_TEXT),
    ],
    ids=["in-process-NOT_FOUND", "NOT_FOUND-quoting-no-responders", "FAILED-quoting-it"],
)
def test_a_not_found_verdict_is_still_not_retried(verdict: DeliveryFailure) -> None:
    # Negative control for the NO_RESPONDERS retry.
    scheduler = TestScheduler()
    handshake = Handshake(scheduler, verdict, "claim")

    observer = scheduler.start(
        lambda: retry_unreachable_coordination(handshake, scheduler=scheduler)
    )

    assert errors(observer.messages) == [(201, verdict)]
    assert handshake.subscriptions() == [subscribe(200, 201)]
