"""Chaos soak: concurrent creates, updates, deletes and moves through a Mesh while the store is
cut, killed and restarted.

W writers each create M nodes with unique ids through a :class:`~rxmesh.Mesh` over a
:class:`~rxmesh.providers.PostgresStore` on a private :class:`TemporaryPostgresCluster` behind a
:class:`FaultProxy`, with a pending-write journal directory. Meanwhile a seeded chaos task resets
every connection, refuses connections for a while, terminates the store's backends, and restarts
the cluster K times at random moments (K progress thresholds drawn from the seed).

Afterwards (the store back, one commit made as evidence, the wait bounded) it checks that every
request is accounted for exactly once (answered created, answered with a judged reason, or
answered UNAVAILABLE and then given exactly one verdict on ``ledger.outcomes``), that there are
no duplicate rows and every created row carries its request's id, that nothing was lost (every
``created`` answer and every LANDED / ALREADY_PRESENT verdict is in the database), and that the
journal is empty. Prints one JSON line and a table.

The verbs mixed in (issue 18): after every fourth create a writer updates, deletes or moves (in
turn) the node it created just before, based on the version its create answered (a
compare-and-set). An update answered UNAVAILABLE is followed at once by a NEWER update of the
same node (based on whatever the mesh reads then). Checked afterwards: every verb answered
UNAVAILABLE and recorded gets exactly one verdict (one not recorded, none), an acknowledged verb
(answered success, or LANDED) is in the database, and no re-issue overwrote an acknowledged newer
update (``overwritten_newer``); a create's row checks skip the nodes the verbs touched.

    python bench/soak.py                 # long: 20 writers x 500 = 10,000 creates, 5 restarts
    python bench/soak.py --short         # CI: 4 x 150 creates, 1 restart
    python bench/soak.py --writers 8 --per-writer 100 --restarts 2 --seed 7
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    RejectionReason,
    UpdateNodeRequest,
    Verdict,
)
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultProxy, TemporaryPostgresCluster

__all__ = ["SoakConfig", "main", "run_soak"]

PREFIX = "soak_"
ANSWER_TIMEOUT = 120.0
"""A create that does not answer within this is reported as unanswered (a defect)."""


@dataclass(frozen=True)
class SoakConfig:
    """What to run: writers x per_writer creates, ``restarts`` cluster restarts, seeded."""

    writers: int = 20
    per_writer: int = 500
    restarts: int = 5
    seed: int = 1
    recover_timeout: float = 60.0
    burst: int = 16
    """A further writer sends ``per_writer`` creates into ONE partition, ``burst`` at a time
    (0: none), so concurrent creates there go as write groups (docs/providers.md) under chaos."""
    chaos_interval: tuple[float, float] = (0.1, 0.6)
    refuse_for: tuple[float, float] = (0.1, 0.8)


@dataclass
class _Request:
    path: str
    request_id: str
    answer: CreateNodeResponse | None = None
    problem: str | None = None


@dataclass
class _Verb:
    """One update, delete or move a writer sent (``newer``: the update sent after an UNAVAILABLE
    one, on the same node)."""

    verb: str
    path: str
    request_id: str
    content: Any = None
    target: str | None = None
    newer: bool = False
    answer: NodeOperationResponse | None = None
    problem: str | None = None


@dataclass
class _Chaos:
    resets: int = 0
    refusals: int = 0
    terminations: int = 0
    restarts: int = 0
    log: list[str] = field(default_factory=list)


async def _terminate(dsn: str) -> int:
    conn = await asyncpg.connect(dsn, timeout=2.0, command_timeout=5.0)
    try:
        killed: int = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name LIKE 'rxmesh%' AND pid <> pg_backend_pid()"
        )
        return killed
    finally:
        await conn.close()


async def _chaos(
    config: SoakConfig,
    cluster: TemporaryPostgresCluster,
    proxy: FaultProxy,
    progress: list[int],
    total: int,
    done: asyncio.Event,
    chaos: _Chaos,
) -> None:
    """Seeded chaos until ``done``; the K restarts fire when progress passes K drawn points."""
    rng = random.Random(config.seed)
    thresholds = sorted(int(total * rng.uniform(0.05, 0.9)) for _ in range(config.restarts))
    while not done.is_set():
        try:
            async with asyncio.timeout(rng.uniform(*config.chaos_interval)):
                await done.wait()
            break
        except TimeoutError:
            pass
        if thresholds and progress[0] >= thresholds[0]:
            thresholds.pop(0)
            # "fast" only: the throwaway cluster runs with fsync=off and synchronous_commit=off,
            # so an "immediate" stop (a crash) loses commits it had acknowledged; that would be
            # the test cluster's loss, not rxmesh's.
            await asyncio.to_thread(cluster.stop, "fast")
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            await asyncio.to_thread(cluster.start)
            chaos.restarts += 1
            chaos.log.append(f"restart at {progress[0]}")
            continue
        action = rng.choice(["reset", "refuse", "terminate"])
        if action == "reset":
            proxy.reset()
            chaos.resets += 1
        elif action == "refuse":
            proxy.refuse()
            proxy.reset()
            await asyncio.sleep(rng.uniform(*config.refuse_for))
            await proxy.restore()
            chaos.refusals += 1
        else:
            try:
                chaos.terminations += await _terminate(cluster.dsn)
            except (OSError, asyncpg.PostgresError) as exc:
                chaos.log.append(f"terminate failed: {exc!r}")
        chaos.log.append(f"{action} at {progress[0]}")
    # A restart still owed when the writers finished early happens now, before the checks.
    while thresholds:
        thresholds.pop(0)
        await asyncio.to_thread(cluster.restart, "fast")
        chaos.restarts += 1


async def _writer(
    mesh: Mesh,
    index: int,
    per_writer: int,
    requests: list[_Request],
    progress: list[int],
    verbs: list[_Verb],
) -> None:
    access = AccessContext(user=f"writer{index}")
    previous: _Request | None = None
    for n in range(per_writer):
        # one partition per writer: its owner
        entry = await _create(mesh, access, f"w{index:03d}/n{n:05d}", n, requests, progress)
        created = previous.answer if previous is not None else None
        if n % 4 == 3 and created is not None and created.success and created.node is not None:
            kind = ("update", "delete", "move")[(n // 4) % 3]
            await _act(mesh, access, kind, created.node, verbs)
        previous = entry


async def _burst_writer(
    mesh: Mesh, config: SoakConfig, requests: list[_Request], progress: list[int]
) -> None:
    """``per_writer`` creates into partition ``burst``, ``config.burst`` in flight at a time."""
    access = AccessContext(user="burster")
    for start in range(0, config.per_writer, config.burst):
        await asyncio.gather(
            *(
                _create(mesh, access, f"burst/n{n:05d}", n, requests, progress)
                for n in range(start, min(start + config.burst, config.per_writer))
            )
        )


async def _create(
    mesh: Mesh,
    access: AccessContext,
    path: str,
    n: int,
    requests: list[_Request],
    progress: list[int],
) -> _Request:
    """One create, its answer kept in the entry it appends to ``requests``."""
    request = CreateNodeRequest(node=MeshNode(path=path, content={"n": n}), access=access)
    entry = _Request(path, request.request_id)
    requests.append(entry)
    try:
        entry.answer = await first_value(mesh.create_node(request), timeout=ANSWER_TIMEOUT)
    except TimeoutError:
        entry.problem = "no answer in time"
    progress[0] += 1
    return entry


async def _verb(mesh: Mesh, entry: _Verb, request: Any) -> NodeOperationResponse | None:
    verbs = {"update": mesh.update_node, "delete": mesh.delete_node, "move": mesh.move_node}
    try:
        entry.answer = await first_value(verbs[entry.verb](request), timeout=ANSWER_TIMEOUT)
    except TimeoutError:
        entry.problem = "no answer in time"
    return entry.answer


async def _act(
    mesh: Mesh, access: AccessContext, kind: str, node: MeshNode, verbs: list[_Verb]
) -> None:
    """One verb on ``node``, based on its version as created; an UNAVAILABLE update is followed
    by a newer one (no basis given: the mesh reads it)."""
    path, version = node.path, node.version
    request: Any
    if kind == "update":
        content: dict[str, Any] = {"update": path}
        request = UpdateNodeRequest(
            node=MeshNode(path=path, content=content), access=access, expected_version=version
        )
        entry = _Verb(kind, path, request.request_id, content)
    elif kind == "delete":
        request = DeleteNodeRequest(path=path, access=access, expected_version=version)
        entry = _Verb(kind, path, request.request_id)
    else:
        target = f"{path}m"
        request = MoveNodeRequest(
            source=path, target=target, access=access, expected_version=version
        )
        entry = _Verb(kind, path, request.request_id, target=target)
    verbs.append(entry)
    answer = await _verb(mesh, entry, request)
    if (
        kind != "update"
        or answer is None
        or answer.rejection_reason is not RejectionReason.UNAVAILABLE
    ):
        return
    newest: dict[str, Any] = {"newer": path}
    newer = UpdateNodeRequest(node=MeshNode(path=path, content=newest), access=access)
    entry = _Verb("update", path, newer.request_id, newest, newer=True)
    verbs.append(entry)
    await _verb(mesh, entry, newer)


async def _rows(dsn: str) -> tuple[dict[str, list[str | None]], dict[str, str]]:
    """Every row under the soak's schemas: path -> [request_id, ...] (one per row found), and
    path -> its content (JSON text)."""
    conn = await asyncpg.connect(dsn, timeout=5.0, command_timeout=60.0)
    try:
        schemas = [
            r[0]
            for r in await conn.fetch(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", PREFIX
            )
        ]
        rows: dict[str, list[str | None]] = {}
        contents: dict[str, str] = {}
        duplicates = 0
        for schema in schemas:
            table = f"{quote_identifier(schema)}.nodes"
            duplicates += len(
                await conn.fetch(
                    f"SELECT path, count(*) FROM {table} GROUP BY path HAVING count(*) > 1"
                )
            )
            query = f"SELECT path, request_id, content::text AS content FROM {table}"
            for record in await conn.fetch(query):
                rows.setdefault(record["path"], []).append(record["request_id"])
                contents[record["path"]] = record["content"]
        rows["__duplicates_by_sql__"] = [str(duplicates)]
        return rows, contents
    finally:
        await conn.close()


async def run_soak(config: SoakConfig) -> dict[str, Any]:
    """Run the soak and return its report (see the module docstring)."""
    total = (config.writers + (1 if config.burst else 0)) * config.per_writer
    started = time.monotonic()
    with TemporaryPostgresCluster() as cluster, tempfile.TemporaryDirectory() as scratch:
        journal = Path(scratch) / "journal"
        async with FaultProxy("127.0.0.1", cluster.port) as proxy:
            store = PostgresStore(
                proxy.dsn(cluster.dsn),
                schema_prefix=PREFIX,
                max_size=10,
                connect_timeout=1.0,
                command_timeout=2.0,
                heartbeat_interval=0.25,
                heartbeat_timeout=1.0,
                reconnect_backoff=(0.05, 0.1, 0.25, 0.5),
            )
            await store.start()
            ledger = PendingWriteLedger(journal_dir=journal)
            mesh = Mesh(store, ledger=ledger, retry_delays=(0.05, 0.1, 0.2))
            outcomes: list[PendingWriteOutcome] = []
            watching = ledger.outcomes.subscribe(outcomes.append)
            requests: list[_Request] = []
            verbs: list[_Verb] = []
            progress = [0]
            done = asyncio.Event()
            chaos = _Chaos()
            chaos_task = asyncio.create_task(
                _chaos(config, cluster, proxy, progress, total, done, chaos)
            )
            try:
                bursts = [_burst_writer(mesh, config, requests, progress)] if config.burst else []
                await asyncio.gather(
                    *(
                        _writer(mesh, w, config.per_writer, requests, progress, verbs)
                        for w in range(config.writers)
                    ),
                    *bursts,
                )
            finally:
                done.set()
                await chaos_task
            writes_done = time.monotonic()
            await proxy.restore()
            back = time.monotonic()
            # Evidence: one commit (a real write, announced by NOTIFY). Recovery never polls.
            evidence = await first_value(
                mesh.create_node(
                    CreateNodeRequest(
                        node=MeshNode(path="evidence/after-chaos", content={}),
                        access=AccessContext(user="soak"),
                    )
                ),
                timeout=ANSWER_TIMEOUT,
            )
            recovered_at: float | None = None
            deadline = back + config.recover_timeout
            answers: list[CreateNodeResponse | NodeOperationResponse | None] = [
                *(r.answer for r in requests),
                *(v.answer for v in verbs),
            ]
            unavailable = sum(
                1
                for answer in answers
                if answer is not None
                and answer.rejection_reason is RejectionReason.UNAVAILABLE
                and answer.recorded_for_reissue
            )
            while time.monotonic() < deadline:
                if not ledger.pending() and not ledger.in_flight() and len(outcomes) >= unavailable:
                    recovered_at = time.monotonic()
                    break
                await asyncio.sleep(0.05)
            statistics = ledger.statistics()
            write_groups = store.statistics().write_groups
            watching.dispose()
            mesh.dispose()
            ledger.close()  # commits every settled removal: a settled journal is empty
            close_error: str | None = None
            try:
                await store.close()
            except Exception as exc:  # reported: the feed task died with it
                close_error = f"{type(exc).__name__}: {exc}"
        rows, contents = await _rows(cluster.dsn)
        journal_left = sorted(p.name for p in journal.iterdir()) if journal.exists() else []
    report = _report(
        config,
        requests,
        outcomes,
        rows,
        chaos,
        journal_left,
        statistics,
        recovered_at - back if recovered_at is not None else None,
        writes_done - started,
        evidence.success,
        close_error,
        touched={v.path for v in verbs} | {v.target for v in verbs if v.target},
    )
    report.update(_verbs_report(verbs, outcomes, rows, contents))
    report["burst"] = config.burst
    report["write_groups"] = write_groups
    return report


def _verbs_report(
    verbs: list[_Verb],
    outcomes: list[PendingWriteOutcome],
    rows: dict[str, list[str | None]],
    contents: dict[str, str],
) -> dict[str, Any]:
    """The verbs' accounting: one verdict per recorded UNAVAILABLE, acknowledged ones in the
    database, and no acknowledged newer update overwritten by a re-issue."""
    verdicts: dict[str, list[Verdict]] = {}
    for outcome in outcomes:
        verdicts.setdefault(outcome.intent.request_id, []).append(outcome.verdict)
    counts: Counter[str] = Counter()
    lost: list[str] = []
    overwritten: list[str] = []
    unaccounted: list[str] = []
    unacknowledged: list[str] = []
    acknowledged: dict[str, bool] = {}
    for v in verbs:
        counts[v.verb] += 1
        answer, given = v.answer, verdicts.get(v.request_id, [])
        if answer is None:
            unaccounted.append(f"{v.verb} {v.path}: {v.problem}")
            continue
        if answer.rejection_reason is RejectionReason.UNAVAILABLE:
            counts["unavailable"] += 1
            counts["recorded"] += answer.recorded_for_reissue
            if len(given) != (1 if answer.recorded_for_reissue else 0):
                unaccounted.append(f"{v.verb} {v.path}: UNAVAILABLE then {len(given)} verdict(s)")
            for verdict in given:
                counts[f"verdict {verdict}"] += 1
        elif not answer.success:
            counts[f"judged {answer.rejection_reason}"] += 1
        acknowledged[v.request_id] = answer.success or given == [Verdict.LANDED]
    for v in verbs:
        if not acknowledged.get(v.request_id) or v.newer:
            continue
        content = json.loads(contents[v.path]) if v.path in contents else None
        if v.verb == "update":
            newer = [n for n in verbs if n.newer and n.path == v.path]
            if newer and acknowledged.get(newer[0].request_id):
                continue  # judged with the newer one below
            if content != v.content:
                lost.append(f"update {v.path}: acknowledged, the row holds {content}")
        elif v.verb == "delete" and v.path in rows:
            lost.append(f"delete {v.path}: acknowledged, the row is there")
        elif v.verb == "move" and (v.path in rows or rows.get(v.target or "") != [v.request_id]):
            lost.append(f"move {v.path}: acknowledged, source/target not as moved")
    for n in verbs:
        if n.newer and acknowledged.get(n.request_id):
            content = json.loads(contents[n.path]) if n.path in contents else None
            if content != n.content:
                overwritten.append(f"{n.path}: the newer update was overwritten: {content}")
        elif n.newer or (n.verb == "update" and not acknowledged.get(n.request_id)):
            held = json.loads(contents[n.path]) if n.path in contents else None
            mine = [x for x in verbs if x.path == n.path and acknowledged.get(x.request_id)]
            if not mine and held == n.content:
                unacknowledged.append(f"{n.path}: applied, never acknowledged")
    return {
        "verbs": dict(counts),
        "verbs_lost": len(lost),
        "overwritten_newer": len(overwritten),
        "verbs_unaccounted": len(unaccounted),
        "verbs_applied_unacknowledged": len(unacknowledged),
        "verbs_examples": {
            "lost": lost[:5],
            "overwritten": overwritten[:5],
            "unaccounted": unaccounted[:5],
            "applied_unacknowledged": unacknowledged[:5],
        },
    }


def _report(
    config: SoakConfig,
    requests: list[_Request],
    outcomes: list[PendingWriteOutcome],
    rows: dict[str, list[str | None]],
    chaos: _Chaos,
    journal_left: list[str],
    statistics: Any,
    recover_seconds: float | None,
    write_seconds: float,
    evidence_created: bool,
    close_error: str | None,
    touched: set[str] | None = None,
) -> dict[str, Any]:
    duplicates_sql = int(rows.pop("__duplicates_by_sql__")[0] or 0)
    verdicts: dict[tuple[str, str], list[Verdict]] = {}
    details: dict[tuple[str, str], str] = {}
    touched = touched or set()
    for outcome in outcomes:
        if outcome.intent.verb != "create":
            continue  # the verbs' verdicts: _verbs_report
        key = (outcome.intent.path, outcome.intent.request_id)
        verdicts.setdefault(key, []).append(outcome.verdict)
        details[key] = f"{outcome.reason}: {outcome.detail[:160]}"
    counts: Counter[str] = Counter()
    judged: Counter[str] = Counter()
    lost: list[str] = []
    unaccounted: list[str] = []
    mismatched: list[str] = []
    landed_despite_drop: list[str] = []
    judged_examples: list[str] = []
    for r in requests:
        stored = rows.get(r.path, [])
        answer = r.answer
        if answer is None:
            unaccounted.append(f"{r.path}: {r.problem}")
            continue
        if answer.success:
            counts["created"] += 1
            if r.path in touched:
                continue  # updated, deleted or moved since: the verbs' checks
            if not stored:
                lost.append(f"{r.path}: answered created, not in the database")
            elif stored != [r.request_id]:
                mismatched.append(r.path)
            continue
        reason = answer.rejection_reason
        if reason is not RejectionReason.UNAVAILABLE:
            judged[str(reason)] += 1
            where = "present" if stored else "absent"
            judged_examples.append(f"{r.path} ({where}): {answer.error}")
            continue
        counts["unavailable"] += 1
        given = verdicts.get((r.path, r.request_id), [])
        if len(given) != 1:
            unaccounted.append(f"{r.path}: UNAVAILABLE then {len(given)} verdict(s)")
            continue
        verdict = given[0]
        counts[str(verdict)] += 1
        if r.path in touched:
            continue
        if verdict in (Verdict.LANDED, Verdict.ALREADY_PRESENT):
            if not stored:
                lost.append(f"{r.path}: verdict {verdict}, not in the database")
            elif verdict is Verdict.LANDED and stored != [r.request_id]:
                mismatched.append(r.path)
        elif stored:
            ours = "its own request_id" if stored == [r.request_id] else "another request_id"
            landed_despite_drop.append(
                f"{r.path} (row has {ours}); re-issue {details[(r.path, r.request_id)]}"
            )
    duplicates = duplicates_sql + sum(1 for ids in rows.values() if len(ids) > 1)
    return {
        "bench": "soak",
        "writers": config.writers,
        "per_writer": config.per_writer,
        "seed": config.seed,
        "writes_attempted": len(requests),
        "answered_created": counts["created"],
        "answered_unavailable": counts["unavailable"],
        "answered_judged": dict(judged),
        "reissued": statistics.taken,
        "landed": counts[str(Verdict.LANDED)],
        "already_present": counts[str(Verdict.ALREADY_PRESENT)],
        "dropped": counts[str(Verdict.DROPPED)],
        "duplicates": duplicates,
        "lost": len(lost),
        "request_id_mismatches": len(mismatched),
        "dropped_but_present": len(landed_despite_drop),
        "unaccounted": len(unaccounted),
        "journal_files_left": len(journal_left),
        "evidence_write_created": evidence_created,
        "store_close_error": close_error,
        "recover_seconds": None if recover_seconds is None else round(recover_seconds, 3),
        "write_phase_seconds": round(write_seconds, 2),
        "chaos": {
            "resets": chaos.resets,
            "refusals": chaos.refusals,
            "backends_terminated": chaos.terminations,
            "restarts": chaos.restarts,
        },
        "examples": {
            "judged": judged_examples[:5],
            "lost": lost[:5],
            "unaccounted": unaccounted[:5],
            "mismatched": mismatched[:5],
            "dropped_but_present": landed_despite_drop[:5],
            "journal_left": journal_left[:5],
        },
    }


def table(report: dict[str, Any]) -> str:
    """The report's figures as a two-column table."""
    keys = [
        "writes_attempted",
        "answered_created",
        "answered_unavailable",
        "answered_judged",
        "reissued",
        "landed",
        "already_present",
        "dropped",
        "duplicates",
        "lost",
        "request_id_mismatches",
        "dropped_but_present",
        "unaccounted",
        "journal_files_left",
        "recover_seconds",
        "write_phase_seconds",
        "store_close_error",
        "write_groups",
        "chaos",
        "verbs",
        "verbs_lost",
        "overwritten_newer",
        "verbs_unaccounted",
        "verbs_applied_unacknowledged",
    ]
    width = max(len(k) for k in keys)
    return "\n".join(f"{k.ljust(width)}  {report[k]}" for k in keys)


