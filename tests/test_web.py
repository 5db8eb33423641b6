"""rxmesh.web.EventStream: a live stream as Server-Sent Events, called as an ASGI server calls it.

Fail at 1d389e8 because rxmesh.web did not exist (no SSE serving of a live stream). Under real
uvicorn and Starlette/FastAPI: tests/examples/test_service.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest
from reactivex.subject import Subject

from rxmesh import Mesh
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import NodeQuery, QueryFrame
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import connection_reset_error
from rxmesh.web import EventStream
from tests.helpers import ALICE, doc

QUERY = NodeQuery(partition="acme", node_type="Doc")


class Client:
    """The server's side of one request: what was sent, a disconnect, a send that can block."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = asyncio.Event()
        self.open_gate = asyncio.Event()
        self.open_gate.set()
        self.held = 0
        self.changed = asyncio.Condition()

    async def receive(self) -> MutableMapping[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if not self.open_gate.is_set():
            self.held += 1
            async with self.changed:
                self.changed.notify_all()
        await self.open_gate.wait()
        self.sent.append(message)
        async with self.changed:
            self.changed.notify_all()

    @property
    def text(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent[1:]).decode()

    def blocks(self) -> list[str]:
        return [b for b in self.text.split("\n\n") if b]

    def events(self) -> list[dict[str, str]]:
        found = []
        for block in self.blocks():
            fields = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
            if "event" in fields:
                found.append(fields)
        return found

    async def until(self, predicate: Any) -> None:
        async with asyncio.timeout(5), self.changed:
            await self.changed.wait_for(lambda: predicate(self))

    @property
    def ended(self) -> bool:
        return bool(self.sent) and self.sent[-1].get("more_body") is False


async def subscribed(source: Subject[QueryFrame]) -> None:
    async with asyncio.timeout(5):
        while not source.observers:  # noqa: ASYNC110 - a Subject signals no subscription
            await asyncio.sleep(0)


def serve(app: EventStream, client: Client, last_event_id: str | None = None) -> asyncio.Task[None]:
    headers = [] if last_event_id is None else [(b"last-event-id", last_event_id.encode())]
    scope = {"type": "http", "method": "GET", "path": "/live", "headers": headers}
    return asyncio.ensure_future(app(scope, client.receive, client.send))


async def test_each_frame_is_one_event_with_its_token_its_kind_and_json() -> None:
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await mesh.create(doc("acme/a"), access=ALICE)
    client = Client()
    task = serve(EventStream(mesh.watch(QUERY)), client)
    await client.until(lambda c: len(c.events()) == 1)
    await mesh.create(doc("acme/b"), access=ALICE)
    await client.until(lambda c: len(c.events()) == 2)
    start = client.sent[0]
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert client.blocks()[0] == "retry: 3000"
    first, second = client.events()
    assert (first["event"], second["event"]) == ("INITIAL", "DELTA")
    frames = [QueryFrame.model_validate_json(e["data"]) for e in (first, second)]
    assert [first["id"], second["id"]] == [f.resume_token for f in frames]  # the event id
    assert len({first["id"], second["id"]}) == 2
    assert [n.path for n in QueryFrame.model_validate_json(first["data"]).nodes] == ["acme/a"]
    assert [n.path for n in QueryFrame.model_validate_json(second["data"]).nodes] == ["acme/b"]
    client.gone.set()
    async with asyncio.timeout(5):
        await task
    mesh.dispose()


async def test_a_disconnect_disposes_the_subscription() -> None:
    source: Subject[QueryFrame] = Subject()
    client = Client()
    task = serve(EventStream(source, heartbeat=60), client)
    await subscribed(source)
    client.gone.set()
    async with asyncio.timeout(5):
        await task
    assert source.observers == []


async def test_a_heartbeat_while_idle_keeps_the_pending_frame() -> None:
    """A heartbeat must not give up the frame being waited for (a cancelled wait would dispose
    the subscription: the frame after it would never come)."""
    source: Subject[QueryFrame] = Subject()
    client = Client()
    task = serve(EventStream(source, heartbeat=0.01), client)
    await client.until(lambda c: c.blocks().count(": heartbeat") >= 2)
    assert client.events() == []
    source.on_next(QueryFrame.initial([doc("acme/a")]))
    await client.until(lambda c: len(c.events()) == 1)
    assert client.events()[0]["id"] == "1"
    client.gone.set()
    async with asyncio.timeout(5):
        await task


async def test_frames_a_slow_client_has_not_taken_coalesce_into_the_latest_state() -> None:
    source: Subject[QueryFrame] = Subject()
    client = Client()
    task = serve(EventStream(source, heartbeat=60), client)
    await subscribed(source)
    client.open_gate.clear()  # the client stops reading: the next send blocks
    source.on_next(QueryFrame.initial([doc("acme/a")]))
    await client.until(lambda c: c.held == 1)  # the Initial was taken; its send is held
    for path in ("acme/b", "acme/c", "acme/d"):
        source.on_next(QueryFrame.delta([doc(path)]))
    client.open_gate.set()
    await client.until(lambda c: len(c.events()) == 2)
    initial, delta = client.events()
    assert initial["event"] == "INITIAL"
    assert [n.path for n in QueryFrame.model_validate_json(delta["data"]).nodes] == [
        "acme/b",
        "acme/c",
        "acme/d",
    ]
    # Negative control: a client that keeps up gets each delta as its own event.
    for count, path in ((3, "acme/e"), (4, "acme/f")):
        source.on_next(QueryFrame.delta([doc(path)]))
        await client.until(lambda c, n=count: len(c.events()) == n)
    assert [e["id"] for e in client.events()] == ["1", "2", "3", "4"]
    client.gone.set()
    async with asyncio.timeout(5):
        await task


async def test_a_fault_that_is_not_transient_is_an_error_event() -> None:
    source: Subject[QueryFrame] = Subject()
    client = Client()
    task = serve(EventStream(source, heartbeat=60), client)
    await subscribed(source)
    source.on_error(TypeError("a defect"))
    async with asyncio.timeout(5):
        await task
    (error,) = client.events()
    assert error["event"] == "error"
    assert "id" not in error  # no position: the browser keeps the last frame's id
    assert json.loads(error["data"]) == {"error": "TypeError", "message": "a defect"}
    assert client.ended


async def test_control_a_transient_fault_ends_the_response_without_an_error_event() -> None:
    source: Subject[QueryFrame] = Subject()
    client = Client()
    task = serve(EventStream(source, heartbeat=60), client)
    await subscribed(source)
    source.on_error(connection_reset_error("memory"))
    async with asyncio.timeout(5):
        await task
    assert client.events() == []
    assert client.ended  # the EventSource reconnects after `retry`


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(TypeError, match="source"):
        EventStream([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heartbeat"):
        EventStream(Subject(), heartbeat=0)


async def serve_once(app: EventStream, last_event_id: str | None, events: int) -> Client:
    client = Client()
    task = serve(app, client, last_event_id)
    await client.until(lambda c: len(c.events()) == events)
    client.gone.set()
    async with asyncio.timeout(5):
        await task
    return client


async def test_a_reconnect_with_last_event_id_resumes_with_a_delta_not_the_snapshot() -> None:
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    for i in range(20):
        await mesh.create(doc(f"acme/n{i:02d}"), access=ALICE)
    app = EventStream.live(mesh, QUERY)
    first = await serve_once(app, None, 1)
    (snapshot,) = first.events()
    assert snapshot["event"] == "INITIAL"
    await mesh.delete("acme/n00", access=ALICE)  # while the client is away
    await mesh.create(doc("acme/z"), access=ALICE)
    again = await serve_once(app, snapshot["id"], 1)
    (resumed,) = again.events()
    frame = QueryFrame.model_validate_json(resumed["data"])
    assert resumed["event"] == "DELTA" and frame.resumed and not frame.reset
    assert [n.path for n in frame.nodes] == ["acme/z"] and frame.removed == ("acme/n00",)
    assert resumed["id"] == frame.resume_token != snapshot["id"]
    assert len(again.text) < len(first.text) / 5  # what the reconnect costs: the change only
    mesh.dispose()


async def test_a_last_event_id_the_store_cannot_use_is_an_initial_that_says_reset() -> None:
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await mesh.create(doc("acme/a"), access=ALICE)
    for foreign in ("7", "m1.someone-else.3", "é"):
        (event,) = (await serve_once(EventStream.live(mesh, QUERY), foreign, 1)).events()
        frame = QueryFrame.model_validate_json(event["data"])
        assert event["event"] == "INITIAL" and frame.reset
        assert [n.path for n in frame.nodes] == ["acme/a"]
    mesh.dispose()


async def test_control_an_observable_source_ignores_last_event_id() -> None:
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await mesh.create(doc("acme/a"), access=ALICE)
    app = EventStream(mesh.watch(QUERY))
    (snapshot,) = (await serve_once(app, None, 1)).events()
    (again,) = (await serve_once(app, snapshot["id"], 1)).events()
    frame = QueryFrame.model_validate_json(again["data"])
    assert again["event"] == "INITIAL" and not frame.reset and not frame.resumed
    mesh.dispose()


async def test_a_factory_source_gets_the_header_and_none_without_it() -> None:
    asked: list[str | None] = []
    source: Subject[QueryFrame] = Subject()

    def factory(resume_from: str | None) -> Subject[QueryFrame]:
        asked.append(resume_from)
        return source

    for header in (None, "", "  tok-1 "):
        client = Client()
        task = serve(EventStream(factory, heartbeat=60), client, header)
        await subscribed(source)
        client.gone.set()
        async with asyncio.timeout(5):
            await task
    assert asked == [None, None, "tok-1"]
