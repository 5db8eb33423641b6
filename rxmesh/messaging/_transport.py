"""The transport contract: bytes to an address, bytes back, bounded in time.

A transport knows nothing of message types: the :class:`~rxmesh.messaging.Router` serialises,
the transport carries. ``request`` raises ``TimeoutError`` when no reply arrives within
``timeout`` seconds (shape (a) of "no answer in time"). When nobody is there to answer it raises
a :class:`~rxmesh.exceptions.DeliveryFailure`: NOT_FOUND if it knows nothing serves the address
(a verdict; the in-process transport knows its hubs), NO_RESPONDERS if it only knows that nobody
answered and cannot tell why (NATS: never served, down, or not re-subscribed yet; an availability
failure).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, runtime_checkable

__all__ = ["FrameHandler", "Serving", "Transport"]

FrameHandler = Callable[[bytes], Coroutine[Any, Any, bytes]]
"""Serves one request frame and returns the reply frame. It must not raise for a handler's
failure (the hub flattens those into NACK frames)."""


@runtime_checkable
class Serving(Protocol):
    """A served address; closing it stops new requests from arriving there."""

    async def close(self) -> None:
        """Stop serving the address."""


@runtime_checkable
class Transport(Protocol):
    """Carries request frames to addresses and reply frames back."""

    @property
    def name(self) -> str:
        """A printable name (``"in-process"``, ``"nats://127.0.0.1:4222"``)."""

    async def serve(self, address: str, handler: FrameHandler) -> Serving:
        """Deliver every request frame sent to ``address`` to ``handler``."""

    async def request(self, address: str, data: bytes, timeout: float) -> bytes:
        """Send ``data`` to ``address`` and return its reply frame.

        Raises:
            TimeoutError: no reply within ``timeout`` seconds (the request may have landed).
            DeliveryFailure: NOT_FOUND, nothing serves ``address`` (the transport knows), or
                NO_RESPONDERS, nobody answered and the transport cannot tell why.
        """

    async def close(self) -> None:
        """Release the transport's resources; in-flight handler work is cancelled."""
