"""What a node operation costs against the driver, measured in one run (JSON lines on stdout).

Usage (from the root of the tree to measure)::

    python -m bench.mesh [--dsn DSN] [--creates 400] [--memory 4000] [--reads 2000]
                         [--concurrency 32] [--repeat 3]

``python bench/mesh.py`` puts ``bench/`` first on the path, not the tree's root, so ``rxmesh`` is
whichever copy the environment installed (an editable install names one checkout), not
necessarily this tree's: every line says which it measured (``rxmesh``), and comparing two trees
takes ``python -m`` from each root (or ``PYTHONPATH`` naming it).

Lines printed (rounds of A and B alternate in one process; the median is taken):

- ``pg_create`` (``mode`` ``sequential`` and ``concurrent``): ``Mesh.create_node`` on a
  ``PostgresStore`` (creates/s) against a raw asyncpg single ``INSERT`` into a plain table of
  the same columns through an asyncpg pool of the same size; the ratio. Targets 0.8
  (sequential) and 0.7 (``--concurrency`` in flight). A third side, the same raw INSERT into
  the store's own table (its statement trigger NOTIFYs, this process's change feed hears each
  commit), gives ``ratio_vs_same_table`` and ``same_table_vs_raw``: what the change feed costs
  a commit, apart from what the mesh costs.
- ``memory_create``: microseconds per ``Mesh.create_node`` on the embedded store (the CPU cost of
  the mesh itself); target 60 µs.
- ``unavailable``: UNAVAILABLE answers per second (writes refused as unreachable, an in-memory
  ledger recording each, no retry ladder so the figure is CPU, not backoff); target 10,000/s.
- ``cpu_per_operation`` (with ``--cpu`` only): this process's CPU time per operation on the
  embedded store (``time.process_time``: what the mesh itself spends, which other processes on
  a busy machine disturb far less than a wall-clock rate), the minimum and the median of
  ``--cpu-rounds`` rounds, for ``create``, ``create_node``, ``update_node`` and an UNAVAILABLE
  ``create_node``; and the function calls each makes (``sys.setprofile``: Python and C calls,
  the same on any machine). Comparing two trees: run this file from one tree with ``PYTHONPATH``
  naming each tree's root in turn, so one bench measures both.
- ``read_ladder``: one ``PostgresStore`` read through the retry ladder — as the mesh does it
  (the verb awaited under the ladder's coroutine driver: ``rxmesh``) and through the adapter
  ``rxmesh.providers.observe`` and the operator (``rxmesh_observable``) — against a raw
  ``pool.fetchrow`` of the same row, and against tenacity's ``AsyncRetrying`` around the same
  fetch when tenacity is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

import rxmesh
from rxmesh import AccessContext, CreateNodeRequest, Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.faults import is_transient_connect_fault
from rxmesh.ledger import PendingWriteLedger
from rxmesh.operations import UpdateNodeRequest
from rxmesh.operators import retry_transient_connect
from rxmesh.operators._ladder import Ladder
from rxmesh.providers import observe
from rxmesh.providers.memory import InMemoryStore
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultInjectingStore

DEFAULT_DSN = os.environ.get("RXMESH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
ALICE = AccessContext(user="bench")


def _emit(row: dict[str, Any]) -> None:
    row["rxmesh"] = os.path.dirname(os.path.dirname(os.path.abspath(rxmesh.__file__)))
    print(json.dumps(row), flush=True)


async def _rate(work: Callable[[int], Awaitable[None]], n: int, concurrency: int) -> float:
    """Operations per second of ``work(i)`` for ``i < n``, ``concurrency`` at a time: that many
    worker tasks, each taking the next ``i`` as it finishes one (not a task per operation behind
    a semaphore, whose ``n`` task creations the figure would count as the measured side's)."""
    numbers = iter(range(n))

    async def worker() -> None:
        for i in numbers:
            await work(i)

    start = time.perf_counter()
    if concurrency == 1:
        await worker()
    else:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - start)


def _raw_insert(pool: asyncpg.Pool, table: str, prefix: str) -> Callable[[int], Awaitable[None]]:
    """The raw baseline: one asyncpg INSERT of node ``i`` into ``table`` through ``pool``."""

    async def insert(i: int) -> None:
        await pool.execute(
            f"INSERT INTO {table} (path, node_type, content, created_by, created_at, version,"
            " request_id) VALUES ($1, $2, $3::jsonb, $4, now(), 1, $5)"
            " ON CONFLICT (path) DO NOTHING",
            f"{prefix}{i:06d}",
            "B",
            json.dumps({"i": i}),
            "bench",
            uuid.uuid4().hex,
        )

    return insert


