"""The ASGI preamble rxmesh's apps share: a lifespan served, HTTP handed on, the rest refused."""

from __future__ import annotations

from typing import Any

import pytest

from rxmesh._util.asgi import http_only


async def test_http_is_handed_on_a_lifespan_served_and_anything_else_refused() -> None:
    sent: list[dict[str, Any]] = []
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: Any) -> None:
        sent.append(dict(message))

    assert await http_only({"type": "http"}, receive, send, "health app") is True
    assert sent == []  # control: an HTTP request is the app's to answer
    assert await http_only({"type": "lifespan"}, receive, send, "health app") is False
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]
    with pytest.raises(ValueError, match="the event stream serves HTTP only, not 'websocket'"):
        await http_only({"type": "websocket"}, receive, send, "event stream")
