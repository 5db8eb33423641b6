"""PostgresStore against raw asyncpg, measured in the same run (JSON lines on stdout).

Usage::

    python bench/stores.py [--dsn DSN] [--rows 100000] [--window 1000] [--notifies 300]
                           [--repeat 3]

Lines printed:

- ``write_many``: rows/s of ``PostgresStore.write_many`` vs raw asyncpg on the same rows and the
  same windows (each window its own transaction): ``executemany``, ``INSERT ... SELECT FROM
  unnest(...)``, ``copy_records_to_table`` into a plain table (``copy``) and
  ``copy_records_to_table`` into a table of the store itself (``copy_same_table``: the store's
  statement triggers fire and its listener hears them, as for ``store``); median of ``--repeat``
  rounds, the contenders interleaved in each round; ratios. Targets: ``ratio_vs_copy >= 0.9``
  (issue 16) and ``ratio_vs_unnest >= 0.8``. Every contender starts from the same ``MeshNode``
  list and pays for turning it into rows (JSON-encoding the content). The plain tables have no
  trigger and nobody listening; the store pays for its change feed, and so does
  ``copy_same_table``.
- ``change_feed_latency``: for the same commits, commit -> ``PostgresStore.changes`` subscriber
  (the row fetched) vs commit -> a raw asyncpg ``LISTEN`` callback on the same channel; p50/p99
  in ms, measured from before the INSERT is sent; target ``p50_ratio <= 1.5``.

Behind a pooler (issue 14; skipped with a line saying why when no ``pgbouncer`` binary is found,
or with ``--no-pgbouncer``): the bench starts its own PgBouncer (transaction pooling, a free
loopback port) in front of ``--dsn`` and prints, measured in the same run as the direct figures:

- ``mesh_create`` (``mode`` ``sequential`` and ``concurrent``): ``Mesh.create_node`` answers
  per second through a direct store and through the pooler (the pool via PgBouncer, the
  listener direct), the ratio, and every answer that was not a success (there must be none).
- ``change_feed_latency_pgbouncer``: commit -> ``changes`` subscriber when the commits and the
  store's pool go through the pooler (the listener direct), against the direct figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

import asyncpg
from reactivex import operators as ops

from rxmesh import AccessContext, CreateNodeRequest, Mesh
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from rxmesh.model import MeshNode, NodeChange
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import TemporaryPgBouncer

DEFAULT_DSN = os.environ.get("RXMESH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")

_COLUMNS = ("path", "node_type", "content", "created_by", "created_at", "version", "request_id")


def _nodes(n: int, tag: str) -> list[MeshNode]:
    now = datetime.now(UTC)
    return [
        MeshNode(
            path=f"{tag}/n{i:07d}",
            node_type="Bench",
            content={"i": i, "text": "small node content of a few dozen bytes"},
            created_by="bench",
            created_at=now,
            version=1,
            request_id=f"req-{i}",
        )
        for i in range(n)
    ]


def _records(nodes: list[MeshNode]) -> list[tuple[Any, ...]]:
    return [
        (
            n.path,
            n.node_type,
            json.dumps(n.content),
            n.created_by,
            n.created_at,
            n.version,
            n.request_id,
        )
        for n in nodes
    ]


async def _raw_table(conn: asyncpg.Connection, schema: str) -> str:
    s = quote_identifier(schema)
    await conn.execute(
        f"CREATE SCHEMA IF NOT EXISTS {s}; DROP TABLE IF EXISTS {s}.raw;"
        f" CREATE TABLE {s}.raw (path text PRIMARY KEY, node_type text, content jsonb,"
        " created_by text, created_at timestamptz, version bigint NOT NULL DEFAULT 0,"
        " request_id text)"
    )
    return f"{s}.raw"


async def _timed(work: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await work()
    return time.perf_counter() - started


async def bench_write_many(dsn: str, rows: int, window: int, repeat: int) -> dict[str, Any]:
    """Median rows/s of the store's write_many and of three raw baselines."""
    prefix = f"rxb{uuid.uuid4().hex[:8]}_"
    schema = prefix + "raw"
    conn = await asyncpg.connect(dsn, command_timeout=120)
    nodes = _nodes(rows, "w")
    store = PostgresStore(dsn, schema_prefix=prefix, max_size=2, command_timeout=120)
    await store.start()
    kinds = ("executemany", "unnest", "copy", "copy_same_table", "store")
    timings: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        table = await _raw_table(conn, schema)
        insert_one = (
            f"INSERT INTO {table} ({', '.join(_COLUMNS)})"
            " VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7) ON CONFLICT (path) DO NOTHING"
        )
        unnest = (
            f"INSERT INTO {table} ({', '.join(_COLUMNS)}) SELECT p, t, c::jsonb, b, a, v, r"
            " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[],"
            " $6::bigint[], $7::text[]) AS u(p, t, c, b, a, v, r)"
            " ON CONFLICT (path) DO NOTHING RETURNING path"
        )

        # Every baseline starts from the same MeshNodes and pays for turning them into rows.
        async def executemany() -> None:
            for start in range(0, rows, window):
                async with conn.transaction():
                    await conn.executemany(insert_one, _records(nodes[start : start + window]))

        async def with_unnest() -> None:
            for start in range(0, rows, window):
                chunk = _records(nodes[start : start + window])
                await conn.fetch(unnest, *(list(column) for column in zip(*chunk, strict=True)))

        async def copy() -> None:
            for start in range(0, rows, window):
                await conn.copy_records_to_table(
                    "raw",
                    schema_name=schema,
                    records=_records(nodes[start : start + window]),
                    columns=list(_COLUMNS),
                )

        # A table of the store's own (its triggers, its listener), filled by a raw COPY.
        await asyncio.wait_for(store.write(MeshNode(path="wcopy", version=1)), 60)
        same_schema = store.schema_of("wcopy")

        async def copy_same_table() -> None:
            for start in range(0, rows, window):
                await conn.copy_records_to_table(
                    "nodes",
                    schema_name=same_schema,
                    records=_records(nodes[start : start + window]),
                    columns=list(_COLUMNS),
                )

        async def through_store() -> None:
            await first_value(store.write_many(nodes, window).pipe(ops.count()), timeout=600)

        store_table = f"{quote_identifier(store.schema_of('w'))}.nodes"
        same_table = f"{quote_identifier(same_schema)}.nodes"
        for _ in range(repeat):
            for key, work in (
                ("executemany", executemany),
                ("unnest", with_unnest),
                ("copy", copy),
            ):
                await conn.execute(f"TRUNCATE {table}")
                timings[key].append(await _timed(work))
            await conn.execute(f"TRUNCATE {same_table}")
            timings["copy_same_table"].append(await _timed(copy_same_table))
            if await conn.fetchval("SELECT to_regclass($1)", store_table):
                await conn.execute(f"TRUNCATE {store_table}")
            timings["store"].append(await _timed(through_store))
            assert await conn.fetchval(f"SELECT count(*) FROM {store_table}") == rows
    finally:
        await store.close()
        for name in (schema, store.schema_of("w"), store.schema_of("wcopy")):
            await conn.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(name)} CASCADE")
        await conn.close()
    rate = {k: rows / statistics.median(v) for k, v in timings.items()}
    return {
        "bench": "write_many",
        "rows": rows,
        "window": window,
        "repeat": repeat,
        "rows_per_s": {k: round(v) for k, v in rate.items()},
        "ratio_vs_unnest": round(rate["store"] / rate["unnest"], 3),
        "ratio_vs_executemany": round(rate["store"] / rate["executemany"], 3),
        "ratio_vs_copy": round(rate["store"] / rate["copy"], 3),
        "ratio_vs_copy_same_table": round(rate["store"] / rate["copy_same_table"], 3),
        "spread_store_vs_copy": [
            round(copy / store, 3)
            for store, copy in zip(timings["store"], timings["copy"], strict=True)
        ],
        "target_ratio_vs_copy": 0.9,
        "target_ratio_vs_unnest": 0.8,
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_change_feed_latency(
    dsn: str, notifies: int, *, pool_dsn: str | None = None
) -> dict[str, Any]:
    """Commit -> subscriber latency: the store's ``changes`` vs a raw LISTEN callback on the SAME
    channel, for the SAME commits (both hear every NOTIFY the store's trigger sends).

    ``pool_dsn`` (a pooler in front of ``dsn``): the commits and the store's pool go through it;
    the store's listener and the raw one stay on ``dsn`` (as ``listen_dsn`` must)."""
    prefix = f"rxb{uuid.uuid4().hex[:8]}_"
    writer = await asyncpg.connect(pool_dsn or dsn, statement_cache_size=0 if pool_dsn else 100)
    listener = await asyncpg.connect(dsn)
    store = PostgresStore(pool_dsn or dsn, schema_prefix=prefix, max_size=2, listen_dsn=dsn)
    await store.start()
    loop = asyncio.get_running_loop()
    waiting: dict[tuple[str, str], asyncio.Future[float]] = {}

    def arrived(kind: str, path: str) -> None:
        future = waiting.pop((kind, path), None)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())

    def on_raw(_c: object, _pid: int, _ch: str, payload: object) -> None:
        decoded = json.loads(str(payload))
        if decoded[1] == "probe":  # the store's delivery probes share the channel
            return
        for path, _version in decoded[2]:
            arrived("raw", path)

    def on_change(change: NodeChange) -> None:
        if change.node is not None:  # the row was fetched: what a subscriber gets
            arrived("store", change.path)

    raw_ms: list[float] = []
    store_ms: list[float] = []
    subscription = store.changes.subscribe(on_change)
    try:
        await listener.add_listener(f"{prefix}changes", on_raw)
        await asyncio.wait_for(store.write(MeshNode(path="lat/warm", version=1)), 10)
        table = f"{quote_identifier(store.schema_of('lat'))}.nodes"
        insert = f"INSERT INTO {table} (path, version) VALUES ($1, 1)"
        for i in range(notifies):
            path = f"lat/n{i:06d}"
            raw: asyncio.Future[float] = loop.create_future()
            mine: asyncio.Future[float] = loop.create_future()
            waiting[("raw", path)] = raw
            waiting[("store", path)] = mine
            started = time.perf_counter()
            await writer.execute(insert, path)
            raw_done, store_done = await asyncio.wait_for(asyncio.gather(raw, mine), 10)
            raw_ms.append((raw_done - started) * 1000)
            store_ms.append((store_done - started) * 1000)
    finally:
        subscription.dispose()
        await store.close()
        await writer.execute(
            f"DROP SCHEMA IF EXISTS {quote_identifier(store.schema_of('lat'))} CASCADE"
        )
        await writer.close()
        await listener.close()
    raw_p50, store_p50 = statistics.median(raw_ms), statistics.median(store_ms)
    return {
        "bench": "change_feed_latency",
        "notifies": notifies,
        "raw_listen_ms": {"p50": round(raw_p50, 4), "p99": round(_percentile(raw_ms, 0.99), 4)},
        "store_changes_ms": {
            "p50": round(store_p50, 4),
            "p99": round(_percentile(store_ms, 0.99), 4),
        },
        "p50_ratio": round(store_p50 / raw_p50, 3),
        "target_p50_ratio": 1.5,
    }


