"""The router: where a request goes next, over which transport, and placement of hubs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from loguru import logger
from pydantic import BaseModel

from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
from rxmesh.messaging._transport import Transport
from rxmesh.messaging._transport_inproc import InProcessTransport
from rxmesh.messaging._wire import (
    Ack,
    Envelope,
    Reply,
    describe_placement_timeout,
    message_type_name,
)

__all__ = ["DEFAULT_PLACEMENT_TIMEOUT", "Activator", "AttachedHub", "Router", "RouterStatistics"]

DEFAULT_PLACEMENT_TIMEOUT = 30.0
"""Seconds a hub may take to be activated before "Placement operation timed out"."""

class AttachedHub(Protocol):
    """What the router needs of a hub it serves (a :class:`~rxmesh.messaging.MessageHub` is
    one). A Protocol, so the router does not import the hub that imports it."""

    @property
    def address(self) -> str:
        """The address the hub serves."""
        ...

    @property
    def started(self) -> bool:
        """Whether :meth:`start` has run."""
        ...

    async def start(self) -> object:
        """Attach and serve (what it returns is not used)."""
        ...

    async def close(self) -> None:
        """Stop serving and detach."""
        ...


Activator = Callable[[str], Awaitable[AttachedHub]]
"""Creates the hub for an address on first use (it is started if it is not yet)."""


@dataclass(frozen=True, slots=True)
class RouterStatistics:
    """What a router has done so far (counts since it was created)."""

    requests_sent: int
    responses_received: int
    nacks_received: int
    timeouts: int
    placements: int
    hubs: int


class Router:
    """Routes requests between hubs over one transport.

    The default transport is :class:`InProcessTransport` (messages are still serialised).
    ``routes`` map a target to the hub that forwards to it: an exact address (``"admin/build"``)
    or a subtree (``"admin/*"``); the longest match wins, else a request goes straight to its
    target. The router owns its transport: :meth:`close` closes it.

    Example:
        >>> router = Router(routes={"admin/build": "edge/gateway"})
        >>> router.next_hop("admin/build")
        'edge/gateway'
    """

    def __init__(
        self, transport: Transport | None = None, *, routes: Mapping[str, str] | None = None
    ) -> None:
        self._transport: Transport = transport if transport is not None else InProcessTransport()
        self._routes: dict[str, str] = dict(routes or {})
        self._types: dict[str, type[BaseModel]] = {}
        self._hubs: dict[str, AttachedHub] = {}
        self._activators: dict[str, tuple[Activator, float]] = {}
        self._placing: dict[str, asyncio.Lock] = {}
        self._counts = {"sent": 0, "responses": 0, "nacks": 0, "timeouts": 0, "placements": 0}
        self.register_type(Ack)

    @property
    def transport(self) -> Transport:
        """The transport requests travel on."""
        return self._transport

    def add_route(self, target: str, via: str) -> None:
        """Send requests for ``target`` (an address, or ``"prefix/*"``) through the hub ``via``."""
        self._routes[target] = via

    def next_hop(self, target: str, *, exclude: str | None = None) -> str:
        """The address a request for ``target`` is sent to (a route's hub, else ``target``).

        A route through ``exclude`` (the hop asking) is ignored, so a forwarding hub never sends
        a request back to itself.
        """
        best: tuple[int, str] | None = None
        for pattern, via in self._routes.items():
            if via == exclude:
                continue
            if pattern.endswith("/*"):
                prefix = pattern[:-1]
                matched = target.startswith(prefix)
            else:
                matched = target == pattern
            if matched and (best is None or len(pattern) > best[0]):
                best = (len(pattern), via)
        return target if best is None else best[1]

    def register_type(self, model: type[BaseModel]) -> type[BaseModel]:
        """Make ``model`` known by its wire name, so replies of that type can be decoded."""
        self._types[message_type_name(model)] = model
        return model

    def resolve_type(self, name: str) -> type[BaseModel] | None:
        """The registered message type of wire name ``name``, if any."""
        return self._types.get(name)

    def add_activator(
        self, prefix: str, activator: Activator, *, timeout: float = DEFAULT_PLACEMENT_TIMEOUT
    ) -> None:
        """Activate hubs under ``prefix`` (``"views/"``) on their first request, bounded by
        ``timeout`` seconds; a slower activation answers "Placement operation timed out"."""
        self._activators[prefix] = (activator, timeout)

    async def attach(self, hub: AttachedHub) -> None:
        """Serve ``hub`` at its address (called by :meth:`MessageHub.start`)."""
        if hub.address in self._hubs:
            raise ValueError(f"a hub is already attached at {hub.address!r}")
        self._hubs[hub.address] = hub

    def detach(self, hub: AttachedHub) -> None:
        """Forget ``hub`` (called by :meth:`MessageHub.close`)."""
        if self._hubs.get(hub.address) is hub:
            del self._hubs[hub.address]

    async def _place(self, address: str) -> None:
        if address in self._hubs:
            return
        matches = [p for p in self._activators if address.startswith(p)]
        if not matches:
            return
        activator, timeout = self._activators[max(matches, key=len)]
        lock = self._placing.setdefault(address, asyncio.Lock())
        async with lock:
            if address in self._hubs:
                return

            async def activate() -> None:
                hub = await activator(address)
                if not hub.started:
                    await hub.start()

            try:
                await asyncio.wait_for(activate(), timeout)
            except TimeoutError as exc:
                text = describe_placement_timeout(address, timeout)
                logger.bind(address=address, timeout=timeout).warning(text)
                raise DeliveryFailure(DeliveryErrorType.FAILED, text) from exc
            self._counts["placements"] += 1

    async def deliver(
        self, envelope: Envelope, timeout: float, *, exclude_hop: str | None = None
    ) -> Reply:
        """Send ``envelope`` one hop towards its target and return the reply (or NACK) frame.

        Raises:
            TimeoutError: no reply within ``timeout`` seconds.
            DeliveryFailure: NOT_FOUND (the transport knows nothing serves the next hop),
                NO_RESPONDERS (nobody answered at the next hop and the transport cannot tell
                why, as over NATS), or FAILED "Placement operation timed out" (the target could
                not be activated in time). The transport's error passes through unchanged.
        """
        hop = self.next_hop(envelope.target, exclude=exclude_hop)
        if hop == envelope.target:
            await self._place(hop)
        self._counts["sent"] += 1
        try:
            raw = await self._transport.request(hop, envelope.model_dump_json().encode(), timeout)
        except TimeoutError:
            self._counts["timeouts"] += 1
            raise
        reply = Reply.model_validate_json(raw)
        self._counts["nacks" if reply.error_type is not None else "responses"] += 1
        return reply

    def statistics(self) -> RouterStatistics:
        """A frozen snapshot of this router's counts."""
        c = self._counts
        return RouterStatistics(
            requests_sent=c["sent"],
            responses_received=c["responses"],
            nacks_received=c["nacks"],
            timeouts=c["timeouts"],
            placements=c["placements"],
            hubs=len(self._hubs),
        )

    async def close(self) -> None:
        """Close every attached hub, then the transport."""
        for hub in list(self._hubs.values()):
            await hub.close()
        await self._transport.close()
