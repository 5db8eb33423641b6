"""What the pending-write ledger costs: durable records per second, and time to settle a backlog.

Prints JSON lines:

- ``record``: durable intents recorded per second by ``PendingWriteLedger.record`` against a raw
  loop doing only the file-system work (write a temp file, fsync, ``os.replace``, fsync the
  directory) with the same payload bytes, in the same run and directory. Target ratio >= 0.8.
  Rounds alternate and the median is taken.
- ``group_commit``: journaled records per second, A/B in one process, rounds interleaved: A is
  today's synchronous ``record`` (one file per intent, two fsyncs, on the caller's thread), B is
  ``await record_durably`` with ``--in-flight`` records (default 500) in flight, committed by the
  writer thread in groups. Targets: B >= 5,000/s and B >= 5x A.
- ``loop_steps``: the longest step of the event loop while the ledger works, for 500 concurrent
  ``record_durably`` and for one 10,000-intent ``record_many_durably``; and, as the negative
  control, for the synchronous ``record`` of 1,000 intents in one step (what the mesh's bulk arm
  did). Measured with asyncio's debug mode (``slow_callback_duration = 0.02``: every longer step is
  counted) and rxmesh's ``LoopStallMonitor`` (ticking every 2 ms: its longest late tick is the
  worst step, a lower bound). Target: no step over 20 ms.
- ``recovery``: time from one piece of evidence to every verdict for N pending intents (default
  10,000), against creating the same nodes directly through the same mesh interface with the same
  concurrency. Uses ``Mesh(InMemoryStore())`` when both import; otherwise the line says why not.
- ``recovery_<verb>`` for update, delete and move (issue 18): the same for N (``--verb-pending``,
  default 5,000) update, delete or move intents, each based on version 1 (a compare-and-set),
  against applying the same verb to the same number of nodes directly, same mesh interface and
  concurrency, in the same run. Target ratio <= 2.

    python bench/ledger.py [--records N] [--pending N] [--repeats R] [--in-flight N]
                           [--bulk N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import reactivex
from reactivex import operators as ops
from reactivex.subject import Subject

from rxmesh.diagnosis import LoopStallMonitor
from rxmesh.ledger import (
    DEFAULT_MAX_CONCURRENT_REISSUES,
    PendingWrite,
    PendingWriteLedger,
    PendingWriteOutcome,
    PendingWriteRecovery,
)
from rxmesh.ledger._journal import encode_journal_file, journal_file_name
from rxmesh.model import AccessContext, ChangeFeedGap, MeshNode, StoreEvidence
from rxmesh.operations import (
    CreateNodeRequest,
    CreateNodeResponse,
    CreateNodesRequest,
    DeleteNodeRequest,
    MoveNodeRequest,
    NodeOperationResponse,
    UpdateNodeRequest,
)

TARGET_RECORD_RATIO = 0.8
TARGET_GROUP_PER_S = 5_000
TARGET_GROUP_RATIO = 5.0
TARGET_STEP_S = 0.020
ACCESS = AccessContext(user="bench")


def _intents(n: int, prefix: str = "bench/docs/d") -> list[PendingWrite]:
    return [
        PendingWrite(
            node=MeshNode(path=f"{prefix}{i}", node_type="Doc", content={"title": f"doc {i}"}),
            requester=ACCESS.user,
            access=ACCESS,
            request_id=f"bench-{i:08d}",
        )
        for i in range(n)
    ]


def _raw_record(directory: Path, name: str, data: bytes, index: int) -> None:
    """The file-system work alone: temp, write, fsync, replace, fsync the directory."""
    temp = directory / f".{name}.{index}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, directory / name)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _one_round(root: Path, intents: list[PendingWrite]) -> tuple[float, float]:
    """Raw and ledger records interleaved one by one (alternating which goes first), so both
    meet the same disk: a shared disk's latency drifts by 2x within seconds."""
    raw_dir = root / "raw"
    raw_dir.mkdir(mode=0o700)
    ledger = PendingWriteLedger(root / "ledger")
    payloads = [(journal_file_name(i.path), encode_journal_file(i)) for i in intents]
    raw_s = ledger_s = 0.0
    clock = time.perf_counter
    for index, (intent, (name, data)) in enumerate(zip(intents, payloads, strict=True)):
        if index % 2:
            started = clock()
            _raw_record(raw_dir, name, data, index)
            middle = clock()
            ledger.record(intent)
            ended = clock()
            raw_s += middle - started
            ledger_s += ended - middle
        else:
            started = clock()
            ledger.record(intent)
            middle = clock()
            _raw_record(raw_dir, name, data, index)
            ended = clock()
            ledger_s += middle - started
            raw_s += ended - middle
    if ledger.statistics().pending != len(intents):
        raise RuntimeError("the ledger did not record every intent")
    return raw_s, ledger_s


