"""The PostgreSQL change feed reports its probe round trips and its declared gaps (a real
server: the listener is terminated with ``pg_terminate_backend``)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from rxmesh import instrumentation as ins
from rxmesh.model import ChangeFeedGap
from tests.instrumentation.conftest import Recorder
from tests.providers.conftest import Recorder as StreamRecorder
from tests.providers.postgres.kinds import started

pytestmark = pytest.mark.postgres


async def test_probes_and_a_gap_are_reported_as_the_store_counts_them(
    pg_dsn: str, prefix: str, recorder: Recorder
) -> None:
    async with started(pg_dsn, prefix, reconnect_backoff=(0.2,)) as store:
        probes = recorder.of(ins.ProbeRoundTrip)
        assert probes and all(p.store == store.name for p in probes)  # type: ignore[attr-defined]
        assert recorder.of(ins.ChangeFeedGapDeclared) == []  # the first LISTEN declares none
        gaps: StreamRecorder[ChangeFeedGap] = StreamRecorder(store.gaps)
        try:
            pid = store.feed_backend_pid
            assert pid is not None
            conn = await asyncpg.connect(pg_dsn)
            try:
                assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid) is True
            finally:
                await conn.close()
            async with asyncio.timeout(10):
                gap = await gaps.next()
        finally:
            gaps.dispose()
        stats = store.feed_statistics()
        (declared,) = recorder.of(ins.ChangeFeedGapDeclared)
        assert declared.store == store.name and declared.reason == gap.reason  # type: ignore[attr-defined]
        assert stats.gaps_declared == 1
        assert len(recorder.of(ins.ProbeRoundTrip)) == stats.probes_verified
        assert recorder.of(ins.ProbeRoundTrip)[-1].seconds == stats.probe_round_trip  # type: ignore[attr-defined]
