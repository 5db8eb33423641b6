"""The ``Store`` protocol's shape (its one-shot verbs are coroutines, its streams observables, no
second spelling of a verb) and :func:`rxmesh.providers.observe`, the one adapter from a verb to
an observable: a new attempt per subscription, cancelled on dispose, errors unchanged."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from reactivex import Observable

from rxmesh.aio import first_value, from_async
from rxmesh.faults import is_transient_connect_fault
from rxmesh.model import MeshNode
from rxmesh.operators import retry_transient_connect
from rxmesh.providers import InMemoryStore, PostgresStore, Store, observe
from rxmesh.testing import FaultInjectingStore, unreachable_error

VERBS = ("read", "read_many", "write", "update", "delete", "move")
STREAMS = ("write_many", "query")
FEEDS = ("changes", "gaps", "answers_again")


@pytest.mark.parametrize("kind", [InMemoryStore, PostgresStore, FaultInjectingStore])
def test_every_bundled_store_awaits_its_verbs_and_streams_the_rest(kind: type) -> None:
    for verb in VERBS:
        assert inspect.iscoroutinefunction(getattr(kind, verb)), (kind, verb)
        assert not hasattr(kind, f"a{verb}"), (kind, verb)  # one spelling of each verb
    for stream in STREAMS:
        assert not inspect.iscoroutinefunction(getattr(kind, stream)), (kind, stream)
    for feed in FEEDS:
        assert isinstance(getattr(kind, feed), property), (kind, feed)


async def test_a_bundled_store_is_a_store_and_an_object_without_a_verb_is_not() -> None:
    store = InMemoryStore()
    assert isinstance(store, Store)
    assert isinstance(FaultInjectingStore(store), Store)

    class NoMove:
        """Everything a store has but ``move`` (the negative control)."""

        def __getattr__(self, name: str) -> Any:
            if name == "move":
                raise AttributeError(name)
            return getattr(store, name)

    assert not isinstance(NoMove(), Store)


class _Counted:
    """A verb that counts its attempts: the first ``failures`` fail as an unreachable store."""

    def __init__(self, failures: int = 0) -> None:
        self.attempts = 0
        self.failures = failures
        self.cancelled = 0
        self.release = asyncio.Event()

    async def read(self, path: str) -> MeshNode | None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise unreachable_error("counted")
        return MeshNode(path=path, content={"attempt": self.attempts})

    async def held(self, path: str) -> MeshNode | None:
        self.attempts += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return MeshNode(path=path)


async def test_observe_runs_nothing_before_a_subscription_and_a_new_attempt_per_one() -> None:
    verb = _Counted()
    read = observe(verb.read, "p/a")
    assert verb.attempts == 0
    first = await first_value(read)
    second = await first_value(read)  # the same observable, subscribed again
    assert verb.attempts == 2
    assert first is not None and first.content == {"attempt": 1}
    assert second is not None and second.content == {"attempt": 2}


async def test_observe_lets_a_retry_really_run_the_work_again() -> None:
    verb = _Counted(failures=1)
    found = await first_value(observe(verb.read, "p/a").pipe(retry_transient_connect((0.0,))))
    assert found is not None and found.content == {"attempt": 2}
    assert verb.attempts == 2


async def test_negative_control_one_coroutine_observed_cannot_be_retried() -> None:
    """What ``observe`` avoids: an observable of one coroutine (not of the verb) has no second
    attempt to give a retry, so the retry fails on the spent coroutine."""
    verb = _Counted(failures=1)
    attempt = verb.read("p/a")
    once: Observable[MeshNode | None] = from_async(lambda: attempt)
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        await first_value(once.pipe(retry_transient_connect((0.0,))))
    assert verb.attempts == 1


async def test_observe_delivers_the_verbs_error_unchanged() -> None:
    store = FaultInjectingStore(InMemoryStore())
    store.refuse_reads_as_unreachable()
    with pytest.raises(Exception) as observed:
        await first_value(observe(store.read, "p/a"))
    assert is_transient_connect_fault(observed.value)
    with pytest.raises(Exception) as awaited:
        await store.read("p/a")
    assert type(awaited.value) is type(observed.value)
    assert str(awaited.value) == str(observed.value)


async def test_disposing_an_observed_verb_cancels_its_attempt() -> None:
    verb = _Counted()
    seen: list[Any] = []
    subscription = observe(verb.held, "p/a").subscribe(seen.append, seen.append)
    for _ in range(3):
        await asyncio.sleep(0)  # the attempt starts and waits
    assert verb.attempts == 1
    subscription.dispose()
    for _ in range(3):
        await asyncio.sleep(0)
    assert verb.cancelled == 1
    assert seen == []  # nothing delivered after the dispose


async def test_negative_control_an_observed_verb_left_subscribed_answers() -> None:
    verb = _Counted()
    seen: list[Any] = []
    observe(verb.held, "p/a").subscribe(seen.append, seen.append)
    for _ in range(3):
        await asyncio.sleep(0)
    verb.release.set()
    for _ in range(3):
        await asyncio.sleep(0)
    assert verb.cancelled == 0
    assert [node.path for node in seen] == ["p/a"]


async def test_the_verbs_keyword_arguments_reach_it() -> None:
    store = InMemoryStore()
    row = await store.write(MeshNode(path="p/a", content={"v": 1}, request_id="w"))
    updated = await first_value(
        observe(
            store.update,
            MeshNode(path="p/a", content={"v": 2}),
            expected_version=row.version,
            request_id="u",
        )
    )
    assert updated is not None and updated.request_id == "u" and updated.version == 2