async def _feed_drained(store: PostgresStore, quiet: float = 0.05, limit: float = 10.0) -> None:
    """Wait until the store's change feed has delivered nothing for ``quiet`` seconds (bounded
    by ``limit``): the commits of the side just measured are all heard before the next starts."""
    heard = [time.perf_counter()]
    subscription = store.changes.subscribe(lambda _: heard.__setitem__(0, time.perf_counter()))
    try:
        deadline = time.perf_counter() + limit
        while time.perf_counter() < deadline:
            await asyncio.sleep(quiet)
            if time.perf_counter() - heard[0] >= quiet:
                return
    finally:
        subscription.dispose()


async def pg_create(dsn: str, creates: int, concurrency: int, repeat: int) -> list[dict[str, Any]]:
    """``Mesh.create_node`` on PostgreSQL against a raw single INSERT, sequential and concurrent."""
    prefix = f"rxbm{uuid.uuid4().hex[:8]}_"
    store = PostgresStore(dsn, schema_prefix=prefix, max_size=10)
    await store.start()
    mesh = Mesh(store, ledger=PendingWriteLedger(""))
    raw_schema = f"{prefix}raw"
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=10)
    assert pool is not None
    table = f"{quote_identifier(raw_schema)}.nodes"
    await pool.execute(
        f"CREATE SCHEMA {quote_identifier(raw_schema)}; CREATE TABLE {table} (path text PRIMARY "
        "KEY, node_type text, content jsonb, created_by text, created_at timestamptz, version "
        "bigint NOT NULL DEFAULT 0, request_id text)"
    )
    failures: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    try:
        for mode, inflight in (("sequential", 1), ("concurrent", concurrency)):
            mesh_rates: list[float] = []
            raw_rates: list[float] = []
            same_rates: list[float] = []
            groups_before = store.statistics().write_groups
            for round_ in range(repeat):
                partition = f"{mode[0]}{round_}"
                await mesh.create(MeshNode(path=f"{partition}/warm", content={}), access=ALICE)

                async def via_mesh(i: int, partition: str = partition) -> None:
                    node = MeshNode(path=f"{partition}/n{i:06d}", node_type="B", content={"i": i})
                    answer = await first_value(
                        mesh.create_node(CreateNodeRequest(node=node, access=ALICE))
                    )
                    if not answer.success:
                        key = str(answer.rejection_reason)
                        failures[key] = failures.get(key, 0) + 1

                tag = f"{mode}{round_}"
                raw = _raw_insert(pool, table, f"{tag}/n")
                # The bench's third side: the same INSERT into the store's own table.
                own = store._table(partition)
                raw_same_table = _raw_insert(pool, own, f"{partition}/raw{tag}n")

                sides = [(mesh_rates, via_mesh), (raw_rates, raw), (same_rates, raw_same_table)]
                for rates, work in sides[round_ % 3 :] + sides[: round_ % 3]:
                    # Each side starts on a quiet process: the store's change feed has taken
                    # the previous side's commits (every one NOTIFYs, and this process hears it).
                    await _feed_drained(store)
                    rates.append(await _rate(work, creates, inflight))
            mesh_rate, raw_rate = statistics.median(mesh_rates), statistics.median(raw_rates)
            same_rate = statistics.median(same_rates)
            rows.append(
                {
                    "bench": "mesh",
                    "measure": "pg_create",
                    "mode": mode,
                    "in_flight": inflight,
                    "creates": creates,
                    "repeat": repeat,
                    "mesh_per_s": round(mesh_rate),
                    "raw_insert_per_s": round(raw_rate),
                    "ratio": round(mesh_rate / raw_rate, 3),
                    "target_ratio": 0.8 if inflight == 1 else 0.7,
                    # The same raw INSERT into the store's own table: its statement trigger
                    # NOTIFYs and this process's change feed hears every commit, as for the mesh.
                    "raw_same_table_per_s": round(same_rate),
                    "ratio_vs_same_table": round(mesh_rate / same_rate, 3),
                    "same_table_vs_raw": round(same_rate / raw_rate, 3),
                    # Creates that waited behind busy lanes and went as one statement each
                    # (docs/providers.md): how many such statements this mode's rounds sent.
                    "write_groups": store.statistics().write_groups - groups_before,
                    "not_success": dict(failures),
                }
            )
    finally:
        await pool.execute(f"DROP SCHEMA {quote_identifier(raw_schema)} CASCADE")
        await pool.close()
        await store.close()
        await drop_schemas(dsn, prefix)
    return rows


async def drop_schemas(dsn: str, prefix: str) -> None:
    """Drop every schema whose name starts with ``prefix`` (a bench's own store and tables)."""
    conn = await asyncpg.connect(dsn)
    try:
        for row in await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
        ):
            await conn.execute(f"DROP SCHEMA {quote_identifier(row[0])} CASCADE")
    finally:
        await conn.close()


