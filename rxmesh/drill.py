"""``rxmesh drill``: an outage drill showing, in seconds, what rxmesh does when its store goes away.

The drill starts a mesh with a pending-write journal, a live record census (a standing watch over
the NodeType records, re-opened after a transient fault) and a health registry; creates nodes;
makes the store unreachable; shows creates answered UNAVAILABLE and journaled, the census
re-opening and health DEGRADED with the reason; brings the store back; shows the evidence (a
declared change-feed gap), the re-issues and their verdicts, health HEALTHY again; and ends with a
table of invariants. It passes (exit status 0) only if every invariant holds.

Two stores:

- the embedded one (default): ``FaultInjectingStore(InMemoryStore())``; the outage refuses every
  read and write as unreachable and drops the change feed; the restore declares a gap.
- PostgreSQL (``dsn=``): the drill starts a loopback :class:`~rxmesh.testing.FaultProxy` in front
  of the given server and talks to it through the proxy; the outage makes the proxy refuse new
  connections and reset every open one; the restore listens again, and the store's own change-feed
  listener declares the gap when it is back. The drill NEVER stops a server; it uses its own
  schemas (a fresh prefix per run) and drops them at the end. Behind a transaction-pooling proxy
  (PgBouncer, RDS Proxy, Supavisor) pass ``listen_dsn=`` a direct connection to the server (the
  store's change feed refuses to start without it); the drill puts a second proxy in front of it
  and cuts both.

In both, the drill also ends the census's open live query with the incident's chain (a DB frame
from ``ConnectionResetError(104)``), as a live query reading over the cut connection sees it.

The retry ladder and re-open backoff are shortened (parameters) so the drill takes seconds; the
text output states the library's real defaults next to them.

Example:
    >>> import asyncio, io
    >>> result = asyncio.run(run_drill(out=io.StringIO()))  # doctest: +SKIP
    >>> result.ok  # doctest: +SKIP
    True
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO, TypeVar

from reactivex import Observable

from rxmesh.cache import SyncedQueryCache
from rxmesh.census import LiveRecordCensus
from rxmesh.exceptions import ChangeFeedUnverifiedError, StoreError
from rxmesh.faults import is_store_unreachable
from rxmesh.health import (
    HealthCheckResult,
    HealthRegistry,
    HealthReport,
    HealthStatus,
    LiveRecordCensusCheck,
    LiveRecordReading,
)
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.mesh import Mesh
from rxmesh.model import (
    NODE_TYPE_NODE_TYPE,
    AccessContext,
    ChangeFeedGap,
    MeshNode,
    NodeQuery,
    QueryFrame,
    is_reserved_path,
)
from rxmesh.nodetypes import NodeTypeRegistry
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    RejectionReason,
    Verdict,
)
from rxmesh.operators import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    DEFAULT_RETRY_DELAYS,
    retry_transient_connect,
)
from rxmesh.providers import Store
from rxmesh.testing import FaultInjectingStore, FaultProxy

__all__ = [
    "DRILL_PARTITION",
    "DRILL_REOPEN_BACKOFF",
    "DRILL_RETRY_DELAYS",
    "SABOTAGES",
    "DrillEvent",
    "DrillResult",
    "Invariant",
    "add_arguments",
    "main",
    "run",
    "run_drill",
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
attempt does); ``lost-intent`` turns off recording for one outage create (the SPEC §5 negative
control: an UNAVAILABLE create that nobody re-issues)."""

Sabotage = Literal["duplicate", "lost-intent"]

_NODE_TYPES = NodeQuery(partition=DRILL_PARTITION, node_type=NODE_TYPE_NODE_TYPE)


