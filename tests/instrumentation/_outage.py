"""A drill-like outage over a real Mesh: seeded creates, the store made unreachable, N creates
answered UNAVAILABLE, the store restored with a declared gap, the re-issues settled. The run
keeps its own accounting, which the metrics and spans are compared with."""

from __future__ import annotations

from dataclasses import dataclass, field

from rxmesh import CreateNodeRequest, Mesh, RejectionReason
from rxmesh.aio import first_value
from rxmesh.testing import FaultInjectingStore
from tests.helpers import ALICE, Outcomes, doc
from tests.mesh.conftest import FAST, make_mesh


@dataclass
class Accounting:
    """What the run itself saw (never read from the instruments)."""

    answers: dict[str, int] = field(default_factory=dict)
    refused_attempts: int = 0
    unavailable_ids: list[str] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    pending_during_outage: int = 0
    paths: list[str] = field(default_factory=list)


async def run_outage(
    seeded: int = 2, during: int = 3
) -> tuple[Mesh, FaultInjectingStore, Accounting]:
    mesh, store = make_mesh()
    books = Accounting()

    async def create(path: str) -> None:
        books.paths.append(path)
        response = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc(path), access=ALICE))
        )
        outcome = "success" if response.success else str(response.rejection_reason)
        books.answers[outcome] = books.answers.get(outcome, 0) + 1
        if response.rejection_reason is RejectionReason.UNAVAILABLE:
            books.unavailable_ids.append(response.request_id)

    for i in range(seeded):
        await create(f"acme/seed-{i}")
    store.refuse_writes_as_unreachable()
    for i in range(during):
        await create(f"acme/outage-{i}")
    books.refused_attempts = store.injected["refused_write"]
    books.pending_during_outage = len(mesh.ledger.pending())
    collected = Outcomes(mesh.ledger)
    store.restore()
    store.declare_gap("store restored")
    for outcome in await collected.wait(len(books.unavailable_ids), timeout=5.0):
        verdict = outcome.verdict.value
        books.verdicts[verdict] = books.verdicts.get(verdict, 0) + 1
    return mesh, store, books


RETRIES_PER_GIVE_UP = len(FAST)
"""The mesh tests' ladder: three retries, so four attempts before an UNAVAILABLE answer."""
