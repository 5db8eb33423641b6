"""bench/importer.py runs end to end on a tiny N and prints well-formed figures (no timing)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_bench

pytestmark = pytest.mark.postgres


def test_the_importer_bench_compares_rxmesh_import_with_a_raw_copy(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("importer")
    results = bench.main(["--dsn", pg_dsn, "--rows", "300", "--repeat", "1", "--window", "100"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == results
    speed, memory = lines
    assert speed["bench"] == "importer"
    assert speed["rows"] == 300
    assert set(speed["nodes_per_s"]) == {"import", "copy"}
    assert all(rate > 0 for rate in speed["nodes_per_s"].values())
    assert all(seconds > 0 for seconds in speed["cpu_s"].values())
    assert all(mb > 0 for mb in speed["peak_rss_mb"].values())
    assert speed["ratio_vs_copy"] > 0
    assert speed["target_import_nodes_per_s"] == 40_000
    assert memory["bench"] == "importer_memory"
    assert memory["rows"] == {"small": 30, "big": 300}
    assert memory["import_peak_rss_mb"]["small"] > 0
