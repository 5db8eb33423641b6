"""Live queries on PostgreSQL (issue 35): a filtered Initial, a delta's cost by view size, a
resume and a gap's recovery, each against its baseline in the same run (JSON lines on stdout).

Usage (from the root of the tree to measure)::

    python -m bench.live [--dsn DSN] [--rows 50000] [--small 10000] [--deltas 200]
                         [--changes 1000] [--gap-fraction 0.01] [--repeat 5]

Two partitions are loaded by COPY under a schema prefix of the bench's own (dropped at the end):
``big`` (``--rows`` rows, one in ten with ``status`` ``open``) and ``small`` (``--small`` rows).
Lines printed (A and B alternate; the median of each side is taken):

- ``live_filtered_initial``: the Initial of ``where status = 'open'`` on ``big`` (a tenth of its
  rows) through ``store.query`` against an asyncpg ``fetch`` of the same statement
  (``_query_statement``) on a connection of its own. Target: ratio <= 1.5.
- ``live_delta_by_view_size``: views open on ``small`` and ``big``; a writer on a connection of
  its own updates one row of each in turn; the time from just before the UPDATE to the view's
  Delta carrying it, and this process's CPU per delta. Target: big / small <= 1.2.
- ``live_resume``: a view's token, ``--changes`` rows of ``big`` updated, then the resumed first
  frame (``resume_from=token``) against a full Initial of the same query: its bytes
  (``len(frame.model_dump_json())``) and time. Targets: <= 10 % of the bytes, <= 20 % of the time.
  ``resumed`` says whether the store answered a Delta (``false``: an Initial marked reset).
- ``live_gap_recovery``: a view open on ``big``; the listener is terminated
  (``pg_terminate_backend``) and ``--gap-fraction`` of the rows updated while it is down; the
  time from the declared gap to the view holding every change, against a full Initial of the
  same query (what a re-select reads). Target: <= 0.3.

Each line has its ``target`` and ``met``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg

import rxmesh
from rxmesh.aio import first_value
from rxmesh.model import ChangeFeedGap, FrameKind, MeshNode, NodeQuery, QueryFrame, field
from rxmesh.providers.postgres import PostgresStore
from rxmesh.providers.postgres._reads import _query_statement

DEFAULT_DSN = os.environ.get("RXMESH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BIG, SMALL = "big", "small"
OPEN = field("status").eq("open")
_COLUMNS = ("path", "node_type", "content", "version")
WAIT = 60.0
TREE = os.path.dirname(os.path.dirname(os.path.abspath(rxmesh.__file__)))
"""The rxmesh measured (``python -m`` from a tree's root measures that tree)."""


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _verdict(figure: float, target: float) -> dict[str, Any]:
    return {"target": target, "met": figure <= target}


class _View:
    """A subscriber's view: frames folded as they arrive, and who waits for what."""

    def __init__(self, store: PostgresStore, query: NodeQuery) -> None:
        self.nodes: dict[str, MeshNode] = {}
        self.arrived = asyncio.Event()
        self.initial = asyncio.Event()
        self.frames = 0
        self.subscription = store.query(query).subscribe(self._fold)

    def _fold(self, frame: QueryFrame) -> None:
        if frame.kind is FrameKind.INITIAL:
            self.nodes.clear()
            self.initial.set()
        for path in frame.removed:
            self.nodes.pop(path, None)
        for node in frame.nodes:
            self.nodes[node.path] = node
        self.frames += 1
        self.arrived.set()

    async def until(self, holds: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not holds():
                self.arrived.clear()
                await self.arrived.wait()


class _Lab:
    """One store over two loaded partitions under a prefix of the bench's own."""

    def __init__(self, dsn: str, rows: int, small: int, prefix: str | None = None) -> None:
        self.dsn = dsn
        self.sizes = {BIG: rows, SMALL: small}
        self.prefix = prefix or f"rxb{uuid.uuid4().hex[:8]}_"
        # A listener slow to come back, so the gap's writes land while it is down.
        self.store = PostgresStore(
            dsn, schema_prefix=self.prefix, max_size=4, reconnect_backoff=(0.3,)
        )
        self.conn: asyncpg.Connection[Any] | None = None

    @property
    def writer(self) -> asyncpg.Connection[Any]:
        assert self.conn is not None
        return self.conn

    def table(self, partition: str) -> str:
        return str(self.store._table(partition))

    async def __aenter__(self) -> _Lab:
        await self.store.start()
        self.conn = await asyncpg.connect(self.dsn)
        try:
            for partition, size in self.sizes.items():
                await self.store.write(MeshNode(path=f"{partition}/seed", version=1))
                records = [
                    (
                        f"{partition}/r{i:06d}",
                        "Row",
                        json.dumps({"i": i, "status": "open" if i % 10 == 0 else "shut"}),
                        1,
                    )
                    for i in range(size - 1)
                ]
                await self.writer.copy_records_to_table(
                    "nodes",
                    schema_name=self.store.schema_of(partition),
                    records=records,
                    columns=_COLUMNS,
                )
                await self.writer.execute(f"ANALYZE {self.table(partition)}")
            # Let the load's notifications pass before anyone listens: wait for a marker's.
            marker = f"{BIG}/marker"
            seen = asyncio.Event()
            changes = self.store.changes.subscribe(
                lambda c: seen.set() if c.path == marker else None
            )
            try:
                await self.store.write(MeshNode(path=marker, version=1))
                async with asyncio.timeout(WAIT):
                    await seen.wait()
            finally:
                changes.dispose()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *_: object) -> None:
        try:
            await self.store.close()
        finally:
            if self.conn is not None:
                await self.conn.close()
            conn = await asyncpg.connect(self.dsn)
            try:
                for partition in self.sizes:
                    schema = self.store.schema_of(partition)
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()

    async def touch(self, partition: str, count: int, stamp: int) -> list[str]:
        """Update ``count`` rows of ``partition`` (spread over it) in one statement; their paths."""
        step = max(1, (self.sizes[partition] - 1) // count)
        paths = [f"{partition}/r{i:06d}" for i in range(0, step * count, step)][:count]
        await self.writer.execute(
            f"UPDATE {self.table(partition)}"
            " SET content = content || jsonb_build_object('t', $2::int), version = version + 1"
            " WHERE path = ANY($1::text[])",
            paths,
            stamp,
        )
        return paths


def _stamped(view: _View, paths: list[str], stamp: int) -> bool:
    """Whether ``view`` holds every one of ``paths`` with ``stamp`` written in."""
    for path in paths:
        node = view.nodes.get(path)
        if node is None or not isinstance(node.content, dict) or node.content.get("t") != stamp:
            return False
    return True


async def _timed_initial(store: PostgresStore, query: NodeQuery) -> tuple[float, QueryFrame]:
    started = time.perf_counter()
    frame = await first_value(store.query(query), timeout=WAIT)
    return time.perf_counter() - started, frame


async def filtered_initial(lab: _Lab, repeat: int) -> dict[str, Any]:
    query = NodeQuery(partition=BIG, where=OPEN)
    statement, args = _query_statement(lab.table(BIG), "", None, OPEN)
    store_s: list[float] = []
    raw_s: list[float] = []
    rows = 0
    for round_ in range(repeat + 1):  # the first round warms both sides and is not counted
        order = ("store", "raw") if round_ % 2 else ("raw", "store")
        for side in order:
            if side == "store":
                elapsed, frame = await _timed_initial(lab.store, query)
                rows = len(frame.nodes)
                (store_s if round_ else []).append(elapsed)
            else:
                started = time.perf_counter()
                fetched = await lab.writer.fetch(statement, *args)
                elapsed = time.perf_counter() - started
                assert len(fetched) == rows or not rows, (len(fetched), rows)
                (raw_s if round_ else []).append(elapsed)
    ratio = statistics.median(store_s) / statistics.median(raw_s)
    return {
        "bench": "live_filtered_initial",
        "rows": lab.sizes[BIG],
        "matching": rows,
        "store_ms": _ms(statistics.median(store_s)),
        "raw_fetch_ms": _ms(statistics.median(raw_s)),
        "ratio": round(ratio, 3),
        **_verdict(ratio, 1.5),
    }


async def delta_by_view_size(lab: _Lab, deltas: int) -> dict[str, Any]:
    views = {p: _View(lab.store, NodeQuery(partition=p)) for p in (SMALL, BIG)}
    latency: dict[str, list[float]] = {SMALL: [], BIG: []}
    cpu: dict[str, list[float]] = {SMALL: [], BIG: []}
    try:
        for view in views.values():
            async with asyncio.timeout(WAIT):
                await view.initial.wait()
        for i in range(2 * deltas + 2):  # the first pair warms up and is not counted
            partition = (SMALL, BIG)[i % 2]
            view = views[partition]
            path = f"{partition}/r{(i * 7919) % (lab.sizes[partition] - 1):06d}"
            clock, started = time.process_time(), time.perf_counter()
            await lab.writer.execute(
                f"UPDATE {lab.table(partition)} SET content = content || jsonb_build_object("
                "'t', $2::int), version = version + 1 WHERE path = $1",
                path,
                i,
            )

            await view.until(functools.partial(_stamped, view, [path], i))
            if i >= 2:
                latency[partition].append(time.perf_counter() - started)
                cpu[partition].append(time.process_time() - clock)
    finally:
        for view in views.values():
            view.subscription.dispose()
    median = {p: statistics.median(latency[p]) for p in latency}
    ratio = median[BIG] / median[SMALL]
    return {
        "bench": "live_delta_by_view_size",
        "rows": [lab.sizes[SMALL], lab.sizes[BIG]],
        "deltas": deltas,
        "small_ms": _ms(median[SMALL]),
        "big_ms": _ms(median[BIG]),
        "small_cpu_us": round(statistics.median(cpu[SMALL]) * 1e6, 1),
        "big_cpu_us": round(statistics.median(cpu[BIG]) * 1e6, 1),
        "ratio": round(ratio, 3),
        **_verdict(ratio, 1.2),
    }


async def resume(lab: _Lab, changes: int, repeat: int) -> dict[str, Any]:
    query = NodeQuery(partition=BIG)
    resumed_s: list[float] = []
    full_s: list[float] = []
    resumed_bytes: list[int] = []
    full_bytes: list[int] = []
    resumed_all = True
    for round_ in range(repeat):
        token = (await first_value(lab.store.query(query), timeout=WAIT)).resume_token
        await lab.touch(BIG, changes, 1000 + round_)
        for side in ("resume", "full") if round_ % 2 else ("full", "resume"):
            if side == "resume":
                started = time.perf_counter()
                frame = await first_value(lab.store.query(query, resume_from=token), timeout=WAIT)
                resumed_s.append(time.perf_counter() - started)
                resumed_bytes.append(len(frame.model_dump_json()))
                resumed_all &= frame.kind is FrameKind.DELTA and frame.resumed
                if frame.resumed:
                    assert len(frame.nodes) == changes, (len(frame.nodes), changes)
            else:
                elapsed, frame = await _timed_initial(lab.store, query)
                full_s.append(elapsed)
                full_bytes.append(len(frame.model_dump_json()))
    byte_share = statistics.median(resumed_bytes) / statistics.median(full_bytes)
    time_share = statistics.median(resumed_s) / statistics.median(full_s)
    return {
        "bench": "live_resume",
        "rows": lab.sizes[BIG] + 1,
        "changes": changes,
        "resumed": resumed_all,
        "resumed_bytes": int(statistics.median(resumed_bytes)),
        "full_bytes": int(statistics.median(full_bytes)),
        "resumed_ms": _ms(statistics.median(resumed_s)),
        "full_ms": _ms(statistics.median(full_s)),
        "byte_share": round(byte_share, 4),
        "time_share": round(time_share, 4),
        "target": {"byte_share": 0.1, "time_share": 0.2},
        "met": byte_share <= 0.1 and time_share <= 0.2,
    }


async def _terminate_listener(lab: _Lab) -> None:
    pid = lab.store.feed_backend_pid
    assert pid is not None, "the store is not listening"
    assert await lab.writer.fetchval("SELECT pg_terminate_backend($1)", pid) is True
    async with asyncio.timeout(WAIT):
        while lab.store.feed_backend_pid == pid:  # noqa: ASYNC110 - the server's pace, bounded
            await asyncio.sleep(0.002)


async def gap_recovery(lab: _Lab, fraction: float, repeat: int) -> dict[str, Any]:
    query = NodeQuery(partition=BIG)
    changes = max(1, int(lab.sizes[BIG] * fraction))
    gap_s: list[float] = []
    full_s: list[float] = []
    for round_ in range(repeat):
        if round_ % 2 == 0:
            full_s.append((await _timed_initial(lab.store, query))[0])
        view = _View(lab.store, query)
        declared: list[float] = []

        def on_gap(_: ChangeFeedGap, declared: list[float] = declared) -> None:
            declared.append(time.perf_counter())

        gaps = lab.store.gaps.subscribe(on_gap)
        try:
            async with asyncio.timeout(WAIT):
                await view.initial.wait()
                while lab.store.feed_backend_pid is None:  # noqa: ASYNC110 - the last cut's
                    await asyncio.sleep(0.01)  # reconnection, at the server's pace, bounded
            stamp = 2000 + round_
            await _terminate_listener(lab)
            paths = await lab.touch(BIG, changes, stamp)
            await view.until(functools.partial(_stamped, view, paths, stamp))
            assert declared, "the view caught up without a gap declared"
            gap_s.append(time.perf_counter() - declared[0])
        finally:
            gaps.dispose()
            view.subscription.dispose()
        if round_ % 2 == 1:
            full_s.append((await _timed_initial(lab.store, query))[0])
    ratio = statistics.median(gap_s) / statistics.median(full_s)
    return {
        "bench": "live_gap_recovery",
        "rows": lab.sizes[BIG] + 1,
        "changed": changes,
        "gap_delta_ms": _ms(statistics.median(gap_s)),
        "full_initial_ms": _ms(statistics.median(full_s)),
        "ratio": round(ratio, 3),
        **_verdict(ratio, 0.3),
    }


async def measure(
    dsn: str = DEFAULT_DSN,
    *,
    rows: int = 50_000,
    small: int = 10_000,
    deltas: int = 200,
    changes: int = 1_000,
    gap_fraction: float = 0.01,
    repeat: int = 5,
    prefix: str | None = None,
) -> list[dict[str, Any]]:
    """Every line, one dict each (see the module docstring); ``prefix``: the schema prefix to
    load under (a fresh one if not given), so a caller can tell the bench's schemas from others'."""
    async with _Lab(dsn, rows, small, prefix) as lab:
        lines = [
            await filtered_initial(lab, repeat),
            await delta_by_view_size(lab, deltas),
            await resume(lab, changes, repeat),
            await gap_recovery(lab, gap_fraction, repeat),
        ]
    return [{**line, "rxmesh": TREE} for line in lines]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.live")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--changes", type=int, default=1_000)
    parser.add_argument("--gap-fraction", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    lines = asyncio.run(
        measure(
            args.dsn,
            rows=args.rows,
            small=args.small,
            deltas=args.deltas,
            changes=args.changes,
            gap_fraction=args.gap_fraction,
            repeat=args.repeat,
        )
    )
    for line in lines:
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
