"""The synced-query cache: its fan-out, and live queries at scale on PostgreSQL (issue 16).

Fan-out (no server): one query, N subscribers (10,000 by default) through
``SyncedQueryCache.get``: asserts that ONE upstream was opened, then times the delivery of one
delta to all N, against a bare ``Subject`` with N observers in the same run. Rounds are
interleaved and the median of each side is taken. One JSON line (``"bench": "cache"``).

    python bench/cache.py [SUBSCRIBERS] [REPEATS]

Live queries (PostgreSQL at ``--dsn``, default ``RXMESH_TEST_DSN``), per size (10k and 50k rows
COPYed into one partition, bench schemas of their own, dropped after):

- ``live_initial``: the Initial through ``store.query`` and through a fresh mesh's ``mesh.live``
  against the raw asyncpg fetch of the same rows; interleaved, median of ``--repeat``; the GC
  time of each (``gc.callbacks``). Target: ratio <= 2.
- ``live_delta_latency`` (per writer count): a writer process commits rows one by one (its own
  connection per writer) for ``--seconds``; two observer processes, each alone on its loop, see
  the same commits: ``store.query`` (the baseline) and ``mesh.live``. Latency is from just
  before the INSERT (stamped in the row) to the frame carrying it. Targets: p50 <= 1.5x and
  p99 <= 2x the baseline's, 100% delivered.
- ``live_gap``: ``store.query`` and ``mesh.live`` open on the partition; the listener is killed
  (``pg_terminate_backend``), a row is inserted meanwhile; the time from the declared gap to each
  receiving it, against the raw fetch (interleaved); the reads each gap's recovery took; the worst
  loop step under asyncio debug mode (``slow_callback_duration = 0.02``) and rxmesh's
  ``LoopStallMonitor`` (with the GC share of the longest stall).

    python bench/cache.py live [--rows 10000,50000] [--writers 1,8] [--seconds 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import logging
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
from reactivex import Observable, abc
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxmesh import Mesh
from rxmesh.aio import first_value
from rxmesh.cache import SyncedQueryCache
from rxmesh.diagnosis import LoopStallMonitor
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.providers.postgres import PostgresStore

TARGET_RATIO = 1.5


class _Counter:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _: Any) -> None:
        self.count += 1


def _time_delivery(subject: Subject[QueryFrame], frame: QueryFrame, counter: _Counter) -> float:
    before = counter.count
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        subject.on_next(frame)
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    if counter.count - before == 0:
        raise AssertionError("the delta reached nobody")
    return elapsed


def measure(subscribers: int = 10_000, repeats: int = 15) -> dict[str, Any]:
    """Build both fan-outs, time one delta ``repeats`` times each, and return the figures."""
    query = NodeQuery(node_type="NodeType")
    opened = 0
    upstream: Subject[QueryFrame] = Subject()

    def open_query(_: NodeQuery) -> Observable[QueryFrame]:
        def subscribe(
            observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            nonlocal opened
            opened += 1
            return upstream.subscribe(observer, scheduler=scheduler)

        return Observable(subscribe)

    cache = SyncedQueryCache(open_query, scheduler=TestScheduler())
    via_cache = _Counter()
    for _ in range(subscribers):
        cache.get(query).subscribe(via_cache)
    if opened != 1:
        raise AssertionError(f"{subscribers} subscribers opened {opened} upstreams, not 1")
    if cache.statistics().subscribers != subscribers:
        raise AssertionError("the cache lost subscribers")

    bare: Subject[QueryFrame] = Subject()
    via_subject = _Counter()
    for _ in range(subscribers):
        bare.subscribe(via_subject)

    delta = QueryFrame.delta([MeshNode(path="bench/a", node_type="NodeType", version=2)])
    upstream.on_next(QueryFrame.initial([]))  # warm both paths once
    bare.on_next(QueryFrame.initial([]))
    cache_times: list[float] = []
    subject_times: list[float] = []
    for round_ in range(repeats):
        sides = [(upstream, via_cache, cache_times), (bare, via_subject, subject_times)]
        if round_ % 2:
            sides.reverse()
        for subject, counter, times in sides:
            times.append(_time_delivery(subject, delta, counter))
    if via_cache.count != via_subject.count:
        raise AssertionError("the two fan-outs delivered different counts")

    cache_median = statistics.median(cache_times)
    subject_median = statistics.median(subject_times)
    return {
        "bench": "cache",
        "subscribers": subscribers,
        "upstream_subscriptions": opened,
        "repeats": repeats,
        "cache_delta_ms": round(cache_median * 1000, 3),
        "subject_delta_ms": round(subject_median * 1000, 3),
        "ratio": round(cache_median / subject_median, 3),
        "target_ratio": TARGET_RATIO,
    }


# -- live queries on PostgreSQL (issue 16) --------------------------------------------------------

DEFAULT_DSN = os.environ.get("RXMESH_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
PARTITION = "bench"
LATENCY_TARGETS = {"p50": 1.5, "p99": 2.0}
"""``mesh.live`` delta latency over ``store.query``'s, measured on the same commits."""
READ_TARGET = 2.0
"""An Initial, or a gap's recovery, over the raw asyncpg fetch of the same rows."""
STALL_LIMIT_SECONDS = 0.02
_HERE = os.path.abspath(__file__)
_COLUMNS = ("path", "node_type", "content", "created_by", "created_at", "version", "request_id")
_SLOW = re.compile(r"Executing (?P<step>.*) took (?P<seconds>[0-9.]+) seconds", re.S)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class _Arrivals:
    """A live-query observer that notes when each of one run's rows arrived (and its Initial)."""

    def __init__(self, tag: str) -> None:
        self.prefix = f"{PARTITION}/{tag}"
        self.at: dict[str, float] = {}
        self.sent: dict[str, float] = {}
        self.initial: float | None = None
        self.frames = 0
        self.errors: list[Exception] = []

    def __call__(self, frame: QueryFrame) -> None:
        now = time.time()
        if frame.kind is FrameKind.INITIAL:
            self.initial = now
            return
        self.frames += 1
        for node in frame.nodes:
            if node.path.startswith(self.prefix) and node.path not in self.at:
                self.at[node.path] = now
                content = node.content
                sent = content.get("t") if isinstance(content, dict) else None
                if isinstance(sent, float):
                    self.sent[node.path] = sent

    def latencies(self) -> list[float]:
        return [self.at[path] - sent for path, sent in self.sent.items()]


