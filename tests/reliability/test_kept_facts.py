"""Kept partition facts on real PostgreSQL: the create's first call is then the INSERT itself.

With a partition's complete facts kept (the change feed watching them), a create reads nothing
and its one store call is the INSERT. A connection lost after that INSERT left (its reply
dropped by a real TCP proxy) is answered UNAVAILABLE with the may-have-landed text and
``outcome_unknown=True`` — never "Nothing was written", which would be false — recorded, and
re-issued once on evidence: one row, one verdict. The fault matrix puts each fault before the
create's first read, so it runs with the cache off; this file is the cell the cache adds.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlparse

from rxmesh import Mesh, MeshNode
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.model import NodeQuery
from rxmesh.operations import CreateNodeRequest, RejectionReason, Verdict
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy
from tests.conftest import session_prefix
from tests.helpers import ALICE

OPTIONS = {
    "min_size": 1,
    "max_size": 4,
    "connect_timeout": 0.5,
    "command_timeout": 1.0,
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 0.5,
    "reconnect_backoff": (0.05, 0.1, 0.2),
}


def doc(path: str, **content: object) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content={"v": 1, **content})


async def test_a_reply_lost_after_the_insert_is_answered_may_have_landed_then_settles_once(
    private_db: str,
) -> None:
    target = urlparse(private_db)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        store = PostgresStore(proxy.dsn(private_db), schema_prefix=session_prefix("k"), **OPTIONS)
        await store.start()
        # No retries: with them the ladder re-sends the INSERT, which finds this request's own
        # row and is answered created (tests/integration covers that ambiguous commit).
        mesh = Mesh(store, retry_delays=(), ledger=PendingWriteLedger(None))
        outcomes: list[PendingWriteOutcome] = []
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_outcome(outcome: PendingWriteOutcome) -> None:
            outcomes.append(outcome)
            if not settled.done():
                settled.set_result(None)

        subscription = mesh.ledger.outcomes.subscribe(on_outcome)
        try:
            for path in ("p/a", "p/b"):
                response = await first_value(
                    mesh.create_node(CreateNodeRequest(node=doc(path), access=ALICE)), timeout=10
                )
                assert response.success, response
            assert mesh._facts.get("p", "alice") is not None  # the facts are kept now

            marker = f"KEPT-FACTS-{uuid.uuid4().hex[:8]}"  # in the INSERT's parameters only
            proxy.reset_after_client_sends(marker.encode())
            lost = await first_value(
                mesh.create_node(CreateNodeRequest(node=doc("p/c", m=marker), access=ALICE)),
                timeout=10,
            )
            assert lost.rejection_reason is RejectionReason.UNAVAILABLE, lost
            assert lost.outcome_unknown, lost
            assert "Nothing was written" not in (lost.error or "")
            assert "may already be durable" in (lost.error or "")
            assert lost.recorded_for_reissue, lost

            # Evidence: another create commits (an announced commit); the intent is re-issued.
            await first_value(
                mesh.create_node(CreateNodeRequest(node=doc("p/d"), access=ALICE)), timeout=10
            )
            await asyncio.wait_for(settled, timeout=15)
            assert [o.verdict for o in outcomes] == [Verdict.LANDED], outcomes
            frame = await first_value(store.query(NodeQuery(path_prefix="p/c")), timeout=10)
            assert [n.path for n in frame.nodes] == ["p/c"]
            assert mesh.ledger.statistics().pending == 0
        finally:
            subscription.dispose()
            mesh.dispose()
            await store.close()
