"""When JetStream cannot be reached, the answer says the intent was NOT recorded.

A throwaway single ``nats-server -js`` (never the shared one) is SIGKILLed under a mesh whose
store refuses writes: the create is answered UNAVAILABLE, ``recorded_for_reissue`` False, and the
text says it will not be re-issued. The negative control is the same create before the kill:
recorded, and the answer promises the re-issue.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rxmesh import Mesh, MeshNode, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import JournalError
from rxmesh.ledger import JetStreamLedger, PendingWrite
from rxmesh.operations import CreateNodeRequest
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore, TemporaryNatsCluster
from tests.helpers import ALICE

pytest.importorskip("nats")



async def test_nats_unreachable_answers_not_recorded() -> None:
    with TemporaryNatsCluster(1) as nats_server:
        ledger = await JetStreamLedger.connect(
            nats_server.urls, bucket="pending", replicas=1, owner="a", timeout=0.5, renew=False
        )
        try:
            store = FaultInjectingStore(InMemoryStore())
            mesh = Mesh(store, ledger=ledger, retry_delays=(0.001,))
            store.refuse_writes_as_unreachable()

            before = await first_value(
                mesh.create_node(
                    CreateNodeRequest(
                        node=MeshNode(path="acme/a", node_type="Doc", content={"x": 1}),
                        access=ALICE,
                    )
                ),
                timeout=5,
            )
            assert before.rejection_reason is RejectionReason.UNAVAILABLE
            assert before.recorded_for_reissue, before  # the negative control: recorded
            assert [i.path for i in ledger.pending()] == ["acme/a"]

            nats_server.kill(0)
            started = time.monotonic()
            after = await first_value(
                mesh.create_node(
                    CreateNodeRequest(
                        node=MeshNode(path="acme/b", node_type="Doc", content={"x": 1}),
                        access=ALICE,
                    )
                ),
                timeout=10,
            )
            assert after.rejection_reason is RejectionReason.UNAVAILABLE
            assert not after.recorded_for_reissue, after
            assert "could NOT be journaled" in (after.error or ""), after.error
            assert "will not be re-issued" in (after.error or "")
            assert time.monotonic() - started < 5  # bounded by the ledger's ack timeout
            assert [i.path for i in ledger.pending()] == ["acme/a"]

            with pytest.raises(JournalError, match="NOT recorded"):
                await ledger.record_durably(
                    PendingWrite(
                        node=MeshNode(path="acme/c", node_type="Doc", content={"x": 1}),
                        requester="alice",
                        request_id="c",
                    )
                )
            mesh.dispose()
        finally:
            async with asyncio.timeout(10):
                await ledger.aclose()


async def test_connect_to_no_server_is_a_journal_error() -> None:
    with TemporaryNatsCluster(1) as nats_server:
        url = nats_server.urls[0]
    with pytest.raises(JournalError, match="cannot open the JetStream"):
        await JetStreamLedger.connect(url, bucket="pending", replicas=1, timeout=0.5)
