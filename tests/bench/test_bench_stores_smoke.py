"""bench/stores.py runs end to end on a tiny N and prints well-formed figures (not a benchmark)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_bench

pytestmark = pytest.mark.postgres


async def test_the_stores_bench_prints_ratios_against_raw_baselines(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("stores")
    args = ["--dsn", pg_dsn, "--rows", "2000", "--repeat", "1", "--notifies", "50"]
    args += ["--mesh-creates", "10", "--concurrency", "5"]
    results = await bench.main(args)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == results
    write, latency, *pooled = lines
    if pooled and pooled[0]["bench"] == "pgbouncer":  # no binary here (never in CI)
        assert "skipped" in pooled[0]
    else:
        sequential, concurrent, feed = pooled
        for line, mode in ((sequential, "sequential"), (concurrent, "concurrent")):
            assert (line["bench"], line["mode"]) == ("mesh_create", mode)
            assert line["direct_per_s"] > 0
            assert line["pgbouncer_per_s"] > 0
            assert line["ratio_pgbouncer_vs_direct"] > 0
            assert line["not_success"] == {"direct": {}, "pgbouncer": {}}
        assert feed["bench"] == "change_feed_latency_pgbouncer"
        assert feed["p50_ratio_pgbouncer_vs_direct"] > 0
    assert write["bench"] == "write_many"
    assert write["rows"] == 2000
    assert set(write["rows_per_s"]) == {"executemany", "unnest", "copy", "copy_same_table", "store"}
    assert all(rate > 0 for rate in write["rows_per_s"].values())
    assert write["ratio_vs_unnest"] > 0
    assert write["ratio_vs_copy"] > 0
    assert write["ratio_vs_copy_same_table"] > 0
    assert write["target_ratio_vs_copy"] == 0.9
    assert len(write["spread_store_vs_copy"]) == 1  # one per round
    assert latency["bench"] == "change_feed_latency"
    assert latency["notifies"] == 50
    assert latency["raw_listen_ms"]["p50"] > 0
    assert latency["store_changes_ms"]["p50"] > 0
