"""A replica process for the shared-journal tests: a Mesh over PostgreSQL with a pending-write
ledger, driven by lines on stdin, telling what it did as JSON lines on stdout.

    python _replica.py DSN SCHEMA_PREFIX NAME JOURNAL COUNT [LEASE]

JOURNAL is ``js:<url,url,...>:<bucket>`` (a :class:`JetStreamLedger`, R3, lease LEASE seconds,
default 3) or ``dir:<path>`` (a :class:`PendingWriteLedger` on a private directory). Prints
``{"ready": ...}`` once its store is started; on ``go`` creates COUNT nodes ``p/<NAME>-<n>`` at
once and prints ``{"recorded": [request ids]}`` (those answered UNAVAILABLE and recorded for
re-issue); on ``evidence`` creates one node (the store answers again; its own commit is
evidence). On ``replace <other> <from> <to>`` creates ``p/<other>-<n>`` for n in [from, to) as
new requests of the same requester (printing ``{"replaced": [...]}``); on ``resend <other>
<from> <id,id,...>`` re-sends those creates from ``from`` on with the given request ids, as their
caller would (printing ``{"resent": [...]}``). Every intent it takes for re-issue is printed as
``{"taken": [...]}``, every verdict as ``{"verdict": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from loguru import logger

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import JetStreamLedger, PendingWriteLedger, PendingWriteOutcome
from rxmesh.operations import CreateNodeRequest
from rxmesh.providers.postgres import PostgresStore

WRITER = AccessContext(user="writer")


def say(**line: Any) -> None:
    print(json.dumps(line), flush=True)


async def open_ledger(journal: str, name: str, lease: float) -> PendingWriteLedger:
    kind, _, where = journal.partition(":")
    if kind == "dir":
        return PendingWriteLedger(where)
    urls, _, bucket = where.rpartition(":")
    return await JetStreamLedger.connect(
        urls.split(","), bucket=bucket, replicas=3, owner=name, lease_ttl=lease, timeout=2.0
    )


async def creates(mesh: Mesh, requests: list[CreateNodeRequest]) -> list[Any]:
    return await asyncio.gather(*(first_value(mesh.create_node(r), timeout=30.0) for r in requests))


async def main(dsn: str, prefix: str, name: str, journal: str, count: int, lease: float) -> None:
    store = PostgresStore(
        dsn,
        schema_prefix=prefix,
        max_size=4,
        connect_timeout=0.5,
        command_timeout=2.0,
        reconnect_backoff=(0.05, 0.1),
    )
    await store.start()
    ledger = await open_ledger(journal, name, lease)
    take_all = ledger.take_all

    def taken() -> list[Any]:
        intents = take_all()
        if intents:
            say(taken=[intent.request_id for intent in intents])
        return intents

    ledger.take_all = taken  # type: ignore[method-assign]

    def verdict(outcome: PendingWriteOutcome) -> None:
        say(
            verdict=outcome.verdict.value,
            request_id=outcome.intent.request_id,
            detail=outcome.detail,
        )

    ledger.outcomes.subscribe(verdict)
    mesh = Mesh(store, ledger=ledger, retry_delays=(0.01, 0.01))
    await mesh.create(MeshNode(path=f"p/seed-{name}", content={}), access=WRITER)
    say(ready=name)
    lines = asyncio.Queue[str]()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), lambda: lines.put_nowait(sys.stdin.readline().strip()))
    while True:
        command = await lines.get()
        if command == "go":
            requests = [
                CreateNodeRequest(
                    node=MeshNode(path=f"p/{name}-{n:04d}", content={"n": n}), access=WRITER
                )
                for n in range(count)
            ]
            answers = await creates(mesh, requests)
            say(
                recorded=[a.request_id for a in answers if a.recorded_for_reissue],
                answers=[str(a.rejection_reason) for a in answers],
            )
        elif command.startswith("replace "):
            _, other, start, end = command.split()
            requests = [
                CreateNodeRequest(
                    node=MeshNode(path=f"p/{other}-{n:04d}", content={"n": n}), access=WRITER
                )
                for n in range(int(start), int(end))
            ]
            answers = await creates(mesh, requests)
            say(
                replaced=[a.request_id for a in answers if a.recorded_for_reissue],
                answers=[str(a.rejection_reason) for a in answers],
            )
        elif command.startswith("resend "):
            _, other, start, ids = command.split()
            requests = [
                CreateNodeRequest(
                    node=MeshNode(path=f"p/{other}-{n:04d}", content={"n": n}),
                    access=WRITER,
                    request_id=request_id,
                )
                for n, request_id in enumerate(ids.split(","), start=int(start))
            ]
            answers = await creates(mesh, requests)
            say(
                resent=[a.request_id for a in answers],
                answers=[str(a.rejection_reason) for a in answers],
            )
        elif command == "evidence":
            await mesh.create(MeshNode(path=f"ev/{name}", content={}), access=WRITER)
            say(evidence=name)
        elif not command:
            return


if __name__ == "__main__":
    logger.remove()
    logger.add(sys.stderr, level="WARNING", format="{time:HH:mm:ss.SSS} {level} {message}")
    logger.enable("rxmesh")
    dsn, prefix, name, journal, count = sys.argv[1:6]
    lease = float(sys.argv[6]) if len(sys.argv) > 6 else 3.0
    asyncio.run(main(dsn, prefix, name, journal, int(count), lease))
