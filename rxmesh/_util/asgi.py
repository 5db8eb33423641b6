"""What rxmesh's ASGI apps (health, metrics, the event stream) share: the message types and the
lifespan protocol, which they answer so that any ASGI server runs them on their own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Answer the lifespan protocol (nothing to start or stop) until shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def http_only(scope: Scope, receive: Receive, send: Send, app: str) -> bool:
    """Whether ``scope`` is an HTTP request for ``app`` to answer: a lifespan is served here
    (``False``), and any other protocol is a ``ValueError`` naming ``app`` (the server mounted it
    where it does not belong)."""
    kind = scope["type"]
    if kind == "lifespan":
        await serve_lifespan(receive, send)
        return False
    if kind != "http":
        raise ValueError(f"the {app} serves HTTP only, not {kind!r}")
    return True