# ---------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class DrillEvent:
    """One line of the drill's timeline: seconds since the start, a kind, a sentence, data."""

    t: float
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Invariant:
    """One checked invariant: its name, whether it holds, and what was found."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class DrillResult:
    """What a drill run found: its timeline and its invariants (``ok`` if all hold)."""

    events: tuple[DrillEvent, ...]
    invariants: tuple[Invariant, ...]

    @property
    def ok(self) -> bool:
        """Whether every invariant holds (and there is at least one)."""
        return bool(self.invariants) and all(inv.ok for inv in self.invariants)

    @property
    def exit_status(self) -> int:
        """0 if every invariant holds, else 1."""
        return 0 if self.ok else 1


class _Timeline:
    """Collects events and writes them as text (a timeline and tables) or JSON lines."""

    def __init__(self, out: TextIO | None, json_lines: bool) -> None:
        self._out = out
        self._json = json_lines
        self._start = time.monotonic()
        self.events: list[DrillEvent] = []

    def event(self, kind: str, text: str, *, tabled: bool = False, **data: Any) -> None:
        moment = time.monotonic() - self._start
        item = DrillEvent(round(moment, 3), kind, text, data)
        self.events.append(item)
        if self._out is None:
            return
        if self._json:
            line = {"t": item.t, "event": kind, "text": text, **data}
            self._out.write(json.dumps(line, default=str) + "\n")
        elif not tabled:
            stamp = f"+{moment:.3f}s"
            self._out.write(f"  {stamp:>8}  {kind:<9} {text}\n")
        self._out.flush()

    def text(self, line: str = "") -> None:
        if self._out is not None and not self._json:
            self._out.write(line + "\n")

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        if self._out is None or self._json:
            return
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
        self.text()
        self.text(title)
        head = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
        self.text(("  " + head).rstrip())
        self.text("  " + "  ".join("-" * w for w in widths))
        for row in rows:
            cells = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            self.text(("  " + cells).rstrip())


# ---------------------------------------------------------------------------------- backends


class _Backend(Protocol):
    """A store the drill can cut and restore."""

    store: Store
    faults: FaultInjectingStore
    schema: str | None
    description: str
    cut_text: str
    restore_text: str

    async def cut(self) -> None: ...

    async def restore(self) -> None: ...

    async def rows(self) -> list[MeshNode]: ...


class _MemoryBackend:
    def __init__(self) -> None:
        from rxmesh.providers.memory import InMemoryStore

        self.inner = InMemoryStore()
        self.faults = FaultInjectingStore(self.inner)
        self.store: Store = self.faults
        self.description = "embedded in-memory store: FaultInjectingStore(InMemoryStore())"
        self.cut_text = (
            "FaultInjectingStore refuses every read and write as unreachable "
            "(StoreError 08001 from ConnectionRefusedError), drops the change feed and severs the "
            "open live queries with the incident chain (StoreError <- ConnectionResetError 104)"
        )
        self.restore_text = "FaultInjectingStore answers again; its change feed resumes"
        self.schema: str | None = None
        self.cut_at = datetime.now(UTC)

    async def cut(self) -> None:
        self.cut_at = datetime.now(UTC)
        self.faults.refuse_writes_as_unreachable()
        self.faults.refuse_reads_as_unreachable()
        self.faults.drop_change_feed()

    async def restore(self) -> None:
        self.faults.restore()
        self.faults.resume_change_feed(announce_gap=False)
        self.faults.declare_gap("drill: the store answers again", lost_at=self.cut_at)

    async def rows(self) -> list[MeshNode]:
        frame: QueryFrame = await _first(self.inner.query(NodeQuery(partition=DRILL_PARTITION)))
        return list(frame.nodes)


class _PostgresBackend:
    """PostgreSQL behind a loopback FaultProxy the drill starts (and closes); own schemas."""

    def __init__(self, dsn: str, listen_dsn: str | None = None) -> None:
        self.dsn = dsn
        self.listen_dsn = listen_dsn
        # The drill's own statements (schema drop, final read) go to the server directly when
        # it can, and never rely on asyncpg's named statements (a pooler breaks them).
        self.admin_dsn = listen_dsn or dsn
        self.prefix = f"drill{secrets.token_hex(4)}_"
        self.description = ""
        self.cut_text = (
            "the FaultProxy refuses new connections and resets (TCP RST) every open one: "
            "the pool and the change-feed listener lose the server; the open live queries are "
            "severed with the incident chain (injected through FaultInjectingStore: a PostgreSQL "
            "live query itself would wait for the gap and re-read rather than fail)"
        )
        self.restore_text = "the FaultProxy listens again; the store re-connects by itself"

    async def __aenter__(self) -> _PostgresBackend:
        from urllib.parse import urlparse

        from rxmesh.providers.postgres import PostgresStore

        parsed = urlparse(self.dsn)
        self.proxy = await FaultProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432).start()
        self.listen_proxy: FaultProxy | None = None
        listen_dsn = None
        if self.listen_dsn is not None:
            heard = urlparse(self.listen_dsn)
            self.listen_proxy = await FaultProxy(
                heard.hostname or "127.0.0.1", heard.port or 5432
            ).start()
            listen_dsn = self.listen_proxy.dsn(self.listen_dsn)
        self.pg = PostgresStore(
            self.proxy.dsn(self.dsn),
            name=f"postgres@{parsed.hostname or '127.0.0.1'}:{parsed.port or 5432}"
            f"/{parsed.path.lstrip('/') or 'postgres'} (via drill proxy :{self.proxy.port})",
            listen_dsn=listen_dsn,
            schema_prefix=self.prefix,
            connect_timeout=2.0,
            command_timeout=5.0,
            heartbeat_interval=0.2,
            heartbeat_timeout=0.5,
            reconnect_backoff=(0.05, 0.1, 0.2, 0.5),
            acquire_timeout=5.0,
        )
        try:
            await self.pg.start()
        except BaseException:
            await self._close_proxies()
            raise
        self.faults = FaultInjectingStore(self.pg)
        self.store: Store = self.faults
        self.schema: str | None = self.pg.schema_of(DRILL_PARTITION)
        self.description = f"PostgreSQL {self.pg.name}; schemas {self.prefix}* (dropped at the end)"
        if self.pg.pooled:
            self.description += "; through a connection pooler"
        if self.listen_proxy is not None:
            self.description += f"; change feed via drill proxy :{self.listen_proxy.port}"
        return self

    def _proxies(self) -> list[FaultProxy]:
        return [self.proxy] + ([self.listen_proxy] if self.listen_proxy is not None else [])

    async def _close_proxies(self) -> None:
        for proxy in self._proxies():
            await proxy.close()

    async def __aexit__(self, *exc_info: object) -> None:
        import asyncpg

        try:
            await self.pg.close()
        finally:
            await self._close_proxies()
            conn = await asyncpg.connect(self.admin_dsn, timeout=5.0, statement_cache_size=0)
            try:
                await conn.execute(
                    f'DROP SCHEMA IF EXISTS "{self.pg.schema_of(DRILL_PARTITION)}" CASCADE'
                )
            finally:
                await conn.close()

    async def cut(self) -> None:
        for proxy in self._proxies():
            proxy.refuse()
            proxy.reset()

    async def restore(self) -> None:
        for proxy in self._proxies():
            await proxy.restore()

    async def rows(self) -> list[MeshNode]:
        import asyncpg

        conn = await asyncpg.connect(self.admin_dsn, timeout=5.0, statement_cache_size=0)
        try:
            records = await conn.fetch(
                "SELECT path, node_type, content::text AS content, request_id FROM "
                f'"{self.pg.schema_of(DRILL_PARTITION)}".nodes ORDER BY path'
            )
        finally:
            await conn.close()
        return [
            MeshNode(
                path=r["path"],
                node_type=r["node_type"],
                content=None if r["content"] is None else json.loads(r["content"]),
                request_id=r["request_id"],
            )
            for r in records
        ]


# ---------------------------------------------------------------------------------- helpers


async def _first(source: Observable[T]) -> T:
    from rxmesh.aio import first_value

    return await first_value(source, timeout=10.0)


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


async def _wait_until(predicate: Callable[[], bool | Awaitable[bool]], timeout: float) -> bool:
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


def _ms(delays: Sequence[float]) -> str:
    return ", ".join(f"{d * 1000:g}" for d in delays) + " ms"


def _s(delays: Sequence[float]) -> str:
    return ", ".join(f"{d:g}" for d in delays) + " s"


def _item_of(node: MeshNode) -> str | None:
    """The logical item a drill row stands for (a NodeType record's is ``type:<name>``)."""
    content = node.content
    if not isinstance(content, dict):
        return None
    if "item" in content:
        return str(content["item"])
    return f"type:{content['name']}" if "name" in content else None


def _journal_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.json") if not p.name.startswith("."))


@dataclass
class _Tracked:
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
    def item(self) -> str:
        return _item_of(self.request.node) or ""

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


# ---------------------------------------------------------------------------------- the drill


class _CensusTap:
    """The census's health sink: forwards to the health check and writes the timeline."""

    def __init__(self, drill: _Drill) -> None:
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


class _Drill:
    def __init__(
        self,
        backend: _Backend,
        ledger: PendingWriteLedger,
        tl: _Timeline,
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
        self.tracked: list[_Tracked] = []
        self.outcomes: list[PendingWriteOutcome] = []
        self.census_check = LiveRecordCensusCheck()
        self.census_count: int | None = None
        self.health = HealthRegistry()
        self.health.register("live-record-census", self.census_check, tags=("ready",))
        self.health.register("pending-writes", self._pending_check, tags=("ready",))
        self.cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
            self._open_query, idle_grace=0.0
        )

    # -- pieces -----------------------------------------------------------------------------

    def _open_query(self, query: NodeQuery) -> Observable[QueryFrame]:
        """The store's live query behind the retry ladder."""
        return self.backend.store.query(query).pipe(retry_transient_connect(self.retry_delays))

    def _pending_check(self) -> HealthCheckResult:
        stats = self.mesh.ledger.statistics()
        waiting = stats.pending + stats.in_flight
        data = {"pending": stats.pending, "inFlight": stats.in_flight, "settled": stats.settled}
        if waiting:
            return HealthCheckResult.degraded(
                f"PENDING WRITES: {waiting} create(s) answered UNAVAILABLE wait for the store to "
                "answer again (re-issued once on evidence)",
                data,
            )
        return HealthCheckResult.healthy(
            f"PENDING WRITES: none waiting ({stats.settled} settled)", data
        )

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
    ) -> _Tracked:
        content: dict[str, Any] = {"item": item}
        if node_type == NODE_TYPE_NODE_TYPE:
            # A NodeType record: the census bakes it; nodes of that type must carry an "item".
            content = {
                "name": item.removeprefix("type:"),
                "fields": {"item": {"type": "string", "required": True}},
            }
        node = MeshNode(path=path, node_type=node_type, content=content)
        tracked = _Tracked(CreateNodeRequest(node=node, access=self.access), phase)
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
                f"; journaled as {journal.name[:12]}..."
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