async def _mesh_creates(
    dsn: str, listen_dsn: str, creates: int, concurrency: int, repeat: int
) -> dict[str, Any]:
    """Median creates/s of ``Mesh.create_node`` (sequential, then ``concurrency`` at a time)
    through a store on ``dsn``; every answer that was not a success, by reason."""
    prefix = f"rxb{uuid.uuid4().hex[:8]}_"
    store = PostgresStore(dsn, schema_prefix=prefix, listen_dsn=listen_dsn, max_size=10)
    await store.start()
    mesh = Mesh(store, ledger=PendingWriteLedger(""))
    access = AccessContext(user="bench")
    failures: dict[str, int] = {}
    rates: dict[str, list[float]] = {"sequential": [], "concurrent": []}

    async def create(path: str) -> None:
        node = MeshNode(path=path, node_type="Bench", content={"p": path})
        answer = await first_value(
            mesh.create_node(CreateNodeRequest(node=node, access=access)), timeout=60
        )
        if not answer.success:
            reason = str(answer.rejection_reason)
            failures[reason] = failures.get(reason, 0) + 1

    try:
        for round_ in range(repeat):
            partition = f"m{round_}"
            await create(f"{partition}/warm")  # the partition's root, grant and table

            async def sequential(partition: str = partition) -> None:
                for i in range(creates):
                    await create(f"{partition}/s{i:06d}")

            async def concurrent(partition: str = partition) -> None:
                gate = asyncio.Semaphore(concurrency)

                async def gated(path: str) -> None:
                    async with gate:
                        await create(path)

                await asyncio.gather(*(gated(f"{partition}/c{i:06d}") for i in range(creates)))

            rates["sequential"].append(creates / await _timed(sequential))
            rates["concurrent"].append(creates / await _timed(concurrent))
    finally:
        mesh.dispose()
        await store.close()
        conn = await asyncpg.connect(listen_dsn)
        try:
            for round_ in range(repeat):
                name = quote_identifier(store.schema_of(f"m{round_}"))
                await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        finally:
            await conn.close()
    return {
        "sequential": statistics.median(rates["sequential"]),
        "concurrent": statistics.median(rates["concurrent"]),
        "failures": failures,
    }


