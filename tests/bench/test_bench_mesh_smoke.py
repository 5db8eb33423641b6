"""bench/mesh.py runs end to end on a tiny N and prints well-formed figures (not a benchmark)."""

from __future__ import annotations

import argparse
import json

import pytest

from tests.helpers import load_bench

pytestmark = pytest.mark.postgres


async def test_the_mesh_bench_prints_every_figure_against_its_baseline(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("mesh")
    args = argparse.Namespace(
        dsn=pg_dsn, creates=20, memory=50, reads=20, concurrency=4, repeat=1
    )
    await bench.run(args)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    measures = [(line["measure"], line.get("mode")) for line in lines]
    assert measures == [
        ("pg_create", "sequential"),
        ("pg_create", "concurrent"),
        ("memory_create", None),
        ("unavailable", None),
        ("read_ladder", None),
    ]
    sequential, concurrent, memory, unavailable, ladder = lines
    for line in (sequential, concurrent):
        assert line["mesh_per_s"] > 0 and line["raw_insert_per_s"] > 0
        assert line["ratio"] == pytest.approx(line["mesh_per_s"] / line["raw_insert_per_s"], 0.01)
        assert line["not_success"] == {}
    assert sequential["write_groups"] == 0  # one at a time: every create went alone
    assert "write_groups" in concurrent  # how many formed at 4 in flight depends on timing
    assert memory["us_per_create"]["create"] > 0
    assert unavailable["reasons"] == ["UNAVAILABLE"]
    assert set(ladder["ratio_vs_raw"]) >= {"rxmesh", "rxmesh_observable"}
