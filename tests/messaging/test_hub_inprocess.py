"""Hubs and the router over the in-process transport: a real JSON boundary, NACKs, forwarding."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from rxmesh.aio import first_value
from rxmesh.exceptions import (
    DeliveryErrorType,
    DeliveryFailure,
    MeshDisposedError,
    StoreError,
)
from rxmesh.faults import is_coordination_unreachable, is_no_answer_in_time
from rxmesh.messaging import (
    Ack,
    BuildClaim,
    BuildClaimRequest,
    BuildCoordinator,
    InProcessTransport,
    MessageContext,
    MessageHub,
    Router,
    flatten_exception,
    subject_for,
)

BOUND = 5.0  # every wait in this module is bounded by this many seconds


class Ping(BaseModel):
    text: str
    at: datetime
    tags: set[str] = set()


class Pong(BaseModel):
    text: str
    seen_tags: list[str]


async def started(router: Router, address: str, **kwargs: Any) -> MessageHub:
    return await MessageHub(address, router, **kwargs).start()


def wrapping(outer: Exception, inner: BaseException) -> Exception:
    """``outer`` raised ``from inner``."""
    outer.__cause__ = inner
    return outer


class NobodyAnsweringTransport(InProcessTransport):
    """The in-process transport, except that addresses in ``down`` answer as NATS does for a
    process that is down: a NO_RESPONDERS failure."""

    def __init__(self, *down: str) -> None:
        super().__init__()
        self.down = set(down)

    async def request(self, address: str, data: bytes, timeout: float) -> bytes:
        if address in self.down:
            raise DeliveryFailure(
                DeliveryErrorType.NO_RESPONDERS,
                f"Delivery to '{address}' failed: no responders on NATS subject 'x.{address}'",
            )
        return await super().request(address, data, timeout)


async def test_a_request_crosses_a_json_boundary_in_process() -> None:
    router = Router()
    received: list[Ping] = []
    sent = Ping(text="hi", at=datetime(2026, 9, 24, 6, 51, 10, tzinfo=UTC), tags={"a"})

    def handle(message: Ping, context: MessageContext) -> Pong:
        received.append(message)
        assert context.sender == "client"
        assert context.target == "server"
        return Pong(text=message.text.upper(), seen_tags=sorted(message.tags))

    server = await started(router, "server")
    server.on(Ping, handle)
    client = await started(router, "client")

    pong = await asyncio.wait_for(
        first_value(client.request("server", sent, 1.0, response_type=Pong)), BOUND
    )

    assert pong == Pong(text="HI", seen_tags=["a"])
    assert received == [sent]
    assert received[0] is not sent  # a copy rebuilt from JSON, not the caller's object
    stats = router.statistics()
    assert (stats.requests_sent, stats.responses_received, stats.nacks_received) == (1, 1, 0)
    await router.close()


async def test_a_handler_returning_nothing_answers_ack() -> None:
    router = Router()
    server = await started(router, "server")
    server.on(Ping, lambda message, context: None)
    client = await started(router, "client")

    answer = await client.ask("server", Ping(text="x", at=datetime.now(UTC)), 1.0)

    assert isinstance(answer, Ack)
    await router.close()


@pytest.mark.parametrize(
    ("raised", "error_type", "fragment"),
    [
        (ValueError("bad ping"), DeliveryErrorType.FAILED, "ValueError: bad ping"),
        (PermissionError("no grant"), DeliveryErrorType.FORBIDDEN, "Access denied"),
        (
            StoreError("could not connect to postgres@db:5432", sqlstate="08001"),
            DeliveryErrorType.UNAVAILABLE,
            "data store was unreachable",
        ),
        (MeshDisposedError("disposed"), DeliveryErrorType.SHUTTING_DOWN, "shutting down"),
        (
            DeliveryFailure(DeliveryErrorType.NOT_FOUND, "relayed from further away"),
            DeliveryErrorType.NOT_FOUND,
            "relayed from further away",
        ),
        (
            DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, "no responders further away"),
            DeliveryErrorType.NO_RESPONDERS,
            "no responders further away",
        ),
        (
            wrapping(
                RuntimeError("asking the next hub failed"),
                DeliveryFailure(DeliveryErrorType.NO_RESPONDERS, "no responders on 'svc/next'"),
            ),
            DeliveryErrorType.NO_RESPONDERS,
            "nobody answering further along (RuntimeError: asking the next hub failed)",
        ),
    ],
    ids=[
        "FAILED",
        "FORBIDDEN",
        "UNAVAILABLE",
        "SHUTTING_DOWN",
        "relayed-NOT_FOUND",
        "relayed-NO_RESPONDERS",
        "wrapped-NO_RESPONDERS",
    ],
)
async def test_a_handlers_exception_is_flattened_into_a_nack(
    raised: Exception, error_type: DeliveryErrorType, fragment: str
) -> None:
    router = Router()

    async def handle(message: Ping, context: MessageContext) -> Pong:
        raise raised

    (await started(router, "server")).on(Ping, handle)
    client = await started(router, "client")

    with pytest.raises(DeliveryFailure) as caught:
        await client.ask("server", Ping(text="x", at=datetime.now(UTC)), 1.0)

    failure = caught.value
    assert failure is not raised
    assert failure.error_type is error_type
    assert fragment in failure.message
    assert failure.__cause__ is None  # the exception object did not cross
    assert not is_no_answer_in_time(failure)
    await router.close()


async def test_a_handlers_own_timeout_keeps_its_classification_across_the_boundary() -> None:
    router = Router()

    async def handle(message: Ping, context: MessageContext) -> Pong:
        raise TimeoutError("the inner hop gave no answer")

    (await started(router, "server")).on(Ping, handle)
    client = await started(router, "client")

    with pytest.raises(DeliveryFailure) as caught:
        await client.ask("server", Ping(text="x", at=datetime.now(UTC)), 1.0)

    assert caught.value.error_type is DeliveryErrorType.FAILED
    assert is_no_answer_in_time(caught.value)
    await router.close()


def test_an_unreachable_store_outranks_the_timeout_it_wraps() -> None:
    try:
        try:
            raise TimeoutError("connect timed out")
        except TimeoutError as exc:
            raise StoreError("could not connect to 10.42.18.4:5432", sqlstate=None) from exc
    except StoreError as err:
        error_type, _ = flatten_exception(err, hub="h", message_type="T")
    assert error_type is DeliveryErrorType.UNAVAILABLE


async def test_nothing_at_the_address_and_no_handler_are_not_found_verdicts() -> None:
    router = Router()
    (await started(router, "server")).on(Pong, lambda m, c: None)
    client = await started(router, "client")
    ping = Ping(text="x", at=datetime.now(UTC))

    with pytest.raises(DeliveryFailure) as nobody:
        await client.ask("nobody/here", ping, 1.0)
    with pytest.raises(DeliveryFailure) as unhandled:
        await client.ask("server", ping, 1.0)

    assert nobody.value.error_type is DeliveryErrorType.NOT_FOUND
    assert unhandled.value.error_type is DeliveryErrorType.NOT_FOUND
    assert "no handler" in unhandled.value.message
    assert not is_no_answer_in_time(nobody.value)
    # The in-process router knows its hubs: its NOT_FOUND stays a verdict (negative control of
    # NATS's NO_RESPONDERS), and the build-claim retry does not take it.
    assert not is_coordination_unreachable(nobody.value)
    assert not is_coordination_unreachable(unhandled.value)
    await router.close()


async def test_a_forwarding_hop_relays_nobody_answering_faithfully() -> None:
    """The gateway's next hop is down (NATS: no responders): the client gets NO_RESPONDERS with
    the hop's text, not relabelled into a NOT_FOUND verdict nor a FAILED NACK."""
    router = Router(NobodyAnsweringTransport("admin/build"), routes={"admin/build": "edge/gateway"})
    await started(router, "edge/gateway", forward_timeout=BOUND)
    client = await started(router, "client")

    with pytest.raises(DeliveryFailure) as caught:
        await client.ask("admin/build", BuildClaimRequest(fingerprint="f", holder="h"), BOUND)

    failure = caught.value
    assert failure.error_type is DeliveryErrorType.NO_RESPONDERS
    assert failure.message == (
        "Delivery to 'admin/build' failed: no responders on NATS subject 'x.admin/build'"
    )
    assert is_coordination_unreachable(failure)
    assert not is_no_answer_in_time(failure)
    await router.close()


