"""The users and small helpers tests share (import them; do not copy them)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, Phase, settings

from rxmesh.model import AccessContext, FrameKind, MeshNode, QueryFrame

if TYPE_CHECKING:  # the root conftest imports this module: it loads no more than it uses
    from pydantic import BaseModel
    from reactivex import Observable

    from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root, wherever the test that asks for it sits."""
BENCH = ROOT / "bench"

ALICE = AccessContext(user="alice")
BOB = AccessContext(user="bob")
CAROL = AccessContext(user="carol")
MALLORY = AccessContext(user="mallory")


def doc(path: str, **content: object) -> MeshNode:
    """A node of type Doc at ``path``: ``content`` if given, else ``{"x": 1}``."""
    return MeshNode(path=path, node_type="Doc", content=content or {"x": 1})


def constructed(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """``body`` as ``model``, built with ``model_construct`` all the way down (no validation): a
    request a caller could build that the mesh must still refuse."""
    fields = dict(body)
    if "access" in fields:
        fields["access"] = AccessContext.model_construct(**fields["access"])
    if "node" in fields:
        fields["node"] = MeshNode.model_construct(**fields["node"])
    if "nodes" in fields:
        fields["nodes"] = tuple(MeshNode.model_construct(**node) for node in fields["nodes"])
    return model.model_construct(**fields)


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded afresh (bench/ holds scripts, not a package): registered in
    ``sys.modules``, where dataclasses look their module up, and with bench/ on ``sys.path`` while
    it loads, for a script that imports another one's measures."""
    spec = importlib.util.spec_from_file_location(f"rxmesh_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def done(step: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that never suspends (a verb of the in-memory store), run here,
    with no loop: for a test on virtual time. Its error is raised unchanged; a coroutine that
    suspends is a test bug, and says so."""
    try:
        step.send(None)
    except StopIteration as finished:
        return finished.value
    step.close()
    raise AssertionError(f"{step!r} suspended: it needs a running loop")


async def until(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    """Poll ``condition`` (a real server's or a background task's state) until it holds, at most
    ``within`` seconds; never a bare sleep for a fixed time."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - state of another's pace, bounded above
            await asyncio.sleep(0.01)


async def answers(
    source: Observable[Any], *, timeout: float = 10.0, settle: float = 0.0
) -> list[Any]:
    """Everything ``source`` emitted, its error included, once it ended (at most ``timeout``
    seconds), and whatever arrives within ``settle`` seconds more: a second answer would land
    there. An operation that answers exactly once gives a one-item list."""
    got: list[Any] = []
    done = asyncio.Event()

    def on_error(exc: Exception) -> None:
        got.append(exc)
        done.set()

    subscription = source.subscribe(got.append, on_error, done.set)
    try:
        await asyncio.wait_for(done.wait(), timeout)
        await asyncio.sleep(settle)
    finally:
        subscription.dispose()
    return got


class Outcomes:
    """Collects the outcomes a ledger publishes from now on; :meth:`wait` bounds the wait."""

    def __init__(self, ledger: PendingWriteLedger) -> None:
        self.got: list[PendingWriteOutcome] = []
        self._arrived = asyncio.Event()
        self._subscription = ledger.outcomes.subscribe(self._on_next)

    def _on_next(self, outcome: PendingWriteOutcome) -> None:
        self.got.append(outcome)
        self._arrived.set()

    async def wait(self, count: int, *, timeout: float = 10.0) -> list[PendingWriteOutcome]:
        """Wait until ``count`` outcomes arrived (at most ``timeout`` seconds), then stop."""
        async with asyncio.timeout(timeout):
            while len(self.got) < count:
                self._arrived.clear()
                await self._arrived.wait()
        self._subscription.dispose()
        return self.got


class LoopTurns:
    """Counts the event loop's turns while it is entered; :meth:`note` tallies the current one.

    A measure of "how much ran in one loop step" in counts, not time: a task that yields once
    a turn runs beside the work, and the work notes the count as it goes."""

    def __init__(self) -> None:
        self.turns = 0
        self.noted: Counter[int] = Counter()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._count())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _count(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turns += 1

    def note(self) -> None:
        self.noted[self.turns] += 1

    def most_in_one_turn(self) -> int:
        return max(self.noted.values())


class LogRecords(list[dict[str, Any]]):
    """Loguru records captured from rxmesh: dicts of ``level`` (its name), ``no`` (its number),
    ``message``, the bound ``extra`` and the logger's ``name``."""

    def at(self, level: str) -> list[dict[str, Any]]:
        """The records logged at ``level`` ("ERROR", "WARNING", ...)."""
        return [r for r in self if r["level"] == level]

    def messages(self, level: str) -> list[str]:
        """The messages logged at ``level``."""
        return [r["message"] for r in self.at(level)]

    def lines(self, at_least: str = "WARNING") -> list[str]:
        """``"<LEVEL> <message>"`` for every record at ``at_least`` or above, in order."""
        from loguru import logger

        floor = logger.level(at_least).no
        return [f"{r['level']} {r['message']}" for r in self if r["no"] >= floor]


def machine_settings(
    examples: int, steps: int, *, scale_variable: str, shrink: bool = True
) -> settings:
    """The settings of a hypothesis state machine of this suite: derandomized, no deadline, no
    example database; the environment variable ``scale_variable`` raises the number of examples
    (a long local run or a soak)."""
    scale = os.environ.get(scale_variable)
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(
        max_examples=int(scale) if scale else examples,
        stateful_step_count=steps,
        derandomize=True,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        print_blob=False,
    )


def fold(view: dict[str, MeshNode], frame: QueryFrame) -> None:
    """What a subscriber does with a frame: an Initial replaces, a Delta applies (removals
    first, then the nodes)."""
    if frame.kind is FrameKind.INITIAL:
        view.clear()
    for path in frame.removed:
        view.pop(path, None)
    for node in frame.nodes:
        view[node.path] = node
