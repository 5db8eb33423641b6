"""bench/instrumentation.py runs end to end on a small N (the ratios are not asserted here)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_bench


def test_the_instrumentation_bench_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    load_bench("instrumentation").main(["--items", "2000", "--creates", "20", "--repeat", "2"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["measure"], r.get("operator")) for r in rows] == [
        ("guard", None),
        ("noop_scope", None),
        ("operators", "retry_transient_connect"),
        ("operators", "reopen_on_transient_fault"),
        ("create", None),
    ]
    assert all(r["bench"] == "instrumentation" for r in rows)
    assert rows[-1]["ratio_on_off"] > 0 and rows[2]["ratio_on_off"] > 0
    from rxmesh import instrumentation

    assert instrumentation.installed() == ()  # the bench leaves nothing installed
