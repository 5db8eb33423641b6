"""The pre-warm sweep (SPEC §8, §9): the build claim, the durable witness in the store, then every
NodeType record baked at boot. Waits are bounded; the silent coordinator uses tiny timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rxmesh import MeshNode
from rxmesh.aio import first_value
from rxmesh.exceptions import (
    BuildCoordinationUnreachableError,
    MalformedWitnessRecordError,
    StoreError,
)
from rxmesh.messaging import (
    BuildClaimRequest,
    BuildCoordinator,
    BuildWitness,
    MessageContext,
    MessageHub,
    Router,
    WitnessVerdict,
)
from rxmesh.nodetypes import NodeTypeRegistry
from rxmesh.nodetypes.prewarm import (
    BUILD_WITNESS_PREFIX,
    PreWarmer,
    StoreBuildWitness,
    proceed_locally,
)
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import LogRecords, done
from tests.mesh.conftest import make_mesh

BOUND = 5.0
FINGERPRINT = "build-2026.10.05"
TINY: dict[str, Any] = {"timeout": 0.02, "backoff": (0.01, 0.01), "retry_delays": ()}
"""A coordinator that never answers is given up on in ~0.1 s; no store read is retried."""


def nodetype(path: str, name: str) -> MeshNode:
    return MeshNode(
        path=path,
        node_type="NodeType",
        content={"name": name, "fields": {"text": {"type": "string", "required": True}}},
    )


def seeded(*extra: MeshNode) -> FaultInjectingStore:
    inner = InMemoryStore()
    for node in (nodetype("types/Invoice", "Invoice"), nodetype("types/Note", "Note"), *extra):
        done(inner.write(node))
    return FaultInjectingStore(inner)


async def run(prewarmer: PreWarmer) -> Any:
    return await asyncio.wait_for(prewarmer.run(), BOUND)


class SilentCoordinator:
    """A hub at admin/build that receives claims and never answers (until released)."""

    def __init__(self, router: Router) -> None:
        self.release = asyncio.Event()
        self.asked = 0
        self.hub = MessageHub("admin/build", router).on(BuildClaimRequest, self._held)

    async def _held(self, request: BuildClaimRequest, context: MessageContext) -> None:
        self.asked += 1
        await self.release.wait()


@pytest.fixture
async def silent() -> AsyncIterator[tuple[MessageHub, SilentCoordinator]]:
    router = Router()
    coordinator = SilentCoordinator(router)
    await coordinator.hub.start()
    client = await MessageHub("pod-a", router).start()
    yield client, coordinator
    coordinator.release.set()
    await router.close()


# -- the sweep --------------------------------------------------------------------------------


async def test_the_sweep_bakes_every_record_at_boot() -> None:
    store = seeded(MeshNode(path="acme/doc", node_type="Doc", content={"x": 1}))
    registry = NodeTypeRegistry(strict=True)

    result = await run(PreWarmer(store, registry, retry_delays=()))

    assert result.proceeded and result.decision is None
    assert (result.records, result.baked) == (2, ("Invoice", "Note"))
    assert registry.names() == ("Invoice", "Note")
    assert store.counts["query"] == 1


async def test_the_sweep_reads_through_a_mesh_and_reports_malformed_records() -> None:
    mesh, store = make_mesh()
    for node in (
        nodetype("types/Note", "Note"),
        MeshNode(path="types/Bad", node_type="NodeType", content={"name": "Bad", "fields": 1}),
    ):
        done(store.inner.write(node))
    registry = NodeTypeRegistry()

    result = await run(PreWarmer(mesh, registry))

    assert result.records == 2
    assert result.malformed == ("types/Bad",)
    assert registry.names() == ("Note",)


async def test_a_records_read_that_fails_propagates_and_bakes_nothing() -> None:
    store = seeded()
    store.refuse_reads_as_unreachable()
    registry = NodeTypeRegistry()

    with pytest.raises(StoreError) as caught:
        await run(PreWarmer(store, registry, retry_delays=()))

    assert caught.value.sqlstate == "08001"
    assert registry.names() == ()


async def test_a_hub_needs_a_fingerprint() -> None:
    router = Router()
    with pytest.raises(ValueError, match="fingerprint"):
        PreWarmer(seeded(), NodeTypeRegistry(), hub=MessageHub("pod-a", router))


# -- the build claim --------------------------------------------------------------------------


async def test_an_answered_claim_decides_and_the_witness_is_not_read() -> None:
    router = Router()
    await BuildCoordinator(router).start()
    client = await MessageHub("pod-a", router).start()
    store = seeded()
    registry = NodeTypeRegistry()

    result = await run(
        PreWarmer(store, registry, hub=client, fingerprint=FINGERPRINT, holder="pod-a", **TINY)
    )

    assert result.proceeded
    assert result.decision.decided_by == "coordinator"
    assert result.decision.claim.granted
    assert registry.names() == ("Invoice", "Note")
    assert store.counts["read"] == 0  # the witness was never asked
    await router.close()


async def test_a_claim_held_by_another_holder_skips_the_sweep(log_records: LogRecords) -> None:
    router = Router()
    coordinator = await BuildCoordinator(router).start()
    client = await MessageHub("pod-a", router).start()
    first = await run(
        PreWarmer(seeded(), NodeTypeRegistry(), hub=client, fingerprint=FINGERPRINT, holder="a")
    )
    registry = NodeTypeRegistry()

    second = await run(
        PreWarmer(seeded(), registry, hub=client, fingerprint=FINGERPRINT, holder="b", **TINY)
    )

    assert first.proceeded and not second.proceeded
    assert second.decision.claim.claimed_by == "a"
    assert registry.names() == ()
    assert coordinator.statistics().claims == 1
    assert any("pre-warm sweep skipped" in str(r["message"]) for r in log_records.at("WARNING"))
    await router.close()


async def test_an_unreachable_coordinator_and_a_go_witness_proceed_with_a_warning(
    silent: tuple[MessageHub, SilentCoordinator], log_records: LogRecords
) -> None:
    client, coordinator = silent
    store = seeded()
    await first_value(StoreBuildWitness(store).record(FINGERPRINT, "GO"))
    registry = NodeTypeRegistry()

    result = await run(PreWarmer(store, registry, hub=client, fingerprint=FINGERPRINT, **TINY))

    assert coordinator.asked == 3  # the handshake was retried before the witness was asked
    assert result.proceeded
    assert result.decision.decided_by == "witness"
    assert result.decision.verdict is WitnessVerdict.GO
    assert isinstance(result.decision.unreachable, BuildCoordinationUnreachableError)
    assert registry.names() == ("Invoice", "Note")
    warnings = [str(r["message"]) for r in log_records.at("WARNING")]
    assert any("proceeding on the durable witness's GO" in m for m in warnings)
    errors = [str(r["message"]) for r in log_records.at("ERROR")]
    assert any("Build coordination at 'admin/build' gave no answer in time" in m for m in errors)


async def test_an_unreachable_coordinator_and_a_no_go_witness_re_raise(
    silent: tuple[MessageHub, SilentCoordinator],
) -> None:
    client, _ = silent
    store = seeded()
    await first_value(StoreBuildWitness(store).record(FINGERPRINT, WitnessVerdict.NO_GO))
    registry = NodeTypeRegistry()

    with pytest.raises(BuildCoordinationUnreachableError) as caught:
        await run(PreWarmer(store, registry, hub=client, fingerprint=FINGERPRINT, **TINY))

    assert "admin/build" in str(caught.value)
    assert "Nothing was verified" in str(caught.value)
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert registry.names() == ()
    assert store.counts["query"] == 0  # not a record was read


async def test_an_unreachable_coordinator_and_no_witness_record_decide_locally_to_proceed(
    silent: tuple[MessageHub, SilentCoordinator], log_records: LogRecords
) -> None:
    client, _ = silent
    registry = NodeTypeRegistry()

    result = await run(PreWarmer(seeded(), registry, hub=client, fingerprint=FINGERPRINT, **TINY))

    assert result.proceeded
    assert result.decision.decided_by == "local"
    assert result.decision.verdict is WitnessVerdict.UNDETERMINED
    assert registry.names() == ("Invoice", "Note")
    warnings = [str(r["message"]) for r in log_records.at("WARNING")]
    assert any("decided locally: proceed" in m for m in warnings)


async def test_a_local_decision_not_to_proceed_skips_the_sweep(
    silent: tuple[MessageHub, SilentCoordinator],
) -> None:
    client, _ = silent
    registry = NodeTypeRegistry()
    decided: list[BuildCoordinationUnreachableError] = []

    def refuse(error: BuildCoordinationUnreachableError) -> bool:
        decided.append(error)
        return False

    result = await run(
        PreWarmer(
            seeded(), registry, hub=client, fingerprint=FINGERPRINT, decide_locally=refuse, **TINY
        )
    )

    assert not result.proceeded and len(decided) == 1
    assert registry.names() == ()


async def test_a_witness_read_fault_propagates_and_is_never_undetermined(
    silent: tuple[MessageHub, SilentCoordinator],
) -> None:
    client, _ = silent
    store = seeded()
    witness = StoreBuildWitness(store, retry_delays=())
    store.fault_next_read(witness.path_for(FINGERPRINT))
    decided: list[object] = []
    registry = NodeTypeRegistry()

    def local(error: BuildCoordinationUnreachableError) -> bool:
        decided.append(error)
        return True

    with pytest.raises(StoreError) as caught:
        await run(
            PreWarmer(
                store,
                registry,
                hub=client,
                fingerprint=FINGERPRINT,
                decide_locally=local,
                **TINY,
            )
        )

    assert caught.value.sqlstate == "08001"
    assert decided == []  # the local decision was not reached
    assert registry.names() == ()
    assert [op.outcome for op in store.operations if op.op == "read"] == ["faulted"]


# -- the store-backed witness -----------------------------------------------------------------


def test_the_store_witness_is_a_build_witness() -> None:
    assert isinstance(StoreBuildWitness(InMemoryStore()), BuildWitness)


def test_witness_paths_are_valid_under_the_reserved_build_segment() -> None:
    witness = StoreBuildWitness(InMemoryStore())
    assert BUILD_WITNESS_PREFIX == "system/_build"
    assert witness.path_for("build-1.2") == "system/_build/build-1.2"
    hashed = witness.path_for("sha256:0f3c")
    assert (
        hashed.startswith("system/_build/sha256-")
        and len(hashed) == len("system/_build/sha256-") + 64
    )
    assert witness.path_for("_hidden") != "system/_build/_hidden"
    MeshNode(path=hashed)  # a legal node path
    with pytest.raises(ValueError, match="empty"):
        witness.path_for("")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"verdict": "GO"}, WitnessVerdict.GO),
        ({"verdict": "NO-GO"}, WitnessVerdict.NO_GO),
        ({"verdict": "no_go"}, WitnessVerdict.NO_GO),
        ({"verdict": "UNDETERMINED"}, WitnessVerdict.UNDETERMINED),
    ],
)
async def test_the_witness_reads_the_recorded_verdict(
    content: dict[str, Any], expected: WitnessVerdict
) -> None:
    store = InMemoryStore()
    witness = StoreBuildWitness(store)
    done(store.write(MeshNode(path=witness.path_for("b1"), content=content)))
    assert await witness.verdict("b1") is expected


async def test_no_record_is_undetermined_and_an_unreadable_one_is_an_error() -> None:
    store = InMemoryStore()
    witness = StoreBuildWitness(store)
    assert await witness.verdict("b1") is WitnessVerdict.UNDETERMINED
    done(store.write(MeshNode(path=witness.path_for("b2"), content={"verdict": "maybe"})))
    with pytest.raises(MalformedWitnessRecordError, match="system/_build/b2"):
        await witness.verdict("b2")
    with pytest.raises(ValueError, match="'GO' or 'NO-GO'"):
        witness.record("b3", "perhaps")


def test_the_default_local_decision_is_to_proceed() -> None:
    assert proceed_locally(BuildCoordinationUnreachableError("x")) is True
