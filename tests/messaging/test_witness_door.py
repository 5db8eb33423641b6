"""The durable-witness door: GO proceeds with a WARNING, NO-GO re-raises,
UNDETERMINED decides locally; a failed witness read is not "undetermined"."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxmesh.exceptions import (
    BuildCoordinationUnreachableError,
    DeliveryErrorType,
    DeliveryFailure,
    StoreError,
)
from rxmesh.faults import is_coordination_unreachable
from rxmesh.messaging import (
    BuildClaimRequest,
    BuildCoordinator,
    BuildWitness,
    InMemoryBuildWitness,
    MessageContext,
    MessageHub,
    Router,
    WitnessVerdict,
    claim_build,
    decide_at_witness_door,
)
from tests.helpers import LogRecords

BOUND = 5.0
FINGERPRINT = "sha256:0f3c"


def unreachable() -> BuildCoordinationUnreachableError:
    error = BuildCoordinationUnreachableError("admin/build: 3 attempt(s); nothing was verified")
    error.__cause__ = DeliveryFailure(DeliveryErrorType.FAILED, "Response did not arrive on time")
    return error


class Local:
    """A local decision that records its calls."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[BuildCoordinationUnreachableError] = []

    def __call__(self, error: BuildCoordinationUnreachableError) -> bool:
        self.calls.append(error)
        return self.answer


class FailingWitness:
    """A witness whose store cannot be reached."""

    def __init__(self) -> None:
        self.error = StoreError("could not connect to postgres@db:5432", sqlstate="08001")

    async def verdict(self, fingerprint: str) -> WitnessVerdict:
        raise self.error


def test_the_in_memory_witness_is_a_build_witness() -> None:
    assert isinstance(InMemoryBuildWitness(), BuildWitness)


async def test_go_proceeds_with_a_warning(log_records: LogRecords) -> None:
    error = unreachable()
    witness = InMemoryBuildWitness({FINGERPRINT: WitnessVerdict.GO})
    local = Local(False)

    decision = await decide_at_witness_door(error, FINGERPRINT, witness, local)

    assert decision.proceed
    assert decision.decided_by == "witness"
    assert decision.unreachable is error
    assert local.calls == []
    assert any(r["level"] == "WARNING" and FINGERPRINT in r["message"] for r in log_records)


async def test_no_go_re_raises_the_unreachable_error() -> None:
    error = unreachable()
    witness = InMemoryBuildWitness({FINGERPRINT: WitnessVerdict.NO_GO})
    local = Local(True)

    with pytest.raises(BuildCoordinationUnreachableError) as caught:
        await decide_at_witness_door(error, FINGERPRINT, witness, local)

    assert caught.value is error
    assert isinstance(caught.value.__cause__, DeliveryFailure)
    assert local.calls == []


@pytest.mark.parametrize("answer", [True, False])
async def test_undetermined_decides_locally(answer: bool) -> None:
    error = unreachable()
    local = Local(answer)

    decision = await decide_at_witness_door(error, FINGERPRINT, InMemoryBuildWitness(), local)

    assert decision.proceed is answer
    assert decision.decided_by == "local"
    assert decision.verdict is WitnessVerdict.UNDETERMINED
    assert local.calls == [error]


async def test_an_async_local_decision_is_awaited() -> None:
    async def decide(error: BuildCoordinationUnreachableError) -> bool:
        await asyncio.sleep(0)
        return True

    decision = await decide_at_witness_door(
        unreachable(), FINGERPRINT, InMemoryBuildWitness(), decide
    )

    assert decision.proceed


async def test_a_failed_witness_read_is_not_undetermined() -> None:
    witness = FailingWitness()
    local = Local(True)

    with pytest.raises(StoreError) as caught:
        await decide_at_witness_door(unreachable(), FINGERPRINT, witness, local)

    assert caught.value is witness.error
    assert local.calls == []


async def stalled_coordinator(router: Router) -> asyncio.Event:
    """A coordinator at admin/build that never answers (until the event is set)."""
    coordinator = BuildCoordinator(router)
    release = asyncio.Event()
    inner = coordinator._claim

    async def held(request: Any, context: MessageContext) -> Any:
        await release.wait()
        return inner(request, context)

    coordinator.hub.on(BuildClaimRequest, held)
    await coordinator.start()
    return release


async def test_claim_build_answered_by_the_coordinator_never_asks_the_witness() -> None:
    router = Router()
    await BuildCoordinator(router).start()
    client = await MessageHub("pod-a", router).start()
    witness = InMemoryBuildWitness({FINGERPRINT: WitnessVerdict.NO_GO})

    decision = await asyncio.wait_for(
        claim_build(client, FINGERPRINT, "pod-a", witness=witness, decide_locally=Local(False)),
        BOUND,
    )

    assert decision.decided_by == "coordinator"
    assert decision.proceed
    assert decision.claim is not None
    assert decision.claim.granted
    assert witness.asked == []
    await router.close()


@pytest.mark.parametrize("verdict", [WitnessVerdict.GO, WitnessVerdict.NO_GO])
async def test_claim_build_through_a_timing_out_hop_reaches_the_witness(
    verdict: WitnessVerdict,
) -> None:
    router = Router(routes={"admin/build": "edge/gateway"})
    release = await stalled_coordinator(router)
    await MessageHub("edge/gateway", router, forward_timeout=0.02).start()
    client = await MessageHub("pod-a", router).start()
    witness = InMemoryBuildWitness({FINGERPRINT: verdict})
    retries: list[int] = []

    claiming = claim_build(
        client,
        FINGERPRINT,
        "pod-a",
        witness=witness,
        decide_locally=Local(False),
        timeout=1.0,
        backoff=(0.01, 0.02),
        on_retry=lambda error, attempt, delay: retries.append(attempt),
    )
    if verdict is WitnessVerdict.GO:
        decision = await asyncio.wait_for(claiming, BOUND)
        assert decision.proceed
        assert decision.decided_by == "witness"
        assert decision.unreachable is not None
        assert isinstance(decision.unreachable.__cause__, DeliveryFailure)
    else:
        with pytest.raises(BuildCoordinationUnreachableError) as caught:
            await asyncio.wait_for(claiming, BOUND)
        assert isinstance(caught.value.__cause__, DeliveryFailure)
        assert "3 attempt" in str(caught.value)
    assert retries == [1, 2]
    assert witness.asked == [FINGERPRINT]
    release.set()
    await router.close()


async def test_claim_build_surfaces_a_verdict_nack_without_asking_the_witness() -> None:
    # Negative control of the NO_RESPONDERS retry: the in-process router knows its hubs, so its
    # NOT_FOUND for an address nobody serves stays a verdict: not retried, no witness.
    router = Router()  # nothing at admin/build: NOT_FOUND, a verdict
    client = await MessageHub("pod-a", router).start()
    witness = InMemoryBuildWitness({FINGERPRINT: WitnessVerdict.GO})
    retried: list[Exception] = []

    with pytest.raises(DeliveryFailure) as caught:
        await asyncio.wait_for(
            claim_build(
                client,
                FINGERPRINT,
                "pod-a",
                witness=witness,
                decide_locally=Local(True),
                on_retry=lambda error, attempt, delay: retried.append(error),
            ),
            BOUND,
        )

    assert caught.value.error_type is DeliveryErrorType.NOT_FOUND
    assert "no hub serves that address (in-process)" in caught.value.message
    assert not is_coordination_unreachable(caught.value)
    assert retried == []
    assert witness.asked == []
    await router.close()
