"""What the pending-write ledger costs: durable records per second, and time to settle a backlog.

Prints JSON lines:

- ``record``: durable intents recorded per second by ``PendingWriteLedger.record`` against a raw
  loop doing only the file-system work (write a temp file, fsync, ``os.replace``, fsync the
  directory) with the same payload bytes, in the same run and directory. Target ratio >= 0.8.
  Rounds alternate and the median is taken.
- ``recovery``: time from one piece of evidence to every verdict for N pending intents (default
  10,000), against creating the same nodes directly through the same mesh interface with the same
  concurrency. Uses ``Mesh(InMemoryStore())`` when both import; otherwise the line says why not.

    python bench/ledger.py [--records N] [--pending N] [--repeats R] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from rxmesh.ledger import (
    DEFAULT_MAX_CONCURRENT_REISSUES,
    PendingWrite,
    PendingWriteLedger,
    PendingWriteOutcome,
    PendingWriteRecovery,
)
from rxmesh.ledger._journal import encode_journal_file, journal_file_name
from rxmesh.model import AccessContext, ChangeFeedGap, MeshNode, StoreEvidence
from rxmesh.operations import CreateNodeRequest, CreateNodeResponse

TARGET_RECORD_RATIO = 0.8
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


def main(argv: list[str]) -> None:
    """Print one JSON line per measure."""
    parser = argparse.ArgumentParser(prog=argv[0] if argv else "ledger.py")
    parser.add_argument("--records", type=int, default=2_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the journals are written")
    args = parser.parse_args(argv[1:])
    print(json.dumps(measure_records(args.records, args.repeats, args.dir)), flush=True)
    print(json.dumps(measure_recovery(args.pending)), flush=True)


if __name__ == "__main__":
    main(sys.argv)