def measure_records(n: int, repeats: int, base_dir: str | None) -> dict[str, Any]:
    """Durable records per second: the ledger against the raw file-system loop."""
    intents = _intents(n)
    mean_bytes = sum(len(encode_journal_file(i)) for i in intents) / n
    rounds: list[tuple[float, float]] = []
    for _ in range(repeats):
        root = Path(tempfile.mkdtemp(prefix="rxmesh-bench-ledger-", dir=base_dir))
        try:
            rounds.append(_one_round(root, intents))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    raw_rate = n / statistics.median(r for r, _ in rounds)
    ledger_rate = n / statistics.median(s for _, s in rounds)
    ratio = statistics.median(r / s for r, s in rounds)
    return {
        "bench": "ledger",
        "measure": "record",
        "intents": n,
        "repeats": repeats,
        "payload_bytes_mean": round(mean_bytes),
        "raw_per_s": round(raw_rate),
        "ledger_per_s": round(ledger_rate),
        "ratio": round(ratio, 3),
        "target_ratio": TARGET_RECORD_RATIO,
        "meets_target": ratio >= TARGET_RECORD_RATIO,
        "filesystem_dir": str(Path(base_dir or tempfile.gettempdir()).resolve()),
    }


def _sync_round(root: Path, intents: list[PendingWrite]) -> float:
    ledger = PendingWriteLedger(root / "sync")
    try:
        started = time.perf_counter()
        for intent in intents:
            ledger.record(intent)
        return time.perf_counter() - started
    finally:
        ledger.close()


async def _grouped(ledger: PendingWriteLedger, intents: list[PendingWrite], in_flight: int) -> None:
    """``record_durably`` for every intent, ``in_flight`` at a time (a new one as one returns)."""
    feed = iter(intents)

    async def lane() -> None:
        for intent in feed:
            if not await ledger.record_durably(intent):
                raise RuntimeError(f"{intent.path} was not recorded")

    async with asyncio.timeout(600):
        await asyncio.gather(*(lane() for _ in range(in_flight)))


def _group_round(root: Path, intents: list[PendingWrite], in_flight: int) -> tuple[float, int]:
    ledger = PendingWriteLedger(root / "grouped")
    try:
        started = time.perf_counter()
        asyncio.run(_grouped(ledger, intents, in_flight))
        elapsed = time.perf_counter() - started
        if ledger.statistics().pending != len(intents):
            raise RuntimeError("the ledger did not record every intent")
        return elapsed, ledger.statistics().group_commits
    finally:
        ledger.close()


