"""Issue 32: a live query whose change feed stays lost reaches its subscribers (never silently
stale).

The listener's route is a loopback fault proxy (``listen_dsn`` through it, as a DSN naming an
old primary's fixed address after a failover); the pool goes straight to the shared server, so
writes land and reads answer while the feed cannot come back.
"""

from __future__ import annotations

import asyncio

import pytest

from rxmesh.exceptions import StoreError
from rxmesh.faults import is_standing_watch_transient, is_store_unreachable
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.operators import reopen_on_transient_fault
from rxmesh.providers.postgres import PostgresStore
from rxmesh.testing import FaultProxy
from tests.providers.conftest import Recorder

pytestmark = pytest.mark.postgres

WAIT = 10.0
BOUND = 2.0
"""Long past a re-connect on loopback (the negative control's loss lasts well under it)."""
QUICK = {
    "connect_timeout": 1.0,
    "command_timeout": 2.0,
    "heartbeat_interval": 0.1,
    "heartbeat_timeout": 1.0,
    "reconnect_backoff": (0.05, 0.1),
}


def doc(path: str) -> MeshNode:
    return MeshNode(path=path, node_type="Doc", content={"p": path})


async def _frame_with(frames: Recorder[QueryFrame], path: str) -> QueryFrame:
    return await frames.next_matching(lambda f: path in [n.path for n in f.nodes], timeout=WAIT)


@pytest.mark.parametrize(
    "query",
    [NodeQuery(partition="lq"), NodeQuery(partition="lq", limit=10)],
    ids=["query", "window"],
)
async def test_a_live_query_ends_with_a_transient_error_once_its_feed_stays_lost(
    pg_dsn: str, prefix: str, query: NodeQuery
) -> None:
    """Fails at 1d389e8 because the live query neither ended nor said anything: its subscriber
    kept a view missing every later commit, for as long as the feed stayed lost. Now, past
    ``feed_loss_bound``, it ends with a transient StoreError (the one rule: unreachable, and a
    standing watch re-opens on it), and the re-opened query's Initial is a fresh read. The
    negative control first: a loss the listener recovers from within the bound ends nothing;
    the query gets its gap's re-read instead."""
    async with FaultProxy("127.0.0.1", 5432) as listen_route:
        store = PostgresStore(
            pg_dsn,
            listen_dsn=listen_route.dsn(pg_dsn),
            schema_prefix=prefix,
            pooled=False,
            feed_loss_bound=BOUND,
            **QUICK,
        )
        await store.start()
        try:
            await asyncio.wait_for(store.write(doc("lq/seed")), WAIT)
            frames: Recorder[QueryFrame] = Recorder(store.query(query))
            initial = await frames.next()
            assert initial.kind is FrameKind.INITIAL
            assert [n.path for n in initial.nodes] == ["lq/seed"]

            listen_route.reset()  # a blip: the listener re-connects at once
            await asyncio.wait_for(store.write(doc("lq/blip")), WAIT)
            await _frame_with(frames, "lq/blip")  # from the feed or the gap's re-read
            async with asyncio.timeout(WAIT):
                while store.feed_statistics().gaps_declared < 1:  # noqa: ASYNC110 - bounded
                    await asyncio.sleep(0.01)
            assert frames.pending() == 0  # no error: the loss was shorter than the bound

            listen_route.refuse()
            listen_route.reset()  # the listener's route is gone for good
            await asyncio.wait_for(store.write(doc("lq/unseen")), WAIT)
            with pytest.raises(StoreError) as ended:
                await frames.next_matching(lambda _: False, timeout=BOUND + WAIT)
            error = ended.value
            assert "no longer maintained" in str(error)
            assert "feed_loss_bound" in str(error)
            assert is_standing_watch_transient(error)
            assert is_store_unreachable(error)

            # A standing watch re-opens: the fresh read has what the feed never delivered. (The
            # loss lasts on, so that query too ends after its Initial, and is re-opened again.)
            reopened: Recorder[QueryFrame] = Recorder(
                reopen_on_transient_fault(lambda: store.query(query), backoff=(0.05,))
            )
            try:
                fresh = await reopened.next()
                assert fresh.kind is FrameKind.INITIAL
                assert [n.path for n in fresh.nodes] == ["lq/blip", "lq/seed", "lq/unseen"]
                again = await reopened.next()  # the next opening's Initial: not silently stale
                assert again.kind is FrameKind.INITIAL
            finally:
                reopened.dispose()
        finally:
            await store.close()


def test_the_bound_must_be_a_positive_number() -> None:
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="feed_loss_bound"):
            PostgresStore("postgresql://u@127.0.0.1:5432/d", feed_loss_bound=bad)