async def test_a_hub_that_neither_serves_nor_forwards_answers_not_found() -> None:
    router = Router(routes={"admin/build": "edge/gateway"})
    await started(router, "edge/gateway")  # no forward_timeout: does not forward
    client = await started(router, "client")

    with pytest.raises(DeliveryFailure) as caught:
        await client.ask("admin/build", BuildClaimRequest(fingerprint="f", holder="h"), 1.0)

    assert caught.value.error_type is DeliveryErrorType.NOT_FOUND
    await router.close()


class SlowCoordinator:
    """A build coordinator whose handler waits until released (a stalled process)."""

    def __init__(self, router: Router) -> None:
        self.coordinator = BuildCoordinator(router)
        self.release = asyncio.Event()
        self.done = asyncio.Event()
        inner = self.coordinator._claim

        async def held(request: BuildClaimRequest, context: MessageContext) -> BuildClaim:
            await self.release.wait()
            claim = inner(request, context)
            self.done.set()
            return claim

        self.coordinator.hub.on(BuildClaimRequest, held)


async def test_a_forwarding_hop_answers_the_exact_did_not_arrive_on_time_nack() -> None:
    router = Router(routes={"admin/build": "edge/gateway"})
    slow = SlowCoordinator(router)
    await slow.coordinator.start()
    await started(router, "edge/gateway", forward_timeout=0.05)
    client = await started(router, "client")
    request = BuildClaimRequest(fingerprint="build-1", holder="pod-a")

    with pytest.raises(DeliveryFailure) as caught:
        await client.ask("admin/build", request, BOUND, response_type=BuildClaim)

    failure = caught.value
    assert failure.error_type is DeliveryErrorType.FAILED
    assert re.fullmatch(
        r"Delivery to 'admin/build' failed: Response did not arrive on time in 0\.05s for "
        r"message rxmesh\.build\.BuildClaimRequest \([0-9a-f]{32}\)",
        failure.message,
    )
    assert is_no_answer_in_time(failure)

    # The timed-out request still landed once the coordinator moved again; re-asking is safe.
    slow.release.set()
    await asyncio.wait_for(slow.done.wait(), BOUND)
    claim = await client.ask("admin/build", request, BOUND, response_type=BuildClaim)
    assert claim.granted
    assert claim.asks == 2
    assert slow.coordinator.statistics().claims == 1
    await router.close()


