"""Crash safety: a writer killed with SIGKILL during an outage loses no journaled intent.

A writer process creates nodes through a Mesh (journal directory set) while the store refuses
connections (a FaultProxy that stopped listening), so every create is answered UNAVAILABLE and
journaled before it is answered. The process is killed with SIGKILL at a seeded random point
(after k answers, plus a random few milliseconds: sometimes between two answers, sometimes in the
middle of a journal write). Then a new PendingWriteLedger on the same directory, in a Mesh over
the restored store, re-issues every journaled intent on the first evidence: each lands exactly
once, with its original request id, and the journal ends empty.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import pytest

from rxmesh import AccessContext, Mesh, MeshNode
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.operations import Verdict
from rxmesh.providers.postgres import PostgresStore, quote_identifier
from rxmesh.testing import FaultProxy
from tests.conftest import session_prefix

pytestmark = pytest.mark.postgres

WRITER = Path(__file__).with_name("_crash_writer.py")
WAIT = 20.0
COUNT = 40


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    async with asyncio.timeout(WAIT):
        raw = await process.stdout.readline()
    if not raw:
        raise AssertionError("the writer exited early")
    return raw.decode().strip()


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:]


async def _crash_once(
    private_db: str, journal: Path, prefix: str, seed: int, stderr: Path
) -> list[dict[str, object]]:
    """Run the writer through the outage and SIGKILL it; return the answers it printed."""
    rng = random.Random(seed)
    target = urlparse(private_db)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        errors = stderr.open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(WRITER), proxy.dsn(private_db), prefix, str(journal), "p",
            str(COUNT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
        try:
            assert await _line(process) == "ready"
            proxy.refuse()  # the outage: nothing listens any more
            proxy.reset()
            assert process.stdin is not None
            process.stdin.write(b"go\n")
            await process.stdin.drain()
            answers = [json.loads(await _line(process)) for _ in range(rng.randint(1, COUNT - 5))]
            await asyncio.sleep(rng.uniform(0.0, 0.05))  # between answers or mid-journal-write
            process.send_signal(signal.SIGKILL)
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            errors.close()
    assert process.returncode == -signal.SIGKILL, _tail(stderr)
    return answers


async def _rows(dsn: str, prefix: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=5.0)
    try:
        return await conn.fetch(
            f"SELECT path, request_id FROM {quote_identifier(prefix + 'p')}.nodes"
            " WHERE path LIKE 'p/n%'"
        )
    finally:
        await conn.close()


@pytest.mark.parametrize("seed", [11, 22, 33])
async def test_a_writer_killed_during_an_outage_loses_no_journaled_intent(
    seed: int, private_db: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    prefix = session_prefix("c")
    answers = await _crash_once(private_db, journal, prefix, seed, tmp_path / "writer.err")

    # Every answer was UNAVAILABLE, and each was journaled BEFORE it was answered.
    assert answers
    assert all(a["reason"] == "UNAVAILABLE" and not a["success"] for a in answers), answers
    ledger = PendingWriteLedger(journal)
    loaded = {intent.path: intent for intent in ledger.pending()}
    assert ledger.statistics().quarantined == 0
    for answer in answers:
        assert loaded[answer["path"]].request_id == answer["request_id"]

    # A new process (here: a new ledger and mesh) over the restored store re-issues them all.
    store = PostgresStore(private_db, schema_prefix=prefix, max_size=4)
    await store.start()
    outcomes: list[PendingWriteOutcome] = []
    settled = asyncio.Event()

    def on_outcome(outcome: PendingWriteOutcome) -> None:
        outcomes.append(outcome)
        if len(outcomes) >= len(loaded):
            settled.set()

    mesh = Mesh(store, ledger=ledger, retry_delays=(0.01, 0.01, 0.01))
    subscription = ledger.outcomes.subscribe(on_outcome)
    try:
        # The evidence: any commit the store announces (recovery never polls).
        evidence = MeshNode(path="ev/after-crash", content={})
        await mesh.create(evidence, access=AccessContext(user="ops"))
        async with asyncio.timeout(WAIT):
            await settled.wait()
        rows = await _rows(private_db, prefix)
    finally:
        subscription.dispose()
        mesh.dispose()
        await store.close()

    assert sorted(o.intent.path for o in outcomes) == sorted(loaded)
    assert {o.verdict for o in outcomes} == {Verdict.LANDED}, [
        (o.intent.path, o.verdict, o.reason, o.detail)
        for o in outcomes
        if o.verdict is not Verdict.LANDED
    ]
    by_path: dict[str, list[str]] = {}
    for row in rows:
        by_path.setdefault(row["path"], []).append(row["request_id"])
    assert by_path == {path: [intent.request_id] for path, intent in loaded.items()}
    assert not ledger.pending()
    assert not ledger.in_flight()
    ledger.close()  # the caller's ledger: closing commits every settled removal
    assert sorted(p.name for p in journal.iterdir()) == []
