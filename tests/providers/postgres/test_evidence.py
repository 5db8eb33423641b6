"""Issue 32: what counts as evidence that the store answers again, for the pending writes.

- A verified start is evidence: a process that loaded intents from its journal re-issues them
  once its own ``start()`` connected, LISTENed and got a probe through the pool, without waiting
  for another process's commit (still no timer: before the start, nothing is re-issued).
- Evidence counts only when the write path answers: with the pool's route down and the
  listener's up, another process's commit is heard but not acted on until a probe sent through
  the pool arrives; a re-issue is never spent on a route known to be down.

The pool's route is a loopback fault proxy in front of the shared server; the listener connects
straight to it (``listen_dsn``), as behind a pooler.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from rxmesh import CreateNodeRequest, Mesh, RejectionReason, Verdict
from rxmesh.aio import first_value
from rxmesh.health import ChangeFeedCheck
from rxmesh.ledger import PendingWrite, PendingWriteLedger
from rxmesh.model import NodeChange
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy
from tests.helpers import ALICE, Outcomes, until
from tests.providers.postgres.kinds import FAST, QUICK, doc

pytestmark = pytest.mark.postgres

WAIT = 10.0


def journaled(journal: Path, path: str) -> PendingWrite:
    """An intent a previous process recorded in ``journal`` (that ledger is closed since)."""
    intent = PendingWrite(
        node=doc(path), requester="alice", access=ALICE, request_id=f"req-{path.replace('/', '-')}"
    )
    ledger = PendingWriteLedger(journal)
    try:
        assert ledger.record(intent)
    finally:
        ledger.close()
    return intent


async def foreign_commit(pg_dsn: str, store: PostgresStore, path: str) -> None:
    """Another process commits a row of ``path``'s partition (its NOTIFY is announced)."""
    conn = await asyncpg.connect(pg_dsn, timeout=5)
    try:
        await conn.execute(
            f'INSERT INTO "{store.schema_of(path.split("/")[0])}".nodes (path, version) '
            "VALUES ($1, 1)",
            path,
        )
    finally:
        await conn.close()


async def test_a_verified_start_re_issues_the_intents_loaded_from_a_journal(
    pg_dsn: str, prefix: str, tmp_path: Path
) -> None:
    """Fails at 1d389e8 because nothing but a declared gap or another process's commit was
    evidence: a restarted process whose own start() had just verified the feed left its loaded
    intents pending for as long as nobody else committed. The negative control: before the
    store starts, nothing is re-issued (no timer, no poll)."""
    before = tmp_path / "before"
    loaded = journaled(before, "vs/before-start")
    store = PostgresStore(pg_dsn, schema_prefix=prefix, pooled=False, **QUICK)
    first = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(before))
    try:
        assert first.ledger.pending() == (loaded,)
        collected = Outcomes(first.ledger)
        assert collected.got == []  # no evidence yet: nothing re-issued
        assert first.recovery is not None and first.recovery.reissuing == 0

        await store.start()  # connected, LISTENed, a probe through the pool arrived
        outcomes = await collected.wait(1, timeout=WAIT)
        assert [(o.intent.path, o.verdict) for o in outcomes] == [
            ("vs/before-start", Verdict.LANDED)
        ]

        # The usual order: the mesh is made after the store started. Its recovery subscribes
        # then, and the verified start is its evidence too.
        after = tmp_path / "after"
        journaled(after, "vs/after-start")
        second = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(after))
        try:
            outcomes = await Outcomes(second.ledger).wait(1, timeout=WAIT)
            assert [(o.intent.path, o.verdict) for o in outcomes] == [
                ("vs/after-start", Verdict.LANDED)
            ]
        finally:
            second.dispose()
        stored = await store.read_many(["vs/before-start", "vs/after-start"])
        assert sorted(stored) == ["vs/after-start", "vs/before-start"]
    finally:
        first.dispose()
        await store.close()