async def test_the_requesters_own_bound_is_a_timeout_error_and_the_request_may_land() -> None:
    router = Router()
    slow = SlowCoordinator(router)
    await slow.coordinator.start()
    client = await started(router, "client")
    request = BuildClaimRequest(fingerprint="build-1", holder="pod-a")

    with pytest.raises(TimeoutError):
        await client.ask("admin/build", request, 0.05, response_type=BuildClaim)

    slow.release.set()
    await asyncio.wait_for(slow.done.wait(), BOUND)  # the handler was not cancelled
    assert router.statistics().timeouts == 1
    await router.close()


async def test_claims_are_idempotent_per_holder_and_refused_to_another() -> None:
    router = Router()
    coordinator = await BuildCoordinator(router).start()
    client = await started(router, "client")

    first = await client.ask("admin/build", BuildClaimRequest(fingerprint="f", holder="a"), 1.0)
    again = await client.ask("admin/build", BuildClaimRequest(fingerprint="f", holder="a"), 1.0)
    other = await client.ask("admin/build", BuildClaimRequest(fingerprint="f", holder="b"), 1.0)

    assert isinstance(first, BuildClaim)
    assert isinstance(again, BuildClaim)
    assert isinstance(other, BuildClaim)
    assert first.granted
    assert again.granted
    assert first.claim_id == again.claim_id
    assert (again.asks, first.registered_at) == (2, again.registered_at)
    assert not other.granted
    assert other.claimed_by == "a"
    assert other.claim_id is None
    assert coordinator.statistics().claims == 1
    await router.close()


