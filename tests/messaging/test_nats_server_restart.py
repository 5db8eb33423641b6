"""A private nats-server SIGKILLed and restarted under a caller asking every 50 ms (issue 13).

The hub stays alive throughout; only the server goes away. While it is gone, and until the hub's
connection has re-subscribed, nobody can answer: every failure must be a ``TimeoutError`` (no
answer in time) or a NO_RESPONDERS failure (nobody answering), never a NOT_FOUND verdict for a
hub that exists. Once the hub is back, the requests succeed again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
from rxmesh.faults import is_coordination_unreachable
from rxmesh.messaging import MessageHub, NatsTransport, Router
from tests.messaging._nats_server import PrivateNatsServer, require_nats_server

pytestmark = pytest.mark.nats

TICK = 0.05  # the caller asks every 50 ms ...
ASK_TIMEOUT = 1.0  # ... each ask bounded by 1 s
CALLER_RECONNECT_WAIT = 0.05
# The hub's connection retries more slowly than the caller's, so the caller is back on the
# restarted server before the hub has re-subscribed: the window in which NATS says "no
# responders" for a hub that exists (the issue saw 11 NOT_FOUND verdicts in it).
HUB_RECONNECT_WAIT = 0.5
SUCCESSES_AFTER_RECOVERY = 5
BOUND = 10.0  # every wait in this module is bounded by this many seconds


class Echo(BaseModel):
    text: str


@dataclass
class Connection:
    """Events a NATS connection reports (set by its callbacks)."""

    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    reconnected: asyncio.Event = field(default_factory=asyncio.Event)
    attempt_failed: asyncio.Event = field(default_factory=asyncio.Event)
    errors: list[Exception] = field(default_factory=list)  # nats-py's reports, kept to read

    def options(self, reconnect_wait: float) -> dict[str, Any]:
        async def on_disconnected() -> None:
            self.disconnected.set()

        async def on_reconnected() -> None:
            self.reconnected.set()

        async def on_error(error: Exception) -> None:
            # nats-py reports each failed (re)connect attempt here; the connection retries.
            self.errors.append(error)
            self.attempt_failed.set()

        return {
            "reconnect_time_wait": reconnect_wait,
            "max_reconnect_attempts": -1,
            "disconnected_cb": on_disconnected,
            "reconnected_cb": on_reconnected,
            "error_cb": on_error,
        }


@dataclass
class Outcome:
    launched: float
    result: Echo | BaseException


class Caller:
    """Asks ``svc/echo`` every :data:`TICK` seconds, each ask in its own task."""

    def __init__(self, hub: MessageHub) -> None:
        self.hub = hub
        self.outcomes: list[Outcome] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.recovered_at: float | None = None
        self.first_success = asyncio.Event()
        self.timed_out = asyncio.Event()
        self.recovered = asyncio.Event()

    async def ask(self) -> None:
        loop = asyncio.get_running_loop()
        launched = loop.time()
        try:
            answer = await self.hub.ask(
                "svc/echo", Echo(text="hi"), ASK_TIMEOUT, response_type=Echo
            )
        except (TimeoutError, DeliveryFailure) as exc:  # recorded and judged below
            self.outcomes.append(Outcome(launched, exc))
            if isinstance(exc, TimeoutError):
                self.timed_out.set()
            return
        self.outcomes.append(Outcome(launched, answer))
        self.first_success.set()
        if self.recovered_at is not None:
            after = [
                o
                for o in self.outcomes
                if o.launched >= self.recovered_at and isinstance(o.result, Echo)
            ]
            if len(after) >= SUCCESSES_AFTER_RECOVERY:
                self.recovered.set()

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            task = loop.create_task(self.ask())
            self.tasks.add(task)
            await asyncio.sleep(TICK)  # the caller's cadence, not a wait for an event

    async def settle(self) -> None:
        """Await every ask (each is bounded by ASK_TIMEOUT); an unexpected error propagates."""
        await asyncio.wait_for(asyncio.gather(*self.tasks), BOUND)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[PrivateNatsServer]:
    private = PrivateNatsServer(require_nats_server(), tmp_path)
    await private.start()
    try:
        yield private
    finally:
        await private.kill()


async def test_a_restarted_server_gives_timeouts_and_nobody_answering_never_not_found(
    server: PrivateNatsServer,
) -> None:
    """FAILS against the old code: between the caller's reconnect and the hub's re-subscribe
    NATS answers "no responders", which the old transport mapped to NOT_FOUND."""
    prefix = "rxmesh-restart"
    hub_connection, caller_connection = Connection(), Connection()
    hub_router = Router(
        await NatsTransport.connect(
            server.url, subject_prefix=prefix, **hub_connection.options(HUB_RECONNECT_WAIT)
        )
    )
    caller_router = Router(
        await NatsTransport.connect(
            server.url, subject_prefix=prefix, **caller_connection.options(CALLER_RECONNECT_WAIT)
        )
    )
    stop = asyncio.Event()
    try:
        await MessageHub("svc/echo", hub_router).on(Echo, lambda m, c: m).start()
        caller = Caller(MessageHub("caller", caller_router))
        ticking = asyncio.get_running_loop().create_task(caller.run(stop))
        await asyncio.wait_for(caller.first_success.wait(), BOUND)

        first_ok = min(o.launched for o in caller.outcomes if isinstance(o.result, Echo))
        await server.kill()
        await asyncio.wait_for(caller_connection.disconnected.wait(), BOUND)
        await asyncio.wait_for(hub_connection.disconnected.wait(), BOUND)
        # Stay down until the outage has cost an ask its answer in time (as in the issue) ...
        await asyncio.wait_for(caller.timed_out.wait(), BOUND)
        # ... and restart just after the hub's connection failed an attempt: its next one is
        # HUB_RECONNECT_WAIT away, while the caller's is CALLER_RECONNECT_WAIT away.
        hub_connection.attempt_failed.clear()
        await asyncio.wait_for(hub_connection.attempt_failed.wait(), BOUND)
        await server.start()  # same port
        await asyncio.wait_for(caller_connection.reconnected.wait(), BOUND)
        await asyncio.wait_for(hub_connection.reconnected.wait(), BOUND)  # re-subscribed
        recovered_at = caller.recovered_at = asyncio.get_running_loop().time()
        await asyncio.wait_for(caller.recovered.wait(), BOUND)

        stop.set()
        await asyncio.wait_for(ticking, BOUND)
        await caller.settle()
    finally:
        stop.set()
        await caller_router.close()
        await hub_router.close()

    failures = [o.result for o in caller.outcomes if isinstance(o.result, BaseException)]
    timeouts = [f for f in failures if isinstance(f, TimeoutError)]
    nobody = [
        f
        for f in failures
        if isinstance(f, DeliveryFailure) and f.error_type is DeliveryErrorType.NO_RESPONDERS
    ]
    not_found = [
        f
        for f in failures
        if isinstance(f, DeliveryFailure) and f.error_type is DeliveryErrorType.NOT_FOUND
    ]
    summary = f"{len(timeouts)} timeouts, {len(nobody)} no responders, {len(not_found)} NOT_FOUND"
    assert not_found == [], summary
    assert len(timeouts) + len(nobody) == len(failures), [repr(f) for f in failures]
    assert all(is_coordination_unreachable(f) for f in failures)
    # The scenario happened: the outage cost answers, and the window of "no responders" for a
    # hub that exists was hit (else this test would prove nothing about the mapping).
    assert failures, summary
    assert nobody, summary
    assert all(isinstance(o.result, Echo) for o in caller.outcomes if o.launched < first_ok)
    # After the hub re-subscribed, every ask succeeded.
    after = [o for o in caller.outcomes if o.launched >= recovered_at]
    assert len(after) >= SUCCESSES_AFTER_RECOVERY
    assert all(isinstance(o.result, Echo) for o in after), [repr(o.result) for o in after]