async def run_drill(
    *,
    dsn: str | None = None,
    listen_dsn: str | None = None,
    journal_dir: str | Path | None = None,
    nodes: int = 3,
    outage_creates: int = 3,
    retry_delays: Sequence[float] = DRILL_RETRY_DELAYS,
    reopen_backoff: Sequence[float] = DRILL_REOPEN_BACKOFF,
    hold: float = 0.3,
    timeout: float = 15.0,
    sabotage: Sabotage | None = None,
    out: TextIO | None = None,
    json_lines: bool = False,
) -> DrillResult:
    """Run the outage drill and return its timeline and invariants.

    Args:
        dsn: a PostgreSQL DSN; ``None`` runs on the embedded in-memory store.
        listen_dsn: the change feed's DSN when ``dsn`` goes through a transaction pooler (a
            direct connection to the server); only with ``dsn``.
        journal_dir: the pending-write journal directory (default: a temporary one, removed).
        nodes: nodes created before the outage (besides one NodeType record).
        outage_creates: creates attempted during the outage (one is a NodeType record).
        retry_delays: the mesh's retry ladder.
        reopen_backoff: the census's re-open backoff.
        hold: seconds the store stays away after the outage creates have answered (no re-issue
            may happen meanwhile: there is no evidence).
        timeout: the bound of every wait.
        sabotage: inject a broken invariant (see :data:`SABOTAGES`) to prove the drill fails.
        out: where to write the timeline (``None``: nowhere).
        json_lines: write JSON lines instead of text.
    """
    if sabotage is not None and sabotage not in SABOTAGES:
        raise ValueError(f"sabotage must be one of {SABOTAGES}, got {sabotage!r}")
    if nodes < 1 or outage_creates < 1:
        raise ValueError("nodes and outage_creates must be at least 1")
    if listen_dsn is not None and dsn is None:
        raise ValueError("listen_dsn needs dsn (the embedded store has no change-feed DSN)")
    tl = _Timeline(out, json_lines)
    owned = journal_dir is None
    directory = Path(tempfile.mkdtemp(prefix="rxmesh-drill-")) if owned else Path(journal_dir or "")
    try:
        async with AsyncExitStack() as stack:
            backend: _Backend
            if dsn is None:
                backend = _MemoryBackend()
            else:
                backend = await stack.enter_async_context(_PostgresBackend(dsn, listen_dsn))
            ledger = PendingWriteLedger(directory)
            drill = _Drill(
                backend,
                ledger,
                tl,
                retry_delays=retry_delays,
                reopen_backoff=reopen_backoff,
                timeout=timeout,
            )
            stack.callback(drill.mesh.dispose)
            invariants = await _script(
                drill, tl, directory, owned, nodes, outage_creates, hold, sabotage
            )
            drill.census.dispose()
    finally:
        if owned:
            shutil.rmtree(directory, ignore_errors=True)
    _conclude(tl, invariants)
    return DrillResult(tuple(tl.events), tuple(invariants))


