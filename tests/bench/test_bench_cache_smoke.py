"""bench/cache.py runs end to end on a small fan-out (the ratio itself is not asserted here)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_bench


def test_the_cache_bench_opens_one_upstream_for_every_subscriber() -> None:
    row = load_bench("cache").measure(subscribers=200, repeats=3)

    assert row["subscribers"] == 200
    assert row["upstream_subscriptions"] == 1
    assert row["cache_delta_ms"] > 0
    assert row["subject_delta_ms"] > 0
    assert row["ratio"] > 0
    assert row["target_ratio"] == 1.5


def test_the_cache_bench_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    load_bench("cache").main(["cache.py", "100", "1"])

    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["bench"] == "cache"


@pytest.mark.postgres
async def test_the_live_query_bench_runs_end_to_end_at_a_tiny_size(pg_dsn: str) -> None:
    """Every live-query line at 300 rows with one and two writers (no timing is asserted)."""
    lines = await load_bench("cache").measure_live(
        pg_dsn, rows=(300,), writers=(1, 2), seconds=0.3, repeat=2
    )

    assert [line["bench"] for line in lines] == [
        "live_initial",
        "live_delta_latency",
        "live_delta_latency",
        "live_gap",
    ]
    initial, one, two, gap = lines
    assert initial["rows"] == 301 and initial["raw_fetch_ms"] > 0
    for line in (one, two):
        assert line["written"] > 0
        assert line["store_delivered"] == line["mesh_delivered"] == 1.0
        assert line["mesh_frames"] <= line["written"]
    # two subscriptions, one shared recovery read; two rounds timed, two in debug mode
    assert gap["recovery_reads_per_gap"] == [1, 1, 1, 1]
    assert gap["mesh_ratio"] > 0 and gap["mesh_ratio_in_debug_mode"] > 0
    assert "worst_step_ms" in gap and gap["stall_limit_ms"] == 20.0