async def _writer_main(args: list[str]) -> None:
    """The load: ``writers`` connections INSERTing rows one by one for ``seconds`` (a process of
    its own, so the observer's loop measures only the observer). Prints ``{"written": N}``."""
    dsn, schema, writers, seconds, tag = args[0], args[1], int(args[2]), float(args[3]), args[4]
    conns = [await asyncpg.connect(dsn) for _ in range(writers)]
    sql = (
        f'INSERT INTO "{schema}".nodes (path, node_type, content, version)'
        " VALUES ($1, $2, $3::jsonb, 1)"
    )
    counts = [0] * writers
    stop = time.monotonic() + seconds

    async def write(k: int) -> None:
        while time.monotonic() < stop:
            path = f"{PARTITION}/{tag}w{k}n{counts[k]:07d}"
            await conns[k].execute(sql, path, "Row", json.dumps({"t": time.time()}))
            counts[k] += 1

    try:
        await asyncio.gather(*(write(k) for k in range(writers)))
    finally:
        for conn in conns:
            await conn.close()
    print(json.dumps({"written": sum(counts)}))


def _release_all(mesh: Mesh) -> None:
    """Release the mesh's cached chains (no-op before ``SyncedQueryCache.dispose`` existed)."""
    dispose = getattr(mesh.queries, "dispose", None)
    if dispose is not None:
        dispose()


