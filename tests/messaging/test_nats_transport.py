"""The NATS transport against a real server: round trip, no-responders (NO_RESPONDERS, not
NOT_FOUND), request timeout, and a private server killed and restarted under a caller."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from rxmesh.exceptions import DeliveryErrorType, DeliveryFailure
from rxmesh.faults import is_coordination_unreachable, is_no_answer_in_time
from rxmesh.messaging import MessageContext, MessageHub, NatsTransport, Router

pytestmark = pytest.mark.nats

BOUND = 5.0


class Echo(BaseModel):
    text: str


@pytest.fixture
async def routers(nats_url: str) -> AsyncIterator[tuple[Router, Router]]:
    """Two routers on separate NATS connections (as two processes would be)."""
    prefix = f"rxmesh-test.{uuid.uuid4().hex}"
    server = Router(await NatsTransport.connect(nats_url, subject_prefix=prefix))
    client = Router(await NatsTransport.connect(nats_url, subject_prefix=prefix))
    try:
        yield server, client
    finally:
        await client.close()
        await server.close()


async def test_a_request_round_trips_over_nats(routers: tuple[Router, Router]) -> None:
    server, client = routers
    hub = MessageHub("svc/echo", server).on(Echo, lambda m, c: Echo(text=m.text + "!"))
    await hub.start()

    answer = await asyncio.wait_for(
        MessageHub("caller", client).ask("svc/echo", Echo(text="hi"), 2.0, response_type=Echo),
        BOUND,
    )

    assert answer == Echo(text="hi!")


async def test_a_handler_exception_arrives_as_a_nack(routers: tuple[Router, Router]) -> None:
    server, client = routers

    def refuse(message: Echo, context: MessageContext) -> Echo:
        raise PermissionError("no grant for svc/echo")

    await MessageHub("svc/echo", server).on(Echo, refuse).start()

    with pytest.raises(DeliveryFailure) as caught:
        await asyncio.wait_for(
            MessageHub("caller", client).ask("svc/echo", Echo(text="hi"), 2.0), BOUND
        )

    assert caught.value.error_type is DeliveryErrorType.FORBIDDEN
    assert "Access denied" in caught.value.message


async def test_no_responders_is_nobody_answering_not_a_not_found_verdict(
    routers: tuple[Router, Router],
) -> None:
    """NATS cannot tell an address nobody serves from a hub that is down or not re-subscribed
    yet, so "no responders" is NO_RESPONDERS (an availability failure). FAILS against the old
    code, which mapped it to NOT_FOUND, a verdict."""
    _, client = routers

    with pytest.raises(DeliveryFailure) as caught:
        await asyncio.wait_for(
            MessageHub("caller", client).ask("svc/absent", Echo(text="hi"), 2.0), BOUND
        )

    assert caught.value.error_type is DeliveryErrorType.NO_RESPONDERS
    assert type(caught.value.__cause__).__name__ == "NoRespondersError"  # raised ``from exc``
    assert "svc/absent" in caught.value.message
    assert "no responders" in caught.value.message
    assert is_coordination_unreachable(caught.value)
    assert not is_no_answer_in_time(caught.value)  # nothing timed out


async def test_the_nats_request_timeout_is_a_timeout_error(routers: tuple[Router, Router]) -> None:
    server, client = routers
    release = asyncio.Event()

    async def stall(message: Echo, context: MessageContext) -> Echo:
        await release.wait()
        return message

    await MessageHub("svc/slow", server).on(Echo, stall).start()

    with pytest.raises(TimeoutError) as caught:
        await asyncio.wait_for(
            MessageHub("caller", client).ask("svc/slow", Echo(text="hi"), 0.2), BOUND
        )

    assert is_no_answer_in_time(caught.value)
    assert "svc/slow" in str(caught.value)
    release.set()


async def test_a_slow_request_does_not_hold_up_the_next(routers: tuple[Router, Router]) -> None:
    server, client = routers
    release = asyncio.Event()

    async def maybe_stall(message: Echo, context: MessageContext) -> Echo:
        if message.text == "slow":
            await release.wait()
        return message

    await MessageHub("svc/mixed", server).on(Echo, maybe_stall).start()
    caller = MessageHub("caller", client)
    slow = asyncio.ensure_future(
        caller.ask("svc/mixed", Echo(text="slow"), BOUND, response_type=Echo)
    )

    fast = await asyncio.wait_for(
        caller.ask("svc/mixed", Echo(text="fast"), 2.0, response_type=Echo), BOUND
    )

    assert fast == Echo(text="fast")
    release.set()
    assert await asyncio.wait_for(slow, BOUND) == Echo(text="slow")
