"""A live stream served as Server-Sent Events, by an ASGI application (no web framework needed).

:class:`EventStream` subscribes its source once per request and writes each frame as one event::

    id: m1.3f9c2a7d51e04b88.42
    event: DELTA
    data: {"kind":"DELTA","nodes":[...],"removed":[],...,"resume_token":"m1.3f9c2a7d51e04b88.42"}

``id`` is the frame's ``resume_token`` (a frame without one: the event's number in this
response, 1, 2, ...); ``event`` is the frame's kind (``INITIAL`` or ``DELTA``, or ``error``,
which carries no ``id``: it is no position); ``data`` is the frame as JSON.

Resume: a reconnecting ``EventSource`` sends the last ``id`` it received as ``Last-Event-ID``.
Built on a source *factory* (``EventStream.live(mesh, query)``, or
``EventStream(lambda resume_from: mesh.watch(query, resume_from=resume_from))``), the stream is
opened with that token, so its first event is a ``DELTA`` of what changed since (its data says
``"resumed":true``) rather than the whole snapshot, or an ``INITIAL`` whose data says
``"reset":true`` when the store can no longer tell. Built on an observable, every request
subscribes it anew and the header is not used. While nothing comes, a comment line
(``: heartbeat``) every ``heartbeat`` seconds keeps proxies from closing the idle response. The
frames a slow client has not taken yet are coalesced into the latest state by
:func:`rxmesh.aio.iterate` (an Initial replaces what waits; deltas merge), so a slow client
costs at most one query's worth of memory. The subscription is disposed when the client
disconnects (``http.disconnect``) or the response ends.

A fault that ends the source is an ``error`` event only when it is not transient
(:func:`rxmesh.faults.is_standing_watch_transient`): a transient one (a watch that spent its
re-open budget, say) just ends the response, and the browser's ``EventSource`` reconnects after
``retry`` milliseconds, which opens the stream again (resumed, with a factory).

Example:
    >>> from rxmesh import Mesh
    >>> from rxmesh.model import NodeQuery
    >>> from rxmesh.web import EventStream
    >>> live = EventStream.live(Mesh(), NodeQuery(partition="shop"))
    >>> # Starlette: Route("/live", live); FastAPI: app.add_route("/live", live)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Protocol

from loguru import logger
from reactivex import Observable, abc

from rxmesh._util.arguments import at_least
from rxmesh._util.asgi import Receive, Scope, Send, http_only
from rxmesh.aio import iterate
from rxmesh.faults import is_standing_watch_transient
from rxmesh.model import NodeQuery, QueryFrame

__all__ = ["EventStream"]

DEFAULT_HEARTBEAT = 15.0
"""Seconds of silence before a heartbeat comment (under the usual 30-60 s proxy idle timeouts)."""

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx would buffer the stream otherwise
]


SourceFactory = Callable[[str | None], Observable[QueryFrame]]
"""``factory(resume_from) -> frames``: the stream of one request, resumed from the client's
``Last-Event-ID`` (``None`` for a first connection)."""


class _Watches(Protocol):
    """What :meth:`EventStream.live` serves: a :class:`~rxmesh.mesh.Mesh`."""

    def watch(
        self, query: NodeQuery, resume_from: str | None = None
    ) -> Observable[QueryFrame]: ...


class EventStream:
    """An ASGI 3 application serving ``source`` as Server-Sent Events (see the module).

    Each request subscribes its stream anew (``mesh.watch(query)`` is cold: each subscription
    shares the mesh's live query). Starlette: ``Route("/live", EventStream.live(mesh, query))``,
    or return one from an endpoint; FastAPI: ``app.add_route("/live", EventStream.live(...))``.

    Args:
        source: the frames to send: an observable (typically ``mesh.watch(query)``), subscribed
            as is for every request; or a factory ``source(resume_from)`` called for every
            request with its ``Last-Event-ID`` (``None`` without one), which resumes a
            reconnecting client.
        heartbeat: seconds of silence before a ``: heartbeat`` comment.
        retry: milliseconds the browser waits before reconnecting once the response ends.

    Raises:
        TypeError: ``source`` is neither an observable nor callable.
        ValueError: ``heartbeat`` is not > 0 or ``retry`` is negative.
    """

    __slots__ = ("_factory", "_heartbeat", "_retry")

    def __init__(
        self,
        source: Observable[QueryFrame] | SourceFactory,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        retry: int = 3000,
    ) -> None:
        if isinstance(source, Observable):
            frames = source
            factory: SourceFactory = lambda _: frames  # noqa: E731 - the header is not used
        elif callable(source) and not isinstance(source, abc.ObservableBase):
            factory = source
        else:
            raise TypeError(
                f"source must be an observable or a factory of one, got {type(source).__name__}"
            )
        if not heartbeat > 0:
            raise ValueError(f"heartbeat must be > 0 seconds, got {heartbeat!r}")
        at_least("retry", retry, 0)
        self._factory = factory
        self._heartbeat = float(heartbeat)
        self._retry = retry

    @classmethod
    def live(
        cls,
        mesh: _Watches,
        query: NodeQuery,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        retry: int = 3000,
    ) -> EventStream:
        """``mesh.watch(query)`` served so that a reconnecting client resumes from its
        ``Last-Event-ID``: ``EventStream(lambda t: mesh.watch(query, resume_from=t))``."""
        return cls(
            lambda resume_from: mesh.watch(query, resume_from=resume_from),
            heartbeat=heartbeat,
            retry=retry,
        )

    def _open(self, scope: Scope) -> Observable[QueryFrame]:
        return self._factory(_last_event_id(scope))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await http_only(scope, receive, send, "event stream"):
            return
        if scope.get("method", "GET") != "GET":
            body = b"method not allowed"
            headers = [(b"allow", b"GET"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 405, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        source = self._open(scope)  # a factory that fails fails the request before it starts
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await _chunk(send, f"retry: {self._retry}\n\n".encode())
        disconnected = asyncio.ensure_future(_disconnect(receive))
        frames = iterate(source)
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
                    await self._ended(send, fault)
                    break
                sequence += 1
                data = frame.model_dump_json()
                event = _event_id(frame, sequence)
                await _chunk(send, f"id: {event}\nevent: {frame.kind.value}\ndata: {data}\n\n")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            disconnected.cancel()
            if following is not None:
                following.cancel()
            await frames.aclose()

    @staticmethod
    async def _ended(send: Send, fault: Exception) -> None:
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
        # No id: the browser keeps the last frame's, so its reconnect still resumes from there.
        await _chunk(send, f"event: error\ndata: {data}\n\n")


def _event_id(frame: QueryFrame, sequence: int) -> str:
    """The frame's token, unless it has none or one an ``id:`` line cannot carry."""
    token = frame.resume_token
    if token and not any(c in token for c in "\r\n\0"):
        return token
    return str(sequence)


def _last_event_id(scope: Scope) -> str | None:
    """The request's ``Last-Event-ID`` (latin-1, as HTTP headers are), ``None`` when absent or
    empty. Any text is passed on: a token the store cannot use is answered with a reset."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"last-event-id":
            text = bytes(value).decode("latin-1").strip()
            return text or None
    return None


async def _chunk(send: Send, text: str | bytes) -> None:
    body = text.encode() if isinstance(text, str) else text
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