async def _script(
    drill: _Drill,
    tl: _Timeline,
    directory: Path,
    owned: bool,
    nodes: int,
    outage_creates: int,
    hold: float,
    sabotage: Sabotage | None,
) -> list[Invariant]:
    mesh, backend = drill.mesh, drill.backend
    tl.text("rxmesh drill — an outage, answered honestly and recovered on evidence")
    tl.text(f"  store           {backend.description}")
    tl.text(f"  journal         {directory}{' (temporary)' if owned else ''}")
    tl.text(
        f"  retry ladder    {_ms(drill.retry_delays)}   "
        f"(library default {_ms(DEFAULT_RETRY_DELAYS)}: {sum(DEFAULT_RETRY_DELAYS):g} s of budget)"
    )
    tl.text(
        f"  census re-open  {_s(drill.reopen_backoff)}, "
        f"{DEFAULT_MAX_CONSECUTIVE_REOPENS} in a row   "
        f"(library default {_s(DEFAULT_REOPEN_BACKOFF)}: a dead store is reported after "
        f"{sum(DEFAULT_REOPEN_BACKOFF):g} s)"
    )
    if sabotage is not None:
        tl.text(f"  SABOTAGE        {sabotage} (this run must FAIL)")
    tl.text()
    tl.event(
        "setup",
        f"mesh up on {backend.store.name}; journal {directory}",
        store=backend.store.name,
        journal=str(directory),
        schema=backend.schema,
        sabotage=sabotage,
    )
    outcomes = mesh.ledger.outcomes.subscribe(drill.on_outcome)
    try:
        return await _phases(drill, tl, directory, nodes, outage_creates, hold, sabotage)
    finally:
        outcomes.dispose()


