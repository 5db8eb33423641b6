"""``Ladder.decider`` and ``ReopenLadder.decider``: one run's rule as the drivers ask it,
``decide(fault, emitted)``, each run with its own count."""

from __future__ import annotations

from rxmesh.operators._ladder import Ladder, ReopenLadder
from rxmesh.testing import unreachable_error


def test_a_retry_decider_walks_the_delays_then_gives_up() -> None:
    decide = Ladder.of().decider()
    fault = unreachable_error()
    assert [decide(fault, False) for _ in range(4)] == [0.25, 0.5, 1.0, None]


def test_each_retry_decider_has_its_own_budget() -> None:
    ladder = Ladder.of((1.0,))
    first, second = ladder.decider(), ladder.decider()
    assert first(unreachable_error(), False) == 1.0
    assert second(unreachable_error(), False) == 1.0
    # Negative control: the same decider asked again has spent its one retry.
    assert first(unreachable_error(), False) is None


def test_a_retry_decider_gives_up_after_an_emission_or_on_a_defect() -> None:
    ladder = Ladder.of()
    assert ladder.decider()(unreachable_error(), True) is None
    assert ladder.decider()(ValueError("a defect"), False) is None
    # Control: a transient fault before any item is retried.
    assert ladder.decider()(unreachable_error(), False) == 0.25


def test_a_reopen_decider_walks_the_backoff_then_gives_up() -> None:
    decide = ReopenLadder.of().decider()
    fault = unreachable_error()
    assert [decide(fault, False) for _ in range(6)] == [2, 5, 15, 30, 60, None]


def test_an_emission_resets_the_reopen_count() -> None:
    decide = ReopenLadder.of(max_consecutive=2).decider()
    assert decide(unreachable_error(), False) == 2
    assert decide(unreachable_error(), False) == 5
    assert decide(unreachable_error(), True) == 2  # the opening delivered: n starts again at 1
    assert decide(unreachable_error(), False) == 5
    # Negative control: without an emission the third in a row ends the watch.
    assert decide(unreachable_error(), False) is None


def test_each_reopen_decider_has_its_own_count() -> None:
    schedule = ReopenLadder.of(max_consecutive=1)
    first, second = schedule.decider(), schedule.decider()
    assert first(unreachable_error(), False) == 2
    assert second(unreachable_error(), False) == 2
    assert first(unreachable_error(), False) is None
    assert second(ValueError("a defect"), False) is None