def measure_group_commit(
    n: int, in_flight: int, repeats: int, base_dir: str | None
) -> dict[str, Any]:
    """Synchronous one-file records (A) against awaited group-committed records (B)."""
    rounds: list[tuple[float, float, int]] = []
    for index in range(repeats):
        root = Path(tempfile.mkdtemp(prefix="rxmesh-bench-ledger-", dir=base_dir))
        try:
            a_intents, b_intents = _intents(n, "bench/a/d"), _intents(n, "bench/b/d")
            if index % 2:  # alternate which goes first: a shared disk drifts within seconds
                b, groups = _group_round(root, b_intents, in_flight)
                a = _sync_round(root, a_intents)
            else:
                a = _sync_round(root, a_intents)
                b, groups = _group_round(root, b_intents, in_flight)
            rounds.append((a, b, groups))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    a_rate = n / statistics.median(a for a, _, _ in rounds)
    b_rate = n / statistics.median(b for _, b, _ in rounds)
    ratio = statistics.median(a / b for a, b, _ in rounds)
    return {
        "bench": "ledger",
        "measure": "group_commit",
        "intents": n,
        "in_flight": in_flight,
        "repeats": repeats,
        "sync_record_per_s": round(a_rate),
        "record_durably_per_s": round(b_rate),
        "ratio": round(ratio, 2),
        "fsync_groups_median": statistics.median(g for _, _, g in rounds),
        "target_per_s": TARGET_GROUP_PER_S,
        "target_ratio": TARGET_GROUP_RATIO,
        "meets_target": b_rate >= TARGET_GROUP_PER_S and ratio >= TARGET_GROUP_RATIO,
        "filesystem_dir": str(Path(base_dir or tempfile.gettempdir()).resolve()),
    }


class _SlowSteps(logging.Handler):
    """Collects asyncio debug mode's "Executing <step> took N seconds" reports."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.durations: list[float] = []
        self.worst = ""

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Executing %s took %.3f seconds" and len(record.args or ()) == 2:
            assert isinstance(record.args, tuple)
            seconds = float(record.args[1])
            if not self.durations or seconds > max(self.durations):
                self.worst = str(record.args[0])[:160]
            self.durations.append(seconds)


async def _watched(work: Any, *, debug: bool) -> dict[str, Any]:
    """Run ``work()``: in debug mode, count the steps over 20 ms; else, the monitor's worst."""
    loop = asyncio.get_running_loop()
    handler = _SlowSteps()
    asyncio_logger = logging.getLogger("asyncio")
    monitor = LoopStallMonitor(tick=0.002, late_threshold=0.002)
    if debug:
        loop.set_debug(True)
        loop.slow_callback_duration = TARGET_STEP_S
        asyncio_logger.addHandler(handler)
    else:
        monitor.start()
    try:
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await work()
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.01)
    finally:
        monitor.stop()
        asyncio_logger.removeHandler(handler)
        loop.set_debug(False)
    if debug:
        return {
            "elapsed_s": round(elapsed, 4),
            "steps_over_20ms": len(handler.durations),
            "worst_slow_step_ms": round(max(handler.durations, default=0.0) * 1000, 1),
            "worst_slow_step": handler.worst or None,
        }
    stats = monitor.statistics()
    worst = max(monitor.stalls(), key=lambda stall: stall.duration, default=None)
    return {
        "elapsed_s": round(elapsed, 4),
        "worst_step_ms": round(stats.longest_stall_seconds * 1000, 1),
        "gc_in_worst_ms": None if worst is None else round(worst.gc_seconds * 1000, 1),
    }


def _scenario(make: Any, *, label: str) -> dict[str, Any]:
    """``make(debug)`` returns a fresh ``(work, cleanup)``; run it twice (debug, then monitor),
    each after a full collection of the garbage its setup made."""
    passes: dict[str, Any] = {}
    for debug in (True, False):
        work, cleanup = make(debug)
        try:
            gc.collect()
            passes["debug" if debug else "monitor"] = asyncio.run(_watched(work, debug=debug))
        finally:
            cleanup()
    steps = passes["debug"]["steps_over_20ms"]
    worst = passes["monitor"]["worst_step_ms"]
    return {
        "scenario": label,
        **passes,
        "meets_target": steps == 0 and worst <= TARGET_STEP_S * 1000,
    }