async def _phases(
    drill: _Drill,
    tl: _Timeline,
    directory: Path,
    nodes: int,
    outage_creates: int,
    hold: float,
    sabotage: Sabotage | None,
) -> list[Invariant]:
    mesh, backend, timeout = drill.mesh, drill.backend, drill.timeout
    p = DRILL_PARTITION
    waits: list[str] = []

    async def wait(what: str, predicate: Callable[[], bool | Awaitable[bool]]) -> bool:
        if await _wait_until(predicate, timeout):
            return True
        waits.append(what)
        tl.event("timeout", f"gave up after {timeout:g}s waiting for {what}")
        return False

    async def healthy() -> bool:
        return (await drill.report()).status is HealthStatus.HEALTHY

    # 1. healthy: the census watches, nodes are created, a judged refusal is not journaled.
    await drill.create(f"{p}/types/Sensor", "type:Sensor", "before", node_type=NODE_TYPE_NODE_TYPE)
    drill.start_census()
    await wait("the census's first reading", lambda: drill.census_count == 1)
    for i in range(1, nodes + 1):
        await drill.create(f"{p}/sensors/s{i}", f"sensor:{i}", "before")
    recorded_before = mesh.ledger.statistics().recorded
    judged = await drill.create(f"{p}/sensors/s1", "sensor:1", "judged")
    judged_recorded = mesh.ledger.statistics().recorded - recorded_before
    await wait("health HEALTHY", healthy)
    await drill.show_health()

    # 2. the outage.
    tl.event("OUTAGE", backend.cut_text)
    await backend.cut()
    drill.cut_live_queries()
    outage = [(f"{p}/types/Valve", "type:Valve", NODE_TYPE_NODE_TYPE)] + [
        (f"{p}/valves/v{i}", f"valve:{i}", "Valve") for i in range(1, outage_creates)
    ]
    plain = outage[:-1] if sabotage == "lost-intent" else outage
    await asyncio.gather(*(drill.create(a, b, "outage", node_type=c) for a, b, c in plain))
    if sabotage == "lost-intent":
        path, item, node_type = outage[-1]
        tl.event("SABOTAGE", f"recording turned off for {path}: its intent is lost")
        mesh.record_pending_writes = False
        try:
            await drill.create(path, item, "outage", node_type=node_type)
        finally:
            mesh.record_pending_writes = True
    files = _journal_files(directory)
    tl.event("journal", f"{len(files)} intent file(s) in {directory}", files=len(files))
    await wait(
        "the census to be interrupted",
        lambda: drill.census_reopens > 0 or drill.census_ended,
    )
    await drill.show_health()
    stats = mesh.ledger.statistics()
    pending_at_outage = stats.pending
    await asyncio.sleep(hold)
    pending_after_hold = mesh.ledger.statistics().pending
    tl.event(
        "waiting",
        f"store still away after {hold:g}s more: {pending_after_hold} intent(s) pending, "
        f"{mesh.ledger.statistics().taken} re-issued (no evidence, no re-issue: no timer, no poll)",
    )

    # 3. the store comes back; evidence; re-issues; verdicts.
    gaps: list[str] = []

    def on_gap(gap: ChangeFeedGap) -> None:
        gaps.append(gap.reason)
        lost = (gap.resumed_at - gap.lost_at).total_seconds()
        tl.event(
            "evidence",
            f"change-feed gap declared by {gap.source}: {gap.reason} (lost {lost:.3f}s)",
            reason=gap.reason,
        )

    gap_watch = backend.store.gaps.subscribe(on_gap)
    try:
        tl.event("RESTORE", backend.restore_text)
        await backend.restore()
        expected_outcomes = pending_at_outage
        await wait(
            "the re-issued creates' verdicts",
            lambda: (
                len(drill.outcomes) >= expected_outcomes and mesh.ledger.statistics().in_flight == 0
            ),
        )
    finally:
        gap_watch.dispose()
    node_types = 1 + sum(1 for _, _, t in outage if t == NODE_TYPE_NODE_TYPE)
    await wait(
        f"the census to read {node_types} NodeType records",
        lambda: drill.census_count == node_types,
    )
    await wait("health HEALTHY again", healthy)
    final_health = await drill.show_health()

    if sabotage == "duplicate":
        path, item, node_type = outage[-1]
        tl.event("SABOTAGE", f"a caller re-creates {item} under a fresh id (a new path)")
        await drill.create(path + "-retry", item, "sabotage", node_type=node_type)

    rows = await backend.rows()
    return _invariants(
        drill,
        rows=rows,
        directory=directory,
        gaps=gaps,
        judged=judged,
        judged_recorded=judged_recorded,
        pending_at_outage=pending_at_outage,
        pending_after_hold=pending_after_hold,
        node_types=node_types,
        final_health=final_health,
        waits=waits,
    )


