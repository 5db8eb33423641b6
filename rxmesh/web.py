"""A live stream served as Server-Sent Events, by an ASGI application (no web framework needed).

:class:`EventStream` subscribes its source once per request and writes each frame as one event::

    id: 3
    event: DELTA
    data: {"kind":"DELTA","nodes":[...],"removed":[],...}

``id`` counts the events of this response (1, 2, ...); ``event`` is the frame's kind (``INITIAL``
or ``DELTA``, or ``error``); ``data`` is the frame as JSON. While nothing comes, a comment line
(``: heartbeat``) every ``heartbeat`` seconds keeps proxies from closing the idle response. The
frames a slow client has not taken yet are coalesced into the latest state by
:func:`rxmesh.aio.iterate` (an Initial replaces what waits; deltas merge), so a slow client
costs at most one query's worth of memory. The subscription is disposed when the client
disconnects (``http.disconnect``) or the response ends.

A fault that ends the source is an ``error`` event only when it is not transient
(:func:`rxmesh.faults.is_standing_watch_transient`): a transient one (a watch that spent its
re-open budget, say) just ends the response, and the browser's ``EventSource`` reconnects after
``retry`` milliseconds, which opens a fresh stream.

Example:
    >>> from rxmesh import Mesh
    >>> from rxmesh.model import NodeQuery
    >>> from rxmesh.web import EventStream
    >>> live = EventStream(Mesh().watch(NodeQuery(partition="shop")))
    >>> # Starlette: Route("/live", live); FastAPI: app.add_route("/live", live)
"""

from __future__ import annotations

import asyncio
import json

from loguru import logger
from reactivex import Observable, abc

from rxmesh._util.arguments import at_least
from rxmesh._util.asgi import Receive, Scope, Send, http_only
from rxmesh.aio import iterate
from rxmesh.faults import is_standing_watch_transient
from rxmesh.model import QueryFrame

__all__ = ["EventStream"]

DEFAULT_HEARTBEAT = 15.0
"""Seconds of silence before a heartbeat comment (under the usual 30-60 s proxy idle timeouts)."""

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx would buffer the stream otherwise
]


class EventStream:
    """An ASGI 3 application serving ``source`` as Server-Sent Events (see the module).

    Each request subscribes ``source`` anew (``mesh.watch(query)`` is cold: each subscription
    shares the mesh's live query). Starlette: ``Route("/live", EventStream(...))``, or return
    one from an endpoint; FastAPI: ``app.add_route("/live", EventStream(...))``.

    Args:
        source: the frames to send, typically ``mesh.watch(query)``.
        heartbeat: seconds of silence before a ``: heartbeat`` comment.
        retry: milliseconds the browser waits before reconnecting once the response ends.

    Raises:
        TypeError: ``source`` is not an observable.
        ValueError: ``heartbeat`` is not > 0 or ``retry`` is negative.
    """

    __slots__ = ("_heartbeat", "_retry", "_source")

    def __init__(
        self,
        source: Observable[QueryFrame],
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        retry: int = 3000,
    ) -> None:
        if not isinstance(source, abc.ObservableBase):
            raise TypeError(f"source must be an observable, got {type(source).__name__}")
        if not heartbeat > 0:
            raise ValueError(f"heartbeat must be > 0 seconds, got {heartbeat!r}")
        at_least("retry", retry, 0)
        self._source = source
        self._heartbeat = float(heartbeat)
        self._retry = retry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await http_only(scope, receive, send, "event stream"):
            return
        if scope.get("method", "GET") != "GET":
            body = b"method not allowed"
            headers = [(b"allow", b"GET"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 405, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await _chunk(send, f"retry: {self._retry}\n\n".encode())
        disconnected = asyncio.ensure_future(_disconnect(receive))
        frames = iterate(self._source)
        following: asyncio.Future[QueryFrame] | None = None
        sequence = 0
        try:
            while True:
                if following is None:
                    following = asyncio.ensure_future(frames.__anext__())
                done, _ = await asyncio.wait(
                    (following, disconnected),
                    timeout=self._heartbeat,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if disconnected in done:
                    return  # the finally disposes the subscription
                if not done:
                    await _chunk(send, b": heartbeat\n\n")
                    continue
                taken, following = following, None
                try:
                    frame = taken.result()
                except StopAsyncIteration:
                    break
                except Exception as fault:  # noqa: BLE001 - sent as an event or ends the response
                    await self._ended(send, fault, sequence + 1)
                    break
                sequence += 1
                data = frame.model_dump_json()
                await _chunk(send, f"id: {sequence}\nevent: {frame.kind.value}\ndata: {data}\n\n")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            disconnected.cancel()
            if following is not None:
                following.cancel()
            await frames.aclose()

    @staticmethod
    async def _ended(send: Send, fault: Exception, sequence: int) -> None:
        transient = is_standing_watch_transient(fault)
        logger.bind(error_type=type(fault).__name__, transient=transient).warning(
            "event stream ended by {}: {}{}",
            type(fault).__name__,
            fault,
            " (transient: the client reconnects)" if transient else "",
        )
        if transient:
            return
        data = json.dumps({"error": type(fault).__name__, "message": str(fault)})
        await _chunk(send, f"id: {sequence}\nevent: error\ndata: {data}\n\n")


async def _chunk(send: Send, text: str | bytes) -> None:
    body = text.encode() if isinstance(text, str) else text
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
