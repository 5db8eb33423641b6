"""Three replica processes share a JetStream journal; one is SIGKILLed holding intents during a
store outage. While it is dead, the same requester replaces half of its intents through another
replica (new requests for the same paths), and re-sends the other half itself, with their
request ids, through a third replica once the store is back.

Every intent the dead replica recorded gets exactly one verdict from a survivor: the replaced
ones DROPPED (superseded by the request that replaced them, which lands), the re-sent ones
settled by the answer to their re-send on the replica that answered it — never re-issued by a
survivor afterwards. Real processes: a 3-node ``nats-server -js`` cluster on loopback ports (R3
bucket), three ``_replica.py`` processes over PostgreSQL behind a :class:`FaultProxy`.

Fails at 41e90aa: the replaced intents of the dead replica never got a verdict (only a live
owner published one), and the re-sent ones were settled by nobody where they were answered, so
the survivor that claimed them re-issued them.
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from rxmesh.testing import FaultProxy, TemporaryNatsCluster
from tests.ledger.test_jetstream_replicas import (
    COUNT,
    ONE_VERDICT,
    outage,
    rows,
    settled,
    start_replicas,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("nats")

LEASE = 6.0
"""Long enough that the dead replica's lease lapses only after its intents were replaced and
re-sent: what the survivors find then is what those two did not settle."""


@ONE_VERDICT
async def test_a_dead_replicas_replaced_and_resent_intents_get_one_verdict_each(
    pg_dsn: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    prefix = f"rxjv{uuid.uuid4().hex[:8]}_"
    half = COUNT // 2
    with TemporaryNatsCluster(3) as cluster:
        journal = f"js:{','.join(cluster.urls)}:pending"
        async with AsyncExitStack() as stack:
            replicas = await start_replicas(
                stack, proxy.dsn(pg_dsn), prefix, dict.fromkeys("abc", journal), tmp_path, LEASE
            )
            recorded = await outage(replicas, proxy)
            a, b, c = replicas["a"], replicas["b"], replicas["c"]
            a.process.send_signal(signal.SIGKILL)
            await a.process.wait()

            await b.send(f"replace a 0 {half}")  # the store is still away: recorded on b
            line = await b.wait_for("replaced")
            assert set(line["answers"]) == {"UNAVAILABLE"}, line
            replacing = line["replaced"]
            assert len(replacing) == half

            await proxy.restore()
            resend = recorded["a"][half:]
            await c.send(f"resend a {half} {','.join(resend)}")
            line = await c.wait_for("resent")
            assert set(line["answers"]) == {"None"}, line  # created: the store answered
            for survivor in (b, c):
                await survivor.send("evidence")

            everything = {rid for ids in recorded.values() for rid in ids} | set(replacing)
            await settled([b, c], everything)
            found = await rows(pg_dsn, prefix)

        verdicts = Counter(rid for r in (b, c) for rid, _ in r.verdicts())
        assert {rid: n for rid, n in verdicts.items() if n != 1} == {}  # one verdict each
        verdict = {rid: v for r in (b, c) for rid, v in r.verdicts()}
        replaced = set(recorded["a"][:half])
        assert {verdict[rid] for rid in replaced} == {"DROPPED"}
        assert {verdict[rid] for rid in everything - replaced} == {"LANDED"}
        by_c = {rid for rid, _ in c.verdicts()}
        assert set(resend) <= by_c  # settled where the re-send was answered
        taken = {rid for r in (b, c) for rid in r.taken()}
        assert taken.isdisjoint(recorded["a"])  # nothing of a's was re-issued by a survivor
        assert len(found) == 3 * COUNT
        assert set(found.values()) == everything - replaced