def _invariants(
    drill: _Drill,
    *,
    rows: list[MeshNode],
    directory: Path,
    gaps: list[str],
    judged: _Tracked,
    judged_recorded: int,
    pending_at_outage: int,
    pending_after_hold: int,
    node_types: int,
    final_health: HealthReport,
    waits: list[str],
) -> list[Invariant]:
    tracked = drill.tracked
    by_path = {row.path: row for row in rows if not is_reserved_path(row.path)}
    result: list[Invariant] = []

    def check(name: str, ok: bool, detail: str) -> None:
        result.append(Invariant(name, ok, detail))

    answered = [t for t in tracked if len(t.answers) != 1]
    check(
        "every request answered exactly once",
        not answered,
        f"{len(tracked)} requests, {sum(len(t.answers) for t in tracked)} answers"
        + (f"; not once: {', '.join(t.path for t in answered)}" if answered else ""),
    )
    unavailable = [t for t in tracked if t.unavailable]
    unjournaled = [t.path for t in unavailable if not t.journaled]
    check(
        "every UNAVAILABLE create was journaled",
        bool(unavailable) and not unjournaled,
        f"{len(unavailable)} UNAVAILABLE, {len(unavailable) - len(unjournaled)} journaled"
        + (f"; NOT journaled: {', '.join(unjournaled)}" if unjournaled else ""),
    )
    check(
        "nothing re-issued without evidence",
        pending_after_hold == pending_at_outage,
        f"{pending_at_outage} pending when the creates answered, {pending_after_hold} after the "
        "hold",
    )
    check(
        "evidence arrived (a declared gap)",
        bool(gaps),
        f"{len(gaps)} gap(s): {'; '.join(gaps)}" if gaps else "no gap was declared",
    )
    not_once = [t.path for t in unavailable if t.journaled and len(t.outcomes) != 1]
    not_landed = [
        t.path
        for t in unavailable
        if t.journaled and t.outcomes and t.outcomes[0].verdict is not Verdict.LANDED
    ]
    check(
        "every intent re-issued once, and LANDED",
        not not_once and not not_landed,
        f"{sum(len(t.outcomes) for t in unavailable)} verdict(s) for "
        f"{len(unavailable) - len(unjournaled)} intent(s): "
        + ", ".join(f"{v}={n}" for v, n in Counter(o.verdict.value for o in drill.outcomes).items())
        + (f"; not once: {', '.join(not_once)}" if not_once else "")
        + (f"; not LANDED: {', '.join(not_landed)}" if not_landed else ""),
    )
    missing: list[str] = []
    for t in tracked:
        if t.phase == "judged":
            if t.first != RejectionReason.NODE_ALREADY_EXISTS.value:
                missing.append(f"{t.path} (judged request answered {t.first})")
            continue
        row = by_path.get(t.path)
        if row is None:
            missing.append(f"{t.path} ({t.first}, no row)")
        elif row.request_id != t.request.request_id:
            missing.append(f"{t.path} (row carries another request id)")
    check(
        "every request accounted for (a row with its own request id, or a verdict)",
        not missing,
        f"{len(tracked)} requests, {len(by_path)} rows (with the partition root)"
        + (f"; unaccounted: {', '.join(missing)}" if missing else ""),
    )
    items = Counter(
        item for item in (_item_of(row) for row in by_path.values()) if item is not None
    )
    duplicates = sorted(item for item, n in items.items() if n > 1)
    check(
        "no duplicate rows (one row per item)",
        not duplicates and len(rows) == len({row.path for row in rows}),
        f"{sum(items.values())} item rows, {len(items)} distinct items"
        + (f"; duplicated: {', '.join(duplicates)}" if duplicates else ""),
    )
    check(
        "a judged refusal is not journaled",
        judged.first == RejectionReason.NODE_ALREADY_EXISTS.value and judged_recorded == 0,
        f"re-create of {judged.path} answered {judged.first}; {judged_recorded} intent(s) recorded",
    )
    stats = drill.mesh.ledger.statistics()
    files = _journal_files(directory)
    check(
        "journal empty",
        not files and stats.pending == 0 and stats.in_flight == 0,
        f"{len(files)} file(s), {stats.pending} pending, {stats.in_flight} in flight",
    )
    check(
        "census follows the store",
        drill.census_count == node_types and not drill.census_ended,
        f"{drill.census_count} NodeType record(s) watched, {node_types} expected; "
        f"{drill.census_reopens} re-open(s); {len(drill.registry.names())} type(s) baked",
    )
    check(
        "health HEALTHY again",
        final_health.status is HealthStatus.HEALTHY,
        str(final_health.status),
    )
    check(
        "every wait ended in time",
        not waits,
        "all did" if not waits else "timed out: " + "; ".join(waits),
    )
    _tables(drill)
    return result