class _Lab:
    """One store, one mesh, one partition of ``rows`` rows, under a prefix of the bench's own."""

    def __init__(self, dsn: str, rows: int, *, stamped: bool = True) -> None:

        self.dsn = dsn
        self.rows = rows
        self.stamped = stamped
        self.prefix = f"rxb{uuid.uuid4().hex[:8]}_"
        self.store = PostgresStore(
            dsn, schema_prefix=self.prefix, max_size=4, reconnect_backoff=(0.05,)
        )
        self.mesh_type = Mesh
        self.mesh = self.new_mesh()
        self.query = NodeQuery(partition=PARTITION)
        self.selects = 0

    def _counting(self, read: Any) -> Any:
        async def counting(*args: Any) -> Any:  # bench-only: count the reads
            self.selects += 1
            return await read(*args)

        return counting

    def new_mesh(self) -> Any:
        return self.mesh_type(self.store, record_pending_writes=False, recover_pending_writes=False)

    @property
    def schema(self) -> str:
        return str(self.store.schema_of(PARTITION))

    async def __aenter__(self) -> _Lab:
        await self.store.start()
        # The reads a gap's recovery makes: what changed since the queries' position
        # (``_changes_since``), and the re-select where the store cannot tell (``_reselect_rows``
        # since it is streamed, ``_select_rows`` before, ``_select`` before issue 16), so the
        # bench also measures the old code.
        names = ("_reselect_rows", "_select_rows", "_select")
        counted = [next(n for n in names if hasattr(self.store, n))]
        if hasattr(self.store, "_changes_since"):
            counted.append("_changes_since")
        for name in counted:
            setattr(self.store, name, self._counting(getattr(self.store, name)))
        await self.store.write(MeshNode(path=f"{PARTITION}/seed", node_type="Row", version=1))
        # Rows as the mesh writes them (creator, creation time and request id stamped), or
        # with those columns NULL (``--bare-rows``: the rows of the figures before this option).
        at = datetime.now(UTC) if self.stamped else None
        records = [
            (
                f"{PARTITION}/r{i:06d}",
                "Row",
                json.dumps({"i": i}),
                "bench" if self.stamped else None,
                at,
                1,
                uuid.uuid4().hex if self.stamped else None,
            )
            for i in range(self.rows - 1)
        ]
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.copy_records_to_table(
                "nodes", schema_name=self.schema, records=records, columns=_COLUMNS
            )
        finally:
            await conn.close()
        # Let the load's notifications pass before anyone listens: wait for a marker's.
        marker = f"{PARTITION}/marker{uuid.uuid4().hex[:6]}"
        seen = asyncio.Event()
        evidence = self.store.answers_again.subscribe(
            lambda e: seen.set() if getattr(e, "path", None) == marker else None
        )
        try:
            await self.store.write(MeshNode(path=marker, node_type="Row", version=1))
            async with asyncio.timeout(60):
                await seen.wait()
        finally:
            evidence.dispose()
        self.rows += 1  # the marker
        return self

    async def __aexit__(self, *_: object) -> None:
        _release_all(self.mesh)
        self.mesh.dispose()
        await self.store.close()
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        finally:
            await conn.close()

    async def raw_fetch(self) -> float:
        """The baseline: the same SELECT through a raw asyncpg connection, rows left as Records."""
        conn = await asyncpg.connect(self.dsn)
        try:
            started = time.perf_counter()
            rows = await conn.fetch(
                "SELECT path, node_type, content::text AS content, created_by, created_at,"
                f' version, request_id FROM "{self.schema}".nodes'
                " WHERE ($1 = '' OR path = $1 OR starts_with(path, $1 || '/'))"
                " AND ($2::text IS NULL OR node_type = $2) ORDER BY path",
                "",
                None,
            )
            elapsed = time.perf_counter() - started
        finally:
            await conn.close()
        if len(rows) != self.rows:
            raise AssertionError(f"the raw fetch read {len(rows)} rows, not {self.rows}")
        return elapsed

    async def sql(self, statement: str, *args: object) -> Any:
        conn = await asyncpg.connect(self.dsn)
        try:
            return await conn.fetchval(statement, *args)
        finally:
            await conn.close()


async def _until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():  # noqa: ASYNC110 - observers on another stream, bounded
                await asyncio.sleep(0.005)
    except TimeoutError:
        return False
    return True


