"""bench/operators.py runs end to end on a small N (the ratio itself is not asserted here)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_bench


def test_the_operators_bench_measures_every_operator_on_a_small_n() -> None:
    rows = load_bench("operators").measure(n=10_000, repeats=1)

    assert [row["operator"] for row in rows] == [
        "passthrough",
        "reactivex_retry",
        "retry_transient_connect",
        "reopen_on_transient_fault",
    ]
    for row in rows:
        assert row["items"] == 10_000
        assert row["baseline_items_per_s"] > 0
        assert row["operator_items_per_s"] > 0
        assert row["ratio"] > 0
        assert row["target_ratio"] == 1.10
        reference = row["operator"] in ("passthrough", "reactivex_retry")
        assert (row["meets_target"] is None) == reference


def test_the_operators_bench_prints_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    load_bench("operators").main(["operators.py", "2000", "1"])

    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert all(json.loads(line)["bench"] == "operators" for line in lines)
