"""The NATS transport: hubs in different processes or machines, over NATS request/reply.

An existing engine, no home-made protocol: a hub at address ``admin/build`` subscribes to the
subject ``<prefix>.admin.build`` and a request is ``nc.request(subject, frame, timeout)``. NATS's
own answers map onto the contract: its request timeout becomes a ``TimeoutError`` ("no answer in
time", shape (a)); its no-responders status becomes a NO_RESPONDERS
:class:`~rxmesh.exceptions.DeliveryFailure`, an availability failure and not a NOT_FOUND verdict.

What a NATS deployment cannot tell apart: "no responders" only says that no subscription for the
subject was known to the server at that moment. That is the same answer for an address no hub
ever serves, for a hub whose process is down (killed, restarting), and for a live hub whose
connection has not yet re-subscribed after the server restarted. The in-process transport knows
its hubs and may say NOT_FOUND; this one may not, so nobody answering is reported as what it is,
and :func:`rxmesh.faults.is_coordination_unreachable` (the build-claim handshake's retry rule)
treats it like "no answer in time". See docs/messaging.md.

``nats-py`` (the ``rxmesh[nats]`` extra) is imported only when a transport is created.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from loguru import logger

from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
from rxmesh.messaging._transport import FrameHandler

__all__ = ["DEFAULT_NATS_URL", "DEFAULT_SUBJECT_PREFIX", "NatsTransport", "subject_for"]

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
"""Where :meth:`NatsTransport.connect` looks when no URL is given."""

DEFAULT_SUBJECT_PREFIX = "rxmesh.hub"
"""The subject namespace hub addresses are mapped into."""

_PROBE_HEADER = "Rxmesh-Probe"
_ROUTABLE_WITHIN = 5.0

_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_\-]")


def _encode_token(segment: str) -> str:
    return "".join(ch if _SAFE_TOKEN.fullmatch(ch) else f"~{ord(ch):02X}" for ch in segment)


def subject_for(address: str, prefix: str = DEFAULT_SUBJECT_PREFIX) -> str:
    """The NATS subject of a hub address: one token per ``/`` segment.

    Characters NATS gives a meaning to (``.``, ``*``, ``>``, whitespace) and any other character
    outside ``[A-Za-z0-9_-]`` are escaped as ``~HH``, so distinct addresses get distinct subjects.

    Example:
        >>> subject_for("admin/build")
        'rxmesh.hub.admin.build'
    """
    segments = address.split("/")
    if not address or any(not s for s in segments):
        raise ValueError(f"invalid hub address {address!r}: empty segment")
    return ".".join([prefix, *(_encode_token(s) for s in segments)])


class _NatsServing:
    def __init__(self, subscription: Any) -> None:
        self._subscription = subscription

    async def close(self) -> None:
        await self._subscription.unsubscribe()


class NatsTransport:
    """Request/reply between hubs over a NATS connection.

    Args:
        client: a connected ``nats.aio.client.Client``.
        subject_prefix: the subject namespace (separate test runs or tenants by prefix).
        owns_client: close the client when the transport closes.
    """

    def __init__(
        self,
        client: Any,
        *,
        subject_prefix: str = DEFAULT_SUBJECT_PREFIX,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._prefix = subject_prefix
        self._owns_client = owns_client
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(
        cls,
        url: str = DEFAULT_NATS_URL,
        *,
        subject_prefix: str = DEFAULT_SUBJECT_PREFIX,
        **options: Any,
    ) -> NatsTransport:
        """Connect to NATS at ``url`` (``options`` go to ``nats.connect``); the transport owns
        the connection."""
        import nats  # the rxmesh[nats] extra, imported only when used

        client = await nats.connect(url, **options)
        return cls(client, subject_prefix=subject_prefix, owns_client=True)

    @property
    def name(self) -> str:
        """``"nats:<prefix>"``."""
        return f"nats:{self._prefix}"

    def subject_for(self, address: str) -> str:
        """The subject this transport uses for ``address``."""
        return subject_for(address, self._prefix)

    async def serve(self, address: str, handler: FrameHandler) -> _NatsServing:
        """Subscribe to the subject of ``address``; each request runs in its own task.

        NATS runs one subscription's callbacks one after another; a task per request keeps a
        slow request (a forwarding hop waiting on its next hop) from holding up the others.
        """
        subject = self.subject_for(address)

        async def on_message(msg: Any) -> None:
            if msg.headers and msg.headers.get(_PROBE_HEADER):
                await msg.respond(b"")  # a readiness probe of serve(), not a request
                return
            task = asyncio.get_running_loop().create_task(self._answer(msg, handler, subject))
            self._tasks.add(task)
            task.add_done_callback(self._settled)

        subscription = await self._client.subscribe(subject, cb=on_message)
        await self._client.flush()
        await self._until_routable(subject)
        return _NatsServing(subscription)

    async def _until_routable(self, subject: str) -> None:
        """Return once the server routes requests for ``subject`` to this subscription.

        A PONG after SUB says the server read the subscription; under load a request from
        another connection has still been answered "no responders" right after it (seen in CI).
        A probe request through the server proves the interest is visible to the account, so a
        hub's ``start()`` returns only when it can be reached.
        """
        import nats.errors

        async with asyncio.timeout(_ROUTABLE_WITHIN):
            while True:
                try:
                    await self._client.request(
                        subject, b"", timeout=_ROUTABLE_WITHIN, headers={_PROBE_HEADER: "1"}
                    )
                    return
                except nats.errors.NoRespondersError:
                    await asyncio.sleep(0.01)

    async def _answer(self, msg: Any, handler: FrameHandler, subject: str) -> None:
        reply = await handler(bytes(msg.data))
        if msg.reply:
            await msg.respond(reply)
        else:
            logger.bind(subject=subject).warning("request without a reply subject; reply dropped")

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.opt(exception=task.exception()).bind(transport=self.name).error(
                "could not answer a NATS request"
            )

    async def request(self, address: str, data: bytes, timeout: float) -> bytes:
        """``nc.request`` to the subject of ``address``.

        Raises:
            TimeoutError: NATS's request timeout fired (the request may have landed).
            DeliveryFailure: NO_RESPONDERS, NATS answered "no responders" for the subject
                (nobody was subscribed just then; not evidence that nothing serves it).
        """
        import nats.errors

        subject = self.subject_for(address)
        try:
            msg = await self._client.request(subject, data, timeout=timeout)
        except nats.errors.NoRespondersError as exc:
            raise DeliveryFailure(
                DeliveryErrorType.NO_RESPONDERS,
                f"Delivery to '{address}' failed: no responders on NATS subject '{subject}' "
                "(nobody is serving it right now: not served, down, or not re-subscribed yet)",
            ) from exc
        except nats.errors.TimeoutError as exc:
            raise TimeoutError(
                f"no reply from '{address}' on NATS subject '{subject}' within {timeout:g}s"
            ) from exc
        return bytes(msg.data)

    async def close(self) -> None:
        """Cancel in-flight handler work, then drain and close an owned connection."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._owns_client and not self._client.is_closed:
            await self._client.close()