def _tables(drill: _Drill) -> None:
    rows = []
    for t in drill.tracked:
        verdict = ", ".join(o.verdict.value for o in t.outcomes) or "-"
        journal = "yes" if t.journaled else ("NO" if t.unavailable else "-")
        rows.append([t.phase, t.path, t.first, journal, verdict])
    drill.tl.table(
        "Requests", ["phase", "path", "first answer", "journaled", "re-issue verdict"], rows
    )


def _conclude(tl: _Timeline, invariants: Sequence[Invariant]) -> None:
    for inv in invariants:
        tl.event("invariant", inv.name, tabled=True, ok=inv.ok, detail=inv.detail)
    rows = [["PASS" if inv.ok else "FAIL", inv.name, inv.detail] for inv in invariants]
    tl.table("Invariants", ["", "invariant", "found"], rows)
    failed = [inv.name for inv in invariants if not inv.ok]
    ok = bool(invariants) and not failed
    tl.text()
    tl.text(
        f"DRILL PASSED: {len(invariants)} invariants hold."
        if ok
        else f"DRILL FAILED: {len(failed)} of {len(invariants)} invariants broken: "
        + "; ".join(failed)
    )
    tl.event("result", "passed" if ok else "failed", tabled=True, ok=ok, failed=failed)


# ---------------------------------------------------------------------------------- the CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the drill's options to ``parser`` (used by ``rxmesh drill`` and :func:`main`)."""
    parser.add_argument(
        "--dsn",
        help="run against this PostgreSQL server (through a loopback fault proxy the drill "
        "starts; the server itself is never stopped). Default: the embedded in-memory store.",
    )
    parser.add_argument(
        "--listen-dsn",
        help="with --dsn through a transaction pooler (PgBouncer, RDS Proxy, Supavisor): a "
        "direct connection to the server for the change feed's LISTEN (the drill cuts it too)",
    )
    parser.add_argument(
        "--journal-dir", help="pending-write journal directory (default: a temporary one)"
    )
    parser.add_argument("--json", action="store_true", help="write JSON lines, one per event")
    parser.add_argument(
        "--nodes", type=int, default=3, help="nodes created before the outage (default: 3)"
    )
    parser.add_argument(
        "--outage-creates",
        type=int,
        default=3,
        help="creates attempted during the outage (default: 3)",
    )
    parser.add_argument(
        "--timeout", type=float, default=15.0, help="bound of every wait, seconds (default: 15)"
    )
    parser.add_argument(
        "--sabotage",
        choices=SABOTAGES,
        help="inject a broken invariant (to see the drill fail with exit status 1)",
    )
    parser.add_argument(
        "--show-log",
        action="store_true",
        help="also show rxmesh's own log on stderr (off by default: the timeline says it)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the drill for parsed ``args``; returns the exit status (0 only if all invariants hold).

    rxmesh's own logging is left as the caller set it (the ``rxmesh`` CLI shows it only with
    ``--show-log``); without ``--show-log``, asyncpg's pool warnings (printed by Python's
    last-resort handler while the drill's outage lasts) are silenced too.
    """
    if not args.show_log:
        logging.getLogger("asyncpg").addHandler(logging.NullHandler())
    try:
        result = asyncio.run(
            run_drill(
                dsn=args.dsn,
                listen_dsn=args.listen_dsn,
                journal_dir=args.journal_dir,
                nodes=args.nodes,
                outage_creates=args.outage_creates,
                timeout=args.timeout,
                sabotage=args.sabotage,
                out=sys.stdout,
                json_lines=args.json,
            )
        )
    except StoreError as exc:
        if is_store_unreachable(exc):
            print(
                f"rxmesh drill: the store could not be reached before the drill began: {exc}",
                file=sys.stderr,
            )
            return 2
        if isinstance(exc, ChangeFeedUnverifiedError):  # a pooler without --listen-dsn, say
            print(
                f"rxmesh drill: the store refused to start: {exc}\n"
                "rxmesh drill: behind a pooler, give the server itself as --listen-dsn",
                file=sys.stderr,
            )
            return 2
        raise
    return result.exit_status


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rxmesh.drill``-style entry: parse ``argv`` and run the drill."""
    parser = argparse.ArgumentParser(prog="rxmesh drill", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
