"""The drill's session: a mesh, a journal, a census and health over a cut/restore backend.

It imports :mod:`rxmesh.testing` for types only; the backend is built (and the test helpers
imported) by :func:`rxmesh.drill.run_drill`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from reactivex import Observable

from rxmesh.cache import SyncedQueryCache
from rxmesh.drill._timeline import Timeline
from rxmesh.drill.invariants import RequestAccount
from rxmesh.health import (
    HealthRegistry,
    HealthReport,
    HealthStatus,
    LiveRecordCensusCheck,
    LiveRecordReading,
    PendingWritesCheck,
)
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome, read_journal
from rxmesh.mesh import Mesh
from rxmesh.model import NODE_TYPE_NODE_TYPE, AccessContext, MeshNode, NodeQuery, QueryFrame
from rxmesh.nodetypes import NodeTypeRegistry
from rxmesh.nodetypes.census import LiveRecordCensus
from rxmesh.operations import CreateNodeRequest, CreateNodeResponse, RejectionReason
from rxmesh.operators import retry_transient_connect

if TYPE_CHECKING:
    from rxmesh.testing import OutageBackend

__all__ = [
    "DRILL_PARTITION",
    "DRILL_REOPEN_BACKOFF",
    "DRILL_RETRY_DELAYS",
    "DRILL_USER",
    "SABOTAGES",
    "Drill",
    "Sabotage",
    "Tracked",
    "journal_files",
    "wait_until",
]

T = TypeVar("T")

DRILL_PARTITION = "drill"
"""The partition the drill writes into."""

DRILL_USER = "drill"
"""The requester of the drill's creates."""

DRILL_RETRY_DELAYS: tuple[float, ...] = (0.05, 0.1, 0.2)
"""The drill's retry ladder (the library default is 250/500/1000 ms)."""

DRILL_REOPEN_BACKOFF: tuple[float, ...] = (0.1, 0.2, 0.5, 1.0, 2.0)
"""The drill's re-open backoff for the census (the library default is 2, 5, 15, 30, 60 s)."""

SABOTAGES = ("duplicate", "lost-intent")
"""Broken invariants the drill can inject to prove its exit status turns non-zero:
``duplicate`` re-creates one outage item under a fresh id (what a caller that mints a new id per
attempt does); ``lost-intent`` turns off recording for one outage create (the negative control of
"every UNAVAILABLE write is recorded and re-issued once": a create that nobody re-issues)."""

Sabotage = Literal["duplicate", "lost-intent"]

_NODE_TYPES = NodeQuery(partition=DRILL_PARTITION, node_type=NODE_TYPE_NODE_TYPE)


async def _answers(source: Observable[T], timeout: float) -> list[T]:
    """Every item ``source`` emits until it completes (bounded): proves "exactly one answer"."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    items: list[T] = []

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_exception(error)

    def on_completed() -> None:
        if not done.done():
            done.set_result(None)

    subscription = source.subscribe(items.append, on_error, on_completed)
    try:
        await asyncio.wait_for(done, timeout)
    finally:
        subscription.dispose()
    return items


async def wait_until(predicate: Callable[[], bool | Awaitable[bool]], timeout: float) -> bool:
    """Poll ``predicate`` every 20 ms until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = predicate()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)


def journal_files(directory: Path) -> list[str]:
    """The paths of the intents a pending-write journal directory holds durably, in either of
    its formats (read without changing it: :func:`rxmesh.ledger.read_journal`)."""
    return [intent.path for intent in read_journal(directory)]


@dataclass
class Tracked:
    """One create the drill asked for, and everything that happened to it."""

    request: CreateNodeRequest
    phase: str
    answers: list[CreateNodeResponse] = field(default_factory=list)
    journaled: bool = False
    outcomes: list[PendingWriteOutcome] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.request.node.path

    @property
    def first(self) -> str:
        if not self.answers:
            return "no answer"
        answer = self.answers[0]
        if answer.success:
            return "created"
        return str(answer.rejection_reason or RejectionReason.UNKNOWN)

    @property
    def unavailable(self) -> bool:
        first = self.answers[0] if self.answers else None
        return first is not None and first.rejection_reason is RejectionReason.UNAVAILABLE

    def account(self) -> RequestAccount:
        """This create as the invariants read it."""
        return RequestAccount(
            path=self.path,
            request_id=self.request.request_id,
            phase=self.phase,
            answers=len(self.answers),
            first=self.first,
            journaled=self.journaled,
            verdicts=tuple(outcome.verdict for outcome in self.outcomes),
        )


class _CensusTap:
    """The census's health sink: forwards to the health check and writes the timeline."""

    def __init__(self, drill: Drill) -> None:
        self._drill = drill

    def record_live_records(self, reading: int | LiveRecordReading) -> None:
        drill = self._drill
        drill.census_check.record_live_records(reading)
        records = reading if isinstance(reading, int) else reading.records
        drill.census_count = records
        baked = len(drill.registry.names())
        drill.tl.event(
            "census",
            f"reading: {records} NodeType record(s) watched, {baked} type(s) baked",
            records=records,
            baked=baked,
        )

    def record_live_records_fault(self, text: str, extra: str | None = None) -> None:
        self._drill.census_check.record_live_records_fault(text, extra)
        self._drill.tl.event("census", text if extra is None else f"{text}; {extra}")


