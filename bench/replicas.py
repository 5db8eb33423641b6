"""Pending writes over three replicas, one of which dies: the JetStream journal vs directories.

Three meshes (replicas ``a``, ``b``, ``c``) share one store (an ``InMemoryStore`` behind a
``FaultInjectingStore``) and each has its own ledger: a :class:`JetStreamLedger` on one R3 bucket
of a throwaway 3-node ``nats-server -js`` cluster, or a private journal directory each (the
default). The store refuses writes; ``--intents`` creates are spread over the three replicas
(answered UNAVAILABLE and recorded, ``--in-flight`` at once: ``record`` lines give answers/s).
Replica ``a`` then dies (its ledger and mesh stop without a word: no lease release), its lease
lapses and a survivor takes its intents over, still during the outage. The store comes back and
declares a gap (the evidence); ``reissue`` lines give the time from that evidence to the last
verdict and the verdicts per second. With directories, ``a``'s intents get no verdict at all.

    python bench/replicas.py [--intents 10000] [--in-flight 500] [--journal jetstream,directory]

One JSON line per phase and journal. Targets: a dead replica's intents (a third of 10,000) all
settled within 10 s of the store answering; recording with JetStream >= 2,000 answers/s with
500 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import JetStreamLedger, PendingWriteLedger, PendingWriteOutcome
from rxmesh.operations import CreateNodeRequest
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore, TemporaryNatsCluster

NAMES = ("a", "b", "c")
WRITER = AccessContext(user="writer")
LEASE = 8.0


async def ledgers(kind: str, urls: list[str], tmp: Path) -> dict[str, PendingWriteLedger]:
    if kind == "directory":
        return {name: PendingWriteLedger(tmp / name) for name in NAMES}
    return {
        name: await JetStreamLedger.connect(
            urls, bucket="bench", replicas=3, owner=name, lease_ttl=LEASE, timeout=5.0
        )
        for name in NAMES
    }


async def run(kind: str, intents: int, in_flight: int, urls: list[str]) -> list[dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="rxmesh-bench-replicas-"))
    store = FaultInjectingStore(InMemoryStore())
    by_name = await ledgers(kind, urls, tmp)
    meshes = {name: Mesh(store, ledger=by_name[name], retry_delays=(0.001,)) for name in NAMES}
    await meshes["a"].create(MeshNode(path="p/seed", content={}), access=WRITER)
    verdicts: dict[str, list[PendingWriteOutcome]] = {name: [] for name in NAMES}
    for name in NAMES:
        by_name[name].outcomes.subscribe(verdicts[name].append)

    store.refuse_writes_as_unreachable()
    gate = asyncio.Semaphore(in_flight)
    recorded: dict[str, set[str]] = {name: set() for name in NAMES}

    async def create(n: int) -> None:
        name = NAMES[n % 3]
        request = CreateNodeRequest(
            node=MeshNode(path=f"p/n{n:06d}", content={"n": n}), access=WRITER
        )
        async with gate:
            answer = await first_value(meshes[name].create_node(request), timeout=60)
        if answer.recorded_for_reissue:
            recorded[name].add(request.request_id)

    started = time.perf_counter()
    await asyncio.gather(*(create(n) for n in range(intents)))
    elapsed = time.perf_counter() - started
    total = sum(len(ids) for ids in recorded.values())
    lines: list[dict[str, Any]] = [
        {
            "bench": "replicas",
            "phase": "record",
            "journal": kind,
            "answers": intents,
            "recorded": total,
            "in_flight": in_flight,
            "seconds": round(elapsed, 3),
            "answers_per_s": round(intents / elapsed),
        }
    ]

    # a dies during the outage: nothing more from it, its lease not released.
    meshes["a"].dispose()
    if isinstance(by_name["a"], JetStreamLedger):
        await by_name["a"].aclose(release=False)
        survivors = [by_name["b"], by_name["c"]]
        assert all(isinstance(s, JetStreamLedger) for s in survivors)
        async with asyncio.timeout(LEASE * 10):
            claimed = len(recorded["a"])
            while sum(s.claimed for s in survivors if isinstance(s, JetStreamLedger)) < claimed:  # noqa: ASYNC110 - the lease's pace
                await asyncio.sleep(0.05)
    else:
        by_name["a"].close()

    store.restore()
    evidence = time.perf_counter()
    store.declare_gap()
    expected = len(recorded["b"]) + len(recorded["c"])
    if kind != "directory":
        expected += len(recorded["a"])
    done = asyncio.Event()
    dead_last = 0.0

    def count(outcome: PendingWriteOutcome | None) -> None:
        nonlocal dead_last
        if outcome is not None and outcome.intent.request_id in recorded["a"]:
            dead_last = time.perf_counter() - evidence
        if len(verdicts["b"]) + len(verdicts["c"]) >= expected:
            done.set()

    for name in ("b", "c"):
        by_name[name].outcomes.subscribe(count)
    count(None)
    async with asyncio.timeout(300):
        await done.wait()
    last = time.perf_counter() - evidence
    settled = {o.intent.request_id for name in ("b", "c") for o in verdicts[name]}
    lines.append(
        {
            "bench": "replicas",
            "phase": "reissue",
            "journal": kind,
            "intents": total,
            "dead_replica_intents": len(recorded["a"]),
            "dead_replica_settled": len(settled & recorded["a"]),
            "settled": len(settled),
            "evidence_to_last_verdict_s": round(last, 3),
            "evidence_to_dead_replicas_last_verdict_s": round(dead_last, 3),
            "reissued_per_s": round(len(settled) / last),
        }
    )
    for name in ("b", "c"):
        meshes[name].dispose()
        ledger = by_name[name]
        if isinstance(ledger, JetStreamLedger):
            await ledger.aclose()
        else:
            ledger.close()
    return lines


async def main(args: argparse.Namespace) -> None:
    kinds = args.journal.split(",")
    with TemporaryNatsCluster(3) as cluster:
        for kind in kinds:
            for line in await run(kind, args.intents, args.in_flight, cluster.urls):
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intents", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=500)
    parser.add_argument("--journal", default="jetstream,directory")
    asyncio.run(main(parser.parse_args()))
