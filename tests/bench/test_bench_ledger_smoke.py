"""bench/ledger.py runs end to end on a tiny N (the ratios themselves are not asserted here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import load_bench


def test_the_record_measure_compares_the_ledger_with_the_raw_loop(tmp_path: Path) -> None:
    row = load_bench("ledger").measure_records(20, 1, str(tmp_path))

    assert row["measure"] == "record"
    assert row["intents"] == 20
    assert row["raw_per_s"] > 0
    assert row["ledger_per_s"] > 0
    assert row["ratio"] > 0
    assert row["target_ratio"] == 0.8
    assert list(tmp_path.iterdir()) == []  # the bench cleans up its journals


def test_the_group_commit_measure_compares_sync_records_with_awaited_ones(
    tmp_path: Path,
) -> None:
    row = load_bench("ledger").measure_group_commit(30, 10, 2, str(tmp_path))

    assert row["measure"] == "group_commit"
    assert (row["intents"], row["in_flight"]) == (30, 10)
    assert row["sync_record_per_s"] > 0
    assert row["record_durably_per_s"] > 0
    assert row["fsync_groups_median"] >= 1
    assert (row["target_per_s"], row["target_ratio"]) == (5_000, 5.0)
    assert list(tmp_path.iterdir()) == []


def test_the_loop_steps_measure_reports_each_scenario_and_the_control(tmp_path: Path) -> None:
    row = load_bench("ledger").measure_loop_steps(20, 50, 5, str(tmp_path))

    assert row["measure"] == "loop_steps"
    assert [s["scenario"] for s in row["scenarios"]] == [
        "20 concurrent record_durably",
        "one record_many_durably of 50",
        "CONTROL: 5 sync record() in one step",
    ]
    for scenario in row["scenarios"]:
        assert scenario["debug"]["steps_over_20ms"] >= 0
        assert scenario["monitor"]["worst_step_ms"] >= 0
    assert list(tmp_path.iterdir()) == []


def test_the_recovery_measure_settles_every_intent_or_says_why_it_was_skipped() -> None:
    row = load_bench("ledger").measure_recovery(30)

    assert row["measure"] == "recovery"
    if row.get("skipped"):
        assert "not importable" in row["note"]
        return
    assert row["direct_created"] == 30
    assert row["recovery_landed"] == 30
    assert row["ratio"] > 0


@pytest.mark.parametrize("verb", ["update", "delete", "move"])
def test_the_verb_recovery_measure_lands_every_intent(verb: str) -> None:
    row = load_bench("ledger").measure_verb_recovery(verb, 20)

    assert row["measure"] == f"recovery_{verb}"
    assert row["direct_applied"] == 20
    assert row["recovery_landed"] == 20
    assert row["ratio"] > 0


def test_the_ledger_bench_prints_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load_bench("ledger").main(
        [
            "ledger.py",
            "--records",
            "10",
            "--pending",
            "10",
            "--repeats",
            "1",
            "--in-flight",
            "5",
            "--bulk",
            "20",
            "--control",
            "3",
            "--dir",
            str(tmp_path),
            "--verb-pending",
            "10",
        ]
    )

    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["measure"] for line in lines] == [
        "record",
        "group_commit",
        "loop_steps",
        "recovery",
        "recovery_update",
        "recovery_delete",
        "recovery_move",
    ]
    assert all(json.loads(line)["bench"] == "ledger" for line in lines)


def test_without_a_mesh_the_recovery_line_is_skipped_with_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = load_bench("ledger")
    monkeypatch.setattr(bench, "_real_mesh", lambda: (None, "rxmesh.mesh not importable: test"))

    row = bench.measure_recovery(10)

    assert row == {
        "bench": "ledger",
        "measure": "recovery",
        "intents": 10,
        "skipped": True,
        "note": "rxmesh.mesh not importable: test",
    }
