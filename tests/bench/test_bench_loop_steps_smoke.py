"""bench/loop_steps.py runs end to end at a tiny size and prints every scenario (not a benchmark:
no step duration is asserted)."""

from __future__ import annotations

import pytest

from tests.helpers import load_bench

pytestmark = pytest.mark.postgres


def test_the_loop_steps_bench_runs_every_scenario_and_answers_every_request(pg_dsn: str) -> None:
    bench = load_bench("loop_steps")
    floor, *rows = bench.measure(pg_dsn, creates=20, bulk=50, retry_delays=(0.01, 0.02))
    assert floor["measure"] == "full_pass_floor" and "scenario" not in floor
    assert floor["tracked_objects"] > 0 and floor["full_pass_ms"] >= 0.0
    assert [row["scenario"] for row in rows] == [
        "healthy",
        "raw_healthy",
        "unavailable",
        "raw_unavailable",
        "asyncio_waiters",
        "bulk_unavailable",
    ]
    expected = [
        {"created": 20},
        {"created": 20},  # the raw callers: one INSERT each
        {"UNAVAILABLE recorded": 20},
        {"ConnectionRefusedError": 20},  # the raw callers: refused through the whole ladder
        {"waited": 20},  # plain tasks: each waited out the ladder
        {"UNAVAILABLE recorded 50": 1},
    ]
    for row, answers in zip(rows, expected, strict=True):
        for name in ("debug", "debug_gc_off", "monitor"):
            assert row[name]["answers"] == answers, (row["scenario"], name, row[name])
            assert isinstance(row[name]["gc_full_passes"], int), row[name]
        assert "steps_over_20ms" in row["debug"] and "worst_step_ms" in row["monitor"]
        assert row["debug_gc_off"]["gc_full_passes"] == 0  # the GC was off: no pass counted
        if row["scenario"] in ("raw_healthy", "raw_unavailable", "asyncio_waiters"):
            assert "meets_target" not in row
            baseline_for = "healthy" if row["scenario"] == "raw_healthy" else "unavailable"
            assert row["baseline_for"] == baseline_for
        else:
            assert isinstance(row["rxmesh_steps_meet_target"], bool)
            shared = row["monitor"]["shared_connect_failures"]
            assert shared == 0 if row["scenario"] == "healthy" else isinstance(shared, int)