async def test_no_start_evidence_while_the_pool_does_not_answer(
    pg_dsn: str, prefix: str, tmp_path: Path
) -> None:
    """The verified start is given to a late subscriber only while the pool answers: a mesh
    made while probes cannot be sent through the pool re-issues nothing until one arrives.
    Fails at 1d389e8 because a start was no evidence at all (the intent stays pending even
    after the pool answers again, which was no evidence either)."""
    async with FaultProxy("127.0.0.1", 5432) as proxy:
        store = PostgresStore(
            proxy.dsn(pg_dsn), listen_dsn=pg_dsn, schema_prefix=prefix, pooled=False, **QUICK
        )
        await store.start()
        try:
            proxy.refuse()
            proxy.reset()
            await until(lambda: store.feed_statistics().probes_unsent > 0, within=WAIT)
            journal = tmp_path / "journal"
            journaled(journal, "vs/held")
            mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(journal))
            try:
                collected = Outcomes(mesh.ledger)
                assert mesh.recovery is not None and mesh.recovery.reissuing == 0
                assert [p.node.path for p in mesh.ledger.pending()] == ["vs/held"]
                await proxy.restore()
                outcomes = await collected.wait(1, timeout=WAIT)
                assert [(o.intent.path, o.verdict) for o in outcomes] == [
                    ("vs/held", Verdict.LANDED)
                ]
            finally:
                mesh.dispose()
        finally:
            await store.close()


async def test_an_announced_commit_waits_for_the_pool_to_answer(
    pg_dsn: str, prefix: str, tmp_path: Path
) -> None:
    """Pool through a route that is down, listener straight to the server, which is up: another
    process's commit arrives as an announced commit. Fails at 1d389e8 because that commit was
    acted on at once: the intent was re-issued into the dead pool (and settled DROPPED), a
    write the caller was promised, lost. Now it is held until a probe sent through the pool
    arrives, and then the intent LANDS. The negative control first: with the pool up, the same
    kind of commit re-issues a recorded intent at once."""
    async with FaultProxy("127.0.0.1", 5432) as proxy:
        store = PostgresStore(
            proxy.dsn(pg_dsn), listen_dsn=pg_dsn, schema_prefix=prefix, pooled=False, **QUICK
        )
        await store.start()
        mesh = Mesh(store, retry_delays=FAST, ledger=PendingWriteLedger(tmp_path / "journal"))
        heard: list[NodeChange] = []
        listening = store.changes.subscribe(heard.append)
        try:
            await mesh.create(doc("ev/seed"), access=ALICE)
            collected = Outcomes(mesh.ledger)
            # The negative control: the pool answers, an announced commit is evidence.
            assert mesh.ledger.record(
                PendingWrite(node=doc("ev/up"), requester="alice", access=ALICE, request_id="up")
            )
            await foreign_commit(pg_dsn, store, "ev/foreign-1")
            outcomes = await collected.wait(1, timeout=WAIT)
            assert [(o.intent.path, o.verdict) for o in outcomes] == [("ev/up", Verdict.LANDED)]

            collected = Outcomes(mesh.ledger)
            proxy.refuse()
            proxy.reset()  # the pool's route is down; the listener's is not
            answer = await first_value(
                mesh.create_node(CreateNodeRequest(node=doc("ev/lost"), access=ALICE)),
                timeout=WAIT,
            )
            assert answer.rejection_reason is RejectionReason.UNAVAILABLE, answer
            assert answer.recorded_for_reissue
            await foreign_commit(pg_dsn, store, "ev/foreign-2")
            await until(lambda: any(c.path == "ev/foreign-2" for c in heard), within=WAIT)
            # Heard and announced, but the pool does not answer: nothing re-issued.
            assert mesh.recovery is not None and mesh.recovery.reissuing == 0
            assert [p.node.path for p in mesh.ledger.pending()] == ["ev/lost"]
            assert collected.got == []
            # Nor do the mesh's kept partition facts trust the feed while a commit is held back
            # from them (it might have revoked a grant).
            assert not store.feed_is_whole
            # And health says why the pending writes wait although commits arrive.
            assert store.feed_statistics().evidence_held_since is not None
            held = ChangeFeedCheck(store)()
            assert "evidence that the store answers held back" in held.description, held

            await proxy.restore()
            outcomes = await collected.wait(1, timeout=WAIT)
            assert [(o.intent.path, o.verdict) for o in outcomes] == [("ev/lost", Verdict.LANDED)]
            assert store.feed_is_whole
            assert store.feed_statistics().evidence_held_since is None
            assert "held back" not in ChangeFeedCheck(store)().description
        finally:
            listening.dispose()
            mesh.dispose()
            await store.close()
