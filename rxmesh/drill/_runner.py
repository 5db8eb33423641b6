"""The drill's script: set up, cut, hold, restore, account, judge (:func:`run_drill`)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rxmesh.drill._drill import (
    DRILL_PARTITION,
    DRILL_REOPEN_BACKOFF,
    DRILL_RETRY_DELAYS,
    SABOTAGES,
    Drill,
    Sabotage,
    journal_files,
    wait_until,
)
from rxmesh.drill._timeline import DrillResult, Timeline
from rxmesh.drill.invariants import DrillAccounting, Invariant, check_invariants
from rxmesh.exceptions import DrillSetupError, RxMeshError
from rxmesh.health import HealthReport, HealthStatus
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import NODE_TYPE_NODE_TYPE, ChangeFeedGap, MeshNode
from rxmesh.operators import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    DEFAULT_RETRY_DELAYS,
)

if TYPE_CHECKING:
    from rxmesh.testing import OutageBackend

__all__ = ["run_drill"]


def _ms(delays: Sequence[float]) -> str:
    return ", ".join(f"{d * 1000:g}" for d in delays) + " ms"


def _s(delays: Sequence[float]) -> str:
    return ", ".join(f"{d:g}" for d in delays) + " s"


def _backend(dsn: str | None, listen_dsn: str | None) -> OutageBackend:
    """The cut/restore backend: the one place the drill imports :mod:`rxmesh.testing`."""
    import secrets

    from rxmesh.testing import InMemoryOutage, PostgresProxyOutage

    if dsn is None:
        return InMemoryOutage(DRILL_PARTITION, gap_reason="drill: the store answers again")
    return PostgresProxyOutage(
        dsn,
        listen_dsn,
        partition=DRILL_PARTITION,
        schema_prefix=f"drill{secrets.token_hex(4)}_",
        label="drill proxy",
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

    Raises:
        StoreError: the store could not be reached, or refused to start
            (:class:`~rxmesh.exceptions.ChangeFeedUnverifiedError`), before the drill began.
        DrillSetupError: the store did not start for another reason (a missing database or
            role, a DSN that is not PostgreSQL's); the driver's error is chained.
        ValueError: a bad argument.
    """
    if sabotage is not None and sabotage not in SABOTAGES:
        raise ValueError(f"sabotage must be one of {SABOTAGES}, got {sabotage!r}")
    if nodes < 1 or outage_creates < 1:
        raise ValueError("nodes and outage_creates must be at least 1")
    if listen_dsn is not None and dsn is None:
        raise ValueError("listen_dsn needs dsn (the embedded store has no change-feed DSN)")
    tl = Timeline(out, json_lines)
    owned = journal_dir is None
    directory = Path(tempfile.mkdtemp(prefix="rxmesh-drill-")) if owned else Path(journal_dir or "")
    try:
        async with AsyncExitStack() as stack:
            try:
                backend = await stack.enter_async_context(_backend(dsn, listen_dsn))
            except RxMeshError:
                raise  # already rxmesh's own (a StoreError, a ChangeFeedUnverifiedError)
            except Exception as exc:  # the driver's own: a missing database, a bad DSN
                raise DrillSetupError(f"{type(exc).__name__}: {exc}") from exc
            ledger = PendingWriteLedger(directory)
            stack.callback(ledger.close)  # after the mesh is disposed: commits what settled
            drill = Drill(
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
    drill: Drill,
    tl: Timeline,
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
    drill: Drill,
    tl: Timeline,
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
        if await wait_until(predicate, timeout):
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
    await drill.create(f"{p}/sensors/s1", "sensor:1", "judged")
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
        with mesh.pending_writes_unrecorded():
            await drill.create(path, item, "outage", node_type=node_type)
    files = journal_files(directory)
    tl.event("journal", f"{len(files)} intent(s) journaled in {directory}", files=len(files))
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
    accounting = _account(
        drill,
        rows=tuple(rows),
        directory=directory,
        gaps=tuple(gaps),
        judged_recorded=judged_recorded,
        pending_at_outage=pending_at_outage,
        pending_after_hold=pending_after_hold,
        node_types=node_types,
        final_health=final_health,
        waits=tuple(waits),
    )
    invariants = check_invariants(accounting)
    _tables(drill)
    return list(invariants)


def _account(
    drill: Drill,
    *,
    rows: tuple[MeshNode, ...],
    directory: Path,
    gaps: tuple[str, ...],
    judged_recorded: int,
    pending_at_outage: int,
    pending_after_hold: int,
    node_types: int,
    final_health: HealthReport,
    waits: tuple[str, ...],
) -> DrillAccounting:
    """What the drill recorded, as :func:`~rxmesh.drill.invariants.check_invariants` reads it."""
    stats = drill.mesh.ledger.statistics()
    return DrillAccounting(
        requests=tuple(tracked.account() for tracked in drill.tracked),
        rows=rows,
        verdicts=tuple(outcome.verdict for outcome in drill.outcomes),
        gaps=gaps,
        judged_recorded=judged_recorded,
        pending_at_outage=pending_at_outage,
        pending_after_hold=pending_after_hold,
        pending_at_end=stats.pending,
        in_flight_at_end=stats.in_flight,
        journal_files_at_end=len(journal_files(directory)),
        node_types=node_types,
        census_records=drill.census_count,
        census_reopens=drill.census_reopens,
        census_ended=drill.census_ended,
        types_baked=len(drill.registry.names()),
        final_health=final_health.status,
        timed_out=waits,
    )


def _tables(drill: Drill) -> None:
    rows = []
    for t in drill.tracked:
        verdict = ", ".join(o.verdict.value for o in t.outcomes) or "-"
        journal = "yes" if t.journaled else ("NO" if t.unavailable else "-")
        rows.append([t.phase, t.path, t.first, journal, verdict])
    drill.tl.table(
        "Requests", ["phase", "path", "first answer", "journaled", "re-issue verdict"], rows
    )


def _conclude(tl: Timeline, invariants: Sequence[Invariant]) -> None:
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