def measure_loop_steps(
    concurrent: int, bulk: int, control: int, base_dir: str | None
) -> dict[str, Any]:
    """The longest loop step while the ledger records (see the module text)."""
    root = Path(tempfile.mkdtemp(prefix="rxmesh-bench-ledger-", dir=base_dir))
    serial = iter(range(1_000_000))

    def concurrently(debug: bool) -> tuple[Any, Any]:
        ledger = PendingWriteLedger(root / f"c{next(serial)}")
        many = _intents(concurrent, "bench/c/d")

        async def work() -> None:
            tasks: list[asyncio.Task[bool]] = []
            for start in range(0, len(many), 10):  # the callers arrive, 10 per step
                chunk = many[start : start + 10]
                tasks.extend(asyncio.create_task(ledger.record_durably(i)) for i in chunk)
                await asyncio.sleep(0)
            async with asyncio.timeout(600):
                if not all(await asyncio.gather(*tasks)):
                    raise RuntimeError("not every intent was recorded")

        return work, ledger.close

    def one_bulk(debug: bool) -> tuple[Any, Any]:
        ledger = PendingWriteLedger(root / f"b{next(serial)}")
        nodes = _intents(bulk, "bench/bulk/n")

        async def work() -> None:
            async with asyncio.timeout(600):
                results = await ledger.record_many_durably(nodes)
            if not all(result is True for result in results):
                raise RuntimeError("the bulk was not recorded")

        return work, ledger.close

    def sync_in_one_step(debug: bool) -> tuple[Any, Any]:
        ledger = PendingWriteLedger(root / f"s{next(serial)}")
        blocking = _intents(control, "bench/sync/n")

        async def work() -> None:
            for intent in blocking:  # one step, as the mesh's bulk arm called record()
                ledger.record(intent)

        return work, ledger.close

    try:
        rows = [
            _scenario(concurrently, label=f"{concurrent} concurrent record_durably"),
            _scenario(one_bulk, label=f"one record_many_durably of {bulk}"),
            _scenario(sync_in_one_step, label=f"CONTROL: {control} sync record() in one step"),
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "bench": "ledger",
        "measure": "loop_steps",
        "target_ms": TARGET_STEP_S * 1000,
        "scenarios": rows,
        "meets_target": rows[0]["meets_target"] and rows[1]["meets_target"],
        "control_caught": not rows[2]["meets_target"],
    }


def _real_mesh() -> tuple[Any, str | None]:
    try:
        from rxmesh.mesh import Mesh
        from rxmesh.providers.memory import InMemoryStore
    except ImportError as exc:
        return None, f"rxmesh.mesh.Mesh / InMemoryStore not importable: {exc}"
    return (lambda: Mesh(InMemoryStore())), None


async def _time_direct(mesh: Any, nodes: list[MeshNode], concurrency: int) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    answers: list[CreateNodeResponse] = []

    def on_next(response: CreateNodeResponse) -> None:
        answers.append(response)

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_exception(error)

    def on_completed() -> None:
        if not done.done():
            done.set_result(None)

    started = time.perf_counter()
    reactivex.from_iterable(nodes).pipe(
        ops.map(
            lambda node: mesh.create_node(
                CreateNodeRequest(node=node, access=ACCESS, request_id=f"direct-{node.path}")
            )
        ),
        ops.merge(max_concurrent=concurrency),
    ).subscribe(on_next, on_error, on_completed)
    await asyncio.wait_for(done, timeout=600)
    elapsed = time.perf_counter() - started
    return elapsed, sum(1 for a in answers if a.success)


async def _time_recovery(mesh: Any, intents: list[PendingWrite]) -> tuple[float, int]:
    ledger = PendingWriteLedger()
    for intent in intents:
        ledger.record(intent)
    evidence: Subject[StoreEvidence] = Subject()
    facade = SimpleNamespace(
        store=SimpleNamespace(answers_again=evidence), create_node=mesh.create_node
    )
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    outcomes: list[PendingWriteOutcome] = []

    def on_outcome(outcome: PendingWriteOutcome) -> None:
        outcomes.append(outcome)
        if len(outcomes) == len(intents) and not done.done():
            done.set_result(None)

    ledger.outcomes.subscribe(on_outcome)
    with PendingWriteRecovery(facade, ledger):
        now = datetime.now(UTC)
        started = time.perf_counter()
        evidence.on_next(ChangeFeedGap(source="bench", lost_at=now, resumed_at=now, reason="bench"))
        await asyncio.wait_for(done, timeout=600)
        elapsed = time.perf_counter() - started
    return elapsed, ledger.statistics().landed


