"""Three real processes over NATS: client (this test) -> forwarding hub -> build coordinator.

The coordinator is paused with SIGSTOP during a claim: the forwarding hub answers the FAILED
"Response did not arrive on time" NACK, the client retries, and after SIGCONT it gets the SAME
claim (the timed-out ask landed too). With the coordinator gone for good (paused and never
continued) the witness door decides. A coordinator that is killed (SIGKILL, unsubscribed) gets
NATS's "no responders": nobody answering, retried on the same budget, and then the witness door
decides too; it is not a NOT_FOUND verdict.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxmesh.exceptions import (
    BuildCoordinationUnreachableError,
    DeliveryErrorType,
    DeliveryFailure,
)
from rxmesh.messaging import (
    BuildClaim,
    BuildClaimRequest,
    InMemoryBuildWitness,
    MessageHub,
    NatsTransport,
    Router,
    WitnessVerdict,
    claim_build,
)
from tests.helpers import ROOT, LogRecords
from tests.messaging._nats_node import GATEWAY_ADDRESS

pytestmark = pytest.mark.nats

FORWARD_TIMEOUT = 0.5
BACKOFF = (0.5, 1.0)
KILLED_BACKOFF = (0.1, 0.2)  # "no responders" comes at once; short waits keep the test fast
CLIENT_TIMEOUT = 3.0  # longer than the hop's bound: the hop's NACK arrives first
BOUND = 15.0
FORWARD_TEXT = re.compile(
    r"Delivery to 'admin/build' failed: Response did not arrive on time in 0\.5s for message "
    r"rxmesh\.build\.BuildClaimRequest \([0-9a-f]{32}\)"
)


@asynccontextmanager
async def node(role: str, url: str, prefix: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """A hub process; ready once it printed READY; always reaped (continued, then ended)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.messaging._nats_node",
        role,
        url,
        prefix,
        str(FORWARD_TIMEOUT),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), BOUND)
        assert line.strip() == b"READY", f"{role} did not start: {line!r}"
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            process.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only then
            try:
                await asyncio.wait_for(process.wait(), 5.0)
            except TimeoutError:
                process.kill()
                await process.wait()


@asynccontextmanager
async def mesh(nats_url: str) -> AsyncIterator[tuple[Any, MessageHub]]:
    """The coordinator and gateway processes, and this process's client hub."""
    prefix = f"rxmesh-test.{uuid.uuid4().hex}"
    async with AsyncExitStack() as stack:
        coordinator, _gateway = await asyncio.gather(
            stack.enter_async_context(node("coordinator", nats_url, prefix)),
            stack.enter_async_context(node("gateway", nats_url, prefix)),
        )
        transport = await NatsTransport.connect(nats_url, subject_prefix=prefix)
        router = Router(transport, routes={"admin/build": GATEWAY_ADDRESS})
        stack.push_async_callback(router.close)
        yield coordinator, MessageHub("pod-a", router)


async def ask_claim(client: MessageHub, fingerprint: str) -> BuildClaim:
    """pod-a's claim of ``fingerprint``, asked of the coordinator directly (bounded)."""
    request = BuildClaimRequest(fingerprint=fingerprint, holder="pod-a")
    return await asyncio.wait_for(
        client.ask("admin/build", request, CLIENT_TIMEOUT, response_type=BuildClaim), BOUND
    )


def local_decision(error: BuildCoordinationUnreachableError) -> bool:
    raise AssertionError("the witness had a verdict; no local decision was expected")


def claimed_by_pod_a(
    client: MessageHub, fingerprint: str, witness: InMemoryBuildWitness, **options: Any
) -> Any:
    """pod-a's claim_build of ``fingerprint`` on the running loop, ``witness`` behind it and no
    local decision expected."""
    return claim_build(
        client,
        fingerprint,
        "pod-a",
        witness=witness,
        decide_locally=local_decision,
        timeout=CLIENT_TIMEOUT,
        backoff=BACKOFF,
        scheduler=AsyncIOScheduler(asyncio.get_running_loop()),
        **options,
    )


async def test_a_paused_coordinator_is_retried_and_answers_the_same_claim(nats_url: str) -> None:
    witness = InMemoryBuildWitness({"build-1": WitnessVerdict.NO_GO})
    async with mesh(nats_url) as (coordinator, client):
        warm = await ask_claim(client, "warm")
        assert warm.granted

        retried: list[Exception] = []

        def on_retry(error: Exception, attempt: int, delay: float) -> None:
            retried.append(error)
            coordinator.send_signal(signal.SIGCONT)

        coordinator.send_signal(signal.SIGSTOP)
        decision = await asyncio.wait_for(
            claimed_by_pod_a(client, "build-1", witness, on_retry=on_retry), BOUND
        )

        [nack] = retried
        assert isinstance(nack, DeliveryFailure)
        assert nack.error_type is DeliveryErrorType.FAILED
        assert FORWARD_TEXT.fullmatch(nack.message)
        assert decision.decided_by == "coordinator"
        assert decision.proceed
        claim = decision.claim
        assert claim is not None
        assert claim.granted
        assert claim.asks == 2  # the timed-out ask landed after SIGCONT, then the retry
        assert witness.asked == []

        again = await ask_claim(client, "build-1")
        assert again.claim_id == claim.claim_id
        assert again.asks == 3


