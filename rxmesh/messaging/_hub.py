"""Message hubs: an address, handlers per pydantic message type, and requests to other hubs."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from loguru import logger
from pydantic import BaseModel, ValidationError
from reactivex import Observable

from rxmesh.aio import from_async
from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
from rxmesh.messaging._router import Router
from rxmesh.messaging._transport import Serving
from rxmesh.messaging._wire import (
    Ack,
    Envelope,
    Reply,
    describe_forward_timeout,
    flatten_exception,
    message_type_name,
)

__all__ = [
    "DEFAULT_FORWARD_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_HOPS",
    "Handler",
    "MessageContext",
    "MessageHub",
]

DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds :meth:`MessageHub.request` waits for a reply by default."""

DEFAULT_FORWARD_TIMEOUT = 30.0
"""Seconds a forwarding hub waits for the next hop by default."""

MAX_HOPS = 8
"""A request forwarded more often than this is answered FAILED (a routing loop)."""

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class MessageContext:
    """Who sent a request, to whom, and its id (handed to every handler)."""

    hub: str
    sender: str
    target: str
    message_id: str


Handler = Callable[[Any, MessageContext], "Awaitable[BaseModel | None] | BaseModel | None"]
"""A handler: ``(message, context) -> response`` (sync or async; ``None`` answers :class:`Ack`)."""