async def memory_create(creates: int, repeat: int) -> dict[str, Any]:
    """Microseconds per create on the embedded store (sequential): the in-process
    ``await mesh.create(...)`` and the observable ``create_node`` (rounds alternate)."""
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await mesh.create(MeshNode(path="m/warm", content={}), access=ALICE)
    per: dict[str, list[float]] = {"create": [], "create_node": []}
    for round_ in range(repeat):

        async def direct(i: int, round_: int = round_) -> None:
            node = MeshNode(path=f"m/d{round_}n{i:06d}", node_type="B", content={"i": i})
            await mesh.create(node, access=ALICE)

        async def observable(i: int, round_: int = round_) -> None:
            node = MeshNode(path=f"m/o{round_}n{i:06d}", node_type="B", content={"i": i})
            await first_value(mesh.create_node(CreateNodeRequest(node=node, access=ALICE)))

        pair = [("create", direct), ("create_node", observable)]
        if round_ % 2:
            pair.reverse()
        for name, work in pair:
            per[name].append(1e6 / await _rate(work, creates, 1))
    mesh.dispose()
    us = {name: statistics.median(values) for name, values in per.items()}
    return {
        "bench": "mesh",
        "measure": "memory_create",
        "creates": creates,
        "repeat": repeat,
        "us_per_create": {name: round(value, 1) for name, value in us.items()},
        "creates_per_s": {name: round(1e6 / value) for name, value in us.items()},
        "target_us": 60,
    }


async def unavailable(answers: int, repeat: int) -> dict[str, Any]:
    """UNAVAILABLE answers per second: writes refused, each intent recorded in memory."""
    store = FaultInjectingStore(InMemoryStore())
    mesh = Mesh(store, ledger=PendingWriteLedger(""), retry_delays=())
    await mesh.create(MeshNode(path="u/warm", content={}), access=ALICE)
    store.refuse_writes_as_unreachable()
    rates: list[float] = []
    reasons: set[str] = set()
    for round_ in range(repeat):

        async def work(i: int, round_: int = round_) -> None:
            node = MeshNode(path=f"u/r{round_}n{i:06d}", node_type="B", content={"i": i})
            answer = await first_value(mesh.create_node(CreateNodeRequest(node=node, access=ALICE)))
            reasons.add(str(answer.rejection_reason))

        rates.append(await _rate(work, answers, 64))
    mesh.dispose()
    rate = statistics.median(rates)
    return {
        "bench": "mesh",
        "measure": "unavailable",
        "answers": answers,
        "repeat": repeat,
        "answers_per_s": round(rate),
        "reasons": sorted(reasons),
        "target_per_s": 10_000,
    }


async def read_ladder(dsn: str, reads: int, repeat: int) -> dict[str, Any]:
    """One read through the mesh's ladder vs a raw fetchrow (and tenacity, when installed)."""
    prefix = f"rxbr{uuid.uuid4().hex[:8]}_"
    store = PostgresStore(dsn, schema_prefix=prefix, max_size=4)
    await store.start()
    await store.write(MeshNode(path="r/x", content={"v": 1}, version=1))
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    assert pool is not None
    table = f"{quote_identifier(store.schema_of('r'))}.nodes"
    ladder = retry_transient_connect()
    sql = (
        "SELECT path, node_type, content::text AS content, created_by, created_at, version,"
        f" request_id FROM {table} WHERE path = $1"
    )

    async def raw(_: int) -> None:
        await pool.fetchrow(sql, "r/x")

    async def mesh_read(_: int) -> None:
        await first_value(observe(store.read, "r/x").pipe(ladder))

    coroutine_ladder = Ladder.of()

    async def mesh_aread(_: int) -> None:  # what the mesh does inside: the verb, awaited
        await coroutine_ladder.call(lambda: store.read("r/x"))

    contenders: dict[str, Callable[[int], Awaitable[None]]] = {
        "raw": raw,
        "rxmesh": mesh_aread,
        "rxmesh_observable": mesh_read,
    }
    try:
        import tenacity

        async def with_tenacity(_: int) -> None:
            async for attempt in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception(is_transient_connect_fault),
                wait=tenacity.wait_fixed(0.25),
                stop=tenacity.stop_after_attempt(4),
                reraise=True,
            ):
                with attempt:
                    await pool.fetchrow(sql, "r/x")

        contenders["tenacity"] = with_tenacity
    except ImportError:
        pass
    us: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for round_ in range(repeat):
            names = list(contenders)
            names = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in names:
                us[name].append(1e6 / await _rate(contenders[name], reads, 1))
    finally:
        await pool.close()
        await store.close()
        conn = await asyncpg.connect(dsn)
        try:
            schema = quote_identifier(store.schema_of("r"))
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()
    median = {name: statistics.median(values) for name, values in us.items()}
    row: dict[str, Any] = {
        "bench": "mesh",
        "measure": "read_ladder",
        "reads": reads,
        "repeat": repeat,
        "us": {name: round(value, 1) for name, value in median.items()},
        "ratio_vs_raw": {
            name: round(value / median["raw"], 3) for name, value in median.items() if name != "raw"
        },
    }
    if "tenacity" in median:
        row["rxmesh_over_tenacity_us"] = round(median["rxmesh"] - median["tenacity"], 1)
    return row