class Drill:
    """One drill run's mesh, journal, census and health, and the creates it tracks."""

    def __init__(
        self,
        backend: OutageBackend,
        ledger: PendingWriteLedger,
        tl: Timeline,
        *,
        retry_delays: Sequence[float],
        reopen_backoff: Sequence[float],
        timeout: float,
    ) -> None:
        self.backend = backend
        self.tl = tl
        self.timeout = timeout
        self.reopen_backoff = tuple(reopen_backoff)
        self.retry_delays = tuple(retry_delays)
        self.registry = NodeTypeRegistry()
        self.mesh = Mesh(
            backend.store, ledger=ledger, retry_delays=retry_delays, node_types=self.registry
        )
        self.access = AccessContext(user=DRILL_USER)
        self.tracked: list[Tracked] = []
        self.outcomes: list[PendingWriteOutcome] = []
        self.census_check = LiveRecordCensusCheck()
        self.census_count: int | None = None
        self.health = HealthRegistry()
        self.health.register("live-record-census", self.census_check, tags=("ready",))
        pending_check = PendingWritesCheck(self.mesh.ledger)
        self.health.register("pending-writes", pending_check, tags=("ready",))
        self.cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
            self._open_query, idle_grace=0.0
        )

    # -- pieces -----------------------------------------------------------------------------

    def _open_query(self, query: NodeQuery) -> Observable[QueryFrame]:
        """The store's live query behind the retry ladder."""
        return self.backend.store.query(query).pipe(retry_transient_connect(self.retry_delays))

    def start_census(self) -> None:
        """The live record census (:class:`~rxmesh.census.LiveRecordCensus`): a standing watch
        over ``cache.get(NodeType query)`` that re-bakes the mesh's node types and tells health."""
        self.census = LiveRecordCensus(
            self.cache,
            self.registry,
            _CensusTap(self),
            query=_NODE_TYPES,
            backoff=self.reopen_backoff,
        ).start()

    @property
    def census_reopens(self) -> int:
        return self.census.statistics().reopens

    @property
    def census_ended(self) -> bool:
        return self.census.statistics().ended

    def cut_live_queries(self) -> None:
        self.backend.faults.sever_open_queries()

    async def report(self) -> HealthReport:
        return await self.health.report()

    async def show_health(self) -> HealthReport:
        report = await self.report()
        reasons = {
            name: entry.description
            for name, entry in report.entries.items()
            if entry.status is not HealthStatus.HEALTHY
        }
        text = str(report.status).upper()
        self.tl.event("health", text, status=str(report.status), reasons=reasons)
        for name, description in reasons.items():
            self.tl.event("health", f"  {name}: {description}")
        return report

    async def create(
        self, path: str, item: str, phase: str, *, node_type: str = "Sensor"
    ) -> Tracked:
        content: dict[str, Any] = {"item": item}
        if node_type == NODE_TYPE_NODE_TYPE:
            # A NodeType record: the census bakes it; nodes of that type must carry an "item".
            content = {
                "name": item.removeprefix("type:"),
                "fields": {"item": {"type": "string", "required": True}},
            }
        node = MeshNode(path=path, node_type=node_type, content=content)
        tracked = Tracked(CreateNodeRequest(node=node, access=self.access), phase)
        self.tracked.append(tracked)
        tracked.answers = await _answers(self.mesh.create_node(tracked.request), self.timeout)
        journal = self.mesh.ledger.journal_file(path)
        tracked.journaled = any(
            i.path == path and i.request_id == tracked.request.request_id
            for i in self.mesh.ledger.pending()
        ) and (journal is None or journal.exists())
        answer = tracked.answers[0] if tracked.answers else None
        note = ""
        if tracked.unavailable:
            note = (
                f"; journaled in {journal.name}"
                if tracked.journaled and journal
                else "; journaled"
                if tracked.journaled
                else "; NOT journaled"
            )
        self.tl.event(
            "create",
            f"{path} -> {tracked.first}{note}",
            path=path,
            answer=tracked.first,
            answers=len(tracked.answers),
            journaled=tracked.journaled,
            request_id=tracked.request.request_id,
            error=None if answer is None else answer.error,
        )
        return tracked

    def on_outcome(self, outcome: PendingWriteOutcome) -> None:
        self.outcomes.append(outcome)
        for tracked in self.tracked:
            if (
                tracked.path == outcome.intent.path
                and tracked.request.request_id == outcome.intent.request_id
            ):
                tracked.outcomes.append(outcome)
        self.tl.event(
            "verdict",
            f"re-issue of {outcome.intent.path} -> {outcome.verdict.value}"
            + (f" ({outcome.reason.value})" if outcome.reason else ""),
            path=outcome.intent.path,
            verdict=outcome.verdict.value,
            request_id=outcome.intent.request_id,
        )