def healthy(report: dict[str, Any]) -> bool:
    """The soak's invariants: nothing lost, duplicated, unaccounted or left in the journal."""
    return (
        report["lost"] == 0
        and report["duplicates"] == 0
        and report["request_id_mismatches"] == 0
        and report["dropped_but_present"] == 0
        and report["unaccounted"] == 0
        and report["journal_files_left"] == 0
        and report["recover_seconds"] is not None
        and report["store_close_error"] is None
        and report["verbs_lost"] == 0
        and report["overwritten_newer"] == 0
        and report["verbs_unaccounted"] == 0
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, run the soak, print JSON and the table; return the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--short", action="store_true", help="the CI size: 4 x 150, 1 restart")
    parser.add_argument("--writers", type=int)
    parser.add_argument("--per-writer", type=int)
    parser.add_argument("--restarts", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--burst", type=int, default=16, help="creates in flight in the shared partition (0: none)"
    )
    parser.add_argument("--recover-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    base = SoakConfig(writers=4, per_writer=150, restarts=1) if args.short else SoakConfig()
    config = SoakConfig(
        writers=args.writers or base.writers,
        per_writer=args.per_writer or base.per_writer,
        restarts=base.restarts if args.restarts is None else args.restarts,
        seed=args.seed,
        recover_timeout=args.recover_timeout,
        burst=args.burst,
    )
    report = asyncio.run(run_soak(config))
    print(json.dumps(report, sort_keys=True))
    print(table(report))
    print("healthy" if healthy(report) else "NOT HEALTHY")
    return report


if __name__ == "__main__":
    sys.exit(0 if healthy(main()) else 1)