async def _observer_main(args: list[str]) -> None:
    """One observer in a process of its own, so nothing else on its loop delays it: ``store``
    subscribes ``store.query`` (the baseline), ``mesh`` subscribes ``mesh.live``, each on its own
    store on the bench's prefix. Prints ``ready`` once its Initial is in; given ``N`` on stdin,
    waits (bounded) until it has seen N of the run's rows, prints its arrivals as JSON, ends."""
    dsn, prefix, tag, mode = args
    arrivals = _Arrivals(tag)
    store = PostgresStore(dsn, schema_prefix=prefix, max_size=2)
    await store.start()
    mesh = Mesh(store, record_pending_writes=False, recover_pending_writes=False)
    try:
        query = NodeQuery(partition=PARTITION)
        source = store.query(query) if mode == "store" else mesh.live(query)
        subscription = source.subscribe(arrivals, arrivals.errors.append)
        if not await _until(lambda: arrivals.initial is not None, 120):
            raise AssertionError(f"no Initial within 120 s ({arrivals.errors})")
        print("ready", flush=True)
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await _until(lambda: len(arrivals.at) >= int(line), 30)
        subscription.dispose()
    finally:
        _release_all(mesh)
        mesh.dispose()
        await store.close()
    errors = [repr(error) for error in arrivals.errors]
    report = {"at": arrivals.at, "sent": arrivals.sent, "frames": arrivals.frames}
    print(json.dumps({**report, "errors": errors}), flush=True)


async def _bench_process(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        _HERE,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def _latency(lab: _Lab, writers: int, seconds: float) -> dict[str, Any]:
    """Delta latency while a writer process commits rows one by one for ``seconds``, seen by two
    observer processes on the same commits: ``mesh.live`` against ``store.query`` (the baseline;
    the targets are ratios to it), each alone on its loop."""
    tag = uuid.uuid4().hex[:6]
    observers = {
        mode: await _bench_process("observer", lab.dsn, lab.prefix, tag, mode)
        for mode in ("store", "mesh")
    }
    try:
        for mode, observer in observers.items():
            assert observer.stdout is not None
            ready = await asyncio.wait_for(observer.stdout.readline(), 120)
            if ready.strip() != b"ready":
                raise AssertionError(f"the {mode} observer did not start: {ready!r}")
        writer = await _bench_process(
            "writer", lab.dsn, lab.schema, str(writers), str(seconds), tag
        )
        out, _ = await asyncio.wait_for(writer.communicate(), seconds + 60)
        ended = time.time()
        written = int(json.loads(out)["written"])
        lab.rows += written
        seen = {}
        for mode, observer in observers.items():
            report, _ = await asyncio.wait_for(observer.communicate(f"{written}\n".encode()), 60)
            seen[mode] = json.loads(report.splitlines()[-1])
    finally:
        for observer in observers.values():
            if observer.returncode is None:
                observer.kill()
                await observer.wait()
    if seen["store"]["errors"] or seen["mesh"]["errors"]:
        raise AssertionError(f"a live query failed: {seen}")

    def latencies(mode: str) -> list[float]:
        return [seen[mode]["at"][path] - sent for path, sent in seen[mode]["sent"].items()]

    def share(count: int) -> float:
        return round(count / written, 4) if written else 1.0

    baseline, side = latencies("store"), latencies("mesh")
    row: dict[str, Any] = {
        "bench": "live_delta_latency",
        "rows": lab.rows,
        "stamped_rows": lab.stamped,
        "writers": writers,
        "written": written,
        "writes_per_s": round(written / seconds),
        "store_p50_ms": _ms(_percentile(baseline, 0.5)),
        "store_p99_ms": _ms(_percentile(baseline, 0.99)),
        "mesh_p50_ms": _ms(_percentile(side, 0.5)),
        "mesh_p99_ms": _ms(_percentile(side, 0.99)),
        "store_delivered": share(len(seen["store"]["at"])),
        "mesh_delivered": share(len(seen["mesh"]["at"])),
        "mesh_delivered_within_1s": share(
            sum(1 for at in seen["mesh"]["at"].values() if at <= ended + 1.0)
        ),
        "store_frames": seen["store"]["frames"],
        "mesh_frames": seen["mesh"]["frames"],
    }
    for q in ("p50", "p99"):
        base = row[f"store_{q}_ms"]
        row[f"{q}_ratio"] = round(row[f"mesh_{q}_ms"] / base, 3) if base else None
        row[f"{q}_target"] = LATENCY_TARGETS[q]
    return row


async def _initials(lab: _Lab, repeat: int) -> dict[str, Any]:
    """The Initial through ``store.query`` and through ``mesh.live`` (a fresh mesh each round),
    against the raw fetch; interleaved, rotating the order each round."""

    async def through_store() -> float:
        started = time.perf_counter()
        frame = await first_value(lab.store.query(lab.query), timeout=120)
        elapsed = time.perf_counter() - started
        assert len(frame.nodes) == lab.rows, len(frame.nodes)
        return elapsed

    async def through_mesh() -> float:
        mesh = lab.new_mesh()
        try:
            started = time.perf_counter()
            frame = await first_value(mesh.live(lab.query), timeout=120)
            elapsed = time.perf_counter() - started
        finally:
            _release_all(mesh)
            mesh.dispose()
        assert len(frame.nodes) == lab.rows, len(frame.nodes)
        return elapsed

    sides: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("raw", lab.raw_fetch),
        ("store", through_store),
        ("mesh", through_mesh),
    ]
    times: dict[str, list[float]] = {name: [] for name, _ in sides}
    gc_seconds: dict[str, list[float]] = {name: [] for name, _ in sides}
    for round_ in range(repeat):
        for name, side in sides[round_ % 3 :] + sides[: round_ % 3]:
            # A released query's task ends on the loop's next turns; until then its snapshot is
            # alive, and the side measured next would walk it in every full GC pass (before
            # this wait, the mesh's rounds after the first ran in a heap of 143k objects, not
            # 43k).
            for _ in range(5):
                await asyncio.sleep(0)
            gc.collect()
            with _GcClock() as clock:
                times[name].append(await side())
            gc_seconds[name].append(clock.seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "bench": "live_initial",
        "rows": lab.rows,
        "stamped_rows": lab.stamped,
        "repeat": repeat,
        "raw_fetch_ms": _ms(medians["raw"]),
        "store_initial_ms": _ms(medians["store"]),
        "mesh_initial_ms": _ms(medians["mesh"]),
        "raw_fetch_gc_ms": _ms(statistics.median(gc_seconds["raw"])),
        "store_initial_gc_ms": _ms(statistics.median(gc_seconds["store"])),
        "mesh_initial_gc_ms": _ms(statistics.median(gc_seconds["mesh"])),
        "store_ratio": round(medians["store"] / medians["raw"], 3),
        "mesh_ratio": round(medians["mesh"] / medians["raw"], 3),
        "mesh_ratio_spread": [
            round(min(m / r for m, r in zip(times["mesh"], times["raw"], strict=True)), 3),
            round(max(m / r for m, r in zip(times["mesh"], times["raw"], strict=True)), 3),
        ],
        "target_ratio": READ_TARGET,
    }