async def test_with_the_coordinator_gone_for_good_the_witness_decides(
    nats_url: str, log_records: LogRecords
) -> None:
    witness = InMemoryBuildWitness(
        {"build-go": WitnessVerdict.GO, "build-no-go": WitnessVerdict.NO_GO}
    )
    async with mesh(nats_url) as (coordinator, client):
        coordinator.send_signal(signal.SIGSTOP)  # never continued: it will not answer again
        loop = asyncio.get_running_loop()
        started = loop.time()
        go, no_go = await asyncio.wait_for(
            asyncio.gather(
                claimed_by_pod_a(client, "build-go", witness),
                claimed_by_pod_a(client, "build-no-go", witness),
                return_exceptions=True,
            ),
            BOUND,
        )
        elapsed = loop.time() - started

        assert not isinstance(go, BaseException)
        assert go.proceed
        assert go.decided_by == "witness"
        assert any(
            r["level"] == "WARNING" and "durable witness's GO" in r["message"] for r in log_records
        )
        assert isinstance(no_go, BuildCoordinationUnreachableError)
        assert isinstance(no_go.__cause__, DeliveryFailure)
        assert FORWARD_TEXT.fullmatch(no_go.__cause__.message)
        assert "3 attempt" in str(no_go)
        assert any(r["level"] == "ERROR" and "admin/build" in r["message"] for r in log_records)
        assert sorted(witness.asked) == ["build-go", "build-no-go"]
        # 3 hop timeouts of 0.5 s plus backoffs of 0.5 s and 1.0 s.
        assert 3 * FORWARD_TIMEOUT + sum(BACKOFF) - 0.1 <= elapsed < 3 * CLIENT_TIMEOUT


def is_nobody_answering_at_the_coordinator(error: BaseException) -> bool:
    return (
        isinstance(error, DeliveryFailure)
        and error.error_type is DeliveryErrorType.NO_RESPONDERS
        and "no responders on NATS subject" in error.message
        and error.message.startswith("Delivery to 'admin/build' failed")
    )


async def test_a_killed_coordinator_is_retried_then_the_witness_decides(
    nats_url: str, log_records: LogRecords
) -> None:
    """Issue 13, scenario 6: a coordinator that is down is not a verdict. FAILS against the old
    code, where NATS's "no responders" was a NOT_FOUND verdict: no retry, no witness, a fault."""
    witness = InMemoryBuildWitness({"build-via-gateway": WitnessVerdict.GO})
    local: list[BuildCoordinationUnreachableError] = []

    def decide_locally(error: BuildCoordinationUnreachableError) -> bool:
        local.append(error)
        return False

    async with mesh(nats_url) as (coordinator, client):
        coordinator.kill()  # SIGKILL: the process is gone, its subscription with it
        await asyncio.wait_for(coordinator.wait(), BOUND)
        assert coordinator.returncode == -signal.SIGKILL
        loop = asyncio.get_running_loop()

        async def claim(hub: MessageHub, fingerprint: str) -> tuple[Any, list[Exception]]:
            retried: list[Exception] = []
            decision = await asyncio.wait_for(
                claim_build(
                    hub,
                    fingerprint,
                    hub.address,
                    witness=witness,
                    decide_locally=decide_locally,
                    timeout=CLIENT_TIMEOUT,
                    backoff=KILLED_BACKOFF,
                    scheduler=AsyncIOScheduler(loop),
                    on_retry=lambda error, attempt, delay: retried.append(error),
                ),
                BOUND,
            )
            return decision, retried

        # Through the forwarding hub (a real process): it relays NO_RESPONDERS faithfully.
        started = loop.time()
        via_gateway, retried = await claim(client, "build-via-gateway")
        elapsed = loop.time() - started
        assert len(retried) == 2
        assert all(is_nobody_answering_at_the_coordinator(e) for e in retried), retried
        assert via_gateway.decided_by == "witness"
        assert via_gateway.proceed
        unreachable = via_gateway.unreachable
        assert isinstance(unreachable, BuildCoordinationUnreachableError)
        assert is_nobody_answering_at_the_coordinator(unreachable.__cause__)
        assert "3 attempt" in str(unreachable)
        assert "3 with nobody answering" in str(unreachable)
        assert sum(KILLED_BACKOFF) - 0.05 <= elapsed < BOUND

        # Straight to admin/build (no route): this process's own transport says NO_RESPONDERS;
        # the witness has no record, so the local decision is asked.
        # (A second router on the same transport; the mesh's router closes the transport.)
        direct = MessageHub("pod-b", Router(client.router.transport))
        undetermined, retried = await claim(direct, "build-direct")
        assert len(retried) == 2
        assert all(is_nobody_answering_at_the_coordinator(e) for e in retried), retried
        assert undetermined.decided_by == "local"
        assert not undetermined.proceed
        assert undetermined.verdict is WitnessVerdict.UNDETERMINED
        assert len(local) == 1
        assert local[0] is undetermined.unreachable

        assert witness.asked == ["build-via-gateway", "build-direct"]
        errors = [r for r in log_records if r["level"] == "ERROR"]
        assert len(errors) == 2
        assert all("nobody answering" in r["message"] for r in errors)