def measure_recovery(n: int) -> dict[str, Any]:
    """Evidence to every verdict for ``n`` intents, against creating them directly."""
    row: dict[str, Any] = {"bench": "ledger", "measure": "recovery", "intents": n}
    factory, missing = _real_mesh()
    if factory is None:
        return {**row, "skipped": True, "note": missing}
    intents = _intents(n)
    concurrency = DEFAULT_MAX_CONCURRENT_REISSUES

    async def run() -> dict[str, Any]:
        direct, direct_ok = await _time_direct(factory(), [i.node for i in intents], concurrency)
        recovery, landed = await _time_recovery(factory(), intents)
        return {
            **row,
            "concurrency": concurrency,
            "direct_s": round(direct, 4),
            "direct_created": direct_ok,
            "recovery_s": round(recovery, 4),
            "recovery_landed": landed,
            "ratio": round(recovery / direct, 3),
            "direct_per_s": round(n / direct),
            "recovery_per_s": round(n / recovery),
        }

    return asyncio.run(run())


def _verb_request(verb: str, path: str, request_id: str) -> Any:
    if verb == "update":
        node = MeshNode(path=path, node_type="Doc", content={"title": "updated"})
        return UpdateNodeRequest(
            node=node, access=ACCESS, request_id=request_id, expected_version=1
        )
    if verb == "delete":
        return DeleteNodeRequest(
            path=path, access=ACCESS, request_id=request_id, expected_version=1
        )
    return MoveNodeRequest(
        source=path, target=f"{path}m", access=ACCESS, request_id=request_id, expected_version=1
    )


def _seed_id(index: int) -> str:
    """The request id of the bulk that seeded the ``index``-th path: the basis names it."""
    return f"seed-{index // 1000}"


def _verb_intent(verb: str, path: str, request_id: str, basis_id: str) -> PendingWrite:
    content: Any = {"title": "updated"} if verb == "update" else None
    return PendingWrite(
        node=MeshNode(path=path, node_type="Doc", content=content),
        requester=ACCESS.user,
        access=ACCESS,
        request_id=request_id,
        origin=verb,  # type: ignore[arg-type]
        expected_version=1,
        expected_request_id=basis_id,
        target=f"{path}m" if verb == "move" else None,
    )


async def _seeded(factory: Any, paths: list[str]) -> Any:
    mesh = factory()
    for start in range(0, len(paths), 1000):
        nodes = tuple(
            MeshNode(path=p, node_type="Doc", content={"title": p})
            for p in paths[start : start + 1000]
        )
        seed = CreateNodesRequest(nodes=nodes, access=ACCESS, request_id=_seed_id(start))
        done = await _first(mesh.create_nodes(seed))
        assert done.success, done
    return mesh


async def _first(source: Any) -> Any:
    from rxmesh.aio import first_value

    return await first_value(source, timeout=600)


async def _time_verb_direct(
    mesh: Any, verb: str, paths: list[str], concurrency: int
) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    answers: list[NodeOperationResponse] = []
    send = {"update": mesh.update_node, "delete": mesh.delete_node, "move": mesh.move_node}[verb]

    def on_error(error: Exception) -> None:
        if not done.done():
            done.set_exception(error)

    def on_completed() -> None:
        if not done.done():
            done.set_result(None)

    def one(path: str) -> Any:
        return send(_verb_request(verb, path, f"direct-{path}"))

    started = time.perf_counter()
    reactivex.from_iterable(paths).pipe(
        ops.map(one),
        ops.merge(max_concurrent=concurrency),
    ).subscribe(answers.append, on_error, on_completed)
    await asyncio.wait_for(done, timeout=600)
    return time.perf_counter() - started, sum(1 for a in answers if a.success)


