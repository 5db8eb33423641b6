"""bench/live.py runs end to end at a tiny size on PostgreSQL (no timing is asserted), and leaves
none of its schemas behind (its own prefix: another run's bench may load beside it)."""

from __future__ import annotations

import asyncpg
import pytest

from tests.conftest import session_prefix
from tests.helpers import load_bench

pytestmark = pytest.mark.postgres


async def _bench_schemas(dsn: str, prefix: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
        )
        return {row[0] for row in rows}
    finally:
        await conn.close()


async def test_the_live_bench_prints_every_line_at_a_tiny_size(pg_dsn: str) -> None:
    prefix = session_prefix("b")
    lines = await load_bench("live").measure(
        pg_dsn,
        rows=400,
        small=100,
        deltas=4,
        changes=20,
        gap_fraction=0.05,
        repeat=2,
        prefix=prefix,
    )

    assert [line["bench"] for line in lines] == [
        "live_filtered_initial",
        "live_delta_by_view_size",
        "live_resume",
        "live_gap_recovery",
    ]
    initial, delta, resume, gap = lines
    assert initial["matching"] == 40 and initial["ratio"] > 0 and initial["target"] == 1.5
    assert delta["small_ms"] > 0 and delta["big_ms"] > 0 and delta["target"] == 1.2
    assert resume["resumed"] is True and resume["changes"] == 20
    assert 0 < resume["byte_share"] < 1
    assert gap["changed"] == 20 and gap["ratio"] > 0 and gap["target"] == 0.3
    assert all(isinstance(line["met"], bool) for line in lines)
    assert not await _bench_schemas(pg_dsn, prefix)  # its schemas were dropped


async def test_the_schema_check_sees_the_bench_schemas_while_they_exist(pg_dsn: str) -> None:
    # Negative control: the check above looks where the bench loads; an open lab is seen.
    prefix = session_prefix("b")
    async with load_bench("live")._Lab(pg_dsn, 10, 5, prefix):
        assert len(await _bench_schemas(pg_dsn, prefix)) == 2
    assert not await _bench_schemas(pg_dsn, prefix)