class _GcClock:
    """Seconds spent in the cyclic garbage collector while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> _GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


class _SlowSteps(logging.Handler):
    """Collects asyncio debug mode's "Executing <step> took N seconds" reports."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.steps: list[tuple[float, str]] = []
        self.baseline_steps: list[tuple[float, str]] = []
        self.in_baseline = False
        """Set while the bench's own raw fetch runs: its steps are the baseline's, kept apart."""

    def emit(self, record: logging.LogRecord) -> None:
        match = _SLOW.search(record.getMessage())
        if match:
            into = self.baseline_steps if self.in_baseline else self.steps
            into.append((float(match["seconds"]), match["step"][:300]))


def _moved_from(store: PostgresStore, pid: int | None) -> bool:
    return store.feed_backend_pid not in (None, pid)


def _arrived(path: str, *sides: _Arrivals) -> bool:
    return all(path in side.at for side in sides)


async def _gaps(lab: _Lab, repeat: int) -> dict[str, Any]:
    """A gap on a live query of ``lab.rows`` rows, with ``store.query`` and ``mesh.live`` open:
    the time from the declared gap to each receiving the row missed meanwhile, against the raw
    fetch (interleaved); the reads its recovery took; the worst loop step (asyncio debug mode and
    rxmesh's LoopStallMonitor)."""
    tag = uuid.uuid4().hex[:6]
    raw, live = _Arrivals(tag), _Arrivals(tag)
    declared: list[float] = []
    subscriptions = [
        lab.store.gaps.subscribe(lambda _: declared.append(time.time())),
        lab.store.query(lab.query).subscribe(raw, raw.errors.append),
        lab.mesh.live(lab.query).subscribe(live, live.errors.append),
    ]
    loop = asyncio.get_running_loop()
    slow = _SlowSteps()
    asyncio_log = logging.getLogger("asyncio")
    monitor = LoopStallMonitor(tick=0.005, late_threshold=STALL_LIMIT_SECONDS)
    recoveries: dict[str, list[float]] = {"store": [], "mesh": []}
    fetches: list[float] = []
    # The same, in the rounds run in asyncio's debug mode (which slows Python code far more
    # than the driver's C: reported, not used for the ratio).
    debug_recoveries: dict[str, list[float]] = {"store": [], "mesh": []}
    debug_fetches: list[float] = []
    selects: list[int] = []
    baseline_windows: list[tuple[float, float]] = []  # on the monitor's clock

    async def baseline_fetch() -> None:
        """The raw fetch, its own loop steps and stalls set apart from the live queries'."""
        slow.in_baseline = True
        started = monitor.clock()
        try:
            (debug_fetches if loop.get_debug() else fetches).append(await lab.raw_fetch())
            await asyncio.sleep(0.05)  # a stall ending just after the fetch is the fetch's
        finally:
            baseline_windows.append((started, monitor.clock()))
            slow.in_baseline = False
    try:
        if not await _until(lambda: raw.initial is not None and live.initial is not None, 120):
            raise AssertionError(f"no Initial within 120 s ({raw.errors or live.errors})")
        await asyncio.sleep(0.2)  # let the Initials' own work settle before measuring
        asyncio_log.addHandler(slow)
        loop.slow_callback_duration = STALL_LIMIT_SECONDS
        monitor.start(loop)
        # ``repeat`` rounds timed with the loop as it runs in production, then ``repeat`` in
        # debug mode, whose reports of every step over 20 ms are the slow steps below.
        for round_ in range(2 * repeat):
            debug = round_ >= repeat
            loop.set_debug(debug)
            if round_ % 2 == 0:
                await baseline_fetch()
            pid = lab.store.feed_backend_pid
            before, selected = len(declared), lab.selects
            await lab.sql("SELECT pg_terminate_backend($1)", pid)
            if not await _until(functools.partial(_moved_from, lab.store, pid), 30):
                raise AssertionError("the listener was not lost")
            missed = f"{PARTITION}/{tag}gap{round_}"
            await lab.sql(
                f'INSERT INTO "{lab.schema}".nodes (path, node_type, version) VALUES ($1, $2, 1)',
                missed,
                "Row",
            )
            lab.rows += 1
            got = await _until(functools.partial(_arrived, missed, raw, live), 60)
            if not got or len(declared) <= before:
                raise AssertionError(f"gap {round_}: the missed row did not arrive")
            into = debug_recoveries if debug else recoveries
            into["store"].append(raw.at[missed] - declared[before])
            into["mesh"].append(live.at[missed] - declared[before])
            selects.append(lab.selects - selected)
            if round_ % 2 == 1:
                await baseline_fetch()
    finally:
        monitor.stop()
        loop.set_debug(False)
        asyncio_log.removeHandler(slow)
        for subscription in subscriptions:
            subscription.dispose()
    if raw.errors or live.errors:
        raise AssertionError(f"a live query failed: {raw.errors or live.errors}")
    fetch = statistics.median(fetches)
    worst_step = max(slow.steps, default=(0.0, ""))
    rxmesh_steps = [step for step in slow.steps if "rxmesh" in step[1]]
    worst_rxmesh = max(rxmesh_steps, default=(0.0, ""))
    stats = monitor.statistics()

    def in_baseline(stall: Any) -> bool:
        return any(start <= stall.ended_at <= end for start, end in baseline_windows)

    stalls = [stall for stall in monitor.stalls() if not in_baseline(stall)]
    baseline_stalls = [stall for stall in monitor.stalls() if in_baseline(stall)]
    worst_stall = max(stalls, key=lambda stall: stall.duration, default=None)
    return {
        "bench": "live_gap",
        "rows": lab.rows,
        "stamped_rows": lab.stamped,
        "repeat": repeat,
        "raw_fetch_ms": _ms(fetch),
        "store_recovery_ms": _ms(statistics.median(recoveries["store"])),
        "mesh_recovery_ms": _ms(statistics.median(recoveries["mesh"])),
        "mesh_ratio": round(statistics.median(recoveries["mesh"]) / fetch, 3),
        "mesh_ratio_spread": [
            round(min(recoveries["mesh"]) / fetch, 3),
            round(max(recoveries["mesh"]) / fetch, 3),
        ],
        "target_ratio": READ_TARGET,
        "mesh_ratio_in_debug_mode": round(
            statistics.median(debug_recoveries["mesh"]) / statistics.median(debug_fetches), 3
        ),
        "recovery_reads_per_gap": selects,
        "subscriptions_per_gap": 2,
        # Steps and stalls outside the bench's own raw fetches (the live queries' gap, their
        # re-select, the feed's reconnect); the baseline's are counted apart below.
        "slow_steps_over_20ms": len(slow.steps),
        "worst_step_ms": _ms(worst_step[0]),
        "worst_step": worst_step[1],
        "worst_rxmesh_step_ms": _ms(worst_rxmesh[0]),
        "worst_rxmesh_step": worst_rxmesh[1],
        "longest_loop_stall_gc_ms": _ms(worst_stall.gc_seconds) if worst_stall else 0.0,
        "loop_stalls_over_20ms_without_gc": sum(
            1 for stall in stalls if stall.duration - stall.gc_seconds > 0.02
        ),
        "loop_stalls_over_20ms": len(stalls),
        "longest_loop_stall_ms": _ms(worst_stall.duration) if worst_stall else 0.0,
        "baseline_slow_steps_over_20ms": len(slow.baseline_steps),
        "baseline_loop_stalls_over_20ms": len(baseline_stalls),
        "baseline_longest_loop_stall_ms": _ms(
            max((stall.duration for stall in baseline_stalls), default=0.0)
        ),
        "all_loop_stalls_over_20ms": stats.stalls,
        "stall_limit_ms": _ms(STALL_LIMIT_SECONDS),
    }


