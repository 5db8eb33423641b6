"""Issue 14: the change feed verified end to end, not just its socket.

The old heartbeat ran ``SELECT 1`` on the LISTEN connection: it proved the socket, never delivery.
Now every heartbeat sends a probe NOTIFY through the POOL, and it must arrive on the listener
within ``heartbeat_timeout``; ``start()`` does the same once before it returns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from urllib.parse import urlparse

import asyncpg
import pytest

from rxmesh.health import ChangeFeedCheck, HealthStatus
from rxmesh.model import ChangeFeedGap, FrameKind, MeshNode, NodeQuery, QueryFrame, StoreEvidence
from rxmesh.providers.postgres import ChangeFeedState, PostgresStore
from rxmesh.testing import FaultProxy
from tests.helpers import LogRecords
from tests.providers.conftest import Recorder
from tests.providers.postgres.kinds import started
from tests.providers.postgres.test_change_feed import _insert_raw
from tests.providers.postgres.test_feed_faults import _notify

pytestmark = pytest.mark.postgres

WAIT = 5.0
QUICK = {"heartbeat_interval": 0.05, "heartbeat_timeout": 0.3, "reconnect_backoff": (0.05,)}


async def _until(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait for a feed's own pace (bounded); never a bare fixed sleep."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - the heartbeat's pace, bounded above
            await asyncio.sleep(0.01)


async def test_start_verifies_delivery_and_health_reports_when_and_the_round_trip(
    pg_dsn: str, prefix: str
) -> None:
    store = PostgresStore(pg_dsn, schema_prefix=prefix)
    async with store:
        stats = store.feed_statistics()
        # start() returned only after one probe went pool -> server -> listener.
        assert (stats.probes_sent, stats.probes_verified) == (1, 1)
        assert stats.verified_at is not None
        assert stats.probe_round_trip is not None
        assert 0 < stats.probe_round_trip < store._feed._heartbeat_timeout
        assert stats.stale_after == pytest.approx(2 * 1.0 + 2.0)
        assert (stats.notifications, stats.malformed_notifications) == (0, 0)
        health = ChangeFeedCheck(store)()
        assert health.status is HealthStatus.HEALTHY
        assert health.description.startswith("change feed verified ")
        assert health.description.endswith(" ms")
        assert " s ago, probe round trip " in health.description
        assert health.data["probeRoundTripMs"] > 0
        assert store.statistics().feed == store.feed_statistics()


async def test_a_listener_deaf_to_notifications_is_lost_reconnected_verified_then_a_gap(
    pg_dsn: str, prefix: str, log_records: LogRecords
) -> None:
    """FAILS against the old code: its heartbeat's SELECT 1 kept succeeding on the deaf
    connection, so nothing was noticed, no gap was declared, and a commit made meanwhile never
    reached the live query. Now the first probe that does not arrive is a lost feed: the store
    re-connects, re-LISTENs, verifies with a probe, and only then declares the gap; the live
    query re-reads and gets the missed row."""
    async with started(pg_dsn, prefix, **QUICK) as store:
        await asyncio.wait_for(store.write(MeshNode(path="p/seed", version=1)), WAIT)
        frames: Recorder[QueryFrame] = Recorder(store.query(NodeQuery(partition="p")))
        gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
        try:
            assert (await frames.next()).kind is FrameKind.INITIAL
            deaf = store._feed._listener.conn
            assert deaf is not None
            first_pid = store.feed_backend_pid
            async with store._feed._listener.lock:  # the socket stays fine; delivery stops
                await deaf.execute(f"UNLISTEN {prefix}changes")
            await _insert_raw(pg_dsn, store.schema_of("p"), "p/missed")

            gap = await gaps.next()
            assert "did not arrive on the listener" in gap.reason
            assert store.feed_backend_pid not in (None, first_pid)  # a fresh LISTEN connection
            delta = await frames.next_matching(lambda f: "p/missed" in [n.path for n in f.nodes])
            assert delta.kind is FrameKind.DELTA
            stats = store.feed_statistics()
            assert stats.probes_missed >= 1
            assert stats.state is ChangeFeedState.LISTENING
            assert stats.last_probe_failure is not None
            assert "did not arrive" in stats.last_probe_failure
            errors = [str(r["message"]) for r in log_records.at("ERROR")]
            assert any("change feed lost: a probe NOTIFY" in line for line in errors), errors
            assert gaps.pending() == 0  # one loss, one gap
        finally:
            frames.dispose()
            gaps.dispose()


async def test_probes_are_neither_notifications_nor_evidence_nor_malformed(
    pg_dsn: str, prefix: str
) -> None:
    """Two instances on one channel hear each other's probes: each counts them as foreign, never
    as a notification, a malformed payload or a commit announced (no pending write may be
    re-issued on a probe). A payload that only LOOKS like a probe is malformed, honestly."""
    async with (
        started(pg_dsn, prefix, **QUICK) as first,
        started(pg_dsn, prefix, **QUICK) as second,
    ):
        evidence: Recorder[StoreEvidence] = Recorder(first.answers_again)
        try:
            started_evidence = await evidence.next()  # the verified start, given at once
            assert isinstance(started_evidence, ChangeFeedGap)
            assert started_evidence.reason.startswith("the store started")
            await _until(
                lambda: (
                    first.feed_statistics().foreign_probes >= 3
                    and second.feed_statistics().foreign_probes >= 3
                )
            )
            forged_token = json.dumps([prefix, "probe", "0123456789abcdef.1"])
            not_a_probe = json.dumps([prefix, "probe", 42])
            await _notify(pg_dsn, f"{prefix}changes", [forged_token, not_a_probe])
            # Each instance's listener hears the payload at its own pace: wait for both.
            await _until(
                lambda: (
                    first.feed_statistics().malformed_notifications == 1
                    and second.feed_statistics().malformed_notifications == 1
                )
            )
            stats = first.feed_statistics()
            assert stats.notifications == 1  # the one that only looked like a probe
            assert stats.foreign_probes >= 4
            assert "does not name a valid partition" in (stats.last_malformed_reason or "")
            assert evidence.pending() == 0  # no probe was ever announced as a commit
            assert stats.losses == 0
        finally:
            evidence.dispose()


async def test_probes_the_pool_cannot_send_keep_a_listener_that_answers_and_show_unverified(
    pg_dsn: str, prefix: str, log_records: LogRecords
) -> None:
    """The pool's path is cut (refused and reset) while the listener's direct connection is
    fine: a probe that cannot be sent proves nothing, so the listener is checked on its own
    (SELECT 1) and kept -- no loss, no gap -- and health goes DEGRADED "not verified" once the
    last verification is older than stale_after. Back again, the next probe verifies."""
    target = urlparse(pg_dsn)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        options = {**QUICK, "connect_timeout": 0.3}
        async with started(proxy.dsn(pg_dsn), prefix, listen_dsn=pg_dsn, **options) as store:
            check = ChangeFeedCheck(store)
            gaps: Recorder[ChangeFeedGap] = Recorder(store.gaps)
            try:
                assert check().status is HealthStatus.HEALTHY
                proxy.refuse()
                proxy.reset()
                await _until(lambda: check().status is HealthStatus.DEGRADED)
                health = check()
                assert health.description.startswith("change feed not verified for ")
                assert "the probe could not be sent" in health.description
                stats = store.feed_statistics()
                assert stats.probes_unsent >= 1
                assert (stats.state, stats.losses, stats.probes_missed) == (
                    ChangeFeedState.LISTENING,
                    0,
                    0,
                )
                warnings = [str(r["message"]) for r in log_records.at("WARNING")]
                assert sum("change feed not verified" in line for line in warnings) == 1
                await proxy.restore()
                await _until(lambda: check().status is HealthStatus.HEALTHY)
                assert gaps.pending() == 0  # nothing was lost: the listener heard everything
            finally:
                gaps.dispose()


async def test_a_heartbeat_costs_one_probe(pg_dsn: str, prefix: str) -> None:
    """Cheap: one probe per heartbeat_interval (plus the one at start)."""
    async with started(pg_dsn, prefix, heartbeat_interval=0.1, heartbeat_timeout=1.0) as store:
        base = store.feed_statistics().probes_sent
        await _until(lambda: store.feed_statistics().probes_verified >= base + 3)
        stats = store.feed_statistics()
        assert stats.probes_sent - stats.probes_verified <= 1  # at most one in flight
        conn = await asyncpg.connect(pg_dsn, timeout=WAIT)
        try:  # the probes touched no table: nothing was written by them
            tables = await conn.fetchval(
                "SELECT count(*) FROM pg_tables WHERE starts_with(schemaname, $1)", prefix
            )
        finally:
            await conn.close()
        assert tables == 0
