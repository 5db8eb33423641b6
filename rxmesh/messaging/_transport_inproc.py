"""The embedded transport: hubs in one process, every message still serialised to JSON.

Frames are bytes both ways, so a message that would not survive JSON does not survive here
either, and an exception never crosses: the boundary behaves like the real one. A handler runs in
a task the transport owns, so a requester that times out (or is disposed) does not cancel it: as
over a network, a timed-out request may still land.
"""

from __future__ import annotations

import asyncio

from loguru import logger

from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
from rxmesh.messaging._transport import FrameHandler

__all__ = ["InProcessTransport"]


class _InProcessServing:
    def __init__(self, transport: InProcessTransport, address: str, handler: FrameHandler) -> None:
        self._transport = transport
        self._address = address
        self._handler = handler

    async def close(self) -> None:
        if self._transport._served.get(self._address) is self._handler:
            del self._transport._served[self._address]


class InProcessTransport:
    """Request/reply between hubs of one process, through a JSON boundary."""

    def __init__(self) -> None:
        self._served: dict[str, FrameHandler] = {}
        self._tasks: set[asyncio.Task[bytes]] = set()

    @property
    def name(self) -> str:
        """``"in-process"``."""
        return "in-process"

    async def serve(self, address: str, handler: FrameHandler) -> _InProcessServing:
        """Serve ``address``; a second hub at the same address is refused with ``ValueError``."""
        if address in self._served:
            raise ValueError(f"address {address!r} is already served in this process")
        self._served[address] = handler
        return _InProcessServing(self, address, handler)

    async def request(self, address: str, data: bytes, timeout: float) -> bytes:
        """Run the handler of ``address`` on a copy of ``data``, waiting at most ``timeout`` s."""
        handler = self._served.get(address)
        if handler is None:
            raise DeliveryFailure(
                DeliveryErrorType.NOT_FOUND,
                f"Delivery to '{address}' failed: no hub serves that address (in-process)",
            )
        task = asyncio.get_running_loop().create_task(handler(bytes(data)))
        self._tasks.add(task)
        task.add_done_callback(self._settled)
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError as exc:
            raise TimeoutError(
                f"no reply from '{address}' within {timeout:g}s (in-process)"
            ) from exc

    def _settled(self, task: asyncio.Task[bytes]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.opt(exception=task.exception()).bind(transport=self.name).error(
                "in-process handler task failed outside the hub's flattening"
            )

    async def close(self) -> None:
        """Stop serving everything and cancel handler work still running."""
        self._served.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