async def measure_live(
    dsn: str = DEFAULT_DSN,
    rows: tuple[int, ...] = (10_000, 50_000),
    writers: tuple[int, ...] = (1, 8),
    seconds: float = 3.0,
    repeat: int = 3,
    stamped: bool = True,
) -> list[dict[str, Any]]:
    """Every live-query figure, one dict (one JSON line) each: per size, the Initial against the
    raw fetch, the delta latency per writer count, and the gap's recovery and worst loop step."""
    lines: list[dict[str, Any]] = []
    for size in rows:
        async with _Lab(dsn, size, stamped=stamped) as lab:
            lines.append(await _initials(lab, repeat))
            for count in writers:
                lines.append(await _latency(lab, count, seconds))
            lines.append(await _gaps(lab, repeat))
    return lines


async def live_main(argv: list[str]) -> None:
    """``python bench/cache.py live [--dsn] [--rows] [--writers] [--seconds] [--repeat]``."""
    parser = argparse.ArgumentParser(prog="bench/cache.py live")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", default="10000,50000")
    parser.add_argument("--writers", default="1,8")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--bare-rows",
        action="store_true",
        help="rows with created_by, created_at and request_id NULL (no mesh writes such rows)",
    )
    args = parser.parse_args(argv)
    sizes = tuple(int(n) for n in args.rows.split(","))
    counts = tuple(int(n) for n in args.writers.split(","))
    for line in await measure_live(
        args.dsn, sizes, counts, args.seconds, args.repeat, stamped=not args.bare_rows
    ):
        print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    """``python bench/cache.py [SUBSCRIBERS] [REPEATS]``: print one JSON line;
    ``python bench/cache.py live ...``: the live-query lines (see :func:`measure_live`)."""
    args = sys.argv if argv is None else argv
    if len(args) > 1 and args[1] == "live":
        asyncio.run(live_main(args[2:]))
        return
    if len(args) > 1 and args[1] == "writer":
        asyncio.run(_writer_main(args[2:]))
        return
    if len(args) > 1 and args[1] == "observer":
        asyncio.run(_observer_main(args[2:]))
        return
    subscribers = int(args[1]) if len(args) > 1 else 10_000
    repeats = int(args[2]) if len(args) > 2 else 15
    print(json.dumps(measure(subscribers, repeats)))


if __name__ == "__main__":
    main()