async def bench_mesh_create_pgbouncer(
    dsn: str, pooled_dsn: str, creates: int, concurrency: int, repeat: int
) -> list[dict[str, Any]]:
    """``Mesh.create_node`` through a direct store and through the pooler, same run: a line per
    mode with both rates and the ratio pooler / direct."""
    direct = await _mesh_creates(dsn, dsn, creates, concurrency, repeat)
    pooled = await _mesh_creates(pooled_dsn, dsn, creates, concurrency, repeat)
    lines = []
    for mode in ("sequential", "concurrent"):
        line: dict[str, Any] = {
            "bench": "mesh_create",
            "mode": mode,
            "creates": creates,
            "repeat": repeat,
            "direct_per_s": round(direct[mode]),
            "pgbouncer_per_s": round(pooled[mode]),
            "ratio_pgbouncer_vs_direct": round(pooled[mode] / direct[mode], 3),
            "not_success": {"direct": direct["failures"], "pgbouncer": pooled["failures"]},
        }
        if mode == "concurrent":
            line["concurrency"] = concurrency
        lines.append(line)
    return lines


async def bench_change_feed_latency_pgbouncer(
    dsn: str, pooled_dsn: str, notifies: int, direct: dict[str, Any]
) -> dict[str, Any]:
    """The change-feed latency with the commits and the pool through the pooler, against the
    direct run's figures (``direct``: the ``change_feed_latency`` line of the same run)."""
    pooled = await bench_change_feed_latency(dsn, notifies, pool_dsn=pooled_dsn)
    direct_p50 = direct["store_changes_ms"]["p50"]
    pooled_p50 = pooled["store_changes_ms"]["p50"]
    return {
        "bench": "change_feed_latency_pgbouncer",
        "notifies": notifies,
        "direct_store_changes_ms": direct["store_changes_ms"],
        "pgbouncer_store_changes_ms": pooled["store_changes_ms"],
        "pgbouncer_raw_listen_ms": pooled["raw_listen_ms"],
        "p50_ratio_pgbouncer_vs_direct": round(pooled_p50 / direct_p50, 3),
    }


async def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmarks and print one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--notifies", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mesh-creates", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--no-pgbouncer", action="store_true", help="skip the rows through a PgBouncer"
    )
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []

    def emit(*lines: dict[str, Any]) -> None:
        for line in lines:
            results.append(line)
            print(json.dumps(line), flush=True)

    emit(await bench_write_many(args.dsn, args.rows, args.window, args.repeat))
    latency = await bench_change_feed_latency(args.dsn, args.notifies)
    emit(latency)
    if args.no_pgbouncer:
        return results
    target = urlparse(args.dsn)
    try:
        bouncer = TemporaryPgBouncer(target.hostname or "127.0.0.1", target.port or 5432)
    except FileNotFoundError as exc:
        emit({"bench": "pgbouncer", "skipped": str(exc)})
        return results
    with bouncer:
        pooled = bouncer.dsn(args.dsn)
        emit(
            *await bench_mesh_create_pgbouncer(
                args.dsn, pooled, args.mesh_creates, args.concurrency, args.repeat
            )
        )
        emit(await bench_change_feed_latency_pgbouncer(args.dsn, pooled, args.notifies, latency))
    return results


if __name__ == "__main__":
    asyncio.run(main())