async def _time_verb_recovery(mesh: Any, verb: str, paths: list[str]) -> tuple[float, int]:
    ledger = PendingWriteLedger()
    for index, path in enumerate(paths):
        ledger.record(_verb_intent(verb, path, f"intent-{path}", _seed_id(index)))
    evidence: Subject[StoreEvidence] = Subject()
    facade = SimpleNamespace(
        store=SimpleNamespace(answers_again=evidence),
        create_node=mesh.create_node,
        update_node=mesh.update_node,
        delete_node=mesh.delete_node,
        move_node=mesh.move_node,
    )
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    outcomes: list[PendingWriteOutcome] = []

    def on_outcome(outcome: PendingWriteOutcome) -> None:
        outcomes.append(outcome)
        if len(outcomes) == len(paths) and not done.done():
            done.set_result(None)

    ledger.outcomes.subscribe(on_outcome)
    with PendingWriteRecovery(facade, ledger):
        now = datetime.now(UTC)
        started = time.perf_counter()
        evidence.on_next(ChangeFeedGap(source="bench", lost_at=now, resumed_at=now, reason="bench"))
        await asyncio.wait_for(done, timeout=600)
        elapsed = time.perf_counter() - started
    return elapsed, ledger.statistics().landed


def measure_verb_recovery(verb: str, n: int) -> dict[str, Any]:
    """Evidence to every verdict for ``n`` ``verb`` intents, against applying them directly."""
    row: dict[str, Any] = {"bench": "ledger", "measure": f"recovery_{verb}", "intents": n}
    factory, missing = _real_mesh()
    if factory is None:
        return {**row, "skipped": True, "note": missing}
    paths = [f"bench/{verb}/d{i}" for i in range(n)]
    concurrency = DEFAULT_MAX_CONCURRENT_REISSUES

    async def run() -> dict[str, Any]:
        direct_mesh = await _seeded(factory, paths)
        direct, direct_ok = await _time_verb_direct(direct_mesh, verb, paths, concurrency)
        recovery_mesh = await _seeded(factory, paths)
        recovery, landed = await _time_verb_recovery(recovery_mesh, verb, paths)
        ratio = recovery / direct
        return {
            **row,
            "concurrency": concurrency,
            "direct_s": round(direct, 4),
            "direct_applied": direct_ok,
            "recovery_s": round(recovery, 4),
            "recovery_landed": landed,
            "ratio": round(ratio, 3),
            "target_ratio_at_most": 2.0,
            "meets_target": ratio <= 2.0 and landed == n == direct_ok,
        }

    return asyncio.run(run())


def main(argv: list[str]) -> None:
    """Print one JSON line per measure."""
    parser = argparse.ArgumentParser(prog=argv[0] if argv else "ledger.py")
    parser.add_argument("--records", type=int, default=2_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--in-flight", type=int, default=500)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument("--control", type=int, default=1_000)
    parser.add_argument("--dir", default=None, help="where the journals are written")
    parser.add_argument("--verb-pending", type=int, default=5_000)
    parser.add_argument("--only-verbs", action="store_true", help="only the recovery_<verb> rows")
    args = parser.parse_args(argv[1:])
    if args.only_verbs:
        for verb in ("update", "delete", "move"):
            print(json.dumps(measure_verb_recovery(verb, args.verb_pending)), flush=True)
        return
    print(json.dumps(measure_records(args.records, args.repeats, args.dir)), flush=True)
    group = measure_group_commit(args.records, args.in_flight, args.repeats, args.dir)
    print(json.dumps(group), flush=True)
    steps = measure_loop_steps(args.in_flight, args.bulk, args.control, args.dir)
    print(json.dumps(steps), flush=True)
    print(json.dumps(measure_recovery(args.pending)), flush=True)
    for verb in ("update", "delete", "move"):
        print(json.dumps(measure_verb_recovery(verb, args.verb_pending)), flush=True)


if __name__ == "__main__":
    main(sys.argv)