async def test_a_target_not_placed_in_time_answers_placement_operation_timed_out() -> None:
    router = Router()
    never = asyncio.Event()

    async def activate(address: str) -> MessageHub:
        await never.wait()
        raise AssertionError("unreachable")

    router.add_activator("views/", activate, timeout=0.05)
    client = await started(router, "client")

    with pytest.raises(DeliveryFailure) as caught:
        await client.ask("views/dashboard", Ping(text="x", at=datetime.now(UTC)), BOUND)

    assert caught.value.error_type is DeliveryErrorType.FAILED
    assert "Placement operation timed out" in caught.value.message
    assert is_no_answer_in_time(caught.value)
    await router.close()


async def test_a_target_is_placed_once_on_first_use() -> None:
    router = Router()
    activations: list[str] = []

    async def activate(address: str) -> MessageHub:
        activations.append(address)
        await asyncio.sleep(0)
        return MessageHub(address, router).on(Ping, lambda m, c: Pong(text=c.hub, seen_tags=[]))

    router.add_activator("views/", activate, timeout=1.0)
    client = await started(router, "client")
    ping = Ping(text="x", at=datetime.now(UTC))

    answers = await asyncio.wait_for(
        asyncio.gather(*(client.ask("views/a", ping, 1.0, response_type=Pong) for _ in range(3))),
        BOUND,
    )

    assert [a.text for a in answers] == ["views/a"] * 3
    assert activations == ["views/a"]
    assert router.statistics().placements == 1
    await router.close()


async def test_a_wrong_or_unknown_response_type_is_refused_locally() -> None:
    server_router = Router(InProcessTransport())
    (await started(server_router, "server")).on(Ping, lambda m, c: Pong(text="", seen_tags=[]))
    client = MessageHub("client", server_router)
    ping = Ping(text="x", at=datetime.now(UTC))

    with pytest.raises(TypeError):
        await client.ask("server", ping, 1.0, response_type=Ack)

    # Pong was never registered (no response_type=, no register_type): it cannot be decoded.
    with pytest.raises(LookupError, match="response_type"):
        await client.ask("server", ping, 1.0)
    await server_router.close()


async def test_disposing_a_request_abandons_the_wait_only() -> None:
    router = Router()
    slow = SlowCoordinator(router)
    await slow.coordinator.start()
    client = await started(router, "client")
    seen: list[object] = []

    request = BuildClaimRequest(fingerprint="f", holder="a")
    subscription = client.request("admin/build", request, BOUND).subscribe(seen.append, seen.append)
    await asyncio.sleep(0.01)
    subscription.dispose()
    slow.release.set()
    await asyncio.wait_for(slow.done.wait(), BOUND)

    assert seen == []
    assert slow.coordinator.statistics().requests == 1
    await router.close()


def test_routes_pick_the_longest_match_and_never_route_a_hop_to_itself() -> None:
    router = Router(routes={"admin/*": "edge/a", "admin/build": "edge/b"})

    assert router.next_hop("admin/build") == "edge/b"
    assert router.next_hop("admin/other") == "edge/a"
    assert router.next_hop("views/x") == "views/x"
    assert router.next_hop("admin/build", exclude="edge/b") == "edge/a"


def test_subjects_are_derived_from_addresses_and_escaped() -> None:
    assert subject_for("admin/build") == "rxmesh.hub.admin.build"
    assert subject_for("a.b/c*d", "p") == "p.a~2Eb.c~2Ad"
    assert subject_for("a.b") != subject_for("a/b")
    with pytest.raises(ValueError):
        subject_for("a//b")


def test_importing_messaging_does_not_import_nats() -> None:
    code = "import sys, rxmesh.messaging; sys.exit(1 if 'nats' in sys.modules else 0)"
    result = subprocess.run([sys.executable, "-c", code], check=False, timeout=30)
    assert result.returncode == 0