async def cpu_per_operation(operations: int, rounds: int) -> dict[str, Any]:
    """CPU microseconds (this process's) per operation on the embedded store, min and median of
    ``rounds``, and the Python and C function calls each makes."""
    mesh = Mesh(InMemoryStore(), ledger=PendingWriteLedger(""))
    await mesh.create(MeshNode(path="c/warm", content={}), access=ALICE)
    refused = FaultInjectingStore(InMemoryStore())
    away = Mesh(refused, ledger=PendingWriteLedger(""), retry_delays=())
    await away.create(MeshNode(path="u/warm", content={}), access=ALICE)
    refused.refuse_writes_as_unreachable()

    def node(path: str, i: int) -> MeshNode:
        return MeshNode(path=path, node_type="B", content={"i": i})

    async def create(tag: str, i: int) -> None:
        await mesh.create(node(f"c/d{tag}n{i}", i), access=ALICE)

    async def create_node(tag: str, i: int) -> None:
        request = CreateNodeRequest(node=node(f"c/o{tag}n{i}", i), access=ALICE)
        await first_value(mesh.create_node(request))

    async def update_node(tag: str, i: int) -> None:  # the nodes ``create`` made
        request = UpdateNodeRequest(node=node(f"c/d{tag}n{i}", -i), access=ALICE)
        await first_value(mesh.update_node(request))

    async def unavailable(tag: str, i: int) -> None:
        request = CreateNodeRequest(node=node(f"u/r{tag}n{i}", i), access=ALICE)
        await first_value(away.create_node(request))

    works = {
        "create": create,
        "create_node": create_node,
        "update_node": update_node,
        "unavailable": unavailable,
    }
    us: dict[str, list[float]] = {name: [] for name in works}
    for round_ in range(rounds):
        for name, work in works.items():
            started = time.process_time()
            for i in range(operations):
                await work(str(round_), i)
            us[name].append((time.process_time() - started) / operations * 1e6)
    calls: dict[str, dict[str, float]] = {}
    counted = {"call": 0, "c_call": 0}

    def count(frame: Any, event: str, arg: Any) -> None:
        if event in counted:
            counted[event] += 1

    sample = min(operations, 200)
    for name, work in works.items():
        counted["call"] = counted["c_call"] = 0
        sys.setprofile(count)
        try:
            for i in range(sample):
                await work("calls", i)
        finally:
            sys.setprofile(None)
        calls[name] = {"python": counted["call"] / sample, "c": counted["c_call"] / sample}
    mesh.dispose()
    away.dispose()
    return {
        "bench": "mesh",
        "measure": "cpu_per_operation",
        "operations": operations,
        "rounds": rounds,
        "us_min": {name: round(min(values), 2) for name, values in us.items()},
        "us_median": {name: round(statistics.median(values), 2) for name, values in us.items()},
        "calls": {name: {k: round(v, 1) for k, v in c.items()} for name, c in calls.items()},
    }


async def run(args: argparse.Namespace) -> None:
    for row in await pg_create(args.dsn, args.creates, args.concurrency, args.repeat):
        _emit(row)
    _emit(await memory_create(args.memory, args.repeat))
    _emit(await unavailable(args.memory, args.repeat))
    _emit(await read_ladder(args.dsn, args.reads, args.repeat))
    if getattr(args, "cpu", False):
        _emit(await cpu_per_operation(args.memory // 2, args.cpu_rounds))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--creates", type=int, default=400)
    parser.add_argument("--memory", type=int, default=4000)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="also measure cpu_per_operation")
    parser.add_argument("--cpu-rounds", type=int, default=7)
    parser.add_argument(
        "--cpu-only", action="store_true", help="measure cpu_per_operation alone (no database)"
    )
    args = parser.parse_args(argv)
    if args.cpu_only:
        asyncio.run(_cpu_only(args))
    else:
        asyncio.run(run(args))


async def _cpu_only(args: argparse.Namespace) -> None:
    _emit(await cpu_per_operation(args.memory // 2, args.cpu_rounds))


if __name__ == "__main__":
    main()