class MessageHub:
    """A hub at an address: serves requests by message type and sends requests to other hubs.

    A handler's exception never crosses the boundary; it is flattened into a NACK that arrives as
    a :class:`~rxmesh.exceptions.DeliveryFailure`. With ``forward_timeout`` set the hub also
    forwards requests addressed to other hubs (a gateway hop): when the next hop gives no reply
    within ``forward_timeout`` seconds it answers FAILED "Delivery to '<target>' failed: Response
    did not arrive on time in <t>s for message ..."; a NACK or transport failure from the next
    hop (NOT_FOUND, NO_RESPONDERS, ...) is relayed with its own type and text, never relabelled.

    Args:
        address: the hub's address, ``/``-separated (``"admin/build"``).
        router: the router (and so the transport) the hub is served on.
        forward_timeout: forward requests for other addresses, waiting this long; ``None`` (the
            default) answers them NOT_FOUND.
    """

    def __init__(
        self, address: str, router: Router, *, forward_timeout: float | None = None
    ) -> None:
        if not address or any(not s for s in address.split("/")):
            raise ValueError(f"invalid hub address {address!r}")
        self.address = address
        self.router = router
        self._forward_timeout = forward_timeout
        self._handlers: dict[str, tuple[type[BaseModel], Handler]] = {}
        self._serving: Serving | None = None
        self._closing = False

    @property
    def started(self) -> bool:
        """Whether the hub is being served."""
        return self._serving is not None

    def on(self, message_type: type[M], handler: Callable[[M, MessageContext], Any]) -> MessageHub:
        """Handle requests of ``message_type`` with ``handler`` (returns the hub, to chain)."""
        name = message_type_name(message_type)
        self._handlers[name] = (message_type, handler)
        self.router.register_type(message_type)
        return self

    async def start(self) -> MessageHub:
        """Serve the hub's address on the router's transport."""
        if self._serving is not None:
            return self
        await self.router.attach(self)
        try:
            self._serving = await self.router.transport.serve(self.address, self._receive)
        except BaseException:
            self.router.detach(self)
            raise
        self._closing = False
        return self

    async def close(self) -> None:
        """Stop serving; requests that still arrive are answered SHUTTING_DOWN."""
        self._closing = True
        serving, self._serving = self._serving, None
        self.router.detach(self)
        if serving is not None:
            await serving.close()

    async def __aenter__(self) -> MessageHub:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @overload
    def request(
        self, target: str, message: BaseModel, timeout: float = ..., *, response_type: type[R]
    ) -> Observable[R]: ...

    @overload
    def request(
        self, target: str, message: BaseModel, timeout: float = ..., *, response_type: None = None
    ) -> Observable[BaseModel]: ...

    def request(
        self,
        target: str,
        message: BaseModel,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        *,
        response_type: type[BaseModel] | None = None,
    ) -> Observable[Any]:
        """A cold observable of the response of ``target`` to ``message``.

        Each subscription sends the request again (so a retry re-asks). It emits one response
        and completes, or errors with ``TimeoutError`` (no reply within ``timeout`` seconds) or
        :class:`~rxmesh.exceptions.DeliveryFailure` (a NACK). Disposing abandons the wait; the
        request may still land.
        """

        async def ask() -> BaseModel:
            return await self.ask(target, message, timeout, response_type=response_type)

        return from_async(ask)

    async def ask(
        self,
        target: str,
        message: BaseModel,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        *,
        response_type: type[BaseModel] | None = None,
    ) -> BaseModel:
        """Send ``message`` to ``target`` and await its response (see :meth:`request`)."""
        if response_type is not None:
            self.router.register_type(response_type)
        envelope = Envelope(
            message_id=uuid.uuid4().hex,
            sender=self.address,
            target=target,
            message_type=message_type_name(type(message)),
            payload=message.model_dump(mode="json"),
        )
        reply = await self.router.deliver(envelope, timeout)
        failure = reply.failure()
        if failure is not None:
            raise failure
        name = reply.message_type or ""
        model = self.router.resolve_type(name)
        if response_type is not None and model is not response_type:
            raise TypeError(
                f"'{target}' answered {name!r}, not {message_type_name(response_type)!r}"
            )
        if model is None:
            raise LookupError(
                f"'{target}' answered {name!r}, a type this router does not know: pass "
                "response_type= or call router.register_type()"
            )
        return model.model_validate(reply.payload or {})

    async def _receive(self, data: bytes) -> bytes:
        try:
            envelope = Envelope.model_validate_json(data)
        except ValidationError as exc:
            text = f"malformed request frame at '{self.address}': {exc.error_count()} error(s)"
            logger.bind(hub=self.address).warning(text)
            return Reply.nack("", DeliveryErrorType.FAILED, text).model_dump_json().encode()
        reply = await self._answer(envelope)
        return reply.model_dump_json().encode()

    async def _answer(self, envelope: Envelope) -> Reply:
        log = logger.bind(hub=self.address, message_type=envelope.message_type)
        if self._closing:
            text = f"hub '{self.address}' is shutting down"
            return Reply.nack(envelope.message_id, DeliveryErrorType.SHUTTING_DOWN, text)
        if envelope.target != self.address:
            return await self._forward(envelope)
        entry = self._handlers.get(envelope.message_type)
        if entry is None:
            text = f"hub '{self.address}' has no handler for message type {envelope.message_type}"
            return Reply.nack(envelope.message_id, DeliveryErrorType.NOT_FOUND, text)
        model, handler = entry
        context = MessageContext(
            hub=self.address,
            sender=envelope.sender,
            target=envelope.target,
            message_id=envelope.message_id,
        )
        try:
            result = handler(model.model_validate(envelope.payload), context)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # noqa: BLE001 - flattened into a NACK, never dropped
            error_type, text = flatten_exception(
                exc, hub=self.address, message_type=envelope.message_type
            )
            if error_type is DeliveryErrorType.FAILED:
                log.opt(exception=exc).error("handler failed; answered FAILED: {}", text)
            else:
                log.warning("handler refused; answered {}: {}", error_type.value, text)
            return Reply.nack(envelope.message_id, error_type, text)
        if result is None:
            result = Ack()
        if not isinstance(result, BaseModel):
            text = (
                f"{envelope.message_type} at '{self.address}' failed: the handler returned "
                f"{type(result).__name__}, not a pydantic model"
            )
            log.error(text)
            return Reply.nack(envelope.message_id, DeliveryErrorType.FAILED, text)
        return Reply(
            message_id=envelope.message_id,
            message_type=message_type_name(type(result)),
            payload=result.model_dump(mode="json"),
        )

    async def _forward(self, envelope: Envelope) -> Reply:
        target = envelope.target
        if self._forward_timeout is None:
            text = (
                f"Delivery to '{target}' failed: hub '{self.address}' neither serves nor "
                "forwards it"
            )
            return Reply.nack(envelope.message_id, DeliveryErrorType.NOT_FOUND, text)
        if envelope.hops >= MAX_HOPS:
            text = f"Delivery to '{target}' failed: more than {MAX_HOPS} hops (a routing loop)"
            return Reply.nack(envelope.message_id, DeliveryErrorType.FAILED, text)
        onward = envelope.model_copy(update={"hops": envelope.hops + 1})
        try:
            return await self.router.deliver(
                onward, self._forward_timeout, exclude_hop=self.address
            )
        except TimeoutError:
            text = describe_forward_timeout(
                target, self._forward_timeout, envelope.message_type, envelope.message_id
            )
            logger.bind(hub=self.address, target=target).warning(text)
            return Reply.nack(envelope.message_id, DeliveryErrorType.FAILED, text)
        except DeliveryFailure as failure:
            return Reply.nack(envelope.message_id, failure.error_type, failure.message)
        except Exception as exc:  # noqa: BLE001 - flattened into a NACK, never dropped
            error_type, text = flatten_exception(
                exc, hub=self.address, message_type=envelope.message_type
            )
            logger.opt(exception=exc).bind(hub=self.address, target=target).error(
                "forwarding failed; answered {}: {}", error_type.value, text
            )
            return Reply.nack(envelope.message_id, error_type, text)
