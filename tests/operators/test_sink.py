"""``direct_sink``: the ladder operators call the subscriber's own function behind the stopped
check reactivex's ``AutoDetachObserver`` makes (rxmesh/operators/_sink.py).

The first two tests are canaries on the installed reactivex: they fail, saying what changed, if
its ``AutoDetachObserver`` no longer is what the shortcut relies on. The rest check that both
operators deliver exactly what they delivered through ``observer.on_next``.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.observer import AutoDetachObserver
from reactivex.subject import Subject

from rxmesh.operators import reopen_on_transient_fault, retry_transient_connect
from rxmesh.operators._sink import direct_sink


def test_reactivex_wraps_a_subscriber_in_an_auto_detach_observer_holding_its_function() -> None:
    seen: list[tuple[object, object]] = []

    def subscribe(observer: abc.ObserverBase[int], _: abc.SchedulerBase | None = None) -> Any:
        seen.append(direct_sink(observer))
        return None

    def mine(value: int) -> None:
        raise AssertionError("not called")

    Observable(subscribe).subscribe(mine)
    ((owner, sink),) = seen
    assert type(owner) is AutoDetachObserver
    assert sink is mine  # the subscriber's own function: the shortcut is taken


def test_an_auto_detach_observers_on_next_is_the_stopped_check_and_the_call_only() -> None:
    source = textwrap.dedent(inspect.getsource(AutoDetachObserver.on_next))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.FunctionDef)
    statements = [ast.unparse(node) for node in body.body]
    assert statements == ["if self.is_stopped:\n    return", "self._on_next(value)"], (
        "reactivex's AutoDetachObserver.on_next changed: re-check rxmesh/operators/_sink.py"
    )


def test_any_other_observer_is_called_through_its_on_next() -> None:
    """Negative control of the shortcut: it is taken for reactivex's own class only."""

    class Mine(abc.ObserverBase[int]):
        is_stopped = False

        def __init__(self) -> None:
            self._on_next = print  # looks like one, is not one

        def on_next(self, value: int) -> None: ...

        def on_error(self, error: Exception) -> None: ...

        def on_completed(self) -> None: ...

    observer = Mine()
    owner, sink = direct_sink(observer)
    assert sink == observer.on_next and owner is not observer
    assert owner.is_stopped is False


OPERATORS: dict[str, Callable[[Observable[int]], Observable[int]]] = {
    "retry_transient_connect": lambda source: source.pipe(retry_transient_connect()),
    "reopen_on_transient_fault": lambda source: reopen_on_transient_fault(lambda: source),
}


@pytest.mark.parametrize("name", list(OPERATORS))
def test_items_arrive_in_order_and_none_after_the_subscriber_disposed(name: str) -> None:
    subject: Subject[int] = Subject()
    got: list[int] = []
    subscription = OPERATORS[name](subject).subscribe(got.append)
    subject.on_next(1)
    subject.on_next(2)
    subscription.dispose()
    subject.on_next(3)
    assert got == [1, 2]


@pytest.mark.parametrize("name", list(OPERATORS))
def test_a_subscriber_that_disposes_inside_its_on_next_gets_nothing_more(name: str) -> None:
    got: list[int] = []
    holder: list[abc.DisposableBase] = []

    def take(value: int) -> None:
        got.append(value)
        if value == 2:
            holder[0].dispose()

    subject: Subject[int] = Subject()
    holder.append(OPERATORS[name](subject).subscribe(take))
    for value in range(5):
        subject.on_next(value)
    assert got == [0, 1, 2]


@pytest.mark.parametrize("name", list(OPERATORS))
def test_a_synchronous_source_delivers_everything_then_completes(name: str) -> None:
    got: list[int] = []
    done: list[bool] = []
    OPERATORS[name](reactivex.from_iterable(range(100))).subscribe(
        got.append, on_completed=lambda: done.append(True)
    )
    assert got == list(range(100)) and done == [True]
