"""The outage drill: passes on the embedded store and on PostgreSQL, and FAILS when sabotaged."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rxmesh import cli
from rxmesh.drill import SABOTAGES, DrillResult, run_drill
from tests.helpers import ROOT


def _failed(result: DrillResult) -> set[str]:
    return {inv.name for inv in result.invariants if not inv.ok}


async def test_the_drill_passes_on_the_embedded_store_and_tells_the_story() -> None:
    out = io.StringIO()
    result = await run_drill(out=out)
    text = out.getvalue()
    assert result.ok, _failed(result)
    assert result.exit_status == 0
    assert len(result.invariants) >= 10
    kinds = [event.kind for event in result.events]
    assert kinds.index("OUTAGE") < kinds.index("RESTORE") < kinds.index("verdict")
    for phrase in (
        "-> UNAVAILABLE; journaled",
        "interrupted the census subscription — re-opening (1/5) in 0.1s",
        "DEGRADED",
        "PENDING WRITES: 3 write(s) answered UNAVAILABLE",
        "change-feed gap declared",
        "-> LANDED",
        "library default 250, 500, 1000 ms",
        "library default 2, 5, 15, 30, 60 s",
        "DRILL PASSED",
    ):
        assert phrase in text, phrase
    # the health goes DEGRADED with the reason during the outage, and HEALTHY again at the end
    health = [e for e in result.events if e.kind == "health" and "status" in e.data]
    assert [e.data["status"] for e in health] == ["Healthy", "Degraded", "Healthy"]
    assert "live-record-census" in health[1].data["reasons"]


async def test_without_evidence_nothing_is_re_issued_while_the_store_stays_away() -> None:
    result = await run_drill(hold=0.5)
    hold = next(
        inv for inv in result.invariants if inv.name == "nothing re-issued without evidence"
    )
    assert hold.ok and hold.detail.startswith("3 pending")


@pytest.mark.parametrize("sabotage", SABOTAGES)
async def test_a_broken_invariant_makes_the_drill_fail(sabotage: str) -> None:
    out = io.StringIO()
    result = await run_drill(sabotage=sabotage, out=out)  # type: ignore[arg-type]
    assert not result.ok
    assert result.exit_status == 1
    expected = {
        "duplicate": {"no duplicate rows (one row per item)"},
        "lost-intent": {
            "every UNAVAILABLE create was journaled",
            "every request accounted for (a row with its own request id, or a verdict)",
        },
    }[sabotage]
    assert _failed(result) == expected
    assert "DRILL FAILED" in out.getvalue()


async def test_an_unknown_sabotage_is_refused() -> None:
    with pytest.raises(ValueError, match="sabotage"):
        await run_drill(sabotage="typo")  # type: ignore[arg-type]


async def test_a_given_journal_dir_is_used_and_left_empty(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result = await run_drill(journal_dir=journal)
    assert result.ok, _failed(result)
    assert journal.is_dir()
    assert list(journal.iterdir()) == []
    event = next(e for e in result.events if e.kind == "journal")
    assert event.data["files"] == 3


def test_the_cli_runs_the_drill_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drill"]) == 0
    assert "DRILL PASSED" in capsys.readouterr().out


def test_the_cli_exit_status_is_1_when_sabotaged(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drill", "--sabotage", "lost-intent"]) == 1
    assert "DRILL FAILED" in capsys.readouterr().out


def test_json_output_is_one_parsable_event_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drill", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines]
    assert all({"t", "event", "text"} <= set(e) for e in events)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    invariants = [e for e in events if e["event"] == "invariant"]
    assert invariants and all(e["ok"] for e in invariants)
    assert events[-1] == {**events[-1], "event": "result", "ok": True, "failed": []}
    assert sum(e["event"] == "verdict" and e["verdict"] == "LANDED" for e in events) == 3


def test_python_dash_m_rxmesh_drill_exits_0() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "rxmesh", "drill"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DRILL PASSED" in done.stdout
    assert done.stderr == ""  # rxmesh's log stays off without --show-log


@pytest.mark.postgres
async def test_the_drill_passes_against_postgres_through_its_own_proxy(pg_dsn: str) -> None:
    import asyncpg

    result = await asyncio.wait_for(run_drill(dsn=pg_dsn), 60)
    assert result.ok, [(i.name, i.detail) for i in result.invariants if not i.ok]
    setup = result.events[0]
    assert "via drill proxy" in setup.data["store"]
    gap = next(e for e in result.events if e.kind == "evidence")
    assert "listener" in gap.text  # the store's own listener declared the gap
    conn = await asyncpg.connect(pg_dsn)
    try:
        left = await conn.fetchval(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1", setup.data["schema"]
        )
    finally:
        await conn.close()
    assert left == 0  # the drill dropped its schema


@pytest.mark.postgres
async def test_the_postgres_drill_fails_when_an_intent_is_lost(pg_dsn: str) -> None:
    result = await asyncio.wait_for(run_drill(dsn=pg_dsn, sabotage="lost-intent"), 60)
    assert result.exit_status == 1
    assert "every UNAVAILABLE create was journaled" in _failed(result)


def test_a_server_that_cannot_be_reached_at_the_start_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("asyncpg")
    assert cli.main(["drill", "--dsn", "postgresql://postgres@127.0.0.1:1/none"]) == 2
    assert "could not be reached before the drill began" in capsys.readouterr().err
